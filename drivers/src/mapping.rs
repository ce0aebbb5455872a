use core::fmt;
use core::ptr::NonNull;

use crate::{Errno, Fd, Prot, Syscalls};

/// A shared mapping of a buffer fd (an ION dma-buf), unmapped when dropped.
///
/// The memory is shared with other agents: the DSP, and other mappings of the same buffer (two
/// `Mapping`s of one fd, in this process or another). It is treated as *volatile memory*, in the
/// spirit of rust-vmm's `VolatileSlice`: no Rust reference into it is ever handed out, and
/// [`read_at`](Mapping::read_at), [`write_at`](Mapping::write_at) and [`fill`](Mapping::fill)
/// copy with volatile accesses only, bounds-checked against the mapped length. A copy that races
/// with another agent's write (through a second mapping, or the DSP) therefore reads some mix of
/// old and new bytes — the contents are unspecified — but it is not undefined behaviour, since
/// the compiler never assumes the memory is unchanged or exclusively ours.
pub struct Mapping<S: Syscalls> {
    sys: S,
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
}

// SAFETY: the mapping is plain shared memory owned by this value; moving it to another thread
// moves the obligation to unmap it, which `S: Send` allows.
unsafe impl<S: Syscalls + Send> Send for Mapping<S> {}
// SAFETY: `&Mapping` only permits volatile copies out of the mapping and address queries; the
// memory is accessed volatilely on every path, so concurrent accesses through other mappings or
// threads are races on shared memory the compiler does not reason about, not data races on Rust
// objects.
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
        Ok(Mapping { sys, ptr, len, prot })
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

    /// The syscall implementation this mapping was made with.
    pub fn sys(&self) -> &S {
        &self.sys
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
        // SAFETY: `[offset, offset + out.len())` lies inside the live mapping (checked above).
        unsafe { volatile_read(self.ptr.as_ptr().add(offset), out) };
        Ok(())
    }

    /// Copies `data` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), RangeError> {
        self.check(offset, data.len())?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len: data.len(), mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable mapping (checked above).
        unsafe { volatile_write(self.ptr.as_ptr().add(offset), data) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), RangeError> {
        self.check(offset, len)?;
        if self.prot == Prot::Read {
            return Err(RangeError { offset, len, mapped: self.len });
        }
        // SAFETY: the range is inside the live, writable mapping (checked above).
        unsafe { volatile_fill(self.ptr.as_ptr().add(offset), byte, len) };
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

/// Bytes before `p` reaches 8-byte alignment, at most `len`.
fn head(p: *const u8, len: usize) -> usize {
    (p.align_offset(WORD)).min(len)
}

/// Copies `out.len()` bytes from shared memory at `src` with volatile loads (aligned 8-byte
/// words in the middle, bytes at the ends).
///
/// # Safety
///
/// `[src, src + out.len())` must be readable memory that stays mapped during the call.
unsafe fn volatile_read(src: *const u8, out: &mut [u8]) {
    let n = out.len();
    let h = head(src, n);
    let mut i = 0;
    while i < h {
        // SAFETY: `src + i` is inside the range (caller's contract).
        out[i] = unsafe { core::ptr::read_volatile(src.add(i)) };
        i += 1;
    }
    while i + WORD <= n {
        // SAFETY: inside the range, and 8-byte aligned (we advanced to alignment above).
        let w = unsafe { core::ptr::read_volatile(src.add(i).cast::<u64>()) };
        out[i..i + WORD].copy_from_slice(&w.to_ne_bytes());
        i += WORD;
    }
    while i < n {
        // SAFETY: inside the range.
        out[i] = unsafe { core::ptr::read_volatile(src.add(i)) };
        i += 1;
    }
}

/// Copies `data` into shared memory at `dst` with volatile stores.
///
/// # Safety
///
/// `[dst, dst + data.len())` must be writable memory that stays mapped during the call.
unsafe fn volatile_write(dst: *mut u8, data: &[u8]) {
    let n = data.len();
    let h = head(dst, n);
    let mut i = 0;
    while i < h {
        // SAFETY: `dst + i` is inside the range (caller's contract).
        unsafe { core::ptr::write_volatile(dst.add(i), data[i]) };
        i += 1;
    }
    while i + WORD <= n {
        let mut w = [0u8; WORD];
        w.copy_from_slice(&data[i..i + WORD]);
        // SAFETY: inside the range, and 8-byte aligned.
        unsafe { core::ptr::write_volatile(dst.add(i).cast::<u64>(), u64::from_ne_bytes(w)) };
        i += WORD;
    }
    while i < n {
        // SAFETY: inside the range.
        unsafe { core::ptr::write_volatile(dst.add(i), data[i]) };
        i += 1;
    }
}

/// Sets `len` bytes of shared memory at `dst` to `byte` with volatile stores.
///
/// # Safety
///
/// As for [`volatile_write`].
unsafe fn volatile_fill(dst: *mut u8, byte: u8, len: usize) {
    let h = head(dst, len);
    let word = u64::from_ne_bytes([byte; WORD]);
    let mut i = 0;
    while i < h {
        // SAFETY: inside the range (caller's contract).
        unsafe { core::ptr::write_volatile(dst.add(i), byte) };
        i += 1;
    }
    while i + WORD <= len {
        // SAFETY: inside the range, and 8-byte aligned.
        unsafe { core::ptr::write_volatile(dst.add(i).cast::<u64>(), word) };
        i += WORD;
    }
    while i < len {
        // SAFETY: inside the range.
        unsafe { core::ptr::write_volatile(dst.add(i), byte) };
        i += 1;
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
    fn volatile_copies_round_trip_at_every_alignment() {
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
    fn racing_copies_through_two_mappings_are_defined() {
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
