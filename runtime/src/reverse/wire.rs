//! The reverse-RPC payload formats (reverse-rpc.md 2.3 and 2.4): request parsing and reply
//! packing, both allocation-free and bounds-checked field by field.
//!
//! A request payload (DSP to host) is, for each input buffer, a u32 length then (if the length is
//! not zero) padding to the next multiple of 8 *relative to the payload start* and the data;
//! then one u32 per output buffer with the length the DSP expects back. A reply payload (host to
//! DSP) is, for each output buffer, a u32 length then (if not zero) padding to 8 and the data.
//!
//! The bytes come from a buffer the kernel copied the DSP's data into, so they cannot change
//! while we parse them; still, every offset is re-checked right before it is used to slice.

use hexrpc_drivers::Scalars;

use super::RequestError;

/// Most input buffers a request may carry (the largest apps_std shape has 5).
pub const MAX_IN_BUFS: usize = 8;
/// Most output buffers a request may carry (the largest served shape has 2).
pub const MAX_OUT_BUFS: usize = 8;

const fn align8(x: usize) -> Option<usize> {
    match x.checked_add(7) {
        Some(v) => Some(v & !7),
        None => None,
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let end = at.checked_add(4)?;
    let b: [u8; 4] = bytes.get(at..end)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// A parsed request payload: where each input buffer is and how long each output must be.
///
/// Built only by [`Request::parse`], so every recorded range lies inside the payload.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    sc: Scalars,
    payload: &'a [u8],
    ins: [(u32, u32); MAX_IN_BUFS],
    n_in: u8,
    outs: [u32; MAX_OUT_BUFS],
    n_out: u8,
    consumed: u32,
}

impl<'a> Request<'a> {
    /// Parses `payload` (exactly the bytes received) against the counts of `sc`.
    ///
    /// Refuses with [`RequestError::BadParm`] if `sc` carries handles, has more buffers than
    /// [`MAX_IN_BUFS`] / [`MAX_OUT_BUFS`], or if any length word, padding or data runs past the
    /// received bytes. Zero-length input buffers take no padding. Bytes after the last output
    /// length are ignored (the producer never writes any; they are not interpreted).
    pub fn parse(sc: Scalars, payload: &'a [u8]) -> Result<Self, RequestError> {
        if sc.handles() != 0 {
            return Err(RequestError::BadParm);
        }
        let (n_in, n_out) = (sc.inbufs() as usize, sc.outbufs() as usize);
        if n_in > MAX_IN_BUFS || n_out > MAX_OUT_BUFS {
            return Err(RequestError::BadParm);
        }
        if u32::try_from(payload.len()).is_err() {
            return Err(RequestError::BadSize);
        }
        let mut req =
            Request { sc, payload, ins: [(0, 0); MAX_IN_BUFS], n_in: n_in as u8, outs: [0; MAX_OUT_BUFS], n_out: n_out as u8, consumed: 0 };
        let mut at = 0usize;
        for slot in req.ins.iter_mut().take(n_in) {
            let len = read_u32(payload, at).ok_or(RequestError::BadParm)?;
            at += 4;
            if len != 0 {
                at = align8(at).ok_or(RequestError::BadParm)?;
                let end = at.checked_add(len as usize).ok_or(RequestError::BadParm)?;
                if end > payload.len() {
                    return Err(RequestError::BadParm);
                }
                // `at` and `end` are within the payload, whose length fits a u32 (checked above).
                *slot = (at as u32, len);
                at = end;
            } else {
                *slot = (at.min(payload.len()) as u32, 0);
            }
        }
        for slot in req.outs.iter_mut().take(n_out) {
            *slot = read_u32(payload, at).ok_or(RequestError::BadParm)?;
            at += 4;
        }
        req.consumed = at as u32;
        Ok(req)
    }

    /// The scalars word.
    pub fn scalars(&self) -> Scalars {
        self.sc
    }

    /// Number of input buffers.
    pub fn in_count(&self) -> usize {
        self.n_in as usize
    }

    /// Number of output buffers.
    pub fn out_count(&self) -> usize {
        self.n_out as usize
    }

    /// Input buffer `i`, or `None` past the count.
    pub fn input(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.in_count() {
            return None;
        }
        let (off, len) = self.ins[i];
        let start = off as usize;
        // Re-checked here although `parse` already did: the slice is the only access.
        self.payload.get(start..start.checked_add(len as usize)?)
    }

    /// The length the DSP expects for output buffer `j`, or `None` past the count.
    pub fn out_len(&self, j: usize) -> Option<u32> {
        if j >= self.out_count() {
            return None;
        }
        Some(self.outs[j])
    }

    /// The output lengths.
    pub fn out_lens(&self) -> &[u32] {
        &self.outs[..self.out_count()]
    }

    /// Bytes of the payload the layout described (trailing bytes beyond are ignored).
    pub fn consumed(&self) -> usize {
        self.consumed as usize
    }
}

/// The packed size of a reply with these output lengths, or `None` on overflow.
pub fn reply_size(out_lens: &[u32]) -> Option<usize> {
    let mut at = 0usize;
    for &len in out_lens {
        at = at.checked_add(4)?;
        if len != 0 {
            at = align8(at)?.checked_add(len as usize)?;
        }
    }
    Some(at)
}

/// A reply being packed in place into a fixed buffer: the length words and padding are written
/// when it is laid out, each output's data region is handed to the handler, and every byte of
/// the reply that the handler did not write is zero (no stale data from earlier requests).
pub struct Reply<'r> {
    buf: &'r mut [u8],
    slots: [(u32, u32); MAX_OUT_BUFS],
    n: u8,
    claimed: u16,
    total: u32,
}

impl<'r> Reply<'r> {
    /// Lays out a reply for `out_lens` in `buf`. Refuses with [`RequestError::BadSize`] if it does
    /// not fit, and [`RequestError::BadParm`] for more than [`MAX_OUT_BUFS`] outputs.
    pub fn layout(out_lens: &[u32], buf: &'r mut [u8]) -> Result<Self, RequestError> {
        if out_lens.len() > MAX_OUT_BUFS {
            return Err(RequestError::BadParm);
        }
        let total = reply_size(out_lens).ok_or(RequestError::BadSize)?;
        if total > buf.len() || u32::try_from(total).is_err() {
            return Err(RequestError::BadSize);
        }
        let mut slots = [(0u32, 0u32); MAX_OUT_BUFS];
        let mut at = 0usize;
        for (slot, &len) in slots.iter_mut().zip(out_lens) {
            let word = buf.get_mut(at..at + 4).ok_or(RequestError::BadSize)?;
            word.copy_from_slice(&len.to_le_bytes());
            at += 4;
            if len != 0 {
                let data = align8(at).ok_or(RequestError::BadSize)?;
                buf.get_mut(at..data).ok_or(RequestError::BadSize)?.fill(0);
                at = data;
            }
            *slot = (at as u32, len);
            at += len as usize;
        }
        Ok(Reply { buf, slots, n: out_lens.len() as u8, claimed: 0, total: total as u32 })
    }

    /// Number of outputs.
    pub fn count(&self) -> usize {
        self.n as usize
    }

    /// The length of output `j`, or `None` past the count.
    pub fn out_len(&self, j: usize) -> Option<usize> {
        (j < self.count()).then(|| self.slots[j].1 as usize)
    }

    /// Fills output `j`: `f` receives the output's region and returns how many bytes it wrote
    /// from the start; the rest of the region is zeroed. Returns that count (clamped to the
    /// region), or `None` if `j` is past the count.
    pub fn fill<F: FnOnce(&mut [u8]) -> usize>(&mut self, j: usize, f: F) -> Option<usize> {
        if j >= self.count() {
            return None;
        }
        let (off, len) = self.slots[j];
        let start = off as usize;
        let region = self.buf.get_mut(start..start.checked_add(len as usize)?)?;
        let n = f(region).min(region.len());
        region[n..].fill(0);
        self.claimed |= 1 << j;
        Some(n)
    }

    /// Writes `bytes` at the start of output `j` (truncated to its length), zeroing the rest.
    pub fn write(&mut self, j: usize, bytes: &[u8]) -> Option<usize> {
        self.fill(j, |region| {
            let n = bytes.len().min(region.len());
            region[..n].copy_from_slice(&bytes[..n]);
            n
        })
    }

    /// Zeroes every output no handler claimed and returns the packed length.
    pub fn finish(self) -> usize {
        for j in 0..self.count() {
            if self.claimed & (1 << j) == 0 {
                let (off, len) = self.slots[j];
                if let Some(r) = self.buf.get_mut(off as usize..off as usize + len as usize) {
                    r.fill(0);
                }
            }
        }
        self.total as usize
    }
}

/// Producer side of 2.3, for tests, the fuzz target and the replay tooling: packs `ins` and
/// `out_lens` as the DSP would. Returns the payload length, or `None` if `buf` is too small.
pub fn pack_request(ins: &[&[u8]], out_lens: &[u32], buf: &mut [u8]) -> Option<usize> {
    let mut at = 0usize;
    for data in ins {
        let len = u32::try_from(data.len()).ok()?;
        buf.get_mut(at..at.checked_add(4)?)?.copy_from_slice(&len.to_le_bytes());
        at += 4;
        if len != 0 {
            let start = align8(at)?;
            buf.get_mut(at..start)?.fill(0);
            buf.get_mut(start..start.checked_add(data.len())?)?.copy_from_slice(data);
            at = start + data.len();
        }
    }
    for &len in out_lens {
        buf.get_mut(at..at.checked_add(4)?)?.copy_from_slice(&len.to_le_bytes());
        at += 4;
    }
    Some(at)
}

/// Consumer side of 2.4 (what the DSP does with a reply), for tests and the bench: the region
/// of output `j` in `reply`, checking that its length word equals `expected[j]`.
pub fn reply_output<'b>(reply: &'b [u8], expected: &[u32], j: usize) -> Option<&'b [u8]> {
    let mut at = 0usize;
    for (k, &want) in expected.iter().enumerate() {
        let len = read_u32(reply, at)?;
        if len != want {
            return None;
        }
        at += 4;
        if len != 0 {
            at = align8(at)?;
        }
        let end = at.checked_add(len as usize)?;
        if k == j {
            return reply.get(at..end);
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(method: u8, i: u8, o: u8) -> Scalars {
        Scalars::new(method, i, o, 0, 0).unwrap()
    }

    #[test]
    fn round_trip_with_zero_length_inputs() {
        let mut buf = [0u8; 128];
        let ins: [&[u8]; 4] = [b"abc", b"", b"", b"0123456789"];
        let n = pack_request(&ins, &[8, 0, 5], &mut buf).unwrap();
        // 4 + pad 4 + 3 = 11, then two zero-length words (no padding) = 19, then 4 -> 24 (pad 1 -> data at 24), 34, then 12 bytes of out lens.
        assert_eq!(n, 46);
        let req = Request::parse(sc(1, 4, 3), &buf[..n]).unwrap();
        assert_eq!(req.input(0).unwrap(), b"abc");
        assert_eq!(req.input(1).unwrap(), b"");
        assert_eq!(req.input(2).unwrap(), b"");
        assert_eq!(req.input(3).unwrap(), b"0123456789");
        assert_eq!(req.input(4), None);
        assert_eq!(req.out_lens(), &[8, 0, 5]);
        assert_eq!(req.consumed(), n);
    }

    #[test]
    fn alignment_is_relative_to_the_payload_start() {
        // A zero-length buffer whose word ends at offset 8: the next word is at 8, not 12.
        let mut buf = [0u8; 64];
        let n = pack_request(&[b"12345678", b"", b"x"], &[], &mut buf).unwrap();
        assert_eq!(&buf[16..20], &0u32.to_le_bytes());
        assert_eq!(&buf[20..24], &1u32.to_le_bytes());
        assert_eq!(buf[24], b'x');
        assert_eq!(n, 25);
        // The same bytes parse identically from an odd address.
        let mut shifted = [0u8; 65];
        shifted[1..26].copy_from_slice(&buf[..25]);
        let req = Request::parse(sc(0, 3, 0), &shifted[1..26]).unwrap();
        assert_eq!(req.input(2).unwrap(), b"x");
    }

    #[test]
    fn lengths_past_the_received_bytes_are_refused() {
        let mut buf = [0u8; 64];
        let n = pack_request(&[b"abcdef"], &[4], &mut buf).unwrap();
        for cut in 0..n {
            assert_eq!(Request::parse(sc(0, 1, 1), &buf[..cut]).err(), Some(RequestError::BadParm), "cut {cut}");
        }
        // A length word claiming more than there is.
        buf[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Request::parse(sc(0, 1, 1), &buf[..n]).err(), Some(RequestError::BadParm));
        // More buffers than the payload holds.
        assert_eq!(Request::parse(sc(0, 2, 1), &buf[..8]).err(), Some(RequestError::BadParm));
        // Handles in the scalars word.
        assert_eq!(Request::parse(Scalars::new(0, 0, 0, 1, 0).unwrap(), &[]).err(), Some(RequestError::BadParm));
        assert_eq!(Request::parse(Scalars::new(0, 0, 0, 0, 1).unwrap(), &[]).err(), Some(RequestError::BadParm));
        // Counts over the fixed capacity.
        assert_eq!(Request::parse(sc(0, 9, 0), &[0u8; 64]).err(), Some(RequestError::BadParm));
        assert_eq!(Request::parse(sc(0, 0, 9), &[0u8; 64]).err(), Some(RequestError::BadParm));
    }

    #[test]
    fn reply_layout_zeroes_and_packs() {
        let mut buf = [0xAAu8; 64];
        let mut r = Reply::layout(&[8, 0, 3], &mut buf).unwrap();
        assert_eq!(
            r.fill(0, |b| {
                b[..2].copy_from_slice(b"hi");
                2
            }),
            Some(2)
        );
        assert_eq!(r.fill(5, |_| 0), None);
        let n = r.finish();
        // 4 + pad 4 + 8 = 16; 4 (zero-length, no pad) = 20; 4 = 24 (aligned), +3 = 27.
        assert_eq!(n, 27);
        assert_eq!(reply_output(&buf[..n], &[8, 0, 3], 0).unwrap(), b"hi\0\0\0\0\0\0");
        assert_eq!(reply_output(&buf[..n], &[8, 0, 3], 1).unwrap(), b"");
        assert_eq!(reply_output(&buf[..n], &[8, 0, 3], 2).unwrap(), b"\0\0\0", "unclaimed output is zeroed, not stale");
        assert_eq!(reply_output(&buf[..n], &[8, 0, 4], 2), None);
        let mut small = [0u8; 26];
        assert_eq!(Reply::layout(&[8, 0, 3], &mut small).err(), Some(RequestError::BadSize));
        assert!(reply_size(&[u32::MAX; 8]).is_some());
    }
}
