//! What the reverse service may serve: the file policy (allowlisted directories and limits) and
//! the table of in-memory library images.
//!
//! # Path rules
//!
//! A DSP-supplied name is accepted only if it is 1 to [`MAX_NAME_LEN`] bytes of printable ASCII
//! (0x20..=0x7E) and every `/`-separated component is non-empty and neither `.` nor `..` (so no
//! `//`, no trailing `/`, no traversal). Then:
//!
//! 1. a name without `/` that equals a registered image name is served from memory;
//! 2. an absolute name must lie below one of the allowed directories (component-wise: `/dsp/cdspx`
//!    is not below `/dsp/cdsp`);
//! 3. a relative name is looked up below each allowed directory in order; the first that has it
//!    wins (quic's search, but with the policy's directories instead of `ADSP_LIBRARY_PATH`; the
//!    DSP's environment-variable name and delimiter are validated and ignored).
//!
//! # Resolution by descriptors
//!
//! The allowed directories themselves are trusted (board data, e.g. `/dsp` may be a link to
//! `/vendor/dsp`): each lookup opens the allowed directory as a descriptor
//! ([`OpenAt::Dir`] with `follow`). Below it the name is resolved one component at a time,
//! each relative to the descriptor of the directory before it: an intermediate component is
//! opened with `O_PATH | O_DIRECTORY | O_NOFOLLOW` (a symbolic link or anything not a
//! directory fails), the final component must be a regular file by `fstatat(..,
//! AT_SYMLINK_NOFOLLOW)` and is then opened with `O_NOFOLLOW | O_NONBLOCK` (read-only), and
//! `fstat` of the opened descriptor must be a regular file with the same (dev, ino). No path
//! string below the allowed directory is ever handed to the kernel, so swapping a directory
//! for a symbolic link (or renaming one) while a lookup runs cannot make it leave the directory
//! it started from; and a device or FIFO is never opened.
//!
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` would do the walk in one call, but only
//! from Linux 5.6 (AGNOS runs 4.9); the component walk is the one path, on every kernel.
//!
//! **Limit**: a directory that is *moved out* of the allowed tree after the walk opened it
//! still serves the files below it for that one lookup (the descriptor names the directory,
//! not its path). Doing that needs write access below an allowed directory, and the file was
//! inside the allowlist when the walk reached its directory.

use core::ffi::CStr;

use hexrpc_bsp::{Board, Limits};
use hexrpc_drivers::{Errno, Fd, FileStat, OpenAt, OwnedFd, Syscalls};

use super::RequestError;

/// Most allowed directories.
pub const MAX_DIRS: usize = 8;
/// Longest allowed directory, in bytes.
pub const MAX_DIR_LEN: usize = 128;
/// Longest DSP-supplied path, in bytes, without the NUL.
pub const MAX_NAME_LEN: usize = 255;
/// Most registered library images: one per library a HAL session can hold open
/// ([`hexrpc_hal::MAX_LIBRARIES`]), since each open library keeps its image registered.
pub const MAX_IMAGES: usize = hexrpc_hal::MAX_LIBRARIES;
/// Longest image name, in bytes.
pub const MAX_IMAGE_NAME: usize = 64;
/// Most virtual file handles, whatever the limits say.
pub const MAX_FILES: usize = 64;

const PATH_BUF: usize = MAX_DIR_LEN + 1 + MAX_NAME_LEN + 1;

/// Why a policy could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PolicyError {
    /// More than [`MAX_DIRS`] directories.
    TooManyDirs,
    /// A directory is not absolute, is longer than [`MAX_DIR_LEN`], is `/`, ends in `/`, or has an
    /// empty, `.` or `..` component or a non-printable byte.
    BadDir,
    /// A line of a policy text is not understood (its 1-based number).
    Syntax(usize),
}

impl core::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PolicyError::TooManyDirs => write!(f, "more than {MAX_DIRS} directories"),
            PolicyError::BadDir => write!(f, "a directory must be absolute, clean and at most {MAX_DIR_LEN} bytes"),
            PolicyError::Syntax(line) => write!(f, "policy line {line} not understood"),
        }
    }
}

impl core::error::Error for PolicyError {}

fn printable(b: &[u8]) -> bool {
    b.iter().all(|&c| (0x20..=0x7E).contains(&c))
}

/// True if every `/`-separated component is non-empty and not `.` or `..`.
fn clean_components(rel: &[u8]) -> bool {
    !rel.is_empty() && rel.split(|&c| c == b'/').all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// The explicit file policy: allowed directories (read-only) and the limits of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePolicy {
    dirs: heapless::Vec<heapless::String<MAX_DIR_LEN>, MAX_DIRS>,
    limits: Limits,
}

impl FilePolicy {
    /// A policy serving `dirs` (each absolute and clean) within `limits`.
    pub fn new(dirs: &[&str], limits: Limits) -> Result<Self, PolicyError> {
        let mut p = FilePolicy { dirs: heapless::Vec::new(), limits };
        for d in dirs {
            p.add_dir(d)?;
        }
        Ok(p)
    }

    /// The board's default policy: its `dsp_dirs` and `limits`.
    pub fn for_board(board: &Board) -> Result<Self, PolicyError> {
        Self::new(board.dsp_dirs, board.limits)
    }

    /// Adds an allowed directory.
    pub fn add_dir(&mut self, dir: &str) -> Result<(), PolicyError> {
        let b = dir.as_bytes();
        if b.len() > MAX_DIR_LEN || b.len() < 2 || b[0] != b'/' || !printable(b) || !clean_components(&b[1..]) {
            return Err(PolicyError::BadDir);
        }
        let mut s = heapless::String::new();
        s.push_str(dir).map_err(|_| PolicyError::BadDir)?;
        self.dirs.push(s).map_err(|_| PolicyError::TooManyDirs)
    }

    /// Parses a policy text over `base` limits. One directive per line, `#` starts a comment:
    /// `dir /abs/path`, `max_request BYTES`, `max_file_bytes BYTES`, `max_handles N`,
    /// `max_map_bytes BYTES`. The policy starts with no directory (only `dir` lines add some);
    /// limits not named keep `base`'s values.
    pub fn parse(text: &str, base: Limits) -> Result<Self, PolicyError> {
        let mut p = FilePolicy { dirs: heapless::Vec::new(), limits: base };
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
                return Err(PolicyError::Syntax(i + 1));
            };
            let num = || value.parse::<u64>().map_err(|_| PolicyError::Syntax(i + 1));
            match key {
                "dir" => p.add_dir(value)?,
                "max_request" => p.limits.max_reverse_request = u32::try_from(num()?).map_err(|_| PolicyError::Syntax(i + 1))?,
                "max_file_bytes" => p.limits.max_reverse_file_bytes = num()?,
                "max_handles" => p.limits.max_reverse_handles = u16::try_from(num()?).map_err(|_| PolicyError::Syntax(i + 1))?,
                "max_map_bytes" => p.limits.max_dsp_map_bytes = num()?,
                _ => return Err(PolicyError::Syntax(i + 1)),
            }
        }
        Ok(p)
    }

    /// The allowed directories.
    pub fn dirs(&self) -> impl Iterator<Item = &str> {
        self.dirs.iter().map(|d| d.as_str())
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Most virtual file handles open at once (the limit, capped at [`MAX_FILES`]).
    pub fn max_handles(&self) -> usize {
        (self.limits.max_reverse_handles as usize).min(MAX_FILES)
    }

    /// Checks a DSP-supplied name (without its NUL) against the path rules, without touching
    /// the file system. `Ok` means it may be looked up.
    pub fn check_name(&self, name: &[u8]) -> Result<(), RequestError> {
        if name.len() > MAX_NAME_LEN {
            return Err(RequestError::BadSize);
        }
        if name.is_empty() || !printable(name) {
            return Err(RequestError::NotAllowed);
        }
        let rel = if name[0] == b'/' { self.below_dir(name).map(|(_, rel)| rel).ok_or(RequestError::NotAllowed)? } else { name };
        if !clean_components(rel) {
            return Err(RequestError::NotAllowed);
        }
        Ok(())
    }

    /// For an absolute name: the first allowed directory it is below, and the rest.
    fn below_dir<'n>(&self, name: &'n [u8]) -> Option<(usize, &'n [u8])> {
        self.dirs.iter().enumerate().find_map(|(i, d)| {
            let d = d.as_bytes();
            let rest = name.strip_prefix(d)?.strip_prefix(b"/")?;
            Some((i, rest))
        })
    }

    /// Opens a host file for reading under the path rules (module docs). Returns the descriptor
    /// and its `fstat`.
    pub fn open_host<S: Syscalls + ?Sized>(&self, sys: &S, name: &[u8]) -> Result<(OwnedFd, FileStat), RequestError> {
        self.check_name(name)?;
        if name[0] == b'/' {
            let (i, rel) = self.below_dir(name).ok_or(RequestError::NotAllowed)?;
            return open_below(sys, self.dirs[i].as_bytes(), rel);
        }
        for d in &self.dirs {
            match open_below(sys, d.as_bytes(), name) {
                Err(RequestError::NoSuchFile) => continue,
                other => return other,
            }
        }
        Err(RequestError::NoSuchFile)
    }
}

/// A NUL-terminated name in fixed capacity (an allowed directory or one component).
struct NameBuf {
    buf: [u8; PATH_BUF],
    len: usize,
}

impl NameBuf {
    fn of(bytes: &[u8]) -> Result<Self, RequestError> {
        let mut n = NameBuf { buf: [0; PATH_BUF], len: 0 };
        if bytes.len() >= PATH_BUF {
            return Err(RequestError::BadSize);
        }
        n.buf[..bytes.len()].copy_from_slice(bytes);
        n.len = bytes.len();
        Ok(n)
    }

    fn as_cstr(&self) -> Result<&CStr, RequestError> {
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).map_err(|_| RequestError::NotAllowed)
    }
}

/// A descriptor the walk owns, closed when dropped (a failed close is logged).
struct WalkFd<'s, S: Syscalls + ?Sized> {
    sys: &'s S,
    fd: Option<OwnedFd>,
}

impl<'s, S: Syscalls + ?Sized> WalkFd<'s, S> {
    fn new(sys: &'s S, fd: OwnedFd) -> Self {
        WalkFd { sys, fd: Some(fd) }
    }

    /// The raw number, for calls relative to it.
    fn raw(&self) -> Fd {
        self.fd.as_ref().map_or(Fd(-1), OwnedFd::raw)
    }

    /// Hands the descriptor to the caller, who closes it.
    fn keep(mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
}

impl<S: Syscalls + ?Sized> Drop for WalkFd<'_, S> {
    fn drop(&mut self) {
        if let Some(fd) = self.fd.take() {
            let n = fd.raw().0;
            if let Err(e) = self.sys.close(fd) {
                log::warn!("reverse: closing descriptor {n} of a path walk failed: {e}");
            }
        }
    }
}

fn is_symlink(st: &FileStat) -> bool {
    st.mode & FileStat::S_IFMT == FileStat::S_IFLNK
}

/// Opens `dir/rel` (rel already checked clean) component by component from a descriptor of
/// `dir`, following no symbolic link below `dir` (module docs).
fn open_below<S: Syscalls + ?Sized>(sys: &S, dir: &[u8], rel: &[u8]) -> Result<(OwnedFd, FileStat), RequestError> {
    let root = NameBuf::of(dir)?;
    let fd = sys.open_at(None, root.as_cstr()?, OpenAt::Dir { follow: true }).map_err(|e| match e {
        Errno::ENOENT | Errno::ENOTDIR => RequestError::NoSuchFile,
        _ => RequestError::NotAllowed,
    })?;
    let mut cur = WalkFd::new(sys, fd);
    let mut comps = rel.split(|&c| c == b'/').peekable();
    while let Some(comp) = comps.next() {
        let name = NameBuf::of(comp)?;
        let name = name.as_cstr()?;
        if comps.peek().is_some() {
            let next = match sys.open_at(Some(cur.raw()), name, OpenAt::Dir { follow: false }) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Err(RequestError::NoSuchFile),
                // Not a directory: a symbolic link is refused, a file means "no such path".
                Err(Errno::ENOTDIR) => {
                    return match sys.stat_at(cur.raw(), name) {
                        Ok(st) if !is_symlink(&st) => Err(RequestError::NoSuchFile),
                        _ => Err(RequestError::NotAllowed),
                    }
                }
                Err(_) => return Err(RequestError::NotAllowed),
            };
            cur = WalkFd::new(sys, next);
        } else {
            let seen = sys.stat_at(cur.raw(), name).map_err(|e| match e {
                Errno::ENOENT => RequestError::NoSuchFile,
                _ => RequestError::NotAllowed,
            })?;
            if !seen.is_file() {
                return Err(RequestError::NotAllowed);
            }
            let opened = sys.open_at(Some(cur.raw()), name, OpenAt::File).map_err(|e| match e {
                Errno::ENOENT => RequestError::NoSuchFile,
                _ => RequestError::NotAllowed,
            })?;
            let file = WalkFd::new(sys, opened);
            return match sys.fstat(file.raw()) {
                Ok(st) if st.is_file() && st.dev == seen.dev && st.ino == seen.ino => {
                    file.keep().map(|fd| (fd, st)).ok_or(RequestError::NotAllowed)
                }
                _ => Err(RequestError::NotAllowed),
            };
        }
    }
    // `rel` is non-empty (checked clean), so the loop returned.
    Err(RequestError::NotAllowed)
}

/// Why an image could not be registered or unregistered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ImageError {
    /// The name is empty, longer than [`MAX_IMAGE_NAME`], has a `/` or a non-printable byte, or
    /// is `.` / `..`.
    BadName,
    /// An image of that name is already registered.
    Duplicate,
    /// [`MAX_IMAGES`] images are registered.
    Full,
    /// No image of that name is registered.
    NotFound,
}

impl core::fmt::Display for ImageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ImageError::BadName => "bad image name",
            ImageError::Duplicate => "an image of that name is registered",
            ImageError::Full => "image table full",
            ImageError::NotFound => "no image of that name",
        })
    }
}

impl core::error::Error for ImageError {}

/// The bytes of a registered library image: borrowed for `'img`, or (feature `std`) shared
/// with whoever opened the library, so the last holder frees them. Cloning never copies bytes.
#[derive(Clone, Debug)]
pub enum ImageBytes<'img> {
    /// Borrowed for the service's image lifetime.
    Borrowed(&'img [u8]),
    /// Owned, shared (feature `std`).
    #[cfg(feature = "std")]
    Shared(std::sync::Arc<[u8]>),
}

impl core::ops::Deref for ImageBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ImageBytes::Borrowed(b) => b,
            #[cfg(feature = "std")]
            ImageBytes::Shared(b) => b,
        }
    }
}

impl<'img> From<&'img [u8]> for ImageBytes<'img> {
    fn from(b: &'img [u8]) -> Self {
        ImageBytes::Borrowed(b)
    }
}

impl<'img, const N: usize> From<&'img [u8; N]> for ImageBytes<'img> {
    fn from(b: &'img [u8; N]) -> Self {
        ImageBytes::Borrowed(b)
    }
}

#[cfg(feature = "std")]
impl From<std::sync::Arc<[u8]>> for ImageBytes<'_> {
    fn from(b: std::sync::Arc<[u8]>) -> Self {
        ImageBytes::Shared(b)
    }
}

/// Library images served from memory by unique name. An open handle keeps its own reference to
/// the bytes, so it keeps reading valid bytes even after its image is unregistered
/// (unregistering only stops new opens).
#[derive(Debug, Default)]
pub struct ImageTable<'img> {
    images: heapless::Vec<(heapless::String<MAX_IMAGE_NAME>, ImageBytes<'img>), MAX_IMAGES>,
}

impl<'img> ImageTable<'img> {
    /// An empty table.
    pub const fn new() -> Self {
        ImageTable { images: heapless::Vec::new() }
    }

    /// Registers `bytes` under `name`.
    pub fn register(&mut self, name: &str, bytes: impl Into<ImageBytes<'img>>) -> Result<(), ImageError> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > MAX_IMAGE_NAME || !printable(b) || b.contains(&b'/') || name == "." || name == ".." {
            return Err(ImageError::BadName);
        }
        if self.find(b).is_some() {
            return Err(ImageError::Duplicate);
        }
        let mut s = heapless::String::new();
        s.push_str(name).map_err(|_| ImageError::BadName)?;
        self.images.push((s, bytes.into())).map_err(|_| ImageError::Full)
    }

    /// Removes the image `name`.
    pub fn unregister(&mut self, name: &str) -> Result<(), ImageError> {
        let i = self.images.iter().position(|(n, _)| n.as_str() == name).ok_or(ImageError::NotFound)?;
        self.images.swap_remove(i);
        Ok(())
    }

    /// The bytes of the image called exactly `name`.
    pub fn find(&self, name: &[u8]) -> Option<ImageBytes<'img>> {
        self.images.iter().find(|(n, _)| n.as_bytes() == name).map(|(_, b)| b.clone())
    }

    /// Number of registered images.
    pub fn len(&self) -> usize {
        self.images.len()
    }

    /// True if none is registered.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Removes every image.
    pub fn clear(&mut self) {
        self.images.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = hexrpc_bsp::BENCH.limits;

    #[test]
    fn directories_must_be_clean() {
        assert!(FilePolicy::new(&["/dsp/cdsp", "/dsp"], LIMITS).is_ok());
        for bad in ["dsp", "/", "/dsp/", "/dsp//x", "/dsp/../etc", "/dsp/./x", "/d\u{7f}"] {
            assert_eq!(FilePolicy::new(&[bad], LIMITS).err(), Some(PolicyError::BadDir), "{bad}");
        }
        let many = ["/a"; MAX_DIRS + 1];
        assert_eq!(FilePolicy::new(&many, LIMITS).err(), Some(PolicyError::TooManyDirs));
        assert_eq!(FilePolicy::for_board(&hexrpc_bsp::COMMA_THREE).unwrap().dirs().count(), 2);
    }

    #[test]
    fn names_are_checked_component_wise() {
        let p = FilePolicy::new(&["/dsp/cdsp", "/vendor/dsp"], LIMITS).unwrap();
        for ok in ["libfoo.so", "sub/lib.so", "/dsp/cdsp/lib.so", "/vendor/dsp/a/b", "a b"] {
            assert_eq!(p.check_name(ok.as_bytes()), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../etc/passwd",
            "a/../../etc",
            "./x",
            "a//b",
            "a/",
            "/etc/passwd",
            "/dsp/cdspx/lib",
            "/dsp/cdsp",
            "/dsp/cdsp/",
            "/dsp/cdsp/../../etc/passwd",
            "x\ty",
            "x\u{80}",
        ] {
            assert_eq!(p.check_name(bad.as_bytes()), Err(RequestError::NotAllowed), "{bad:?}");
        }
        assert_eq!(p.check_name(&[b'a'; MAX_NAME_LEN + 1]), Err(RequestError::BadSize));
        assert_eq!(p.check_name(&[b'a'; MAX_NAME_LEN]), Ok(()));
    }

    #[test]
    fn policy_text() {
        let p = FilePolicy::parse("# test\ndir /a/b\nmax_request 4096 # small\nmax_handles 3\n", LIMITS).unwrap();
        assert_eq!(p.dirs().collect::<heapless::Vec<_, 4>>().as_slice(), &["/a/b"]);
        assert_eq!(p.limits().max_reverse_request, 4096);
        assert_eq!(p.max_handles(), 3);
        assert_eq!(p.limits().max_dsp_map_bytes, LIMITS.max_dsp_map_bytes);
        assert_eq!(FilePolicy::parse("dir", LIMITS).err(), Some(PolicyError::Syntax(1)));
        assert_eq!(FilePolicy::parse("\nbogus 1", LIMITS).err(), Some(PolicyError::Syntax(2)));
        assert_eq!(FilePolicy::parse("max_handles 70000", LIMITS).err(), Some(PolicyError::Syntax(1)));
        assert_eq!(FilePolicy::parse("dir ../x", LIMITS).err(), Some(PolicyError::BadDir));
    }

    #[test]
    fn image_names_are_unique_and_plain() {
        static A: [u8; 3] = [1, 2, 3];
        let mut t = ImageTable::new();
        t.register("tinylib", &A).unwrap();
        assert_eq!(t.register("tinylib", &A), Err(ImageError::Duplicate));
        for bad in ["", "a/b", "..", ".", "x\n"] {
            assert_eq!(t.register(bad, &A), Err(ImageError::BadName), "{bad:?}");
        }
        assert_eq!(t.find(b"tinylib").as_deref(), Some(&A[..]));
        assert!(t.find(b"tiny").is_none());
        t.unregister("tinylib").unwrap();
        assert_eq!(t.unregister("tinylib"), Err(ImageError::NotFound));
        for i in 0..MAX_IMAGES {
            let mut n = heapless::String::<8>::new();
            core::fmt::Write::write_fmt(&mut n, format_args!("i{i}")).unwrap();
            t.register(&n, &A).unwrap();
        }
        assert_eq!(t.register("more", &A), Err(ImageError::Full));
    }
}
