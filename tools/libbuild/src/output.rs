//! The files around a build's output: the atomic install of the checked library, the lock that
//! builds to one output take turns on, and the work directory (made fresh, crash-safe).

use std::ffi::OsString;
use std::io;
use std::path::Path;

use crate::consts::{LOCK_SUFFIX, WORK_MARKER};
use crate::error::{io_err, BuildError};
use crate::freestanding;

/// True if `a` and `b` name the same existing file (same device and inode), however spelled.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Puts the checked library at `out` atomically: a new file under a unique name in `out`'s
/// directory (`O_CREAT | O_EXCL | O_NOFOLLOW`: no existing file or link is written through),
/// written and synced, then renamed over `out`. On any failure the temporary file is removed and
/// `out` is left as it was (absent, or the previous file).
///
/// Called with the output's lock held ([`lock_output`]): a temporary file of this name pattern
/// left by a build that was killed before its rename is removed first.
pub(crate) fn install_output(out: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = out.file_name().ok_or_else(|| BuildError::OutputIsDirectory(out.to_path_buf()))?;
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    remove_stale_temporaries(dir, name);
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut attempt = 0u32;
    let (tmp, mut file) = loop {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".{}.{attempt}.tmp", std::process::id()));
        let tmp = dir.join(tmp_name);
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).custom_flags(nofollow).open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 64 => attempt += 1,
            Err(error) => return Err(BuildError::Io { path: tmp, error }),
        }
    };
    let r = file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io_err(&tmp)).and_then(|()| {
        // Checked again just before the rename: a link or node put at `out` meanwhile is refused
        // (rename would replace the link itself, never follow it, but it is not ours to replace).
        if std::fs::symlink_metadata(out).is_ok_and(|m| !m.is_file()) {
            return Err(BuildError::OutputNotRegular(out.to_path_buf()));
        }
        std::fs::rename(&tmp, out).map_err(io_err(out))
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// True if `file_name` is one of [`install_output`]'s temporary files for the output `name`:
/// `.NAME.PID.N.tmp`.
fn is_install_temporary(file_name: &std::ffi::OsStr, name: &std::ffi::OsStr) -> bool {
    let (file_name, name) = (file_name.as_encoded_bytes(), name.as_encoded_bytes());
    let Some(rest) = file_name.strip_prefix(b".").and_then(|r| r.strip_prefix(name)).and_then(|r| r.strip_prefix(b".")) else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(b".tmp") else { return false };
    let mut parts = rest.split(|&b| b == b'.');
    let number = |p: Option<&[u8]>| p.is_some_and(|p| !p.is_empty() && p.iter().all(u8::is_ascii_digit));
    number(parts.next()) && number(parts.next()) && parts.next().is_none()
}

/// Removes the temporary files of [`install_output`] for the output `name` in `dir`. Only called
/// with the output's lock held: every build to this output holds it while its temporary file
/// exists, so one found now was left by a build that was killed.
fn remove_stale_temporaries(dir: &Path, name: &std::ffi::OsStr) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if is_install_temporary(&e.file_name(), name) && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The lock that builds to `out` take turns on: an exclusive `flock` on `OUT.build.lock` beside
/// the output (created if missing, never removed: removing a lock file lets a waiting build and
/// a new one each lock a different file), held until the returned file is dropped. The build
/// waits for the lock.
///
/// Why a lock and not a work directory per build renamed into place: the work directory would
/// have to replace a non-empty `OUT.build/` of a previous build, which `rename` cannot do
/// atomically (it replaces only an empty directory), so two builds finishing together would
/// still race on it, and the intermediates named in the report could be another build's. With
/// the lock, `OUT.build/` holds the intermediates of the build that holds the lock (the last
/// one, once they are all done), the output is the library of the last build, and the temporary
/// files of a build killed before its rename can be told apart and removed. The kernel releases
/// the lock of a build that dies, however it dies, so no lock outlives its build. The builds
/// take turns, which costs only time: they make the same file.
pub(crate) fn lock_output(out: &Path) -> Result<std::fs::File, BuildError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut name = out.file_name().map(OsString::from).ok_or_else(|| BuildError::OutputIsDirectory(out.to_path_buf()))?;
    name.push(LOCK_SUFFIX);
    let lock = out.with_file_name(name);
    if let Some(dir) = lock.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(nofollow)
        .open(&lock)
        .map_err(io_err(&lock))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(BuildError::Io { path: lock, error: e.into() }),
        }
    }
}

/// True if every entry of `work` is a file this build step writes there ([`WORK_MARKER`], the
/// include directory with our headers, the generated sources, objects, linker script and linked
/// library), so the directory is one of ours that lost its marker (an older build step removed
/// the marker first when it emptied the directory, and could be killed right after). An empty
/// directory holds nothing to lose and counts as ours.
fn only_intermediates(work: &Path) -> io::Result<bool> {
    fn numbered(name: &str, prefix: &str, ext: &str) -> bool {
        name.strip_prefix(prefix).and_then(|r| r.strip_suffix(ext)).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
    for e in std::fs::read_dir(work)? {
        let e = e?;
        let kind = e.file_type()?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { return Ok(false) };
        let ours = if name == freestanding::INCLUDE_DIR {
            kind.is_dir()
                && std::fs::read_dir(e.path())?.all(|h| {
                    h.is_ok_and(|h| {
                        h.file_type().is_ok_and(|t| t.is_file())
                            && freestanding::HEADERS.iter().any(|(n, _)| h.file_name().to_str() == Some(n))
                    })
                })
        } else {
            kind.is_file()
                && (name == WORK_MARKER
                    || ["link.ld", "entry.c", "entry.o", "record.s", "record.o", "linked.so"].contains(&name)
                    || numbered(name, "kernel", ".c")
                    || numbered(name, "kernel", ".o")
                    || freestanding::CARRIED_SOURCES
                        .iter()
                        .any(|c| name == c.file || Path::new(c.file).with_extension("o").to_str() == Some(name)))
        };
        if !ours {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes a fresh work directory, with the output's lock held ([`lock_output`]): a previous one of
/// ours (with the marker, or holding only what a build writes, see [`only_intermediates`]) is
/// emptied; any other directory, or anything else at that path, is refused.
///
/// Crash-safe: at every point the path is absent, an empty directory, or a directory whose
/// marker is there, all of which the next build takes as its own. The marker is written before
/// anything else and never removed (the directory is emptied around it, not removed), so a build
/// killed while it empties the directory, or at any later point, leaves a directory that is
/// still marked.
pub(crate) fn fresh_work_dir(work: &Path) -> Result<(), BuildError> {
    let marker = work.join(WORK_MARKER);
    match std::fs::symlink_metadata(work) {
        Ok(m) if m.is_dir() => {
            if !marker.is_file() && !only_intermediates(work).map_err(io_err(work))? {
                return Err(BuildError::WorkDirInUse(work.to_path_buf()));
            }
        }
        Ok(_) => return Err(BuildError::WorkDirInUse(work.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = work.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(io_err(parent))?;
            }
            std::fs::create_dir(work).map_err(io_err(work))?;
        }
        Err(e) => return Err(BuildError::Io { path: work.to_path_buf(), error: e }),
    }
    if !marker.is_file() {
        std::fs::write(&marker, b"made by hexrpc build-lib; emptied and reused by the next build\n").map_err(io_err(&marker))?;
    }
    for e in std::fs::read_dir(work).map_err(io_err(work))? {
        let e = e.map_err(io_err(work))?;
        if e.file_name() == WORK_MARKER {
            continue;
        }
        let path = e.path();
        let is_dir = e.file_type().map_err(io_err(&path))?.is_dir();
        if is_dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }.map_err(io_err(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_is_replaced_atomically_and_never_through_a_link() {
        let d = std::env::temp_dir().join(format!("hexrpc-libbuild-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let out = d.join("lib.so");
        install_output(&out, b"one").unwrap();
        install_output(&out, b"two").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        let victim = d.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = d.join("link.so");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(install_output(&link, b"x"), Err(BuildError::OutputNotRegular(_))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link itself is left alone");
        let mut left: Vec<String> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["lib.so", "link.so", "victim"], "no temporary file left behind");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_killed_installs_temporary_file_is_removed_and_no_other() {
        use std::ffi::OsStr;
        for (file, ours) in [
            (".lib.so.123.0.tmp", true),
            (".lib.so.9.63.tmp", true),
            (".lib.so.123.tmp", false),
            (".lib.so.12a.0.tmp", false),
            (".lib.so..0.tmp", false),
            (".lib.so.1.2.3.tmp", false),
            ("lib.so.123.0.tmp", false),
            (".lib.so.5.123.0.tmp", false),
            (".lib.so.123.0", false),
        ] {
            assert_eq!(is_install_temporary(OsStr::new(file), OsStr::new("lib.so")), ours, "{file}");
        }
        // `.a.5.123.0.tmp` is output `a.5`'s, never output `a`'s.
        assert!(is_install_temporary(OsStr::new(".a.5.123.0.tmp"), OsStr::new("a.5")));
        assert!(!is_install_temporary(OsStr::new(".a.5.123.0.tmp"), OsStr::new("a")));
        let d = std::env::temp_dir().join(format!("hexrpc-libbuild-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for f in [".lib.so.77.0.tmp", ".lib.so.77.tmp", ".other.so.77.0.tmp"] {
            std::fs::write(d.join(f), b"partial").unwrap();
        }
        install_output(&d.join("lib.so"), b"one").unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, [".lib.so.77.tmp", ".other.so.77.0.tmp", "lib.so"]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
