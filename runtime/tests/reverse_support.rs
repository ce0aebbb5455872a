//! Shared helpers of the reverse-service tests (included by the other `reverse_*` tests with
//! `#[path]`): a recording seam over the real OS, a temporary tree with a canary outside the
//! allowlist, and request builders.
#![allow(dead_code)]

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use hexrpc_bsp::Limits;
use hexrpc_drivers::adsprpc::{fastrpc_ioctl_mmap, fastrpc_ioctl_munmap, FASTRPC_IOCTL_MMAP, FASTRPC_IOCTL_MUNMAP};
use hexrpc_drivers::listener::REMOTECTL_OPEN;
use hexrpc_drivers::{Errno, Fd, FileStat, OpenAt, OpenFlags, Prot, RustixSys, Scalars, Syscalls};
use hexrpc_runtime::reverse::wire::{pack_request, reply_output};
use hexrpc_runtime::reverse::{FilePolicy, Response, ReverseService};

/// The real OS, with every path the service looks at and every file it opens recorded, and the
/// FastRPC MMAP/MUNMAP ioctls simulated (no device here).
#[derive(Default)]
pub struct RecordingSys {
    pub paths: Mutex<Vec<String>>,
    pub opened: Mutex<Vec<(u64, u64)>>,
    /// Descriptors opened (files and the directories of path walks).
    pub opens: AtomicUsize,
    pub closes: AtomicUsize,
    pub ioctls: AtomicUsize,
    pub maps: Mutex<Vec<(u64, u64)>>,
    pub munmaps: AtomicUsize,
    pub fail_mmap: AtomicBool,
    next_map: AtomicU64,
}

impl RecordingSys {
    pub fn live_maps(&self) -> usize {
        self.maps.lock().unwrap().len()
    }
}

// SAFETY: forwards file calls to `RustixSys`; the two simulated ioctls only touch the argument
// struct the caller passes (whose validity the `ioctl` contract guarantees); nothing else
// touches memory (`mmap` refuses).
unsafe impl hexrpc_drivers::SeamHooks for RecordingSys {
    type Inner = RustixSys;
    fn inner(&self) -> &RustixSys {
        &RustixSys
    }
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<hexrpc_drivers::OwnedFd, Errno> {
        self.paths.lock().unwrap().push(path.to_string_lossy().into_owned());
        let fd = RustixSys.open(path, flags)?;
        self.opens.fetch_add(1, Ordering::SeqCst);
        if let Ok(st) = RustixSys.fstat(fd.raw()) {
            self.opened.lock().unwrap().push((st.dev, st.ino));
        }
        Ok(fd)
    }
    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<hexrpc_drivers::OwnedFd, Errno> {
        self.paths.lock().unwrap().push(at_path(dir, path));
        let fd = RustixSys.open_at(dir, path, how)?;
        self.opens.fetch_add(1, Ordering::SeqCst);
        if let Ok(st) = RustixSys.fstat(fd.raw()) {
            self.opened.lock().unwrap().push((st.dev, st.ino));
        }
        Ok(fd)
    }
    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        self.paths.lock().unwrap().push(at_path(Some(dir), name));
        RustixSys.stat_at(dir, name)
    }
    fn close(&self, fd: hexrpc_drivers::OwnedFd) -> Result<(), Errno> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        RustixSys.close(fd)
    }
    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        self.paths.lock().unwrap().push(path.to_string_lossy().into_owned());
        RustixSys.stat(path, follow)
    }
    unsafe fn ioctl(&self, _fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        self.ioctls.fetch_add(1, Ordering::SeqCst);
        if request == FASTRPC_IOCTL_MMAP {
            if self.fail_mmap.load(Ordering::SeqCst) {
                return Err(Errno::ENOMEM);
            }
            // SAFETY: the caller passes a live `fastrpc_ioctl_mmap` for this request.
            let m = unsafe { &mut *(arg as *mut fastrpc_ioctl_mmap) };
            let v = 0x1000_0000 + self.next_map.fetch_add(1, Ordering::SeqCst) * 0x10_0000;
            m.vaddrout = v;
            self.maps.lock().unwrap().push((v, m.size));
            Ok(0)
        } else if request == FASTRPC_IOCTL_MUNMAP {
            // SAFETY: the caller passes a live `fastrpc_ioctl_munmap` for this request.
            let m = unsafe { &*(arg as *const fastrpc_ioctl_munmap) };
            self.munmaps.fetch_add(1, Ordering::SeqCst);
            let mut maps = self.maps.lock().unwrap();
            match maps.iter().position(|&x| x == (m.vaddrout, m.size)) {
                Some(i) => {
                    maps.remove(i);
                    Ok(0)
                }
                None => Err(Errno::EPERM),
            }
        } else {
            Err(Errno::ENOTTY)
        }
    }
    unsafe fn mmap(&self, _: Fd, _: usize, _: Prot, _: u64) -> Result<NonNull<u8>, Errno> {
        Err(Errno::ENODEV)
    }
    unsafe fn munmap(&self, _: NonNull<u8>, _: usize) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }
    fn retire(&self, _: hexrpc_drivers::BorrowedFd<'_>) -> Result<(), Errno> {
        // No retiring: the channel numbers here are made up, and callers then resume instead.
        Err(Errno::ENOSYS)
    }
}

/// The path `name` relative to `dir` names now (for the record of looked-up paths).
fn at_path(dir: Option<Fd>, name: &CStr) -> String {
    let name = name.to_string_lossy();
    match dir {
        Some(d) if !name.starts_with('/') => {
            let base = std::fs::read_link(format!("/proc/self/fd/{}", d.0)).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            format!("{base}/{name}")
        }
        _ => name.into_owned(),
    }
}

/// A temporary tree:
/// `allowed/lib.so` (4 KiB pattern), `allowed/sub/x.so`, `allowed/evil.so -> ../secret/canary`,
/// `allowed/link -> ../secret`, `secret/canary` (outside the allowlist).
pub struct Tree {
    pub root: PathBuf,
    pub allowed: PathBuf,
    pub canary: PathBuf,
    pub canary_id: (u64, u64),
    pub lib: Vec<u8>,
}

impl Tree {
    pub fn new(tag: &str) -> Tree {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!("hxrv-{}-{}-{}", tag, std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        let allowed = root.join("allowed");
        let secret = root.join("secret");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        let lib: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        std::fs::write(allowed.join("lib.so"), &lib).unwrap();
        std::fs::write(allowed.join("sub/x.so"), b"sub").unwrap();
        let canary = secret.join("canary");
        std::fs::write(&canary, b"CANARY").unwrap();
        std::os::unix::fs::symlink("../secret/canary", allowed.join("evil.so")).unwrap();
        std::os::unix::fs::symlink("../secret", allowed.join("link")).unwrap();
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(&canary).unwrap();
        Tree { root, allowed, canary, canary_id: (md.dev(), md.ino()), lib }
    }

    pub fn allowed_str(&self) -> &str {
        self.allowed.to_str().unwrap()
    }

    pub fn limits() -> Limits {
        Limits { max_reverse_request: 64 << 10, max_reverse_file_bytes: 1 << 20, ..hexrpc_bsp::BENCH.limits }
    }

    pub fn policy(&self) -> FilePolicy {
        self.policy_with(Self::limits())
    }

    pub fn policy_with(&self, limits: Limits) -> FilePolicy {
        FilePolicy::new(&[self.allowed_str()], limits).unwrap()
    }

    pub fn service(&self) -> ReverseService<'static, RecordingSys> {
        // A channel number the recording seam answers itself (it never touches the descriptor);
        // -1 would mean "no channel", and the service would then send no MUNMAP at all.
        ReverseService::new(RecordingSys::default(), Fd(1000), self.policy())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The canary was never opened and no looked-up path leads into `secret/`.
pub fn assert_canary_untouched(svc: &ReverseService<'_, RecordingSys>, tree: &Tree) {
    let sys = svc.sys();
    assert!(!sys.opened.lock().unwrap().contains(&tree.canary_id), "the canary outside the allowlist was opened");
    for p in sys.paths.lock().unwrap().iter() {
        assert!(Path::new(p).starts_with(&tree.allowed), "looked at {p} outside the allowlist");
        assert!(!p.contains("secret"), "looked at {p}");
    }
}

pub const REPLY: usize = (64 << 10) + 64;

/// Packs a request payload.
pub fn payload(ins: &[&[u8]], outs: &[u32]) -> Vec<u8> {
    let mut buf = vec![0u8; 64 + ins.iter().map(|b| b.len() + 16).sum::<usize>() + outs.len() * 4];
    let n = pack_request(ins, outs, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

pub fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

pub fn cstr(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

/// Dispatches and returns the response and the reply bytes.
pub fn call<S: Syscalls>(svc: &ReverseService<'_, S>, handle: u32, sc: u32, payload: &[u8]) -> (Response, Vec<u8>) {
    let mut reply = vec![0xAAu8; REPLY];
    let r = svc.dispatch(handle, Scalars::from_raw(sc), payload, &mut reply);
    if r.status != 0 {
        assert_eq!(r.reply_len, 0, "no output data on error");
    }
    reply.truncate(r.reply_len);
    (r, reply)
}

/// apps_remotectl open of `name`: the module handle.
pub fn open_module<S: Syscalls>(svc: &ReverseService<'_, S>, name: &str) -> u32 {
    let n = cstr(name.as_bytes());
    let (r, reply) = call(svc, 0, REMOTECTL_OPEN.raw(), &payload(&[&words(&[n.len() as u32, 16]), &n], &[8, 16]));
    assert_eq!(r.status, 0, "open {name}");
    let out = reply_output(&reply, &[8, 16], 0).unwrap();
    u32::from_le_bytes(out[..4].try_into().unwrap())
}

pub const FOPEN_WITH_ENV: u32 = 0x1305_0100;
pub const FOPEN: u32 = 0x0003_0100;
pub const FCLOSE: u32 = 0x0301_0000;
pub const FREAD: u32 = 0x0401_0200;
pub const FSEEK: u32 = 0x0901_0000;
pub const FTELL: u32 = 0x0801_0100;
pub const FLEN: u32 = 0x0A01_0100;
pub const STAT: u32 = 0x1F02_0100;
pub const FILE_EXISTS: u32 = 0x1602_0100;
pub const MAP64: u32 = 0x0201_0100;
pub const UNMAP64: u32 = 0x0301_0000;

pub fn fopen_payload(name: &[u8], mode: &[u8]) -> Vec<u8> {
    let (env, delim, name, mode) = (cstr(b"ADSP_LIBRARY_PATH"), cstr(b";"), cstr(name), cstr(mode));
    let prim = words(&[env.len() as u32, delim.len() as u32, name.len() as u32, mode.len() as u32]);
    payload(&[&prim, &env, &delim, &name, &mode], &[4])
}

/// fopen_with_env: status and FILE handle.
pub fn fopen<S: Syscalls>(svc: &ReverseService<'_, S>, h: u32, name: &[u8], mode: &[u8]) -> (i32, u32) {
    let (r, reply) = call(svc, h, FOPEN_WITH_ENV, &fopen_payload(name, mode));
    let file = if r.status == 0 { u32::from_le_bytes(reply_output(&reply, &[4], 0).unwrap().try_into().unwrap()) } else { 0 };
    (r.status, file)
}

/// fread: status, bytesRead, bEOF, data.
pub fn fread<S: Syscalls>(svc: &ReverseService<'_, S>, h: u32, file: u32, len: u32) -> (i32, i32, i32, Vec<u8>) {
    let (r, reply) = call(svc, h, FREAD, &payload(&[&words(&[file, len])], &[8, len]));
    if r.status != 0 {
        return (r.status, 0, 0, Vec::new());
    }
    let head = reply_output(&reply, &[8, len], 0).unwrap();
    let data = reply_output(&reply, &[8, len], 1).unwrap();
    let n = i32::from_le_bytes(head[..4].try_into().unwrap());
    let eof = i32::from_le_bytes(head[4..8].try_into().unwrap());
    (r.status, n, eof, data.to_vec())
}

pub fn fseek<S: Syscalls>(svc: &ReverseService<'_, S>, h: u32, file: u32, offset: i32, whence: u32) -> i32 {
    call(svc, h, FSEEK, &payload(&[&words(&[file, offset as u32, whence])], &[])).0.status
}

pub fn fclose<S: Syscalls>(svc: &ReverseService<'_, S>, h: u32, file: u32) -> i32 {
    call(svc, h, FCLOSE, &payload(&[&words(&[file])], &[])).0.status
}

/// The service still answers a normal open / read / close of an allowed file.
pub fn assert_still_serves(svc: &ReverseService<'_, RecordingSys>, h: u32, tree: &Tree) {
    let (st, file) = fopen(svc, h, b"lib.so", b"r");
    assert_eq!(st, 0, "the next request is still served");
    let (st, n, _, data) = fread(svc, h, file, 16);
    assert_eq!((st, n), (0, 16));
    assert_eq!(&data[..], &tree.lib[..16]);
    assert_eq!(fclose(svc, h, file), 0);
}

#[test]
fn the_recording_seam_sees_real_files() {
    let tree = Tree::new("support");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
    // The allowed directory and the file; both closed.
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), 2);
    assert_eq!(svc.sys().closes.load(Ordering::SeqCst), 2);
}
