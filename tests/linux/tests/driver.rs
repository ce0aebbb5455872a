//! The real driver (Linux's drivers/misc/fastrpc.c) against a tiny DSP written here: a [`Host`]
//! whose `send` hands each 40-byte `fastrpc_msg` to a DSP thread, which reads the payload through
//! the shim's bus addresses, writes its outputs there and answers through `Channel::receive`.
//!
//! Tests run one at a time (`SERIAL`): `Counts::allocations` is process-wide.

use hexrpc_linux::{bus_to_host, interrupt, Channel, Config, Counts, DmaBuf, Host, MapInfo};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

// ---- the uapi (include/uapi/misc/fastrpc.h), in our words -----------------------------------

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InvokeArgs {
    ptr: u64,
    length: u64,
    fd: i32,
    attr: u32,
}

#[repr(C)]
struct Invoke {
    handle: u32,
    sc: u32,
    args: u64,
}

#[repr(C)]
#[derive(Default)]
struct Capability {
    domain: u32,
    attribute_id: u32,
    capability: u32,
    reserved: [u32; 4],
}

#[repr(C)]
#[derive(Default)]
struct AllocDmaBuf {
    fd: i32,
    flags: u32,
    size: u64,
}

const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | ((size as u32) << 16) | ((b'R' as u32) << 8) | nr
}
const fn io(nr: u32) -> u32 {
    ((b'R' as u32) << 8) | nr
}
const ALLOC_DMA_BUFF: u32 = iowr(1, std::mem::size_of::<AllocDmaBuf>());
const INVOKE: u32 = iowr(3, std::mem::size_of::<Invoke>());
const INIT_ATTACH: u32 = io(4);
const GET_DSP_INFO: u32 = iowr(13, std::mem::size_of::<Capability>());

const fn scalars(method: u32, inbufs: u32, outbufs: u32, inhandles: u32, outhandles: u32) -> u32 {
    (method << 24) | (inbufs << 16) | (outbufs << 8) | (inhandles << 4) | outhandles
}

const EFAULT: i64 = 14;
const EINVAL: i64 = 22;
const EPIPE: i64 = 32;
const ENODEV: i32 = 19;
const ERESTARTSYS: i64 = 512;

const NODE: &str = "fastrpc-cdsp";
const SECURE_NODE: &str = "fastrpc-cdsp-secure";

// user handle 5: the methods of our DSP
const ECHO: u32 = 1; // in buf 0 -> out buf 1, reversed
const PEEK: u32 = 2; // first 16 bytes of in-handle (index 1) -> out buf 0
const PEEK_AND_DROP: u32 = 4; // PEEK, then names the handle's fd in the fdlist
const SILENT: u32 = 3; // never answered

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

// ---- the host ----------------------------------------------------------------------------

#[derive(Clone, Copy)]
struct Buf {
    key: u64,
    len: u64,
    vaddr: usize,
}

#[derive(Default)]
struct HostState {
    bufs: HashMap<i32, Buf>,
    refs: HashMap<u64, i64>,
    vmas: Vec<(u64, u64)>,
}

struct TestHost {
    tx: Mutex<Sender<Vec<u8>>>,
    state: Mutex<HostState>,
}

impl Host for TestHost {
    fn send(&self, msg: &[u8]) -> Result<(), i32> {
        self.tx.lock().unwrap().send(msg.to_vec()).map_err(|_| -(EPIPE as i32))
    }
    fn dmabuf_get(&self, fd: i32) -> Result<DmaBuf, i32> {
        let mut s = self.state.lock().unwrap();
        let b = *s.bufs.get(&fd).ok_or(-9)?;
        *s.refs.entry(b.key).or_default() += 1;
        Ok(DmaBuf { key: b.key, len: b.len, vaddr: b.vaddr as *mut u8 })
    }
    fn dmabuf_put(&self, key: u64) {
        *self.state.lock().unwrap().refs.entry(key).or_default() -= 1;
    }
    fn vma_lookup(&self, addr: u64) -> Option<(u64, u64)> {
        self.state.lock().unwrap().vmas.iter().copied().find(|&(s, e)| s <= addr && addr < e)
    }
}

/// A memfd mapped shared: the test's dma-buf (key = its inode).
struct MemFd {
    fd: i32,
    ptr: *mut u8,
    len: usize,
    key: u64,
}

impl MemFd {
    fn new(len: usize) -> MemFd {
        // SAFETY: a NUL-terminated name, no flags.
        let fd = unsafe { libc::memfd_create(c"hexrpc-test".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: fd is our memfd.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
        // SAFETY: a fresh shared mapping of the memfd.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: an all-zero stat is a valid out value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open, st a valid out pointer.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        MemFd { fd, ptr: ptr as *mut u8, len, key: st.st_ino as u64 }
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: ptr maps len bytes for our lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for MemFd {
    fn drop(&mut self) {
        // SAFETY: our mapping and descriptor.
        unsafe {
            libc::munmap(self.ptr as *mut c_void, self.len);
            libc::close(self.fd);
        }
    }
}

// ---- the DSP -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Seen {
    ctx: u64,
    pid: u32,
    tid: u32,
    handle: u32,
    sc: u32,
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// The payload of one invocation, reached through bus addresses only.
struct Payload {
    base: *mut u8,
    n: usize,
}

impl Payload {
    fn meta(&self, off: usize) -> u64 {
        // SAFETY: the metadata lies inside the payload the bus table mapped (checked in `open`).
        unsafe { (self.base.add(off) as *const u64).read_unaligned() }
    }
    fn pv(&self, i: usize) -> u64 {
        self.meta(16 * i)
    }
    fn len(&self, i: usize) -> u64 {
        self.meta(16 * i + 8)
    }
    fn page(&self, i: usize) -> (u64, u64) {
        (self.meta(24 * self.n + 16 * i), self.meta(24 * self.n + 16 * i + 8))
    }
    fn handle_fd(&self, i: usize) -> i32 {
        self.meta(16 * i) as u32 as i32
    }
    /// A copied buffer: its page's bus address plus the offset of pv in its page.
    fn buf(&self, i: usize) -> &'static mut [u8] {
        let (addr, _) = self.page(i);
        let len = self.len(i);
        let host = bus_to_host(addr + (self.pv(i) & 0xfff), len).expect("buffer bus address");
        // SAFETY: the bus table says [host, host + len) is live payload memory.
        unsafe { std::slice::from_raw_parts_mut(host, len as usize) }
    }
    fn set_fdlist(&self, k: usize, fd: u64) {
        let off = 40 * self.n + 8 * k;
        // SAFETY: the fdlist lies in the metadata inside the payload.
        unsafe { (self.base.add(off) as *mut u64).write_unaligned(fd) }
    }
}

fn open_payload(msg: &[u8], n: usize) -> Payload {
    let (addr, size) = (u64_at(msg, 24), u64_at(msg, 32));
    assert!(size as usize >= 40 * n, "payload too small");
    let base = bus_to_host(addr, size).expect("payload bus address");
    Payload { base, n }
}

fn dsp(ch: Weak<Channel>, rx: Receiver<Vec<u8>>, seen: Arc<Mutex<Vec<Seen>>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let msg = match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        assert_eq!(msg.len(), 40, "fastrpc_msg is 40 bytes");
        let s = Seen { ctx: u64_at(&msg, 8), pid: u32_at(&msg, 0), tid: u32_at(&msg, 4), handle: u32_at(&msg, 16), sc: u32_at(&msg, 20) };
        seen.lock().unwrap().push(s);
        let ctx = u64_at(&msg, 8);
        let method = (s.sc >> 24) & 0x1f;
        let n = ((s.sc >> 16) & 0xff) + ((s.sc >> 8) & 0xff) + ((s.sc >> 4) & 0xf) + (s.sc & 0xf);
        let n = n as usize;
        let retval: i32 = match (s.handle, method) {
            (1, _) => 0,
            (2, 0) => {
                let p = open_payload(&msg, n);
                let count = u32::from_le_bytes(p.buf(0)[..4].try_into().unwrap());
                let out = p.buf(1);
                assert_eq!(out.len(), 4 * count as usize);
                for (j, w) in out.chunks_exact_mut(4).enumerate() {
                    w.copy_from_slice(&(1000 + j as u32).to_le_bytes());
                }
                0
            }
            (5, ECHO) => {
                let p = open_payload(&msg, n);
                let input = p.buf(0).to_vec();
                let out = p.buf(1);
                for (o, i) in out.iter_mut().zip(input.iter().rev()) {
                    *o = *i;
                }
                0
            }
            (5, PEEK) | (5, PEEK_AND_DROP) => {
                let p = open_payload(&msg, n);
                let (addr, size) = p.page(1);
                let src = bus_to_host(addr, size).expect("dma-buf bus address");
                let out = p.buf(0);
                // SAFETY: the bus table maps [src, src + size) to the dma-buf's bytes.
                let bytes = unsafe { std::slice::from_raw_parts(src, out.len()) };
                out.copy_from_slice(bytes);
                if method == PEEK_AND_DROP {
                    p.set_fdlist(0, p.handle_fd(1) as u64);
                }
                0
            }
            (5, SILENT) => continue,
            _ => -1,
        };
        let mut rsp = [0u8; 16];
        rsp[..8].copy_from_slice(&ctx.to_le_bytes());
        rsp[8..12].copy_from_slice(&retval.to_le_bytes());
        if let Some(ch) = ch.upgrade() {
            assert_eq!(ch.receive(&rsp), 0, "the driver accepts our answer");
        }
    }
}

struct Rig {
    ch: Arc<Channel>,
    host: Arc<TestHost>,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    dsp: Option<JoinHandle<()>>,
}

impl Rig {
    fn new(sessions: u32) -> Rig {
        let (tx, rx) = mpsc::channel();
        let host = Arc::new(TestHost { tx: Mutex::new(tx), state: Mutex::default() });
        let ch = Arc::new(Channel::probe(host.clone(), &Config { sessions, non_secure: true, kernel_timeout: None }).expect("probe"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s, st) = (Arc::downgrade(&ch), seen.clone(), stop.clone());
        let dsp = Some(thread::spawn(move || dsp(w, rx, s, st)));
        Rig { ch, host, seen, stop, dsp }
    }

    fn share(&self, m: &MemFd) {
        let mut s = self.host.state.lock().unwrap();
        s.bufs.insert(m.fd, Buf { key: m.key, len: m.len as u64, vaddr: m.ptr as usize });
        s.vmas.push((m.ptr as u64, m.ptr as u64 + m.len as u64));
    }

    fn invoke(&self, file: &hexrpc_linux::File, handle: u32, sc: u32, args: &mut [InvokeArgs]) -> i64 {
        let mut inv = Invoke { handle, sc, args: args.as_mut_ptr() as u64 };
        // SAFETY: inv points at valid args whose buffers outlive the call.
        unsafe { self.ch.ioctl(file, INVOKE, &mut inv as *mut Invoke as *mut c_void) }
    }

    fn counts(&self) -> Counts {
        self.ch.settled_counts()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.dsp.take() {
            let _ = t.join();
        }
    }
}

fn arg<T>(v: &mut [T], fd: i32) -> InvokeArgs {
    InvokeArgs { ptr: v.as_mut_ptr() as u64, length: std::mem::size_of_val(v) as u64, fd, attr: 0 }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

// ---- tests --------------------------------------------------------------------------------

#[test]
fn versions_are_the_pinned_kernel() {
    assert_eq!(hexrpc_linux::KERNEL_VERSION, hexrpc_linux::c_kernel_version());
    assert!(hexrpc_linux::KERNEL_VERSION.starts_with("6.1."), "{}", hexrpc_linux::KERNEL_VERSION);
    assert!(!hexrpc_linux::PACKAGE_VERSION.is_empty());
}

#[test]
fn probe_checks_the_session_count() {
    let (tx, _rx) = mpsc::channel();
    for sessions in [0, 14] {
        let host = Arc::new(TestHost { tx: Mutex::new(tx.clone()), state: Mutex::default() });
        let r = Channel::probe(host, &Config { sessions, non_secure: false, kernel_timeout: None });
        assert_eq!(r.err(), Some(-(EINVAL as i32)), "{sessions} sessions");
    }
    // a secure-only DSP still gets both CDSP nodes; 13 context banks probe
    let _g = serial();
    let host = Arc::new(TestHost { tx: Mutex::new(tx), state: Mutex::default() });
    let ch = Channel::probe(host, &Config { sessions: 13, non_secure: false, kernel_timeout: None }).expect("13 sessions");
    let files: Vec<_> = (0..13).map(|_| ch.open(SECURE_NODE).expect("one per session")).collect();
    assert_eq!(ch.open(NODE).err(), Some(-16), "all 13 sessions are taken");
    assert_eq!(ch.settled_counts().users, 13);
    ch.remove(); // releases then cannot reach a DSP (none here): -EPIPE inside, no wait
    for f in files {
        assert_eq!(ch.release(f), 0);
    }
    assert_eq!(ch.settled_counts().users, 0);
}

#[test]
fn open_and_release_both_nodes_free_everything() {
    let _g = serial();
    let rig = Rig::new(2);
    let start = rig.counts();
    assert_eq!((start.users, start.contexts, start.coherent), (0, 0, 0));
    let a = rig.ch.open(NODE).expect("open the unsigned node");
    let b = rig.ch.open(SECURE_NODE).expect("open the secure node");
    assert_eq!(rig.counts().users, 2);
    // two sessions, both taken: a third open finds none (fastrpc_session_alloc)
    assert_eq!(rig.ch.open(NODE).err(), Some(-16));
    assert_eq!(rig.ch.open("fastrpc-adsp").err(), Some(-ENODEV));
    assert_eq!(rig.ch.release(a), 0);
    assert_eq!(rig.ch.release(b), 0);
    let end = rig.counts();
    assert_eq!(end.users, 0);
    assert_eq!(end.contexts, 0);
    assert_eq!(end.coherent, 0);
    assert_eq!(end.allocations, start.allocations, "every kzalloc of open/release was freed");
    // each release asked the DSP to release the process (handle 1, method 1), as the open file's tgid
    let seen = rig.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for s in seen {
        assert_eq!((s.handle, (s.sc >> 24) & 0x1f), (1, 1));
        assert_eq!(s.pid, 0, "kernel messages carry pid 0");
        assert_eq!(s.tid as i32, gettid());
    }
    assert_eq!(end.sent, 2);
    assert_eq!(end.received, 2);
    assert_eq!(end.leaked_users, 0);
    assert!(rig.ch.leaked().is_empty(), "clean releases leave no user behind");
}

#[test]
fn get_dsp_info_asks_the_dsp_once() {
    let _g = serial();
    let rig = Rig::new(1);
    let f = rig.ch.open(NODE).unwrap();
    let mut cap = Capability { domain: 3, attribute_id: 5, ..Default::default() };
    // SAFETY: cap is a valid fastrpc_ioctl_capability.
    let r = unsafe { rig.ch.ioctl(&f, GET_DSP_INFO, &mut cap as *mut Capability as *mut c_void) };
    assert_eq!(r, 0);
    // the DSP filled attributes 1.. with 1000, 1001, ...; attribute 0 is the kernel's 0
    assert_eq!(cap.capability, 1004);
    let seen = rig.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].handle, seen[0].sc), (2, scalars(0, 1, 1, 0, 0)));
    let mut cap0 = Capability { domain: 3, attribute_id: 0, ..Default::default() };
    // SAFETY: as above.
    let r = unsafe { rig.ch.ioctl(&f, GET_DSP_INFO, &mut cap0 as *mut Capability as *mut c_void) };
    assert_eq!((r, cap0.capability), (0, 0));
    assert_eq!(rig.counts().sent, 1, "the attributes are cached per channel");
    let mut bad = Capability { domain: 1, attribute_id: 0, ..Default::default() };
    // SAFETY: as above.
    let r = unsafe { rig.ch.ioctl(&f, GET_DSP_INFO, &mut bad as *mut Capability as *mut c_void) };
    assert_eq!(r, -44, "the modem domain is refused with -ECHRNG");
    assert_eq!(rig.ch.release(f), 0);
}

#[test]
fn invoke_copies_buffers_both_ways() {
    let _g = serial();
    let rig = Rig::new(1);
    let f = rig.ch.open(NODE).unwrap();
    // SAFETY: INIT_ATTACH takes no argument.
    assert_eq!(unsafe { rig.ch.ioctl(&f, INIT_ATTACH, std::ptr::null_mut()) }, 0);
    let mut input: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let mut output = vec![0u8; 300];
    let mut args = [arg(&mut input, -1), arg(&mut output, -1)];
    assert_eq!(rig.invoke(&f, 5, scalars(ECHO, 1, 1, 0, 0), &mut args), 0);
    let want: Vec<u8> = input.iter().rev().copied().collect();
    assert_eq!(output, want);
    let seen = rig.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].handle, seen[0].sc), (1, scalars(0, 1, 0, 0, 0)), "INIT_ATTACH");
    assert_eq!(seen[1].handle, 5);
    assert_eq!(seen[1].pid, std::process::id(), "user messages carry the tgid");
    assert_eq!(seen[1].tid as i32, gettid());
    let c = rig.counts();
    assert_eq!((c.contexts, c.coherent), (0, 0), "the payload and context are gone after the call");
    // an unknown method: the DSP's error comes back raw
    assert_eq!(rig.invoke(&f, 5, scalars(9, 1, 1, 0, 0), &mut args), -1);
    // a bad user pointer: the shim's checked copy makes it -EFAULT, not a crash
    let mut bad = [InvokeArgs { ptr: 16, length: 64, fd: -1, attr: 0 }, arg(&mut output, -1)];
    assert_eq!(rig.invoke(&f, 5, scalars(ECHO, 1, 1, 0, 0), &mut bad), -EFAULT);
    let mut inv = Invoke { handle: 5, sc: scalars(ECHO, 1, 1, 0, 0), args: 16 };
    // SAFETY: inv is valid; its args pointer is deliberately bad (the driver must fault cleanly).
    let r = unsafe { rig.ch.ioctl(&f, INVOKE, &mut inv as *mut Invoke as *mut c_void) };
    assert_eq!(r, -EFAULT);
    // user code may not use the kernel's init handle
    assert_eq!(rig.invoke(&f, 1, scalars(0, 1, 1, 0, 0), &mut args), -1);
    assert_eq!(rig.ch.release(f), 0);
    let c = rig.counts();
    assert_eq!((c.users, c.contexts, c.coherent), (0, 0, 0));
}

/// An 8 KiB dma-buf starting with "dma-buf contents", shared with the rig's host.
fn shared_contents(rig: &Rig) -> MemFd {
    let mut m = MemFd::new(8192);
    m.bytes()[..16].copy_from_slice(b"dma-buf contents");
    rig.share(&m);
    m
}

#[test]
fn handle_maps_outlive_the_call_until_fdlist_or_release() {
    let _g = serial();
    let rig = Rig::new(1);
    let mut m = shared_contents(&rig);
    let f = rig.ch.open(NODE).unwrap();
    let mut out = [0u8; 16];
    let handle = InvokeArgs { ptr: m.ptr as u64, length: m.len as u64, fd: m.fd, attr: 0 };
    let mut args = [arg(&mut out, -1), handle];
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK, 0, 1, 1, 0), &mut args), 0);
    assert_eq!(&out, b"dma-buf contents", "the DSP read the dma-buf through its bus address");
    let c = rig.counts();
    assert_eq!((c.attachments, c.dmabufs), (1, 1), "the handle's map stays after the call");
    assert_eq!(rig.host.state.lock().unwrap().refs[&m.key], 1);
    // a second call with the same fd makes a second map (handles are attached, not looked up)
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK, 0, 1, 1, 0), &mut args), 0);
    assert_eq!(rig.counts().attachments, 2);
    // the DSP names the fd in the fdlist: the driver drops one map of that fd
    m.bytes()[..16].copy_from_slice(b"second contents!");
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK_AND_DROP, 0, 1, 1, 0), &mut args), 0);
    assert_eq!(&out, b"second contents!");
    assert_eq!(rig.counts().attachments, 2);
    assert_eq!(rig.ch.release(f), 0);
    let c = rig.counts();
    assert_eq!((c.attachments, c.dmabufs, c.users), (0, 0, 0), "release frees the remaining maps");
    assert_eq!(rig.host.state.lock().unwrap().refs[&m.key], 0, "every host reference came back");
}

#[test]
fn a_buffer_backed_by_a_dma_buf_is_not_copied() {
    let _g = serial();
    let rig = Rig::new(1);
    let mut m = MemFd::new(4096);
    m.bytes()[100..110].copy_from_slice(b"0123456789");
    rig.share(&m);
    let f = rig.ch.open(NODE).unwrap();
    let mut out = [0u8; 10];
    // in buf 0 is the dma-buf (fd), 100 bytes into its mapping: the driver passes its pages
    let input = InvokeArgs { ptr: m.ptr as u64 + 100, length: 10, fd: m.fd, attr: 0 };
    let mut args = [input, arg(&mut out, -1)];
    assert_eq!(rig.invoke(&f, 5, scalars(ECHO, 1, 1, 0, 0), &mut args), 0);
    assert_eq!(&out, b"9876543210");
    let c = rig.counts();
    assert_eq!((c.attachments, c.dmabufs), (0, 0), "a buffer's map goes with its context");
    assert_eq!(rig.ch.release(f), 0);
}

#[test]
fn an_interrupted_call_keeps_its_context_and_user() {
    let _g = serial();
    let rig = Rig::new(1);
    let f = Arc::new(rig.ch.open(NODE).unwrap());
    let (tid_tx, tid_rx) = mpsc::channel();
    let (ch, f2) = (rig.ch.clone(), f.clone());
    let caller = thread::spawn(move || {
        tid_tx.send(gettid()).unwrap();
        let mut v = [0u8; 8];
        let mut args = [arg(&mut v, -1)];
        let mut inv = Invoke { handle: 5, sc: scalars(SILENT, 1, 0, 0, 0), args: args.as_mut_ptr() as u64 };
        // SAFETY: inv and args are valid for the call.
        unsafe { ch.ioctl(&f2, INVOKE, &mut inv as *mut Invoke as *mut c_void) }
    });
    let tid = tid_rx.recv().unwrap();
    assert!(!interrupt(gettid()), "a thread that is not waiting cannot be interrupted");
    wait_until("the call to block", || interrupt(tid));
    assert_eq!(caller.join().unwrap(), -ERESTARTSYS);
    let c = rig.counts();
    assert_eq!((c.contexts, c.users), (1, 1), "the interrupted context stays pending");
    let f = Arc::try_unwrap(f).unwrap();
    assert_eq!(rig.ch.release(f), 0);
    // In 6.1.192 an interrupted context is neither freed nor completed by the release: it holds
    // a reference on its fastrpc_user (taken in fastrpc_context_alloc), so fastrpc_user_free never
    // runs and both stay until the process would exit.
    let c = rig.counts();
    assert_eq!((c.contexts, c.users), (1, 1));
    // A late answer completes it and drops the send's reference, not the allocation's one.
    let msg = rig.seen.lock().unwrap().iter().find(|s| s.handle == 5).copied().expect("the silent call was sent");
    assert_eq!(msg.tid as i32, tid);
    let mut rsp = [0u8; 16];
    rsp[..8].copy_from_slice(&msg.ctx.to_le_bytes());
    assert_eq!(rig.ch.receive(&rsp), 0, "its context id is still registered");
    let c = rig.counts();
    assert_eq!((c.contexts, c.users, c.sent, c.received), (1, 1, 2, 2));
    // an answer for a context id that was never handed out
    rsp[..8].copy_from_slice(&0xff0u64.to_le_bytes());
    assert_eq!(rig.ch.receive(&rsp), -2, "-ENOENT");
    assert_eq!(rig.ch.receive(&rsp[..8]), -(EINVAL as i32), "a short answer");
}

#[test]
fn remove_fails_calls_in_flight_and_reprobe_brings_the_nodes_back() {
    let _g = serial();
    let rig = Rig::new(1);
    let f = Arc::new(rig.ch.open(NODE).unwrap());
    let (ch, f2) = (rig.ch.clone(), f.clone());
    let caller = thread::spawn(move || {
        let mut v = [0u8; 8];
        let mut args = [arg(&mut v, -1)];
        let mut inv = Invoke { handle: 5, sc: scalars(SILENT, 1, 0, 0, 0), args: args.as_mut_ptr() as u64 };
        // SAFETY: inv and args are valid for the call.
        unsafe { ch.ioctl(&f2, INVOKE, &mut inv as *mut Invoke as *mut c_void) }
    });
    wait_until("the call to reach the DSP", || rig.seen.lock().unwrap().iter().any(|s| s.handle == 5));
    rig.ch.remove();
    assert_eq!(caller.join().unwrap(), -EPIPE, "fastrpc_notify_users fails the pending call");
    assert_eq!(rig.ch.open(NODE).err(), Some(-ENODEV));
    assert_eq!(rig.ch.open(SECURE_NODE).err(), Some(-ENODEV));
    let f = Arc::try_unwrap(f).unwrap();
    // the release cannot reach the DSP (no rpmsg device): -EPIPE inside, 0 to the caller
    let sent = rig.ch.counts().sent;
    assert_eq!(rig.ch.release(f), 0);
    assert_eq!(rig.ch.counts().sent, sent);
    // The failed context was taken off the file's list, but the reference fastrpc_invoke_send
    // took is only dropped by an answer (fastrpc_rpmsg_callback), which never comes: the
    // context, and the user it references, stay.
    let c = rig.counts();
    assert_eq!((c.contexts, c.users), (1, 1));
    assert_eq!(rig.ch.receive(&[0u8; 16]), -ENODEV, "no callbacks without the rpmsg device");

    assert_eq!(rig.ch.reprobe(), Ok(()));
    assert_eq!(rig.ch.reprobe(), Err(-16));
    let f = rig.ch.open(NODE).expect("open after reprobe");
    let mut input = *b"abc";
    let mut output = [0u8; 3];
    let mut args = [arg(&mut input, -1), arg(&mut output, -1)];
    assert_eq!(rig.invoke(&f, 5, scalars(ECHO, 1, 1, 0, 0), &mut args), 0);
    assert_eq!(&output, b"cba");
    assert_eq!(rig.ch.release(f), 0);
    assert_eq!(rig.counts().users, 1, "only the stranded user of the old channel is left");
    // it is the released file of the removed channel: its failed context left fl->pending
    let leaked = rig.ch.leaked();
    assert_eq!(leaked.len(), 1);
    assert_eq!((leaked[0].pending, leaked[0].maps.len(), leaked[0].mmaps), (0, 0, 0));
    assert_eq!(rig.counts().leaked_users, 1);
}

#[test]
fn alloc_dma_buff_cannot_hand_out_a_descriptor_here() {
    let _g = serial();
    let rig = Rig::new(1);
    let f = rig.ch.open(NODE).unwrap();
    let before = rig.counts();
    let mut req = AllocDmaBuf { fd: -1, flags: 0, size: 8192 };
    // SAFETY: req is a valid fastrpc_alloc_dma_buf.
    let r = unsafe { rig.ch.ioctl(&f, ALLOC_DMA_BUFF, &mut req as *mut AllocDmaBuf as *mut c_void) };
    assert_eq!(r, -EINVAL, "dma_buf_fd fails in the shim; the driver turns it into -EINVAL");
    let after = rig.counts();
    assert_eq!(after.coherent, before.coherent, "the driver freed the buffer again");
    assert_eq!(after.allocations, before.allocations);
    assert_eq!(rig.ch.release(f), 0);
}

// ---- the driver's own lists (c/introspect.c) -------------------------------------------------

/// What a handle map of `m` made on session 1 looks like.
fn assert_handle_map(map: &MapInfo, m: &MemFd) {
    assert_eq!(map.fd, m.fd);
    assert_eq!(map.key, Some(m.key), "map->buf is the host's buffer");
    assert_eq!((map.len, map.size), (m.len as u64, m.len as u64));
    assert_eq!(map.refs, 1, "only the file's list holds a handle map after the call");
    assert_eq!((map.attr, map.raddr), (0, 0));
    assert_eq!(map.va, m.ptr as u64, "map->va is where the host mapped the buffer");
    assert_eq!(map.phys >> 32, 1, "the session id (reg 1) above the bus address");
    assert_eq!(bus_to_host(map.phys, map.len), Some(m.ptr), "map->phys is a live bus range of the buffer");
}

#[test]
fn file_maps_show_every_handle_map_of_the_file() {
    let _g = serial();
    let rig = Rig::new(1);
    let m = shared_contents(&rig);
    let f = rig.ch.open(NODE).unwrap();
    let st = rig.ch.file_state(&f);
    assert_eq!((st.pending, st.maps.len(), st.mmaps, st.init_mem), (0, 0, 0, false));
    assert_eq!(st.tgid as u32, std::process::id());

    let mut out = [0u8; 16];
    let handle = InvokeArgs { ptr: m.ptr as u64, length: m.len as u64, fd: m.fd, attr: 0 };
    let mut args = [arg(&mut out, -1), handle];
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK, 0, 1, 1, 0), &mut args), 0);
    let maps = rig.ch.file_maps(&f);
    assert_eq!(maps.len(), 1, "{maps:?}");
    assert_handle_map(&maps[0], &m);
    assert_eq!(rig.ch.file_pending(&f), 0, "the finished call left fl->pending");

    // a second call with the same fd: fastrpc_create_maps attaches handles without a lookup,
    // so the file now has two maps of one fd, each with its own attachment and bus range
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK, 0, 1, 1, 0), &mut args), 0);
    let maps = rig.ch.file_maps(&f);
    assert_eq!(maps.len(), 2, "{maps:?}");
    for map in &maps {
        assert_handle_map(map, &m);
    }
    assert_ne!(maps[0].phys, maps[1].phys, "two attachments, two bus ranges");
    assert_eq!(maps[0], rig.ch.file_maps(&f)[0], "the older map stays first");

    // a buffer backed by the same fd finds the oldest map (fastrpc_map_lookup) and only borrows
    // it for the call: no new map, the refcount is back to 1 once the context is freed (its
    // last put is the deferred one the answer queued: settle first)
    let mut small = [0u8; 4];
    let input = InvokeArgs { ptr: m.ptr as u64, length: 4, fd: m.fd, attr: 0 };
    let mut echo = [input, arg(&mut small, -1)];
    assert_eq!(rig.invoke(&f, 5, scalars(ECHO, 1, 1, 0, 0), &mut echo), 0);
    assert_eq!(&small, b"-amd");
    assert_eq!(rig.counts().contexts, 0);
    assert_eq!(rig.ch.file_maps(&f), maps, "the buffer reused the handle map");

    // the DSP names the fd in the fdlist: the call adds a third map, then the driver drops the
    // first map of that fd it finds, the oldest one
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK_AND_DROP, 0, 1, 1, 0), &mut args), 0);
    let after = rig.ch.file_maps(&f);
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[0], maps[1], "the oldest map was dropped, the second is first now");
    assert_handle_map(&after[1], &m);
    assert!(after[1].phys != maps[0].phys && after[1].phys != maps[1].phys, "the third map is new");
    assert_eq!(rig.counts().attachments, 2, "one attachment per listed map");

    assert_eq!(rig.ch.release(f), 0);
    assert!(rig.ch.leaked().is_empty(), "a clean release frees the user and its maps");
    let c = rig.counts();
    assert_eq!((c.users, c.leaked_users, c.attachments, c.dmabufs), (0, 0, 0, 0));
}

#[test]
fn an_interrupted_call_leaves_a_leaked_user_with_its_context_and_maps() {
    let _g = serial();
    let rig = Rig::new(1);
    let mut m = MemFd::new(4096);
    m.bytes()[..16].copy_from_slice(b"held by the leak");
    rig.share(&m);
    let f = Arc::new(rig.ch.open(NODE).unwrap());
    let mut out = [0u8; 16];
    let handle = InvokeArgs { ptr: m.ptr as u64, length: m.len as u64, fd: m.fd, attr: 0 };
    let mut args = [arg(&mut out, -1), handle];
    assert_eq!(rig.invoke(&f, 5, scalars(PEEK, 0, 1, 1, 0), &mut args), 0);

    // a silent call that also passes the handle: it makes a second map before it blocks
    let (tid_tx, tid_rx) = mpsc::channel();
    let (ch, f2, (ptr, len, fd)) = (rig.ch.clone(), f.clone(), (m.ptr as u64, m.len as u64, m.fd));
    let caller = thread::spawn(move || {
        tid_tx.send(gettid()).unwrap();
        let mut v = [0u8; 8];
        let mut args = [arg(&mut v, -1), InvokeArgs { ptr, length: len, fd, attr: 0 }];
        let mut inv = Invoke { handle: 5, sc: scalars(SILENT, 1, 0, 1, 0), args: args.as_mut_ptr() as u64 };
        // SAFETY: inv and args are valid for the call; the memfd outlives it (joined below).
        unsafe { ch.ioctl(&f2, INVOKE, &mut inv as *mut Invoke as *mut c_void) }
    });
    let tid = tid_rx.recv().unwrap();
    wait_until("the call to block", || rig.ch.file_pending(&f) == 1 && interrupt(tid));
    assert_eq!(caller.join().unwrap(), -ERESTARTSYS);
    assert_eq!(rig.ch.file_pending(&f), 1, "an interrupted context stays on fl->pending");
    assert_eq!(rig.ch.file_maps(&f).len(), 2);
    assert!(rig.ch.leaked().is_empty(), "an open file's user is not leaked");

    let f = Arc::try_unwrap(f).unwrap();
    assert_eq!(rig.ch.release(f), 0);
    let leaked = rig.ch.leaked();
    assert_eq!(leaked.len(), 1, "{leaked:?}");
    let u = &leaked[0];
    assert_eq!((u.pending, u.mmaps, u.init_mem), (1, 0, false));
    assert_eq!(u.maps.len(), 2, "{u:?}");
    for map in &u.maps {
        assert_handle_map(map, &m);
    }
    let c = rig.counts();
    assert_eq!((c.users, c.leaked_users, c.attachments, c.dmabufs), (1, 1, 2, 2));
    assert_eq!(rig.host.state.lock().unwrap().refs[&m.key], 2, "the leak keeps both host references");

    // a late answer drops the send's reference only: the context stays on the released user
    let msg = rig.seen.lock().unwrap().iter().rev().find(|s| s.handle == 5).copied().unwrap();
    let mut rsp = [0u8; 16];
    rsp[..8].copy_from_slice(&msg.ctx.to_le_bytes());
    assert_eq!(rig.ch.receive(&rsp), 0);
    let c = rig.counts();
    assert_eq!((c.contexts, c.users, c.leaked_users), (1, 1, 1));
    assert_eq!(rig.ch.leaked(), leaked, "reading the leak changes nothing");
}
