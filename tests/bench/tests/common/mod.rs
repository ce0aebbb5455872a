//! Helpers shared by the bench tests: a session set up through the drivers' typed calls, ION
//! buffers, library calls in both entry contracts, and a small test-only reverse listener loop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use hexrpc_bench::{wire, Bench, BenchConfig, V2_MAGIC};
use hexrpc_drivers::adsprpc::{self, InvokeArgs, FASTRPC_ATTR_NOVA};
use hexrpc_drivers::apps_std::{apps_std_STAT, method as asm};
use hexrpc_drivers::{aee, ion, Errno, Error, Fd, Mapping, OpenFlags, Prot, Scalars, Syscalls};
use zerocopy::IntoBytes;

/// A bench with a short reverse timeout (tests that expect no answer stay quick).
pub fn bench() -> Bench {
    Bench::with_config(BenchConfig { reverse_timeout: Duration::from_millis(600), ..Default::default() })
}

/// An ION buffer: handle, share fd and a host mapping.
pub struct Buf {
    pub handle: i32,
    pub fd: Fd,
    pub map: Mapping<Bench>,
}

pub fn alloc(b: &Bench, ion_fd: Fd, len: usize) -> Buf {
    let mut d = ion::ion_allocation_data {
        len: len as u64,
        align: 0x200,
        heap_id_mask: b.board().heap_mask(),
        flags: ion::ION_FLAG_CACHED,
        ..Default::default()
    };
    ion::alloc(b, ion_fd, &mut d).expect("ION alloc");
    let fd = ion::share(b, ion_fd, d.handle).expect("ION share").into_raw();
    let map = Mapping::map_shared(b.clone(), fd, len, Prot::ReadWrite).expect("mmap");
    Buf { handle: d.handle, fd, map }
}

impl Buf {
    pub fn release(self, b: &Bench, ion_fd: Fd) {
        let Buf { handle, fd, map } = self;
        map.unmap().expect("munmap");
        b.close_raw(fd).expect("close share fd");
        ion::free(b, ion_fd, handle).expect("ION free");
    }

    /// Releases a buffer whose number went to channel `rpc` as a handle: first drops the
    /// driver's maps of that number (MUNMAP_FD until it fails, as hexrpc does), because the
    /// driver keeps them after the call and the next buffer to get the number would otherwise be
    /// served from this one (docs/kernel-rules.md, R1 and R8).
    pub fn release_after_calls(self, b: &Bench, ion_fd: Fd, rpc: Fd) {
        let mut dropped = 0;
        while adsprpc::munmap_fd(b, rpc, self.fd, 0, 0).is_ok() {
            dropped += 1;
            assert!(dropped <= 1024, "MUNMAP_FD never ran out of maps of fd {}", self.fd.0);
        }
        self.release(b, ion_fd);
    }
}

pub struct Session {
    pub ion: Fd,
    pub rpc: Fd,
}

/// Opens the nodes, GETINFO, CONTROL(KALLOC), INIT from the shell read through the seam, init2.
pub fn open_session(b: &Bench) -> Session {
    let board = b.board();
    let ion_fd = b.open_raw(board.ion_path, OpenFlags::READ_ONLY).expect("open ion");
    let rpc = b.open_raw(board.rpc_path, OpenFlags::READ_ONLY).expect("open adsprpc");
    assert_eq!(adsprpc::getinfo(b, rpc, board.channel), Ok(1));
    assert_eq!(adsprpc::control_kalloc(b, rpc), Ok(1));
    init_shell(b, ion_fd, rpc).expect("INIT");
    listener_init2(b, rpc).expect("init2");
    Session { ion: ion_fd, rpc }
}

/// Reads the board's shell through the seam into an ION buffer and INITs from it.
pub fn init_shell(b: &Bench, ion_fd: Fd, rpc: Fd) -> Result<(), Error> {
    let sfd = b.open_raw(b.board().shell_path, OpenFlags::READ_ONLY)?;
    let len = b.fstat(sfd)?.size as usize;
    let mut image = vec![0u8; len];
    let n = b.pread(sfd, &mut image, 0)?;
    b.close_raw(sfd)?;
    let mut buf = alloc(b, ion_fd, len.div_ceil(4096) * 4096);
    buf.map.write_at(0, &image[..n]).expect("write shell");
    let r = adsprpc::init(b, rpc, adsprpc::FASTRPC_INIT_CREATE, &buf.map, buf.fd, n as u32);
    buf.release(b, ion_fd);
    r
}

pub fn listener_init2(b: &Bench, rpc: Fd) -> Result<(), Error> {
    let mut a = InvokeArgs::<'_, 1>::new(3).expect("args");
    adsprpc::invoke(b, rpc, adsprpc::FASTRPC_STATIC_HANDLE_LISTENER, &mut a)
}

/// Handle 4 method 2: the DSP process exits (wakes the listener with its exit code).
pub fn process_exit(b: &Bench, rpc: Fd) -> Result<(), Error> {
    let mut a = InvokeArgs::<'_, 1>::new(2).expect("args");
    adsprpc::invoke(b, rpc, adsprpc::CURRENT_PROCESS_HANDLE, &mut a)
}

impl Session {
    pub fn close(self, b: &Bench) {
        let _ = process_exit(b, self.rpc);
        b.close_raw(self.rpc).expect("close rpc");
        b.close_raw(self.ion).expect("close ion");
    }
}

/// remotectl open of `file:///NAME?SYM&_modver=1.0&_dom=cdsp`: Ok(Ok(handle)) or Ok(Err((nErr,
/// dlerror))); Err for a transport failure.
pub fn open_lib_sym(b: &Bench, rpc: Fd, name: &str, sym: &str) -> Result<Result<u32, (i32, String)>, Error> {
    let uri = CString::new(format!("file:///{name}?{sym}&_modver=1.0&_dom=cdsp")).expect("uri");
    let bytes = uri.as_bytes_with_nul();
    let mut prim = Vec::new();
    prim.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    prim.extend_from_slice(&255u32.to_le_bytes());
    let mut out0 = [0u8; 8];
    let mut err = [0u8; 255];
    {
        let mut a = InvokeArgs::<'_, 4>::new(0).expect("args");
        a.input(&prim).unwrap().input(bytes).unwrap().output(&mut out0).unwrap().output(&mut err).unwrap();
        adsprpc::invoke(b, rpc, adsprpc::REMOTECTL_HANDLE, &mut a)?;
    }
    let h = u32::from_le_bytes(out0[0..4].try_into().unwrap());
    let n_err = i32::from_le_bytes(out0[4..8].try_into().unwrap());
    if n_err != 0 {
        let end = err.iter().position(|&c| c == 0).unwrap_or(err.len());
        return Ok(Err((n_err, String::from_utf8_lossy(&err[..end]).into_owned())));
    }
    Ok(Ok(h))
}

pub fn open_lib(b: &Bench, rpc: Fd, name: &str) -> Result<Result<u32, (i32, String)>, Error> {
    open_lib_sym(b, rpc, name, "entry")
}

/// remotectl close; returns nErr.
pub fn close_lib(b: &Bench, rpc: Fd, handle: u32) -> Result<i32, Error> {
    let mut prim = Vec::new();
    prim.extend_from_slice(&handle.to_le_bytes());
    prim.extend_from_slice(&64u32.to_le_bytes());
    let mut out0 = [0u8; 8];
    let mut err = [0u8; 64];
    {
        let mut a = InvokeArgs::<'_, 3>::new(1).expect("args");
        a.input(&prim).unwrap().output(&mut out0).unwrap().output(&mut err).unwrap();
        adsprpc::invoke(b, rpc, adsprpc::REMOTECTL_HANDLE, &mut a)?;
    }
    Ok(i32::from_le_bytes(out0[0..4].try_into().unwrap()))
}

/// A v2 launch: buffers (fd, view offset, view length, lease length) and 8-byte scalars.
pub fn call_v2(b: &Bench, rpc: Fd, handle: u32, bufs: &[(Fd, u32, u32, u32)], scalars: &[[u8; 8]]) -> (Result<(), Error>, u64) {
    let mut pra0 = Vec::new();
    pra0.extend_from_slice(&V2_MAGIC.to_le_bytes());
    pra0.extend_from_slice(&(bufs.len() as u32).to_le_bytes());
    let mut pra1 = Vec::new();
    for &(_, off, len, lease) in bufs {
        pra0.extend_from_slice(&len.to_le_bytes());
        pra0.extend_from_slice(&0u32.to_le_bytes());
        pra1.extend_from_slice(&off.to_le_bytes());
        pra1.extend_from_slice(&lease.to_le_bytes());
    }
    for s in scalars {
        pra0.extend_from_slice(s);
    }
    launch(b, rpc, handle, &pra0, &pra1, bufs.iter().map(|x| x.0))
}

/// A v1 launch: buffers (fd, view offset, view size) and 8-byte scalars.
pub fn call_v1(b: &Bench, rpc: Fd, handle: u32, bufs: &[(Fd, u32, u32)], scalars: &[[u8; 8]]) -> (Result<(), Error>, u64) {
    let mut pra0 = Vec::new();
    let mut pra1 = Vec::new();
    for &(_, off, size) in bufs {
        pra0.extend_from_slice(&size.to_le_bytes());
        pra0.extend_from_slice(&0u32.to_le_bytes());
        pra1.extend_from_slice(&off.to_le_bytes());
    }
    for s in scalars {
        pra0.extend_from_slice(s);
    }
    launch(b, rpc, handle, &pra0, &pra1, bufs.iter().map(|x| x.0))
}

fn launch(b: &Bench, rpc: Fd, handle: u32, pra0: &[u8], pra1: &[u8], fds: impl Iterator<Item = Fd>) -> (Result<(), Error>, u64) {
    let mut timer = [0u8; 8];
    let r = {
        let mut a = InvokeArgs::<'_, 20>::new(2).expect("args");
        a.input(pra0).unwrap().input(pra1).unwrap().output(&mut timer).unwrap();
        for fd in fds {
            a.out_handle(fd, FASTRPC_ATTR_NOVA).unwrap();
        }
        adsprpc::invoke_attrs(b, rpc, handle, &mut a)
    };
    (r, u64::from_le_bytes(timer))
}

/// The key the test listener returns for apps_std.
pub const APPS_STD_KEY: u32 = 0x5354_4400;

/// What the test listener saw.
#[derive(Debug, Default)]
pub struct ListenerLog {
    pub requests: Vec<(u32, u32, usize)>,
    pub get_in_bufs2: usize,
    pub exit: Option<Error>,
}

struct Served {
    root: PathBuf,
    files: HashMap<u32, (Fd, u64)>,
    next: u32,
}

fn cstr_arg(b: &[u8]) -> Option<String> {
    let (last, body) = b.split_last()?;
    if *last != 0 {
        return None;
    }
    std::str::from_utf8(body).ok().map(str::to_owned)
}

impl Served {
    /// Only plain names inside the root: no absolute paths, no `..`.
    fn resolve(&self, name: &str) -> Option<PathBuf> {
        let p = Path::new(name);
        if p.is_absolute() || p.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
            return None;
        }
        Some(self.root.join(p))
    }

    fn serve(&mut self, b: &Bench, handle: u32, sc: Scalars, payload: &[u8]) -> (i32, Vec<Vec<u8>>) {
        if sc.handles() != 0 {
            return (aee::AEE_EBADPARM, vec![]);
        }
        let Ok((ins, outs)) = wire::unpack_request(payload, sc.inbufs() as usize, sc.outbufs() as usize) else {
            return (aee::AEE_EBADPARM, vec![]);
        };
        let zeroed = |outs: &[u32]| outs.iter().map(|&l| vec![0u8; l as usize]).collect::<Vec<_>>();
        match (handle, sc.method()) {
            (0, 0) => {
                let mut o = zeroed(&outs);
                if o.len() != 2 || o[0].len() < 8 || ins.len() != 2 {
                    return (aee::AEE_EBADPARM, vec![]);
                }
                if cstr_arg(&ins[1]).as_deref() == Some("apps_std") {
                    o[0][0..4].copy_from_slice(&APPS_STD_KEY.to_le_bytes());
                } else {
                    o[0][4..8].copy_from_slice(&aee::AEE_ENOSUCHMOD.to_le_bytes());
                }
                (0, o)
            }
            (APPS_STD_KEY, m) => {
                let id = if m == 31 {
                    ins.first().and_then(|p| p.get(0..4)).map(|w| u32::from_le_bytes(w.try_into().unwrap()))
                } else {
                    Some(m as u32)
                };
                self.apps_std(b, id.unwrap_or(u32::MAX), &ins, &outs)
            }
            _ => (aee::AEE_ENOSUCHMOD, vec![]),
        }
    }

    fn open_path(&self, b: &Bench, name: &str) -> Result<Fd, i32> {
        let path = self.resolve(name).ok_or(aee::AEE_EBADPARM)?;
        let c = CString::new(path.to_string_lossy().into_owned()).map_err(|_| aee::AEE_EBADPARM)?;
        b.open_raw(&c, OpenFlags { nofollow: true, ..OpenFlags::READ_ONLY }).map_err(|_| aee::AEE_EFOPEN)
    }

    fn apps_std(&mut self, b: &Bench, id: u32, ins: &[Vec<u8>], outs: &[u32]) -> (i32, Vec<Vec<u8>>) {
        let w = |i: usize, at: usize| ins.get(i).and_then(|p| p.get(at..at + 4)).map(|x| u32::from_le_bytes(x.try_into().unwrap()));
        match id {
            asm::FOPEN_WITH_ENV => {
                let Some(name) = ins.get(3).and_then(|n| cstr_arg(n)) else { return (aee::AEE_EBADPARM, vec![]) };
                match self.open_path(b, &name) {
                    Ok(fd) => {
                        let file = self.next;
                        self.next += 1;
                        self.files.insert(file, (fd, 0));
                        (0, vec![file.to_le_bytes().to_vec()])
                    }
                    Err(e) => (e, vec![]),
                }
            }
            asm::STAT => {
                let Some(name) = ins.get(1).and_then(|n| cstr_arg(n)) else { return (aee::AEE_EBADPARM, vec![]) };
                let Some(path) = self.resolve(&name) else { return (aee::AEE_EBADPARM, vec![]) };
                let c = CString::new(path.to_string_lossy().into_owned()).unwrap();
                match b.stat(&c, false) {
                    Ok(s) => {
                        let st = apps_std_STAT { dev: s.dev, ino: s.ino, mode: s.mode, nlink: s.nlink, size: s.size, ..Default::default() };
                        (0, vec![st.as_bytes().to_vec()])
                    }
                    Err(_) => (aee::AEE_ENOSUCHFILE, vec![]),
                }
            }
            asm::FREAD => {
                let (Some(file), Some(want)) = (w(0, 0), w(0, 4)) else { return (aee::AEE_EBADPARM, vec![]) };
                if outs.len() != 2 || outs[1] != want || want > 1 << 20 {
                    return (aee::AEE_EBADPARM, vec![]);
                }
                let Some((fd, pos)) = self.files.get_mut(&file) else { return (aee::AEE_EBADFD, vec![]) };
                let mut data = vec![0u8; want as usize];
                let n = match b.pread(*fd, &mut data, *pos) {
                    Ok(n) => n,
                    Err(_) => return (aee::AEE_EFREAD, vec![]),
                };
                *pos += n as u64;
                let mut prim = Vec::new();
                prim.extend_from_slice(&(n as i32).to_le_bytes());
                prim.extend_from_slice(&i32::from(n < want as usize).to_le_bytes());
                (0, vec![prim, data])
            }
            asm::FSEEK => {
                let (Some(file), Some(off), Some(whence)) = (w(0, 0), w(0, 4), w(0, 8)) else { return (aee::AEE_EBADPARM, vec![]) };
                let Some((fd, pos)) = self.files.get_mut(&file) else { return (aee::AEE_EBADFD, vec![]) };
                let base = match whence {
                    0 => 0i64,
                    1 => *pos as i64,
                    2 => b.fstat(*fd).map(|s| s.size as i64).unwrap_or(0),
                    _ => return (aee::AEE_EBADPARM, vec![]),
                };
                let new = base + off as i32 as i64;
                if new < 0 {
                    return (aee::AEE_EFSEEK, vec![]);
                }
                *pos = new as u64;
                (0, vec![])
            }
            asm::FCLOSE => {
                let Some(file) = w(0, 0) else { return (aee::AEE_EBADPARM, vec![]) };
                match self.files.remove(&file) {
                    Some((fd, _)) => {
                        let _ = b.close_raw(fd);
                        (0, vec![])
                    }
                    None => (aee::AEE_EBADFD, vec![]),
                }
            }
            _ => (aee::AEE_EUNSUPPORTED, vec![]),
        }
    }
}

/// Capacity of the test listener's request buffer.
pub const LISTENER_CAP: usize = 4096;

/// A test-only reverse listener loop on the drivers' typed calls: next2, get_in_bufs2 when a
/// request does not fit, apps_remotectl open of apps_std, and apps_std (fopen_with_env, stat,
/// fread, fseek, fclose) serving plain names from `root`. Ends when next2 fails (process exit).
pub fn spawn_listener(b: &Bench, rpc: Fd, root: PathBuf) -> JoinHandle<ListenerLog> {
    let b = b.clone();
    std::thread::spawn(move || {
        let mut log = ListenerLog::default();
        let mut svc = Served { root, files: HashMap::new(), next: 100 };
        let (mut prev_ctx, mut prev_result, mut reply) = (0u32, -1i32, Vec::<u8>::new());
        // The request buffers live across calls: a resumed next2 writes to the first call's.
        let mut out0 = [0u8; 16];
        let mut req = vec![0u8; LISTENER_CAP];
        loop {
            let mut in0 = Vec::new();
            for v in [prev_ctx, prev_result as u32, reply.len() as u32, LISTENER_CAP as u32] {
                in0.extend_from_slice(&v.to_le_bytes());
            }
            let r = {
                let mut a = InvokeArgs::<'_, 4>::new(4).expect("args");
                a.input(&in0).unwrap().input(&reply).unwrap().output(&mut out0).unwrap().output(&mut req).unwrap();
                adsprpc::invoke(&b, rpc, adsprpc::FASTRPC_STATIC_HANDLE_LISTENER, &mut a)
            };
            match r {
                Ok(()) => {}
                Err(Error::Os(Errno::EINTR)) => continue,
                Err(e) => {
                    log.exit = Some(e);
                    break;
                }
            }
            let word = |i: usize| u32::from_le_bytes(out0[i..i + 4].try_into().unwrap());
            let (ctx, handle, sc, len) = (word(0), word(4), Scalars::from_raw(word(8)), word(12) as i32);
            log.requests.push((handle, sc.raw(), len.max(0) as usize));
            let mut payload = req[..(len.max(0) as usize).min(LISTENER_CAP)].to_vec();
            if len > LISTENER_CAP as i32 && len <= 1 << 20 {
                log.get_in_bufs2 += 1;
                let mut rest = vec![0u8; len as usize - LISTENER_CAP];
                let mut got = [0u8; 4];
                let mut gin = Vec::new();
                for v in [ctx, LISTENER_CAP as u32, rest.len() as u32] {
                    gin.extend_from_slice(&v.to_le_bytes());
                }
                let r = {
                    let mut a = InvokeArgs::<'_, 3>::new(5).expect("args");
                    a.input(&gin).unwrap().output(&mut got).unwrap().output(&mut rest).unwrap();
                    adsprpc::invoke(&b, rpc, adsprpc::FASTRPC_STATIC_HANDLE_LISTENER, &mut a)
                };
                if r.is_err() || u32::from_le_bytes(got) != len as u32 {
                    (prev_ctx, prev_result, reply) = (ctx, aee::AEE_EBADPARM, Vec::new());
                    continue;
                }
                payload.extend_from_slice(&rest);
            } else if len < 0 || len as usize > LISTENER_CAP {
                (prev_ctx, prev_result, reply) = (ctx, aee::AEE_EBADSIZE, Vec::new());
                continue;
            }
            let (result, outs) = svc.serve(&b, handle, sc, &payload);
            let refs: Vec<&[u8]> = outs.iter().map(Vec::as_slice).collect();
            reply = if result == 0 { wire::pack_reply(&refs) } else { Vec::new() };
            (prev_ctx, prev_result) = (ctx, result);
        }
        for (_, (fd, _)) in svc.files.drain() {
            let _ = b.close_raw(fd);
        }
        log
    })
}

/// A fresh temp directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-bench-{tag}-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
