//! The kernel's release paths, shared by the seam and the models: what the last close of a
//! descriptor gives up, the last release of a FastRPC file (its "release process" message to the
//! DSP, then its contexts, maps and session), and a DSP subsystem restart (every DSP process
//! ends; what each kernel does with the files it leaves).

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use hexrpc_drivers::Errno;

use crate::account::{DspCallKind, Fault, FaultTarget, PmQosOp, PmQosRecord};
use crate::ion;
use crate::restart::RestartReason;
use crate::state::{ChannelReopen, CtxResult, FdObj, Shared, State};

/// Gives up what a descriptor referred to, as its last close does: ION clients and their
/// handles, a FastRPC file (released once no thread is inside one of its ioctls, as Linux
/// releases a file; the release may block, see [`release_file`]), a dma-buf reference.
pub(crate) fn release_obj<'a>(sh: &'a Shared, mut st: MutexGuard<'a, State>, obj: FdObj) -> MutexGuard<'a, State> {
    match obj {
        FdObj::Ion(c) => ion::close_client(&mut st, c),
        FdObj::Rpc(f) => {
            let busy = match st.rpc_files.get_mut(&f) {
                Some(file) => {
                    file.closed = true;
                    file.in_ioctl > 0
                }
                None => false,
            };
            if !busy {
                st = release_file(sh, st, f);
            }
        }
        FdObj::DmaBuf(b) => {
            if let Some(buf) = st.buffers.get_mut(&b) {
                buf.share_fds = buf.share_fds.saturating_sub(1);
            }
            st.maybe_free_buffer(b);
        }
        FdObj::File(_) | FdObj::Dir(_) | FdObj::Null | FdObj::Heap => {}
    }
    st
}

/// The last release of a FastRPC file (`fastrpc_file_free` downstream, `fastrpc_device_release`
/// upstream). First the kernel's "release process" message, which names only the file's
/// identity (tgid, with the session bit downstream): the live DSP process of that identity is
/// released, whichever file created it. It goes out when the file holds a session of the
/// current restart epoch on an open channel. The message is a kernel call: a
/// [`DspCallKind::ReleaseProcess`] fault delays or hangs it, and the DSP answers only once the
/// library calls still running in that process (and in the file's own process) have returned,
/// interrupted ones included. Downstream waits uninterruptibly with no limit (a hang lasts until
/// [`Bench::release_hangs`](crate::Bench::release_hangs) or a restart); upstream waits at most
/// [`BenchConfig::kernel_call_timeout`](crate::BenchConfig::kernel_call_timeout) and then goes on.
/// Only then are contexts, maps (and so the buffers they pin) and the session freed.
pub(crate) fn release_file<'a>(sh: &'a Shared, mut st: MutexGuard<'a, State>, file: u64) -> MutexGuard<'a, State> {
    #[cfg(feature = "linux")]
    if let Some(kern) = sh.linux.as_ref().filter(|k| k.file(file).is_some()) {
        // fastrpc_device_release: the driver sends the release message itself.
        drop(st);
        kern.release(file);
        let mut st = sh.lock();
        st.free_rpc_file(file);
        return st;
    }
    // fastrpc_device_release removes the file's PM-QoS request before fastrpc_file_free.
    if let Some(inited) = st.rpc_files.get(&file).and_then(|f| f.qos_request.then_some(f.inited)) {
        st.pm_qos_log.push(PmQosRecord { file, op: PmQosOp::Remove, latency_us: 0, inited });
    }
    let Some(f) = st.rpc_files.get(&file) else { return st };
    let epoch = st.epoch;
    // (The message is a kernel invoke: it needs the file's SMMU session, which a file whose
    // GETINFO failed never got, `fastrpc_internal_invoke`.)
    let sends =
        f.session && f.session_epoch == Some(epoch) && !st.dsp_down && (f.upstream || (f.cid.is_some() && st.channel_open == Some(epoch)));
    if sends {
        let (identity, own, upstream) = (f.tgid, f.proc_id, f.upstream);
        let target = st.process_of_identity(identity);
        st.count_dsp(DspCallKind::ReleaseProcess);
        let fault = st.fault(FaultTarget::Dsp(DspCallKind::ReleaseProcess));
        let start = Instant::now();
        let limit = upstream.then_some(sh.cfg.kernel_call_timeout);
        let gen = st.hang_generation;
        let hold_until = match fault {
            Some(Fault::Delay(d)) => Some(start + d),
            Some(Fault::Hang) => None,
            _ => Some(start),
        };
        let pids: Vec<u64> = target.into_iter().chain(own).collect();
        // The process is being torn down: no caller can take an answer from its executor shell
        // any more (a call still running there was abandoned), so the shell ends now instead
        // of holding the release until the executor timeout.
        if let Some(shell) = target.and_then(|t| st.procs.get(&t)).and_then(|p| p.shell.clone()) {
            shell.kill();
        }
        loop {
            let answered = match hold_until {
                Some(t) => Instant::now() >= t,
                None => st.hang_generation != gen,
            };
            let running = pids.iter().any(|p| st.lib_running.get(p).is_some_and(|&n| n > 0));
            if st.epoch != epoch || (answered && !running) {
                break;
            }
            let mut wait = Duration::from_millis(50);
            if let Some(l) = limit {
                let waited = start.elapsed();
                if waited >= l {
                    break;
                }
                wait = wait.min(l - waited);
            }
            st = sh.wait_for(st, wait);
        }
        if let Some(t) = target {
            st.kill_process(t);
        }
    }
    // fastrpc_session_free takes smd_mutex, which a channel open waiting for its port holds.
    while st.smd_busy {
        st = sh.wait(st);
    }
    st.free_rpc_file(file);
    sh.cv.notify_all();
    st
}

/// [`Bench::restart_dsp`](crate::Bench::restart_dsp) on the shared state (also what a DSP model
/// does when a kernel crashes), recorded with its reason.
pub(crate) fn restart_dsp(sh: &Shared, reason: RestartReason) {
    let _one = sh.restart.lock().unwrap_or_else(|e| e.into_inner());
    let mut st = sh.lock();
    st.restarts.record(reason);
    // The epoch moves first, under the state lock: every message handled under the old one is
    // dropped from now on, and an answer or a copy into a call's buffers is made only under the
    // lock with the epoch unchanged, so never after the driver (below) has let the call go and
    // freed them. Until the driver has lost its channel, a message it sends goes to the DSP
    // that is going away (`restarting`: `linux::DEAD_EPOCH`), never to the one that comes up.
    // (The epoch once moved while the old channel could still send: a create sent between the
    // two carried the new epoch, ran on the new DSP, and its process outlived the file the
    // driver then released, holding the process's identity until the next restart.)
    st.epoch += 1;
    st.restarting = true;
    // fastrpc_restart_notifier_cb: the channel goes (chan = NULL, the kref untouched; the
    // epoch is the channel's ssrcount). The glink link comes back as set_channel_reopen says.
    match st.reopen {
        ChannelReopen::Immediate => st.link_up_at = None,
        ChannelReopen::LinkUpAfter(d) => st.link_up_at = Some(Instant::now() + d),
        ChannelReopen::Stuck => {
            st.link_up_at = None;
            st.stuck_pending = true;
        }
    }
    let pids: Vec<u64> = st.procs.keys().copied().collect();
    for p in pids {
        st.kill_process(p);
    }
    let upstream_files: std::collections::HashSet<u64> = st.rpc_files.iter().filter(|(_, f)| f.upstream).map(|(&id, _)| id).collect();
    for c in st.ctxs.values_mut() {
        if c.result.is_none() {
            // Downstream: the context's initial -1 (the driver then reports +104).
            // Upstream: fastrpc_notify_users sets -EPIPE.
            let retval = if upstream_files.contains(&c.file) { -Errno::EPIPE.0 } else { -1 };
            c.result = Some(CtxResult { retval, outs: Vec::new(), fdlist: Vec::new(), sim_dsp: Duration::ZERO });
        }
    }
    drop(st);
    sh.cv.notify_all();
    // Linux's own driver loses its channel (fastrpc_rpmsg_remove: calls in flight end with
    // EPIPE, nothing more is sent), then the DSP is back: a new probe.
    #[cfg(feature = "linux")]
    if let Some(kern) = sh.linux.as_ref() {
        kern.remove();
    }
    let mut st = sh.lock();
    st.restarting = false;
    #[cfg(feature = "linux")]
    if let (Some(kern), false) = (sh.linux.as_ref(), st.dsp_down) {
        drop(st);
        kern.reprobe();
    }
}
