//! Ending a channel without blocking the caller for longer than the board allows (std).
//!
//! The last close of a FastRPC file sends the kernel's "release process" message and waits for
//! the DSP's answer before anything is freed: downstream uninterruptibly and without a limit
//! (`fastrpc_device_release` → `fastrpc_file_free` → `fastrpc_release_current_dsp_process`),
//! upstream for up to 10 s (`fastrpc_device_release`). The process exit the HAL sends first
//! (handle 4) is an ordinary call that a DSP which stopped answering never returns from. So,
//! once a session is given a [`ChannelEnder`] (`Session::end_channels_off_thread`, which
//! `hexrpc-runtime`'s `ServedSession` calls), the process exit is interrupted at a bound, and
//! the final close runs on a thread of its own that may block; the caller waits for it at most
//! the board's bound and then goes on. Until that close returns, the channel counts as open for
//! the lease bookkeeping (what it may map stays kept) and its identity as taken.

extern crate std;

use std::boxed::Box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hexrpc_bsp::Board;
use hexrpc_drivers::{adsprpc, listener as calls, BorrowedFd, OwnedFd, Syscalls};

use crate::call::Call;
use crate::driver;
use crate::identity::Identity;

/// How often a bounded wait looks at a close running elsewhere.
const POLL: Duration = Duration::from_millis(2);

/// A close started on its own thread: done once the kernel's release returned.
pub(crate) type Closing = Arc<AtomicBool>;

/// The two operations that may block in the kernel, as the session runs them when it can use
/// threads (the seam is `Send + Sync + 'static` there).
pub(crate) struct ChannelEnder {
    /// Process exit (handle 4) on a channel, interrupted and abandoned after the bound.
    exit: Box<dyn Fn(BorrowedFd<'_>, Duration) + Send + Sync>,
    /// The final close, on a new thread; `None` if no thread could be started (then the
    /// descriptor was closed on the caller's thread). Once the close has returned, the
    /// channel's identity is given back to the process's table (`identity`).
    close: Box<dyn Fn(OwnedFd, Identity) -> Option<Closing> + Send + Sync>,
}

impl ChannelEnder {
    pub(crate) fn new<S: Syscalls + Clone + Send + Sync + 'static>(sys: &S, board: &'static Board) -> ChannelEnder {
        let exit_sys = sys.clone();
        let close_sys = sys.clone();
        ChannelEnder {
            exit: Box::new(move |fd, bound| {
                let r = crate::deadline::run(&exit_sys, bound, |fired| {
                    let mut args = Call::<'_, 1>::new(calls::CURRENT_PROCESS_EXIT.method())
                        .map_err(|_| crate::HalError::new(crate::Stage::Recover, crate::Cause::Invalid))?;
                    let abandon = || fired.load(Ordering::Acquire);
                    driver::invoke_handles(&exit_sys, board, fd, adsprpc::CURRENT_PROCESS_HANDLE, &mut args, &abandon)
                        .map_err(|e| crate::HalError::sys(crate::Stage::Recover, e))
                });
                if let Err(e) = r {
                    log::debug!("process exit (handle 4) on teardown: {e}");
                }
            }),
            close: Box::new(move |fd, identity| {
                let done: Closing = Arc::new(AtomicBool::new(false));
                let flag = done.clone();
                let sys = close_sys.clone();
                let n = fd.raw().0;
                // The descriptor travels in a slot so that a failed spawn can still close it here.
                let slot = Arc::new(std::sync::Mutex::new(Some(fd)));
                let theirs = slot.clone();
                let spawned = std::thread::Builder::new().name("hexrpc-close".into()).spawn(move || {
                    let fd = theirs.lock().ok().and_then(|mut g| g.take());
                    if let Some(fd) = fd {
                        if let Err(e) = sys.close(fd) {
                            log::warn!("close of channel fd {n} failed: {e}");
                        }
                        crate::identity::give_back(&sys, identity);
                    }
                    flag.store(true, Ordering::Release);
                });
                match spawned {
                    Ok(_) => Some(done),
                    Err(e) => {
                        log::warn!("no thread for the close of channel fd {n} ({e}); closing it here");
                        let fd = slot.lock().ok().and_then(|mut g| g.take());
                        if let Some(fd) = fd {
                            let _ = close_sys.close(fd);
                            crate::identity::give_back(&close_sys, identity);
                        }
                        None
                    }
                }
            }),
        }
    }

    /// Process exit on `fd`, abandoned after `bound`.
    pub(crate) fn exit(&self, fd: BorrowedFd<'_>, bound: Duration) {
        (self.exit)(fd, bound)
    }

    /// Starts the final close of `fd`, a channel that holds `identity`, on its own thread.
    pub(crate) fn close(&self, fd: OwnedFd, identity: Identity) -> Option<Closing> {
        (self.close)(fd, identity)
    }
}

/// Waits at most `bound` for `closing` to finish; true if it did.
pub(crate) fn wait(closing: &Closing, bound: Duration) -> bool {
    let start = Instant::now();
    while !closing.load(Ordering::Acquire) {
        if start.elapsed() >= bound {
            return false;
        }
        std::thread::sleep(POLL);
    }
    true
}
