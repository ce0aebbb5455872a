//! A descriptor shared by lease: the owner parks an [`OwnedFd`] in a [`FdCell`]; threads take
//! [`FdLease`]s that borrow it for the duration of their calls; the owner takes it back (to
//! close it) only once no lease is out, and refuses new leases from the moment it asked. While a
//! lease is out the number stays open, so it cannot be reused by an unrelated `open`: a thread
//! that still holds a lease on an old channel can never reach a new channel by accident.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::{BorrowedFd, Fd, OwnedFd};

const EMPTY: u64 = 0xFFFF_FFFF;
const FD_MASK: u64 = 0xFFFF_FFFF;
const LEASE_ONE: u64 = 1 << 32;
const LEASE_MASK: u64 = 0x7FFF_FFFF << 32;
const CLOSING: u64 = 1 << 63;

/// A slot for one owned descriptor, lent out by counted leases (no allocation, no lock).
#[derive(Debug)]
pub struct FdCell {
    /// Bits 0..32: the number (`u32::MAX`: empty); 32..63: leases out; 63: closing.
    state: AtomicU64,
}

impl Default for FdCell {
    fn default() -> Self {
        Self::new()
    }
}

impl FdCell {
    /// An empty cell.
    pub const fn new() -> Self {
        FdCell { state: AtomicU64::new(EMPTY) }
    }

    /// Parks `fd` in the cell; gives it back if the cell is not empty.
    pub fn put(&self, fd: OwnedFd) -> Result<(), OwnedFd> {
        let raw = fd.raw().0;
        if raw < 0 {
            return Err(fd);
        }
        match self.state.compare_exchange(EMPTY, raw as u32 as u64, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // The cell owns the number now; `take` gives it back as a new token.
                let _ = fd.into_raw();
                Ok(())
            }
            Err(_) => Err(fd),
        }
    }

    /// A lease on the descriptor, or `None` if the cell is empty or its owner is taking it back.
    pub fn lease(&self) -> Option<FdLease<'_>> {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if cur & FD_MASK == EMPTY || cur & CLOSING != 0 || cur & LEASE_MASK == LEASE_MASK {
                return None;
            }
            match self.state.compare_exchange_weak(cur, cur + LEASE_ONE, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(FdLease { cell: self, fd: Fd((cur & FD_MASK) as u32 as i32) }),
                Err(now) => cur = now,
            }
        }
    }

    /// Refuses new leases from now on and, if no lease is out, empties the cell and returns the
    /// descriptor (to be closed). Otherwise `None`: call again once the leases are back.
    pub fn take(&self) -> Option<OwnedFd> {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if cur & FD_MASK == EMPTY {
                return None;
            }
            let next = if cur & LEASE_MASK == 0 { EMPTY } else { cur | CLOSING };
            match self.state.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if next == EMPTY => {
                    // SAFETY: the number was parked by `put` from an `OwnedFd` and has just left
                    // the cell (no lease is out and none can be made), so ownership passes back
                    // to the caller exactly once.
                    return Some(unsafe { OwnedFd::from_raw(Fd((cur & FD_MASK) as u32 as i32)) });
                }
                Ok(_) => return None,
                Err(now) => cur = now,
            }
        }
    }

    /// True while the owner is taking the descriptor back (leases still out).
    pub fn is_closing(&self) -> bool {
        let s = self.state.load(Ordering::Acquire);
        s & FD_MASK != EMPTY && s & CLOSING != 0
    }

    /// True if no descriptor is parked.
    pub fn is_empty(&self) -> bool {
        self.state.load(Ordering::Acquire) & FD_MASK == EMPTY
    }

    /// Leases out now.
    pub fn leases(&self) -> u32 {
        ((self.state.load(Ordering::Acquire) & LEASE_MASK) >> 32) as u32
    }

    /// The parked number, if any (for logs and comparisons; it proves nothing).
    pub fn raw(&self) -> Option<Fd> {
        match self.state.load(Ordering::Acquire) & FD_MASK {
            EMPTY => None,
            n => Some(Fd(n as u32 as i32)),
        }
    }
}

/// A lease on a [`FdCell`]'s descriptor: the number stays open while it lives.
#[derive(Debug)]
pub struct FdLease<'a> {
    cell: &'a FdCell,
    fd: Fd,
}

impl FdLease<'_> {
    /// The leased descriptor, borrowed for as long as the lease.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the cell keeps the number open (it cannot be taken back) while this lease is
        // out, and the owner lent it, including for retiring, by putting it in the cell.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    /// The raw number.
    pub fn raw(&self) -> Fd {
        self.fd
    }
}

impl Drop for FdLease<'_> {
    fn drop(&mut self) {
        self.cell.state.fetch_sub(LEASE_ONE, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(n: i32) -> OwnedFd {
        // SAFETY: these tests never close or use the numbers; they only move tokens around.
        unsafe { OwnedFd::from_raw(Fd(n)) }
    }

    #[test]
    fn leases_keep_the_number_until_they_are_back() {
        let c = FdCell::new();
        assert!(c.lease().is_none() && c.take().is_none() && c.is_empty());
        c.put(token(7)).unwrap();
        assert_eq!(c.put(token(8)).unwrap_err().raw(), Fd(8), "occupied");
        let a = c.lease().unwrap();
        let b = c.lease().unwrap();
        assert_eq!((a.raw(), b.fd().raw(), c.leases()), (Fd(7), Fd(7), 2));
        assert!(c.take().is_none(), "leases out");
        assert!(c.is_closing());
        assert!(c.lease().is_none(), "no new lease while closing");
        drop(a);
        assert!(c.take().is_none());
        drop(b);
        assert_eq!(c.take().map(OwnedFd::into_raw), Some(Fd(7)));
        assert!(c.is_empty() && !c.is_closing());
        c.put(token(9)).unwrap();
        assert_eq!(c.raw(), Some(Fd(9)));
        assert_eq!(c.take().map(OwnedFd::into_raw), Some(Fd(9)));
        assert!(c.put(token(-1)).is_err());
    }

    /// Leases taken on other threads while the owner takes the descriptor back: once `take`
    /// has returned it, no lease is out and none can be taken.
    #[test]
    fn take_never_returns_while_a_lease_is_out() {
        extern crate std;
        use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        // Miri checks every interleaving it runs for data races, at a far higher cost per step.
        let (rounds, tries) = if cfg!(miri) { (3, 40) } else { (50, 2000) };
        for round in 0..rounds {
            let c = FdCell::new();
            c.put(token(100 + round)).unwrap();
            let out = AtomicU32::new(0);
            let taken = AtomicBool::new(false);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..tries {
                            if let Some(l) = c.lease() {
                                out.fetch_add(1, Ordering::SeqCst);
                                assert!(!taken.load(Ordering::SeqCst), "a lease while the owner holds the fd");
                                assert_eq!(l.raw(), Fd(100 + round));
                                out.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                    });
                }
                loop {
                    if let Some(fd) = c.take() {
                        taken.store(true, Ordering::SeqCst);
                        assert_eq!(out.load(Ordering::SeqCst), 0);
                        assert_eq!(fd.into_raw(), Fd(100 + round));
                        break;
                    }
                    std::thread::yield_now();
                }
            });
            assert!(c.is_empty() && c.lease().is_none());
        }
    }
}
