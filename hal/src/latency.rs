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
//! **The DSP's clock vote.** [`DspPower`] names the DSP-side request (`HAP_power_set`) a library's
//! entry makes for the session: the host does not make it, the DSP process does, so it travels to
//! each library whose entry carries the power method (its build record says so) right after the
//! library is opened, and again after each recovery reopens it ([`LibrarySetup`]). The values of
//! each level are the runtime's (`hexrpc_runtime::launch::PowerVote`).
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

/// The DSP's clock and DCVS vote (`HAP_power_set`, DCVS v2), as named levels. What each level
/// asks for is the runtime's table (`hexrpc_runtime::launch::PowerVote::for_level`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DspPower {
    /// No vote: the DSP's own DCVS decides (clocks drop between frames; the first kernels of
    /// each frame pay the ramp-up).
    Off,
    /// A clock floor: DCVS stays on above the nominal corner, the DSP's wake-up latency is
    /// bounded to 1,000 µs, sleep is allowed. The default: a 20 Hz model keeps a predictable
    /// frame time without holding the top clock between frames.
    #[default]
    Sustained,
    /// The top corner, DCVS off, a 100 µs wake-up latency (tinygrad's request): the lowest
    /// latency, the most power and heat; for bursts, not for a service that runs all day.
    Burst,
}

impl DspPower {
    /// The level's name as the CLI and the docs spell it.
    pub const fn name(self) -> &'static str {
        match self {
            DspPower::Off => "off",
            DspPower::Sustained => "sustained",
            DspPower::Burst => "burst",
        }
    }

    /// The level named `name` ([`DspPower::name`]).
    pub fn from_name(name: &str) -> Option<DspPower> {
        [DspPower::Off, DspPower::Sustained, DspPower::Burst].into_iter().find(|l| l.name() == name)
    }
}

/// A session's latency policy ([`Session::start_with`](crate::Session::start_with)). The default,
/// [`LatencyPolicy::REALTIME`], is what a 20 Hz real-time service wants: the PM-QoS vote and the
/// sustained DSP clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LatencyPolicy {
    pm_qos: PmQosVote,
    dsp_power: DspPower,
}

impl Default for LatencyPolicy {
    fn default() -> Self {
        LatencyPolicy::REALTIME
    }
}

impl LatencyPolicy {
    /// The PM-QoS vote on every channel and [`DspPower::Sustained`].
    pub const REALTIME: LatencyPolicy = LatencyPolicy { pm_qos: PmQosVote::Board, dsp_power: DspPower::Sustained };
    /// No vote at all: the kernel's and the DSP's defaults (a batch job that does not care about
    /// latency).
    pub const RELAXED: LatencyPolicy = LatencyPolicy { pm_qos: PmQosVote::Off, dsp_power: DspPower::Off };

    /// This policy with the PM-QoS vote `vote`.
    pub const fn with_pm_qos(self, vote: PmQosVote) -> LatencyPolicy {
        LatencyPolicy { pm_qos: vote, ..self }
    }

    /// This policy with the DSP clock vote `level`.
    pub const fn with_dsp_power(self, level: DspPower) -> LatencyPolicy {
        LatencyPolicy { dsp_power: level, ..self }
    }

    /// The PM-QoS vote.
    pub const fn pm_qos(&self) -> PmQosVote {
        self.pm_qos
    }

    /// The DSP clock vote.
    pub const fn dsp_power(&self) -> DspPower {
        self.dsp_power
    }
}

/// Most bytes of a [`LibrarySetup`] call's input.
pub const MAX_SETUP_BYTES: usize = 64;

/// One call a library gets right after it is opened, and again each time a recovery reopens it
/// (the DSP process that took the first is gone): a method of the library's entry with one
/// in-buffer of at most [`MAX_SETUP_BYTES`]. The runtime uses it for the DSP clock vote. Its
/// failure is logged, counted ([`Session::setup_failures`](crate::Session::setup_failures)) and
/// never fails the open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LibrarySetup {
    method: u8,
    len: u8,
    bytes: [u8; MAX_SETUP_BYTES],
}

impl LibrarySetup {
    /// Method `method` with `input` as its in-buffer; `None` if the input is longer than
    /// [`MAX_SETUP_BYTES`].
    pub fn new(method: u8, input: &[u8]) -> Option<LibrarySetup> {
        let mut bytes = [0u8; MAX_SETUP_BYTES];
        bytes.get_mut(..input.len())?.copy_from_slice(input);
        Some(LibrarySetup { method, len: input.len() as u8, bytes })
    }

    /// The method.
    pub fn method(&self) -> u8 {
        self.method
    }

    /// The input.
    pub fn input(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
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
    fn a_setup_longer_than_its_capacity_is_refused() {
        assert!(LibrarySetup::new(6, &[0; MAX_SETUP_BYTES + 1]).is_none());
        let s = LibrarySetup::new(6, &[1, 2, 3]).unwrap();
        assert_eq!((s.method(), s.input()), (6, &[1u8, 2, 3][..]));
    }

    #[test]
    fn every_level_is_found_by_its_name() {
        for l in [DspPower::Off, DspPower::Sustained, DspPower::Burst] {
            assert_eq!(DspPower::from_name(l.name()), Some(l));
        }
        assert_eq!(DspPower::from_name("turbo"), None);
    }

    #[test]
    fn a_state_survives_its_packing() {
        for s in [PmQosState::NotAsked, PmQosState::Sent, PmQosState::NotAvailable, PmQosState::Refused(Errno::EPERM)] {
            assert_eq!(PmQosState::unpack(s.pack()), s);
        }
    }
}
