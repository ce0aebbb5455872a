//! A kernel launch's argument arrays kept in the caller's storage ([`LaunchFrame`]) and the
//! writer of its output handles ([`HandleWriter`]).

use core::mem::MaybeUninit;

use super::args::ArgsError;
use super::request::{invoke_until, never, Request, Target, Variant};
use super::structs::{remote_arg, remote_buf};
use crate::{Error, Fd, Scalars, Syscalls};

/// The argument arrays of a kernel launch kept in the caller's own storage: `FIRST` buffer
/// arguments, given to each [`invoke_attrs`](Self::invoke_attrs) and borrowed only for that call,
/// then up to `CAP - FIRST` output handles, written when the launch is packed
/// ([`handles`](Self::handles)) and kept until they are written again.
///
/// This is [`InvokeArgs`](super::InvokeArgs) for a call whose shape is fixed (a launch: input
/// buffers, output buffers, output handles): the handle entries are written once, in the packing
/// loop that has the fds at hand, and an invoke only writes the `FIRST` buffer entries, takes the
/// scalars word from the counts it was given and makes the one ioctl, with no per-argument
/// bookkeeping.
/// As in `InvokeArgs`, only the entries in use are ever written or read.
#[derive(Clone, Copy)]
pub struct LaunchFrame<const FIRST: usize, const CAP: usize> {
    pra: [MaybeUninit<remote_arg>; CAP],
    fds: [MaybeUninit<i32>; CAP],
    attrs: [MaybeUninit<u32>; CAP],
    /// Entries `FIRST..FIRST + handles` are written.
    handles: usize,
}

impl<const FIRST: usize, const CAP: usize> LaunchFrame<FIRST, CAP> {
    /// The frame's shape fits the scalars word: at most 255 buffers and 15 handles.
    const SHAPE: () = assert!(
        FIRST <= CAP && FIRST <= Scalars::MAX_BUFS as usize && CAP - FIRST <= Scalars::MAX_HANDLES as usize,
        "a launch frame holds at most 255 buffers and 15 output handles"
    );

    /// A frame without handles.
    #[inline(always)]
    pub const fn new() -> Self {
        let () = Self::SHAPE;
        LaunchFrame {
            pra: [const { MaybeUninit::uninit() }; CAP],
            fds: [const { MaybeUninit::uninit() }; CAP],
            attrs: [const { MaybeUninit::uninit() }; CAP],
            handles: 0,
        }
    }

    /// Writes the output handles anew: the frame holds the handles pushed to the writer (none
    /// until the first push) once the writer is dropped.
    #[inline(always)]
    pub fn handles(&mut self) -> HandleWriter<'_, FIRST, CAP> {
        HandleWriter { frame: self, at: 0 }
    }

    /// Number of output handles.
    #[inline(always)]
    pub fn handle_count(&self) -> usize {
        self.handles
    }

    /// The output handles' fds, in order.
    pub fn handle_fds(&self) -> &[Fd] {
        // SAFETY: entries FIRST..FIRST + handles were written by `HandleWriter::push` (which
        // never passes CAP) before `handles` was set; `Fd` is `repr(transparent)` over i32 and
        // MaybeUninit<i32> has i32's layout.
        unsafe { core::slice::from_raw_parts(self.fds.as_ptr().add(FIRST).cast::<Fd>(), self.handles) }
    }

    /// The output handles' attributes, in order.
    pub fn handle_attrs(&self) -> &[u32] {
        // SAFETY: as in `handle_fds`.
        unsafe { core::slice::from_raw_parts(self.attrs.as_ptr().add(FIRST).cast::<u32>(), self.handles) }
    }

    /// `FASTRPC_IOCTL_INVOKE_ATTRS` of method `method` on library `handle` through `dev`: the
    /// input buffers `ins`, the output buffers `outs` (`IN + OUT` must be `FIRST`), then the
    /// frame's output handles. Runs to completion as [`invoke_attrs`](super::invoke_attrs) does
    /// (an interrupted call is resumed with the same arguments). `Error::Invalid` for a method
    /// above 31, before any system call.
    #[inline]
    pub fn invoke_attrs<S: Syscalls + ?Sized, const IN: usize, const OUT: usize>(
        &mut self,
        sys: &S,
        dev: Fd,
        handle: u32,
        method: u8,
        ins: [&[u8]; IN],
        outs: [&mut [u8]; OUT],
    ) -> Result<(), Error> {
        const { assert!(IN + OUT == FIRST, "the buffers given must fill the frame's buffer entries") };
        if method > Scalars::MAX_METHOD {
            return Err(Error::Invalid);
        }
        // IN, OUT <= FIRST <= 255 and handles <= CAP - FIRST <= 15 (SHAPE): every count fits
        // its field of the scalars word (no attribute bits, no input handles).
        let sc = (u32::from(method) << 24) | ((IN as u32) << 16) | ((OUT as u32) << 8) | (self.handles as u32 & 0xf);
        for (k, b) in ins.iter().enumerate() {
            self.pra[k] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: b.as_ptr() as u64, len: b.len() as u64 }));
            self.fds[k] = MaybeUninit::new(-1);
            self.attrs[k] = MaybeUninit::new(0);
        }
        for (k, b) in outs.iter().enumerate() {
            self.pra[IN + k] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: b.as_ptr() as u64, len: b.len() as u64 }));
            self.fds[IN + k] = MaybeUninit::new(-1);
            self.attrs[IN + k] = MaybeUninit::new(0);
        }
        // Entries 0..FIRST were just written from `ins` and `outs`, which stay borrowed until
        // this function returns; entries FIRST..FIRST + handles by the handle writer.
        let req =
            Request { sc, pra: self.pra.as_mut_ptr() as u64, fds: self.fds.as_mut_ptr() as u64, attrs: self.attrs.as_mut_ptr() as u64 };
        invoke_until(sys, Target::Raw(dev), handle, req, Variant::Attrs, None, &never)
    }
}

impl<const FIRST: usize, const CAP: usize> Default for LaunchFrame<FIRST, CAP> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const FIRST: usize, const CAP: usize> core::fmt::Debug for LaunchFrame<FIRST, CAP> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LaunchFrame").field("handle_fds", &self.handle_fds()).field("handle_attrs", &self.handle_attrs()).finish()
    }
}

/// Writes a [`LaunchFrame`]'s output handles (see [`LaunchFrame::handles`]); the handles pushed
/// are the frame's when the writer is dropped.
pub struct HandleWriter<'f, const FIRST: usize, const CAP: usize> {
    frame: &'f mut LaunchFrame<FIRST, CAP>,
    at: usize,
}

impl<const FIRST: usize, const CAP: usize> HandleWriter<'_, FIRST, CAP> {
    /// Appends an output handle: `fd` at offset 0 (its `remote_arg` entry zero) with
    /// `FASTRPC_ATTR_*` bits `attr`. `NoFd` for a number that is not positive, `Full` past the
    /// frame's capacity; then nothing is added.
    #[inline(always)]
    pub fn push(&mut self, fd: Fd, attr: u32) -> Result<(), ArgsError> {
        if fd.0 <= 0 {
            return Err(ArgsError::NoFd);
        }
        let i = FIRST + self.at;
        if i >= CAP {
            return Err(ArgsError::Full);
        }
        self.frame.pra[i] = MaybeUninit::new(remote_arg::from_buf(remote_buf { pv: 0, len: 0 }));
        self.frame.fds[i] = MaybeUninit::new(fd.0);
        self.frame.attrs[i] = MaybeUninit::new(attr);
        self.at += 1;
        Ok(())
    }
}

impl<const FIRST: usize, const CAP: usize> Drop for HandleWriter<'_, FIRST, CAP> {
    #[inline(always)]
    fn drop(&mut self) {
        // Entries FIRST..FIRST + at were written by `push`.
        self.frame.handles = self.at;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::adsprpc::args::InvokeArgs;
    use crate::adsprpc::consts::FASTRPC_ATTR_NOVA;
    use crate::adsprpc::invoke::invoke_attrs;
    use crate::adsprpc::ioctl;
    use crate::adsprpc::structs::fastrpc_ioctl_invoke_attrs;
    use crate::Errno;

    /// What one INVOKE_ATTRS request pointed at, read the way the driver reads it.
    #[derive(Clone, Debug, PartialEq)]
    struct Seen {
        handle: u32,
        sc: u32,
        /// (pv, len) of every entry.
        pra: std::vec::Vec<(u64, u64)>,
        fds: std::vec::Vec<i32>,
        attrs: std::vec::Vec<u32>,
    }

    /// A driver stand-in for INVOKE_ATTRS: records each request and answers `EINTR` to the first
    /// `interrupts` of them (as a parked call), then writes `0xAB` over every output buffer and
    /// returns 0.
    #[derive(Default)]
    struct Recorder {
        seen: std::sync::Mutex<std::vec::Vec<Seen>>,
        interrupts: core::cell::Cell<u32>,
    }

    // SAFETY: `ioctl` reads the request struct and the LENGTH(sc) entries of the three arrays it
    // points at, and writes only into output buffers, within their lengths: what the driver does.
    unsafe impl crate::SeamHooks for Recorder {
        type Inner = crate::RefusingSys;
        fn inner(&self) -> &crate::RefusingSys {
            &crate::RefusingSys
        }
        unsafe fn ioctl(&self, _: Fd, request: u32, arg: *mut core::ffi::c_void) -> Result<i32, Errno> {
            assert_eq!(request, ioctl::FASTRPC_IOCTL_INVOKE_ATTRS.raw());
            // SAFETY: the request's struct (ioctl contract).
            let x = unsafe { &*arg.cast::<fastrpc_ioctl_invoke_attrs>() };
            let sc = Scalars::from_raw(x.inv.sc);
            let n = sc.length();
            // SAFETY: LENGTH(sc) initialised entries behind each pointer (ioctl contract).
            let (pra, fds, attrs) = unsafe {
                (
                    core::slice::from_raw_parts(x.inv.pra as *const remote_arg, n),
                    core::slice::from_raw_parts(x.fds as *const i32, n),
                    core::slice::from_raw_parts(x.attrs as *const u32, n),
                )
            };
            self.seen.lock().unwrap().push(Seen {
                handle: x.inv.handle,
                sc: x.inv.sc,
                pra: pra.iter().map(|a| (a.buf().pv, a.buf().len)).collect(),
                fds: fds.to_vec(),
                attrs: attrs.to_vec(),
            });
            if self.interrupts.get() > 0 {
                self.interrupts.set(self.interrupts.get() - 1);
                return Err(Errno::EINTR);
            }
            let first_out = sc.inbufs() as usize;
            for a in &pra[first_out..first_out + sc.outbufs() as usize] {
                // SAFETY: an output buffer of the call, writable for its length.
                unsafe { core::ptr::write_bytes(a.buf().pv as *mut u8, 0xAB, a.buf().len as usize) };
            }
            Ok(0)
        }
    }

    /// A frame sends exactly what an `InvokeArgs` of the same call sends, writes the output,
    /// resumes an interrupted call with the same arrays, and keeps its handles until rewritten.
    /// (Not under Miri: the recorder turns the request's u64 addresses back into pointers, which
    /// strict provenance forbids; `launch_frame_handles` checks the frame's own reads there.)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn launch_frame_sends_what_invoke_args_sends() {
        let (pra0, pra1) = ([1u8; 24], [2u8; 16]);
        let sys = Recorder::default();
        let mut t1 = [0u8; 8];
        let mut args = InvokeArgs::<'_, 8>::new(2).unwrap();
        args.input(&pra0).unwrap().input(&pra1).unwrap().output(&mut t1).unwrap();
        args.out_handles(&[Fd(10), Fd(11)], FASTRPC_ATTR_NOVA).unwrap();
        invoke_attrs(&sys, Fd(3), 0x100, &mut args).unwrap();
        assert_eq!(t1, [0xAB; 8]);

        let mut frame = LaunchFrame::<3, 8>::new();
        {
            let mut h = frame.handles();
            h.push(Fd(10), FASTRPC_ATTR_NOVA).unwrap();
            h.push(Fd(11), FASTRPC_ATTR_NOVA).unwrap();
        }
        assert_eq!((frame.handle_count(), frame.handle_fds(), frame.handle_attrs()), (2, &[Fd(10), Fd(11)][..], &[1, 1][..]));
        let mut t2 = [0u8; 8];
        sys.interrupts.set(2);
        frame.invoke_attrs(&sys, Fd(3), 0x100, 2, [&pra0, &pra1], [&mut t2]).unwrap();
        assert_eq!(t2, [0xAB; 8]);
        let seen = sys.seen.lock().unwrap();
        assert_eq!(seen.len(), 4, "one call, then the frame's call resumed twice");
        let (p1, p2) = (t1.as_ptr() as u64, t2.as_ptr() as u64);
        assert_eq!((seen[0].pra[2].0, seen[1].pra[2].0), (p1, p2), "each call's output buffer");
        let same = |a: &Seen, b: &Seen| {
            (a.handle, a.sc, &a.pra[..2], &a.pra[2..].iter().map(|e| e.1).collect::<std::vec::Vec<_>>(), &a.fds, &a.attrs)
                == (b.handle, b.sc, &b.pra[..2], &b.pra[2..].iter().map(|e| e.1).collect::<std::vec::Vec<_>>(), &b.fds, &b.attrs)
        };
        assert!(same(&seen[0], &seen[1]), "the frame's request is the argument list's: {:?} {:?}", seen[0], seen[1]);
        assert_eq!(&seen[1].pra[3..], &[(0, 0), (0, 0)], "handle entries are zero");
        assert_eq!((seen[0].sc, &seen[0].fds[..], &seen[0].attrs[..]), (0x0202_0102, &[-1, -1, -1, 10, 11][..], &[0, 0, 0, 1, 1][..]));
        assert!(seen[1..].windows(2).all(|w| w[0] == w[1]), "an interrupted call is resumed with the same arrays");
        drop(seen);

        // Rewritten shorter, the frame sends only the new handles; a refused push adds nothing.
        {
            let mut h = frame.handles();
            h.push(Fd(12), 0).unwrap();
            assert_eq!(h.push(Fd(0), 0), Err(ArgsError::NoFd));
        }
        assert_eq!(frame.handle_fds(), &[Fd(12)]);
        let mut t3 = [0u8; 8];
        frame.invoke_attrs(&sys, Fd(3), 7, 31, [&pra0, &pra1], [&mut t3]).unwrap();
        let last = sys.seen.lock().unwrap().pop().unwrap();
        assert_eq!((last.handle, last.sc, &last.fds[..], &last.attrs[..]), (7, 0x1F02_0101, &[-1, -1, -1, 12][..], &[0, 0, 0, 0][..]));
        assert_eq!(&last.pra[..2], &[(pra0.as_ptr() as u64, 24), (pra1.as_ptr() as u64, 16)]);
        assert_eq!(frame.invoke_attrs(&sys, Fd(3), 7, 32, [&pra0, &pra1], [&mut t3]), Err(Error::Invalid), "method 32");
        assert_eq!(sys.seen.lock().unwrap().len(), 4, "a refused method makes no call");

        // The capacity: CAP - FIRST handles, then Full (and the count stays in the scalars word).
        let mut full = LaunchFrame::<3, 18>::new();
        {
            let mut h = full.handles();
            for fd in 1..=15 {
                h.push(Fd(fd), 1).unwrap();
            }
            assert_eq!(h.push(Fd(16), 1), Err(ArgsError::Full));
        }
        full.invoke_attrs(&sys, Fd(3), 1, 2, [&pra0, &pra1], [&mut t3]).unwrap();
        assert_eq!(sys.seen.lock().unwrap().pop().unwrap().sc, 0x0202_010F);
    }

    /// The frame's handle entries: written by the writer, read back by the accessors, rewritten
    /// shorter or longer, never past the capacity (runs under Miri).
    #[test]
    fn launch_frame_handles() {
        let mut frame = LaunchFrame::<3, 6>::new();
        assert_eq!((frame.handle_count(), frame.handle_fds()), (0, &[][..]));
        for round in 1..=3 {
            {
                let mut h = frame.handles();
                for k in 0..round {
                    h.push(Fd(10 + k), k as u32).unwrap();
                }
                if round == 3 {
                    assert_eq!(h.push(Fd(20), 0), Err(ArgsError::Full));
                }
            }
            let fds: std::vec::Vec<Fd> = (0..round).map(|k| Fd(10 + k)).collect();
            let attrs: std::vec::Vec<u32> = (0..round as u32).collect();
            assert_eq!((frame.handle_fds(), frame.handle_attrs()), (&fds[..], &attrs[..]));
        }
        let copy = frame;
        {
            let _ = frame.handles();
        }
        assert_eq!((frame.handle_count(), copy.handle_count()), (0, 3), "a dropped writer leaves what it pushed");
        assert_eq!(copy.handle_fds(), &[Fd(10), Fd(11), Fd(12)]);
    }
}
