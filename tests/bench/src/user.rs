//! Simulated `copy_from_user` / `copy_to_user`.
//!
//! The bench runs in the same address space as the code under test, so "user memory" is simply
//! the caller's memory. A real kernel detects a bad pointer by faulting; the bench cannot fault
//! safely, so it models a bad pointer as one that is null, below the first page (4096) or whose
//! range leaves the 48-bit user address space. Any other pointer is trusted, which is what the
//! `Syscalls::ioctl` contract promises. This is the one place where the bench is weaker than a
//! kernel: a dangling pointer above 4096 is not detected (it would be undefined behaviour in the
//! caller's `unsafe` block anyway).

/// Lowest address the bench treats as mapped user memory.
pub(crate) const USER_MIN: u64 = 4096;
/// First address above the user address space (48-bit virtual addresses).
pub(crate) const USER_END: u64 = 1 << 48;

/// True if `[addr, addr + len)` is a plausible user range (a zero-length range always is).
pub(crate) fn range_ok(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    addr >= USER_MIN && addr.checked_add(len).is_some_and(|end| end <= USER_END)
}

/// Copies `len` bytes from user address `addr`; `None` models a fault.
///
/// # Safety
///
/// If the range passes [`range_ok`], it must be readable memory (the ioctl caller's contract).
pub(crate) unsafe fn copy_from_user(addr: u64, len: usize) -> Option<Vec<u8>> {
    if !range_ok(addr, len as u64) {
        return None;
    }
    let mut v = vec![0u8; len];
    if len > 0 {
        // SAFETY: the caller guarantees that a plausible range is readable; `v` is a distinct
        // allocation of `len` bytes.
        unsafe { core::ptr::copy_nonoverlapping(addr as usize as *const u8, v.as_mut_ptr(), len) };
    }
    Some(v)
}

/// Copies `data` to user address `addr`; `false` models a fault.
///
/// # Safety
///
/// If the range passes [`range_ok`], it must be writable memory (the ioctl caller's contract).
pub(crate) unsafe fn copy_to_user(addr: u64, data: &[u8]) -> bool {
    if !range_ok(addr, data.len() as u64) {
        return false;
    }
    if !data.is_empty() {
        // SAFETY: the caller guarantees that a plausible range is writable; `data` is a distinct
        // Rust buffer.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len()) };
    }
    true
}

/// Reads a `T` from the first `size_of::<T>()` bytes at `addr`.
///
/// # Safety
///
/// As for [`copy_from_user`].
pub(crate) unsafe fn read_struct<T: zerocopy::FromBytes>(addr: u64) -> Option<T> {
    // SAFETY: passed on from the caller.
    let bytes = unsafe { copy_from_user(addr, core::mem::size_of::<T>()) }?;
    T::read_from_bytes(&bytes).ok()
}

/// Decodes little-endian `u32` words.
pub(crate) fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ranges_fault() {
        assert!(range_ok(0, 0));
        assert!(!range_ok(0, 1));
        assert!(!range_ok(4095, 1));
        assert!(range_ok(4096, 1));
        assert!(!range_ok(u64::MAX - 2, 8));
        assert!(!range_ok(USER_END - 4, 8));
        // SAFETY: null is refused before any access.
        assert!(unsafe { copy_from_user(0, 4) }.is_none());
        let mut x = 5u32;
        // SAFETY: `x` is a live u32.
        let got = unsafe { read_struct::<u32>(&mut x as *mut u32 as u64) };
        assert_eq!(got, Some(5));
        // SAFETY: `x` is live and writable.
        assert!(unsafe { copy_to_user(&mut x as *mut u32 as u64, &9u32.to_le_bytes()) });
        assert_eq!(x, 9);
        assert_eq!(words(&[1, 0, 0, 0, 2, 0, 0, 0, 9]), vec![1, 2]);
    }
}
