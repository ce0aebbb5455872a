//! The real syscall boundary, on rustix.

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;

use rustix::fd::{BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use rustix::fs::{self, Mode, OFlags};
use rustix::io;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};
use rustix::mm::{self, MapFlags, ProtFlags};

use core::sync::atomic::{AtomicI32, Ordering};

use crate::{BorrowedFd as SeamBorrowedFd, Errno, Fd, FileStat, OpenAt, OpenFlags, OwnedFd as SeamOwnedFd, Prot, Syscalls};

/// The real OS, through rustix (raw Linux system calls on glibc/musl targets, libc on Android).
#[derive(Clone, Copy, Debug, Default)]
pub struct RustixSys;

fn errno(e: io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

fn borrow(fd: Fd) -> Result<BorrowedFd<'static>, Errno> {
    if fd.0 < 0 {
        return Err(Errno::EBADF);
    }
    // SAFETY: `BorrowedFd` requires the descriptor to stay open while the borrow is used. The
    // seam takes raw numbers from its callers, who own them for the call (the trait's
    // contract); the borrow does not outlive the one system call it is made for. A number that
    // is not open makes that call fail with EBADF, as the C call would.
    Ok(unsafe { BorrowedFd::borrow_raw(fd.0) })
}

// The field types of `struct stat` differ between targets (Android, glibc, musl).
#[allow(clippy::unnecessary_cast)]
fn stat_of(st: &fs::Stat) -> FileStat {
    FileStat {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
        mode: st.st_mode as u32,
        nlink: st.st_nlink as u32,
        uid: st.st_uid as u32,
        gid: st.st_gid as u32,
        rdev: st.st_rdev as u64,
        size: st.st_size as u64,
        atime: (st.st_atime as i64, st.st_atime_nsec as i64),
        mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
    }
}

struct RawIoctl {
    request: u32,
    arg: *mut c_void,
}

// SAFETY: the opcode and pointer come from `Syscalls::ioctl`, whose caller guarantees that the
// pointer is valid for the request; we claim mutation so rustix never assumes the argument is
// unchanged, and we return the raw (non-negative) result.
unsafe impl Ioctl for RawIoctl {
    type Output = i32;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.request as Opcode
    }

    fn as_ptr(&mut self) -> *mut c_void {
        self.arg
    }

    unsafe fn output_from_ptr(out: IoctlOutput, _extract_output: *mut c_void) -> io::Result<i32> {
        Ok(out)
    }
}

// SAFETY: every method is the Linux system call of the same name.
unsafe impl Syscalls for RustixSys {
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<SeamOwnedFd, Errno> {
        let mut o = OFlags::CLOEXEC;
        o |= if flags.read_write { OFlags::RDWR } else { OFlags::RDONLY };
        if flags.nonblock {
            o |= OFlags::NONBLOCK;
        }
        if flags.nofollow {
            o |= OFlags::NOFOLLOW;
        }
        let fd = fs::open(path, o, Mode::empty()).map_err(errno)?;
        // SAFETY: a descriptor the kernel just opened for us; ownership passes to the caller.
        Ok(unsafe { SeamOwnedFd::from_raw(Fd(fd.into_raw_fd())) })
    }

    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<SeamOwnedFd, Errno> {
        let o = OFlags::CLOEXEC
            | match how {
                OpenAt::Dir { follow: true } => OFlags::PATH | OFlags::DIRECTORY,
                OpenAt::Dir { follow: false } => OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                OpenAt::File => OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW,
            };
        let fd = match dir {
            Some(d) => fs::openat(borrow(d)?, path, o, Mode::empty()),
            None => fs::openat(fs::CWD, path, o, Mode::empty()),
        }
        .map_err(errno)?;
        // SAFETY: a descriptor the kernel just opened for us; ownership passes to the caller.
        Ok(unsafe { SeamOwnedFd::from_raw(Fd(fd.into_raw_fd())) })
    }

    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        fs::statat(borrow(dir)?, name, fs::AtFlags::SYMLINK_NOFOLLOW).map(|s| stat_of(&s)).map_err(errno)
    }

    fn close(&self, fd: SeamOwnedFd) -> Result<(), Errno> {
        let fd = fd.into_raw();
        if fd.0 < 0 {
            return Err(Errno::EBADF);
        }
        // SAFETY: the caller hands us ownership of the number (the seam's `close` consumes the
        // token); dropping the OwnedFd closes it once.
        drop(unsafe { OwnedFd::from_raw_fd(fd.0) });
        Ok(())
    }

    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        io::pread(borrow(fd)?, buf, offset).map_err(errno)
    }

    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        fs::fstat(borrow(fd)?).map(|s| stat_of(&s)).map_err(errno)
    }

    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        let r = if follow { fs::stat(path) } else { fs::lstat(path) };
        r.map(|s| stat_of(&s)).map_err(errno)
    }

    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        let fd = borrow(fd)?;
        // SAFETY: the caller guarantees `arg` is valid for `request` (trait contract).
        unsafe { rustix::ioctl::ioctl(fd, RawIoctl { request, arg }) }.map_err(errno)
    }

    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
        let fd = borrow(fd)?;
        let p = match prot {
            Prot::Read => ProtFlags::READ,
            Prot::ReadWrite => ProtFlags::READ | ProtFlags::WRITE,
        };
        // SAFETY: a NULL hint lets the kernel choose a fresh range, so no existing memory is
        // replaced; the caller takes on the shared-memory contract of the returned range.
        let ptr = unsafe { mm::mmap(core::ptr::null_mut(), len, p, MapFlags::SHARED, fd, offset) }.map_err(errno)?;
        NonNull::new(ptr.cast()).ok_or(Errno::ENOMEM)
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
        // SAFETY: the caller guarantees the range is a mapping of ours that nothing uses.
        unsafe { mm::munmap(addr.as_ptr().cast(), len) }.map_err(errno)
    }

    fn thread_id(&self) -> i32 {
        thread_id()
    }

    fn interrupt(&self, tid: i32) -> Result<(), Errno> {
        send(tid, interrupt_signal()?)
    }

    fn dup_cloexec(&self, fd: Fd) -> Result<SeamOwnedFd, Errno> {
        let new = io::fcntl_dupfd_cloexec(borrow(fd)?, 0).map_err(errno)?;
        // SAFETY: a descriptor the kernel just made for us; ownership passes to the caller.
        Ok(unsafe { SeamOwnedFd::from_raw(Fd(new.into_raw_fd())) })
    }

    fn seek_end(&self, fd: Fd) -> Result<u64, Errno> {
        fs::seek(borrow(fd)?, fs::SeekFrom::End(0)).map_err(errno)
    }

    fn retire(&self, fd: SeamBorrowedFd<'_>) -> Result<(), Errno> {
        let fd = fd.raw();
        if fd.0 < 0 {
            return Err(Errno::EBADF);
        }
        let null = fs::open(c"/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
        // SAFETY: the number is borrowed from its owner (`BorrowedFd`); wrapping it in a
        // `ManuallyDrop` makes the `OwnedFd` never close it, so ownership stays with the caller.
        let mut target = core::mem::ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(fd.0) });
        // dup2 replaces the number atomically; close-on-exec is set again afterwards (a child
        // forked in between would inherit only /dev/null). dup3's flag is not on every target.
        io::dup2(&null, &mut target).map_err(errno)?;
        io::fcntl_setfd(&*target, io::FdFlags::CLOEXEC).map_err(errno)
    }
}

/// `gettid()`, a system call on every C library; with std, remembered per thread (a deadline
/// asks for it on every call) and asked again in a child after `fork`, whose thread has a new id.
#[cfg(not(feature = "std"))]
fn thread_id() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// The number of `fork`s this process descends through (bumped in the child of every `fork`
/// by a `pthread_atfork` handler registered at the first call), or `None` if the handler could
/// not be registered (a fork then goes unnoticed).
#[cfg(feature = "std")]
pub(crate) fn fork_generation() -> Option<i32> {
    extern crate std;

    static FORKS: AtomicI32 = AtomicI32::new(0);
    static HANDLER: std::sync::Once = std::sync::Once::new();
    static REGISTERED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    extern "C" fn in_child() {
        FORKS.fetch_add(1, Ordering::Relaxed);
    }
    HANDLER.call_once(|| {
        // SAFETY: registers a child handler that only increments an atomic (async-signal-safe,
        // as a handler run in the child of a multi-threaded fork must be).
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc == 0 {
            REGISTERED.store(true, Ordering::Release);
        } else {
            log::error!("pthread_atfork failed ({rc}): forks are not noticed (thread ids are not remembered)");
        }
    });
    REGISTERED.load(Ordering::Acquire).then(|| FORKS.load(Ordering::Relaxed))
}

#[cfg(feature = "std")]
fn thread_id() -> i32 {
    extern crate std;
    use core::cell::Cell;

    std::thread_local! {
        /// (the fork generation when it was asked, the id); the id 0 is never a thread's.
        static TID: Cell<(i32, i32)> = const { Cell::new((0, 0)) };
    }
    let forks = fork_generation();
    TID.with(|c| match (c.get(), forks) {
        // A remembered id of the parent's thread is never used in a child.
        ((f, tid), Some(g)) if f == g && tid != 0 => tid,
        _ => {
            let tid = rustix::thread::gettid().as_raw_nonzero().get();
            // Remembered only if forks are noticed.
            if let Some(g) = forks {
                c.set((g, tid));
            }
            tid
        }
    })
}

/// `/dev/null`, opened for measuring the cost of one system call: a file whose driver has no
/// ioctl, so the kernel answers every request with `ENOTTY` without reading or writing the
/// argument. [`invoke_attrs_raw`](Self::invoke_attrs_raw) is one `FASTRPC_IOCTL_INVOKE_ATTRS`
/// straight through rustix (no seam, no argument list): the baseline that a launch through
/// [`RustixSys`] on [`fd`](Self::fd) is compared with (`hexrpc bench`, `raw_ioctl_ns`).
#[derive(Debug)]
pub struct NullDevice {
    fd: OwnedFd,
}

impl NullDevice {
    /// Opens `/dev/null` read-only and checks that it is the null character device (1:3).
    pub fn open() -> Result<NullDevice, Errno> {
        let fd = fs::open(c"/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(errno)?;
        let st = fs::fstat(&fd).map_err(errno)?;
        let rdev = st.st_rdev as u64;
        let is_char = (st.st_mode as u32) & FileStat::S_IFMT == FileStat::S_IFCHR;
        if !is_char || fs::major(rdev as _) != 1 || fs::minor(rdev as _) != 3 {
            return Err(Errno::ENODEV);
        }
        Ok(NullDevice { fd })
    }

    /// The descriptor's number (owned by `self`), for a launch through the seam.
    pub fn fd(&self) -> Fd {
        use rustix::fd::AsRawFd;
        Fd(self.fd.as_raw_fd())
    }

    /// One raw `ioctl(fd, FASTRPC_IOCTL_INVOKE_ATTRS, arg)`: `Err(ENOTTY)`, and `arg` is left
    /// as it was.
    pub fn invoke_attrs_raw(&self, arg: &mut crate::adsprpc::fastrpc_ioctl_invoke_attrs) -> Result<i32, Errno> {
        let request = crate::adsprpc::ioctl::FASTRPC_IOCTL_INVOKE_ATTRS.raw();
        let arg = (arg as *mut crate::adsprpc::fastrpc_ioctl_invoke_attrs).cast();
        // SAFETY: the descriptor is the null device (checked in `open`, owned by `self`), which
        // has no ioctl handler, and no request the VFS answers itself has this number: the
        // kernel returns ENOTTY without touching `arg`, which is a live, exclusive struct of the
        // request's size in any case.
        unsafe { rustix::ioctl::ioctl(&self.fd, RawIoctl { request, arg }) }.map_err(errno)
    }
}

/// The signal [`RustixSys::interrupt`] sends, claimed at first use: a **dedicated real-time
/// signal**, the highest one from `SIGRTMAX` down to `SIGRTMIN` whose disposition is still the
/// default (no handler, not ignored), with a handler that does nothing, installed without
/// `SA_RESTART` so that a blocked ioctl returns `EINTR`. The application's own handlers — on
/// `SIGUSR1`/`SIGUSR2`, or on real-time signals it set up before — are never replaced, and its
/// signals are never delivered to our handler or ours to its handlers.
///
/// A service that allocates real-time signals itself after hexrpc made its first deadline or
/// stop must skip this one (or choose it for hexrpc first with [`use_interrupt_signal`]).
/// `EBUSY` if every real-time signal already has a handler.
pub fn interrupt_signal() -> Result<i32, Errno> {
    loop {
        match SIGNAL.load(Ordering::Acquire) {
            UNCLAIMED => {
                if SIGNAL.compare_exchange(UNCLAIMED, CLAIMING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    let r = claim_free_signal();
                    SIGNAL.store(*r.as_ref().unwrap_or(&UNCLAIMED), Ordering::Release);
                    return r;
                }
            }
            // Another thread is choosing (a few sigaction calls, once per process).
            CLAIMING => core::hint::spin_loop(),
            sig => return Ok(sig),
        }
    }
}

/// Chooses `sig` as the interrupt signal before hexrpc's first use (it must have no handler
/// yet); `EBUSY` if it has one or another signal was chosen already, `EINVAL` outside the
/// real-time range.
pub fn use_interrupt_signal(sig: i32) -> Result<(), Errno> {
    if sig < libc::SIGRTMIN() || sig > libc::SIGRTMAX() {
        return Err(Errno::EINVAL);
    }
    if SIGNAL.compare_exchange(UNCLAIMED, CLAIMING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return if SIGNAL.load(Ordering::Acquire) == sig { Ok(()) } else { Err(Errno::EBUSY) };
    }
    let r = claim(sig).and_then(|()| send(rustix::thread::gettid().as_raw_nonzero().get(), sig).inspect_err(|_| release(sig)));
    SIGNAL.store(if r.is_ok() { sig } else { UNCLAIMED }, Ordering::Release);
    r
}

const UNCLAIMED: i32 = 0;
const CLAIMING: i32 = -1;
static SIGNAL: AtomicI32 = AtomicI32::new(UNCLAIMED);

extern "C" fn ignore_signal(_: libc::c_int) {}

fn last_errno() -> i32 {
    // SAFETY: reads the calling thread's errno, which libc keeps per thread.
    #[cfg(target_os = "android")]
    let e = unsafe { *libc::__errno() };
    // SAFETY: as above.
    #[cfg(not(target_os = "android"))]
    let e = unsafe { *libc::__errno_location() };
    e
}

fn claim_free_signal() -> Result<i32, Errno> {
    let mut sig = libc::SIGRTMAX();
    while sig >= libc::SIGRTMIN() {
        match claim(sig) {
            // One signal to ourselves proves it can be delivered (qemu-user refuses to send the
            // highest real-time signals, which it keeps for itself); the handler does nothing.
            Ok(()) if send(rustix::thread::gettid().as_raw_nonzero().get(), sig).is_ok() => return Ok(sig),
            Ok(()) => {
                release(sig);
                sig -= 1;
            }
            // EINVAL: a signal this process cannot handle (qemu-user keeps the highest real-time
            // signals for itself); try the next one down.
            Err(Errno::EBUSY | Errno::EINVAL) => sig -= 1,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EBUSY)
}

/// `tgkill(getpid(), tid, sig)`.
fn send(tid: i32, sig: i32) -> Result<(), Errno> {
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: tgkill takes plain integers; it only delivers `sig`, whose handler (installed by
    // `claim`) does nothing.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid as libc::c_long, tid as libc::c_long, sig as libc::c_long) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno(last_errno()))
    }
}

/// Gives `sig` back its default disposition (after a failed claim).
fn release(sig: i32) {
    // SAFETY: a zeroed sigaction with SIG_DFL (0) is the default disposition.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, core::ptr::null_mut());
    }
}

/// Installs our do-nothing handler on `sig` if nobody handles or ignores it.
fn claim(sig: i32) -> Result<(), Errno> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the first call only
    // reads the current disposition into `old`.
    let old = unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(sig, core::ptr::null(), &mut old) != 0 {
            return Err(Errno(last_errno()));
        }
        old
    };
    if old.sa_sigaction != libc::SIG_DFL {
        return Err(Errno::EBUSY);
    }
    // SAFETY: as above; the handler does nothing (async-signal-safe) and is installed for one
    // signal that had the default disposition.
    let rc = unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, core::ptr::null_mut())
    };
    if rc != 0 {
        return Err(Errno(last_errno()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn thread_ids_are_the_kernels_per_thread_and_after_fork() {
        let me = RustixSys.thread_id();
        assert_eq!(me, rustix::thread::gettid().as_raw_nonzero().get());
        assert_eq!(RustixSys.thread_id(), me, "asked twice");
        let other = std::thread::spawn(|| (RustixSys.thread_id(), rustix::thread::gettid().as_raw_nonzero().get())).join().unwrap();
        assert_eq!(other.0, other.1);
        assert_ne!(other.0, me);
        // SAFETY: the child only makes system calls, touches this thread's thread-local and
        // atomics, and leaves with _exit (no destructors, no allocation).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = RustixSys.thread_id() == rustix::thread::gettid().as_raw_nonzero().get();
            // SAFETY: ends the child without running anything of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a live int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw its parent's thread id: {status:#x}");
    }

    #[test]
    fn the_null_device_refuses_invoke_attrs_and_leaves_the_argument() {
        let null = NullDevice::open().expect("open /dev/null");
        let mut arg = crate::adsprpc::fastrpc_ioctl_invoke_attrs::default();
        arg.inv.handle = 21;
        let before = arg;
        let r = null.invoke_attrs_raw(&mut arg);
        // ENOTTY on a real kernel; qemu-user answers ENOSYS for ioctls it does not know.
        assert!(matches!(r, Err(Errno::ENOTTY) | Err(Errno::ENOSYS)), "{r:?}");
        assert_eq!(arg, before);
        assert!(RustixSys.fstat(null.fd()).unwrap().is_char_device());
    }

    #[test]
    fn unknown_ioctl_on_a_real_fd_fails_cleanly() {
        let sys = RustixSys;
        let fd = sys.open(c"/dev/null", OpenFlags::READ_ONLY).expect("open /dev/null");
        let mut word = 0u32;
        let req = crate::ioc::iowr::<u32>(b'R', 8);
        // SAFETY: `word` is a live u32, the size the request declares.
        let r = unsafe { sys.ioctl(fd.raw(), req, (&mut word as *mut u32).cast()) };
        // ENOTTY on a real kernel; qemu-user answers ENOSYS for ioctls it does not know.
        assert!(matches!(r, Err(Errno::ENOTTY) | Err(Errno::ENOSYS)), "{r:?}");
        let st = sys.fstat(fd.raw()).expect("fstat");
        assert!(st.is_char_device());
        sys.close(fd).expect("close");
        assert_eq!(sys.fstat(Fd(-1)), Err(Errno::EBADF));
    }

    #[test]
    fn interrupt_ends_a_blocked_system_call_with_eintr() {
        use std::sync::atomic::{AtomicI32, Ordering};
        use std::sync::Arc;
        let (rd, _wr) = rustix::pipe::pipe().expect("pipe");
        let tid = Arc::new(AtomicI32::new(0));
        let t = {
            let tid = tid.clone();
            std::thread::spawn(move || {
                tid.store(RustixSys.thread_id(), Ordering::SeqCst);
                let mut b = [0u8; 1];
                rustix::io::read(&rd, &mut b)
            })
        };
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // The reader may not be blocked yet when the first signal lands: keep interrupting until
        // it returns (a handled signal outside a system call is harmless).
        let mut sent = 0;
        while !t.is_finished() {
            RustixSys.interrupt(tid.load(Ordering::SeqCst)).expect("interrupt");
            sent += 1;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(t.join().unwrap(), Err(rustix::io::Errno::INTR));
        assert!(sent >= 1);
    }

    static APP_SIGUSR2: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    extern "C" fn app_handler(_: libc::c_int) {
        APP_SIGUSR2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn handler_of(sig: i32) -> libc::sighandler_t {
        // SAFETY: reads the disposition of `sig` into a zeroed struct.
        unsafe {
            let mut old: libc::sigaction = core::mem::zeroed();
            assert_eq!(libc::sigaction(sig, core::ptr::null(), &mut old), 0);
            old.sa_sigaction
        }
    }

    #[test]
    fn interrupts_use_a_dedicated_signal_and_keep_the_applications_handlers() {
        // The application handles SIGUSR2 itself.
        // SAFETY: installs a handler that only bumps an atomic counter (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = app_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, core::ptr::null_mut()), 0);
        }
        let mine = app_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        let sig = interrupt_signal().expect("a free real-time signal");
        assert!((libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&sig), "{sig}");
        assert_eq!(interrupt_signal(), Ok(sig), "claimed once");
        assert_eq!(use_interrupt_signal(libc::SIGUSR2), Err(Errno::EINVAL));
        for _ in 0..20 {
            RustixSys.interrupt(RustixSys.thread_id()).unwrap();
        }
        assert_eq!(handler_of(libc::SIGUSR2), mine, "the application's handler stays");
        assert_eq!(APP_SIGUSR2.load(std::sync::atomic::Ordering::SeqCst), 0, "and never sees our interrupts");
        assert_ne!(handler_of(sig), libc::SIG_DFL);
    }

    #[test]
    fn retire_points_the_number_at_dev_null() {
        let sys = RustixSys;
        let fd = sys.open(c"/dev/zero", OpenFlags::READ_ONLY).expect("open /dev/zero");
        let mut b = [1u8; 4];
        assert_eq!(sys.pread(fd.raw(), &mut b, 0), Ok(4));
        assert_eq!(b, [0; 4]);
        sys.retire(fd.as_fd()).expect("retire");
        assert_eq!(sys.pread(fd.raw(), &mut b, 0), Ok(0), "now /dev/null: end of file at once");
        assert_eq!(sys.fstat(fd.raw()).unwrap().rdev, sys.stat(c"/dev/null", true).unwrap().rdev);
        sys.close(fd).expect("the number is still ours to close");
        // SAFETY: -1 is never open; the call must refuse it without touching anything.
        assert_eq!(sys.retire(unsafe { SeamBorrowedFd::borrow_raw(Fd(-1)) }), Err(Errno::EBADF));
    }

    #[test]
    fn open_at_walks_below_a_directory_without_following_links() {
        use std::os::unix::ffi::OsStrExt;
        let root = std::env::temp_dir().join(std::format!("hexrpc-openat-{}", std::process::id()));
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/f"), b"abc").unwrap();
        std::os::unix::fs::symlink("d", root.join("ld")).unwrap();
        std::os::unix::fs::symlink("d/f", root.join("lf")).unwrap();
        let c = |p: &std::path::Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let sys = RustixSys;
        let top = sys.open_at(None, &c(&root), OpenAt::Dir { follow: true }).expect("start directory");
        assert!(sys.fstat(top.raw()).unwrap().is_dir(), "fstat works on an O_PATH descriptor");
        let d = sys.open_at(Some(top.raw()), c"d", OpenAt::Dir { follow: false }).expect("a real directory");
        let f = sys.open_at(Some(d.raw()), c"f", OpenAt::File).expect("a regular file");
        let mut b = [0u8; 3];
        assert_eq!(sys.pread(f.raw(), &mut b, 0), Ok(3));
        assert_eq!(&b, b"abc");
        let link_dir = sys.open_at(Some(top.raw()), c"ld", OpenAt::Dir { follow: false });
        assert!(matches!(link_dir, Err(Errno::ELOOP) | Err(Errno::ENOTDIR)), "{link_dir:?}");
        assert_eq!(sys.open_at(Some(top.raw()), c"lf", OpenAt::File), Err(Errno::ELOOP));
        assert_eq!(sys.open_at(Some(d.raw()), c"f", OpenAt::Dir { follow: false }), Err(Errno::ENOTDIR));
        assert_eq!(sys.open_at(Some(top.raw()), c"missing", OpenAt::File), Err(Errno::ENOENT));
        assert!(sys.stat_at(d.raw(), c"f").unwrap().is_file());
        assert_eq!(sys.stat_at(top.raw(), c"lf").unwrap().mode & FileStat::S_IFMT, FileStat::S_IFLNK, "a link reports itself");
        assert_eq!(sys.stat_at(top.raw(), c"missing"), Err(Errno::ENOENT));
        let followed = sys.open_at(None, &c(&root.join("ld")), OpenAt::Dir { follow: true }).expect("trusted start may be a link");
        assert!(sys.fstat(followed.raw()).unwrap().is_dir());
        assert_eq!(sys.open_at(Some(Fd(-1)), c"d", OpenAt::File), Err(Errno::EBADF));
        for fd in [followed, f, d, top] {
            sys.close(fd).unwrap();
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn missing_path_is_enoent() {
        assert_eq!(RustixSys.open(c"/nonexistent/hexrpc", OpenFlags::READ_ONLY), Err(Errno::ENOENT));
    }
}
