//! The DSP clock vote a session's libraries make ([`PowerVote`]), from the session's named
//! level ([`DspPower`]).
//!
//! The request is `HAP_power_set` with a DCVS v2 payload, laid out as this project understands
//! the SDK's `HAP_power_request_t` (the same caveat as [`PowerRequest`](super::PowerRequest): the
//! layout and the corner numbers could not be checked against the SDK header here; the corners
//! used are 4, nominal, and 6, turbo, the value tinygrad sends). On the bench the DSP shell
//! records each request it is given; no clock changes anywhere here.

use hexrpc_hal::{DspPower, LibrarySetup};

use super::abi::{POWER_METHOD, POWER_VOTE_BYTES};

/// `HAP_power_set`'s DCVS v2 request type.
const DCVS_V2: u32 = 7;
/// The nominal voltage corner.
const CORNER_NOM: u32 = 4;
/// The turbo voltage corner (tinygrad's target).
const CORNER_TURBO: u32 = 6;

/// One DSP clock vote: the fields of the DCVS v2 request, and the level it stands for. On the
/// wire (the power method's in-buffer) 12 little-endian u32 words in field order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerVote {
    /// Request type (DCVS v2 = 7).
    pub request_type: u32,
    /// `dcvs_enable`: the DSP's own DCVS may move the clock (within the corners).
    pub dcvs_enable: u32,
    /// `dcvs_option` (0: adjust up and down).
    pub dcvs_option: u32,
    /// `set_latency`.
    pub set_latency: u32,
    /// `latency`: the DSP's wake-up latency bound in microseconds.
    pub latency_us: u32,
    /// `set_dcvs_params`.
    pub set_dcvs_params: u32,
    /// `dcvs_params.target_corner`.
    pub target_corner: u32,
    /// `dcvs_params.min_corner`.
    pub min_corner: u32,
    /// `dcvs_params.max_corner`.
    pub max_corner: u32,
    /// `set_sleep_disable`.
    pub set_sleep_disable: u32,
    /// `sleep_disable`.
    pub sleep_disable: u32,
    /// The [`DspPower`] level (1 sustained, 2 burst): not part of the request, it names it for
    /// whoever reads the vote back.
    pub level: u32,
}

impl PowerVote {
    /// The vote of `level`; `None` for [`DspPower::Off`] (no vote is sent).
    ///
    /// | level | DCVS | corners (min / target / max) | wake-up latency | sleep |
    /// |---|---|---|---|---|
    /// | sustained | on | nominal / nominal / turbo | 1,000 µs | allowed |
    /// | burst | off | turbo / turbo / turbo | 100 µs | disabled |
    pub const fn for_level(level: DspPower) -> Option<PowerVote> {
        match level {
            DspPower::Off => None,
            DspPower::Sustained => Some(PowerVote {
                request_type: DCVS_V2,
                dcvs_enable: 1,
                dcvs_option: 0,
                set_latency: 1,
                latency_us: 1000,
                set_dcvs_params: 1,
                target_corner: CORNER_NOM,
                min_corner: CORNER_NOM,
                max_corner: CORNER_TURBO,
                set_sleep_disable: 0,
                sleep_disable: 0,
                level: 1,
            }),
            DspPower::Burst => Some(PowerVote {
                request_type: DCVS_V2,
                dcvs_enable: 0,
                dcvs_option: 0,
                set_latency: 1,
                latency_us: 100,
                set_dcvs_params: 1,
                target_corner: CORNER_TURBO,
                min_corner: CORNER_TURBO,
                max_corner: CORNER_TURBO,
                set_sleep_disable: 1,
                sleep_disable: 1,
                level: 2,
            }),
        }
    }

    /// The level this vote names, if it is one of [`PowerVote::for_level`]'s.
    pub fn named_level(&self) -> Option<DspPower> {
        [DspPower::Sustained, DspPower::Burst].into_iter().find(|l| PowerVote::for_level(*l) == Some(*self))
    }

    fn words(&self) -> [u32; POWER_VOTE_BYTES / 4] {
        [
            self.request_type,
            self.dcvs_enable,
            self.dcvs_option,
            self.set_latency,
            self.latency_us,
            self.set_dcvs_params,
            self.target_corner,
            self.min_corner,
            self.max_corner,
            self.set_sleep_disable,
            self.sleep_disable,
            self.level,
        ]
    }

    /// The power method's in-buffer.
    pub fn to_bytes(&self) -> [u8; POWER_VOTE_BYTES] {
        let mut b = [0u8; POWER_VOTE_BYTES];
        for (chunk, w) in b.chunks_exact_mut(4).zip(self.words()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The vote an in-buffer holds (at least [`POWER_VOTE_BYTES`]); `None` if it is shorter.
    pub fn from_bytes(b: &[u8]) -> Option<PowerVote> {
        let b = b.get(..POWER_VOTE_BYTES)?;
        let w = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        Some(PowerVote {
            request_type: w(0),
            dcvs_enable: w(1),
            dcvs_option: w(2),
            set_latency: w(3),
            latency_us: w(4),
            set_dcvs_params: w(5),
            target_corner: w(6),
            min_corner: w(7),
            max_corner: w(8),
            set_sleep_disable: w(9),
            sleep_disable: w(10),
            level: w(11),
        })
    }

    /// The library setup call that makes this vote ([`hexrpc_hal::LibrarySetup`]).
    pub fn setup(&self) -> LibrarySetup {
        match LibrarySetup::new(POWER_METHOD, &self.to_bytes()) {
            Some(s) => s,
            // POWER_VOTE_BYTES <= MAX_SETUP_BYTES is asserted in the ABI table.
            None => unreachable!("a power vote fits a setup call"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_survives_the_wire_and_is_named_back() {
        for level in [DspPower::Sustained, DspPower::Burst] {
            let v = PowerVote::for_level(level).unwrap();
            assert_eq!(PowerVote::from_bytes(&v.to_bytes()), Some(v));
            assert_eq!(v.named_level(), Some(level));
            assert_eq!(v.setup().method(), POWER_METHOD);
        }
        assert_eq!(PowerVote::for_level(DspPower::Off), None);
        assert_eq!(PowerVote::from_bytes(&[0; POWER_VOTE_BYTES - 1]), None);
    }

    #[test]
    fn the_levels_ask_for_what_their_names_say() {
        let (s, b) = (PowerVote::for_level(DspPower::Sustained).unwrap(), PowerVote::for_level(DspPower::Burst).unwrap());
        assert!(s.dcvs_enable == 1 && b.dcvs_enable == 0);
        assert!(s.min_corner < b.min_corner && b.min_corner == b.max_corner);
        assert!(b.latency_us < s.latency_us && b.sleep_disable == 1 && s.sleep_disable == 0);
    }
}
