//! The bench's third kernel: Linux's own `drivers/misc/fastrpc.c` (Debian's 6.1 source, run in
//! user space by `hexrpc-linux` on our kernel shim) behind the [`BENCH_LINUX`] board.
//!
//! Everything a host program does on the FastRPC node goes into the real driver's file
//! operations (`fastrpc_device_open`, `fastrpc_device_ioctl`, `fastrpc_device_release`); the
//! dma-heap, the virtual files and the real filesystem stay the bench's. What the driver sends to
//! the DSP (`rpmsg_send` of a `fastrpc_msg`) reaches `on_message`, which reads the payload the
//! driver wrote (`fastrpc_get_args`: remote arguments, invoke buffers, physical pages, fdlist)
//! through the shim's bus addresses, hands the call to the bench's DSP model (the same static
//! handles, library models and executor shells the other two kernels use), writes the answer
//! back where the driver will look for it (the copied out-buffers in the payload, mapped ones in
//! the buffer itself, the fdlist), and answers through the driver's own
//! `fastrpc_rpmsg_callback`.
//!
//! The DSP side of the kernel's own messages (`FASTRPC_INIT_HANDLE` methods: attach 0, release
//! 1, create 6/7, MMAP 4, MUNMAP 5, MEM_MAP 10, MEM_UNMAP 11; the utilities handle 2 for
//! GET_DSP_INFO) is the bench's DSP model too: a create or attach for a live identity is
//! `AEE_EBADSTATE`, the shell must be a Hexagon ELF, release waits for the process's running
//! library calls, MMAP answers a fresh DSP address. Faults injected on [`DspCallKind`]s apply to
//! these messages; a `Hang` never answers, so the driver's own 10 s timeout (or a restart) ends
//! the call. [`BenchConfig::kernel_call_timeout`](crate::BenchConfig::kernel_call_timeout) has no
//! effect here: the timeout is the driver's.
//!
//! Where this is not a device:
//! * the DSP is the bench's model: what a real DSP writes in the fdlist, its AEE codes, its
//!   loader and timing are the model's choices (docs/bench.md);
//! * the transport is a function call, not glink: messages are never lost, reordered or late
//!   beyond what the model's faults inject;
//! * no SMMU: a bus address outside every live range is a model error (the call fails with
//!   `AEE_EBADPARM`), not an SMMU fault;
//! * a signal is the bench's [`interrupt`](hexrpc_drivers::Syscalls::interrupt): the driver's
//!   `-ERESTARTSYS` becomes `EINTR`, as for a handler installed without `SA_RESTART` (with
//!   `SA_RESTART` the kernel would issue the ioctl again, a new call with a new context).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use hexrpc_bsp::Board;
use hexrpc_drivers::{aee, Errno, Scalars};
use hexrpc_linux::{Channel, Config, DmaBuf, File, Host};

use crate::account::{DspCallKind, Fault, FaultTarget};
use crate::dsp::{self, Job};
use crate::entry::HandleBuf;
use crate::state::{FdObj, Shared, State};
use crate::{elf, upstream};

/// The bench board whose FastRPC node is Linux's own `fastrpc.c` ([`hexrpc_bsp::BENCH_LINUX`]).
pub const BENCH_LINUX: &Board = &hexrpc_bsp::BENCH_LINUX;

/// The kernel version the driver was taken from (`6.1.192`) and the Debian package it came in.
pub const LINUX_VERSION: (&str, &str) = (hexrpc_linux::KERNEL_VERSION, hexrpc_linux::PACKAGE_VERSION);

/// `-ERESTARTSYS`.
const ERESTARTSYS: i64 = -512;
/// The driver's bus addresses are 32-bit; the session's stream id rides above them.
const BUS_MASK: u64 = 0xFFFF_FFFF;
const PAGE: u64 = 4096;

/// The real driver of one bench, and what the bench keeps beside it.
pub(crate) struct LinuxKernel {
    pub chan: Channel,
    side: Mutex<Side>,
    /// Held across a remove or a probe, so that two restarts (a test's and an executor's, say)
    /// cannot interleave their removes and probes.
    transition: Mutex<()>,
}

#[derive(Default)]
struct Side {
    /// Bench file id -> the driver's file.
    files: HashMap<u64, Arc<File>>,
    /// Bench buffer id -> the kernel's mapping of it (made at the first `dma_buf_get`).
    kmaps: HashMap<u64, KMap>,
    /// Thread id -> the bench file and the injected fault of the ioctl it is in.
    callers: HashMap<i32, Caller>,
    probed: bool,
}

struct KMap {
    ptr: usize,
    len: usize,
    refs: u32,
}

#[derive(Clone, Copy)]
struct Caller {
    file: u64,
    pre: Option<Fault>,
}

impl LinuxKernel {
    /// Probes the channel for a new bench (`sh` is the bench under construction).
    pub fn probe(sh: Weak<Shared>, cfg: &crate::BenchConfig) -> LinuxKernel {
        let host: Arc<dyn Host> = Arc::new(BenchHost { sh });
        let cfg = Config {
            sessions: cfg.sessions_per_channel.clamp(1, 13),
            non_secure: !cfg.upstream_secure_channel,
            // The driver's 10 s kernel-message timeout lasts the bench's kernel-call timeout.
            kernel_timeout: Some(cfg.kernel_call_timeout),
        };
        let chan = Channel::probe(host, &cfg).unwrap_or_else(|e| panic!("the Linux fastrpc driver did not probe: {e}"));
        LinuxKernel { chan, side: Mutex::new(Side { probed: true, ..Side::default() }), transition: Mutex::new(()) }
    }

    fn side(&self) -> MutexGuard<'_, Side> {
        self.side.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `open` of the node: the driver's file, or the errno (`ENOENT` while the node is gone).
    pub fn open(&self, node: &str) -> Result<File, Errno> {
        self.chan.open(node).map_err(|e| if e == -Errno::ENODEV.0 { Errno::ENOENT } else { Errno(-e) })
    }

    pub fn adopt(&self, file_id: u64, file: File) {
        self.side().files.insert(file_id, Arc::new(file));
    }

    pub fn file(&self, file_id: u64) -> Option<Arc<File>> {
        self.side().files.get(&file_id).cloned()
    }

    /// The file's last close: `fastrpc_device_release`.
    pub fn release(&self, file_id: u64) {
        let f = self.side().files.remove(&file_id);
        if let Some(f) = f.and_then(Arc::into_inner) {
            self.chan.release(f);
        }
    }

    /// One ioctl on the driver's file from this thread.
    ///
    /// # Safety
    ///
    /// `arg` must satisfy the request's contract, as for `ioctl(2)`.
    pub unsafe fn ioctl(
        &self,
        file_id: u64,
        file: &File,
        request: u32,
        arg: *mut core::ffi::c_void,
        pre: Option<Fault>,
    ) -> Result<i32, Errno> {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        self.side().callers.insert(tid, Caller { file: file_id, pre });
        // SAFETY: passed on from our caller.
        let r = unsafe { self.chan.ioctl(file, request, arg) };
        self.side().callers.remove(&tid);
        match r {
            ERESTARTSYS => Err(Errno::EINTR),
            // As the syscall returns it: -4095..-1 is an errno, anything else the value (the
            // driver's int, e.g. a DSP result with the 0x80000400 offset, which is negative).
            r => crate::rpc::as_result(r as i32),
        }
    }

    fn caller(&self, tid: i32) -> Option<Caller> {
        self.side().callers.get(&tid).copied()
    }

    fn take_pre(&self, tid: i32) -> Option<Fault> {
        self.side().callers.get_mut(&tid).and_then(|c| c.pre.take())
    }

    /// The DSP went away: `fastrpc_rpmsg_remove` (calls in flight end with `EPIPE`, the nodes go).
    pub fn remove(&self) {
        let _one = self.transition.lock().unwrap_or_else(|e| e.into_inner());
        let was = core::mem::replace(&mut self.side().probed, false);
        if was {
            self.chan.remove();
        }
    }

    /// The DSP is back: probe the channel again.
    pub fn reprobe(&self) {
        let _one = self.transition.lock().unwrap_or_else(|e| e.into_inner());
        let was = core::mem::replace(&mut self.side().probed, true);
        if !was {
            if let Err(e) = self.chan.reprobe() {
                log::error!("bench-linux: the fastrpc channel did not probe again: {e}");
                self.side().probed = false;
            }
        }
    }

    /// The driver's map list of bench file `file_id`, as the bench reports driver maps.
    pub fn file_maps(&self, file_id: u64) -> Option<Vec<crate::DriverMap>> {
        let f = self.file(file_id)?;
        Some(user_maps(&self.chan.file_state(&f)))
    }

    /// Every map the driver holds for files not yet released (a released file's maps that the
    /// driver keeps for good are [`Bench::kernel_leaks`](crate::Bench::kernel_leaks)).
    pub fn all_maps(&self) -> Vec<crate::DriverMap> {
        let files: Vec<Arc<File>> = self.side().files.values().cloned().collect();
        files.iter().flat_map(|f| user_maps(&self.chan.file_state(f))).collect()
    }

    /// Gives back the spare capacity of the host side's tables ([`Bench::compact`](crate::Bench::compact)).
    pub fn compact(&self) {
        let mut side = self.side();
        side.files.shrink_to_fit();
        side.kmaps.shrink_to_fit();
        side.callers.shrink_to_fit();
    }

    /// The kernel's mappings of dma-bufs: how many, and their bytes.
    pub fn kernel_mappings(&self) -> (usize, u64) {
        let side = self.side();
        (side.kmaps.len(), side.kmaps.values().map(|m| m.len as u64).sum())
    }

    /// Users the driver never freed after their file's release ([`Channel::leaked`]).
    pub fn leaked(&self) -> Vec<hexrpc_linux::LeakedUser> {
        self.chan.leaked()
    }

    /// What the driver holds now, in the bench's snapshot terms: maps and contexts of open files
    /// and leaked users; "parked" are contexts whose caller has returned (the file's pending
    /// contexts less the invokes in progress on it, and every leaked user's).
    pub fn held(&self) -> Held {
        let mut in_flight: HashMap<u64, usize> = HashMap::new();
        let files: Vec<(u64, Arc<File>)> = {
            let side = self.side();
            for c in side.callers.values() {
                *in_flight.entry(c.file).or_insert(0) += 1;
            }
            side.files.iter().map(|(&id, f)| (id, f.clone())).collect()
        };
        let mut h = Held::default();
        for (id, f) in &files {
            let s = self.chan.file_state(f);
            h.maps += s.maps.len() + s.mmaps;
            h.contexts += s.pending;
            h.parked += s.pending.saturating_sub(in_flight.get(id).copied().unwrap_or(0));
        }
        for u in self.chan.leaked() {
            h.maps += u.maps.len() + u.mmaps;
            h.contexts += u.pending;
            h.parked += u.pending;
        }
        h
    }

    /// The buffer and kernel mapping behind bus address `bus` (a handle's page).
    fn buffer_at(&self, host: usize) -> Option<u64> {
        self.side().kmaps.iter().find(|(_, m)| host >= m.ptr && host < m.ptr + m.len).map(|(&b, _)| b)
    }
}

/// The driver's holdings in the bench's snapshot terms ([`LinuxKernel::held`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Held {
    pub maps: usize,
    pub contexts: usize,
    pub parked: usize,
}

fn driver_map(m: &hexrpc_linux::MapInfo) -> crate::DriverMap {
    crate::DriverMap {
        kind: crate::DriverMapKind::Handle,
        fd: m.fd,
        refs: m.refs,
        buffer: m.key.map(crate::BufferId),
        len: m.len,
        dsp_size: m.len,
    }
}

/// A user's maps as the bench reports driver maps: `fl->maps` (dma-buf maps), then one
/// ADD_PAGES entry per `fl->mmaps` buffer (fd -1, no buffer; the harness does not read their
/// length, so `len` is 0).
fn user_maps(u: &hexrpc_linux::UserState) -> Vec<crate::DriverMap> {
    let pages = crate::DriverMap { kind: crate::DriverMapKind::AddPages, fd: -1, refs: 1, buffer: None, len: 0, dsp_size: 0 };
    u.maps.iter().map(driver_map).chain(std::iter::repeat_n(pages, u.mmaps)).collect()
}

/// The epoch of a message the driver sends while a restart is under way (the DSP it goes to is
/// going away): no epoch is ever equal to it, so the DSP model never handles it.
const DEAD_EPOCH: u64 = u64::MAX;

/// The driver's view of the bench: dma-bufs, the caller's mappings, and the DSP.
struct BenchHost {
    sh: Weak<Shared>,
}

impl Host for BenchHost {
    fn send(&self, msg: &[u8]) -> Result<(), i32> {
        let sh = self.sh.upgrade().ok_or(-Errno::EPIPE.0)?;
        let m = Msg::parse(msg).ok_or(-Errno::EINVAL.0)?;
        let epoch = {
            let st = sh.lock();
            if st.restarting {
                DEAD_EPOCH
            } else {
                st.epoch
            }
        };
        crate::workers::run(move || on_message(&sh, m, epoch)).map_err(|_| -Errno::ENOMEM.0)
    }

    fn dmabuf_get(&self, fd: i32) -> Result<DmaBuf, i32> {
        let sh = self.sh.upgrade().ok_or(-Errno::EBADF.0)?;
        let kern = sh.linux.as_ref().ok_or(-Errno::EBADF.0)?;
        let mut st = sh.lock();
        let b = match st.fds.get(&fd).map(|e| &e.obj) {
            Some(FdObj::DmaBuf(b)) => *b,
            Some(_) => return Err(-Errno::EINVAL.0),
            None if st.passthrough.contains(&fd) => return Err(-Errno::EINVAL.0),
            None => return Err(-Errno::EBADF.0),
        };
        let Some(buf) = st.buffers.get_mut(&b) else { return Err(-Errno::EBADF.0) };
        let (memfd, len) = (buf.memfd.clone(), buf.len);
        let mut side = kern.side();
        let ptr = match side.kmaps.get_mut(&b) {
            Some(m) => {
                m.refs += 1;
                m.ptr
            }
            None => {
                let n = usize::try_from(len).map_err(|_| -Errno::ENOMEM.0)?;
                // SAFETY: a fresh shared mapping of the buffer's own memfd, kept until the last
                // `dmabuf_put` of the buffer; nothing else owns that address range.
                let p = unsafe {
                    rustix::mm::mmap(
                        core::ptr::null_mut(),
                        n,
                        rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                        rustix::mm::MapFlags::SHARED,
                        &*memfd,
                        0,
                    )
                }
                .map_err(|e| -e.raw_os_error())?;
                side.kmaps.insert(b, KMap { ptr: p as usize, len: n, refs: 1 });
                p as usize
            }
        };
        drop(side);
        if let Some(buf) = st.buffers.get_mut(&b) {
            buf.driver_maps += 1;
        }
        crate::dma_heap::note_dsp_use(&mut st, b);
        Ok(DmaBuf { key: b, len, vaddr: ptr as *mut u8 })
    }

    fn dmabuf_put(&self, key: u64) {
        let Some(sh) = self.sh.upgrade() else { return };
        let Some(kern) = sh.linux.as_ref() else { return };
        let gone = {
            let mut side = kern.side();
            match side.kmaps.get_mut(&key) {
                Some(m) if m.refs > 1 => {
                    m.refs -= 1;
                    None
                }
                Some(_) => side.kmaps.remove(&key),
                None => None,
            }
        };
        if let Some(m) = gone {
            // SAFETY: the mapping `dmabuf_get` made; the driver gave back its last reference, so
            // no kernel address into it is used any more.
            let _ = unsafe { rustix::mm::munmap(m.ptr as *mut core::ffi::c_void, m.len) };
        }
        sh.lock().release_driver_map(Some(key));
        sh.cv.notify_all();
    }

    fn vma_lookup(&self, addr: u64) -> Option<(u64, u64)> {
        let sh = self.sh.upgrade()?;
        let st = sh.lock();
        let a = usize::try_from(addr).ok()?;
        st.host_maps.iter().find(|(&s, m)| a >= s && a < s + m.len).map(|(&s, m)| (s as u64, (s + m.len) as u64))
    }
}

/// `struct fastrpc_msg`.
#[derive(Clone, Copy, Debug)]
struct Msg {
    pid: i32,
    tid: i32,
    ctx: u64,
    handle: u32,
    sc: u32,
    addr: u64,
    size: u64,
}

impl Msg {
    fn parse(b: &[u8]) -> Option<Msg> {
        let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()));
        let u64_at = |o: usize| b.get(o..o + 8).map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
        Some(Msg {
            pid: u32_at(0)? as i32,
            tid: u32_at(4)? as i32,
            ctx: u64_at(8)?,
            handle: u32_at(16)?,
            sc: u32_at(20)?,
            addr: u64_at(24)?,
            size: u64_at(32)?,
        })
    }
}

/// The payload `fastrpc_get_args` wrote, as the DSP reads it.
struct Payload {
    base: *mut u8,
    len: usize,
    n: usize,
}

/// One argument's place in memory the DSP can reach.
#[derive(Clone, Copy)]
struct Arg {
    /// `pv` (buffers) or the handle's fd.
    pv: u64,
    fd: i32,
    offset: u32,
    len: u64,
    page: u64,
    page_len: u64,
}

impl Payload {
    fn of(m: &Msg) -> Option<Payload> {
        let n = Scalars::from_raw(m.sc).length();
        let len = usize::try_from(m.size).ok()?;
        let p = hexrpc_linux::bus_to_host(m.addr & BUS_MASK, m.size)?;
        let meta = n * 40 + 384;
        (len >= meta).then_some(Payload { base: p, len, n })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: a live coherent buffer of the driver's of `len` bytes (the shim's bus table
        // vouched for the range); the driver does not touch it until the DSP answers, and this
        // DSP message is the only reader or writer meanwhile.
        unsafe { core::slice::from_raw_parts(self.base, self.len) }
    }

    fn arg(&self, i: usize) -> Arg {
        let b = self.bytes();
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        let ra = 16 * i;
        let pg = 24 * self.n + 16 * i;
        Arg {
            pv: u64_at(ra),
            len: u64_at(ra + 8),
            fd: u32_at(ra) as i32,
            offset: u32_at(ra + 4),
            page: u64_at(pg),
            page_len: u64_at(pg + 8),
        }
    }

    /// Writes the fdlist (`u64[16]` after the pages).
    fn set_fdlist(&self, fds: &[i32]) {
        let at = 40 * self.n;
        for (i, &fd) in fds.iter().take(hexrpc_drivers::upstream::FASTRPC_MAX_FDLIST).enumerate() {
            // SAFETY: inside the payload's metadata (checked in `of`), see `bytes`.
            unsafe { core::ptr::write_unaligned(self.base.add(at + 8 * i).cast::<u64>(), fd as u64) };
        }
    }
}

/// Where a buffer argument's bytes are: its page's bus address plus `pv`'s offset in the page.
fn buffer_host(a: &Arg) -> Option<*mut u8> {
    if a.len == 0 {
        return Some(core::ptr::NonNull::dangling().as_ptr());
    }
    hexrpc_linux::bus_to_host((a.page & BUS_MASK) + (a.pv & (PAGE - 1)), a.len)
}

/// The DSP's side of one message: answer it (or not, for a hang or a restart).
fn on_message(sh: &Arc<Shared>, m: Msg, epoch: u64) {
    let Some(kern) = sh.linux.as_ref() else { return };
    let rv = match Payload::of(&m) {
        None => Some(aee::AEE_EBADPARM),
        Some(p) if m.pid == 0 => kernel_message(sh, kern, &m, &p, epoch),
        Some(p) => user_call(sh, kern, &m, &p, epoch),
    };
    let Some(rv) = rv else { return };
    if sh.lock().epoch != epoch {
        // The process this answers for is gone with the restart; a real DSP never answers.
        return;
    }
    let mut rsp = [0u8; 16];
    rsp[..8].copy_from_slice(&m.ctx.to_le_bytes());
    rsp[8..12].copy_from_slice(&rv.to_le_bytes());
    let r = kern.chan.receive(&rsp);
    if r != 0 {
        log::debug!("bench-linux: the driver took no answer for ctx {:#x}: {r}", m.ctx);
    }
}

/// The arguments of a message as the bench's DSP model takes them: copies of the buffers (keyed
/// by their kernel address), the handles' buffers.
fn job_of(kern: &LinuxKernel, st: &State, m: &Msg, p: &Payload, pid: u64, pre: Option<Fault>) -> Result<(Job, Vec<Arg>), i32> {
    let sc = Scalars::from_raw(m.sc);
    let nbuf = sc.buffers();
    let mut wire = Vec::with_capacity(p.n);
    let mut copies = Vec::with_capacity(nbuf);
    let mut handles = Vec::new();
    let mut args = Vec::with_capacity(p.n);
    for i in 0..p.n {
        let a = p.arg(i);
        if i < nbuf {
            let host = buffer_host(&a).ok_or(aee::AEE_EBADPARM)?;
            let n = usize::try_from(a.len).map_err(|_| aee::AEE_EBADPARM)?;
            // SAFETY: `bus_to_host` vouched that [host, host+len) lies in one live range the
            // shim mapped (the payload or a dma-buf's kernel mapping).
            let data = if n == 0 { Vec::new() } else { unsafe { core::slice::from_raw_parts(host, n) }.to_vec() };
            wire.push(hexrpc_drivers::adsprpc::remote_arg64::from_buf(hexrpc_drivers::adsprpc::remote_buf64 {
                pv: host as u64,
                len: a.len,
            }));
            copies.push((host as u64, data));
        } else {
            let host = hexrpc_linux::bus_to_host(a.page & BUS_MASK, 1).ok_or(aee::AEE_EBADPARM)?;
            let buf = kern.buffer_at(host as usize).ok_or(aee::AEE_EBADPARM)?;
            let b = st.buffers.get(&buf).ok_or(aee::AEE_EBADPARM)?;
            handles.push(HandleBuf { fd: a.fd, memfd: b.memfd.clone(), len: a.page_len.min(b.len), buf });
            wire.push(hexrpc_drivers::adsprpc::remote_arg64::from_dma(hexrpc_drivers::adsprpc::remote_dma_handle64 {
                fd: a.fd,
                offset: a.offset,
                len: a.len as u32,
            }));
        }
        args.push(a);
    }
    Ok((Job { ctx: 0, pid, epoch: st.epoch, handle: m.handle, sc: m.sc, wire, copies, handles, pre, mapped: Vec::new() }, args))
}

/// A call from a host thread to its DSP process, sent in restart epoch `epoch`. `None`: no
/// answer (a restart since it was sent: the call's process is gone, and a process of the same
/// identity on the DSP that came up is another one).
fn user_call(sh: &Arc<Shared>, kern: &LinuxKernel, m: &Msg, p: &Payload, epoch: u64) -> Option<i32> {
    let pre = kern.take_pre(m.tid);
    let (job, args) = {
        let st = sh.lock();
        if st.epoch != epoch {
            return None;
        }
        // The identity is the tgid the driver captured at open; an invoke before any INIT
        // reaches no process of ours (a device's root PD answer is not known).
        let Some(pid) = st.process_of_identity(m.pid) else { return Some(aee::AEE_EBADSTATE) };
        match job_of(kern, &st, m, p, pid, pre) {
            Ok(j) => j,
            Err(rv) => return Some(rv),
        }
    };
    let res = dsp::execute(sh, &job);
    // The out-buffers are written under the state lock, and only while the call's epoch and
    // process last: a restart moves the epoch before the driver lets the call go (EPIPE) and
    // frees its buffers, and a release kills the process before the driver frees the calls it
    // left pending. (Written after either, they would land in memory the driver has freed.)
    // After a restart there is no answer (the DSP that had the call is gone); a call whose
    // process a release ended is still answered, without its outputs, so the driver drops the
    // reference it holds for the message (an unanswered message keeps its context for good).
    let st = sh.lock();
    if st.epoch != epoch {
        return None;
    }
    if st.procs.get(&job.pid).is_some_and(|p| p.alive) {
        let nin = Scalars::from_raw(m.sc).inbufs() as usize;
        for (j, out) in res.outs.iter().enumerate() {
            let Some(a) = args.get(nin + j) else { break };
            let Some(host) = buffer_host(a) else { continue };
            let n = out.len().min(usize::try_from(a.len).unwrap_or(0));
            if n > 0 {
                // SAFETY: as in `job_of`: [host, host+len) is the call's out-buffer in memory the
                // shim mapped, still live: the call's epoch and process are (checked above, under
                // the lock that a restart or a release takes before the driver frees the call).
                unsafe { core::ptr::copy_nonoverlapping(out.as_ptr(), host, n) };
            }
        }
        p.set_fdlist(&res.fdlist);
    }
    drop(st);
    Some(res.retval)
}

/// The DSP's side of a kernel message sent in restart epoch `epoch`. `None`: no answer (a hang,
/// or a restart since it was sent: the DSP that took it is gone, and the new one never sees it,
/// so a create made no process there).
fn kernel_message(sh: &Arc<Shared>, kern: &LinuxKernel, m: &Msg, p: &Payload, epoch: u64) -> Option<i32> {
    let method = Scalars::from_raw(m.sc).method();
    let kind = match (m.handle, method) {
        (1, 0 | 6 | 7) => DspCallKind::CreateProcess,
        (1, 1) => DspCallKind::ReleaseProcess,
        (1, 4) => DspCallKind::KernelMmap,
        (1, 5) => DspCallKind::KernelMunmap,
        (1, 10) => DspCallKind::KernelMemMap,
        (1, 11) => DspCallKind::KernelMemUnmap,
        (2, _) => DspCallKind::DspInfo,
        _ => DspCallKind::Unknown,
    };
    let caller = kern.caller(m.tid);
    let (job, args) = {
        let mut st = sh.lock();
        if let Some(Fault::Delay(d)) = st.fault(FaultTarget::Delivery(kind)) {
            let end = Instant::now() + d;
            while Instant::now() < end {
                st = sh.wait_for(st, (end - Instant::now()).min(Duration::from_millis(50)));
            }
        }
        if st.epoch != epoch {
            return None;
        }
        st.count_dsp(kind);
        match st.fault(FaultTarget::Dsp(kind)) {
            Some(Fault::Errno(e)) => return Some(e.0),
            Some(Fault::Returned(v)) => return Some(v),
            Some(Fault::Delay(d)) => {
                let end = Instant::now() + d;
                while Instant::now() < end && st.epoch == epoch {
                    st = sh.wait_for(st, (end - Instant::now()).min(Duration::from_millis(50)));
                }
            }
            Some(Fault::Hang) => {
                let gen = st.hang_generation;
                while st.epoch == epoch && st.hang_generation == gen {
                    st = sh.wait_for(st, Duration::from_millis(50));
                }
            }
            None => {}
        }
        if st.epoch != epoch {
            return None;
        }
        match job_of(kern, &st, m, p, 0, None) {
            Ok(j) => j,
            Err(rv) => return Some(rv),
        }
    };
    let ins: Vec<&[u8]> = job.copies.iter().map(|c| c.1.as_slice()).collect();
    let tgid = ins.first().and_then(|b| dsp::u32_in(b, 0)).map(|v| v as i32);
    let out_at = |i: usize| args.get(i).and_then(buffer_host);
    let write_out = |i: usize, bytes: &[u8]| {
        if let (Some(a), Some(host)) = (args.get(i), out_at(i)) {
            let n = bytes.len().min(usize::try_from(a.len).unwrap_or(0));
            // SAFETY: a copied out-buffer of this kernel message inside the payload (see
            // `job_of`), written under the state lock with the message's epoch current, so the
            // driver has not let the call go (a restart moves the epoch first).
            unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), host, n) };
        }
    };
    let mut st = sh.lock();
    // The lock was let go while the payload was copied: the same holds for a restart meanwhile.
    if st.epoch != epoch {
        return None;
    }
    let file = caller.map(|c| c.file);
    let rv = match kind {
        DspCallKind::CreateProcess => {
            let Some(tgid) = tgid else { return Some(aee::AEE_EBADPARM) };
            let image = if method == 0 { None } else { ins.get(2).copied() };
            if st.process_of_identity(tgid).is_some() {
                aee::AEE_EBADSTATE
            } else if image.is_some_and(|i| !i.is_empty() && elf::check_hexagon_elf(i).is_err()) {
                aee::AEE_EBADELF
            } else if let Some(file) = file.filter(|f| st.rpc_files.contains_key(f)) {
                let pid = crate::rpc::new_process(&mut st, file);
                let epoch = st.epoch;
                if let Some(f) = st.rpc_files.get_mut(&file) {
                    f.proc_id = Some(pid);
                    f.channel_epoch = Some(epoch);
                }
                0
            } else {
                aee::AEE_EBADSTATE
            }
        }
        DspCallKind::ReleaseProcess => {
            let Some(tgid) = tgid else { return Some(aee::AEE_EBADPARM) };
            if let Some(pid) = st.process_of_identity(tgid) {
                if let Some(shell) = st.procs.get(&pid).and_then(|p| p.shell.clone()) {
                    shell.kill();
                }
                // The DSP answers once the process's running library calls have returned.
                let epoch = st.epoch;
                while st.lib_running.get(&pid).is_some_and(|&n| n > 0) && st.epoch == epoch {
                    st = sh.wait_for(st, Duration::from_millis(50));
                }
                st.kill_process(pid);
            }
            0
        }
        DspCallKind::KernelMmap | DspCallKind::KernelMemMap => {
            // fastrpc_mmap_req_msg {pgid, flags, vaddr, num} / fastrpc_mem_map_req_msg; the
            // pages follow; the answer is the DSP address.
            let size = args.get(1).map_or(0, |a| a.len);
            let len = ins.get(1).and_then(|b| b.get(8..16)).map_or(size, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()));
            let raddr = st.alloc_raddr(file.unwrap_or(0), len.max(PAGE), true);
            let out = Scalars::from_raw(m.sc).inbufs() as usize;
            // Under the lock, with the epoch checked: the call's buffers are live (see `user_call`).
            write_out(out, &raddr.to_le_bytes());
            0
        }
        DspCallKind::KernelMunmap | DspCallKind::KernelMemUnmap => 0,
        DspCallKind::DspInfo => {
            let words = args.get(1).map_or(0, |a| a.len as usize / 4);
            let mut out = vec![0u8; words * 4];
            for &(attr, value) in upstream::DSP_ATTRIBUTES {
                if let Some(slot) = (attr as usize).checked_sub(1).filter(|&i| i < words) {
                    out[slot * 4..slot * 4 + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
            write_out(1, &out);
            0
        }
        _ => aee::AEE_EUNSUPPORTED,
    };
    drop(st);
    sh.cv.notify_all();
    Some(rv)
}
