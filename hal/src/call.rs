//! One FastRPC call, described independently of the driver that will carry it.
//!
//! A [`Call`] is what every caller of the HAL builds ([`Library::invoke`](crate::Library::invoke),
//! the runtime's packer and batch, the reverse-RPC listener): the method, the in- and
//! out-buffers it borrows, and the buffer handles (dma-buf fd, the offset the DSP sees, the
//! buffer's length, the attribute bits). The scalars word follows from the counts.
//!
//! Right before the ioctl, the board's driver backend translates it into its own argument
//! list, a few field copies per argument on the stack (nothing allocated, no buffer copied):
//!
//! * downstream ([`to_downstream`](Call::to_downstream)): `remote_arg` entries plus the
//!   `fds[]` and `attrs[]` arrays of `struct fastrpc_ioctl_invoke_attrs`. A handle's entry
//!   carries its offset in `pv` (the driver reads it as `dma.offset`) and no length: the
//!   downstream request has no place for it.
//! * upstream ([`to_upstream`](Call::to_upstream)): one `struct fastrpc_invoke_args`
//!   `{ptr, length, fd, attr}` per argument. A handle needs its length (the driver maps a
//!   handle only when it has one), and every attribute is 0: the downstream `FASTRPC_ATTR_*`
//!   values mean other things upstream (downstream NOVA = 1 is upstream SECUREMAP = 1).

use core::fmt;

use hexrpc_drivers::adsprpc::{self, ArgCounts, ArgsError};
use hexrpc_drivers::{upstream, Fd, Scalars};

/// A buffer handle argument: a dma-buf the driver maps for the DSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HandleArg {
    /// The dma-buf (share) fd; a real one (not 0, not negative).
    pub fd: Fd,
    /// The offset into the buffer the DSP sees.
    pub offset: u32,
    /// The buffer's length in bytes; 0 when not given (the upstream driver then refuses it).
    pub len: u64,
    /// Attribute bits in the downstream encoding (`FASTRPC_ATTR_*` of
    /// [`adsprpc`](hexrpc_drivers::adsprpc), e.g. `FASTRPC_ATTR_NOVA`, which the launch ABI
    /// uses); the upstream backend sends 0.
    pub attr: u32,
}

impl HandleArg {
    /// A handle on `fd` with attribute `attr`, offset 0 and no length.
    pub const fn new(fd: Fd, attr: u32) -> HandleArg {
        HandleArg { fd, offset: 0, len: 0, attr }
    }

    /// The same handle with the buffer's length `len`.
    pub const fn with_len(self, len: u64) -> HandleArg {
        HandleArg { len, ..self }
    }

    /// The same handle with the offset the DSP sees.
    pub const fn at(self, offset: u32) -> HandleArg {
        HandleArg { offset, ..self }
    }
}

/// One argument, in ABI order.
enum Arg<'a> {
    Unused,
    In(&'a [u8]),
    Out(&'a mut [u8]),
    InHandle(HandleArg),
    OutHandle(HandleArg),
}

/// One FastRPC call (method and arguments), driver-neutral, in fixed capacity `CAP`.
///
/// Buffers are borrowed for `'a`, so they outlive the ioctl that uses them: an input buffer is
/// only read, an output buffer is written back by the driver. Arguments must be added in ABI
/// order: in-buffers, out-buffers, in-handles, out-handles. The call's target (a library's
/// handle, or a static one) is given by whoever sends it.
///
/// ```
/// use hexrpc_drivers::Fd;
/// use hexrpc_hal::{Call, HandleArg};
///
/// let header = [0u8; 16];
/// let mut timer = [0u8; 8];
/// let mut call = Call::<'_, 4>::new(2).unwrap();
/// call.input(&header).unwrap().output(&mut timer).unwrap();
/// call.out_handle_with(HandleArg::new(Fd(7), 1).with_len(8192)).unwrap();
/// assert_eq!(call.scalars().raw(), 0x0201_0101);
/// // What the downstream driver is sent: the fds[] and attrs[] arrays.
/// assert_eq!(call.to_downstream().unwrap().fds(), &[-1, -1, 7]);
/// ```
pub struct Call<'a, const CAP: usize> {
    counts: ArgCounts,
    args: [Arg<'a>; CAP],
}

impl<'a, const CAP: usize> Call<'a, CAP> {
    /// An empty call of `method` (0..=31).
    #[inline(always)]
    pub fn new(method: u8) -> Result<Self, ArgsError> {
        Ok(Call { counts: ArgCounts::new(method)?, args: [const { Arg::Unused }; CAP] })
    }

    #[inline]
    fn push(&mut self, kind: usize, arg: Arg<'a>) -> Result<&mut Self, ArgsError> {
        let i = self.counts.add(kind, CAP)?;
        self.args[i] = arg;
        Ok(self)
    }

    /// Adds an input buffer (copied to the DSP).
    #[inline]
    pub fn input(&mut self, buf: &'a [u8]) -> Result<&mut Self, ArgsError> {
        self.push(0, Arg::In(buf))
    }

    /// Adds an output buffer (written back by the driver).
    #[inline]
    pub fn output(&mut self, buf: &'a mut [u8]) -> Result<&mut Self, ArgsError> {
        self.push(1, Arg::Out(buf))
    }

    /// Adds an input handle.
    #[inline]
    pub fn in_handle_with(&mut self, h: HandleArg) -> Result<&mut Self, ArgsError> {
        if h.fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(2, Arg::InHandle(h))
    }

    /// Adds an output handle.
    #[inline]
    pub fn out_handle_with(&mut self, h: HandleArg) -> Result<&mut Self, ArgsError> {
        if h.fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        self.push(3, Arg::OutHandle(h))
    }

    /// Adds an input handle on `fd` with `attr`, offset 0, length unknown (enough for the
    /// downstream driver; the upstream one needs [`in_handle_sized`](Self::in_handle_sized)).
    pub fn in_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.in_handle_with(HandleArg::new(fd, attr))
    }

    /// Adds an output handle on `fd` with `attr` (see [`in_handle`](Self::in_handle)).
    pub fn out_handle(&mut self, fd: Fd, attr: u32) -> Result<&mut Self, ArgsError> {
        self.out_handle_with(HandleArg::new(fd, attr))
    }

    /// Adds an input handle on `fd`, a buffer of `len` bytes, with `attr`, offset 0.
    pub fn in_handle_sized(&mut self, fd: Fd, attr: u32, len: u64) -> Result<&mut Self, ArgsError> {
        self.in_handle_with(HandleArg::new(fd, attr).with_len(len))
    }

    /// Adds an output handle on `fd`, a buffer of `len` bytes, with `attr`, offset 0.
    #[inline]
    pub fn out_handle_sized(&mut self, fd: Fd, attr: u32, len: u64) -> Result<&mut Self, ArgsError> {
        self.out_handle_with(HandleArg::new(fd, attr).with_len(len))
    }

    /// The method index.
    pub fn method(&self) -> u8 {
        self.counts.method()
    }

    /// Number of arguments (`REMOTE_SCALARS_LENGTH`).
    #[inline]
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True if no argument was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The scalars word describing the call.
    pub fn scalars(&self) -> Scalars {
        self.counts.scalars()
    }

    /// The buffer handles, in argument order (in-handles first).
    pub fn handles(&self) -> impl Iterator<Item = HandleArg> + '_ {
        self.args[..self.len()].iter().filter_map(|a| match a {
            Arg::InHandle(h) | Arg::OutHandle(h) => Some(*h),
            _ => None,
        })
    }

    /// The downstream driver's argument list (`remote_arg` entries, `fds[]`, `attrs[]`), which
    /// borrows this call's buffers until it is dropped. Handles keep their fd and attribute; the
    /// entry's `pv` carries the offset and its `len` stays 0 (the downstream request has no
    /// handle length).
    #[inline]
    pub fn to_downstream(&mut self) -> Result<adsprpc::InvokeArgs<'_, CAP>, ArgsError> {
        let mut down = adsprpc::InvokeArgs::new(self.counts.method())?;
        self.fill_downstream(&mut down)?;
        Ok(down)
    }

    /// Runs `f` on [`to_downstream`](Self::to_downstream)'s argument list, built in place (what
    /// the driver backend does right before its ioctl: the list is not moved around).
    #[inline(always)]
    pub fn with_downstream<R>(&mut self, f: impl FnOnce(&mut adsprpc::InvokeArgs<'_, CAP>) -> R) -> Result<R, ArgsError> {
        // Used where it was built (a borrow of the Result, not a move out of it).
        let mut down = adsprpc::InvokeArgs::new(self.counts.method());
        let down = down.as_mut().map_err(|e| *e)?;
        self.fill_downstream(down)?;
        Ok(f(down))
    }

    #[inline]
    fn fill_downstream<'s>(&'s mut self, down: &mut adsprpc::InvokeArgs<'s, CAP>) -> Result<(), ArgsError> {
        let n = self.len();
        for a in &mut self.args[..n] {
            match a {
                Arg::In(b) => down.input(b)?,
                Arg::Out(b) => down.output(b)?,
                Arg::InHandle(h) => down.in_handle_at(h.fd, h.offset, h.attr)?,
                Arg::OutHandle(h) => down.out_handle_at(h.fd, h.offset, h.attr)?,
                Arg::Unused => return Err(ArgsError::Order),
            };
        }
        Ok(())
    }

    /// The upstream driver's argument list (one `fastrpc_invoke_args` per argument), which
    /// borrows this call's buffers until it is dropped. Buffers are copied (fd -1); handles keep
    /// fd, offset and length, and a handle without a length is refused with
    /// [`ArgsError::NoFd`] (a length over 4 GiB with [`ArgsError::Range`]); every attribute
    /// is 0 (see the module docs).
    #[inline]
    pub fn to_upstream(&mut self) -> Result<upstream::InvokeArgs<'_, CAP>, ArgsError> {
        let mut up = upstream::InvokeArgs::new(self.counts.method())?;
        self.fill_upstream(&mut up)?;
        Ok(up)
    }

    /// Runs `f` on [`to_upstream`](Self::to_upstream)'s argument list, built in place.
    #[inline(always)]
    pub fn with_upstream<R>(&mut self, f: impl FnOnce(&mut upstream::InvokeArgs<'_, CAP>) -> R) -> Result<R, ArgsError> {
        let mut up = upstream::InvokeArgs::new(self.counts.method());
        let up = up.as_mut().map_err(|e| *e)?;
        self.fill_upstream(up)?;
        Ok(f(up))
    }

    #[inline]
    fn fill_upstream<'s>(&'s mut self, up: &mut upstream::InvokeArgs<'s, CAP>) -> Result<(), ArgsError> {
        let n = self.len();
        let sized = |h: &HandleArg| match h.len {
            0 => Err(ArgsError::NoFd),
            l => u32::try_from(l).map_err(|_| ArgsError::Range),
        };
        for a in &mut self.args[..n] {
            match a {
                Arg::In(b) => up.input(b)?,
                Arg::Out(b) => up.output(b)?,
                Arg::InHandle(h) => up.in_handle(h.fd, h.offset, sized(h)?, 0)?,
                Arg::OutHandle(h) => up.out_handle(h.fd, h.offset, sized(h)?, 0)?,
                Arg::Unused => return Err(ArgsError::Order),
            };
        }
        Ok(())
    }
}

impl<const CAP: usize> fmt::Debug for Call<'_, CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for a in &self.args[..self.len()] {
            match a {
                Arg::In(b) => l.entry(&format_args!("in[{}]", b.len())),
                Arg::Out(b) => l.entry(&format_args!("out[{}]", b.len())),
                Arg::InHandle(h) => l.entry(&format_args!("in-handle {h:?}")),
                Arg::OutHandle(h) => l.entry(&format_args!("out-handle {h:?}")),
                Arg::Unused => l.entry(&"unused"),
            };
        }
        l.finish()?;
        write!(f, " sc={:#010x}", self.scalars().raw())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hexrpc_drivers::upstream::fastrpc_invoke_args;

    #[test]
    fn order_counts_and_scalars() {
        let input = [1u8; 8];
        let mut out = [0u8; 16];
        let mut call = Call::<'_, 8>::new(2).unwrap();
        call.input(&input).unwrap();
        call.output(&mut out).unwrap();
        assert_eq!(call.input(&input).err(), Some(ArgsError::Order));
        call.out_handle(Fd(5), adsprpc::FASTRPC_ATTR_NOVA).unwrap();
        assert_eq!(call.in_handle(Fd(6), 0).err(), Some(ArgsError::Order));
        assert_eq!(call.out_handle(Fd(0), 0).err(), Some(ArgsError::NoFd));
        assert_eq!(call.scalars().raw(), 0x0201_0101);
        assert_eq!(call.len(), 3);
        assert_eq!(call.handles().collect::<heapless::Vec<_, 2>>(), [HandleArg::new(Fd(5), 1)]);
        assert!(Call::<'_, 1>::new(32).is_err());
        let mut small = Call::<'_, 1>::new(0).unwrap();
        small.input(&input).unwrap();
        assert_eq!(small.input(&input).err(), Some(ArgsError::Full));
        let mut many = Call::<'_, 20>::new(0).unwrap();
        for _ in 0..15 {
            many.out_handle(Fd(3), 0).unwrap();
        }
        assert_eq!(many.out_handle(Fd(3), 0).err(), Some(ArgsError::TooMany));
    }

    #[test]
    fn downstream_gets_fds_attrs_and_offsets_but_no_lengths() {
        let input = [1u8; 8];
        let mut out = [0u8; 4];
        let (ip, op) = (input.as_ptr() as u64, out.as_mut_ptr() as u64);
        let mut call = Call::<'_, 4>::new(2).unwrap();
        call.input(&input).unwrap().output(&mut out).unwrap();
        call.in_handle_with(HandleArg::new(Fd(6), 0).with_len(4096).at(64)).unwrap();
        call.out_handle_sized(Fd(7), adsprpc::FASTRPC_ATTR_NOVA, 8192).unwrap();
        let sc = call.scalars();
        assert_eq!(call.with_downstream(|d| (d.scalars(), d.fds() == [-1, -1, 6, 7])), Ok((sc, true)), "built in place, the same list");
        let down = call.to_downstream().unwrap();
        assert_eq!(down.scalars(), sc);
        assert_eq!(down.fds(), &[-1, -1, 6, 7]);
        assert_eq!(down.attrs(), &[0, 0, 0, adsprpc::FASTRPC_ATTR_NOVA]);
        let pra = down.pra();
        assert_eq!((pra[0].buf().pv, pra[0].buf().len), (ip, 8));
        assert_eq!((pra[1].buf().pv, pra[1].buf().len), (op, 4));
        assert_eq!((pra[2].buf().pv, pra[2].buf().len), (64, 0), "offset in pv, no length");
        assert_eq!((pra[3].buf().pv, pra[3].buf().len), (0, 0));
    }

    #[test]
    fn upstream_gets_lengths_and_no_attributes() {
        let input = [1u8; 8];
        let mut out = [0u8; 4];
        let mut call = Call::<'_, 4>::new(2).unwrap();
        call.input(&input).unwrap().output(&mut out).unwrap();
        call.out_handle_with(HandleArg::new(Fd(7), adsprpc::FASTRPC_ATTR_NOVA).with_len(8192).at(16)).unwrap();
        let sc = call.scalars();
        assert_eq!(call.with_upstream(|u| (u.scalars(), u.args()[2].length)), Ok((sc, 8192)));
        let up = call.to_upstream().unwrap();
        assert_eq!(up.scalars(), sc);
        let a = up.args();
        assert_eq!((a[0].ptr, a[0].length, a[0].fd, a[0].attr), (input.as_ptr() as u64, 8, -1, 0));
        assert_eq!((a[1].length, a[1].fd), (4, -1));
        assert_eq!(a[2], fastrpc_invoke_args { ptr: 16, length: 8192, fd: 7, attr: 0 }, "NOVA must not become SECUREMAP");
        let mut call = Call::<'_, 1>::new(2).unwrap();
        call.in_handle(Fd(9), 0).unwrap();
        assert_eq!(call.to_upstream().err(), Some(ArgsError::NoFd), "a handle without its length");
        let mut call = Call::<'_, 1>::new(2).unwrap();
        call.in_handle_sized(Fd(9), 0, 1 << 32).unwrap();
        assert_eq!(call.to_upstream().err(), Some(ArgsError::Range));
        assert!(call.to_downstream().is_ok(), "the downstream request has no length to overflow");
    }
}
