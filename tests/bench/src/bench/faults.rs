//! Faults and restarts: injected faults and hangs, DSP restarts, the DSP's availability, the
//! downstream channel's reopen, and the threads a test interrupts.

use std::time::{Duration, Instant};

use super::Bench;
use crate::account::{Fault, FaultTarget};
use crate::release;
use crate::state::FaultRule;

impl Bench {
    // ---- faults ----

    /// Makes the `nth` (1-based, counted from now) occurrence of `target` do `fault`.
    pub fn inject(&self, target: FaultTarget, nth: u32, fault: Fault) {
        self.lock().faults.push(FaultRule { target, remaining: nth.max(1), fault });
    }

    /// How many injected faults on `target` have not fired yet.
    pub fn faults_pending(&self, target: FaultTarget) -> usize {
        self.lock().faults.iter().filter(|r| r.target == target).count()
    }

    /// Takes one more reference on the newest handle map (va 0) of `fd` on the downstream
    /// FastRPC file behind `rpc_fd`, as a call that carried `fd` would in `get_args`
    /// (`fastrpc_mmap_find` with refs), but with no call the stack made: a reference the stack
    /// could not have counted. False (nothing changed) if there is no such map, or `rpc_fd` is
    /// not a downstream FastRPC file of this bench.
    pub fn plant_handle_ref(&self, rpc_fd: hexrpc_drivers::Fd, fd: hexrpc_drivers::Fd) -> bool {
        let mut st = self.lock();
        let Some(crate::state::FdEntry { obj: crate::state::FdObj::Rpc(file), .. }) = st.fds.get(&rpc_fd.0) else { return false };
        let file = *file;
        let Some(f) = st.rpc_files.get_mut(&file) else { return false };
        match f.maps.iter_mut().rev().find(|m| m.kind != crate::state::MapKind::AddPages && m.fd == fd.0 && m.va == 0) {
            Some(m) => {
                m.refs += 1;
                true
            }
            None => false,
        }
    }

    /// Forgets every injected fault that has not fired.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Releases every call held by [`Fault::Hang`].
    pub fn release_hangs(&self) {
        self.lock().hang_generation += 1;
        self.sh.cv.notify_all();
    }

    /// Simulates a DSP subsystem restart: every DSP process ends (libraries, HAP mappings and
    /// reverse requests with it).
    ///
    /// Downstream this is a **CDSP** restart (`fastrpc_restart_notifier_cb`): the channel's
    /// restart counter moves on and the channel goes (the kref is left as it is). A file whose
    /// counter is older (it did its GETINFO or last INIT before) is stale: calls in flight and
    /// every later INVOKE / INVOKE_FD / INVOKE_ATTRS / INVOKE_CRC return **+104** from the ioctl
    /// with no errno (the tail of `fastrpc_internal_invoke`; nothing is sent), MMAP with
    /// ADD_PAGES returns +104 too, MMAP of an fd or a heap and MUNMAP return -1 (`EPERM`);
    /// GETINFO, SETMODE, CONTROL, GETPERF and MUNMAP_FD keep working; its close sends no release;
    /// an INIT on it revives it. The channel reopens at the next INIT, as
    /// [`set_channel_reopen`](Self::set_channel_reopen) says (at once by default). Driver-global
    /// heap maps survive (only an ADSP restart drains them, which the bench never makes).
    ///
    /// Upstream: calls in flight and every later call on an fd opened before fail with `EPIPE`.
    /// Fresh fds work (the DSP is back at once unless
    /// [`set_dsp_available`](Self::set_dsp_available) says otherwise).
    /// The restart is recorded as [`RestartReason::Requested`](crate::RestartReason::Requested)
    /// ([`Bench::last_restart`]).
    pub fn restart_dsp(&self) {
        release::restart_dsp(&self.sh, crate::RestartReason::Requested);
    }

    /// While false, the DSP is down after a restart: downstream INIT fails with `ENOTCONN`; the
    /// upstream node does not exist (`ENOENT` on open, as the misc device is deregistered).
    pub fn set_dsp_available(&self, up: bool) {
        self.lock().dsp_down = !up;
        #[cfg(feature = "linux")]
        if let Some(kern) = self.sh.linux.as_ref() {
            if up {
                kern.reprobe();
            } else {
                kern.remove();
            }
        }
    }

    /// Downstream: how the CDSP channel comes back after this and every later restart
    /// ([`ChannelReopen`](crate::ChannelReopen); `Immediate` until changed). While the link is
    /// not up, or once the port is stuck, every channel open (the INIT of a file while the
    /// channel is closed) waits
    /// [`BenchConfig::port_connect_timeout`](crate::BenchConfig::port_connect_timeout) holding
    /// the driver's global mutex (a close's session free waits for it) and fails with -1
    /// (`EPERM`), counted in
    /// [`CallCounts::channel_open_failures`](crate::CallCounts::channel_open_failures). A reading
    /// of `fastrpc_channel_open`, `fastrpc_glink_register` and `fastrpc_glink_open`, not the
    /// driver run.
    pub fn set_channel_reopen(&self, reopen: crate::ChannelReopen) {
        self.lock().reopen = reopen;
    }

    /// A reboot, as far as the downstream channel is concerned (test-only): the glink link is up
    /// and a port left CONNECTING by [`ChannelReopen::Stuck`](crate::ChannelReopen::Stuck) is
    /// DISCONNECTED again, so the next open works. Nothing else of the bench is reset.
    pub fn reboot_channel(&self) {
        let mut st = self.lock();
        st.link_up_at = None;
        st.port_stuck = false;
        st.stuck_pending = false;
        drop(st);
        self.sh.cv.notify_all();
    }

    // ---- threads ----

    /// True if thread `tid` is blocked in an interruptible bench wait (an invoke).
    pub fn is_blocked(&self, tid: i32) -> bool {
        self.lock().blocked.contains(&tid)
    }

    /// Waits up to `timeout` until thread `tid` is blocked in an interruptible bench wait.
    pub fn wait_until_blocked(&self, tid: i32, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.blocked.contains(&tid) {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            st = self.sh.wait_for(st, (end - now).min(Duration::from_millis(20)));
        }
    }
}
