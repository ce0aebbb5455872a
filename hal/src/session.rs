//! The ready session: buffer allocation, libraries, invokes, recovery.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use core::time::Duration;

use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{adsprpc, listener, BorrowedFd, Fd, FdCell, FdLease, Syscalls};

use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;
use crate::ion::{IonLease, RawLease};
use crate::stages::{self, Channel, IonOpened};
use crate::sync;

/// Most libraries open at once on one session.
pub const MAX_LIBRARIES: usize = 16;
/// Longest library name (the unique name the DSP fetches, `NAME-SEQ`).
pub const MAX_NAME: usize = 48;
/// Bytes of DSP error text kept from a failed library open.
pub const DLERROR_LEN: usize = 256;

const HEALTHY: u8 = 0;
const NEEDS_RECOVERY: u8 = 1;
const FAILED: u8 = 2;

/// Descriptor cells a session rotates its channels through: the current channel's, and one
/// for an old channel retired under a listener that has not let go of it yet.
const CELLS: usize = 2;

/// How often recovery repeats its interrupt while the listener has not left the old channel
/// (a signal that lands just before the thread blocks is lost).
const LEAVE_REPEAT: Duration = Duration::from_millis(2);

/// How long recovery lets the listener leave on its own (after the process exit) before it
/// starts interrupting it.
const LEAVE_GRACE: Duration = Duration::from_millis(20);

/// Where library images are published so the DSP can fetch them by name: the reverse file
/// service implements it (it serves each image from memory under its unique name).
pub trait ImageRegistry: Sync {
    /// Makes `image` available under `name` until [`withdraw`](ImageRegistry::withdraw).
    /// Returns false if the registry refuses (full, duplicate name).
    fn publish(&self, name: &str, image: &'static [u8]) -> bool;
    /// Removes the image published under `name`.
    fn withdraw(&self, name: &str);
}

struct LibSlot {
    name: heapless::String<MAX_NAME>,
    remote: u32,
}

/// The channel calls go to: an index into the session's descriptor cells, or none while
/// recovery replaces it.
struct ChannelState {
    current: Option<usize>,
}

/// What the single-flight recovery shares between its callers.
struct RecoveryCtl {
    running: bool,
    round: u64,
    last: Result<(), HalError>,
    /// Why the session needs recovery (the first failure reported), while it does.
    pending: Option<HalError>,
    /// Why recovery gave up, once it has.
    failure: Option<HalError>,
    /// A restart reported for this generation while recovery was building it.
    lost: u32,
}

/// The state of a session, as [`Session::health`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Health {
    /// Calls can be made on channel generation `generation`.
    Healthy {
        /// The channel generation (it changes with every successful recovery).
        generation: u32,
    },
    /// A call or the listener saw the DSP side go away (restart, deadline, listener stopped):
    /// [`Session::recover`] must run; the error says why.
    NeedsRecovery(HalError),
    /// Recovery spent its budget ([`RecoveryPolicy`](hexrpc_bsp::RecoveryPolicy)); the error is
    /// the last attempt's. The session is unusable.
    Failed(HalError),
}

/// A ready session: the DSP process exists and its reverse-RPC listener is registered.
///
/// Share it between threads (`&Session` is `Sync` when `S` is) to launch from many threads;
/// opening and closing libraries is serialized inside. When a call reports
/// [`Cause::DspRestart`] or [`Cause::Timeout`], further calls fail with
/// [`Cause::NeedsRecovery`] until [`recover`](Session::recover) succeeds.
///
/// # Channels and generations
///
/// Every channel (FastRPC descriptor with its DSP process) carries the generation that created
/// it; recovery makes the next one. The reverse-RPC listener serves one generation at a time
/// through a lease on that channel's descriptor, and the descriptor number stays open (retired
/// to `/dev/null` if the listener is slow to leave) until the lease is back, so nothing the
/// listener sends for an old generation can reach a newer channel under a reused number.
pub struct Session<S: Syscalls + Clone> {
    // Field order is release order: libraries, channel (process exit, fd close), ION device.
    libs: sync::Mutex<[Option<LibSlot>; MAX_LIBRARIES]>,
    /// Held shared by every call on the current channel (it counts the calls in flight) and
    /// exclusively by recovery while it replaces the channel.
    chan: sync::RwLock<ChannelState>,
    cells: [FdCell; CELLS],
    health: AtomicU8,
    generation: AtomicU32,
    /// `(generation << 32) | (cell + 1)` of the channel the listener must serve; 0 while none.
    published: AtomicU64,
    listener_tid: AtomicI32,
    /// The generation whose descriptor an abandoned call (a deadline) retired.
    retired_generation: AtomicU32,
    recovery: sync::Mutex<RecoveryCtl>,
    recovered: sync::Condvar,
    /// Bumped (under its mutex) whenever the published channel changes or a listener lease
    /// returns; listener and recovery wait on it.
    events: sync::Mutex<u64>,
    event: sync::Condvar,
    info: u32,
    ion: OwnedFd<S>,
    sys: S,
    board: &'static Board,
}

static NAME_SEQ: AtomicU32 = AtomicU32::new(1);

fn pack_channel(cell: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (cell as u64 + 1)
}

fn le32(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

impl<S: Syscalls + Clone> Session<S> {
    /// Runs every init stage: ION, shell, channel, process, listener.
    pub fn start(sys: S, access: &DeviceAccess) -> Result<Self, HalError> {
        IonOpened::open(sys, access)?.stage_shell()?.open_channel()?.create_process()?.attach_listener()
    }

    pub(crate) fn from_parts(ion: IonOpened<S>, channel: Channel<S>, info: u32) -> Self {
        let cells = [FdCell::new(), FdCell::new()];
        let current = match channel.into_token().map(|t| cells[0].put(t)) {
            Some(Ok(())) => Some(0),
            Some(Err(t)) => {
                // An empty cell always takes a valid number; a -1 token needs no close.
                let _ = t.into_raw();
                None
            }
            None => None,
        };
        Session {
            libs: sync::Mutex::new([const { None }; MAX_LIBRARIES]),
            chan: sync::RwLock::new(ChannelState { current }),
            cells,
            health: AtomicU8::new(if current.is_some() { HEALTHY } else { NEEDS_RECOVERY }),
            generation: AtomicU32::new(1),
            published: AtomicU64::new(current.map_or(0, |c| pack_channel(c, 1))),
            listener_tid: AtomicI32::new(0),
            retired_generation: AtomicU32::new(0),
            recovery: sync::Mutex::new(RecoveryCtl { running: false, round: 0, last: Ok(()), pending: None, failure: None, lost: 0 }),
            recovered: sync::Condvar::new(),
            events: sync::Mutex::new(0),
            event: sync::Condvar::new(),
            info,
            ion: ion.ion,
            sys: ion.sys,
            board: ion.board,
        }
    }

    /// The board.
    pub fn board(&self) -> &'static Board {
        self.board
    }

    /// The syscall implementation.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    /// The GETINFO answer of the channel (bit 0: SMMU).
    pub fn info(&self) -> u32 {
        self.info
    }

    /// True while calls can be made (no restart or timeout pending recovery).
    pub fn is_healthy(&self) -> bool {
        self.health.load(Ordering::Acquire) == HEALTHY
    }

    /// The current channel generation (1 after start; each successful recovery adds one).
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Healthy, needs recovery (and why), or failed (and why).
    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Acquire) {
            HEALTHY => Health::Healthy { generation: self.generation() },
            NEEDS_RECOVERY => {
                Health::NeedsRecovery(self.recovery.lock().pending.unwrap_or(HalError::new(Stage::Recover, Cause::NeedsRecovery)))
            }
            _ => Health::Failed(self.recovery.lock().failure.unwrap_or(HalError::new(Stage::Recover, Cause::Failed))),
        }
    }

    fn notify(&self) {
        let mut g = self.events.lock();
        *g = g.wrapping_add(1);
        drop(g);
        self.event.notify_all();
    }

    /// Moves a healthy session to "needs recovery" for `why`.
    fn mark_needs_recovery(&self, why: HalError) {
        if self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.recovery.lock().pending = Some(why);
            log::warn!("{why}; the session needs recover()");
            self.notify();
        }
    }

    /// A restart seen on generation `generation` outside a call of this session (the listener).
    fn report_restart(&self, generation: u32) {
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if self.health.load(Ordering::Acquire) == HEALTHY {
            self.mark_needs_recovery(HalError::new(Stage::ListenerAttach, Cause::DspRestart));
        } else {
            // Recovery may be building this very generation: it must not call it healthy.
            self.recovery.lock().lost = generation;
        }
    }

    /// Closes every cell whose owner asked for it back and whose leases have all returned.
    fn reap(&self) {
        for c in &self.cells {
            if c.is_closing() {
                if let Some(fd) = c.take() {
                    let n = fd.raw().0;
                    if let Err(e) = self.sys.close(fd) {
                        log::warn!("close of retired channel fd {n} failed: {e}");
                    }
                }
            }
        }
    }

    /// Ends the channel in cell `i`: asks its DSP process to exit and closes the descriptor, or,
    /// if the listener still holds a lease on it, retires it (the number then refers to
    /// `/dev/null`, so nothing more reaches the old DSP process) and leaves the close to the
    /// lease's return.
    fn end_channel(&self, i: usize, exit: bool) {
        if let Some(lease) = self.cells[i].lease() {
            if exit {
                process_exit(&self.sys, lease.raw());
            }
            if self.cells[i].leases() > 1 {
                log::warn!("the reverse-RPC listener still holds channel fd {}; retiring it under the listener", lease.raw().0);
                if let Err(e) = self.sys.retire(lease.fd()) {
                    log::error!("retiring channel fd {}: {e}", lease.raw().0);
                }
            }
        }
        match self.cells[i].take() {
            Some(fd) => {
                let n = fd.raw().0;
                if let Err(e) = self.sys.close(fd) {
                    log::warn!("close of channel fd {n} failed: {e}");
                }
            }
            None => log::debug!("channel cell {i} closes when the listener lets go"),
        }
    }

    /// Unpublishes the current channel and asks its DSP process to exit, which ends the
    /// listener's `next2` from the DSP side (as the FastRPC user library does), so the listener
    /// leaves on its own and releases what it mapped on this very channel; after a short grace
    /// its blocked call is interrupted too (a hung DSP never answers). After the board's bounded
    /// wait the channel is ended: closed, or retired under a listener that still holds it.
    fn teardown(&self, chan: &mut ChannelState) {
        let Some(i) = chan.current.take() else { return };
        self.published.store(0, Ordering::Release);
        self.notify();
        if let Some(lease) = self.cells[i].lease() {
            process_exit(&self.sys, lease.raw());
        }
        let tid = self.listener_tid.load(Ordering::Acquire);
        if tid != 0 {
            // Calls are excluded (we hold `chan` exclusively): a lease still out is the listener's.
            let clock = sync::Clock::start();
            let limit = ms(self.board.recovery.listener_leave_ms);
            while self.cells[i].leases() > 0 && clock.elapsed() < limit {
                if clock.elapsed() >= LEAVE_GRACE {
                    let _ = self.sys.interrupt(tid);
                }
                let g = self.events.lock();
                if self.cells[i].leases() == 0 {
                    break;
                }
                drop(self.event.wait_timeout(g, LEAVE_REPEAT));
            }
        }
        self.end_channel(i, false);
    }

    /// Allocates `len` bytes (rounded up to a page) from the board's ION heap, shared and mapped.
    pub fn alloc(&self, len: usize) -> Result<IonLease<'_, S>, HalError> {
        let raw = RawLease::alloc(&self.sys, self.ion.raw(), self.board, len, Stage::Alloc)?;
        Ok(IonLease::new(raw, self.sys.clone(), self.ion.raw()))
    }

    fn check_health(&self, stage: Stage) -> Result<(), HalError> {
        match self.health.load(Ordering::Acquire) {
            HEALTHY => Ok(()),
            NEEDS_RECOVERY => Err(HalError::new(stage, Cause::NeedsRecovery)),
            _ => Err(HalError::new(stage, Cause::Failed)),
        }
    }

    fn note_failure(&self, e: HalError) -> HalError {
        if matches!(e.cause, Cause::DspRestart | Cause::Timeout) {
            self.mark_needs_recovery(e);
        }
        e
    }

    /// Opens a library: publishes `image` under a unique name in `registry`, asks the DSP to load
    /// it (the DSP fetches the image back through the reverse file service) and returns a handle
    /// that closes the library and withdraws the image when dropped.
    ///
    /// `name` may hold ASCII letters, digits, `_`, `-` and `.` (at most 32 bytes). A library is
    /// opened once and invoked many times. When the DSP's loader refuses the image (bad ELF,
    /// unresolved symbol, no `entry`, ...) the error is [`Cause::Refused`] with the AEE code and
    /// the loader's reason.
    pub fn open_library<'s>(
        &'s self,
        registry: &'s dyn ImageRegistry,
        name: &str,
        image: &'static [u8],
    ) -> Result<Library<'s, S>, HalError> {
        let st = Stage::LibraryOpen;
        if name.is_empty() || name.len() > 32 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
            return Err(HalError::new(st, Cause::Invalid));
        }
        // Lock order everywhere: `chan` before `libs`, and `libs` never across a DSP call.
        let chan = self.chan.read();
        self.check_health(st)?;
        let lease = chan.current.and_then(|i| self.cells[i].lease()).ok_or(HalError::new(st, Cause::NeedsRecovery))?;
        let mut unique = heapless::String::<MAX_NAME>::new();
        write!(unique, "{name}-{}", NAME_SEQ.fetch_add(1, Ordering::Relaxed)).map_err(|_| HalError::new(st, Cause::Invalid))?;
        let slot = {
            let mut libs = self.libs.lock();
            let slot = libs.iter().position(|s| s.is_none()).ok_or(HalError::new(st, Cause::Full))?;
            // Reserved while the DSP loads it; recovery cannot run meanwhile (we hold `chan`).
            libs[slot] = Some(LibSlot { name: unique.clone(), remote: u32::MAX });
            slot
        };
        let opened = if registry.publish(&unique, image) {
            remotectl_open(&self.sys, lease.raw(), &unique).map_err(|e| {
                registry.withdraw(&unique);
                self.note_failure(e)
            })
        } else {
            Err(HalError::new(st, Cause::Registry))
        };
        let mut libs = self.libs.lock();
        match opened {
            Ok(remote) => {
                libs[slot] = Some(LibSlot { name: unique, remote });
                Ok(Library { session: self, registry, slot })
            }
            Err(e) => {
                libs[slot] = None;
                Err(e)
            }
        }
    }

    fn close_slot(&self, registry: &dyn ImageRegistry, slot: usize) {
        let chan = self.chan.read();
        let Some(lib) = self.libs.lock()[slot].take() else { return };
        if self.is_healthy() {
            if let Some(lease) = chan.current.and_then(|i| self.cells[i].lease()) {
                if let Err(e) = remotectl_close(&self.sys, lease.raw(), lib.remote) {
                    log::warn!("closing library {}: {e}", lib.name);
                }
            }
        }
        drop(chan);
        registry.withdraw(&lib.name);
    }

    fn remote_handle(&self, slot: usize) -> Option<u32> {
        self.libs.lock()[slot].as_ref().map(|l| l.remote)
    }

    /// One library call. A signal that interrupts it is not ours to act on: the drivers resume
    /// the parked call at once. A deadline that fired abandons it instead: the drivers retire the
    /// channel's descriptor first (nothing can resume the parked call into buffers that are
    /// gone), the error is [`Cause::Timeout`], and the session needs `recover()`, which closes
    /// the channel.
    fn invoke_slot<const CAP: usize>(
        &self,
        slot: usize,
        args: &mut adsprpc::InvokeArgs<'_, CAP>,
        fired: Option<&core::sync::atomic::AtomicBool>,
    ) -> Result<(), HalError> {
        let st = Stage::Invoke;
        // Lock order: `chan` before `libs`; the handle read under `chan` belongs to its channel.
        let chan = self.chan.read();
        self.check_health(st)?;
        let lease = chan.current.and_then(|i| self.cells[i].lease()).ok_or(HalError::new(st, Cause::NeedsRecovery))?;
        let remote = self.remote_handle(slot).ok_or(HalError::new(st, Cause::Invalid))?;
        let abandon = || fired.is_some_and(|f| f.load(Ordering::Acquire));
        match adsprpc::invoke_attrs_abandonable(&self.sys, lease.fd(), remote, args, &abandon) {
            Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) => {
                // The drivers retired the channel's descriptor to abandon the call.
                self.retired_generation.store(self.generation(), Ordering::Release);
                Err(self.note_failure(HalError::new(st, Cause::Timeout)))
            }
            r => r.map_err(|e| self.note_failure(HalError::sys(st, e))),
        }
    }

    /// Rebuilds the DSP side after a restart, a timeout or a stopped listener: unpublishes the
    /// old channel, gives the reverse-RPC listener a bounded time to leave it, asks the old
    /// process to exit and closes (or retires) the old channel, then re-runs the stages from
    /// the shell, registers the listener and re-opens every library that was open.
    ///
    /// While the DSP is still down, the rebuild is retried with the board's bounded backoff
    /// ([`RecoveryPolicy`](hexrpc_bsp::RecoveryPolicy): attempts, delays, total budget; without
    /// `std` there is no clock, and attempts follow each other at once). The session is marked
    /// failed only once the budget is spent; the error then carries the last attempt's cause,
    /// and [`health`](Session::health) keeps it.
    ///
    /// Single flight: a caller that arrives while another thread recovers waits for that
    /// recovery (a blocking wait) and returns its outcome. Calls in flight on the old channel
    /// finish first. Library re-opens need the reverse-RPC listener to serve the new channel
    /// (`hexrpc-runtime`'s `ServedSession` runs one).
    pub fn recover(&self) -> Result<(), HalError> {
        let mut ctl = self.recovery.lock();
        loop {
            match self.health.load(Ordering::Acquire) {
                HEALTHY => return Ok(()),
                FAILED => return Err(ctl.failure.unwrap_or(HalError::new(Stage::Recover, Cause::Failed))),
                _ => {}
            }
            if !ctl.running {
                break;
            }
            let round = ctl.round;
            while ctl.running && ctl.round == round {
                ctl = self.recovered.wait_timeout(ctl, Duration::from_millis(100));
            }
            if ctl.round != round {
                return ctl.last;
            }
        }
        ctl.running = true;
        drop(ctl);
        let outcome = self.run_recovery();
        let mut ctl = self.recovery.lock();
        ctl.running = false;
        ctl.round += 1;
        ctl.last = outcome;
        match outcome {
            Ok(()) => ctl.pending = None,
            Err(e) => {
                // Under the lock, so that nobody sees `Failed` without its reason.
                ctl.failure = Some(e);
                self.health.store(FAILED, Ordering::Release);
            }
        }
        drop(ctl);
        self.recovered.notify_all();
        self.notify();
        outcome
    }

    fn run_recovery(&self) -> Result<(), HalError> {
        let policy = self.board.recovery;
        let clock = sync::Clock::start();
        let budget = ms(policy.budget_ms);
        let mut failed = 0u32;
        loop {
            let attempt = {
                let mut chan = self.chan.write();
                self.teardown(&mut chan);
                let r = self.rebuild(&mut chan).and_then(|generation| {
                    if self.recovery.lock().lost == generation {
                        Err(HalError::new(Stage::Recover, Cause::DspRestart))
                    } else {
                        Ok(generation)
                    }
                });
                match r {
                    Ok(generation) => {
                        self.health.store(HEALTHY, Ordering::Release);
                        log::info!("recovered: channel generation {generation} after {} failed attempts", failed);
                        Ok(())
                    }
                    Err(e) => {
                        self.teardown(&mut chan);
                        Err(e)
                    }
                }
            };
            let e = match attempt {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            failed += 1;
            let delay = ms(policy.delay_ms(failed));
            let spent = clock.elapsed();
            if failed >= policy.attempts.max(1) || spent.saturating_add(delay) >= budget {
                let e = HalError::new(Stage::Recover, e.cause);
                log::error!("recovery failed for good after {failed} attempts in {} ms: {e}", spent.as_millis());
                return Err(e);
            }
            log::warn!("recovery attempt {failed} failed ({e}); retrying in {} ms", delay.as_millis());
            sync::sleep(delay);
        }
    }

    /// One rebuild: a new channel in a free cell, published to the listener, libraries
    /// re-opened. Returns the new generation.
    fn rebuild(&self, chan: &mut ChannelState) -> Result<u32, HalError> {
        self.reap();
        let shell = stages::stage_shell(&self.sys, self.ion.raw(), self.board)?;
        let (rpc, _) = stages::open_channel(&self.sys, self.board)?;
        let ch = stages::create_process(&self.sys, rpc, &shell)?;
        drop(shell);
        stages::attach_listener(&self.sys, &ch)?;
        let busy = HalError::new(Stage::Recover, Cause::Os(hexrpc_drivers::Errno::EBUSY));
        let i = self.cells.iter().position(FdCell::is_empty).ok_or(busy)?;
        let token = ch.into_token().ok_or(busy)?;
        if let Err(t) = self.cells[i].put(token) {
            let _ = self.sys.close(t);
            return Err(busy);
        }
        chan.current = Some(i);
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        // The listener serves the new channel from here on; the libraries need it to load.
        self.published.store(pack_channel(i, generation), Ordering::Release);
        self.notify();
        let lease = self.cells[i].lease().ok_or(busy)?;
        let names: heapless::Vec<(usize, heapless::String<MAX_NAME>), MAX_LIBRARIES> =
            self.libs.lock().iter().enumerate().filter_map(|(i, l)| l.as_ref().map(|l| (i, l.name.clone()))).collect();
        for (slot, name) in names {
            let remote = remotectl_open(&self.sys, lease.raw(), &name)?;
            if let Some(l) = self.libs.lock()[slot].as_mut() {
                l.remote = remote;
            }
        }
        Ok(generation)
    }
}

/// The channel a reverse-RPC listener serves: a lease on its descriptor (the number stays
/// open, retired at worst, while this lives) and its generation. Dropping it lets the session
/// close the channel if recovery has already replaced it.
pub struct ListenerChannel<'s, S: Syscalls + Clone> {
    session: &'s Session<S>,
    lease: Option<FdLease<'s>>,
    generation: u32,
}

impl<S: Syscalls + Clone> ListenerChannel<'_, S> {
    /// The channel's descriptor, borrowed for the lease (retiring it is allowed).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.lease.as_ref().map(FdLease::fd)
    }

    /// The raw number (for the service's DSP maps, which are made and released on it).
    pub fn raw(&self) -> Fd {
        self.lease.as_ref().map_or(Fd(-1), FdLease::raw)
    }

    /// The generation that created the channel.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// True while the session still publishes this channel (false once recovery started
    /// replacing it, or the session failed): the listener must leave it.
    pub fn is_current(&self) -> bool {
        (self.session.published.load(Ordering::Acquire) >> 32) as u32 == self.generation
            && self.session.health.load(Ordering::Acquire) != FAILED
    }

    /// True once this channel's descriptor was retired: by a call abandoned at its deadline, or
    /// by the session ending the channel under the listener. The number then refers to
    /// `/dev/null` (nothing sent on it reaches any DSP process) and is closed when the lease
    /// goes back.
    pub fn is_retired(&self) -> bool {
        self.session.retired_generation.load(Ordering::Acquire) == self.generation
            || self.lease.as_ref().is_some() && self.session.cells.iter().any(|c| c.is_closing() && c.raw() == Some(self.raw()))
    }

    /// Reports that this channel's DSP side went away (a restart or the process exiting, seen
    /// by the listener): the session then needs recovery. A report about an old generation is
    /// ignored.
    pub fn report_lost(&self) {
        self.session.report_restart(self.generation);
    }
}

impl<S: Syscalls + Clone> Drop for ListenerChannel<'_, S> {
    fn drop(&mut self) {
        drop(self.lease.take());
        self.session.reap();
        self.session.notify();
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for ListenerChannel<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ListenerChannel").field("fd", &self.raw().0).field("generation", &self.generation).finish()
    }
}

/// The plumbing between a session and the reverse-RPC listener thread that
/// `hexrpc-runtime` runs for it (`ServedSession`). Not a stable API: our own crates use it.
pub trait ListenerPlumbing<S: Syscalls + Clone> {
    /// Records the listener thread (recovery interrupts its blocked `next2`).
    fn listener_attach(&self, tid: i32);

    /// The listener thread has ended: the session can no longer load libraries, and if the
    /// loop abandoned a `next2` the channel itself is retired. Marks the session as needing
    /// recovery (cause [`Cause::ListenerStopped`]) if it was healthy.
    fn listener_detach(&self);

    /// Waits (blocking, at most `wait`) until the session publishes a channel whose generation
    /// is not `after`, and leases it. `None` on timeout (nothing is published while recovery runs
    /// or after it failed).
    fn listener_channel(&self, after: Option<u32>, wait: Duration) -> Option<ListenerChannel<'_, S>>;

    /// Wakes a listener waiting in [`listener_channel`](ListenerPlumbing::listener_channel)
    /// (a stop).
    fn wake_listener(&self);

    /// Shutdown, first step: unpublishes the current channel and asks its DSP process to exit,
    /// so the listener leaves `next2` from the DSP side and releases its maps on the live
    /// channel before anything is retired or closed. Calls fail with
    /// [`Cause::NeedsRecovery`] afterwards; dropping the session closes the channel.
    fn begin_shutdown(&self);

    /// The published channel's descriptor number and generation, if any (tests, diagnostics).
    fn listener_fd(&self) -> Option<(Fd, u32)>;
}

impl<S: Syscalls + Clone> ListenerPlumbing<S> for Session<S> {
    fn listener_attach(&self, tid: i32) {
        self.listener_tid.store(tid, Ordering::Release);
    }

    fn listener_detach(&self) {
        self.listener_tid.store(0, Ordering::Release);
        self.mark_needs_recovery(HalError::new(Stage::ListenerAttach, Cause::ListenerStopped));
    }

    fn listener_channel(&self, after: Option<u32>, wait: Duration) -> Option<ListenerChannel<'_, S>> {
        let clock = sync::Clock::start();
        let mut g = self.events.lock();
        loop {
            // Nothing is published while recovery runs, nor after it failed.
            let p = self.published.load(Ordering::Acquire);
            let generation = (p >> 32) as u32;
            if p != 0 && after != Some(generation) {
                let cell = ((p & 0xFFFF_FFFF) as usize).wrapping_sub(1);
                if let Some(lease) = self.cells.get(cell).and_then(FdCell::lease) {
                    // Still the published channel after the lease was taken: the cell holds it.
                    if self.published.load(Ordering::Acquire) == p {
                        drop(g);
                        return Some(ListenerChannel { session: self, lease: Some(lease), generation });
                    }
                    continue;
                }
            }
            let spent = clock.elapsed();
            if spent >= wait {
                return None;
            }
            g = self.event.wait_timeout(g, wait - spent);
        }
    }

    fn wake_listener(&self) {
        self.notify();
    }

    fn begin_shutdown(&self) {
        let chan = self.chan.write();
        // A shutdown, not a fault: no warning.
        if self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.recovery.lock().pending = Some(HalError::new(Stage::Recover, Cause::ListenerStopped));
        }
        let Some(i) = chan.current else { return };
        self.published.store(0, Ordering::Release);
        if let Some(lease) = self.cells[i].lease() {
            process_exit(&self.sys, lease.raw());
        }
        self.notify();
        // A blocking wait (bounded) for the listener to give its lease back on its own.
        let clock = sync::Clock::start();
        let limit = ms(self.board.recovery.listener_leave_ms);
        let mut g = self.events.lock();
        while self.cells[i].leases() > 0 && clock.elapsed() < limit {
            g = self.event.wait_timeout(g, limit.saturating_sub(clock.elapsed()));
        }
        drop(g);
        drop(chan);
    }

    fn listener_fd(&self) -> Option<(Fd, u32)> {
        if self.health.load(Ordering::Acquire) == FAILED {
            return None;
        }
        let p = self.published.load(Ordering::Acquire);
        let cell = ((p & 0xFFFF_FFFF) as usize).wrapping_sub(1);
        let fd = self.cells.get(cell)?.raw()?;
        Some((fd, (p >> 32) as u32))
    }
}

/// Process exit (handle 4), errors ignored as quic and tinygrad do.
fn process_exit<S: Syscalls>(sys: &S, fd: Fd) {
    if let Ok(mut args) = adsprpc::InvokeArgs::<'_, 1>::new(listener::CURRENT_PROCESS_EXIT.method()) {
        if let Err(e) = adsprpc::invoke(sys, fd, adsprpc::CURRENT_PROCESS_HANDLE, &mut args) {
            log::debug!("process exit (handle 4) on teardown: {e}");
        }
    }
}

impl<S: Syscalls + Clone> Drop for Session<S> {
    fn drop(&mut self) {
        // Libraries borrow the session, so none is alive here unless one was leaked with
        // `mem::forget`; close those on the DSP side (their images stay with the registry).
        let healthy = self.is_healthy();
        let current = self.chan.get_mut().current.take();
        if let Some(lease) = current.and_then(|i| self.cells[i].lease()) {
            for lib in self.libs.get_mut().iter_mut() {
                if let Some(l) = lib.take() {
                    if healthy {
                        let _ = remotectl_close(&self.sys, lease.raw(), l.remote);
                    }
                }
            }
        }
        if let Some(i) = current {
            self.end_channel(i, true);
        }
        // A listener borrows the session while it holds a lease: none is out any more.
        self.reap();
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for Session<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session")
            .field("board", &self.board.name)
            .field("healthy", &self.is_healthy())
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .finish()
    }
}

/// An open library on the DSP. Dropping it closes the library (remotectl close) and withdraws
/// its image from the registry, on every path.
pub struct Library<'s, S: Syscalls + Clone> {
    session: &'s Session<S>,
    registry: &'s dyn ImageRegistry,
    slot: usize,
}

impl<S: Syscalls + Clone> Library<'_, S> {
    /// The DSP-side handle (changes after a recovery).
    pub fn remote_handle(&self) -> Option<u32> {
        self.session.remote_handle(self.slot)
    }

    /// Calls the library with `args` (`FASTRPC_IOCTL_INVOKE_ATTRS`). Blocks until the DSP
    /// answers; the driver has no timeout (see [`invoke_with_deadline`](Self::invoke_with_deadline)).
    pub fn invoke<const CAP: usize>(&self, args: &mut adsprpc::InvokeArgs<'_, CAP>) -> Result<(), HalError> {
        self.session.invoke_slot(self.slot, args, None)
    }

    /// [`invoke`](Self::invoke) with a deadline: if the call has not returned after `timeout`, a
    /// watchdog thread interrupts it (the driver parks the call), the error is
    /// [`Cause::Timeout`], and the session needs [`Session::recover`], which frees the parked
    /// call by closing the channel.
    #[cfg(feature = "std")]
    pub fn invoke_with_deadline<const CAP: usize>(
        &self,
        args: &mut adsprpc::InvokeArgs<'_, CAP>,
        timeout: core::time::Duration,
    ) -> Result<(), HalError>
    where
        S: Sync,
    {
        crate::deadline::run(self.session.sys(), timeout, |fired| self.session.invoke_slot(self.slot, args, Some(fired)))
    }
}

impl<S: Syscalls + Clone> core::fmt::Debug for Library<'_, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Library").field("slot", &self.slot).field("remote", &self.remote_handle()).finish()
    }
}

impl<S: Syscalls + Clone> Drop for Library<'_, S> {
    fn drop(&mut self) {
        self.session.close_slot(self.registry, self.slot);
    }
}

/// remotectl open (handle 0, method 0): `file:///NAME?entry&_modver=1.0&_dom=cdsp`.
fn remotectl_open<S: Syscalls>(sys: &S, fd: Fd, name: &str) -> Result<u32, HalError> {
    let st = Stage::LibraryOpen;
    let mut uri = heapless::String::<128>::new();
    write!(uri, "file:///{name}?entry&_modver=1.0&_dom=cdsp\0").map_err(|_| HalError::new(st, Cause::Invalid))?;
    let mut prim_in = [0u8; 8];
    prim_in[..4].copy_from_slice(&(uri.len() as u32).to_le_bytes());
    prim_in[4..].copy_from_slice(&(DLERROR_LEN as u32).to_le_bytes());
    let mut prim_out = [0u8; 8];
    let mut dlerror = [0u8; DLERROR_LEN];
    {
        let mut args =
            adsprpc::InvokeArgs::<'_, 4>::new(listener::REMOTECTL_OPEN.method()).map_err(|_| HalError::new(st, Cause::Invalid))?;
        args.input(&prim_in)
            .and_then(|a| a.input(uri.as_bytes()))
            .and_then(|a| a.output(&mut prim_out))
            .and_then(|a| a.output(&mut dlerror))
            .map_err(|_| HalError::new(st, Cause::Invalid))?;
        adsprpc::invoke(sys, fd, adsprpc::REMOTECTL_HANDLE, &mut args).map_err(|e| HalError::sys(st, e))?;
    }
    let handle = le32(&prim_out[..4]);
    let nerr = le32(&prim_out[4..]);
    if nerr != 0 {
        // The reason travels with the error (typed), not only in the log.
        let refusal = crate::error::Refusal::new(nerr, &dlerror);
        log::warn!("DSP refused to open {name}: {nerr} ({})", refusal.reason());
        return Err(HalError::new(st, Cause::Refused(refusal)));
    }
    Ok(handle as u32)
}

/// remotectl close (handle 0, method 1).
fn remotectl_close<S: Syscalls>(sys: &S, fd: Fd, handle: u32) -> Result<(), HalError> {
    let st = Stage::LibraryClose;
    let mut prim_in = [0u8; 8];
    prim_in[..4].copy_from_slice(&handle.to_le_bytes());
    prim_in[4..].copy_from_slice(&(DLERROR_LEN as u32).to_le_bytes());
    let mut prim_out = [0u8; 8];
    let mut dlerror = [0u8; DLERROR_LEN];
    {
        let mut args =
            adsprpc::InvokeArgs::<'_, 3>::new(listener::REMOTECTL_CLOSE.method()).map_err(|_| HalError::new(st, Cause::Invalid))?;
        args.input(&prim_in)
            .and_then(|a| a.output(&mut prim_out))
            .and_then(|a| a.output(&mut dlerror))
            .map_err(|_| HalError::new(st, Cause::Invalid))?;
        adsprpc::invoke(sys, fd, adsprpc::REMOTECTL_HANDLE, &mut args).map_err(|e| HalError::sys(st, e))?;
    }
    match le32(&prim_out[..4]) {
        0 => Ok(()),
        nerr => Err(HalError::new(st, Cause::Dsp(nerr))),
    }
}
