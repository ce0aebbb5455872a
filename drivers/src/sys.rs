//! The syscall seam: the one trait through which hexrpc touches the OS.

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;

use crate::ioc::Ioctl;
use crate::Errno;

/// A raw file descriptor number as the kernel hands it out. It does not own the descriptor:
/// owning wrappers live in the HAL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(transparent)]
pub struct Fd(pub i32);

impl Fd {
    /// The raw number.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

/// Ownership of an open descriptor number, as a value: the only thing
/// [`Syscalls::close`] accepts, and what [`Syscalls::open`] (and the typed calls that make a
/// descriptor, such as `ion::share`) return. It is not `Clone` or `Copy`, so safe code cannot
/// close a number twice, nor close a number it was never given.
///
/// Dropping it without [`Syscalls::close`] leaks the descriptor (the token knows no seam to
/// close it through); the HAL's `OwnedFd<S>` wraps it and closes on drop.
#[must_use = "an owned descriptor must be closed through the seam (`Syscalls::close`)"]
#[derive(Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OwnedFd(Fd);

impl OwnedFd {
    /// Takes ownership of `fd`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open descriptor of this process that nothing else closes or retires (the
    /// caller gives up its own right to do so).
    pub const unsafe fn from_raw(fd: Fd) -> Self {
        OwnedFd(fd)
    }

    /// The raw number (still owned by `self`).
    pub const fn raw(&self) -> Fd {
        self.0
    }

    /// A borrow of the descriptor, valid while `self` is.
    pub const fn as_fd(&self) -> BorrowedFd<'_> {
        BorrowedFd { fd: self.0, _owner: core::marker::PhantomData }
    }

    /// Gives up ownership and returns the number, which nothing can close through the seam any
    /// more: the descriptor is leaked (or handed to code outside the seam).
    pub const fn into_raw(self) -> Fd {
        self.0
    }
}

/// A descriptor borrowed from its owner for `'a`: what [`Syscalls::retire`] accepts (retiring
/// changes what the number refers to, so only its owner, or code the owner lent it to, may do
/// it). Made from an [`OwnedFd`], or unsafely from a raw number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BorrowedFd<'a> {
    fd: Fd,
    _owner: core::marker::PhantomData<&'a OwnedFd>,
}

impl BorrowedFd<'_> {
    /// Borrows a raw number.
    ///
    /// # Safety
    ///
    /// `fd` must be open, and owned by someone who lets the borrower use it (including retiring
    /// it), for as long as the returned value is used.
    pub const unsafe fn borrow_raw(fd: Fd) -> Self {
        BorrowedFd { fd, _owner: core::marker::PhantomData }
    }

    /// The raw number.
    pub const fn raw(self) -> Fd {
        self.fd
    }
}

/// How a path is opened. `O_CLOEXEC` is always added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OpenFlags {
    /// `O_RDWR` instead of `O_RDONLY`.
    pub read_write: bool,
    /// `O_NONBLOCK`.
    pub nonblock: bool,
    /// `O_NOFOLLOW`: fail with `ELOOP` if the last component is a symbolic link.
    pub nofollow: bool,
}

impl OpenFlags {
    /// `O_RDONLY | O_CLOEXEC`.
    pub const READ_ONLY: OpenFlags = OpenFlags { read_write: false, nonblock: false, nofollow: false };
    /// `O_RDWR | O_CLOEXEC`.
    pub const READ_WRITE: OpenFlags = OpenFlags { read_write: true, nonblock: false, nofollow: false };
}

/// What [`Syscalls::open_at`] opens. Both forms add `O_CLOEXEC`.
///
/// These are the two steps of a confined path walk (the reverse file service's): open a trusted
/// directory, then open one component at a time below it, never following a symbolic link, so
/// that renaming a directory or swapping one for a link while the walk runs cannot lead it
/// outside the directory it started from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum OpenAt {
    /// A directory to resolve below: `O_PATH | O_DIRECTORY`, plus `O_NOFOLLOW` unless `follow`
    /// (a symbolic link then fails with `ELOOP` or `ENOTDIR`, anything not a directory with
    /// `ENOTDIR`).
    Dir {
        /// Follow a symbolic link in the last component (only for the trusted start directory).
        follow: bool,
    },
    /// A file to read: `O_RDONLY | O_NONBLOCK | O_NOFOLLOW` (a symbolic link fails with `ELOOP`;
    /// `O_NONBLOCK` so that a FIFO does not block the open; the caller checks the type with
    /// `fstat`).
    File,
}

/// Page protection of a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Prot {
    /// `PROT_READ`.
    Read,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
}

/// The parts of `struct stat` hexrpc reports (probe output, the reverse file service's `stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FileStat {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_mode` (file type and permission bits).
    pub mode: u32,
    /// `st_nlink`.
    pub nlink: u32,
    /// `st_uid`.
    pub uid: u32,
    /// `st_gid`.
    pub gid: u32,
    /// `st_rdev`.
    pub rdev: u64,
    /// `st_size` in bytes.
    pub size: u64,
    /// `st_atime` seconds and nanoseconds.
    pub atime: (i64, i64),
    /// `st_mtime` seconds and nanoseconds.
    pub mtime: (i64, i64),
    /// `st_ctime` seconds and nanoseconds.
    pub ctime: (i64, i64),
}

impl FileStat {
    /// `S_IFMT` mask.
    pub const S_IFMT: u32 = 0o170000;
    /// Regular file.
    pub const S_IFREG: u32 = 0o100000;
    /// Directory.
    pub const S_IFDIR: u32 = 0o040000;
    /// Character device.
    pub const S_IFCHR: u32 = 0o020000;
    /// Symbolic link.
    pub const S_IFLNK: u32 = 0o120000;

    /// True for a regular file.
    pub const fn is_file(&self) -> bool {
        self.mode & Self::S_IFMT == Self::S_IFREG
    }
    /// True for a directory.
    pub const fn is_dir(&self) -> bool {
        self.mode & Self::S_IFMT == Self::S_IFDIR
    }
    /// True for a character device (what `/dev/ion` and `/dev/adsprpc-smd` are).
    pub const fn is_char_device(&self) -> bool {
        self.mode & Self::S_IFMT == Self::S_IFCHR
    }
}

/// The syscall boundary. Everything in hexrpc above this trait is generic over it: the real
/// implementation is [`RustixSys`](crate::RustixSys); the bench implements it with a simulated
/// kernel that decodes every request from the raw number and the raw bytes behind the pointer.
///
/// # Safety
///
/// Implementations must behave as the Linux system calls of the same names do, as far as memory
/// is concerned: [`mmap`](Syscalls::mmap) returns a mapping of at least `len` readable (and, for
/// [`Prot::ReadWrite`], writable) bytes, 8-byte aligned and mapped to the end of its last 8-byte
/// word (as every page-granular mapping is), that stays valid until [`munmap`](Syscalls::munmap)
/// is called on it, and no call reads or writes memory other than what its arguments describe
/// (for `ioctl`: the argument struct and the user pointers inside it, per the driver's ABI).
/// Safe code in this crate relies on this for soundness.
pub unsafe trait Syscalls {
    /// `openat(AT_FDCWD, path, flags | O_CLOEXEC)`.
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<OwnedFd, Errno>;

    /// `openat(dir, path, how)`: `path` relative to the open directory `dir`, or to the current
    /// directory (absolute paths as `open` takes them) when `dir` is `None`. See [`OpenAt`] for
    /// the flags. The default refuses (`ENOSYS`): a seam without it serves no host file to the
    /// reverse service.
    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<OwnedFd, Errno> {
        let _ = (dir, path, how);
        Err(Errno::ENOSYS)
    }

    /// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: the status of `name` in the open directory
    /// `dir` without following a symbolic link (a link reports itself). The default refuses
    /// (`ENOSYS`).
    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        let _ = (dir, name);
        Err(Errno::ENOSYS)
    }

    /// `close(fd)`. The descriptor is gone afterwards even if an error is returned. Takes the
    /// ownership token, so safe code can close only what it owns, once.
    fn close(&self, fd: OwnedFd) -> Result<(), Errno>;

    /// `pread(fd, buf, offset)`: reads at most `buf.len()` bytes at `offset`, without moving a
    /// shared file position. Returns the number of bytes read (0 at end of file).
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno>;

    /// `fstat(fd)`.
    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno>;

    /// `stat(path)` (follows symbolic links) or `lstat(path)` when `follow` is false.
    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno>;

    /// `ioctl(fd, request, arg)`. Returns the non-negative return value of the system call
    /// (which the downstream adsprpc driver uses for positive error codes), or the errno.
    ///
    /// # Safety
    ///
    /// `arg` must point to memory laid out as the driver expects for `request` (at least
    /// `ioc::size(request)` bytes, readable and, if the kernel writes back, writable), and every
    /// user pointer inside it must be valid for what the driver does with it.
    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno>;

    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)`.
    ///
    /// # Safety
    ///
    /// The caller must treat the returned memory as shared with other agents (other mappings
    /// of the same buffer, the DSP): no Rust references may be formed into it while another
    /// agent may write it.
    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno>;

    /// `munmap(addr, len)`.
    ///
    /// # Safety
    ///
    /// `[addr, addr + len)` must be a mapping made by [`mmap`](Syscalls::mmap) of this
    /// implementation that nothing uses any more.
    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno>;

    /// The calling thread's kernel thread id (`gettid`).
    fn thread_id(&self) -> i32;

    /// Interrupts a system call that thread `tid` of this process is blocked in, so that it
    /// returns `EINTR` (the real implementation sends a signal whose handler does nothing and
    /// does not restart system calls). This is how a deadline ends a FastRPC invoke, which has no
    /// timeout of its own: the driver parks the interrupted call.
    fn interrupt(&self, tid: i32) -> Result<(), Errno>;

    /// Retires descriptor `fd`: atomically makes the number refer to a file that refuses every
    /// ioctl (`dup3` of `/dev/null` over it), so the file it referred to is released as soon as
    /// no system call is using it. The number stays the caller's to close.
    ///
    /// This is how an interrupted FastRPC call is abandoned soundly: the driver parks such a
    /// call with the user pointers of its output buffers and resumes it for the next call of the
    /// same thread with the same scalars word on the same file; once the file is unreachable, no
    /// call can resume it, and releasing the file frees it. The default refuses (`ENOSYS`), and
    /// callers then resume instead of abandoning.
    fn retire(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let _ = fd;
        Err(Errno::ENOSYS)
    }

    /// `fcntl(fd, F_DUPFD_CLOEXEC, 0)`: a new descriptor, at the lowest free number, for the file
    /// `fd` refers to; `fd` itself is left alone. This is how a buffer owned by another component
    /// is taken in (an imported dma-buf): the duplicate is the importer's own number, with its own
    /// reference to the file, so the owner may close its number at any time and the importer
    /// closes only what it made. `EBADF` for a number that is not open. The default refuses
    /// (`ENOSYS`).
    fn dup_cloexec(&self, fd: Fd) -> Result<OwnedFd, Errno> {
        let _ = fd;
        Err(Errno::ENOSYS)
    }

    /// `lseek(fd, 0, SEEK_END)`: for a dma-buf, its size (`dma_buf_llseek`, Linux 3.19 and
    /// later, both FastRPC kernels: the only size query a dma-buf answers, since `fstat` of a
    /// 4.9 dma-buf says 0). `ESPIPE` for a pipe or socket. The default refuses (`ENOSYS`).
    fn seek_end(&self, fd: Fd) -> Result<u64, Errno> {
        let _ = fd;
        Err(Errno::ENOSYS)
    }

    /// Which kernel this seam's calls reach, for what the HAL must keep per kernel rather than
    /// per seam value: the DSP identities this process's FastRPC channels hold (the DSP keys
    /// processes by the caller's process id, docs/kernel-rules.md R3). A process has one
    /// kernel, so the default is 0; a seam that simulates several kernels in one process (the
    /// bench) returns a distinct value for each.
    fn kernel_instance(&self) -> u64 {
        0
    }
}

/// A seam written as changes to another seam: `inner` names the seam every call goes to, and a
/// seam overrides only the calls it changes (to inject faults, block, record, gate); every other
/// call, defaulted ones included, is forwarded to `inner` unchanged. Every type that implements
/// this trait implements [`Syscalls`] through it, and so does every `&T` of a seam `T`.
///
/// Implement it with the path (`unsafe impl hexrpc_drivers::SeamHooks for MySeam`) rather than
/// importing the trait where the seam's calls are made: with both traits in scope a call such as
/// `seam.open(..)` on the concrete type would be ambiguous. For the same reason a hook that
/// calls another seam made of hooks names the trait: `Syscalls::pread(&self.inner, ..)`.
///
/// The methods are those of [`Syscalls`], with the same contracts; a unit test of this module
/// fails if [`Syscalls`] gains a method that this trait or its forwarding impl does not carry.
///
/// # Safety
///
/// As for [`Syscalls`]: the overridden calls must keep its memory contract (a hook that touches
/// an ioctl's argument may only do what the driver it stands for does with it, a hook's `mmap`
/// must return a real mapping or an error).
pub unsafe trait SeamHooks {
    /// The seam calls are forwarded to.
    type Inner: Syscalls + ?Sized;

    /// The seam calls are forwarded to.
    fn inner(&self) -> &Self::Inner;

    /// [`Syscalls::open`].
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<OwnedFd, Errno> {
        self.inner().open(path, flags)
    }
    /// [`Syscalls::open_at`].
    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<OwnedFd, Errno> {
        self.inner().open_at(dir, path, how)
    }
    /// [`Syscalls::stat_at`].
    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        self.inner().stat_at(dir, name)
    }
    /// [`Syscalls::close`].
    fn close(&self, fd: OwnedFd) -> Result<(), Errno> {
        self.inner().close(fd)
    }
    /// [`Syscalls::pread`].
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        self.inner().pread(fd, buf, offset)
    }
    /// [`Syscalls::fstat`].
    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        self.inner().fstat(fd)
    }
    /// [`Syscalls::stat`].
    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        self.inner().stat(path, follow)
    }
    /// [`Syscalls::ioctl`].
    ///
    /// # Safety
    ///
    /// As for [`Syscalls::ioctl`].
    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        // SAFETY: the caller upholds `ioctl`'s contract, which we pass on unchanged.
        unsafe { self.inner().ioctl(fd, request, arg) }
    }
    /// [`Syscalls::mmap`].
    ///
    /// # Safety
    ///
    /// As for [`Syscalls::mmap`].
    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
        // SAFETY: the caller upholds `mmap`'s contract, which we pass on unchanged.
        unsafe { self.inner().mmap(fd, len, prot, offset) }
    }
    /// [`Syscalls::munmap`].
    ///
    /// # Safety
    ///
    /// As for [`Syscalls::munmap`].
    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
        // SAFETY: the caller upholds `munmap`'s contract, which we pass on unchanged.
        unsafe { self.inner().munmap(addr, len) }
    }
    /// [`Syscalls::thread_id`].
    fn thread_id(&self) -> i32 {
        self.inner().thread_id()
    }
    /// [`Syscalls::interrupt`].
    fn interrupt(&self, tid: i32) -> Result<(), Errno> {
        self.inner().interrupt(tid)
    }
    /// [`Syscalls::retire`].
    fn retire(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        self.inner().retire(fd)
    }
    /// [`Syscalls::dup_cloexec`].
    fn dup_cloexec(&self, fd: Fd) -> Result<OwnedFd, Errno> {
        self.inner().dup_cloexec(fd)
    }
    /// [`Syscalls::seek_end`].
    fn seek_end(&self, fd: Fd) -> Result<u64, Errno> {
        self.inner().seek_end(fd)
    }
    /// [`Syscalls::kernel_instance`].
    fn kernel_instance(&self) -> u64 {
        self.inner().kernel_instance()
    }
}

// SAFETY: every call goes to the hook of the same name, which keeps the contract (the
// `SeamHooks` contract).
unsafe impl<H: SeamHooks + ?Sized> Syscalls for H {
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<OwnedFd, Errno> {
        SeamHooks::open(self, path, flags)
    }
    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<OwnedFd, Errno> {
        SeamHooks::open_at(self, dir, path, how)
    }
    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        SeamHooks::stat_at(self, dir, name)
    }
    fn close(&self, fd: OwnedFd) -> Result<(), Errno> {
        SeamHooks::close(self, fd)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        SeamHooks::pread(self, fd, buf, offset)
    }
    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        SeamHooks::fstat(self, fd)
    }
    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        SeamHooks::stat(self, path, follow)
    }
    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        // SAFETY: the caller upholds `ioctl`'s contract, which we pass on unchanged.
        unsafe { SeamHooks::ioctl(self, fd, request, arg) }
    }
    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
        // SAFETY: the caller upholds `mmap`'s contract, which we pass on unchanged.
        unsafe { SeamHooks::mmap(self, fd, len, prot, offset) }
    }
    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
        // SAFETY: the caller upholds `munmap`'s contract, which we pass on unchanged.
        unsafe { SeamHooks::munmap(self, addr, len) }
    }
    fn thread_id(&self) -> i32 {
        SeamHooks::thread_id(self)
    }
    fn interrupt(&self, tid: i32) -> Result<(), Errno> {
        SeamHooks::interrupt(self, tid)
    }
    fn retire(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        SeamHooks::retire(self, fd)
    }
    fn dup_cloexec(&self, fd: Fd) -> Result<OwnedFd, Errno> {
        SeamHooks::dup_cloexec(self, fd)
    }
    fn seek_end(&self, fd: Fd) -> Result<u64, Errno> {
        SeamHooks::seek_end(self, fd)
    }
    fn kernel_instance(&self) -> u64 {
        SeamHooks::kernel_instance(self)
    }
}

// SAFETY: changes nothing: every call goes to `T`, which upholds the contract.
unsafe impl<T: Syscalls + ?Sized> SeamHooks for &T {
    type Inner = T;
    fn inner(&self) -> &T {
        self
    }
}

/// A seam that refuses every call with `ENOSYS` and reports thread id 1: the inner seam of a
/// test seam that implements only the calls it needs (its [`SeamHooks`] override those, and
/// everything else, including any call the trait gains later, is refused).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefusingSys;

// SAFETY: no call reads or writes memory, and `mmap` never returns a mapping.
unsafe impl Syscalls for RefusingSys {
    fn open(&self, _: &CStr, _: OpenFlags) -> Result<OwnedFd, Errno> {
        Err(Errno::ENOSYS)
    }
    fn close(&self, fd: OwnedFd) -> Result<(), Errno> {
        // Nothing was ever opened here: the number is someone else's, left alone.
        let _ = fd.into_raw();
        Err(Errno::ENOSYS)
    }
    fn pread(&self, _: Fd, _: &mut [u8], _: u64) -> Result<usize, Errno> {
        Err(Errno::ENOSYS)
    }
    fn fstat(&self, _: Fd) -> Result<FileStat, Errno> {
        Err(Errno::ENOSYS)
    }
    fn stat(&self, _: &CStr, _: bool) -> Result<FileStat, Errno> {
        Err(Errno::ENOSYS)
    }
    unsafe fn ioctl(&self, _: Fd, _: u32, _: *mut c_void) -> Result<i32, Errno> {
        Err(Errno::ENOSYS)
    }
    unsafe fn mmap(&self, _: Fd, _: usize, _: Prot, _: u64) -> Result<NonNull<u8>, Errno> {
        Err(Errno::ENOSYS)
    }
    unsafe fn munmap(&self, _: NonNull<u8>, _: usize) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
    fn thread_id(&self) -> i32 {
        1
    }
    fn interrupt(&self, _: i32) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
}

/// An ioctl argument the driver reads and writes as plain bytes: no field of it is a user
/// pointer that the driver follows. Only such arguments go through the safe [`ioctl_plain`].
///
/// # Safety
///
/// Implement it only for a `#[repr(C)]` ABI struct (or integer) none of whose fields the driver
/// dereferences as a user address for any request declared with it.
pub(crate) unsafe trait PlainArg {}

// SAFETY: a bare integer holds no pointer.
unsafe impl PlainArg for u32 {}

/// Makes an ioctl whose argument is exactly one `T` that holds no user pointer the driver follows.
/// The request carries its argument type, so the number's size field is `size_of::<T>()`.
pub(crate) fn ioctl_plain<S: Syscalls + ?Sized, T: PlainArg>(sys: &S, fd: Fd, request: Ioctl<T>, arg: &mut T) -> Result<i32, Errno> {
    // SAFETY: `arg` is a live, exclusive `T`, and `request` was declared from `T`, so its size
    // field is `size_of::<T>()`; `T: PlainArg` holds no user pointer the driver follows.
    unsafe { sys.ioctl(fd, request.raw(), (arg as *mut T).cast()) }
}

/// Makes an ioctl whose argument is one `T` that holds user pointers the driver follows (an
/// invoke's argument array, an init's ELF image, a cache operation's address range).
///
/// # Safety
///
/// Every user pointer inside `arg` must be valid for what the driver does with it for `request`
/// (the ranges it reads readable, the ranges it writes writable and not referenced by Rust
/// references), for the duration of the call; and, if the driver parks an interrupted call that
/// it may resume later, for as long as it can be resumed.
pub(crate) unsafe fn ioctl_with<S: Syscalls + ?Sized, T>(sys: &S, fd: Fd, request: Ioctl<T>, arg: &mut T) -> Result<i32, Errno> {
    // SAFETY: `arg` is a live, exclusive `T` of the request's size (the request was declared
    // from `T`); the caller vouches for the pointers inside it.
    unsafe { sys.ioctl(fd, request.raw(), (arg as *mut T).cast()) }
}

/// Makes an `_IO` ioctl: no argument (a null pointer is passed).
pub(crate) fn ioctl_none<S: Syscalls + ?Sized>(sys: &S, fd: Fd, request: Ioctl<()>) -> Result<i32, Errno> {
    // SAFETY: the request's size field is 0 (`_IO`): the driver reads and writes no memory.
    unsafe { sys.ioctl(fd, request.raw(), core::ptr::null_mut()) }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;
    use std::vec::Vec;

    /// The names of the `fn`s declared in the item that starts with `header` (up to its closing
    /// brace at column 0).
    fn fns_of(src: &str, header: &str) -> Vec<String> {
        let start = src.find(header).unwrap_or_else(|| panic!("`{header}` not found"));
        let body = &src[start..];
        let end = body.find("\n}\n").expect("item not closed at column 0");
        body[..end]
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with("//"))
            .filter_map(|l| l.strip_prefix("fn ").or_else(|| l.strip_prefix("unsafe fn ")))
            .map(|l| l[..l.find(['(', '<']).unwrap()].into())
            .collect()
    }

    /// Every method of `Syscalls` has a forwarding hook in `SeamHooks` and is forwarded to it by
    /// the blanket impl, so a seam written with hooks cannot fall back to a trait default (such
    /// as `ENOSYS`) for a call its inner seam implements.
    #[test]
    fn seam_hooks_forward_every_syscall() {
        let src = include_str!("sys.rs");
        let mut calls = fns_of(src, "pub unsafe trait Syscalls {");
        let mut hooks = fns_of(src, "pub unsafe trait SeamHooks {");
        let mut forwarded = fns_of(src, "unsafe impl<H: SeamHooks + ?Sized> Syscalls for H {");
        assert!(calls.len() >= 13, "the parse found too few methods: {calls:?}");
        assert_eq!(hooks.iter().position(|f| f == "inner"), Some(0), "{hooks:?}");
        hooks.remove(0);
        calls.sort();
        hooks.sort();
        forwarded.sort();
        assert_eq!(hooks, calls, "SeamHooks lacks a hook for a Syscalls method");
        assert_eq!(forwarded, calls, "the blanket impl of Syscalls for SeamHooks does not forward a method");
    }
}
