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

/// True if a channel of this process on `sys`'s kernel holds `id`.
pub(crate) fn held<S: Syscalls + ?Sized>(sys: &S, id: Identity) -> bool {
    let k = sys.kernel_instance();
    TABLE.lock().iter().any(|(key, n)| *key == k && n[id.index()] > 0)
}

/// The identity a new channel on `board` should be created under: the process id if no channel
/// of ours holds it, else (downstream) the session bit if none holds that; `None` if every
/// identity this process can have on the driver is held by a channel of ours.
pub(crate) fn choose<S: Syscalls + ?Sized>(sys: &S, board: &Board) -> Option<Identity> {
    if !held(sys, Identity::Plain) {
        Some(Identity::Plain)
    } else if board.abi == KernelAbi::DownstreamMsm && !held(sys, Identity::Session) {
        Some(Identity::Session)
    } else {
        None
    }
}

/// A channel on `sys`'s kernel now holds `id` (its DSP process was created).
pub(crate) fn take<S: Syscalls + ?Sized>(sys: &S, id: Identity) {
    let k = sys.kernel_instance();
    let mut t = TABLE.lock();
    let slot = match t.iter().position(|(key, n)| *key == k && n != &[0, 0]) {
        Some(i) => Some(i),
        None => t.iter().position(|(_, n)| n == &[0, 0]),
    };
    match slot {
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
        take(&a, Identity::Plain);
        assert!(held(&a, Identity::Plain) && !held(&b, Identity::Plain), "kept per kernel");
        assert_eq!(choose(&a, down), Some(Identity::Session), "downstream: the session bit next");
        assert_eq!(choose(&a, up), None, "upstream has one identity per process");
        assert_eq!(choose(&b, down), Some(Identity::Plain), "another kernel is free");
        take(&a, Identity::Session);
        assert_eq!(choose(&a, down), None);
        take(&a, Identity::Plain);
        give_back(&a, Identity::Plain);
        assert!(held(&a, Identity::Plain), "two channels held it, one is closed");
        give_back(&a, Identity::Plain);
        give_back(&a, Identity::Session);
        assert_eq!(choose(&a, down), Some(Identity::Plain));
        give_back(&a, Identity::Session);
        assert!(!held(&a, Identity::Session), "a give-back without a hold changes nothing");
    }
}
