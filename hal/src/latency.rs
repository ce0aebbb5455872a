//! A session's latency policy: what it asks of the host kernel so that a round trip to the DSP
//! does not pay a deep CPU idle state's wake-up.
//!
//! **The PM-QoS vote.** The comma three's driver gives each FastRPC file one CPU-DMA-latency
//! request: `FASTRPC_CONTROL_LATENCY` with an enable of 1 adds it at the device tree's
//! `qcom,rpc-latency-us` (any other enable updates it to "no constraint"), and the file's
//! release removes it (`fastrpc_internal_control`, `fastrpc_device_release`). The request
//! carries no figure: the latency is the board's. Without it, the thread that waits for the DSP's
//! answer may sleep in a state whose exit latency every call then pays.
//!
//! The vote belongs to the file, so a session sends it on every channel it opens: once after the
//! channel's INIT (never on a file before it has a DSP process, so a file that fails its INIT
//! never held one), and again on the channel each recovery opens (the old file's release removed
//! the old request). Linux's upstream `fastrpc.c` (the upstream boards) has no such request:
//! there the vote is [`PmQosState::NotAvailable`], and nothing is sent.
//!
//! A vote the kernel refuses (a device tree without the latency: the driver's -1) does not fail
//! the session: it is logged and reported by [`Session::pm_qos`](crate::Session::pm_qos).

use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::{adsprpc, Errno, Fd, Syscalls};

/// Whether a session asks the kernel to bound the CPU's wake-up latency while it waits for the
/// DSP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PmQosVote {
    /// Send nothing: the kernel's default, CPU idle states unconstrained (lowest power, highest
    /// and least predictable round-trip latency).
    Off,
    /// Ask for the board's latency (`FASTRPC_CONTROL_LATENCY`, enable 1) on every channel, the
    /// default: what a real-time service (a 20 Hz camera model) wants.
    #[default]
    Board,
}

/// A session's latency policy ([`Session::start_with`](crate::Session::start_with)). The default,
/// [`LatencyPolicy::REALTIME`], is what a 20 Hz real-time service wants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LatencyPolicy {
    pm_qos: PmQosVote,
}

impl LatencyPolicy {
    /// The PM-QoS vote on every channel.
    pub const REALTIME: LatencyPolicy = LatencyPolicy { pm_qos: PmQosVote::Board };
    /// No vote: the kernel's defaults (a batch job that does not care about latency).
    pub const RELAXED: LatencyPolicy = LatencyPolicy { pm_qos: PmQosVote::Off };

    /// This policy with the PM-QoS vote `vote`.
    pub const fn with_pm_qos(self, vote: PmQosVote) -> LatencyPolicy {
        LatencyPolicy { pm_qos: vote }
    }

    /// The PM-QoS vote.
    pub const fn pm_qos(&self) -> PmQosVote {
        self.pm_qos
    }
}

/// What became of the PM-QoS vote on a session's current channel ([`Session::pm_qos`](crate::Session::pm_qos)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PmQosState {
    /// The policy asks for no vote.
    NotAsked,
    /// The kernel took the vote on this channel.
    Sent,
    /// The board's driver has no such request (upstream `fastrpc.c`).
    NotAvailable,
    /// The kernel refused the vote (on the comma three: no `qcom,rpc-latency-us` in the device
    /// tree), with its errno.
    Refused(Errno),
}

impl PmQosState {
    /// Packs the state in a word (for an atomic).
    pub(crate) fn pack(self) -> u32 {
        match self {
            PmQosState::NotAsked => 0,
            PmQosState::Sent => 1,
            PmQosState::NotAvailable => 2,
            PmQosState::Refused(e) => 3 | ((e.0 as u32) << 8),
        }
    }

    /// The inverse of [`PmQosState::pack`].
    pub(crate) fn unpack(w: u32) -> PmQosState {
        match w & 0xff {
            0 => PmQosState::NotAsked,
            1 => PmQosState::Sent,
            2 => PmQosState::NotAvailable,
            _ => PmQosState::Refused(Errno((w >> 8) as i32)),
        }
    }
}

impl core::fmt::Display for PmQosState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PmQosState::NotAsked => f.write_str("not asked (policy off)"),
            PmQosState::Sent => f.write_str("sent (the board's CPU-DMA latency while waiting for the DSP)"),
            PmQosState::NotAvailable => f.write_str("not available on this board's driver"),
            PmQosState::Refused(e) => write!(f, "refused by the kernel ({e})"),
        }
    }
}

/// Sends `vote` on `rpc`, a channel whose INIT has returned 0. Never fails the caller: a refusal
/// is logged and returned as the state.
pub(crate) fn vote<S: Syscalls + ?Sized>(sys: &S, board: &Board, rpc: Fd, vote: PmQosVote) -> PmQosState {
    if vote == PmQosVote::Off {
        return PmQosState::NotAsked;
    }
    match board.abi {
        KernelAbi::Upstream => PmQosState::NotAvailable,
        KernelAbi::DownstreamMsm => match adsprpc::control_latency(sys, rpc, true) {
            Ok(()) => PmQosState::Sent,
            Err(e) => {
                let errno = e.errno();
                log::warn!(
                    "the kernel refused the PM-QoS vote (FASTRPC_CONTROL_LATENCY) on FastRPC fd {}: {e}; calls to the DSP may pay \
                     the CPU's deep-idle wake-up",
                    rpc.0
                );
                PmQosState::Refused(errno)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_survives_its_packing() {
        for s in [PmQosState::NotAsked, PmQosState::Sent, PmQosState::NotAvailable, PmQosState::Refused(Errno::EPERM)] {
            assert_eq!(PmQosState::unpack(s.pack()), s);
        }
    }
}
