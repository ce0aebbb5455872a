//! [`FixedVec`]: a vector of `Copy` values in fixed inline capacity whose unused capacity is never
//! written, for argument lists that are built on every call.
//!
//! `heapless::Vec::new()` is a `const fn`; a struct built from several of them is folded into one
//! constant by the compiler and materialised whole on every construction (a memset or memcpy of
//! the full capacity, uninitialised bytes included). A launch builds such a struct per call, so
//! its storage is this type instead, whose constructor leaves the buffer uninitialised.

use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Deref;

/// The values do not fit in the remaining capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the fixed capacity is used up")
    }
}

/// A vector of at most `N` `Copy` values stored inline. Only the first [`len`](Deref) entries are
/// ever initialised or read.
///
/// All-zero bytes are an empty vector ([`FromZeros`](zerocopy::FromZeros)), so a value that holds
/// large ones can be made in place in zeroed memory (`FromZeros::new_box_zeroed`) rather than
/// built on a stack and moved.
#[derive(zerocopy::FromZeros)]
pub struct FixedVec<T: Copy, const N: usize> {
    len: usize,
    buf: [MaybeUninit<T>; N],
}

impl<T: Copy, const N: usize> FixedVec<T, N> {
    /// An empty vector. Nothing of the capacity is written.
    #[inline(always)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        FixedVec { len: 0, buf: uninit_array() }
    }

    /// The capacity, `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Appends `v`, or gives it back if the vector is full.
    #[inline(always)]
    pub fn push(&mut self, v: T) -> Result<(), T> {
        self.len = put(&mut self.buf, self.len, v)?;
        Ok(())
    }

    /// Appends every value of `s`, or nothing if they do not all fit.
    #[inline(always)]
    pub fn extend_from_slice(&mut self, s: &[T]) -> Result<(), Full> {
        self.len = put_all(&mut self.buf, self.len, s)?;
        Ok(())
    }

    /// Empties the vector and returns a [`Writer`] that appends to it: the length is kept in the
    /// writer (a register, where a loop of [`push`](Self::push)es reloads and stores it for
    /// every value) and stored back when the writer is dropped.
    #[inline(always)]
    pub fn rewrite(&mut self) -> Writer<'_, T, N> {
        self.len = 0;
        Writer { buf: &mut self.buf, len: &mut self.len, at: 0 }
    }

    /// A [`Writer`] that appends to the values already there (see [`rewrite`](Self::rewrite)).
    #[inline(always)]
    pub fn append(&mut self) -> Writer<'_, T, N> {
        let at = self.len;
        Writer { buf: &mut self.buf, len: &mut self.len, at }
    }

    /// Keeps the first `n` values (all of them if there are fewer).
    #[inline(always)]
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// The values, to change in place.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; the borrow of `self` is exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<T>(), self.len) }
    }

    /// Removes every value (nothing is written).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The values.
    #[inline(always)]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `len <= N` (only `push` and `extend_from_slice` grow it, each after writing the
        // entries it covers), so entries `0..len` are initialised; `MaybeUninit<T>` has the
        // layout of `T`.
        unsafe { core::slice::from_raw_parts(self.buf.as_ptr().cast::<T>(), self.len) }
    }
}

/// Appends to a [`FixedVec`] (see [`FixedVec::rewrite`]); the values pushed are the vector's
/// when the writer is dropped.
pub struct Writer<'v, T: Copy, const N: usize> {
    buf: &'v mut [MaybeUninit<T>; N],
    len: &'v mut usize,
    at: usize,
}

impl<T: Copy, const N: usize> Writer<'_, T, N> {
    /// Appends `v`, or gives it back if the vector is full.
    #[inline(always)]
    pub fn push(&mut self, v: T) -> Result<(), T> {
        self.at = put(self.buf, self.at, v)?;
        Ok(())
    }
}

impl<T: Copy, const N: usize> Writer<'_, T, N> {
    /// Appends every value of `s`, or nothing if they do not all fit.
    #[inline(always)]
    pub fn extend_from_slice(&mut self, s: &[T]) -> Result<(), Full> {
        self.at = put_all(self.buf, self.at, s)?;
        Ok(())
    }
}

/// Copies `s` to entries `at..` of `buf` and returns the entry after them, or `Full` (nothing
/// written) if they do not all fit.
#[inline(always)]
fn put_all<T: Copy, const N: usize>(buf: &mut [MaybeUninit<T>; N], at: usize, s: &[T]) -> Result<usize, Full> {
    let end = at.checked_add(s.len()).ok_or(Full)?;
    let dst = buf.get_mut(at..end).ok_or(Full)?;
    // SAFETY: `dst` and `s` have the same length (`end - at == s.len()`), `dst` is exclusively
    // borrowed from `buf` and `s` is a shared slice, so they do not overlap; `MaybeUninit<T>`
    // has the layout of `T`, and `T: Copy` has no drop to skip.
    unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), dst.as_mut_ptr().cast::<T>(), s.len()) };
    Ok(end)
}

/// Writes `v` at entry `at` of `buf` and returns the next entry, or gives `v` back at the end.
#[inline(always)]
fn put<T: Copy, const N: usize>(buf: &mut [MaybeUninit<T>; N], at: usize, v: T) -> Result<usize, T> {
    match buf.get_mut(at) {
        Some(slot) => {
            *slot = MaybeUninit::new(v);
            Ok(at + 1)
        }
        None => Err(v),
    }
}

impl<T: Copy, const N: usize> Drop for Writer<'_, T, N> {
    #[inline(always)]
    fn drop(&mut self) {
        // Entries `0..at` were written by `push` (which never passes `N`).
        *self.len = self.at;
    }
}

#[inline(always)]
fn uninit_array<T, const N: usize>() -> [MaybeUninit<T>; N] {
    // SAFETY: an array of `MaybeUninit` needs no initialisation: every bit pattern, including
    // uninitialised memory, is a valid `[MaybeUninit<T>; N]`.
    unsafe { MaybeUninit::<[MaybeUninit<T>; N]>::uninit().assume_init() }
}

impl<T: Copy, const N: usize> Deref for FixedVec<T, N> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy, const N: usize> core::ops::DerefMut for FixedVec<T, N> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

impl<'v, T: Copy, const N: usize> IntoIterator for &'v FixedVec<T, N> {
    type Item = &'v T;
    type IntoIter = core::slice::Iter<'v, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T: Copy, const N: usize> Clone for FixedVec<T, N> {
    fn clone(&self) -> Self {
        let mut v = FixedVec::new();
        // The same capacity: it fits.
        let _ = v.extend_from_slice(self.as_slice());
        v
    }
}

impl<T: Copy + fmt::Debug, const N: usize> fmt::Debug for FixedVec<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq for FixedVec<T, N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_up_to_capacity_and_refuses_past_it() {
        let mut v = FixedVec::<u32, 3>::new();
        assert!(v.is_empty());
        assert_eq!(v.push(1), Ok(()));
        assert_eq!(v.extend_from_slice(&[2, 3]), Ok(()));
        assert_eq!(v.push(4), Err(4));
        assert_eq!(v.extend_from_slice(&[5]), Err(Full));
        assert_eq!(&v[..], &[1, 2, 3]);
        let c = v.clone();
        v.clear();
        assert!(v.is_empty());
        assert_eq!(c.as_slice(), &[1, 2, 3]);
        assert_eq!(v.extend_from_slice(&[7, 8, 9, 10]), Err(Full), "all or nothing");
        let mut full = c.clone();
        {
            let mut w = full.rewrite();
            assert_eq!((w.push(4), w.push(5), w.push(6), w.push(7)), (Ok(()), Ok(()), Ok(()), Err(7)));
        }
        assert_eq!(full.as_slice(), &[4, 5, 6], "the writer's values, its length stored on drop");
        full.as_mut_slice()[1] = 50;
        full[2] += 1;
        assert_eq!(full.as_slice(), &[4, 50, 7]);
        full.truncate(9);
        assert_eq!(full.len(), 3, "truncating past the end keeps everything");
        full.truncate(1);
        assert_eq!(full.as_slice(), &[4]);
        drop(full.rewrite());
        assert!(full.is_empty());
        assert!(v.is_empty());
        extern crate std;
        assert_eq!(std::format!("{c:?}"), "[1, 2, 3]");
    }
}
