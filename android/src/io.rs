//! The CLI's file inputs and outputs, hardened: bounded reads of regular files only, and reports
//! written atomically without following symbolic links.
//!
//! * [`read_bounded`] opens with `O_NONBLOCK | O_NOCTTY` (a FIFO cannot block the open), checks
//!   with `fstat` on the opened descriptor that it is a regular file (a device such as
//!   `/dev/zero`, a FIFO, a socket or a directory is refused before any byte is read), and reads
//!   at most `limit + 1` bytes, so a file over the limit is refused without being read whole.
//! * [`write_atomic`] writes through a temporary file created with `O_CREAT | O_EXCL |
//!   O_NOFOLLOW` under a unique name in the target's directory, then renames it over the target.
//!   An existing target must be a regular file: a symbolic link, a device node, a FIFO or a
//!   directory is refused (rename would replace the link itself, never its target, but a report
//!   is not allowed to turn `/dev/full` or a link into something else). `-` means stdout.
//! * [`check_empty_dir`] and [`make_empty_dir`] take a directory for a command's output files
//!   (`capture --dir`, `run --capture`): new or empty, and never a symbolic link (the same rule
//!   as for output files: a link is refused, not followed).
//! * [`same_file`] tells whether two paths name the same file (device and inode once it
//!   exists, the resolved path before), so an output never overwrites an input.
//! * [`escape`] makes names from the command line or from files safe to print on a terminal.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The largest request file `reverse-replay` reads (a request payload is at most 1 MiB on every
/// board, plus the header).
pub const MAX_REQUEST_FILE: u64 = (1 << 20) + 512;
/// The largest policy file.
pub const MAX_POLICY_FILE: u64 = 64 * 1024;
/// The largest library image (the DSP's loader takes far less; a library is published from
/// memory).
pub const MAX_LIBRARY_FILE: u64 = 64 << 20;

/// Why an input file could not be used.
#[derive(Debug)]
pub enum InputError {
    /// Opening or reading failed.
    Io(std::io::Error),
    /// It is not a regular file (what it is).
    NotRegular(&'static str),
    /// It is larger than the limit for its kind.
    TooLarge {
        /// The limit.
        limit: u64,
    },
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Io(e) => write!(f, "{e}"),
            InputError::NotRegular(what) => write!(f, "not a regular file ({what}); refused before reading"),
            InputError::TooLarge { limit } => write!(f, "larger than {} (the limit for this input); refused", crate::human::bytes(*limit)),
        }
    }
}

fn kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Reads the regular file at `path`, at most `limit` bytes; anything else is refused before a
/// byte is read.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let flags = (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(InputError::Io)?;
    let meta = file.metadata().map_err(InputError::Io)?;
    if !meta.file_type().is_file() {
        return Err(InputError::NotRegular(kind(meta.file_type())));
    }
    if meta.len() > limit {
        return Err(InputError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow between fstat and read: never read more than limit + 1.
    file.take(limit + 1).read_to_end(&mut bytes).map_err(InputError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge { limit });
    }
    Ok(bytes)
}

/// Reads a UTF-8 text file with [`read_bounded`].
pub fn read_text(path: &Path, limit: u64) -> Result<String, InputError> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|_| InputError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")))
}

/// Where a report goes: stdout (`-`) or a file replaced atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Standard output.
    Stdout,
    /// A file.
    File(PathBuf),
}

impl Output {
    /// `-` is stdout; anything else a path.
    pub fn from_arg(p: PathBuf) -> Output {
        if p.as_os_str() == "-" {
            Output::Stdout
        } else {
            Output::File(p)
        }
    }
}

/// Why a report could not be written.
#[derive(Debug)]
pub enum OutputError {
    /// The target exists and is not a regular file (what it is).
    NotRegular(&'static str),
    /// The target names no file (ends in `/` or `..`).
    NoFileName,
    /// Creating, writing, syncing or renaming failed (the step).
    Io(&'static str, std::io::Error),
}

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutputError::NotRegular(what) => write!(f, "the target is {what}, not a regular file; refused"),
            OutputError::NoFileName => f.write_str("the target names no file"),
            OutputError::Io(step, e) => write!(f, "{step}: {e}"),
        }
    }
}

/// Writes `bytes` to `path` atomically: a unique `O_EXCL | O_NOFOLLOW` temporary file in the
/// same directory, synced, then renamed over the target. An existing target that is not a
/// regular file (a symbolic link included) is refused and left alone.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => return Err(OutputError::NotRegular(kind(m.file_type()))),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(OutputError::Io("inspecting the target", e)),
    }
    let name = path.file_name().ok_or(OutputError::NoFileName)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut attempt = 0u32;
    let (tmp, mut file) = loop {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{}.{attempt}.tmp", std::process::id(), nonce()));
        let tmp = dir.join(tmp_name);
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).custom_flags(nofollow).open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(OutputError::Io("creating the temporary file", e)),
        }
    };
    let r = file
        .write_all(bytes)
        .map_err(|e| OutputError::Io("writing", e))
        .and_then(|_| file.sync_all().map_err(|e| OutputError::Io("syncing", e)))
        .and_then(|_| {
            // Checked again just before the rename: a link or node put there meanwhile is still
            // refused (rename would replace the link itself, not follow it).
            match std::fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_file() => Err(OutputError::NotRegular(kind(m.file_type()))),
                _ => std::fs::rename(&tmp, path).map_err(|e| OutputError::Io("renaming into place", e)),
            }
        });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// Why a directory cannot take a command's output files.
#[derive(Debug)]
pub enum DirError {
    /// It is a symbolic link (refused, never followed).
    Link,
    /// It exists and is not a directory (what it is).
    NotDirectory(&'static str),
    /// It holds files already (of another run: they would be mixed in or overwritten).
    NotEmpty,
    /// Inspecting or creating it failed (the step).
    Io(&'static str, std::io::Error),
}

impl std::fmt::Display for DirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirError::Link => f.write_str("is a symbolic link; refused (name the directory itself)"),
            DirError::NotDirectory(what) => write!(f, "is {what}, not a directory"),
            DirError::NotEmpty => {
                f.write_str("is not empty (its files would be mixed with this run's or overwritten); choose an empty or new directory")
            }
            DirError::Io(step, e) => write!(f, "{step}: {e}"),
        }
    }
}

/// Checks, without changing anything, that `dir` can take a command's output files: it does
/// not exist yet, or it is an empty directory; a symbolic link is refused (also when written
/// with a trailing `/`, which would resolve it). Returns the path as checked (trailing `/` and
/// `.` components dropped), which is the one to write under.
pub fn check_empty_dir(dir: &Path) -> Result<PathBuf, DirError> {
    let path: PathBuf = dir.components().collect();
    if path.as_os_str().is_empty() {
        return Err(DirError::Io("no directory named", std::io::Error::from(std::io::ErrorKind::InvalidInput)));
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => Err(DirError::Link),
        Ok(m) if !m.is_dir() => Err(DirError::NotDirectory(kind(m.file_type()))),
        Ok(_) => match std::fs::read_dir(&path).map_err(|e| DirError::Io("listing it", e))?.next() {
            None => Ok(path),
            Some(_) => Err(DirError::NotEmpty),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(path),
        Err(e) => Err(DirError::Io("inspecting it", e)),
    }
}

/// [`check_empty_dir`], then creates the directory (and its parents) if it does not exist.
/// Returns the path to write under.
pub fn make_empty_dir(dir: &Path) -> Result<PathBuf, DirError> {
    let path = check_empty_dir(dir)?;
    std::fs::create_dir_all(&path).map_err(|e| DirError::Io("creating it", e))?;
    // Checked again: it must be a real directory now, and still empty.
    check_empty_dir(&path)
}

/// What a path names, to tell whether two paths are the same file: the device and inode of an
/// existing file (links resolved), else the path with its directory resolved.
#[derive(Debug, PartialEq, Eq)]
pub enum FileId {
    /// An existing file: device and inode.
    Inode(u64, u64),
    /// A file that does not exist yet: its resolved directory and its name.
    Path(PathBuf),
}

/// The [`FileId`] of `path`.
pub fn file_id(path: &Path) -> FileId {
    use std::os::unix::fs::MetadataExt as _;
    if let Ok(m) = std::fs::metadata(path) {
        return FileId::Inode(m.dev(), m.ino());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(d), Some(name)) => FileId::Path(d.join(name)),
        _ => FileId::Path(path.components().collect()),
    }
}

/// True if `a` and `b` name the same file (however spelled, through links or hard links), or
/// the same not-yet-existing path.
pub fn same_file(a: &Path, b: &Path) -> bool {
    file_id(a) == file_id(b)
}

fn nonce() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

/// Writes a report to `out`; errors go to stderr and the log. Exit code 0 or 1.
pub fn emit(out: &Output, report: &[u8]) -> std::process::ExitCode {
    match out {
        Output::Stdout => print_bytes(report),
        Output::File(path) => match write_atomic(path, report) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                error(&format!("--output {}: {e}", escape(&path.to_string_lossy())));
                std::process::ExitCode::from(1)
            }
        },
    }
}

/// `s` with control characters (C0, DEL, C1) and backslashes escaped, safe to print on a
/// terminal.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Writes `s` to stdout (see [`print_bytes`]).
pub fn print(s: &str) -> ExitCode {
    print_bytes(s.as_bytes())
}

/// Writes `bytes` to stdout; a closed pipe is not an error, any other failure is reported.
pub fn print_bytes(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`hexrpc abi | head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            error(&format!("writing to stdout: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Reports an error: on stderr and in the log (logcat on Android).
pub fn error(msg: &str) {
    crate::logging::error(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hexrpc-io-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn non_regular_inputs_are_refused_before_reading() {
        assert!(matches!(read_bounded(Path::new("/dev/zero"), 16), Err(InputError::NotRegular("a character device"))));
        assert!(matches!(read_bounded(Path::new("/"), 16), Err(InputError::NotRegular("a directory"))));
        assert!(matches!(read_bounded(Path::new("/nonexistent/x"), 16), Err(InputError::Io(_))));
        let d = scratch("in");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(matches!(read_bounded(&fifo, 16), Err(InputError::NotRegular("a FIFO"))), "a FIFO with no writer must not block");
        let big = d.join("big");
        std::fs::write(&big, vec![1u8; 100]).unwrap();
        assert!(matches!(read_bounded(&big, 99), Err(InputError::TooLarge { limit: 99 })));
        assert_eq!(read_bounded(&big, 100).unwrap().len(), 100);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn atomic_output_refuses_links_and_nodes_and_leaves_no_temporary() {
        let d = scratch("out");
        let target = d.join("report.json");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(write_atomic(&link, b"x"), Err(OutputError::NotRegular("a symbolic link"))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "the link's target is untouched");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link itself is untouched");
        assert!(matches!(write_atomic(Path::new("/dev/null"), b"x"), Err(OutputError::NotRegular("a character device"))));
        assert!(matches!(write_atomic(&d, b"x"), Err(OutputError::NotRegular("a directory"))));
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 3, "no temporary file left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn output_directories_are_new_or_empty_and_never_links() {
        let d = scratch("dirs");
        let fresh = d.join("new/sub");
        assert_eq!(make_empty_dir(&fresh).unwrap(), fresh);
        assert!(fresh.is_dir());
        assert_eq!(check_empty_dir(&fresh).unwrap(), fresh, "an empty directory is taken");
        std::fs::write(fresh.join("index.json"), b"{}").unwrap();
        assert!(matches!(check_empty_dir(&fresh), Err(DirError::NotEmpty)));
        assert!(matches!(make_empty_dir(&fresh), Err(DirError::NotEmpty)));
        let empty = d.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&empty, &link).unwrap();
        assert!(matches!(check_empty_dir(&link), Err(DirError::Link)));
        let slash = PathBuf::from(format!("{}/", link.display()));
        assert!(matches!(make_empty_dir(&slash), Err(DirError::Link)), "a trailing / does not resolve the link");
        assert!(matches!(check_empty_dir(&d.join("new/sub/index.json")), Err(DirError::NotDirectory("a regular file"))));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn same_file_sees_through_spellings_links_and_hard_links() {
        let d = scratch("same");
        let a = d.join("a.bin");
        std::fs::write(&a, b"a").unwrap();
        std::fs::hard_link(&a, d.join("hard.bin")).unwrap();
        std::os::unix::fs::symlink(&a, d.join("soft.bin")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        assert!(same_file(&a, &d.join("sub/../a.bin")));
        assert!(same_file(&a, &d.join("hard.bin")));
        assert!(same_file(&a, &d.join("soft.bin")));
        assert!(!same_file(&a, &d.join("b.bin")));
        assert!(same_file(&d.join("new.bin"), &d.join("sub/../new.bin")), "not-yet-existing files compare by resolved path");
        assert!(!same_file(&d.join("new.bin"), &d.join("sub/new.bin")));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn escaping() {
        assert_eq!(escape("a\x1b[31mb\n\u{9b}c\\"), "a\\u{1b}[31mb\\n\\u{9b}c\\\\");
        assert_eq!(escape("plain name.hxrq"), "plain name.hxrq");
    }
}
