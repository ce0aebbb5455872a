//! Reverse-RPC payload packing (reverse-rpc.md 2.3 and 2.4), written from the spec for the bench.
//!
//! * A **request** (DSP to host, the second output of `next2`) holds, for each input buffer, a
//!   `u32` length and, if the length is non-zero, padding to an 8-byte offset followed by the
//!   data; then one `u32` per output buffer: the length the DSP wants back (no alignment, no data).
//! * A **reply** (host to DSP, the second input of the next `next2`) holds, for each output
//!   buffer, a `u32` length and, if non-zero, padding to 8 then the data.
//!
//! Alignment is relative to the start of the payload. The bench's DSP side uses
//! [`pack_request`] and [`unpack_reply`]; [`unpack_request`] and [`pack_reply`] are the host side,
//! offered so that tests can write a listener loop (and as an independent cross-check of the
//! runtime's reverse service).

/// What is wrong with a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The payload ends before the field at this offset.
    Truncated(usize),
    /// Output buffer `index` came back with `got` bytes where `want` were asked for.
    LengthMismatch {
        /// Which output buffer.
        index: usize,
        /// The length the reply carries.
        got: u32,
        /// The length that was requested.
        want: u32,
    },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Truncated(at) => write!(f, "payload ends before the field at offset {at}"),
            WireError::LengthMismatch { index, got, want } => write!(f, "output buffer {index}: {got} bytes, {want} asked for"),
        }
    }
}

impl std::error::Error for WireError {}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Packs a request: input buffers with 8-byte-aligned data, then the output lengths.
pub fn pack_request(ins: &[&[u8]], out_lens: &[u32]) -> Vec<u8> {
    let mut v = Vec::new();
    for b in ins {
        v.extend_from_slice(&(b.len() as u32).to_le_bytes());
        if !b.is_empty() {
            v.resize(align8(v.len()), 0);
            v.extend_from_slice(b);
        }
    }
    for l in out_lens {
        v.extend_from_slice(&l.to_le_bytes());
    }
    v
}

fn read_u32(p: &[u8], at: usize) -> Result<u32, WireError> {
    match p.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(WireError::Truncated(at)),
    }
}

/// Unpacks a request into its input buffers and output lengths, refusing anything that does not
/// fit the payload.
pub fn unpack_request(payload: &[u8], n_in: usize, n_out: usize) -> Result<(Vec<Vec<u8>>, Vec<u32>), WireError> {
    let mut at = 0usize;
    let mut ins = Vec::with_capacity(n_in);
    for _ in 0..n_in {
        let len = read_u32(payload, at)? as usize;
        at += 4;
        if len != 0 {
            at = align8(at);
            let end = at.checked_add(len).ok_or(WireError::Truncated(at))?;
            let data = payload.get(at..end).ok_or(WireError::Truncated(at))?;
            ins.push(data.to_vec());
            at = end;
        } else {
            ins.push(Vec::new());
        }
    }
    let mut outs = Vec::with_capacity(n_out);
    for _ in 0..n_out {
        outs.push(read_u32(payload, at)?);
        at += 4;
    }
    Ok((ins, outs))
}

/// Packs a reply: each output buffer with its length and 8-byte-aligned data.
pub fn pack_reply(outs: &[&[u8]]) -> Vec<u8> {
    pack_request(outs, &[])
}

/// Unpacks a reply, checking that every output buffer has exactly the requested length (the DSP
/// side VERIFYs this).
pub fn unpack_reply(reply: &[u8], out_lens: &[u32]) -> Result<Vec<Vec<u8>>, WireError> {
    let (outs, _) = unpack_request(reply, out_lens.len(), 0)?;
    for (i, (o, want)) in outs.iter().zip(out_lens).enumerate() {
        if o.len() as u32 != *want {
            return Err(WireError::LengthMismatch { index: i, got: o.len() as u32, want: *want });
        }
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_is_relative_and_skips_empty_padding() {
        let p = pack_request(&[b"abc", b"", b"xy"], &[8, 96]);
        // len 3 @0, pad to 8, "abc" @8..11, len 0 @11, len 2 @15, pad to 24, "xy" @24..26,
        // out lens @26 and @30.
        assert_eq!(&p[0..4], &3u32.to_le_bytes());
        assert_eq!(&p[8..11], b"abc");
        assert_eq!(&p[11..15], &0u32.to_le_bytes());
        assert_eq!(&p[15..19], &2u32.to_le_bytes());
        assert_eq!(&p[24..26], b"xy");
        assert_eq!(&p[26..30], &8u32.to_le_bytes());
        assert_eq!(&p[30..34], &96u32.to_le_bytes());
        assert_eq!(p.len(), 34);
        let (ins, outs) = unpack_request(&p, 3, 2).unwrap();
        assert_eq!(ins, vec![b"abc".to_vec(), vec![], b"xy".to_vec()]);
        assert_eq!(outs, vec![8, 96]);
        assert_eq!(unpack_request(&p[..20], 3, 2), Err(WireError::Truncated(24)));
    }

    #[test]
    fn reply_lengths_are_verified() {
        let r = pack_reply(&[&[1, 2, 3, 4], &[9; 10]]);
        assert_eq!(unpack_reply(&r, &[4, 10]).unwrap(), vec![vec![1, 2, 3, 4], vec![9; 10]]);
        assert_eq!(unpack_reply(&r, &[4, 11]), Err(WireError::LengthMismatch { index: 1, got: 10, want: 11 }));
        assert!(unpack_reply(&r[..5], &[4, 10]).is_err());
    }
}
