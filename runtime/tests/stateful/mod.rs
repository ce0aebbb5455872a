//! The stateful model of a reverse session, shared by the property test
//! (`tests/reverse_stateful.rs`) and the cargo-fuzz target (`fuzz/fuzz_targets/reverse_session.rs`):
//! a byte string is decoded into a sequence of requests (module open/close, fopen/fread/fseek/
//! ftell/flen/fclose, stat/fileExists, apps_mem map/unmap, raw requests, session ends) and file
//! system changes (an allowed directory swapped for a symbolic link to the secret directory),
//! run against a [`ReverseService`] over a real temporary tree through a checking seam.
//!
//! Checked after every step and at the end ([`Violation`]):
//! * the canary files outside the allowlist are never opened (by (dev, ino) after every open),
//!   no `O_NOFOLLOW` file open yields anything but a regular file, no path string is opened;
//! * the seam only reads or closes descriptors it handed out (no forged or double close);
//! * a FILE handle or module key is never handed out twice, and a dead one (closed, its module
//!   closed, or its session ended) is refused; the service's open files and modules are the
//!   model's after every step (closing a module closes its files), and no descriptor is open
//!   beyond the open files;
//! * no reply carries data with an error status, no read returns the canary's bytes or more
//!   than asked;
//! * once the service is dropped, every descriptor it opened is closed and every DSP map
//!   released.
#![allow(dead_code)]

use std::collections::HashSet;
use std::ffi::{c_void, CStr};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use hexrpc_drivers::adsprpc::{fastrpc_ioctl_mmap, fastrpc_ioctl_munmap, FASTRPC_IOCTL_MMAP, FASTRPC_IOCTL_MUNMAP};
use hexrpc_drivers::aee::{AEE_EBADFD, AEE_ENOSUCHMOD};
use hexrpc_drivers::listener::{REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::{Errno, Fd, FileStat, OpenAt, OpenFlags, OwnedFd, Prot, RustixSys, Scalars, Syscalls};
use hexrpc_runtime::reverse::wire::{pack_request, reply_output};
use hexrpc_runtime::reverse::{FilePolicy, ReverseService};

/// The bytes of the canary files; no allowed file contains them.
pub const CANARY: &[u8] = b"CANARY";

/// A temporary tree: `allowed/` with `lib.so` (4 KiB), `sub/x.so`, `d/canary` ("INSIDE"), an
/// empty file, a FIFO, `evil.so -> ../secret/canary`, `link -> ../secret`, `d.link ->
/// ../secret` (swapped with `d` by the model); `secret/canary` outside.
pub struct Tree {
    pub root: PathBuf,
    pub allowed: PathBuf,
    canaries: Vec<(u64, u64)>,
    swapped: Mutex<bool>,
}

impl Tree {
    pub fn new(tag: &str) -> Tree {
        use std::os::unix::fs::{symlink, MetadataExt};
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!("hxst-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
        let allowed = root.join("allowed");
        let secret = root.join("secret");
        std::fs::create_dir_all(allowed.join("sub")).unwrap();
        std::fs::create_dir_all(allowed.join("d")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        let lib: Vec<u8> = (0..4096u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(allowed.join("lib.so"), &lib).unwrap();
        std::fs::write(allowed.join("sub/x.so"), b"SUBFILE").unwrap();
        std::fs::write(allowed.join("d/canary"), b"INSIDE").unwrap();
        std::fs::write(allowed.join("empty"), b"").unwrap();
        std::fs::write(secret.join("canary"), CANARY).unwrap();
        symlink("../secret/canary", allowed.join("evil.so")).unwrap();
        symlink("../secret", allowed.join("link")).unwrap();
        symlink("../secret", allowed.join("d.link")).unwrap();
        let fifo = std::ffi::CString::new(allowed.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            fifo.as_c_str(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        let md = std::fs::metadata(secret.join("canary")).unwrap();
        Tree { root, allowed, canaries: vec![(md.dev(), md.ino())], swapped: Mutex::new(false) }
    }

    /// Swaps `allowed/d` with the link to the secret directory (or back).
    fn toggle_swap(&self) {
        let (d, real, link) = (self.allowed.join("d"), self.allowed.join("d.real"), self.allowed.join("d.link"));
        let mut s = self.swapped.lock().unwrap();
        if *s {
            std::fs::rename(&d, &link).unwrap();
            std::fs::rename(&real, &d).unwrap();
        } else {
            std::fs::rename(&d, &real).unwrap();
            std::fs::rename(&link, &d).unwrap();
        }
        *s = !*s;
    }

    /// Puts the tree back as [`new`](Self::new) made it.
    fn restore(&self) {
        if *self.swapped.lock().unwrap() {
            self.toggle_swap();
        }
    }

    fn names(&self) -> Vec<Vec<u8>> {
        let a = self.allowed.to_str().unwrap();
        let mut v: Vec<Vec<u8>> = [
            "lib.so",
            "sub/x.so",
            "d/canary",
            "empty",
            "fifo",
            "evil.so",
            "link/canary",
            "d",
            "sub",
            "missing",
            "../secret/canary",
            "d/../../secret/canary",
            "sub//x.so",
            "tinylib",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        v.push(format!("{a}/lib.so").into_bytes());
        v.push(format!("{a}/d/canary").into_bytes());
        v.push(format!("{a}/../secret/canary").into_bytes());
        v.push(self.root.join("secret/canary").to_str().unwrap().as_bytes().to_vec());
        v
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A broken property, with the step it broke at.
#[derive(Debug)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The real OS for file calls, with every descriptor tracked and checked; MMAP/MUNMAP
/// simulated (no device here).
pub struct CheckingSys {
    canaries: Vec<(u64, u64)>,
    live: Mutex<HashSet<i32>>,
    violation: Mutex<Option<String>>,
    maps: Mutex<Vec<(u64, u64)>>,
    next_map: AtomicU64,
    pub opens: AtomicUsize,
}

impl CheckingSys {
    fn new(tree: &Tree) -> Self {
        CheckingSys {
            canaries: tree.canaries.clone(),
            live: Mutex::new(HashSet::new()),
            violation: Mutex::new(None),
            maps: Mutex::new(Vec::new()),
            next_map: AtomicU64::new(0),
            opens: AtomicUsize::new(0),
        }
    }

    fn violate(&self, what: String) {
        let mut v = self.violation.lock().unwrap();
        if v.is_none() {
            *v = Some(what);
        }
    }

    fn ours(&self, fd: Fd) -> bool {
        self.live.lock().unwrap().contains(&fd.0)
    }
}

// SAFETY: file calls go to `RustixSys` (reads and closes only on descriptors this seam opened);
// the two simulated ioctls only touch the argument struct the caller passes, whose validity
// the `ioctl` contract guarantees; nothing else touches memory. Calls not overridden here
// (thread id 1, `retire`, and any the trait gains) go to `RefusingSys`, not to the OS.
unsafe impl hexrpc_drivers::SeamHooks for CheckingSys {
    type Inner = hexrpc_drivers::RefusingSys;
    fn inner(&self) -> &hexrpc_drivers::RefusingSys {
        &hexrpc_drivers::RefusingSys
    }
    fn open(&self, path: &CStr, _: OpenFlags) -> Result<OwnedFd, Errno> {
        self.violate(format!("a path string was opened: {path:?}"));
        Err(Errno::EPERM)
    }
    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<OwnedFd, Errno> {
        if let Some(d) = dir {
            if !self.ours(d) {
                self.violate(format!("open_at relative to descriptor {} it did not open", d.0));
                return Err(Errno::EBADF);
            }
        }
        let fd = RustixSys.open_at(dir, path, how)?;
        self.opens.fetch_add(1, Ordering::SeqCst);
        self.live.lock().unwrap().insert(fd.raw().0);
        match RustixSys.fstat(fd.raw()) {
            Ok(st) if self.canaries.contains(&(st.dev, st.ino)) => self.violate(format!("the canary was opened as {path:?}")),
            Ok(st) if how == OpenAt::File && !st.is_file() => {
                self.violate(format!("{path:?} opened as a file is not a regular file (mode {:o})", st.mode))
            }
            Ok(_) => {}
            Err(e) => self.violate(format!("fstat of a fresh descriptor failed: {e}")),
        }
        Ok(fd)
    }
    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        if !self.ours(dir) {
            self.violate(format!("stat_at relative to descriptor {} it did not open", dir.0));
            return Err(Errno::EBADF);
        }
        RustixSys.stat_at(dir, name)
    }
    fn close(&self, fd: OwnedFd) -> Result<(), Errno> {
        if !self.live.lock().unwrap().remove(&fd.raw().0) {
            self.violate(format!("close of descriptor {} it did not open (forged or closed twice)", fd.raw().0));
            // Not ours to close: the number is left alone.
            let _ = fd.into_raw();
            return Err(Errno::EBADF);
        }
        RustixSys.close(fd)
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        if !self.ours(fd) {
            self.violate(format!("pread of descriptor {} it did not open", fd.0));
            return Err(Errno::EBADF);
        }
        RustixSys.pread(fd, buf, offset)
    }
    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        if !self.ours(fd) {
            self.violate(format!("fstat of descriptor {} it did not open", fd.0));
            return Err(Errno::EBADF);
        }
        RustixSys.fstat(fd)
    }
    fn stat(&self, path: &CStr, _: bool) -> Result<FileStat, Errno> {
        self.violate(format!("a path string was looked up: {path:?}"));
        Err(Errno::EPERM)
    }
    unsafe fn ioctl(&self, _fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        if request == FASTRPC_IOCTL_MMAP {
            // SAFETY: the caller passes a live `fastrpc_ioctl_mmap` for this request.
            let m = unsafe { &mut *(arg as *mut fastrpc_ioctl_mmap) };
            let v = 0x1000_0000 + self.next_map.fetch_add(1, Ordering::SeqCst) * 0x10_0000;
            m.vaddrout = v;
            self.maps.lock().unwrap().push((v, m.size));
            Ok(0)
        } else if request == FASTRPC_IOCTL_MUNMAP {
            // SAFETY: the caller passes a live `fastrpc_ioctl_munmap` for this request.
            let m = unsafe { &*(arg as *const fastrpc_ioctl_munmap) };
            let mut maps = self.maps.lock().unwrap();
            match maps.iter().position(|&x| x == (m.vaddrout, m.size)) {
                Some(i) => {
                    maps.remove(i);
                    Ok(0)
                }
                None => {
                    drop(maps);
                    self.violate(format!("MUNMAP of {:#x}+{:#x}, never mapped", m.vaddrout, m.size));
                    Err(Errno::EINVAL)
                }
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
    fn interrupt(&self, _: i32) -> Result<(), Errno> {
        Ok(())
    }
}

/// Reads the input a byte or word at a time; 0 once it is used up.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// What one run did (for the figures the test and CI print).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub steps: usize,
    pub opened_files: usize,
    pub bytes_read: usize,
    pub swaps: usize,
}

fn pack(ins: &[&[u8]], outs: &[u32]) -> Vec<u8> {
    let mut buf = vec![0u8; 64 + ins.iter().map(|b| b.len() + 16).sum::<usize>() + outs.len() * 4];
    let n = pack_request(ins, outs, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn cstr(s: &[u8]) -> Vec<u8> {
    let mut v = s.to_vec();
    v.push(0);
    v
}

const REQUEST_MAX: u32 = 8192;
static IMAGE: [u8; 300] = [0x5A; 300];

struct Session<'t> {
    svc: ReverseService<'static, CheckingSys>,
    tree: &'t Tree,
    names: Vec<Vec<u8>>,
    reply: Vec<u8>,
    /// Module keys alive now, with their module name.
    modules: Vec<(u32, &'static [u8])>,
    /// Every key ever handed out, and the dead ones.
    keys_seen: HashSet<u32>,
    dead_keys: Vec<u32>,
    /// FILE handles alive now, with the key they were opened through.
    files: Vec<(u32, u32)>,
    files_seen: HashSet<(u32, u32)>,
    dead_files: Vec<(u32, u32)>,
    maps: Vec<(u64, i64)>,
    stats: Stats,
}

impl Session<'_> {
    fn call(&mut self, handle: u32, sc: u32, payload: &[u8]) -> Result<(i32, Vec<u8>), Violation> {
        let r = self.svc.dispatch(handle, Scalars::from_raw(sc), payload, &mut self.reply);
        if r.reply_len > self.reply.len() || (r.status != 0 && r.reply_len != 0) {
            return Err(Violation(format!("reply of {} bytes with status {:#x}", r.reply_len, r.status)));
        }
        Ok((r.status, self.reply[..r.reply_len].to_vec()))
    }

    fn pick_key(&self, inp: &mut Input<'_>, want: &[u8]) -> u32 {
        let b = inp.u8();
        let live: Vec<u32> = self.modules.iter().filter(|(_, n)| *n == want).map(|&(k, _)| k).collect();
        match b % 8 {
            0..=4 if !live.is_empty() => live[b as usize % live.len()],
            5 if !self.dead_keys.is_empty() => self.dead_keys[b as usize % self.dead_keys.len()],
            6 => inp.u32(),
            _ => self.modules.first().map_or(0, |m| m.0),
        }
    }

    fn pick_file(&self, inp: &mut Input<'_>) -> (u32, u32) {
        let b = inp.u8();
        match b % 8 {
            0..=4 if !self.files.is_empty() => self.files[b as usize % self.files.len()],
            5 if !self.dead_files.is_empty() => self.dead_files[b as usize % self.dead_files.len()],
            6 => (inp.u32(), self.modules.first().map_or(0, |m| m.0)),
            _ => (100 + (b as u32 % 70), self.modules.first().map_or(0, |m| m.0)),
        }
    }

    fn is_dead_key(&self, key: u32) -> bool {
        self.dead_keys.contains(&key) && !self.modules.iter().any(|m| m.0 == key)
    }

    fn kill_module(&mut self, key: u32) {
        self.modules.retain(|m| m.0 != key);
        self.dead_keys.push(key);
        let (dead, live): (Vec<_>, Vec<_>) = self.files.iter().partition(|f| f.1 == key);
        self.files = live;
        self.dead_files.extend(dead);
    }

    fn step(&mut self, inp: &mut Input<'_>) -> Result<(), Violation> {
        self.stats.steps += 1;
        match inp.u8() % 14 {
            0 | 1 => {
                let name: &'static [u8] = if inp.u8() % 3 == 2 { b"apps_mem" } else { b"apps_std" };
                let n = cstr(name);
                let (st, reply) = self.call(0, REMOTECTL_OPEN.raw(), &pack(&[&words(&[n.len() as u32, 16]), &n], &[8, 16]))?;
                if st == 0 {
                    let out = reply_output(&reply, &[8, 16], 0).ok_or_else(|| Violation("module open reply".into()))?;
                    let key = u32::from_le_bytes(out[..4].try_into().unwrap());
                    if !self.keys_seen.insert(key) {
                        return Err(Violation(format!("module key {key:#x} handed out twice")));
                    }
                    self.modules.push((key, name));
                }
            }
            2 => {
                let key = match inp.u8() % 4 {
                    0 if !self.dead_keys.is_empty() => self.dead_keys[inp.u8() as usize % self.dead_keys.len()],
                    1 => inp.u32(),
                    _ if !self.modules.is_empty() => self.modules[inp.u8() as usize % self.modules.len()].0,
                    _ => 0,
                };
                let (st, _) = self.call(0, REMOTECTL_CLOSE.raw(), &pack(&[&words(&[key, 16])], &[4, 16]))?;
                let live = self.modules.iter().any(|m| m.0 == key);
                if live != (st == 0) {
                    return Err(Violation(format!("close of module {key:#x} (live: {live}) answered {st:#x}")));
                }
                if live {
                    self.kill_module(key);
                }
            }
            3 | 4 => {
                let key = self.pick_key(inp, b"apps_std");
                let sel = inp.u8() as usize;
                let name = if sel % 16 == 15 {
                    let len = inp.u8() as usize % 40;
                    inp.bytes(len).to_vec()
                } else {
                    self.names[sel % self.names.len()].clone()
                };
                let mode: &[u8] = [&b"r"[..], b"rb", b"w", b"r+"][inp.u8() as usize % 4];
                let (env, delim, n, m) = (cstr(b"ADSP_LIBRARY_PATH"), cstr(b";"), cstr(&name), cstr(mode));
                let prim = words(&[env.len() as u32, delim.len() as u32, n.len() as u32, m.len() as u32]);
                let (st, reply) = self.call(key, 0x1305_0100, &pack(&[&prim, &env, &delim, &n, &m], &[4]))?;
                if st == 0 {
                    let h = u32::from_le_bytes(reply_output(&reply, &[4], 0).unwrap().try_into().unwrap());
                    if !self.files_seen.insert((h, key)) || self.dead_files.iter().any(|f| f.0 == h) {
                        return Err(Violation(format!("FILE handle {h} handed out twice")));
                    }
                    if self.is_dead_key(key) {
                        return Err(Violation(format!("fopen through dead module {key:#x} succeeded")));
                    }
                    self.files.push((h, key));
                    self.stats.opened_files += 1;
                }
            }
            5 | 6 => {
                let (h, key) = self.pick_file(inp);
                let len = [0u32, 1, 7, 64, 4096, 5000][inp.u8() as usize % 6];
                let (st, reply) = self.call(key, 0x0401_0200, &pack(&[&words(&[h, len])], &[8, len]))?;
                if st == 0 {
                    if self.dead_files.contains(&(h, key)) || !self.files.contains(&(h, key)) {
                        return Err(Violation(format!("fread of handle {h} (not live through {key:#x}) succeeded")));
                    }
                    let head = reply_output(&reply, &[8, len], 0).unwrap();
                    let data = reply_output(&reply, &[8, len], 1).unwrap();
                    let n = i32::from_le_bytes(head[..4].try_into().unwrap());
                    if n < 0 || n as u32 > len {
                        return Err(Violation(format!("fread returned {n} of {len}")));
                    }
                    let data = &data[..n as usize];
                    if data.windows(CANARY.len()).any(|w| w == CANARY) {
                        return Err(Violation("the canary's bytes were read".into()));
                    }
                    self.stats.bytes_read += data.len();
                } else if self.dead_files.contains(&(h, key)) && ![AEE_EBADFD, AEE_ENOSUCHMOD].contains(&st) {
                    return Err(Violation(format!("fread of dead handle {h} answered {st:#x}")));
                }
            }
            7 => {
                let (h, key) = self.pick_file(inp);
                let off = [0i32, 1, -1, 100, 5000, i32::MIN][inp.u8() as usize % 6];
                let whence = inp.u8() as u32 % 4;
                self.call(key, 0x0901_0000, &pack(&[&words(&[h, off as u32, whence])], &[]))?;
            }
            8 => {
                let (h, key) = self.pick_file(inp);
                // ftell or flen, both with an 8-byte answer.
                let sc = if inp.u8().is_multiple_of(2) { 0x0801_0100 } else { 0x0A01_0100 };
                self.call(key, sc, &pack(&[&words(&[h])], &[8]))?;
            }
            9 => {
                let (h, key) = self.pick_file(inp);
                let (st, _) = self.call(key, 0x0301_0000, &pack(&[&words(&[h])], &[]))?;
                let live = self.files.contains(&(h, key));
                if live != (st == 0) {
                    return Err(Violation(format!("fclose of handle {h} (live: {live}) answered {st:#x}")));
                }
                if live {
                    self.files.retain(|f| *f != (h, key));
                    self.dead_files.push((h, key));
                }
            }
            10 => {
                let key = self.pick_key(inp, b"apps_std");
                let name = self.names[inp.u8() as usize % self.names.len()].clone();
                let p = cstr(&name);
                if inp.u8().is_multiple_of(2) {
                    self.call(key, 0x1F02_0100, &pack(&[&words(&[31, p.len() as u32]), &p], &[96]))?;
                } else {
                    self.call(key, 0x1602_0100, &pack(&[&words(&[p.len() as u32]), &p], &[4]))?;
                }
            }
            11 => {
                let key = self.pick_key(inp, b"apps_mem");
                if inp.u8().is_multiple_of(2) || self.maps.is_empty() {
                    let len = [4096i64, 1 << 20, 0, -1, 3 << 20][inp.u8() as usize % 5];
                    let rflags = [0x1000u32, 0x4, 0x8, 0x1][inp.u8() as usize % 4];
                    let prim = [0i32.to_le_bytes(), 0u32.to_le_bytes(), rflags.to_le_bytes(), [0; 4]].concat();
                    let prim = [prim, 0u64.to_le_bytes().to_vec(), len.to_le_bytes().to_vec()].concat();
                    let (st, reply) = self.call(key, 0x0201_0100, &pack(&[&prim], &[16]))?;
                    if st == 0 {
                        let v = u64::from_le_bytes(reply_output(&reply, &[16], 0).unwrap()[8..16].try_into().unwrap());
                        self.maps.push((v, len));
                    }
                } else {
                    let i = inp.u8() as usize % self.maps.len();
                    let (v, len) = self.maps[i];
                    let (st, _) = self.call(key, 0x0301_0000, &pack(&[&[v.to_le_bytes(), len.to_le_bytes()].concat()], &[]))?;
                    if st == 0 {
                        self.maps.swap_remove(i);
                    }
                }
            }
            12 => {
                if inp.u8().is_multiple_of(4) {
                    self.svc.end_session();
                    for (k, _) in std::mem::take(&mut self.modules) {
                        self.dead_keys.push(k);
                    }
                    self.dead_files.append(&mut self.files);
                    self.maps.clear();
                } else {
                    self.tree.toggle_swap();
                    self.stats.swaps += 1;
                }
            }
            _ => {
                // A raw request: any handle, any scalars word, any payload.
                let handle = match inp.u8() % 3 {
                    0 => 0,
                    1 => self.modules.first().map_or(0, |m| m.0),
                    _ => inp.u32(),
                };
                let sc = inp.u32();
                let len = inp.u8() as usize;
                let payload = inp.bytes(len).to_vec();
                let (st, _) = self.call(handle, sc, &payload)?;
                // A raw request that succeeded may have opened or closed what the model tracks.
                if st == 0 {
                    self.resync();
                }
            }
        }
        self.check_seam()
    }

    /// After a raw request the model no longer knows which handles are live: end the session
    /// and start the books afresh (keys and handles handed out stay in the seen sets: they must
    /// never come back).
    fn resync(&mut self) {
        self.svc.end_session();
        self.modules.clear();
        self.files.clear();
        self.dead_files.clear();
        self.dead_keys.clear();
        self.maps.clear();
    }

    fn check_seam(&self) -> Result<(), Violation> {
        if let Some(v) = self.svc.sys().violation.lock().unwrap().clone() {
            return Err(Violation(v));
        }
        // The service's books match the model's (a module close closed its files, a failed
        // open left nothing behind), and no descriptor is open beyond the open files (the
        // directories of a path walk are closed when it ends).
        let c = self.svc.session_counts();
        let fds = self.svc.sys().live.lock().unwrap().len();
        if c.files != self.files.len() || c.modules != self.modules.len() || fds > c.files {
            return Err(Violation(format!(
                "service holds {} files, {} modules, {fds} descriptors; the model {} files, {} modules",
                c.files,
                c.modules,
                self.files.len(),
                self.modules.len()
            )));
        }
        Ok(())
    }
}

/// Runs the request sequence `data` encodes against a fresh service over `tree`, then checks
/// that everything was released. The tree is restored afterwards.
pub fn run(tree: &Tree, data: &[u8]) -> Result<Stats, Violation> {
    let limits = hexrpc_bsp::Limits {
        max_reverse_request: REQUEST_MAX,
        max_reverse_handles: 6,
        max_reverse_file_bytes: 6000,
        max_dsp_map_bytes: 4 << 20,
        ..hexrpc_bsp::BENCH.limits
    };
    // The simulated kernel ignores the channel number; a non-negative one makes the session end
    // release its maps through it (fd -1 would mean the channel, and its maps, are gone).
    let svc = ReverseService::new(CheckingSys::new(tree), Fd(900), FilePolicy::new(&[tree.allowed.to_str().unwrap()], limits).unwrap());
    svc.register_image("tinylib", &IMAGE).unwrap();
    let mut s = Session {
        svc,
        tree,
        names: tree.names(),
        reply: vec![0u8; REQUEST_MAX as usize + 64],
        modules: Vec::new(),
        keys_seen: HashSet::new(),
        dead_keys: Vec::new(),
        files: Vec::new(),
        files_seen: HashSet::new(),
        dead_files: Vec::new(),
        maps: Vec::new(),
        stats: Stats::default(),
    };
    let mut inp = Input(data);
    let mut result = Ok(());
    while !inp.done() && result.is_ok() {
        result = s.step(&mut inp);
    }
    tree.restore();
    let stats = s.stats;
    let Session { svc, .. } = s;
    let sys_live = {
        svc.end_session();
        let sys = svc.sys();
        (sys.live.lock().unwrap().len(), sys.maps.lock().unwrap().len(), sys.violation.lock().unwrap().clone())
    };
    result?;
    match sys_live {
        (_, _, Some(v)) => Err(Violation(v)),
        (0, 0, None) => Ok(stats),
        (fds, maps, None) => Err(Violation(format!("after session end: {fds} descriptors open, {maps} DSP maps live"))),
    }
}
