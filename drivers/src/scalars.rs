use core::fmt;

/// The scalars word (`sc`) of a FastRPC call: which method, and how many arguments of each kind.
///
/// | bits | field |
/// |---|---|
/// | 31..29 | method attributes (3 bits) |
/// | 28..24 | method index (5 bits) |
/// | 23..16 | input buffers (8 bits) |
/// | 15..8 | output buffers (8 bits) |
/// | 7..4 | input handles (4 bits) |
/// | 3..0 | output handles (4 bits) |
///
/// The `remote_arg` array of a call has [`length`](Scalars::length) entries, in the order
/// input buffers, output buffers, input handles, output handles.
///
/// # The low-byte quirk
///
/// tinygrad builds its kernel call as `method << 24 | ins << 16 | outs << 8 | nfds`, OR-ing the
/// number of buffer fds into the whole low byte. For `nfds <= 15` that lands in the
/// *output-handles* nibble; `nfds = 16` would read as one *input* handle and zero output handles,
/// so the call would carry 15 fewer entries than meant. That is why a launch has at most 15
/// buffers. [`Scalars::new`] refuses counts that do not fit their field;
/// [`Scalars::from_raw`] keeps any word as is, so the quirk can be reproduced and tested.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Scalars(u32);

impl Scalars {
    /// Largest method index (5 bits); method 31 is the "extended" escape of apps_std.
    pub const MAX_METHOD: u8 = 31;
    /// Largest number of input or output buffers (8 bits).
    pub const MAX_BUFS: u8 = 255;
    /// Largest number of input or output handles (4 bits).
    pub const MAX_HANDLES: u8 = 15;

    /// `REMOTE_SCALARS_MAKEX(attr, method, in, out, in_handles, out_handles)`; `None` if a count
    /// does not fit its field.
    pub const fn new_with_attr(attr: u8, method: u8, inbufs: u8, outbufs: u8, inhandles: u8, outhandles: u8) -> Option<Scalars> {
        if attr > 7 || method > Self::MAX_METHOD || inhandles > Self::MAX_HANDLES || outhandles > Self::MAX_HANDLES {
            return None;
        }
        Some(Scalars(
            ((attr as u32) << 29)
                | ((method as u32) << 24)
                | ((inbufs as u32) << 16)
                | ((outbufs as u32) << 8)
                | ((inhandles as u32) << 4)
                | outhandles as u32,
        ))
    }

    /// `REMOTE_SCALARS_MAKE(method, in, out)` with handle counts; `None` if a count does not fit.
    pub const fn new(method: u8, inbufs: u8, outbufs: u8, inhandles: u8, outhandles: u8) -> Option<Scalars> {
        Self::new_with_attr(0, method, inbufs, outbufs, inhandles, outhandles)
    }

    /// Any raw word, as received (from the DSP, from a file, from tinygrad's encoding).
    pub const fn from_raw(raw: u32) -> Scalars {
        Scalars(raw)
    }

    /// tinygrad's `rpc_sc(method, ins, outs, fds)`: the fd count is OR-ed into the low byte
    /// unmasked (see the type-level docs for what that does at 16).
    pub const fn tinygrad(method: u32, ins: u32, outs: u32, fds: u32) -> Scalars {
        Scalars((method << 24) | (ins << 16) | (outs << 8) | fds)
    }

    /// The raw word.
    pub const fn raw(self) -> u32 {
        self.0
    }
    /// `REMOTE_SCALARS_METHOD_ATTR`.
    pub const fn attr(self) -> u8 {
        ((self.0 >> 29) & 0x7) as u8
    }
    /// `REMOTE_SCALARS_METHOD`.
    pub const fn method(self) -> u8 {
        ((self.0 >> 24) & 0x1f) as u8
    }
    /// `REMOTE_SCALARS_INBUFS`.
    pub const fn inbufs(self) -> u8 {
        ((self.0 >> 16) & 0xff) as u8
    }
    /// `REMOTE_SCALARS_OUTBUFS`.
    pub const fn outbufs(self) -> u8 {
        ((self.0 >> 8) & 0xff) as u8
    }
    /// `REMOTE_SCALARS_INHANDLES`.
    pub const fn inhandles(self) -> u8 {
        ((self.0 >> 4) & 0xf) as u8
    }
    /// `REMOTE_SCALARS_OUTHANDLES`.
    pub const fn outhandles(self) -> u8 {
        (self.0 & 0xf) as u8
    }
    /// Input plus output buffers.
    pub const fn buffers(self) -> usize {
        self.inbufs() as usize + self.outbufs() as usize
    }
    /// Input plus output handles.
    pub const fn handles(self) -> usize {
        self.inhandles() as usize + self.outhandles() as usize
    }
    /// `REMOTE_SCALARS_LENGTH`: the number of `remote_arg` entries (at most 540).
    pub const fn length(self) -> usize {
        self.buffers() + self.handles()
    }
}

impl fmt::Debug for Scalars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Scalars({:#010x}: attr {} method {} in {} out {} in-handles {} out-handles {})",
            self.0,
            self.attr(),
            self.method(),
            self.inbufs(),
            self.outbufs(),
            self.inhandles(),
            self.outhandles()
        )
    }
}

impl fmt::Display for Scalars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_words() {
        // next2 of adsp_listener: method 4, 2 in, 2 out.
        assert_eq!(Scalars::new(4, 2, 2, 0, 0).unwrap().raw(), 0x0402_0200);
        // remotectl open: method 0, 2 in, 2 out; close: method 1, 1 in, 2 out.
        assert_eq!(Scalars::new(0, 2, 2, 0, 0).unwrap().raw(), 0x0002_0200);
        assert_eq!(Scalars::new(1, 1, 2, 0, 0).unwrap().raw(), 0x0101_0200);
        // apps_std stat (extended method 31): 2 in, 1 out.
        assert_eq!(Scalars::new(31, 2, 1, 0, 0).unwrap().raw(), 0x1F02_0100);
        let sc = Scalars::from_raw(0x0202_0104);
        assert_eq!((sc.method(), sc.inbufs(), sc.outbufs(), sc.inhandles(), sc.outhandles()), (2, 2, 1, 0, 4));
        assert_eq!(sc.length(), 7);
    }

    #[test]
    fn fields_round_trip_and_limits() {
        for m in 0..=31u8 {
            for (i, o, ih, oh) in [(0, 0, 0, 0), (255, 255, 15, 15), (3, 1, 2, 9)] {
                let sc = Scalars::new_with_attr(5, m, i, o, ih, oh).unwrap();
                assert_eq!((sc.attr(), sc.method(), sc.inbufs(), sc.outbufs(), sc.inhandles(), sc.outhandles()), (5, m, i, o, ih, oh));
            }
        }
        assert_eq!(Scalars::new(0, 255, 255, 15, 15).unwrap().length(), 540);
        assert!(Scalars::new(32, 0, 0, 0, 0).is_none());
        assert!(Scalars::new(0, 0, 0, 16, 0).is_none());
        assert!(Scalars::new(0, 0, 0, 0, 16).is_none());
        assert!(Scalars::new_with_attr(8, 0, 0, 0, 0, 0).is_none());
    }

    #[test]
    fn tinygrad_low_byte_quirk() {
        // Up to 15 buffer fds land in the out-handles nibble, as intended.
        for n in 0..=15 {
            let sc = Scalars::tinygrad(2, 2, 1, n);
            assert_eq!(sc, Scalars::new(2, 2, 1, 0, n as u8).unwrap());
            assert_eq!(sc.length(), 3 + n as usize);
        }
        // 16 spills into the in-handles nibble: one in-handle, zero out-handles.
        let sc = Scalars::tinygrad(2, 2, 1, 16);
        assert_eq!((sc.inhandles(), sc.outhandles()), (1, 0));
        assert_eq!(sc.length(), 4, "16 fds describe only 4 entries: 15 are lost");
    }
}
