//! Confinement of the DSP shell: the libraries it runs are untrusted code, and qemu-hexagon
//! serves their `trap0` system calls (open, write, unlink, clone, socket, ...) on the host as its
//! own. The executor therefore starts every shell confined, everything prepared in the bench
//! before the fork and applied in the child right before it starts qemu (where only
//! async-signal-safe system calls run, and nothing is allocated), in this order:
//!
//! 1. **namespaces** ([`enter_namespaces`]): new user, network and IPC namespaces where the host
//!    allows them, else network and IPC, else none (see [`NAMESPACE_TRIES`] for the fallback);
//! 2. **no capability** ([`drop_capabilities`]): the bounding set emptied, the ambient,
//!    inheritable, permitted and effective sets cleared and the secure bits locked, so that
//!    qemu-hexagon runs with none even when the bench runs as root (CI does);
//! 3. **Landlock** ([`Ruleset`], [`allow_own_proc`], [`apply`]), with `no_new_privs`;
//! 4. **the system-call filter** ([`Filter`]), an allow-list, and then the one `execve` of
//!    qemu-hexagon it lets through ([`ShellExec`]).
//!
//! All of it stays in force across `exec` and for every thread of the shell, and none of it can
//! be lifted from inside. The shell's `/proc/self/status` shows it (a test reads it from a
//! library): every capability set `0000000000000000`, `NoNewPrivs: 1`, `Seccomp: 2`.
//!
//! # Landlock: files, TCP, signals
//!
//! * file system: read (and execute) only what qemu-hexagon needs to start and run the shell:
//!   the qemu binary, the system's library directories, the loader cache, the shell executable,
//!   and of `/proc` only the shell's own entries (`/proc/<its pid>`, added in the child),
//!   `/proc/sys/vm/mmap_min_addr` and `/proc/stat`: other processes' environments, command
//!   lines and maps are out of reach. No write, create, remove, rename or truncate anywhere:
//!   the shell's pipes are open before the domain starts and stay usable;
//! * network (ABI 4 and later): no TCP bind or connect;
//! * scopes (ABI 6 and later): no signal to, and no abstract UNIX socket of, a process outside
//!   the domain.
//!
//! Landlock does not cover file metadata (chmod, chown, utimes, xattrs), UDP, named UNIX
//! sockets, process creation or calls on other processes (priorities, limits, affinity): the
//! filter does.
//!
//! # seccomp: an allow-list
//!
//! The filter (built with the `seccompiler` crate) **kills the whole shell**
//! (`SECCOMP_RET_KILL_PROCESS`: the kernel ends it with `SIGSYS` before the call does
//! anything) on every system call that is not on its list. The list ([`allowed_calls`]) is what
//! qemu-hexagon and the shell were measured to use (strace of every executor suite's shells:
//! memory, files through Landlock, the bench's pipes and socket, threads, signals, time,
//! identity, exit) and a few calls of the same kind a run can reach on another path, each
//! marked in the list. These are allowed only with some arguments ([`checked_calls`]):
//!
//! * `clone` with `CLONE_THREAD` in its flags (a thread of the shell, which dies with it:
//!   qemu starts one, and a library's `pthread_create` becomes one); any other clone is a new
//!   process. `clone3` passes its flags in memory a filter cannot read, so it is answered
//!   `ENOSYS` (the shell is not killed) and the C library falls back to `clone`;
//! * `execve` with exactly the path and argument-vector addresses the bench prepared before
//!   the fork ([`ShellExec`]): the start of qemu-hexagon passes, and no `execve` after it (a
//!   library's host program in a memfd, run through `/proc/self/fd`, is killed at the call;
//!   `execveat` and `memfd_create` are not on the list at all);
//! * `kill` and `tgkill` to the shell's own pid only (qemu ends itself with the guest's fatal
//!   signal); the pid is written into the compiled filter in the child;
//! * `prlimit64` and `sched_getaffinity` of pid 0 (the caller) only;
//! * `fcntl` with `F_GETFD`, `F_SETFD`, `F_GETFL`, `F_SETFL`, `F_DUPFD_CLOEXEC` (not `F_SETOWN`
//!   or `F_SETSIG`, which direct signals at other processes).
//!
//! Not on the list, among others: every socket call but `recvmsg` (the shell's only socket is
//! its stdin, a connected UNIX stream pair made by the bench, which it reads with `read` and
//! `recvmsg`: the memfds travel as `SCM_RIGHTS`), `ioctl`, `prctl`, io_uring, `ptrace`,
//! `process_vm_*`, namespace and mount calls, `chmod`/`chown`/`utimensat`/xattr calls,
//! `setpriority`, `sched_setaffinity`, `ioprio_set`, `reboot`, `sethostname`, `swapoff`,
//! `acct`, `syslog`, `bpf`, `perf_event_open`, `userfaultfd`, `keyctl`.
//! docs/bench.md gives the list with the reason for each entry.
//!
//! On x86-64, any x32 system call (numbers with bit 30 set), and any call made under another
//! ABI than the host's own (e.g. `int 0x80`), is killed too: the list names calls by the host
//! ABI's numbers.
//!
//! A refused call is a DSP fault in the bench's account: the shell dies with `SIGSYS` (signal
//! 31) during the call, the call in flight is a DSP restart, and its reason reads "signal 31
//! (SIGSYS): a host system call refused by the executor's sandbox (seccomp)"
//! ([`SANDBOX_REFUSAL`](super::process::SANDBOX_REFUSAL)). Killing was chosen over answering
//! `EPERM`: an error code goes back to the library, which may ignore it, so the attempt would
//! pass unseen as a successful launch; a killed shell cannot miss the bench's account, and
//! nothing of the library runs after its first attempt. A call qemu-hexagon answers itself
//! (qemu 7.2 answers `execveat` with `ENOSYS`) never reaches the host.
//!
//! # When a sandbox is unavailable
//!
//! A kernel without Landlock, or without seccomp filters that can kill a process (`prctl`
//! `PR_GET_SECCOMP` fails with `EINVAL`, or `SECCOMP_RET_KILL_PROCESS` is unknown: before Linux
//! 4.14), or a host architecture the filter is not written for (it is measured on x86-64 and
//! written for aarch64 and riscv64 too), cannot confine the shell: the executor then refuses to
//! start one, with an error that names [`UNCONFINED_ENV`]; setting it to `1` runs libraries
//! without the missing sandbox(es) (for trusted libraries on such kernels only). The two are
//! independent: with the variable set, whichever is available is still applied. The
//! namespaces are best effort (see [`NAMESPACE_TRIES`]); giving up the capabilities is not.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Setting this variable to `1` lets the executor run libraries unconfined on a kernel without
/// Landlock or without seccomp filters.
pub const UNCONFINED_ENV: &str = "HEXRPC_EXEC_UNCONFINED";

const CREATE_RULESET_VERSION: libc::c_uint = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const NET_ALL: u64 = (1 << 0) | (1 << 1);
const SCOPE_ALL: u64 = (1 << 0) | (1 << 1);

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Every file-system access right the kernel's Landlock ABI `abi` knows.
fn fs_rights(abi: i64) -> u64 {
    match abi {
        1 => (1 << 13) - 1,
        2 => (1 << 14) - 1,
        3 | 4 => (1 << 15) - 1,
        _ => (1 << 16) - 1,
    }
}

/// A ruleset ready to be applied in the child ([`apply`]).
pub struct Ruleset {
    fd: OwnedFd,
}

/// The kernel's Landlock ABI version, or why there is none.
pub fn abi() -> Result<i64, String> {
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the VERSION flag only
    // returns the ABI version; it reads and writes no memory.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<RulesetAttr>(), 0usize, CREATE_RULESET_VERSION) };
    if v < 1 {
        return Err(format!("Landlock is unavailable on this kernel ({})", std::io::Error::last_os_error()));
    }
    Ok(v)
}

fn add_rule(ruleset: &OwnedFd, path: &Path, access: u64) -> Result<(), String> {
    let Ok(c) = CString::new(path.as_os_str().as_encoded_bytes()) else { return Ok(()) };
    // SAFETY: open with a valid NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        // A directory this system does not have needs no rule.
        return Ok(());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Directory-only rights on a file are refused by the kernel.
    let access = if meta.is_dir() { access } else { access & !FS_READ_DIR };
    let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd.as_raw_fd() };
    // SAFETY: landlock_add_rule reads one `PathBeneathAttr` from a live local; both fds are open.
    let rc = unsafe {
        libc::syscall(libc::SYS_landlock_add_rule, ruleset.as_raw_fd(), RULE_PATH_BENEATH, &attr as *const PathBeneathAttr, 0u32)
    };
    if rc != 0 {
        return Err(format!("landlock_add_rule {}: {}", path.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}

impl Ruleset {
    /// The ruleset for a shell run by `qemu` on `shell`.
    pub fn for_shell(qemu: &Path, shell: &Path) -> Result<Ruleset, String> {
        let abi = abi()?;
        let attr = RulesetAttr {
            handled_access_fs: fs_rights(abi),
            handled_access_net: if abi >= 4 { NET_ALL } else { 0 },
            scoped: if abi >= 6 { SCOPE_ALL } else { 0 },
        };
        let size = match abi {
            1..=3 => 8usize,
            4 | 5 => 16,
            _ => std::mem::size_of::<RulesetAttr>(),
        };
        // SAFETY: landlock_create_ruleset reads `size` bytes (at most the struct) of a live local.
        let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr as *const RulesetAttr, size, 0u32) };
        if fd < 0 {
            return Err(format!("landlock_create_ruleset: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the kernel returned a new descriptor (close-on-exec) that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
        let qemu = std::fs::canonicalize(qemu).unwrap_or_else(|_| qemu.to_path_buf());
        add_rule(&fd, &qemu, FS_EXECUTE | FS_READ_FILE)?;
        add_rule(&fd, shell, FS_READ_FILE)?;
        for dir in ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache"] {
            add_rule(&fd, Path::new(dir), read)?;
        }
        // Of /proc, the files qemu and the loader read that are not the shell's own entries
        // (those are added in the child: `allow_own_proc`). Other processes' entries stay out
        // of reach (their environment, command lines, maps).
        for file in ["/proc/sys/vm/mmap_min_addr", "/proc/stat"] {
            if Path::new(file).exists() {
                add_rule(&fd, Path::new(file), FS_READ_FILE)?;
            }
        }
        Ok(Ruleset { fd })
    }

    /// The descriptor to hand to [`apply`].
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Applies ruleset `fd` to the calling thread (no new privileges first, as Landlock requires).
/// Async-signal-safe: two raw system calls, for the child between fork and exec.
pub fn apply(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) takes no pointers.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) }
        != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: landlock_restrict_self takes a descriptor and flags, no pointers.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `struct __user_cap_header_struct` (`<linux/capability.h>`).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `SECBIT_NOROOT | SECBIT_NO_SETUID_FIXUP | SECBIT_KEEP_CAPS_LOCKED |
/// SECBIT_NO_CAP_AMBIENT_RAISE`, each with its lock (`<linux/securebits.h>`).
const SECUREBITS_LOCKED_DOWN: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;

/// In the child: gives up every capability, so that qemu-hexagon runs with none even as root
/// (the bounding set is emptied, so `exec` grants none; the ambient, inheritable, permitted and
/// effective sets are cleared; the secure bits keep root from regaining any). Raw `prctl` and
/// `capset` only (async-signal-safe). Without `CAP_SETPCAP` (an unprivileged user, who has no
/// capability to give up) the bounding set and the secure bits cannot change: that is not an
/// error; a capability left in the effective or permitted set after `capset` is.
pub fn drop_capabilities() -> std::io::Result<()> {
    let prctl = |op: libc::c_int, a: libc::c_ulong| {
        // SAFETY: these prctl operations take integers only.
        unsafe { libc::prctl(op, a, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) }
    };
    let _ = prctl(libc::PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN);
    for cap in 0..64 {
        // EINVAL past the kernel's last capability; EPERM without CAP_SETPCAP.
        if prctl(libc::PR_CAPBSET_DROP, cap) != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            break;
        }
    }
    if prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capset reads the header and two data structs (version 3) of live locals.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: capget writes the header's version and two data structs into live locals.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if data.iter().any(|d| d.effective | d.permitted | d.inheritable != 0) {
        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// The namespaces a shell gets, tried in this order: new user, network and IPC namespaces
/// (where user namespaces are allowed: for root, and for other users unless the host forbids
/// them); else network and IPC only (root where user namespaces are off); else none, and the
/// system-call filter alone keeps sockets and System V IPC out (it never allowed them). A PID
/// namespace is not used: it would need a second fork (the namespace applies to the children of
/// the caller), and the filter already refuses every new process; other processes' `/proc`
/// entries are out of Landlock's reach ([`Ruleset::for_shell`]) and signals to them are refused.
pub const NAMESPACE_TRIES: [(&str, libc::c_int); 2] = [
    ("user, network, IPC", libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWIPC),
    ("network, IPC", libc::CLONE_NEWNET | libc::CLONE_NEWIPC),
];

/// In the child: enters the first of [`NAMESPACE_TRIES`] the host allows; returns its index, or
/// `None` (no namespace). One raw `unshare` per try (async-signal-safe).
pub fn enter_namespaces() -> Option<usize> {
    NAMESPACE_TRIES.iter().position(|(_, flags)| {
        // SAFETY: unshare takes flags only; the child is single-threaded (as a new user
        // namespace requires).
        unsafe { libc::unshare(*flags) == 0 }
    })
}

/// In the child, before [`apply`]: lets the shell read its own `/proc` entries
/// (`/proc/self/maps`, `/proc/self/status`, which qemu reads): the directory `/proc/self` names
/// in this process, `/proc/<its pid>`. Raw `open`, `landlock_add_rule`, `close`.
pub fn allow_own_proc(ruleset: RawFd) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated static path; O_PATH opens no file for reading.
    let fd = unsafe { libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let attr = PathBeneathAttr { allowed_access: FS_READ_FILE | FS_READ_DIR, parent_fd: fd };
    // SAFETY: landlock_add_rule reads the attribute (a live local) for the ruleset descriptor.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &attr as *const PathBeneathAttr, 0u32) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the descriptor opened above, closed once.
    unsafe { libc::close(fd) };
    if rc != 0 {
        return Err(err);
    }
    Ok(())
}

/// Whether the executor may start a shell without Landlock or without the system-call filter
/// ([`UNCONFINED_ENV`] is `1`).
pub fn unconfined_allowed() -> bool {
    std::env::var_os(UNCONFINED_ENV).is_some_and(|v| v == "1")
}

/// `AUDIT_ARCH_X86_64` (`<linux/audit.h>`): the `arch` of an x86-64 (and x32) system call.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// `__X32_SYSCALL_BIT`: set in the number of every x32 system call.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Call numbers the libc crate does not name on every target (its aarch64 Android bindings lack
/// these three); elsewhere, libc's.
#[cfg(all(target_os = "android", target_arch = "aarch64"))]
mod nr {
    pub const NEWFSTATAT: i64 = 79;
    pub const FSTAT: i64 = 80;
    pub const RSEQ: i64 = 293;
}
#[cfg(not(all(target_os = "android", target_arch = "aarch64")))]
mod nr {
    pub const NEWFSTATAT: i64 = libc::SYS_newfstatat;
    pub const FSTAT: i64 = libc::SYS_fstat;
    pub const RSEQ: i64 = libc::SYS_rseq;
}

/// The system calls the shell may make whatever their arguments, by name and host number: what
/// qemu-hexagon and the shell were measured to use (strace of every executor suite's shells),
/// and a few calls of the same kind that a run can reach on another path (each marked). Every
/// other call kills the shell, except those [`Filter`] allows with argument checks
/// ([`checked_calls`]) and `clone3` (`ENOSYS`). See docs/bench.md for why each is here.
pub fn allowed_calls() -> Vec<(&'static str, i64)> {
    #[allow(unused_mut)] // x86-64 adds its own
    let mut calls: Vec<(&'static str, i64)> = vec![
        // Memory: the translation cache (RWX), the guest's memory, the heap.
        ("mmap", libc::SYS_mmap),
        ("munmap", libc::SYS_munmap),
        ("mprotect", libc::SYS_mprotect),
        ("mremap", libc::SYS_mremap), // (not measured: glibc's realloc of large blocks)
        ("madvise", libc::SYS_madvise),
        ("brk", libc::SYS_brk),
        ("get_mempolicy", libc::SYS_get_mempolicy),
        ("set_mempolicy", libc::SYS_set_mempolicy),
        // Files: the loader and qemu open, stat and read (Landlock decides which paths).
        ("openat", libc::SYS_openat),
        ("newfstatat", nr::NEWFSTATAT),
        ("fstat", nr::FSTAT),               // (not measured: the same as newfstatat on an fd)
        ("faccessat", libc::SYS_faccessat), // (not measured: `access` on hosts without it)
        ("read", libc::SYS_read),
        ("pread64", libc::SYS_pread64),
        ("lseek", libc::SYS_lseek),
        ("close", libc::SYS_close),
        // The bench's pipes and its socket (stdin: read and recvmsg, memfds as SCM_RIGHTS).
        ("write", libc::SYS_write),
        ("recvmsg", libc::SYS_recvmsg),
        // Threads and their synchronisation.
        ("futex", libc::SYS_futex),
        ("set_robust_list", libc::SYS_set_robust_list),
        ("set_tid_address", libc::SYS_set_tid_address),
        ("rseq", nr::RSEQ),
        ("sched_yield", libc::SYS_sched_yield), // (not measured: a contended lock)
        // Signals (qemu delivers the guest's own, and ends itself with them).
        ("rt_sigaction", libc::SYS_rt_sigaction),
        ("rt_sigprocmask", libc::SYS_rt_sigprocmask),
        ("rt_sigreturn", libc::SYS_rt_sigreturn),
        ("rt_sigsuspend", libc::SYS_rt_sigsuspend),
        ("sigaltstack", libc::SYS_sigaltstack),         // (not measured: qemu's fault handling)
        ("restart_syscall", libc::SYS_restart_syscall), // (not measured: a signal during a sleep)
        // Time.
        ("clock_nanosleep", libc::SYS_clock_nanosleep),
        ("clock_gettime", libc::SYS_clock_gettime), // (not measured: the vDSO's fallback)
        ("nanosleep", libc::SYS_nanosleep),         // (not measured: an older C library's sleep)
        // Identity and facts about this process and machine.
        ("getpid", libc::SYS_getpid),
        ("gettid", libc::SYS_gettid),
        ("getuid", libc::SYS_getuid),
        ("geteuid", libc::SYS_geteuid),
        ("getgid", libc::SYS_getgid),
        ("getegid", libc::SYS_getegid),
        ("uname", libc::SYS_uname),
        ("sysinfo", libc::SYS_sysinfo),
        ("getrandom", libc::SYS_getrandom),
        // Ending.
        ("exit", libc::SYS_exit),
        ("exit_group", libc::SYS_exit_group),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([("arch_prctl", libc::SYS_arch_prctl), ("access", libc::SYS_access)]);
    calls
}

/// The calls allowed only with some arguments (see [`Filter`]), by name and host number.
pub fn checked_calls() -> [(&'static str, i64); 8] {
    [
        ("clone", libc::SYS_clone),
        ("execve", libc::SYS_execve),
        ("kill", libc::SYS_kill),
        ("tgkill", libc::SYS_tgkill),
        ("prlimit64", libc::SYS_prlimit64),
        ("sched_getaffinity", libc::SYS_sched_getaffinity),
        ("fcntl", libc::SYS_fcntl),
        ("clone3", libc::SYS_clone3),
    ]
}

/// Calls the red team and last round's tests tried, named for the tests of the filter: each
/// kills the shell (none is in [`allowed_calls`]).
pub fn refused_examples() -> Vec<(&'static str, i64)> {
    #[allow(unused_mut)]
    let mut calls: Vec<(&'static str, i64)> = vec![
        ("socket", libc::SYS_socket),
        ("socketpair", libc::SYS_socketpair),
        ("connect", libc::SYS_connect),
        ("sendto", libc::SYS_sendto),
        ("sendmsg", libc::SYS_sendmsg),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
        ("memfd_create", libc::SYS_memfd_create),
        ("execveat", libc::SYS_execveat),
        ("reboot", libc::SYS_reboot),
        ("sethostname", libc::SYS_sethostname),
        ("swapoff", libc::SYS_swapoff),
        ("acct", libc::SYS_acct),
        ("syslog", libc::SYS_syslog),
        ("fchmodat", libc::SYS_fchmodat),
        ("fchownat", libc::SYS_fchownat),
        ("utimensat", libc::SYS_utimensat),
        ("setxattr", libc::SYS_setxattr),
        ("fsetxattr", libc::SYS_fsetxattr),
        ("removexattr", libc::SYS_removexattr),
        ("setpriority", libc::SYS_setpriority),
        ("sched_setaffinity", libc::SYS_sched_setaffinity),
        ("ioprio_set", libc::SYS_ioprio_set),
        ("tkill", libc::SYS_tkill),
        ("ptrace", libc::SYS_ptrace),
        ("process_vm_writev", libc::SYS_process_vm_writev),
        ("unshare", libc::SYS_unshare),
        ("setns", libc::SYS_setns),
        ("mount", libc::SYS_mount),
        ("prctl", libc::SYS_prctl),
        ("ioctl", libc::SYS_ioctl),
        ("capset", libc::SYS_capset),
        ("setuid", libc::SYS_setuid),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("keyctl", libc::SYS_keyctl),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([("fork", libc::SYS_fork), ("vfork", libc::SYS_vfork), ("chmod", libc::SYS_chmod), ("chown", libc::SYS_chown)]);
    calls
}

/// Whether this kernel has seccomp filters that can kill a whole process, or why not.
pub fn seccomp_available() -> Result<(), String> {
    // SAFETY: prctl(PR_GET_SECCOMP) takes no pointers; it only returns the calling thread's
    // seccomp mode (or fails with EINVAL on a kernel built without seccomp).
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    if mode < 0 {
        return Err(format!("seccomp is unavailable on this kernel (prctl PR_GET_SECCOMP: {})", std::io::Error::last_os_error()));
    }
    let action: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    // SAFETY: seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action) reads one u32 of a live local.
    let rc = unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_GET_ACTION_AVAIL, 0 as libc::c_uint, &action as *const u32) };
    if rc != 0 {
        return Err(format!(
            "seccomp on this kernel cannot kill a whole process (SECCOMP_RET_KILL_PROCESS, Linux 4.14: {})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The pid placeholder in a compiled filter: the instructions that compare an argument with the
/// shell's own pid are compiled with this value and patched in the child, which alone knows its
/// pid ([`Filter::install`]). No pid reaches it (`PID_MAX_LIMIT` is 2^22).
const PID_PLACEHOLDER: u32 = 0x7fff_fff1;

/// How the child starts qemu-hexagon: the `execve` it makes itself, with a path, an argument
/// vector and the environment made before the fork. The filter allows `execve` with exactly these
/// three addresses, which are the bench's (a library cannot see them): the start of the emulator
/// is the only `execve` that passes.
pub struct ShellExec {
    path: CString,
    _args: [CString; 2],
    argv: Box<[*const libc::c_char; 3]>,
}

// SAFETY: the pointers point into the CStrings owned by the same value, which are never changed
// after it is made; sending or sharing the value shares only those read-only bytes.
unsafe impl Send for ShellExec {}
// SAFETY: as above.
unsafe impl Sync for ShellExec {}

impl ShellExec {
    /// `qemu shell`.
    pub fn new(qemu: &Path, shell: &Path) -> Result<ShellExec, String> {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} has a NUL byte", p.display()));
        let (path, arg0, arg1) = (c(qemu)?, c(qemu)?, c(shell)?);
        let argv = Box::new([arg0.as_ptr(), arg1.as_ptr(), std::ptr::null()]);
        Ok(ShellExec { path, _args: [arg0, arg1], argv })
    }

    fn path_addr(&self) -> u64 {
        self.path.as_ptr() as u64
    }

    fn argv_addr(&self) -> u64 {
        self.argv.as_ptr() as u64
    }

    /// Replaces the calling process with qemu-hexagon (the child, after the sandboxes are in
    /// place); returns only on failure. Async-signal-safe: one raw system call.
    pub fn exec(&self) -> std::io::Error {
        extern "C" {
            static environ: *const *const libc::c_char;
        }
        // SAFETY: the path and the NULL-terminated argument vector live in `self`; `environ` is
        // the C library's, as the child inherited it (read once, not changed here).
        unsafe { libc::syscall(libc::SYS_execve, self.path.as_ptr(), self.argv.as_ptr(), environ) };
        std::io::Error::last_os_error()
    }
}

/// The shell's system-call filter (see the module docs), compiled in the bench before the fork
/// (for the [`ShellExec`] of that shell) and installed in the child before it starts qemu
/// ([`Filter::install_and_exec`]).
pub struct Filter {
    /// The BPF programs, installed in this order (the kernel runs every one for each call and
    /// takes the strictest answer).
    programs: Vec<seccompiler::BpfProgram>,
    exec: ShellExec,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter").field("programs", &self.programs.len()).finish()
    }
}

/// `struct sock_fprog` (`<linux/filter.h>`).
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

impl Filter {
    /// The filter of a shell started by `exec`: fails (with the reason) where this kernel has no
    /// usable seccomp or the filter is not written for the host architecture.
    pub fn for_shell(exec: ShellExec) -> Result<Filter, String> {
        static AVAILABLE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
        AVAILABLE.get_or_init(seccomp_available).clone()?;
        Filter::compile(exec)
    }

    /// Compiles the filter for the host architecture (no availability check).
    fn compile(exec: ShellExec) -> Result<Filter, String> {
        use seccompiler::{
            SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
        };
        let arch = std::env::consts::ARCH;
        let target =
            TargetArch::try_from(arch).map_err(|_| format!("the executor's system-call filter is not written for {arch} hosts"))?;
        let bad = |e: seccompiler::BackendError| format!("compiling the executor's system-call filter: {e}");
        let cond = |arg, len, op, v| Cond::new(arg, len, op, v).map_err(bad);
        let rule = |conds: Vec<Cond>| SeccompRule::new(conds).map_err(bad);
        let mut allow: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
            allowed_calls().into_iter().map(|(_, nr)| (nr, Vec::new())).collect();
        // clone3 passes here, to be answered ENOSYS by the second program.
        allow.insert(libc::SYS_clone3, Vec::new());
        let me = u64::from(PID_PLACEHOLDER);
        // A thread of the shell (glibc's pthread_create): a clone with CLONE_THREAD in the
        // flags' low 32 bits, which the kernel reads. Without it, a new process: killed.
        let thread = libc::CLONE_THREAD as u64;
        allow.insert(libc::SYS_clone, vec![rule(vec![cond(0, Len::Dword, Op::MaskedEq(thread), thread)?])?]);
        // The emulator's start, and nothing after it.
        allow.insert(
            libc::SYS_execve,
            vec![rule(vec![cond(0, Len::Qword, Op::Eq, exec.path_addr())?, cond(1, Len::Qword, Op::Eq, exec.argv_addr())?])?],
        );
        // Signals to itself only (qemu ends itself with the guest's fatal signal).
        allow.insert(libc::SYS_kill, vec![rule(vec![cond(0, Len::Dword, Op::Eq, me)?])?]);
        allow.insert(libc::SYS_tgkill, vec![rule(vec![cond(0, Len::Dword, Op::Eq, me)?])?]);
        // Its own limits and CPUs (pid 0: the caller).
        allow.insert(libc::SYS_prlimit64, vec![rule(vec![cond(0, Len::Dword, Op::Eq, 0)?])?]);
        allow.insert(libc::SYS_sched_getaffinity, vec![rule(vec![cond(0, Len::Dword, Op::Eq, 0)?])?]);
        // Descriptor flags; not F_SETOWN / F_SETSIG (signals to another process on I/O).
        let fcntl: Vec<SeccompRule> = [libc::F_GETFD, libc::F_SETFD, libc::F_GETFL, libc::F_SETFL, libc::F_DUPFD_CLOEXEC]
            .into_iter()
            .map(|c| rule(vec![cond(1, Len::Dword, Op::Eq, c as u64)?]))
            .collect::<Result<_, _>>()?;
        allow.insert(libc::SYS_fcntl, fcntl);
        let allow = SeccompFilter::new(allow, SeccompAction::KillProcess, SeccompAction::Allow, target).map_err(bad)?;
        // clone3 passes its flags in memory a filter cannot read: ENOSYS, and the C library
        // falls back to clone, whose flags it checks.
        let clone3 = SeccompFilter::new(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            target,
        )
        .map_err(bad)?;
        // The allow-list goes last: installing a program is a `seccomp` call, which it refuses.
        let programs: Vec<seccompiler::BpfProgram> = vec![
            #[cfg(target_arch = "x86_64")]
            x86_64_abi_guard(),
            clone3.try_into().map_err(bad)?,
            allow.try_into().map_err(bad)?,
        ];
        Ok(Filter { programs, exec })
    }

    /// The BPF programs (for inspection).
    pub fn programs(&self) -> &[seccompiler::BpfProgram] {
        &self.programs
    }

    /// Writes the shell's pid into the comparisons compiled with [`PID_PLACEHOLDER`].
    fn set_pid(&mut self, pid: u32) {
        for program in &mut self.programs {
            for i in program.iter_mut() {
                // BPF_JMP | BPF_JEQ | BPF_K with the placeholder.
                if i.code == 0x15 && i.k == PID_PLACEHOLDER {
                    i.k = pid;
                }
            }
        }
    }

    /// In the child: writes its pid into the filter, installs it on the calling thread (no new
    /// privileges first, as an unprivileged filter requires) and starts qemu-hexagon; returns
    /// only on failure. Async-signal-safe and allocation-free: raw `getpid`, `prctl`, `seccomp`
    /// and `execve` on memory made before the fork.
    pub fn install_and_exec(&mut self) -> std::io::Error {
        let pid = rustix::process::getpid().as_raw_nonzero().get() as u32;
        self.set_pid(pid);
        if let Err(e) = self.install() {
            return e;
        }
        self.exec.exec()
    }

    /// Installs the programs as they are (see [`install_and_exec`](Self::install_and_exec)).
    fn install(&self) -> std::io::Result<()> {
        // SAFETY: prctl(PR_SET_NO_NEW_PRIVS, 1) takes no pointers.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) }
            != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        for program in &self.programs {
            let Ok(len) = libc::c_ushort::try_from(program.len()) else {
                return Err(std::io::Error::from_raw_os_error(libc::E2BIG));
            };
            let prog = SockFprog { len, filter: program.as_ptr() };
            // SAFETY: seccomp(SECCOMP_SET_MODE_FILTER) reads `prog` (a live local) and the `len`
            // instructions it points at (owned by `self`, alive for the call); the kernel copies
            // them and keeps no pointer.
            let rc =
                unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0 as libc::c_uint, &prog as *const SockFprog) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// On x86-64: kills a call made under another ABI than x86-64's (`int 0x80`: i386) or with an
/// x32 number, which the deny list (x86-64 numbers) would not recognise. seccompiler checks
/// only the `arch` field, and cannot compare the number with a range, so these seven
/// instructions are written out.
#[cfg(target_arch = "x86_64")]
fn x86_64_abi_guard() -> seccompiler::BpfProgram {
    use seccompiler::sock_filter;
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const NR: u32 = 0; // offsetof(struct seccomp_data, nr)
    const ARCH: u32 = 4; // offsetof(struct seccomp_data, arch)
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        op(LD_W_ABS, 0, 0, ARCH),
        op(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(LD_W_ABS, 0, 0, NR),
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's `AUDIT_ARCH_*` value.
    fn host_arch() -> u32 {
        match std::env::consts::ARCH {
            "x86_64" => 0xC000_003E,
            "aarch64" => 0xC000_00B7,
            "riscv64" => 0xC000_00F3,
            other => panic!("no filter for {other}"),
        }
    }

    /// Runs one classic-BPF seccomp program on `struct seccomp_data` (nr, arch, ip, args): the
    /// instructions seccompiler and the ABI guard emit.
    fn run(program: &[seccompiler::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&nr.to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            match i.code {
                0x20 => acc = u32::from_ne_bytes(data[i.k as usize..i.k as usize + 4].try_into().unwrap()),
                0x54 => acc &= i.k,
                0x05 => pc += i.k as usize,
                0x06 => return i.k,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => acc == i.k,
                        0x25 => acc > i.k,
                        0x35 => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("instruction {c:#x} not modelled"),
            }
        }
    }

    /// What the kernel answers for a call: every program runs, the strictest answer wins
    /// (KILL_PROCESS, then ERRNO, then ALLOW: the only ones used here).
    fn verdict(filter: &Filter, nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        let rank = |a: u32| match a & libc::SECCOMP_RET_ACTION_FULL {
            libc::SECCOMP_RET_KILL_PROCESS => 0,
            libc::SECCOMP_RET_ERRNO => 1,
            libc::SECCOMP_RET_ALLOW => 2,
            other => panic!("unexpected action {other:#x}"),
        };
        filter.programs().iter().map(|p| run(p, nr as u32, arch, args)).min_by_key(|&a| rank(a)).unwrap()
    }

    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;

    const ME: u32 = 4242;

    fn test_filter() -> Filter {
        let exec = ShellExec::new(Path::new("/usr/bin/qemu-hexagon"), Path::new("/tmp/shell.elf")).unwrap();
        let mut filter = Filter::compile(exec).expect("a filter for this architecture");
        filter.set_pid(ME);
        filter
    }

    #[test]
    fn the_filter_allows_what_the_shell_uses_and_kills_everything_else() {
        let filter = test_filter();
        let arch = host_arch();
        let call = |nr: i64, args: [u64; 6]| verdict(&filter, nr, arch, args);
        for (name, nr) in allowed_calls() {
            assert_eq!(call(nr, [0; 6]), ALLOW, "{name}");
        }
        for (name, nr) in refused_examples() {
            assert!(!allowed_calls().iter().any(|(_, a)| *a == nr), "{name} is both allowed and refused");
            assert_eq!(call(nr, [0; 6]), KILL, "{name}");
        }
        // Threads: glibc's pthread_create flags (and any flags with CLONE_THREAD).
        let thread = (libc::CLONE_VM
            | libc::CLONE_FS
            | libc::CLONE_FILES
            | libc::CLONE_SIGHAND
            | libc::CLONE_THREAD
            | libc::CLONE_SYSVSEM
            | libc::CLONE_SETTLS
            | libc::CLONE_PARENT_SETTID
            | libc::CLONE_CHILD_CLEARTID) as u64;
        assert_eq!(call(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), ALLOW);
        // Processes: glibc's fork, a bare SIGCHLD clone, vfork-style, and CLONE_THREAD only in
        // the high half (which the kernel ignores).
        let fork = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
        for flags in
            [fork, libc::SIGCHLD as u64, (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64, (libc::CLONE_THREAD as u64) << 32]
        {
            assert_eq!(call(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]), KILL, "clone {flags:#x}");
        }
        assert_eq!(call(libc::SYS_clone3, [0; 6]), libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        // The emulator's own start, exactly; any other exec.
        let (path, argv) = (filter.exec.path_addr(), filter.exec.argv_addr());
        assert_eq!(call(libc::SYS_execve, [path, argv, 0, 0, 0, 0]), ALLOW);
        for args in [[path + 1, argv], [path, argv + 8], [0x1000, 0x2000], [path ^ 1 << 40, argv]] {
            assert_eq!(call(libc::SYS_execve, [args[0], args[1], 0, 0, 0, 0]), KILL, "execve {args:x?}");
        }
        // Signals to itself only; its own limits and CPUs only.
        for (nr, name) in [(libc::SYS_kill, "kill"), (libc::SYS_tgkill, "tgkill")] {
            assert_eq!(call(nr, [u64::from(ME), 9, 9, 0, 0, 0]), ALLOW, "{name} self");
            for other in [0u64, 1, u64::from(ME) + 1, u64::MAX, u64::from(PID_PLACEHOLDER)] {
                assert_eq!(call(nr, [other, 9, 9, 0, 0, 0]), KILL, "{name} {other}");
            }
        }
        for nr in [libc::SYS_prlimit64, libc::SYS_sched_getaffinity] {
            assert_eq!(call(nr, [0; 6]), ALLOW, "{nr} of itself");
            assert_eq!(call(nr, [1, 0, 0, 0, 0, 0]), KILL, "{nr} of init");
            assert_eq!(call(nr, [u64::from(ME) + 7, 0, 0, 0, 0, 0]), KILL, "{nr} of another");
        }
        assert_eq!(call(libc::SYS_fcntl, [4, libc::F_GETFL as u64, 0, 0, 0, 0]), ALLOW);
        // F_SETSIG is 10 and F_SETOWN_EX 15 on Linux (the libc crate does not name them).
        for cmd in [libc::F_SETOWN, 10, 15, libc::F_SETLEASE] {
            assert_eq!(call(libc::SYS_fcntl, [4, cmd as u64, 1, 0, 0, 0]), KILL, "fcntl {cmd}");
        }
        // Another ABI's call is refused whatever its number.
        assert_eq!(verdict(&filter, libc::SYS_read, 0x4000_0003, [0; 6]), KILL);
        #[cfg(target_arch = "x86_64")]
        {
            // x32: the same arch value, bit 30 set in the number (x32's read is 0x40000000).
            assert_eq!(call(i64::from(X32_SYSCALL_BIT), [0; 6]), KILL);
            assert_eq!(call(i64::from(X32_SYSCALL_BIT) + 41, [0; 6]), KILL, "x32 socket");
        }
    }

    /// Runs `program` (no arguments but `arg`) with the filter installed in the child, started
    /// by the filter's own exec (`own`) or by Command's (`!own`); `None` if seccomp or the
    /// program is unavailable here.
    fn under_filter(program: &str, arg: &str, own: bool) -> Option<std::process::ExitStatus> {
        use std::os::unix::process::CommandExt;
        if let Err(e) = seccomp_available() {
            println!("SKIPPED: {e}");
            return None;
        }
        if !Path::new(program).exists() {
            println!("SKIPPED: no {program}");
            return None;
        }
        let mut filter = Filter::compile(ShellExec::new(Path::new(program), Path::new(arg)).unwrap()).unwrap();
        let mut cmd = std::process::Command::new(program);
        cmd.arg(arg).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only makes raw system
        // calls (getpid, prctl, seccomp, execve) on memory made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if own {
                    return Err(filter.install_and_exec());
                }
                filter.set_pid(rustix::process::getpid().as_raw_nonzero().get() as u32);
                filter.install()
            });
        }
        Some(cmd.status().expect("run the program"))
    }

    #[test]
    fn only_the_filters_own_exec_starts_a_program_and_it_runs() {
        use std::os::unix::process::ExitStatusExt;
        // /bin/true makes only calls of the list (the C library's start and exit).
        let Some(own) = under_filter("/bin/true", "x", true) else { return };
        assert_eq!(own.code(), Some(0), "a program started by the filter's own exec runs to its end: {own:?}");
        // Command's exec of the same program, from other addresses: killed at the exec.
        let other = under_filter("/bin/true", "x", false).unwrap();
        assert_eq!(other.signal(), Some(libc::SIGSYS), "another exec: {other:?}");
    }

    #[test]
    fn seccomp_is_available_where_the_executor_runs() {
        // The executor refuses to start shells without it (unless HEXRPC_EXEC_UNCONFINED=1):
        // on Linux 4.14 and later (every supported host) it is there.
        match seccomp_available() {
            Ok(()) => assert!(Filter::for_shell(ShellExec::new(Path::new("/bin/true"), Path::new("x")).unwrap()).is_ok()),
            Err(e) => println!("SKIPPED: {e}"),
        }
    }
}
