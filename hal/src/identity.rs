//! The DSP identities this process's FastRPC channels hold, per kernel.
//!
//! The DSP keys user processes by the caller's identity, not by the open file: the opener's
//! process id, which the downstream driver captures at open (`fastrpc_device_open`) and sends
//! with every message (`fastrpc_invoke_send`), with bit 30 set after
//! `SETMODE(FASTRPC_MODE_SESSION)`; mainline before per-session client ids has the process id
//! only. A create for an identity that has a live process is refused, and the release on a
//! file's close names only the identity, so closing any file of an identity ends that
//! identity's process (docs/kernel-rules.md R3).
//!
//! So a session chooses the identity of a new channel before it sends INIT, from this table:
//! the identities held by every channel of this process on the same kernel, whichever session
//! opened it. A channel holds its identity from the INIT that created its DSP process until its
//! final close has returned (the kernel's release then has named the identity). Choosing up
//! front means no INIT is sent for an identity another session of ours holds, so no FastRPC file
//! is ever INITed twice (a second INIT on one file leaks kernel memory and a channel reference
//! on the comma three's driver, R13) and no refused file is left open.
//!
//! The table is keyed by [`Syscalls::kernel_instance`] (one kernel per process on a device;
//! the bench runs many in one process). It has room for [`KERNELS`] kernels; past that a kernel
//! is not tracked, and a second session on it meets the DSP's refusal instead (the
//! fallback of `stages::create_process`), which is logged.

use core::sync::atomic::{AtomicBool, Ordering};

use hexrpc_bsp::{Board, KernelAbi};
use hexrpc_drivers::Syscalls;

use crate::sync;

/// The identity a channel's DSP process is created under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Identity {
    /// The process id.
    Plain,
    /// The process id with the session bit (downstream only).
    Session,
}

impl Identity {
    /// 0 for [`Plain`](Identity::Plain), 1 for [`Session`](Identity::Session).
    pub(crate) const fn index(self) -> usize {
        match self {
            Identity::Plain => 0,
            Identity::Session => 1,
        }
    }

    /// The identity of index `i & 1`.
    pub(crate) const fn from_index(i: u8) -> Identity {
        if i & 1 == 0 {
            Identity::Plain
        } else {
            Identity::Session
        }
    }
}

/// Kernels the table keeps at once.
pub(crate) const KERNELS: usize = 64;

/// `(kernel instance, live channels per identity)`; an entry with both counts 0 is free.
static TABLE: sync::Mutex<[(u64, [u32; 2]); KERNELS]> = sync::Mutex::new([(0, [0; 2]); KERNELS]);
/// Logged once: a kernel the table had no room for.
static FULL_LOGGED: AtomicBool = AtomicBool::new(false);

/// True if a channel of this process on `sys`'s kernel holds `id` (tests).
#[cfg(test)]
pub(crate) fn held<S: Syscalls + ?Sized>(sys: &S, id: Identity) -> bool {
    let k = sys.kernel_instance();
    TABLE.lock().iter().any(|(key, n)| *key == k && n[id.index()] > 0)
}

/// The identity a new channel on `board` should be created under: the process id if no channel
/// of ours holds it, else (downstream) the session bit if none holds that; `None` if every
/// identity this process can have on the driver is held by a channel of ours. (Informative:
/// [`reserve`] chooses and takes under one hold of the table.)
#[cfg(test)]
pub(crate) fn choose<S: Syscalls + ?Sized>(sys: &S, board: &Board) -> Option<Identity> {
    if !held(sys, Identity::Plain) {
        Some(Identity::Plain)
    } else if board.abi == KernelAbi::DownstreamMsm && !held(sys, Identity::Session) {
        Some(Identity::Session)
    } else {
        None
    }
}

/// An identity taken from the table for a channel being made, from its choice until its INIT:
/// given back when dropped, unless [`commit`](Reserved::commit) hands it to the channel (which
/// gives it back after its final close). Reserving when choosing means two sessions starting at
/// once never choose the same identity (when they were chosen and taken apart, the second's INIT was refused and its file,
/// session and init memory left for good).
#[must_use]
pub(crate) struct Reserved<S: Syscalls> {
    sys: S,
    id: Identity,
    live: bool,
}

impl<S: Syscalls> Reserved<S> {
    /// The identity reserved.
    pub(crate) fn identity(&self) -> Identity {
        self.id
    }

    /// The channel's DSP process was created: the identity is the channel's from now on.
    pub(crate) fn commit(mut self) -> Identity {
        self.live = false;
        self.id
    }
}

impl<S: Syscalls> Drop for Reserved<S> {
    fn drop(&mut self) {
        if self.live {
            give_back(&self.sys, self.id);
        }
    }
}

impl<S: Syscalls> core::fmt::Debug for Reserved<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reserved").field("id", &self.id).field("live", &self.live).finish()
    }
}

/// Chooses the identity for a new channel on `board` as [`choose`] does and takes it, under one
/// hold of the table's lock; `None` if every identity this process can have is held.
pub(crate) fn reserve<S: Syscalls + Clone>(sys: &S, board: &Board) -> Option<Reserved<S>> {
    let candidates: &[Identity] =
        if board.abi == KernelAbi::DownstreamMsm { &[Identity::Plain, Identity::Session] } else { &[Identity::Plain] };
    take_first_free(sys, candidates)
}

/// Takes `id` if no channel of ours holds it, under one hold of the table's lock.
pub(crate) fn reserve_exactly<S: Syscalls + Clone>(sys: &S, id: Identity) -> Option<Reserved<S>> {
    take_first_free(sys, &[id])
}

fn take_first_free<S: Syscalls + Clone>(sys: &S, candidates: &[Identity]) -> Option<Reserved<S>> {
    let k = sys.kernel_instance();
    let mut t = TABLE.lock();
    let entry = t.iter().position(|(key, n)| *key == k && n != &[0, 0]);
    let counts = entry.map_or([0, 0], |i| t[i].1);
    let id = *candidates.iter().find(|id| counts[id.index()] == 0)?;
    match entry.or_else(|| t.iter().position(|(_, n)| n == &[0, 0])) {
        Some(i) => {
            t[i].0 = k;
            t[i].1[id.index()] = t[i].1[id.index()].saturating_add(1);
        }
        None => {
            drop(t);
            if !FULL_LOGGED.swap(true, Ordering::Relaxed) {
                log::warn!("the identity table holds {KERNELS} kernels already; channels of another one are not tracked");
            }
        }
    }
    Some(Reserved { sys: sys.clone(), id, live: true })
}

/// A channel on `sys`'s kernel that held `id` has been closed (its kernel release returned).
pub(crate) fn give_back<S: Syscalls + ?Sized>(sys: &S, id: Identity) {
    let k = sys.kernel_instance();
    let mut t = TABLE.lock();
    if let Some(e) = t.iter_mut().find(|(key, n)| *key == k && n[id.index()] > 0) {
        e.1[id.index()] -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hexrpc_bench::Bench;

    #[test]
    fn identities_are_held_per_kernel_until_given_back() {
        // Two benches are two kernels.
        let (a, b) = (Bench::for_board(&hexrpc_bsp::BENCH), Bench::for_board(&hexrpc_bsp::BENCH));
        assert_ne!(a.kernel_instance(), b.kernel_instance());
        let down = &hexrpc_bsp::BENCH;
        let up = &hexrpc_bsp::BENCH_UPSTREAM;
        assert_eq!(choose(&a, down), Some(Identity::Plain));
        let plain = reserve(&a, down).unwrap().commit();
        assert_eq!(plain, Identity::Plain);
        assert!(held(&a, Identity::Plain) && !held(&b, Identity::Plain), "kept per kernel");
        assert_eq!(choose(&a, down), Some(Identity::Session), "downstream: the session bit next");
        assert_eq!(choose(&a, up), None, "upstream has one identity per process");
        assert!(reserve(&a, up).is_none());
        assert_eq!(choose(&a, down), Some(Identity::Session));
        assert_eq!(choose(&b, down), Some(Identity::Plain), "another kernel is free");
        {
            let r = reserve(&a, down).unwrap();
            assert_eq!(r.identity(), Identity::Session);
            assert_eq!(choose(&a, down), None, "a reservation holds the identity");
            assert!(reserve(&a, down).is_none() && reserve_exactly(&a, Identity::Session).is_none());
        }
        assert_eq!(choose(&a, down), Some(Identity::Session), "a dropped reservation gives it back");
        let session = reserve_exactly(&a, Identity::Session).unwrap().commit();
        assert_eq!(choose(&a, down), None);
        give_back(&a, plain);
        give_back(&a, session);
        assert_eq!(choose(&a, down), Some(Identity::Plain));
        give_back(&a, Identity::Session);
        assert!(!held(&a, Identity::Session), "a give-back without a hold changes nothing");
    }

    #[test]
    fn concurrent_reservations_never_share_an_identity() {
        extern crate std;
        let a = Bench::for_board(&hexrpc_bsp::BENCH);
        for _ in 0..200 {
            let barrier = std::sync::Barrier::new(8);
            let got: std::vec::Vec<Option<Reserved<Bench>>> = std::thread::scope(|s| {
                let hs: std::vec::Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            reserve(&a, &hexrpc_bsp::BENCH)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let ids: std::vec::Vec<Identity> = got.iter().flatten().map(Reserved::identity).collect();
            assert_eq!(ids.len(), 2, "{ids:?}");
            assert_ne!(ids[0], ids[1]);
        }
        assert_eq!(choose(&a, &hexrpc_bsp::BENCH), Some(Identity::Plain), "every reservation given back");
    }
}
