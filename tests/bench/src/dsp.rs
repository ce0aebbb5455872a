//! The simulated DSP: one worker thread per invoke runs the message on the DSP side (static
//! handles 0/3/4 and library entries), so the host thread's wait stays interruptible while the
//! DSP keeps working, as on a device.
//!
//! Library loading (remotectl open) fetches the image through the reverse file service. The real
//! DSP loader's sequence of apps_std calls is **not known** (reverse-rpc.md 7); the model uses:
//! apps_remotectl open of `"apps_std"` (once per process), `fopen_with_env("ADSP_LIBRARY_PATH",
//! ";", NAME, "r")`, `stat(NAME)`, `fread` of the 52-byte ELF header, `fseek(0, SEEK_SET)`,
//! `fread` in [`BenchConfig::loader_chunk`](crate::BenchConfig::loader_chunk) pieces until the
//! stat size or end of file, `fclose`. Each reverse request waits at most
//! [`BenchConfig::reverse_timeout`](crate::BenchConfig::reverse_timeout) for its answer (a real DSP
//! would wait forever); a load with no listener therefore fails with `AEE_EUNABLETOLOAD` after
//! that time instead of hanging.
//!
//! Result conventions (choices where the real values are unknown): errors of a call are returned
//! as bare positive AEE codes (the ioctl's return value); a failed library open returns 0 from the
//! ioctl with `nErr = DSP_AEE_EOFFSET + code` (negative as `i32`) and the text in the dlerror
//! buffer; `next2` after the process exited returns `DSP_AEE_EOFFSET + AEE_EBADSTATE`, the value
//! quic's listener treats as "exit the thread". A call on an exited process returns
//! `AEE_EBADSTATE`; on an unknown handle `AEE_EINVHANDLE`. What the DSP lists in the fdlist of a
//! successful library call is [`BenchConfig::fdlist`](crate::BenchConfig::fdlist) (default:
//! nothing, so handle maps stay until MUNMAP_FD or close; what the real framework lists is not
//! known in detail); after an error nothing is listed (downstream skips put_args anyway).
//!
//! Buffer arguments reach the DSP as the kernel left them (`arg_bytes`): a slice of one of the
//! kernel's copies (downstream one copy buffer for all copied arguments, so a library entry's
//! regions share the bytes of overlapping arguments), or a downstream mapped dma-buf
//! (`MappedArg`), read when the call starts on the DSP and written back in place when it ends,
//! whatever it answers.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hexrpc_drivers::adsprpc::remote_arg64;
use hexrpc_drivers::aee::{self, DSP_AEE_EOFFSET};
use hexrpc_drivers::apps_std::{apps_std_STAT, method as asm, APPS_STD_SEEK_SET};
use hexrpc_drivers::dsp::{remote_arg32, remote_buf32, remote_dma_handle32};
use hexrpc_drivers::listener::{LISTENER_GET_IN_BUFS2, LISTENER_INIT2, LISTENER_NEXT2, REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::Scalars;
use zerocopy::FromBytes;

use crate::account::{DspCallKind, Fault, FaultTarget, ReverseRecord};
use crate::elf;
use crate::entry::{self, EntryEnv, EntryVersion, HandleBuf, Region};
use crate::state::{CtxResult, LoadedLib, Shared, State, Ticket, TicketState};
use crate::wire;

/// Byte a DSP out-buffer holds before the DSP writes it (the driver does not zero them).
pub const STALE_BYTE: u8 = 0xA5;

/// One invoke as the DSP receives it.
pub(crate) struct Job {
    pub ctx: u64,
    pub pid: u64,
    pub epoch: u64,
    pub handle: u32,
    pub sc: u32,
    /// The 64-bit records the kernel ships.
    pub wire: Vec<remote_arg64>,
    /// The kernel's copies of the buffers, each at the kernel address it starts at: a buffer's
    /// `wire` address lies inside one of them (downstream one copy buffer holds every copied
    /// argument, overlapping arguments sharing bytes; upstream and Linux one copy per argument).
    pub copies: Vec<(u64, Vec<u8>)>,
    pub handles: Vec<HandleBuf>,
    /// A delay or hang injected on the invoke's call kind (applied on the DSP side).
    pub pre: Option<Fault>,
    /// Per buffer argument: the dma-buf memory the kernel mapped for it instead of copying
    /// (downstream `get_args` with a buffer fd); empty or `None`: copied.
    pub mapped: Vec<Option<MappedArg>>,
}

/// A buffer argument the DSP reaches in place: `len` bytes of a dma-buf from `offset` (the page
/// offset `get_args` computed plus the address's offset in its page). Bytes past the dma-buf's
/// end (`buf_len`: the driver checks only that the first page lies inside) read as 0 and writes
/// there are dropped (on a device: whatever the SMMU maps there, or a fault; not known).
pub(crate) struct MappedArg {
    pub memfd: Arc<OwnedFd>,
    pub offset: u64,
    pub len: u64,
    pub buf_len: u64,
}

impl MappedArg {
    /// The bytes the DSP sees now.
    fn read(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len as usize];
        let n = self.buf_len.saturating_sub(self.offset).min(self.len) as usize;
        let mut done = 0;
        while done < n {
            match rustix::io::pread(&*self.memfd, &mut v[done..n], self.offset + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => done += k,
            }
        }
        v
    }

    /// Writes what the DSP changed (`now` against `before`, what it read) back in place.
    fn write_back(&self, before: &[u8], now: &[u8]) {
        if before == now {
            return;
        }
        let n = self.buf_len.saturating_sub(self.offset).min(self.len).min(now.len() as u64) as usize;
        let mut done = 0;
        while done < n {
            match rustix::io::pwrite(&*self.memfd, &now[done..n], self.offset + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => done += k,
            }
        }
    }
}

/// The bytes buffer argument `i` of `job` holds as the DSP starts: a mapped buffer's memory, or
/// its place in the kernel copy that contains its `wire` address (empty for length 0).
pub(crate) fn arg_bytes(job: &Job, i: usize) -> Vec<u8> {
    if let Some(Some(m)) = job.mapped.get(i) {
        return m.read();
    }
    let Some(b) = job.wire.get(i).map(|r| r.buf()) else { return Vec::new() };
    if b.len == 0 {
        return Vec::new();
    }
    job.copies
        .iter()
        .find(|c| b.pv >= c.0 && b.pv - c.0 + b.len <= c.1.len() as u64)
        .map(|c| c.1[(b.pv - c.0) as usize..(b.pv - c.0 + b.len) as usize].to_vec())
        .unwrap_or_default()
}

/// The DSP wrote its mapped out-buffers in place (`before`: what they held when it started),
/// whatever it answers, unless the DSP restarted under the call (a dead process writes nothing
/// more).
fn write_back_outs(sh: &Shared, job: &Job, before: &[Vec<u8>], now: &[Vec<u8>]) {
    if job.mapped.iter().all(Option::is_none) || sh.lock().epoch != job.epoch {
        return;
    }
    let nin = Scalars::from_raw(job.sc).inbufs() as usize;
    for (j, (b, n)) in before.iter().zip(now).enumerate() {
        if let Some(Some(m)) = job.mapped.get(nin + j) {
            m.write_back(b, n);
        }
    }
}

/// Why a reverse request did not get a usable answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReverseError {
    /// Nobody answered within the timeout.
    Timeout,
    /// The process ended or the DSP restarted.
    Gone,
    /// No such process / ticket.
    NoProcess,
}

impl std::fmt::Display for ReverseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReverseError::Timeout => "nobody answered the reverse request in time",
            ReverseError::Gone => "the DSP process ended or restarted",
            ReverseError::NoProcess => "no such DSP process or ticket",
        })
    }
}

impl std::error::Error for ReverseError {}

pub(crate) fn classify(st: &State, pid: u64, handle: u32, sc: u32) -> DspCallKind {
    let m = Scalars::from_raw(sc).method();
    match (handle, m) {
        (0, 0) => DspCallKind::RemotectlOpen,
        (0, 1) => DspCallKind::RemotectlClose,
        (3, 3) => DspCallKind::ListenerInit2,
        (3, 4) => DspCallKind::ListenerNext2,
        (3, 5) => DspCallKind::ListenerGetInBufs2,
        (4, 2) => DspCallKind::ProcessExit,
        (h, _) if st.procs.get(&pid).is_some_and(|p| p.libs.contains_key(&h)) => DspCallKind::Library,
        _ => DspCallKind::Unknown,
    }
}

/// Waits until `deadline` (or forever with `None`) unless the process dies, the DSP restarts or,
/// with `hang`, the hangs are released. Returns false if the process is gone.
pub(crate) fn dsp_sleep(sh: &Shared, pid: u64, epoch: u64, deadline: Option<Instant>) -> bool {
    let mut st = sh.lock();
    let gen = st.hang_generation;
    loop {
        if st.epoch != epoch || !st.procs.get(&pid).is_some_and(|p| p.alive) {
            return false;
        }
        match deadline {
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return true;
                }
                st = sh.wait_for(st, d - now);
            }
            None => {
                if st.hang_generation != gen {
                    return true;
                }
                st = sh.wait(st);
            }
        }
    }
}

/// Runs one invoke on the DSP and stores the result in its context.
pub(crate) fn run_job(sh: Arc<Shared>, job: Job) {
    let res = execute(&sh, &job);
    let mut st = sh.lock();
    if let Some(c) = st.ctxs.get_mut(&job.ctx) {
        if c.result.is_none() {
            c.result = Some(res);
        }
    }
    drop(st);
    sh.cv.notify_all();
}

fn result(retval: i32, outs: Vec<Vec<u8>>) -> CtxResult {
    CtxResult { retval, outs, fdlist: Vec::new(), sim_dsp: Duration::ZERO }
}

pub(crate) fn execute(sh: &Shared, job: &Job) -> CtxResult {
    let sc = Scalars::from_raw(job.sc);
    let (nin, nbuf) = (sc.inbufs() as usize, sc.buffers().min(job.wire.len()));
    let ins: Vec<Vec<u8>> = (0..nin.min(nbuf)).map(|i| arg_bytes(job, i)).collect();
    let mut outs: Vec<Vec<u8>> = (nin.min(nbuf)..nbuf).map(|i| arg_bytes(job, i)).collect();
    let (kind, fault) = {
        let mut st = sh.lock();
        let kind = classify(&st, job.pid, job.handle, job.sc);
        st.count_dsp(kind);
        let drawn = st.fault(FaultTarget::Dsp(kind));
        let fault = job.pre.or(drawn);
        if !st.procs.get(&job.pid).is_some_and(|p| p.alive) {
            return result(aee::AEE_EBADSTATE, outs);
        }
        (kind, fault)
    };
    let sleep_until = match fault {
        Some(Fault::Errno(e)) => return result(e.0, outs),
        Some(Fault::Returned(v)) => return result(v, outs),
        Some(Fault::Delay(d)) => Some(Some(Instant::now() + d)),
        Some(Fault::Hang) => Some(None),
        None => None,
    };
    if let Some(deadline) = sleep_until {
        if !dsp_sleep(sh, job.pid, job.epoch, deadline) {
            return result(-1, outs);
        }
    }
    // What the mapped out-buffers held when the DSP started (what it changes is written back).
    let before = outs.clone();
    let handles = sc.handles();
    if handles != 0 && !matches!(kind, DspCallKind::Library | DspCallKind::Unknown) {
        // Static interfaces take no handles (skel assertion).
        return result(aee::AEE_EBADPARM, outs);
    }
    let rv = match kind {
        DspCallKind::RemotectlOpen => remotectl_open(sh, job, &ins, &mut outs),
        DspCallKind::RemotectlClose => remotectl_close(sh, job, &ins, &mut outs),
        DspCallKind::ListenerInit2 => {
            if job.sc != LISTENER_INIT2.raw() {
                aee::AEE_EBADPARM
            } else {
                let mut st = sh.lock();
                if let Some(p) = st.procs.get_mut(&job.pid) {
                    p.listener_init = true;
                }
                0
            }
        }
        DspCallKind::ListenerNext2 => next2(sh, job, &ins, &mut outs),
        DspCallKind::ListenerGetInBufs2 => get_in_bufs2(sh, job, &ins, &mut outs),
        DspCallKind::ProcessExit => {
            if job.sc != 0x0200_0000 {
                aee::AEE_EBADPARM
            } else {
                let mut st = sh.lock();
                st.kill_process(job.pid);
                drop(st);
                sh.cv.notify_all();
                0
            }
        }
        DspCallKind::Library => return library(sh, job, outs),
        DspCallKind::Unknown => match job.handle {
            0 | 3 | 4 => aee::AEE_EUNSUPPORTED,
            _ => aee::AEE_EINVHANDLE,
        },
        DspCallKind::CreateProcess
        | DspCallKind::ReleaseProcess
        | DspCallKind::KernelMmap
        | DspCallKind::KernelMunmap
        | DspCallKind::KernelMemMap
        | DspCallKind::KernelMemUnmap
        | DspCallKind::DspInfo => aee::AEE_EUNSUPPORTED,
    };
    write_back_outs(sh, job, &before, &outs);
    result(rv, outs)
}

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = out.get_mut(at..at + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// The little-endian `u32` at `at` in `b`, if it is all there.
pub(crate) fn u32_in(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn remotectl_open(sh: &Shared, job: &Job, ins: &[Vec<u8>], outs: &mut [Vec<u8>]) -> i32 {
    if job.sc != REMOTECTL_OPEN.raw() {
        return aee::AEE_EBADPARM;
    }
    let (Some(name_len), Some(err_len)) = (u32_in(&ins[0], 0), u32_in(&ins[0], 4)) else { return aee::AEE_EBADPARM };
    let uri = &ins[1];
    if name_len == 0 || uri.len() != name_len as usize || uri.last() != Some(&0) || outs[0].len() < 8 || outs[1].len() != err_len as usize {
        return aee::AEE_EBADPARM;
    }
    let uri = String::from_utf8_lossy(&uri[..uri.len() - 1]).into_owned();
    match load(sh, job, &uri) {
        Ok(h) => {
            put(&mut outs[0], 0, &h.to_le_bytes());
            put(&mut outs[0], 4, &0i32.to_le_bytes());
        }
        Err((code, msg)) => {
            put(&mut outs[0], 0, &0u32.to_le_bytes());
            put(&mut outs[0], 4, &(DSP_AEE_EOFFSET.wrapping_add(code as u32) as i32).to_le_bytes());
            let o = &mut outs[1];
            if !o.is_empty() {
                let n = msg.len().min(o.len() - 1);
                o[..n].copy_from_slice(&msg.as_bytes()[..n]);
                o[n] = 0;
            }
        }
    }
    0
}

fn remotectl_close(sh: &Shared, job: &Job, ins: &[Vec<u8>], outs: &mut [Vec<u8>]) -> i32 {
    if job.sc != REMOTECTL_CLOSE.raw() {
        return aee::AEE_EBADPARM;
    }
    let (Some(handle), Some(err_len)) = (u32_in(&ins[0], 0), u32_in(&ins[0], 4)) else { return aee::AEE_EBADPARM };
    if outs[0].len() < 4 || outs[1].len() != err_len as usize {
        return aee::AEE_EBADPARM;
    }
    let mut st = sh.lock();
    let removed = st.procs.get_mut(&job.pid).and_then(|p| p.libs.remove(&handle));
    if removed.is_some() {
        st.counts.libraries_closed += 1;
    }
    drop(st);
    let found = removed.is_some();
    // A real library is unloaded in the process's shell (its destructors run there).
    if let Some(lib) = removed {
        if let Some((shell, id)) = lib.model.exec.as_ref() {
            crate::executor::close_library(sh, &lib.name, shell, *id);
        }
    }
    let n_err: i32 = if found { 0 } else { DSP_AEE_EOFFSET.wrapping_add(aee::AEE_EINVHANDLE as u32) as i32 };
    put(&mut outs[0], 0, &n_err.to_le_bytes());
    if !found {
        let msg = b"invalid handle";
        let o = &mut outs[1];
        if !o.is_empty() {
            let n = msg.len().min(o.len() - 1);
            o[..n].copy_from_slice(&msg[..n]);
            o[n] = 0;
        }
    }
    0
}

/// Parses `file:///NAME?SYMBOL&_modver=1.0&_dom=cdsp` into (NAME, SYMBOL).
pub(crate) fn parse_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix('/').unwrap_or(rest);
    let (name, query) = rest.split_once('?')?;
    let mut parts = query.split('&');
    let symbol = parts.next()?;
    if name.is_empty() || symbol.is_empty() || symbol.contains('=') {
        return None;
    }
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        if k == "_dom" && v != "cdsp" {
            return None;
        }
    }
    Some((name.to_string(), symbol.to_string()))
}

/// Posts a reverse request to process `pid`; returns the ticket id.
pub(crate) fn post(st: &mut State, pid: u64, handle: u32, sc: u32, payload: Vec<u8>, claimed_len: Option<i32>) -> Option<u64> {
    st.procs.get(&pid).filter(|p| p.alive)?;
    // Context numbers are unique across processes (a real driver's are per channel): an answer
    // that reaches the wrong process can then never be taken for one of its own requests, and
    // is counted as stray instead.
    let ctx = (st.id() as u32).max(1);
    let claimed_len = claimed_len.unwrap_or(payload.len() as i32);
    let id = st.id();
    let record = st.reverse_log.len();
    st.reverse_log.push(ReverseRecord { pid, handle, sc, payload_len: payload.len(), result: None });
    st.tickets.insert(
        id,
        Ticket { pid, ctx, handle, sc, payload: Arc::new(payload), claimed_len, state: TicketState::Queued, reply: None, record },
    );
    if let Some(p) = st.procs.get_mut(&pid) {
        p.queue.push_back(id);
    }
    Some(id)
}

/// Waits for a ticket's reply; on timeout the request is withdrawn.
pub(crate) fn await_ticket(sh: &Shared, id: u64, timeout: Duration) -> Result<(i32, Vec<u8>), ReverseError> {
    let deadline = Instant::now() + timeout;
    let mut st = sh.lock();
    loop {
        let Some(t) = st.tickets.get(&id) else { return Err(ReverseError::NoProcess) };
        match t.state {
            TicketState::Answered => {
                let t = st.tickets.remove(&id).ok_or(ReverseError::NoProcess)?;
                return t.reply.ok_or(ReverseError::Gone);
            }
            TicketState::Dropped => {
                st.tickets.remove(&id);
                return Err(ReverseError::Gone);
            }
            _ => {}
        }
        let now = Instant::now();
        if now >= deadline {
            let t = st.tickets.remove(&id);
            if let Some(t) = t {
                if let Some(p) = st.procs.get_mut(&t.pid) {
                    p.queue.retain(|&q| q != id);
                    p.inflight.remove(&t.ctx);
                }
            }
            return Err(ReverseError::Timeout);
        }
        st = sh.wait_for(st, deadline - now);
    }
}

enum RevErr {
    Timeout,
    Gone,
    Remote(i32),
    Bad,
}

fn rev_call(sh: &Shared, job: &Job, handle: u32, sc: Scalars, ins: &[&[u8]], out_lens: &[u32]) -> Result<Vec<Vec<u8>>, RevErr> {
    let payload = wire::pack_request(ins, out_lens);
    let id = {
        let mut st = sh.lock();
        if st.epoch != job.epoch {
            return Err(RevErr::Gone);
        }
        post(&mut st, job.pid, handle, sc.raw(), payload, None).ok_or(RevErr::Gone)?
    };
    sh.cv.notify_all();
    match await_ticket(sh, id, sh.cfg.reverse_timeout) {
        Ok((0, reply)) => wire::unpack_reply(&reply, out_lens).map_err(|_| RevErr::Bad),
        Ok((r, _)) => Err(RevErr::Remote(r)),
        Err(ReverseError::Timeout) => Err(RevErr::Timeout),
        Err(_) => Err(RevErr::Gone),
    }
}

fn sc_of(method: u8, i: u8, o: u8) -> Scalars {
    Scalars::new(method, i, o, 0, 0).unwrap_or(Scalars::from_raw(0))
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// A library's `fopen(path, mode)` (executor): apps_std `fopen_with_env` through the listener,
/// and `fclose` again when it opened; 0 when the host's file service allowed it, else its AEE
/// code (the shell offers no `fread`, so the FILE is not kept).
pub(crate) fn library_fopen(sh: &Shared, job: &Job, path: &[u8], mode: &[u8]) -> i32 {
    let apps_std = match apps_std_handle(sh, job) {
        Ok(h) => h,
        Err(e) => return rev_status(e, aee::AEE_ENOSUCHMOD),
    };
    let z = |b: &[u8]| {
        let mut v = b.to_vec();
        v.push(0);
        v
    };
    let (env, delim, fname, mode) = (cstr("ADSP_LIBRARY_PATH"), cstr(";"), z(path), z(mode));
    let mut prim = Vec::new();
    for l in [env.len(), delim.len(), fname.len(), mode.len()] {
        prim.extend_from_slice(&(l as u32).to_le_bytes());
    }
    match rev_call(sh, job, apps_std, sc_of(asm::FOPEN_WITH_ENV as u8, 5, 1), &[&prim, &env, &delim, &fname, &mode], &[4]) {
        Ok(outs) => {
            let file = u32_in(&outs[0], 0).unwrap_or(0);
            let _ = rev_call(sh, job, apps_std, sc_of(asm::FCLOSE as u8, 1, 0), &[&file.to_le_bytes()], &[]);
            0
        }
        Err(e) => rev_status(e, aee::AEE_EFAILED),
    }
}

fn rev_status(e: RevErr, other: i32) -> i32 {
    match e {
        RevErr::Remote(r) => r,
        _ => other,
    }
}

/// apps_std's reverse handle of the job's process, opened through apps_remotectl once.
fn apps_std_handle(sh: &Shared, job: &Job) -> Result<u32, RevErr> {
    if let Some(h) = sh.lock().procs.get(&job.pid).and_then(|p| p.apps_std) {
        return Ok(h);
    }
    let n = cstr("apps_std");
    let mut prim = Vec::new();
    prim.extend_from_slice(&(n.len() as u32).to_le_bytes());
    prim.extend_from_slice(&256u32.to_le_bytes());
    let outs = rev_call(sh, job, 0, REMOTECTL_OPEN, &[&prim, &n], &[8, 256])?;
    let h = u32_in(&outs[0], 0).unwrap_or(0);
    if u32_in(&outs[0], 4).unwrap_or(1) != 0 {
        return Err(RevErr::Remote(aee::AEE_ENOSUCHMOD));
    }
    if let Some(p) = sh.lock().procs.get_mut(&job.pid) {
        p.apps_std = Some(h);
    }
    Ok(h)
}

fn load(sh: &Shared, job: &Job, uri: &str) -> Result<u32, (i32, String)> {
    let Some((name, symbol)) = parse_uri(uri) else { return Err((aee::AEE_EBADPARM, format!("bad URI: {uri}"))) };
    let fail = |e: RevErr, code: i32, what: &str| -> (i32, String) {
        match e {
            RevErr::Timeout => (aee::AEE_EUNABLETOLOAD, format!("{name}: no reverse listener answered {what} (bench timeout)")),
            RevErr::Gone => (aee::AEE_EBADSTATE, format!("{name}: process ended during {what}")),
            RevErr::Remote(r) => (code, format!("{name}: {what} failed on the host ({r})")),
            RevErr::Bad => (aee::AEE_EBADPARM, format!("{name}: malformed reply to {what}")),
        }
    };
    // apps_std's reverse handle, once per process.
    let apps_std = sh.lock().procs.get(&job.pid).and_then(|p| p.apps_std);
    let apps_std = match apps_std {
        Some(h) => h,
        None => {
            let n = cstr("apps_std");
            let mut prim = Vec::new();
            prim.extend_from_slice(&(n.len() as u32).to_le_bytes());
            prim.extend_from_slice(&256u32.to_le_bytes());
            let outs = rev_call(sh, job, 0, REMOTECTL_OPEN, &[&prim, &n], &[8, 256])
                .map_err(|e| fail(e, aee::AEE_ENOSUCHMOD, "apps_remotectl open"))?;
            let h = u32_in(&outs[0], 0).unwrap_or(0);
            let err = u32_in(&outs[0], 4).unwrap_or(1);
            if err != 0 {
                return Err((aee::AEE_ENOSUCHMOD, format!("{name}: apps_std not available on the host ({err:#x})")));
            }
            if let Some(p) = sh.lock().procs.get_mut(&job.pid) {
                p.apps_std = Some(h);
            }
            h
        }
    };
    // fopen_with_env(env, delim, name, mode) -> FILE
    let (env, delim, fname, mode) = (cstr("ADSP_LIBRARY_PATH"), cstr(";"), cstr(&name), cstr("r"));
    let mut prim = Vec::new();
    for l in [env.len(), delim.len(), fname.len(), mode.len()] {
        prim.extend_from_slice(&(l as u32).to_le_bytes());
    }
    let outs = rev_call(sh, job, apps_std, sc_of(asm::FOPEN_WITH_ENV as u8, 5, 1), &[&prim, &env, &delim, &fname, &mode], &[4])
        .map_err(|e| fail(e, aee::AEE_ENOSUCHFILE, "fopen_with_env"))?;
    let file = u32_in(&outs[0], 0).unwrap_or(0);
    let res = fetch(sh, job, apps_std, file, &fname, &name);
    // fclose(FILE), whatever happened.
    let close = rev_call(sh, job, apps_std, sc_of(asm::FCLOSE as u8, 1, 0), &[&file.to_le_bytes()], &[]);
    let image = res?;
    close.map_err(|e| fail(e, aee::AEE_EFAILED, "fclose"))?;
    elf::check_hexagon_elf(&image).map_err(|e| (aee::AEE_EBADELF, format!("{name}: {e}")))?;
    // A registered Rust model stands for the library's code: found by the name the DSP was
    // asked to load, or by the tag inside the image it fetched (elf::library_image), as a real
    // DSP runs the code it fetched whatever the file was called. Otherwise a real Hexagon
    // shared object is loaded by the process's executor shell.
    let registered = {
        let st = sh.lock();
        st.libraries.get(&name).or_else(|| elf::model_tag(&image).and_then(|t| st.libraries.get(t))).cloned()
    };
    let model = match registered {
        Some(m) => {
            if m.symbol != symbol {
                return Err((
                    aee::AEE_ENOSUCHSYMBOL,
                    format!("{name}: undefined symbol {symbol} (the registered model exports {})", m.symbol),
                ));
            }
            m
        }
        None if crate::executor::is_shared_library(&image) => {
            Arc::new(crate::executor::load_library(sh, job.pid, job.epoch, &name, &symbol, &image)?)
        }
        None => {
            return Err((
                aee::AEE_ENOSUCHSYMBOL,
                format!("{name}: undefined symbol {symbol} (no model registered on the bench, and not a Hexagon shared object)"),
            ))
        }
    };
    let mut st = sh.lock();
    let Some(p) = st.procs.get_mut(&job.pid).filter(|p| p.alive) else { return Err((aee::AEE_EBADSTATE, "process ended".into())) };
    let h = p.next_lib;
    p.next_lib += 0x10;
    p.libs.insert(h, LoadedLib { name, model, cache: Default::default() });
    st.counts.libraries_opened += 1;
    Ok(h)
}

fn fetch(sh: &Shared, job: &Job, apps_std: u32, file: u32, fname: &[u8], name: &str) -> Result<Vec<u8>, (i32, String)> {
    let fail = |e: RevErr, code: i32, what: &str| -> (i32, String) {
        match e {
            RevErr::Timeout => (aee::AEE_EUNABLETOLOAD, format!("{name}: no reverse listener answered {what} (bench timeout)")),
            RevErr::Gone => (aee::AEE_EBADSTATE, format!("{name}: process ended during {what}")),
            RevErr::Remote(r) => (code, format!("{name}: {what} failed on the host ({r})")),
            RevErr::Bad => (aee::AEE_EBADPARM, format!("{name}: malformed reply to {what}")),
        }
    };
    // stat(name) (extended method 31)
    let mut prim = Vec::new();
    prim.extend_from_slice(&asm::STAT.to_le_bytes());
    prim.extend_from_slice(&(fname.len() as u32).to_le_bytes());
    let outs = rev_call(sh, job, apps_std, sc_of(31, 2, 1), &[&prim, fname], &[96]).map_err(|e| fail(e, aee::AEE_ENOSUCHFILE, "stat"))?;
    let st = apps_std_STAT::read_from_bytes(&outs[0]).map_err(|_| (aee::AEE_EBADPARM, format!("{name}: short stat reply")))?;
    let size = st.size;
    if size > sh.cfg.max_library_len {
        return Err((aee::AEE_EBADSIZE, format!("{name}: {size} bytes is too large")));
    }
    let read = |want: u32| -> Result<(Vec<u8>, bool), (i32, String)> {
        let mut prim = Vec::new();
        prim.extend_from_slice(&file.to_le_bytes());
        prim.extend_from_slice(&want.to_le_bytes());
        let outs = rev_call(sh, job, apps_std, sc_of(asm::FREAD as u8, 1, 2), &[&prim], &[8, want])
            .map_err(|e| fail(e, aee::AEE_EFREAD, "fread"))?;
        let n = u32_in(&outs[0], 0).unwrap_or(u32::MAX) as i32;
        let eof = u32_in(&outs[0], 4).unwrap_or(0) != 0;
        if n < 0 || n as u32 > want {
            return Err((aee::AEE_EFREAD, format!("{name}: fread reported {n} bytes for {want}")));
        }
        Ok((outs[1][..n as usize].to_vec(), eof))
    };
    let (hdr, _) = read(elf::ELF32_HEADER_LEN as u32)?;
    elf::check_hexagon_elf(&hdr).map_err(|e| (aee::AEE_EBADELF, format!("{name}: {e}")))?;
    let mut prim = Vec::new();
    prim.extend_from_slice(&file.to_le_bytes());
    prim.extend_from_slice(&0i32.to_le_bytes());
    prim.extend_from_slice(&APPS_STD_SEEK_SET.to_le_bytes());
    rev_call(sh, job, apps_std, sc_of(asm::FSEEK as u8, 1, 0), &[&prim], &[]).map_err(|e| fail(e, aee::AEE_EFSEEK, "fseek"))?;
    let mut image = Vec::with_capacity(size as usize);
    while (image.len() as u64) < size {
        let want = (size - image.len() as u64).min(sh.cfg.loader_chunk.max(1) as u64) as u32;
        let (data, eof) = read(want)?;
        image.extend_from_slice(&data);
        if data.is_empty() || eof {
            break;
        }
    }
    if (image.len() as u64) != size {
        return Err((aee::AEE_EFREAD, format!("{name}: read {} of {size} bytes", image.len())));
    }
    Ok(image)
}

fn next2(sh: &Shared, job: &Job, ins: &[Vec<u8>], outs: &mut [Vec<u8>]) -> i32 {
    if job.sc != LISTENER_NEXT2.raw() || ins[0].len() < 16 || outs[0].len() < 16 {
        return aee::AEE_EBADPARM;
    }
    let w = |i| u32_in(&ins[0], i).unwrap_or(0);
    let (prev_ctx, prev_result, prev_len, cap) = (w(0), w(4) as i32, w(8), w(12));
    let mut st = sh.lock();
    if !st.procs.get(&job.pid).is_some_and(|p| p.listener_init) {
        return aee::AEE_EBADSTATE;
    }
    if prev_ctx != 0 {
        let tid = st.procs.get_mut(&job.pid).and_then(|p| p.inflight.remove(&prev_ctx));
        if tid.is_none() {
            // An answer to a request this process never sent (or withdrew): e.g. a listener of an
            // old channel generation answering into a new one.
            st.counts.stray_answers += 1;
        }
        if let Some(t) = tid.and_then(|tid| st.tickets.get_mut(&tid)) {
            let n = (prev_len as usize).min(ins[1].len());
            t.reply = Some((prev_result, ins[1][..n].to_vec()));
            t.state = TicketState::Answered;
            let rec = t.record;
            if let Some(r) = st.reverse_log.get_mut(rec) {
                r.result = Some(prev_result);
            }
            sh.cv.notify_all();
        }
    }
    loop {
        if st.epoch != job.epoch || !st.procs.get(&job.pid).is_some_and(|p| p.alive) {
            return DSP_AEE_EOFFSET.wrapping_add(aee::AEE_EBADSTATE as u32) as i32;
        }
        let next = st.procs.get_mut(&job.pid).and_then(|p| p.queue.pop_front());
        if let Some(id) = next {
            let Some(t) = st.tickets.get_mut(&id) else { continue };
            t.state = TicketState::Delivered;
            let (ctx, handle, sc, claimed, payload) = (t.ctx, t.handle, t.sc, t.claimed_len, t.payload.clone());
            if let Some(p) = st.procs.get_mut(&job.pid) {
                p.inflight.insert(ctx, id);
            }
            drop(st);
            put(&mut outs[0], 0, &ctx.to_le_bytes());
            put(&mut outs[0], 4, &handle.to_le_bytes());
            put(&mut outs[0], 8, &sc.to_le_bytes());
            put(&mut outs[0], 12, &claimed.to_le_bytes());
            let n = payload.len().min(cap as usize).min(outs[1].len());
            outs[1][..n].copy_from_slice(&payload[..n]);
            return 0;
        }
        st = sh.wait(st);
    }
}

fn get_in_bufs2(sh: &Shared, job: &Job, ins: &[Vec<u8>], outs: &mut [Vec<u8>]) -> i32 {
    if job.sc != LISTENER_GET_IN_BUFS2.raw() || ins[0].len() < 12 || outs[0].len() < 4 {
        return aee::AEE_EBADPARM;
    }
    let w = |i| u32_in(&ins[0], i).unwrap_or(0);
    let (ctx, offset, cap) = (w(0), w(4) as usize, w(8) as usize);
    let st = sh.lock();
    let payload = st.procs.get(&job.pid).and_then(|p| p.inflight.get(&ctx)).and_then(|id| st.tickets.get(id)).map(|t| t.payload.clone());
    drop(st);
    let Some(payload) = payload else { return aee::AEE_EBADPARM };
    if offset > payload.len() {
        return aee::AEE_EBADPARM;
    }
    put(&mut outs[0], 0, &(payload.len() as u32).to_le_bytes());
    let n = (payload.len() - offset).min(cap).min(outs[1].len());
    outs[1][..n].copy_from_slice(&payload[offset..offset + n]);
    0
}

/// DSP addresses of the framework's copies of buffer arguments.
const CALL_REGION_BASE: u32 = 0x0100_0000;

/// One library call running on the DSP, counted in `State::lib_running` until dropped.
struct Running<'a> {
    sh: &'a Shared,
    pid: u64,
}

impl<'a> Running<'a> {
    fn start(sh: &'a Shared, pid: u64) -> Running<'a> {
        *sh.lock().lib_running.entry(pid).or_insert(0) += 1;
        Running { sh, pid }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut st = self.sh.lock();
        if let Some(n) = st.lib_running.get_mut(&self.pid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.lib_running.remove(&self.pid);
            }
        }
        drop(st);
        self.sh.cv.notify_all();
    }
}

fn library(sh: &Shared, job: &Job, mut outs: Vec<Vec<u8>>) -> CtxResult {
    let lib = {
        let st = sh.lock();
        st.procs.get(&job.pid).and_then(|p| p.libs.get(&job.handle)).map(|l| (l.name.clone(), l.model.clone(), l.cache.clone()))
    };
    let Some((name, model, cache)) = lib else { return result(aee::AEE_EINVHANDLE, outs) };
    // The process's release waits for this call to return (interrupted or not).
    let _running = Running::start(sh, job.pid);
    // Executor hook.
    if let Some((exec, lib)) = model.exec.clone() {
        let before = outs.clone();
        let res = crate::executor::invoke(sh, job, &name, &exec, lib, outs);
        write_back_outs(sh, job, &before, &res.outs);
        return res;
    }
    let sc = Scalars::from_raw(job.sc);
    let nbuf = sc.buffers();
    // The framework: 64-bit records -> 32-bit view. Each kernel copy gets one DSP region (so
    // arguments that share bytes in it share them here too), each mapped buffer a region of
    // its own, read from the dma-buf and written back after the entry (in place).
    let mut regions: Vec<Region> = Vec::with_capacity(nbuf);
    let mut chunk_region: Vec<Option<usize>> = vec![None; job.copies.len()];
    let mut mapped_regions: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    let mut pra = Vec::with_capacity(job.wire.len());
    let mut next = CALL_REGION_BASE;
    let mut new_region = |regions: &mut Vec<Region>, data: Vec<u8>| {
        let base = next;
        next = next.wrapping_add(((data.len() as u32).div_ceil(4096) + 1) * 4096);
        regions.push(Region { base, data });
        regions.len() - 1
    };
    for (i, rec) in job.wire.iter().enumerate() {
        if i < nbuf {
            let b = rec.buf();
            let chunk = job.copies.iter().position(|c| b.len != 0 && b.pv >= c.0 && b.pv - c.0 + b.len <= c.1.len() as u64);
            let pv = match (job.mapped.get(i), chunk) {
                (Some(Some(m)), _) => {
                    let data = m.read();
                    let r = new_region(&mut regions, data.clone());
                    mapped_regions.push((i, r, data));
                    regions[r].base
                }
                (_, Some(c)) => {
                    let r = match chunk_region[c] {
                        Some(r) => r,
                        None => {
                            let r = new_region(&mut regions, job.copies[c].1.clone());
                            chunk_region[c] = Some(r);
                            r
                        }
                    };
                    regions[r].base.wrapping_add((b.pv - job.copies[c].0) as u32)
                }
                _ => {
                    let r = new_region(&mut regions, Vec::new());
                    regions[r].base
                }
            };
            pra.push(remote_arg32 { buf: remote_buf32 { pv, len: b.len as u32 } });
        } else {
            let d = rec.dma();
            pra.push(remote_arg32::from_dma(remote_dma_handle32 { fd: d.fd, offset: d.offset }));
        }
    }
    let handles = job.handles.iter().map(|h| HandleBuf { fd: h.fd, memfd: h.memfd.clone(), len: h.len, buf: h.buf }).collect();
    let cache = model.map_cache.then_some(cache);
    let mut env =
        EntryEnv { sh, pid: job.pid, library: name, sc: job.sc, pra, regions, handles, events: Vec::new(), sim: None, gone: None, cache };
    let rv = match model.version {
        EntryVersion::V1 => entry::run_v1(&mut env, &model),
        EntryVersion::V2 if job.sc >> 24 == 4 && model.map_cache => entry::run_release(&mut env),
        EntryVersion::V2 if job.sc >> 24 == 3 && !model.table.is_empty() => entry::run_batch(&mut env, &model),
        EntryVersion::V2 if job.sc >> 24 == 5 && !model.table.is_empty() && model.programs => entry::run_program(&mut env, &model),
        EntryVersion::V2 => entry::run_v2(&mut env, &model),
    };
    // The simulated DSP cost of the entry's maps and unmaps (the cost model's; zero by default).
    let hap = sh.cfg.cost.map_cost_of(&env.events);
    env.flush();
    let nin = sc.inbufs() as usize;
    for (j, o) in outs.iter_mut().enumerate() {
        let Some(a) = env.pra.get(nin + j).map(|a| a.buf) else { continue };
        let found = env.regions.iter().find(|r| a.pv >= r.base && (a.pv - r.base) as usize + o.len() <= r.data.len());
        if let Some(r) = found {
            let (at, n) = ((a.pv - r.base) as usize, o.len());
            o.copy_from_slice(&r.data[at..at + n]);
        }
    }
    // Mapped buffers were written in place, whatever the entry returns.
    if sh.lock().epoch == job.epoch {
        for (i, r, before) in &mapped_regions {
            if let (Some(Some(m)), Some(r)) = (job.mapped.get(*i), env.regions.get(*r)) {
                m.write_back(before, &r.data);
            }
        }
    }
    let fdlist = fdlist(sh, job, rv);
    CtxResult { retval: rv, outs, fdlist, sim_dsp: env.sim.unwrap_or_default().saturating_add(hap) }
}

/// The fdlist the DSP writes for a library call that returned `rv`
/// ([`BenchConfig::fdlist`](crate::BenchConfig::fdlist)); nothing after an error.
///
/// A DSP process lists no fd it still has mapped (an entry's map cache keeps a lease mapped
/// across calls): the "Skip reference for DMA handles" patch says the DSP lists an fd when its
/// own count of it reaches zero, and a listed fd whose mapping stayed would be a mapping without
/// its driver map.
pub(crate) fn fdlist(sh: &Shared, job: &Job, rv: i32) -> Vec<i32> {
    match sh.cfg.fdlist {
        crate::FdlistPolicy::EveryHandle if rv == 0 => {
            let st = sh.lock();
            job.handles.iter().map(|h| h.fd).filter(|fd| !st.fd_mapped_by(job.pid, *fd)).take(hexrpc_drivers::adsprpc::M_FDLIST).collect()
        }
        _ => Vec::new(),
    }
}
