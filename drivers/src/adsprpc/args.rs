//! Building a call's argument list: [`ArgsError`], the per-kind counts both drivers share
//! ([`ArgCounts`]) and the fixed-capacity list of one FastRPC call ([`InvokeArgs`]).

use core::marker::PhantomData;
use core::mem::MaybeUninit;

use super::request::Request;
use super::structs::{remote_arg, remote_buf};
use crate::{Fd, Scalars};

/// Why an argument could not be added to [`InvokeArgs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ArgsError {
    /// The fixed capacity is used up.
    Full,
    /// The scalars word cannot count this many of this kind (255 buffers, 15 handles).
    TooMany,
    /// Arguments must be added in the order in-buffers, out-buffers, in-handles, out-handles.
    Order,
    /// The method index is above 31.
    Method,
    /// A handle needs a real fd (not 0, not negative).
    NoFd,
    /// A buffer range does not lie inside its mapping.
    Range,
}

impl core::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ArgsError::Full => "the argument list's fixed capacity is used up",
            ArgsError::TooMany => "the scalars word cannot count this many arguments of this kind",
            ArgsError::Order => "arguments out of order (in-buffers, out-buffers, in-handles, out-handles)",
            ArgsError::Method => "method index above 31",
            ArgsError::NoFd => "a handle argument needs a real fd",
            ArgsError::Range => "a buffer range does not lie inside its mapping",
        })
    }
}

impl core::error::Error for ArgsError {}

/// The method and the per-kind counts of an argument list under construction (both drivers'
/// `InvokeArgs`, and the HAL's driver-neutral call): the ABI order, the scalars word's limits
/// and the list's capacity are checked here, once.
#[derive(Clone, Copy, Debug)]
pub struct ArgCounts {
    method: u8,
    /// In-buffers, out-buffers, in-handles, out-handles.
    counts: [u8; 4],
}

impl ArgCounts {
    /// No argument yet, for `method` (0..=31).
    #[inline(always)]
    pub const fn new(method: u8) -> Result<Self, ArgsError> {
        if method > Scalars::MAX_METHOD {
            return Err(ArgsError::Method);
        }
        Ok(ArgCounts { method, counts: [0; 4] })
    }

    /// Counts one more argument of `kind` (0..4, the ABI order) in a list of capacity `cap` and
    /// returns its index, or why it cannot be added (then nothing is counted).
    #[inline]
    pub fn add(&mut self, kind: usize, cap: usize) -> Result<usize, ArgsError> {
        if self.counts[kind + 1..].iter().any(|&c| c != 0) {
            return Err(ArgsError::Order);
        }
        let max = if kind < 2 { Scalars::MAX_BUFS } else { Scalars::MAX_HANDLES };
        if self.counts[kind] >= max {
            return Err(ArgsError::TooMany);
        }
        let i = self.len();
        if i >= cap {
            return Err(ArgsError::Full);
        }
        self.counts[kind] += 1;
        Ok(i)
    }

    /// Checks that `n` more arguments of `kind` fit (as `n` calls of [`add`](Self::add) would)
    /// and returns the index of the first, counting nothing: [`commit`](Self::commit) counts them
    /// once they are written.
    #[inline]
    pub fn add_many(&self, kind: usize, n: usize, cap: usize) -> Result<usize, ArgsError> {
        if n == 0 {
            return Ok(self.len());
        }
        if self.counts[kind + 1..].iter().any(|&c| c != 0) {
            return Err(ArgsError::Order);
        }
        let max = if kind < 2 { Scalars::MAX_BUFS } else { Scalars::MAX_HANDLES };
        if self.counts[kind] as usize + n > max as usize {
            return Err(ArgsError::TooMany);
        }
        let i = self.len();
        if i + n > cap {
            return Err(ArgsError::Full);
        }
        Ok(i)
    }

    /// Counts `n` arguments of `kind` that [`add_many`](Self::add_many) accepted.
    #[inline]
    pub fn commit(&mut self, kind: usize, n: usize) {
        self.counts[kind] += n as u8;
    }

    /// Arguments counted (`REMOTE_SCALARS_LENGTH`).
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.iter().map(|&c| c as usize).sum()
    }

    /// True if nothing was counted.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The method index.
    #[inline]
    pub const fn method(&self) -> u8 {
        self.method
    }

    /// The scalars word.
    pub fn scalars(&self) -> Scalars {
        match Scalars::new(self.method, self.counts[0], self.counts[1], self.counts[2], self.counts[3]) {
            Some(sc) => sc,
            // Unreachable: `new` and `add` keep every count within its field.
            None => Scalars::from_raw(0),
        }
    }
}

/// The argument list of one FastRPC call, in fixed capacity: exactly the `remote_arg`, `fds` and
/// `attrs` arrays an `INVOKE*` request points at, and the counts that make the scalars word.
///
/// Buffers are borrowed for `'a`, so they outlive the ioctl that uses them: an input buffer is
/// only read by the driver, an output buffer is written back when the DSP returned 0. Arguments
/// must be added in ABI order (in-buffers, out-buffers, in-handles, out-handles); buffers carry
/// fd -1 (the driver copies them), handles carry their fd and attribute.
///
/// Entries are written as arguments are added and only the first [`len`](Self::len) are ever
/// read (by the accessors and by the driver, which reads `REMOTE_SCALARS_LENGTH(sc)` entries), so
/// the unused capacity is never initialised: an empty list costs nothing to make.
pub struct InvokeArgs<'a, const CAP: usize> {
    pra: [MaybeUninit<remote_arg>; CAP],
    fds: [MaybeUninit<i32>; CAP],
    attrs: [MaybeUninit<u32>; CAP],
    counts: ArgCounts,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a, const CAP: usize> InvokeArgs<'a, CAP> {
    /// An empty argument list for `method` (0..=31).
    #[inline(always)]
    pub fn new(method: u8) -> Result<Self, ArgsError> {
        Ok(InvokeArgs {
            pra: [const { MaybeUninit::uninit() }; CAP],
            fds: [const { MaybeUninit::uninit() }; CAP],
            attrs: [const { MaybeUninit::uninit() }; CAP],
            counts: ArgCounts::new(method)?,
            _borrow: PhantomData,
        })
    }

    /// Writes entry `i` (`i < CAP`: the index `ArgCounts::add` returned, which is also the
    /// current length, so the initialised entries stay exactly `0..len`).
    #[inline(always)]
    fn write(&mut self, i: usize, arg: remote_arg, fd: i32, attr: u32) {
        self.pra[i] = MaybeUninit::new(arg);
        self.fds[i] = MaybeUninit::new(fd);
        self.attrs[i] = MaybeUninit::new(attr);
    }

    #[inline]
    fn push(&mut self, kind: usize, arg: remote_arg, fd: i32, attr: u32) -> Result<(), ArgsError> {
        let i = self.counts.add(kind, CAP)?;
        self.write(i, arg, fd, attr);
        Ok(())
    }

    /// Adds one output handle per fd in `fds`, each at offset 0 with attribute `attr` (what a
    /// kernel launch's buffers are): [`out_handle`](Self::out_handle) in a loop, with the order
    /// and capacity checked once. On an error nothing is added.
    #[inline]
    pub fn out_handles(&mut self, fds: &[Fd], attr: u32) -> Result<&mut Self, ArgsError> {
        let first = self.counts.add_many(3, fds.len(), CAP)?;
        if fds.iter().any(|fd| fd.0 <= 0) {
            return Err(ArgsError::NoFd);
        }
        for (k, fd) in fds.iter().enumerate() {
            self.write(first + k, remote_arg::from_buf(remote_buf { pv: 0, len: 0 }), fd.0, attr);
        }
        self.counts.commit(3, fds.len());
        Ok(self)
    }

    /// Adds an input buffer (copied to the DSP).
    #[inline]
    pub fn input(&mut self, buf: &'a [u8]) -> Result<&mut Self, ArgsError> {
        let arg = remote_arg::from_buf(remote_buf { pv: buf.as_ptr() as u64, len: buf.len() as u64 });
        self.push(0, arg, -1, 0)?;
        Ok(self)
    }

    /// Adds an output buffer (copied back when the DSP returns 0).
    #[inline]
    pub fn output(&mut self, buf: &'a mut [u8]) -> Result<&mut Self, ArgsError> {
        let arg = remote_arg::from_buf(remote_buf { pv: buf.as_mut_ptr() as u64, len: buf.len() as u64 });
        self.push(1, arg, -1, 0)?;
        Ok(self)
    }

    /// Adds an input handle: a dma-buf fd the driver maps for the DSP, with `FASTRPC_ATTR_*`
    /// bits. The user-side entry is left zero, as tinygrad does (the driver reads the low 32 bits
    /// of its `pv` as the DSP-side `dma.offset`, and its `len` as `dma.len`).
    pub fn in_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.in_handle_at(fd, 0, attr)
    }

    /// Adds an output handle (see [`in_handle`](Self::in_handle)).
    pub fn out_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.out_handle_at(fd, 0, attr)
    }

    /// [`in_handle`](Self::in_handle) whose entry carries `offset` in the low 32 bits of `pv`
    /// (the DSP-side `dma.offset`); `len` stays 0.
    #[inline]
    pub fn in_handle_at(&mut self, fd: Fd, offset: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(2, remote_arg::from_buf(remote_buf { pv: u64::from(offset), len: 0 }), fd.0, attr)?;
        Ok(self)
    }

    /// [`out_handle`](Self::out_handle) with an offset (see [`in_handle_at`](Self::in_handle_at)).
    #[inline]
    pub fn out_handle_at(&mut self, fd: Fd, offset: u32, attr: u32) -> Result<&mut Self, ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(3, remote_arg::from_buf(remote_buf { pv: u64::from(offset), len: 0 }), fd.0, attr)?;
        Ok(self)
    }

    /// Number of entries (`REMOTE_SCALARS_LENGTH`).
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True if no argument was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The scalars word describing these arguments.
    pub fn scalars(&self) -> Scalars {
        self.counts.scalars()
    }

    /// The `remote_arg` entries.
    pub fn pra(&self) -> &[remote_arg] {
        // SAFETY: entries 0..len were written (`write` is the only writer and fills the entry
        // at the current length before the count grows); MaybeUninit<T> has T's layout.
        unsafe { core::slice::from_raw_parts(self.pra.as_ptr().cast::<remote_arg>(), self.len()) }
    }
    /// The `fds` entries.
    pub fn fds(&self) -> &[i32] {
        // SAFETY: as in `pra`.
        unsafe { core::slice::from_raw_parts(self.fds.as_ptr().cast::<i32>(), self.len()) }
    }
    /// The `attrs` entries.
    pub fn attrs(&self) -> &[u32] {
        // SAFETY: as in `pra`.
        unsafe { core::slice::from_raw_parts(self.attrs.as_ptr().cast::<u32>(), self.len()) }
    }

    /// The request pointing at this list (which the caller keeps borrowed for the call).
    #[inline(always)]
    pub(super) fn request(&mut self) -> Request {
        Request {
            sc: self.scalars().raw(),
            pra: self.pra.as_mut_ptr() as u64,
            fds: self.fds.as_mut_ptr() as u64,
            attrs: self.attrs.as_mut_ptr() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adsprpc::consts::FASTRPC_ATTR_NOVA;

    #[test]
    fn invoke_args_order_and_scalars() {
        let input = [1u8; 8];
        let mut out = [0u8; 16];
        let mut args = InvokeArgs::<'_, 8>::new(2).unwrap();
        args.input(&input).unwrap();
        args.output(&mut out).unwrap();
        assert_eq!(args.input(&input).err(), Some(ArgsError::Order));
        args.out_handle(Fd(5), FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!(args.in_handle(Fd(6), 0).err(), Some(ArgsError::Order));
        assert_eq!(args.out_handle(Fd(0), 0).err(), Some(ArgsError::NoFd));
        assert_eq!(args.scalars().raw(), 0x0201_0101);
        assert_eq!(args.fds(), &[-1, -1, 5]);
        assert_eq!(args.attrs(), &[0, 0, 1]);
        assert_eq!(args.pra()[0].buf().len, 8);
        assert_eq!(args.pra()[1].buf().len, 16);
        assert!(InvokeArgs::<'_, 1>::new(32).is_err());
        let mut small = InvokeArgs::<'_, 1>::new(0).unwrap();
        small.input(&input).unwrap();
        assert_eq!(small.input(&input).err(), Some(ArgsError::Full));
        let mut many = InvokeArgs::<'_, 20>::new(0).unwrap();
        for _ in 0..15 {
            many.out_handle(Fd(3), 0).unwrap();
        }
        assert_eq!(many.out_handle(Fd(3), 0).err(), Some(ArgsError::TooMany));
        let mut at = InvokeArgs::<'_, 2>::new(0).unwrap();
        at.in_handle_at(Fd(4), 64, 0).unwrap().out_handle_at(Fd(5), 0, FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!((at.pra()[0].buf(), at.pra()[1].buf()), (remote_buf { pv: 64, len: 0 }, remote_buf::default()));
        assert_eq!(at.in_handle_at(Fd(0), 0, 0).err(), Some(ArgsError::NoFd));
    }

    /// `out_handles` adds what the same `out_handle` calls would, and on any refusal nothing.
    #[test]
    fn out_handles_is_out_handle_in_a_loop_or_nothing() {
        let input = [1u8; 8];
        let mut one = InvokeArgs::<'_, 8>::new(2).unwrap();
        one.input(&input).unwrap();
        for fd in [5, 6, 7] {
            one.out_handle(Fd(fd), FASTRPC_ATTR_NOVA).unwrap();
        }
        let mut bulk = InvokeArgs::<'_, 8>::new(2).unwrap();
        bulk.input(&input).unwrap();
        bulk.out_handles(&[Fd(5), Fd(6), Fd(7)], FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!((bulk.fds(), bulk.attrs(), bulk.scalars()), (one.fds(), one.attrs(), one.scalars()));
        let bufs = |a: &InvokeArgs<'_, 8>| {
            a.pra().iter().map(|r| (r.buf().pv, r.buf().len)).fold([(0, 0); 4], |mut acc, x| {
                acc.rotate_left(1);
                acc[3] = x;
                acc
            })
        };
        assert_eq!(bufs(&bulk), bufs(&one));

        let mut refused = InvokeArgs::<'_, 4>::new(2).unwrap();
        refused.input(&input).unwrap();
        assert_eq!(refused.out_handles(&[Fd(5), Fd(0)], 0).err(), Some(ArgsError::NoFd));
        assert_eq!(refused.out_handles(&[Fd(5), Fd(6), Fd(7), Fd(8)], 0).err(), Some(ArgsError::Full));
        assert_eq!((refused.len(), refused.fds()), (1, &[-1][..]), "nothing added on a refusal");
        refused.out_handles(&[Fd(9)], 0).unwrap();
        assert_eq!(refused.input(&input).err(), Some(ArgsError::Order));
        let mut wide = InvokeArgs::<'_, 20>::new(0).unwrap();
        assert_eq!(wide.out_handles(&[Fd(3); 16], 0).err(), Some(ArgsError::TooMany));
        wide.out_handles(&[Fd(3); 15], 0).unwrap();
        assert_eq!(wide.scalars().raw() & 0xf, 15);
    }
}
