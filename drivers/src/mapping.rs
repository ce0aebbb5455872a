use core::fmt;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::{Errno, Fd, Prot, Syscalls};

/// A shared mapping of a buffer fd (an ION dma-buf), unmapped when dropped.
///
/// The memory is shared with other agents: the DSP, and other mappings of the same buffer (two
/// `Mapping`s of one fd, in this process or another). It is treated as *volatile memory*, in the
/// spirit of rust-vmm's `VolatileSlice`: no reference to its bytes is ever handed out, and
/// [`read_at`](Mapping::read_at), [`write_at`](Mapping::write_at) and [`fill`](Mapping::fill)
/// copy in and out, bounds-checked against the mapped length. The copies are made of relaxed
/// atomic accesses to the aligned 8-byte words of the mapping, never of plain or volatile ones
/// (which Rust's memory model makes undefined behaviour when they race with a write, as Miri
/// reports). A copy that races with another agent's write (through a second mapping, or the
/// DSP) therefore reads some mix of old and new bytes, whole per word — the contents are
/// unspecified — but it is not undefined behaviour, and the compiler never assumes the memory
/// is unchanged or exclusively ours.
pub struct Mapping<S: Syscalls> {
    sys: S,
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another thread
// moves the obligation to unmap it, which `S: Send` allows.
unsafe impl<S: Syscalls + Send> Send for Mapping<S> {}
// SAFETY: `&Mapping` permits copies out of and into the mapping (`write_shared`,
// `fill_shared`) and address queries; the memory is accessed with same-size atomic operations on
// every path (see `Words`), so concurrent accesses through other mappings or threads are not
// data races.
unsafe impl<S: Syscalls + Sync> Sync for Mapping<S> {}

/// A range that does not fit a mapping, or a write to a read-only mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RangeError {
    /// Requested offset.
    pub offset: usize,
    /// Requested length.
    pub len: usize,
    /// Length of the mapping.
    pub mapped: usize,
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "range {}+{} does not fit a mapping of {} bytes (or the mapping is read-only)", self.offset, self.len, self.mapped)
    }
}

impl core::error::Error for RangeError {}

impl<S: Syscalls> Mapping<S> {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, 0)`. `len` must be non-zero.
    pub fn map_shared(sys: S, fd: Fd, len: usize, prot: Prot) -> Result<Self, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a fresh shared mapping; this type never forms references into it (see the
        // type docs), which is the contract `mmap` asks of its caller.
        let ptr = unsafe { sys.mmap(fd, len, prot, 0) }?;
        let mapping = Mapping { sys, ptr, len, prot };
        if mapping.addr() % WORD != 0 {
            // Not page-aligned, as no kernel mapping is: refused (and unmapped by the drop).
            return Err(Errno::EINVAL);
        }
        Ok(mapping)
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte, as the kernel and the DSP driver see it.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// False for a read-only mapping ([`Prot::Read`]): its writes are refused, and nothing may
    /// write through its address.
    pub fn writable(&self) -> bool {
        self.prot != Prot::Read
    }

    /// The syscall implementation this mapping was made with.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    fn words(&self) -> Words {
        Words { base: self.ptr.as_ptr() }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), RangeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(RangeError { offset, len, mapped: self.len }),
        }
    }

    /// Copies `out.len()` bytes starting at `offset` out of the mapping.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), RangeError> {
        self.check(offset, out.len())?;
        // SAFETY: `[offset, offset + out.len())` lies inside the live mapping (checked above),
        // whose base is 8-byte aligned (checked when mapped).
        unsafe { self.words().read(offset, out) };
        Ok(())
    }

    /// Copies `data` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RangeError> {
        self.check(offset, data.len())?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len: data.len(), mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable, aligned mapping (checked above).
        unsafe { self.words().write_slice(offset, data) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), RangeError> {
        self.check(offset, len)?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len, mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable, aligned mapping (checked above).
        unsafe { self.words().write(offset, len, |_| byte) };
        Ok(())
    }

    /// [`write_at`](Mapping::write_at) through a shared reference, for owners that hand
    /// disjoint ranges of one mapping to several writers (an arena's sub-allocations). Writers of
    /// overlapping ranges race like any two agents sharing the memory: the bytes are some mix,
    /// whole per word, never undefined behaviour.
    pub fn write_shared(&self, offset: usize, data: &[u8]) -> Result<(), RangeError> {
        self.check(offset, data.len())?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len: data.len(), mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable, aligned mapping (checked above). The
        // memory is DSP-shared memory that no Rust reference covers (none is ever formed, see the
        // type docs); the same atomic word stores as `write_at` make concurrent copies through
        // `&self` defined.
        unsafe { self.words().write_slice(offset, data) };
        Ok(())
    }

    /// [`fill`](Mapping::fill) through a shared reference (see
    /// [`write_shared`](Mapping::write_shared)).
    pub fn fill_shared(&self, offset: usize, len: usize, byte: u8) -> Result<(), RangeError> {
        self.check(offset, len)?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len, mapped: self.len });
        }
        // SAFETY: as in `write_shared`: inside the live, writable, aligned mapping, written with
        // atomic word stores only.
        unsafe { self.words().write(offset, len, |_| byte) };
        Ok(())
    }

    /// Unmaps now and reports the result (dropping unmaps too, and logs a failure).
    pub fn unmap(self) -> Result<(), Errno> {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: the range is our own mapping and `me` is never used again; `sys` is moved out
        // exactly once and the rest of `me` has no destructor to run.
        let sys = unsafe { core::ptr::read(&me.sys) };
        // SAFETY: the mapping was made by `sys.mmap` with this length, and nothing uses it now.
        unsafe { sys.munmap(me.ptr, me.len) }
    }
}

const WORD: usize = core::mem::size_of::<u64>();

/// The mapping's memory as the aligned 8-byte words that cover `[0, len)` (the last one in
/// whole, which a page-granular mapping holds), each accessed as an `AtomicU64`.
///
/// Every access is a relaxed atomic load, store or compare-exchange of one of these words, never
/// a plain or volatile access and never one of another size: Rust's memory model makes a race
/// between a plain or volatile access and a write undefined behaviour, and so it does for racing
/// atomic accesses of different sizes, while racing same-size atomic accesses are defined. Two
/// `Mapping`s of one buffer (in any thread of this process) therefore never race in the
/// language's sense; what the DSP stores is outside the model, and reading it with atomic loads
/// is what makes the compiler assume nothing about the memory between two loads.
struct Words {
    base: *mut u8,
}

impl Words {
    /// The word holding byte `at`.
    ///
    /// # Safety
    ///
    /// `base` must be 8-byte aligned and the word holding byte `at` must be inside the live
    /// mapping, which no code accesses other than through atomic words of this size.
    unsafe fn word<'a>(&self, at: usize) -> &'a AtomicU64 {
        // SAFETY: aligned (base is, and the offset is a multiple of 8), inside the mapping and
        // only ever accessed atomically with this size (the caller's contract).
        unsafe { AtomicU64::from_ptr(self.base.add(at & !(WORD - 1)).cast()) }
    }

    /// Copies `out.len()` bytes at `offset` out, one word load at a time: the whole words of
    /// the range by a plain loop over 8-byte chunks (one load and one store each, which is what
    /// makes a model's 100 KB input cost a memcpy's order of time, not a byte loop's), the
    /// partial words at its ends through [`Words::read_partial`].
    ///
    /// # Safety
    ///
    /// `[offset, offset + out.len())` must be inside the mapping (see [`Words::word`]).
    unsafe fn read(&self, offset: usize, out: &mut [u8]) {
        let head = ((WORD - offset % WORD) % WORD).min(out.len());
        let (first, rest) = out.split_at_mut(head);
        // SAFETY: a prefix of the caller's range.
        unsafe { self.read_partial(offset, first) };
        let mut at = offset + head;
        let mut chunks = rest.chunks_exact_mut(WORD);
        for c in &mut chunks {
            // SAFETY: `at` is word-aligned and the word is inside the caller's range.
            c.copy_from_slice(&unsafe { self.word(at) }.load(Ordering::Relaxed).to_ne_bytes());
            at += WORD;
        }
        // SAFETY: the suffix of the caller's range.
        unsafe { self.read_partial(at, chunks.into_remainder()) };
    }

    /// [`Words::read`] one word at a time, for the partial words at a range's ends.
    ///
    /// # Safety
    ///
    /// As for [`Words::read`].
    unsafe fn read_partial(&self, offset: usize, out: &mut [u8]) {
        let mut i = 0;
        while i < out.len() {
            let at = offset + i;
            let skip = at % WORD;
            let take = (WORD - skip).min(out.len() - i);
            // SAFETY: byte `at` is inside the range (caller's contract).
            let w = unsafe { self.word(at) }.load(Ordering::Relaxed).to_ne_bytes();
            out[i..i + take].copy_from_slice(&w[skip..skip + take]);
            i += take;
        }
    }

    /// Stores `data` at `offset`: the whole words of the range by a plain loop over 8-byte
    /// chunks (one load and one relaxed store each), the partial words at its ends through
    /// [`Words::write`].
    ///
    /// # Safety
    ///
    /// As for [`Words::write`].
    unsafe fn write_slice(&self, offset: usize, data: &[u8]) {
        let head = ((WORD - offset % WORD) % WORD).min(data.len());
        let (first, rest) = data.split_at(head);
        // SAFETY: a prefix of the caller's range.
        unsafe { self.write(offset, first.len(), |i| first[i]) };
        let mut at = offset + head;
        let mut chunks = rest.chunks_exact(WORD);
        for c in &mut chunks {
            let mut w = [0u8; WORD];
            w.copy_from_slice(c);
            // SAFETY: `at` is word-aligned and the word is inside the caller's range.
            unsafe { self.word(at) }.store(u64::from_ne_bytes(w), Ordering::Relaxed);
            at += WORD;
        }
        let tail = chunks.remainder();
        // SAFETY: the suffix of the caller's range.
        unsafe { self.write(at, tail.len(), |i| tail[i]) };
    }

    /// Stores `len` bytes at `offset`, byte `i` of them being `byte(i)`: whole words with one
    /// store, the partial words at the ends with a compare-exchange that keeps the other bytes.
    ///
    /// # Safety
    ///
    /// As for [`Words::read`], and the mapping must be writable.
    unsafe fn write(&self, offset: usize, len: usize, byte: impl Fn(usize) -> u8) {
        let mut i = 0;
        while i < len {
            let at = offset + i;
            let skip = at % WORD;
            let take = (WORD - skip).min(len - i);
            // SAFETY: byte `at` is inside the range (caller's contract).
            let word = unsafe { self.word(at) };
            if take == WORD {
                word.store(u64::from_ne_bytes(core::array::from_fn(|k| byte(i + k))), Ordering::Relaxed);
            } else {
                let merge = |old: u64| {
                    let mut w = old.to_ne_bytes();
                    for k in 0..take {
                        w[skip + k] = byte(i + k);
                    }
                    Some(u64::from_ne_bytes(w))
                };
                // The closure always returns `Some`: the update cannot fail.
                let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, merge);
            }
            i += take;
        }
    }
}

impl<S: Syscalls> Drop for Mapping<S> {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `self.sys.mmap` with this length and is dropped now.
        if let Err(e) = unsafe { self.sys.munmap(self.ptr, self.len) } {
            log::error!("munmap of {:#x}+{} failed: {}", self.addr(), self.len, e);
        }
    }
}

impl<S: Syscalls> fmt::Debug for Mapping<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mapping")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("prot", &self.prot)
            .finish()
    }
}

/// Tests on a seam whose `mmap` hands out heap memory, so that they run under Miri (which cannot
/// map a file): the volatile copies, the bounds checks and racing copies through two mappings of
/// one buffer, with Miri checking every access against the allocation and its lifetime.
#[cfg(test)]
mod heap_tests {
    extern crate std;
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::sync::Mutex;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::RefusingSys;

    /// One buffer per fd number: `mmap` of a number maps (and counts a mapping of) its buffer,
    /// allocated zeroed and 64-byte aligned, in whole 64-byte blocks, on the first `mmap`; `munmap` checks the address and length and frees
    /// the buffer with its last mapping. Everything else is refused.
    #[derive(Default)]
    struct HeapSys {
        /// fd, address, length, mappings out.
        buffers: Mutex<Vec<(Fd, Buf, usize, usize)>>,
    }

    /// A buffer's address (with its provenance, so Miri can check strict provenance).
    #[derive(Clone, Copy, PartialEq)]
    struct Buf(NonNull<u8>);
    // SAFETY: only an address, used under the seam's lock; the memory is shared by design.
    unsafe impl Send for Buf {}

    const ALIGN: usize = 64;

    // SAFETY: `mmap` returns `len` bytes (rounded up to whole words) of a live, aligned heap
    // allocation, which stays allocated until the last `munmap` of it; no other call touches
    // memory.
    unsafe impl crate::SeamHooks for HeapSys {
        type Inner = RefusingSys;
        fn inner(&self) -> &RefusingSys {
            &RefusingSys
        }
        unsafe fn mmap(&self, fd: Fd, len: usize, _: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
            assert_eq!(offset, 0);
            let mut b = self.buffers.lock().unwrap();
            if let Some(e) = b.iter_mut().find(|e| e.0 == fd) {
                if len > e.2 {
                    return Err(Errno::ENOMEM);
                }
                e.3 += 1;
                return Ok(e.1 .0);
            }
            let layout = Layout::from_size_align(len.next_multiple_of(ALIGN), ALIGN).map_err(|_| Errno::EINVAL)?;
            // SAFETY: `len` is non-zero (`Mapping::map_shared` refuses 0).
            let p = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(Errno::ENOMEM)?;
            b.push((fd, Buf(p), len, 1));
            Ok(p)
        }
        unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
            let mut b = self.buffers.lock().unwrap();
            let i = b.iter().position(|e| e.1 == Buf(addr)).ok_or(Errno::EINVAL)?;
            assert!(len <= b[i].2, "munmap of more than was mapped");
            b[i].3 -= 1;
            if b[i].3 == 0 {
                let (_, _, size, _) = b.swap_remove(i);
                let layout = Layout::from_size_align(size.next_multiple_of(ALIGN), ALIGN).unwrap();
                // SAFETY: allocated by `mmap` with this layout; its last mapping is gone.
                unsafe { dealloc(addr.as_ptr(), layout) };
            }
            Ok(())
        }
    }

    impl Drop for HeapSys {
        fn drop(&mut self) {
            assert!(self.buffers.get_mut().unwrap().is_empty(), "a mapping was never unmapped");
        }
    }

    #[test]
    fn copies_round_trip_at_every_alignment() {
        let sys = HeapSys::default();
        let mut a = Mapping::map_shared(&sys, Fd(3), 512, Prot::ReadWrite).unwrap();
        let b = Mapping::map_shared(&sys, Fd(3), 512, Prot::Read).unwrap();
        assert_eq!(a.addr(), b.addr(), "one buffer, two mappings");
        let lens: &[usize] = &[0, 1, 7, 8, 9, 15, 16, 17, 63, 200];
        // Every offset within a word and across the next word boundary (Miri: every offset
        // within a word, which is every alignment).
        let offsets = if cfg!(miri) { WORD } else { WORD * 2 };
        for off in 0..=offsets {
            for &len in lens {
                let data: Vec<u8> = (0..len).map(|i| (i * 31 + off * 7 + 1) as u8).collect();
                a.write_at(off, &data).unwrap();
                let mut back = vec![0u8; len];
                b.read_at(off, &mut back).unwrap();
                assert_eq!(back, data, "offset {off} length {len}");
                // The bytes around the range are untouched: the copy stays inside it.
                let mut edge = [0u8; 1];
                if off > 0 {
                    a.write_at(off - 1, &[0x5A]).unwrap();
                    a.write_at(off, &data).unwrap();
                    b.read_at(off - 1, &mut edge).unwrap();
                    assert_eq!(edge, [0x5A]);
                }
            }
            for len in [0, 1, 7, 8, 9, 17, 100] {
                a.fill(0, 128, 0).unwrap();
                a.fill(off, len, 0xAB).unwrap();
                let mut back = [0u8; 128];
                b.read_at(0, &mut back).unwrap();
                for (i, &x) in back.iter().enumerate() {
                    assert_eq!(x == 0xAB, (off..off + len).contains(&i), "fill offset {off} length {len}, byte {i}");
                }
            }
        }
        // The last bytes of the mapping, up to its end.
        a.write_at(512 - 9, &[9; 9]).unwrap();
        let mut tail = [0u8; 9];
        b.read_at(512 - 9, &mut tail).unwrap();
        assert_eq!(tail, [9; 9]);
        drop(a);
        b.unmap().unwrap();
    }

    #[test]
    fn out_of_range_copies_are_refused_and_touch_nothing() {
        let sys = HeapSys::default();
        assert_eq!(Mapping::map_shared(&sys, Fd(4), 0, Prot::ReadWrite).unwrap_err(), Errno::EINVAL);
        let mut m = Mapping::map_shared(&sys, Fd(4), 64, Prot::ReadWrite).unwrap();
        let r = Mapping::map_shared(&sys, Fd(4), 64, Prot::Read).unwrap();
        let mut buf = [0u8; 65];
        let refused = RangeError { offset: 0, len: 65, mapped: 64 };
        assert_eq!(m.read_at(0, &mut buf), Err(refused));
        assert_eq!(m.write_at(0, &buf), Err(refused));
        assert_eq!(m.fill(0, 65, 1), Err(refused));
        assert_eq!(m.write_at(64, &[1]), Err(RangeError { offset: 64, len: 1, mapped: 64 }));
        assert_eq!(m.read_at(60, &mut buf[..5]), Err(RangeError { offset: 60, len: 5, mapped: 64 }));
        assert_eq!(m.fill(usize::MAX, 2, 1), Err(RangeError { offset: usize::MAX, len: 2, mapped: 64 }), "offset + len overflows");
        assert_eq!(m.read_at(1, &mut []), Ok(()));
        assert_eq!(m.read_at(64, &mut []), Ok(()), "an empty range at the end fits");
        assert!(m.read_at(65, &mut []).is_err());
        // A read-only mapping refuses writes, even in range.
        let mut r = r;
        assert_eq!(r.write_at(0, &[1]), Err(RangeError { offset: 0, len: 1, mapped: 64 }));
        assert_eq!(r.fill(0, 1, 1), Err(RangeError { offset: 0, len: 1, mapped: 64 }));
        let mut all = [0xEEu8; 64];
        r.read_at(0, &mut all).unwrap();
        assert_eq!(all, [0; 64], "no refused call wrote anything");
        assert_eq!(Mapping::map_shared(&sys, Fd(4), 65, Prot::Read).unwrap_err(), Errno::ENOMEM);
        drop((m, r));
    }

    /// Two mappings of one buffer, written through one and read through the other at the same
    /// time from two threads (what a DSP writing a buffer during a launch looks like to the host).
    /// The reader sees only bytes that some writer stored, and every word is whole.
    #[test]
    fn racing_copies_through_two_mappings_are_defined() {
        let rounds = if cfg!(miri) { 16 } else { 2000 };
        let sys = HeapSys::default();
        let mut w = Mapping::map_shared(&sys, Fd(5), 256, Prot::ReadWrite).unwrap();
        let r = Mapping::map_shared(&sys, Fd(5), 256, Prot::Read).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..rounds {
                    w.fill(0, 256, (i % 2) as u8 * 0xFF).unwrap();
                    w.write_at(3, &[(i % 2) as u8 * 0xFF; 17]).unwrap();
                }
            });
            s.spawn(|| {
                let mut buf = [0u8; 256];
                for _ in 0..rounds {
                    r.read_at(0, &mut buf).unwrap();
                    assert!(buf.iter().all(|&x| x == 0 || x == 0xFF));
                }
            });
        });
        drop((w, r));
    }

    /// A mapping moved to another thread and dropped there is unmapped exactly once.
    #[test]
    fn a_mapping_sent_to_another_thread_unmaps_there() {
        let sys = HeapSys::default();
        let mut m = Mapping::map_shared(&sys, Fd(6), 16, Prot::ReadWrite).unwrap();
        m.write_at(0, b"sent").unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut b = [0u8; 4];
                m.read_at(0, &mut b).unwrap();
                assert_eq!(&b, b"sent");
            });
        });
        assert!(sys.buffers.lock().unwrap().is_empty());
    }
}

#[cfg(all(test, feature = "rustix"))]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;
    use crate::{OpenFlags, RustixSys};

    fn shared_file(len: usize) -> crate::OwnedFd {
        let path = std::env::temp_dir().join(std::format!("hexrpc-mapping-{}-{len}", std::process::id()));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let fd = RustixSys.open(&c, OpenFlags::READ_WRITE).unwrap();
        std::fs::remove_file(&path).unwrap();
        fd
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a file-backed mmap: real syscalls
    fn file_backed_copies_round_trip_at_every_alignment() {
        let fd = shared_file(4096);
        let mut a = Mapping::map_shared(RustixSys, fd.raw(), 4096, Prot::ReadWrite).unwrap();
        let b = Mapping::map_shared(RustixSys, fd.raw(), 4096, Prot::Read).unwrap();
        for off in 0..17 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 200] {
                let data: vec::Vec<u8> = (0..len).map(|i| (i * 31 + off * 7 + 1) as u8).collect();
                a.write_at(off, &data).unwrap();
                let mut back = vec![0u8; len];
                b.read_at(off, &mut back).unwrap();
                assert_eq!(back, data, "offset {off} length {len}");
            }
        }
        a.fill(3, 100, 0xAB).unwrap();
        let mut back = [0u8; 102];
        b.read_at(2, &mut back).unwrap();
        assert!(back[0] != 0xAB && back[1..101].iter().all(|&x| x == 0xAB) && back[101] != 0xAB);
        drop((a, b));
        RustixSys.close(fd).unwrap();
    }

    /// Two mappings of one file, written through one and read through the other at the same
    /// time, from safe code: a race on shared memory, but with volatile accesses only (what a
    /// DSP writing a buffer during a launch looks like to the host). The reader sees only bytes
    /// that some writer stored.
    #[test]
    #[cfg_attr(miri, ignore)] // a file-backed mmap: real syscalls
    fn racing_copies_through_two_file_mappings_are_defined() {
        let fd = shared_file(8192);
        let mut w = Mapping::map_shared(RustixSys, fd.raw(), 8192, Prot::ReadWrite).unwrap();
        let r = Mapping::map_shared(RustixSys, fd.raw(), 8192, Prot::Read).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..2000u32 {
                    w.fill(0, 8192, (i % 2) as u8 * 0xFF).unwrap();
                }
            });
            s.spawn(|| {
                let mut buf = [0u8; 8192];
                for _ in 0..2000 {
                    r.read_at(0, &mut buf).unwrap();
                    assert!(buf.iter().all(|&x| x == 0 || x == 0xFF));
                }
            });
        });
        drop((w, r));
        RustixSys.close(fd).unwrap();
    }
}
