//! Confinement of the DSP shell: the libraries it runs are untrusted code, and qemu-hexagon
//! serves their `trap0` system calls (open, write, unlink, ...) on the host as its own. The
//! executor therefore starts every shell under a Landlock domain, prepared in the bench before
//! the fork and applied in the child right before `exec` (where only async-signal-safe system
//! calls run):
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
//! A kernel without Landlock cannot confine the shell: the executor then refuses to start one,
//! with an error that names [`UNCONFINED_ENV`]; setting it to `1` runs libraries unconfined (for
//! trusted libraries on such kernels only).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Setting this variable to `1` lets the executor run libraries unconfined on a kernel without
/// Landlock.
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

/// Whether the executor may start a shell without Landlock ([`UNCONFINED_ENV`] is `1`).
pub fn unconfined_allowed() -> bool {
    std::env::var_os(UNCONFINED_ENV).is_some_and(|v| v == "1")
}
