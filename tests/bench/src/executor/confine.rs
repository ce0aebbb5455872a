//! Confinement of the DSP shell: the libraries it runs are untrusted code, and qemu-hexagon
//! serves their `trap0` system calls (open, write, unlink, clone, socket, ...) on the host as its
//! own. The executor therefore starts every shell under two sandboxes, both prepared in the
//! bench before the fork and applied in the child right before `exec` (where only
//! async-signal-safe system calls run, and nothing is allocated): first a Landlock domain
//! ([`Ruleset`]), then a seccomp-BPF system-call filter ([`Filter`]). Both stay in force
//! across `exec` and for every thread of the shell, and neither can be lifted from inside.
//!
//! # Landlock: files, TCP, signals
//!
//! * file system: read (and execute) only what qemu-hexagon needs to start and run the shell:
//!   the qemu binary, the system's library directories, the loader cache, the shell executable
//!   and `/proc` (qemu reads its own entries; a `/proc` link to a file is checked against these
//!   rules, and the bench's own `/proc/<pid>` is out of reach: Landlock forbids ptrace-class
//!   access to processes outside the domain, which is why the buffers' memfds are passed over
//!   the shell's stdin socket instead of opened by path). No
//!   write, create, remove, rename or truncate anywhere: the shell's pipes are open before the
//!   domain starts and stay usable;
//! * network (ABI 4 and later): no TCP bind or connect;
//! * scopes (ABI 6 and later): no signal to, and no abstract UNIX socket of, a process outside
//!   the domain.
//!
//! Landlock does not cover the rest: its network rules are TCP only (a UDP datagram to
//! 127.0.0.1 goes out), sending to a named UNIX socket is not a file-system right it checks,
//! and it does not limit process creation at all (a library's `clone` makes a host process
//! that survives the shell). The system-call filter closes those.
//!
//! # seccomp: no new process, no socket
//!
//! The filter ([`Filter::for_shell`], built with the `seccompiler` crate) lets every system
//! call through except these, which **kill the whole shell** (`SECCOMP_RET_KILL_PROCESS`: the
//! kernel ends it with `SIGSYS` before the call does anything):
//!
//! * process creation: `fork` and `vfork` (x86-64 has them), and `clone` whose flags lack
//!   `CLONE_THREAD`. A clone with `CLONE_THREAD` makes a thread of the shell's own thread
//!   group, which is allowed: qemu-hexagon starts a thread of its own at start-up (RCU), and a
//!   library's `pthread_create` becomes a host thread; threads die with the shell when it is
//!   killed, so they cannot outlive it. `clone3` passes its flags in a structure that a seccomp
//!   filter cannot read, so it is answered `ENOSYS` instead (the shell is not killed): the C
//!   library then falls back to `clone`, whose flags the filter sees;
//! * sockets: `socket` and `socketpair` (no new socket of any family), `connect`, `bind`,
//!   `listen`, `accept`, `accept4`, and `sendto`, `sendmsg`, `sendmmsg`. The shell's only socket
//!   is its stdin, a connected UNIX stream pair made by the bench, which it reads with `read`
//!   and `recvmsg` (the memfds travel as `SCM_RIGHTS`); it never sends on it. The send calls
//!   are refused whole rather than only with a destination address, because a `sendmsg`'s
//!   address sits in memory a filter cannot read (a stream socket would refuse one anyway, with
//!   `EISCONN`);
//! * `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring performs socket
//!   operations without the system calls above (qemu 7.2 does not forward them; refused in case
//!   a later one does), and `pidfd_getfd` (it copies a descriptor, a socket say, out of another
//!   process);
//! * on x86-64, any x32 system call (numbers with bit 30 set), and any call made under another
//!   ABI than the host's own (e.g. `int 0x80`): a deny list names calls by the host ABI's
//!   numbers, which those ABIs do not use. qemu-hexagon makes neither; the filter refuses them
//!   so that the list holds even for code that escaped the emulator.
//!
//! A refused call is a DSP fault in the bench's account: the shell dies with `SIGSYS` (signal
//! 31) during the call, the call in flight is a DSP restart, and its reason reads "signal 31
//! (SIGSYS): a host system call refused by the executor's sandbox (seccomp)"
//! ([`SANDBOX_REFUSAL`](super::process::SANDBOX_REFUSAL)). Killing was chosen over answering
//! `EPERM`: an error code goes back to the library, which may ignore it, so the attempt would
//! pass unseen as a successful launch; a killed shell cannot miss the bench's account, and
//! nothing of the library runs after its first attempt.
//!
//! `execve` stays allowed (the filter is installed before qemu-hexagon itself is executed): a
//! library may replace the shell with another program it can execute, but that program is the
//! same process, under the same filter and Landlock domain, and ends with the shell's pidfd.
//!
//! # Why seccomp, not a PID namespace
//!
//! A PID namespace would kill every process of the shell's when the shell (its init) dies, and
//! `RLIMIT_NPROC` could bound how many it makes. Neither is enough here: creating a PID
//! namespace needs `CAP_SYS_ADMIN`, or a user namespace, which many hosts and containers do not
//! allow; `RLIMIT_NPROC` counts every process of the user and is not enforced at all for root or
//! with `CAP_SYS_RESOURCE` (CI runs as root); and neither stops sockets. A seccomp filter needs
//! no privilege (only `PR_SET_NO_NEW_PRIVS`, which Landlock sets too), works inside containers,
//! and refuses the call before any process or socket exists.
//!
//! # When a sandbox is unavailable
//!
//! A kernel without Landlock, or without seccomp filters that can kill a process (`prctl`
//! `PR_GET_SECCOMP` fails with `EINVAL`, or `SECCOMP_RET_KILL_PROCESS` is unknown: before Linux
//! 4.14), or a host architecture the filter is not written for (it is for x86-64, aarch64 and
//! riscv64), cannot confine the shell: the executor then refuses to start one, with an error
//! that names [`UNCONFINED_ENV`]; setting it to `1` runs libraries without the missing
//! sandbox(es) (for trusted libraries on such kernels only). The two are independent: with the
//! variable set, whichever is available is still applied.

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
        for dir in ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/etc/ld.so.cache", "/proc"] {
            add_rule(&fd, Path::new(dir), read)?;
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

/// The system calls that kill the shell whatever their arguments, by name and host number
/// (`clone` is refused by its flags, `clone3` answered `ENOSYS`: see the module docs).
pub fn refused_calls() -> Vec<(&'static str, i64)> {
    #[allow(unused_mut)] // x86-64 adds fork and vfork
    let mut calls: Vec<(&'static str, i64)> = vec![
        ("socket", libc::SYS_socket),
        ("socketpair", libc::SYS_socketpair),
        ("connect", libc::SYS_connect),
        ("bind", libc::SYS_bind),
        ("listen", libc::SYS_listen),
        ("accept", libc::SYS_accept),
        ("accept4", libc::SYS_accept4),
        ("sendto", libc::SYS_sendto),
        ("sendmsg", libc::SYS_sendmsg),
        ("sendmmsg", libc::SYS_sendmmsg),
        ("io_uring_setup", libc::SYS_io_uring_setup),
        ("io_uring_enter", libc::SYS_io_uring_enter),
        ("io_uring_register", libc::SYS_io_uring_register),
        ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([("fork", libc::SYS_fork), ("vfork", libc::SYS_vfork)]);
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

/// The shell's system-call filter (see the module docs), compiled in the bench before the fork
/// and installed in the child before `exec` ([`Filter::install`]).
#[derive(Debug)]
pub struct Filter {
    /// The BPF programs, installed in this order (the kernel runs every one for each call and
    /// takes the strictest answer).
    programs: Vec<seccompiler::BpfProgram>,
}

/// `struct sock_fprog` (`<linux/filter.h>`).
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

impl Filter {
    /// The filter of every shell, compiled once per process: fails (with the reason) where this
    /// kernel has no usable seccomp or the filter is not written for the host architecture.
    pub fn for_shell() -> Result<&'static Filter, String> {
        static FILTER: std::sync::OnceLock<Result<Filter, String>> = std::sync::OnceLock::new();
        FILTER.get_or_init(|| seccomp_available().and_then(|()| Filter::compile())).as_ref().map_err(Clone::clone)
    }

    /// Compiles the filter for the host architecture (no availability check).
    fn compile() -> Result<Filter, String> {
        use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch};
        let arch = std::env::consts::ARCH;
        let target =
            TargetArch::try_from(arch).map_err(|_| format!("the executor's system-call filter is not written for {arch} hosts"))?;
        let bad = |e: seccompiler::BackendError| format!("compiling the executor's system-call filter: {e}");
        let mut kill: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
            refused_calls().into_iter().map(|(_, nr)| (nr, Vec::new())).collect();
        // A clone without CLONE_THREAD (the kernel reads the flags' low 32 bits) is a new process.
        let no_thread =
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64), 0).map_err(bad)?;
        kill.insert(libc::SYS_clone, vec![SeccompRule::new(vec![no_thread]).map_err(bad)?]);
        let kill = SeccompFilter::new(kill, SeccompAction::Allow, SeccompAction::KillProcess, target).map_err(bad)?;
        let clone3 = SeccompFilter::new(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            target,
        )
        .map_err(bad)?;
        #[allow(unused_mut)] // x86-64 adds the ABI guard
        let mut programs: Vec<seccompiler::BpfProgram> = vec![kill.try_into().map_err(bad)?, clone3.try_into().map_err(bad)?];
        #[cfg(target_arch = "x86_64")]
        programs.push(x86_64_abi_guard());
        Ok(Filter { programs })
    }

    /// The BPF programs (for inspection).
    pub fn programs(&self) -> &[seccompiler::BpfProgram] {
        &self.programs
    }

    /// Installs the filter on the calling thread (no new privileges first, as an unprivileged
    /// filter requires). Async-signal-safe and allocation-free: raw `prctl` and `seccomp` system
    /// calls on memory the filter owns, for the child between fork and exec.
    pub fn install(&self) -> std::io::Result<()> {
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

    #[test]
    fn the_filter_refuses_processes_and_sockets_and_lets_threads_and_io_through() {
        let filter = Filter::compile().expect("a filter for this architecture");
        let arch = host_arch();
        let call = |nr: i64, args: [u64; 6]| verdict(&filter, nr, arch, args);
        // What the shell and qemu-hexagon use.
        for nr in [libc::SYS_read, libc::SYS_write, libc::SYS_recvmsg, libc::SYS_mmap, libc::SYS_execve, libc::SYS_exit_group] {
            assert_eq!(call(nr, [0; 6]), ALLOW, "{nr}");
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
        for (name, nr) in refused_calls() {
            assert_eq!(call(nr, [0; 6]), KILL, "{name}");
        }
        assert!(refused_calls().iter().any(|(n, _)| *n == "socket") && refused_calls().iter().any(|(n, _)| *n == "sendmsg"));
        // Another ABI's call is refused whatever its number.
        assert_eq!(verdict(&filter, libc::SYS_read, 0x4000_0003, [0; 6]), KILL);
        #[cfg(target_arch = "x86_64")]
        {
            assert!(refused_calls().iter().any(|(n, _)| *n == "fork") && refused_calls().iter().any(|(n, _)| *n == "vfork"));
            // x32: the same arch value, bit 30 set in the number (x32's read is 0x40000000).
            assert_eq!(call(i64::from(X32_SYSCALL_BIT), [0; 6]), KILL);
            assert_eq!(call(i64::from(X32_SYSCALL_BIT) + 41, [0; 6]), KILL, "x32 socket");
        }
    }

    /// Runs `shell -c script` with the shell's filter installed before exec; `None` if seccomp
    /// or `shell` is unavailable here.
    fn under_filter(shell: &str, script: &str) -> Option<std::process::ExitStatus> {
        use std::os::unix::process::CommandExt;
        let filter = match Filter::for_shell() {
            Ok(f) => f,
            Err(e) => {
                println!("SKIPPED: {e}");
                return None;
            }
        };
        if !Path::new(shell).exists() {
            println!("SKIPPED: no {shell}");
            return None;
        }
        let mut cmd = std::process::Command::new(shell);
        cmd.args(["-c", script]).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only makes raw system
        // calls (prctl, seccomp) on memory compiled before the fork; nothing is allocated.
        unsafe {
            cmd.pre_exec(move || filter.install());
        }
        Some(cmd.status().expect("run the shell"))
    }

    #[test]
    fn a_filtered_program_runs_but_dies_with_sigsys_at_a_fork_or_a_socket() {
        use std::os::unix::process::ExitStatusExt;
        let Some(plain) = under_filter("/bin/sh", "exit 7") else { return };
        assert_eq!(plain.code(), Some(7), "a program that makes no refused call runs to its end: {plain:?}");
        let forked = under_filter("/bin/sh", "/bin/true; exit 7").unwrap();
        assert_eq!(forked.signal(), Some(libc::SIGSYS), "the shell's fork of /bin/true: {forked:?}");
        let subshell = under_filter("/bin/sh", "(exit 3); exit 7").unwrap();
        assert_eq!(subshell.signal(), Some(libc::SIGSYS), "a subshell is a fork: {subshell:?}");
        // bash opens /dev/udp/HOST/PORT with socket + connect, itself (no fork).
        if let Some(udp) = under_filter("/bin/bash", "exec 3<>/dev/udp/127.0.0.1/9; exit 7") {
            assert_eq!(udp.signal(), Some(libc::SIGSYS), "a UDP socket: {udp:?}");
        }
    }

    #[test]
    fn seccomp_is_available_where_the_executor_runs() {
        // The executor refuses to start shells without it (unless HEXRPC_EXEC_UNCONFINED=1):
        // on Linux 4.14 and later (every supported host) it is there.
        match seccomp_available() {
            Ok(()) => assert!(Filter::for_shell().is_ok()),
            Err(e) => println!("SKIPPED: {e}"),
        }
    }
}
