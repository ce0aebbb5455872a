//! The ready session: buffer allocation, invokes, the channel and its generations.
//!
//! Split by concern: `library` (remotectl open/close and the [`Library`] handle), `recovery`
//! (tearing a channel down and rebuilding the DSP side), `listener` (the plumbing the
//! runtime's reverse-RPC listener thread uses).

#[cfg(feature = "std")]
extern crate std;

mod book;
#[cfg(feature = "std")]
mod closer;
mod keeping;
pub(crate) mod library;
pub(crate) mod listener;
mod recovery;
pub(crate) mod remotectl;

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use core::time::Duration;

use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{adsprpc, listener as calls, Fd, FdCell, Syscalls};

use crate::call::Call;
use crate::driver;
use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;
use crate::latency::{LatencyPolicy, PmQosState};
use crate::stages::{self, Channel, HeapOpened, ProcessCreated};
use crate::sync;
use book::Book;
use remotectl::{remotectl_close, LibSlot, MAX_LIBRARIES};

const HEALTHY: u8 = 0;
const NEEDS_RECOVERY: u8 = 1;
const FAILED: u8 = 2;

/// Descriptor cells a session rotates its channels through: the current channel's, and one
/// for an old channel retired under a listener that has not let go of it yet.
const CELLS: usize = 2;

/// How long a call with a deadline sleeps between looks at a channel lock a recovery holds.
const READ_POLL: Duration = Duration::from_micros(200);

/// Final closes that may run on their own threads at once.
#[cfg(feature = "std")]
const CLOSING: usize = 16;

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
    /// the last attempt's. Calls fail with [`Cause::Failed`] until a further
    /// [`Session::recover`] (with a fresh budget) succeeds.
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
///
/// # What the kernels impose
///
/// * A dropped lease comes back here: downstream the driver's maps of its fd are dropped on
///   every live channel (`FASTRPC_IOCTL_MUNMAP_FD` until none is left) before the fd is closed;
///   upstream, a driver whose map lookup checks the dma-buf gets the fd closed at once, and one
///   that matches the number only has the number retired to `/dev/null` and closed when every
///   channel that may map it has closed, at most the board's
///   [`kept_numbers`](hexrpc_bsp::Limits::kept_numbers) at a time (then the channel is replaced,
///   [`replacements`](Session::replacements)). A channel keeps its shell buffer until it
///   closes. A launch only marks its handles' numbers (no extra ioctl).
/// * A deadline bounds the whole call, the wait for a recovery that holds the channel included:
///   a call whose deadline passes before it is sent returns [`Cause::Timeout`] unsent, and the
///   session stays healthy ([`deadlines_unsent`](Session::deadlines_unsent)).
/// * A call abandoned at its deadline quarantines its leases ([`Cause::Quarantined`]) until the
///   channel it ran on is closed, which is when the kernel has released its DSP process.
/// * The DSP keys processes by the opener's process id: a second session of this process takes
///   the session-bit identity (downstream) or is refused ([`Cause::IdentityInUse`]); recovery
///   alternates identities downstream and waits for the old release upstream.
/// * The release on close waits for the DSP (downstream without a limit): with
///   [`end_channels_off_thread`](Session::end_channels_off_thread) it runs on a thread of its
///   own and `recover()` and drop wait for it only within the board's bounds.
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
    /// Channels replaced to bound the lease bookkeeping ([`Session::replacements`]).
    replacements: AtomicU32,
    /// Calls whose deadline passed before they were sent ([`Session::deadlines_unsent`]).
    deadline_unsent: AtomicU64,
    /// This session among every session of the process (threads remember which channels they
    /// called on by it: [`Session::note_caller`]).
    #[cfg(feature = "std")]
    serial: u32,
    recovery: sync::Mutex<RecoveryCtl>,
    recovered: sync::Condvar,
    /// Bumped (under its mutex) whenever the published channel changes or a listener lease
    /// returns; listener and recovery wait on it.
    events: sync::Mutex<u64>,
    event: sync::Condvar,
    info: u32,
    /// The latency policy every channel gets.
    pub(crate) policy: LatencyPolicy,
    /// [`PmQosState::pack`] of the vote on the current channel.
    pm_qos: AtomicU32,
    /// Library setup calls that failed ([`Session::setup_failures`]).
    setup_failures: AtomicU32,
    /// The distinct setup calls of the session's libraries ([`crate::LibrarySetup`]).
    setups: sync::Mutex<heapless::Vec<crate::LibrarySetup, MAX_SETUPS>>,
    /// The DSP identity of the channel in each cell (0: the process id, 1: with the session
    /// bit; meaningful while the cell holds one).
    cell_ident: [AtomicU8; CELLS],
    /// The generation of the channel in each cell (meaningful while the cell holds one).
    cell_gen: [AtomicU32; CELLS],
    /// Leases and fd numbers kept until the channels that may map them are closed; released
    /// before the allocator device (ION handles are freed on it).
    book: Book<S>,
    /// Runs the calls that may block in the kernel (process exit, final close) bounded or on
    /// threads of their own, once `end_channels_off_thread` was called.
    #[cfg(feature = "std")]
    ender: std::sync::OnceLock<closer::ChannelEnder>,
    /// Final closes still running on their threads: (generation, done).
    #[cfg(feature = "std")]
    closing: sync::Mutex<heapless::Vec<(u32, closer::Closing), CLOSING>>,
    pub(crate) ion: OwnedFd<S>,
    pub(crate) sys: S,
    pub(crate) board: &'static Board,
}

/// Most distinct library setup calls one session keeps ([`crate::LibrarySetup`]): the DSP clock
/// vote needs one.
pub const MAX_SETUPS: usize = 4;

fn pack_channel(cell: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | (cell as u64 + 1)
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

/// The rule a start and a recovery share for giving up after `failed` attempts, `spent` of the
/// `budget` gone and `delay` to wait before the next: `None` while another attempt (and the
/// longest a reopen can block in the kernel, `reopen_wait_ms`) still fits; else the cause to
/// report: two or more downstream channel opens refused in a row are
/// [`Cause::ChannelStuck`] (R16), anything else the last attempt's `last` cause.
pub(super) fn give_up(
    policy: &hexrpc_bsp::RecoveryPolicy,
    failed: u32,
    refused_in_a_row: u16,
    spent: Duration,
    delay: Duration,
    budget: Duration,
    last: Cause,
) -> Option<Cause> {
    let next_ends = spent.saturating_add(delay).saturating_add(ms(policy.reopen_wait_ms));
    if failed < policy.attempts.max(1) && next_ends < budget {
        return None;
    }
    Some(if refused_in_a_row >= 2 {
        Cause::ChannelStuck { attempts: refused_in_a_row, waited_ms: u32::try_from(spent.as_millis()).unwrap_or(u32::MAX) }
    } else {
        last
    })
}

impl<S: Syscalls + Clone> Session<S> {
    /// Runs every init stage: ION, shell, channel, process, listener.
    ///
    /// Downstream, an INIT whose channel open the driver refused after its port-connect wait is
    /// tried again, as recovery does, within the board's
    /// [`RecoveryPolicy`](hexrpc_bsp::RecoveryPolicy): right after another file's last close
    /// the port stays DISCONNECTING until the DSP acknowledges the close, and an INIT then
    /// fails (-1, `EPERM`) after waiting the driver's `RPC_TIMEOUT` for the port
    /// (docs/kernel-rules.md R16). Such a refusal is told from any other -1 by the time the
    /// attempt took: at least the policy's `reopen_wait_ms`. Each failed attempt gives back
    /// everything it acquired. Giving up, two or more such refusals in a row are
    /// [`Cause::ChannelStuck`] with the attempts and the time. Every other failure (a DSP still
    /// down after a restart, `ENOTCONN`, included) is returned at once.
    pub fn start(sys: S, access: &DeviceAccess) -> Result<Self, HalError> {
        Self::start_with(sys, access, LatencyPolicy::default())
    }

    /// [`start`](Session::start) with the latency policy `policy`, which every channel of the
    /// session gets (the first and each one a recovery opens).
    pub fn start_with(sys: S, access: &DeviceAccess, latency: LatencyPolicy) -> Result<Self, HalError> {
        let board = access.board();
        let policy = board.recovery;
        let clock = sync::Clock::start();
        let budget = ms(policy.budget_ms);
        let mut refused_in_a_row = 0u16;
        loop {
            let began = clock.elapsed();
            let e = match Self::start_once(sys.clone(), access, latency) {
                Ok(s) => {
                    if refused_in_a_row > 0 {
                        log::info!("session started after {refused_in_a_row} refused channel opens in {} ms", clock.elapsed().as_millis());
                    }
                    return Ok(s);
                }
                Err(e) => e,
            };
            let waited = clock.elapsed().saturating_sub(began);
            let port_refused = board.abi == hexrpc_bsp::KernelAbi::DownstreamMsm
                && e.stage == Stage::ProcessCreate
                && e.cause == Cause::Os(hexrpc_drivers::Errno::EPERM)
                && policy.reopen_wait_ms > 0
                && waited >= ms(policy.reopen_wait_ms);
            if !port_refused {
                return Err(e);
            }
            refused_in_a_row = refused_in_a_row.saturating_add(1);
            let failed = u32::from(refused_in_a_row);
            let (delay, spent) = (ms(policy.delay_ms(failed)), clock.elapsed());
            if let Some(cause) = give_up(&policy, failed, refused_in_a_row, spent, delay, budget, e.cause) {
                let e = HalError::new(Stage::ProcessCreate, cause);
                log::error!("session start gave up after {failed} refused channel opens in {} ms: {e}", spent.as_millis());
                return Err(e);
            }
            log::warn!(
                "session start: the driver refused to open the channel after waiting {} ms for its port (a close not yet \
                 acknowledged by the DSP, or a port that will not connect); retrying in {} ms",
                waited.as_millis(),
                delay.as_millis()
            );
            sync::sleep(delay);
        }
    }

    /// One run of every init stage, each rolling back what it acquired on failure.
    fn start_once(sys: S, access: &DeviceAccess, policy: LatencyPolicy) -> Result<Self, HalError> {
        HeapOpened::open_with(sys, access, policy)?.stage_shell()?.open_channel()?.create_process()?.attach_listener()
    }

    pub(crate) fn from_parts(ion: HeapOpened<S>, channel: Channel<S>, info: u32, pm_qos: PmQosState) -> Self {
        let cells = [FdCell::new(), FdCell::new()];
        let identity = channel.identity.index() as u8;
        let (token, shell) = channel.into_parts();
        let current = match token.map(|t| cells[0].put(t)) {
            Some(Ok(())) => Some(0),
            Some(Err(t)) => {
                // An empty cell always takes a valid number; a -1 token needs no close.
                let _ = t.into_raw();
                None
            }
            None => None,
        };
        let session = Session {
            libs: sync::Mutex::new([const { None }; MAX_LIBRARIES]),
            chan: sync::RwLock::new(ChannelState { current }),
            cells,
            health: AtomicU8::new(if current.is_some() { HEALTHY } else { NEEDS_RECOVERY }),
            generation: AtomicU32::new(1),
            published: AtomicU64::new(current.map_or(0, |c| pack_channel(c, 1))),
            listener_tid: AtomicI32::new(0),
            retired_generation: AtomicU32::new(0),
            replacements: AtomicU32::new(0),
            deadline_unsent: AtomicU64::new(0),
            #[cfg(feature = "std")]
            serial: {
                static NEXT: AtomicU32 = AtomicU32::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            recovery: sync::Mutex::new(RecoveryCtl { running: false, round: 0, last: Ok(()), pending: None, failure: None, lost: 0 }),
            recovered: sync::Condvar::new(),
            events: sync::Mutex::new(0),
            event: sync::Condvar::new(),
            info,
            policy: ion.policy,
            pm_qos: AtomicU32::new(pm_qos.pack()),
            setup_failures: AtomicU32::new(0),
            setups: sync::Mutex::new(heapless::Vec::new()),
            cell_ident: [AtomicU8::new(identity), AtomicU8::new(0)],
            cell_gen: [AtomicU32::new(1), AtomicU32::new(0)],
            book: Book::new(),
            #[cfg(feature = "std")]
            ender: std::sync::OnceLock::new(),
            #[cfg(feature = "std")]
            closing: sync::Mutex::new(heapless::Vec::new()),
            ion: ion.ion,
            sys: ion.sys,
            board: ion.board,
        };
        if let Some(shell) = shell {
            session.keep_shell(1, shell);
        }
        session.settle();
        session
    }

    /// The session's latency policy.
    pub fn latency_policy(&self) -> LatencyPolicy {
        self.policy
    }

    /// What became of the PM-QoS vote on the current channel (sent on each channel right after
    /// its INIT: [`LatencyPolicy`]).
    pub fn pm_qos(&self) -> PmQosState {
        PmQosState::unpack(self.pm_qos.load(Ordering::Acquire))
    }

    /// Library setup calls ([`LibrarySetup`](crate::LibrarySetup): the DSP clock vote) that
    /// failed since the session started; each was logged.
    pub fn setup_failures(&self) -> u32 {
        self.setup_failures.load(Ordering::Relaxed)
    }

    pub(crate) fn set_pm_qos(&self, state: PmQosState) {
        self.pm_qos.store(state.pack(), Ordering::Release);
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

    /// How many times the session replaced a healthy channel to release the fd numbers it kept
    /// for it ([`Limits::kept_numbers`](hexrpc_bsp::Limits::kept_numbers); upstream boards whose
    /// driver looks maps up by number only).
    pub fn replacements(&self) -> u32 {
        self.replacements.load(Ordering::Relaxed)
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
        for (i, c) in self.cells.iter().enumerate() {
            if c.is_closing() {
                if let Some(fd) = c.take() {
                    self.close_channel(i, fd, ms(self.board.recovery.listener_leave_ms));
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
                self.exit_process(lease.fd());
            }
            if self.cells[i].leases() > 1 {
                log::warn!("the reverse-RPC listener still holds channel fd {}; retiring it under the listener", lease.raw().0);
                if let Err(e) = self.sys.retire(lease.fd()) {
                    log::error!("retiring channel fd {}: {e}", lease.raw().0);
                }
            }
        }
        match self.cells[i].take() {
            Some(fd) => self.close_channel(i, fd, ms(self.board.recovery.listener_leave_ms)),
            None => log::debug!("channel cell {i} closes when the listener lets go"),
        }
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

    /// One library call. A signal that interrupts it is not ours to act on: the drivers resume
    /// the parked call at once. A deadline that fired abandons it instead: the drivers retire the
    /// channel's descriptor first (nothing can resume the parked call into buffers that are
    /// gone), the error is [`Cause::Timeout`], and the session needs `recover()`, which closes
    /// the channel.
    pub(crate) fn invoke_slot<const CAP: usize>(
        &self,
        slot: usize,
        args: &mut Call<'_, CAP>,
        fired: Option<&core::sync::atomic::AtomicBool>,
    ) -> Result<(), HalError> {
        let st = Stage::Invoke;
        // Lock order: `chan` before `libs`; the handle read under `chan` belongs to its channel.
        let chan = match fired {
            None => self.chan.read(),
            Some(f) => self.read_chan_before(f)?,
        };
        self.check_health(st)?;
        let lease = chan.current.and_then(|i| self.cells[i].lease()).ok_or(HalError::new(st, Cause::NeedsRecovery))?;
        let (remote, map_cache) = self.slot_info(slot).ok_or(HalError::new(st, Cause::Invalid))?;
        let context = self.take_call_context()?;
        self.admit_handles(args)?;
        if map_cache {
            for h in args.handles() {
                self.book.mark_cached(h.fd, slot);
            }
        }
        let abandon = || fired.is_some_and(|f| f.load(Ordering::Acquire));
        // A deadline that passed before the call is sent (waiting for a recovery, or for the
        // lookups above) sends nothing and abandons nothing: the session stays healthy.
        if abandon() {
            return Err(self.unsent_timeout());
        }
        let used = chan.current.map(|i| self.cell_gen[i].load(Ordering::Acquire));
        let downstream = self.board.abi == hexrpc_bsp::KernelAbi::DownstreamMsm;
        // A sent call that its deadline abandons has the channel's descriptor retired by the
        // drivers right after this says so (downstream). The generation is recorded first, so
        // that a call of another thread that meets the retired descriptor knows why.
        let asked = core::cell::Cell::new(false);
        let abandon_sent = || {
            let give_up = abandon();
            if let (true, true, Some(g)) = (give_up, downstream, used) {
                self.retired_generation.store(g, Ordering::Release);
                asked.set(true);
            }
            give_up
        };
        let over_callers = used.is_some_and(|g| self.note_caller(g));
        let result = match driver::invoke_handles(&self.sys, self.board, lease.fd(), remote, args, &abandon_sent) {
            Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) => {
                // The DSP may still run the call and touch its buffers until its process is
                // released: they are refused and kept until this channel is closed, and so is
                // the driver's context of the call.
                if let Some(i) = chan.current {
                    let generation = self.cell_gen[i].load(Ordering::Acquire);
                    self.quarantine_call(generation, args);
                    context.park(generation);
                }
                // Downstream: the drivers retired the channel's descriptor to abandon the call.
                // Upstream: nothing was retired (the driver never resumes a call); the channel is
                // replaced by recovery all the same, since the DSP may still run the call.
                if self.board.abi == hexrpc_bsp::KernelAbi::DownstreamMsm {
                    self.retired_generation.store(self.generation(), Ordering::Release);
                }
                Err(self.note_failure(HalError::new(st, Cause::Timeout)))
            }
            // Another thread's abandoned call retired this channel's descriptor under this call:
            // its ioctl went to /dev/null (ENOTTY; ENOSYS under qemu-user), nothing was sent,
            // and that call has asked for the recovery this one needs too.
            Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::ENOTTY | hexrpc_drivers::Errno::ENOSYS))
                if downstream && used.is_some_and(|g| self.retired_generation.load(Ordering::Acquire) == g) =>
            {
                Err(HalError::new(st, Cause::NeedsRecovery))
            }
            r => {
                if asked.get() {
                    // The retire failed and the call was resumed to its end: the generation is
                    // marked retired all the same, so the channel is replaced.
                    self.mark_needs_recovery(HalError::new(st, Cause::Timeout));
                }
                r.map_err(|e| self.note_failure(HalError::sys(st, e)))
            }
        };
        if over_callers {
            // Every thread that ever called on the channel holds a record in its file until the
            // file is freed (R24): a new channel starts with none. Outside the channel lock,
            // which the replacement takes exclusively.
            drop(lease);
            drop(chan);
            log::info!(
                "more than {} threads called on this channel (the driver keeps a record of each until it is closed): replacing the channel",
                self.board.limits.perf_records
            );
            self.replace_channel();
        }
        result
    }

    /// Notes that this thread calls on channel generation `generation`; true when that makes
    /// more distinct calling threads on it than the board's
    /// [`Limits::perf_records`](hexrpc_bsp::Limits::perf_records) (R24). Each thread remembers
    /// the last four channels it called on (session, generation); a thread that alternates
    /// between more is counted again, which only makes the replacement come sooner.
    #[cfg(feature = "std")]
    fn note_caller(&self, generation: u32) -> bool {
        std::thread_local! {
            static SEEN: core::cell::Cell<[(u32, u32); 4]> = const { core::cell::Cell::new([(0, 0); 4]) };
        }
        let key = (self.serial, generation);
        let new = SEEN.with(|seen| {
            let mut v = seen.get();
            if v.contains(&key) {
                return false;
            }
            v.rotate_right(1);
            v[0] = key;
            seen.set(v);
            true
        });
        new && self.book.callers.fetch_add(1, Ordering::AcqRel) + 1 == u32::from(self.board.limits.perf_records) + 1
    }

    /// Without threads of its own a `no_std` user has a fixed set of callers: nothing is noted.
    #[cfg(not(feature = "std"))]
    fn note_caller(&self, _generation: u32) -> bool {
        false
    }

    /// Distinct threads that called on the current channel, as counted for
    /// [`Limits::perf_records`](hexrpc_bsp::Limits::perf_records) (tests, diagnostics).
    pub fn callers(&self) -> u32 {
        self.book.callers.load(Ordering::Acquire)
    }
}

impl<S: Syscalls + Clone> Session<S> {
    /// The channel lock, shared, for a call with a deadline: a recovery (or a channel
    /// replacement) holds it exclusively while it rebuilds, and the wait for it counts against
    /// the deadline. Once `fired` is set the call gives up with [`Cause::Timeout`] without
    /// having sent anything (so nothing is abandoned and no recovery is needed).
    fn read_chan_before(&self, fired: &core::sync::atomic::AtomicBool) -> Result<sync::ReadGuard<'_, ChannelState>, HalError> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.chan.try_read() {
                return Ok(g);
            }
            if fired.load(Ordering::Acquire) {
                return Err(self.unsent_timeout());
            }
            // A short spin first (a writer that is just leaving), then sleeps short enough to
            // stay within the watchdog's own granularity.
            spins = spins.saturating_add(1);
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                sync::sleep(READ_POLL);
            }
        }
    }

    /// A call whose deadline passed before it was sent: counted, and `Timeout` without any
    /// other effect.
    fn unsent_timeout(&self) -> HalError {
        self.deadline_unsent.fetch_add(1, Ordering::Relaxed);
        HalError::new(Stage::Invoke, Cause::Timeout)
    }

    /// Calls with a deadline that passed before they were sent, and so were not sent (tests,
    /// diagnostics).
    pub fn deadlines_unsent(&self) -> u64 {
        self.deadline_unsent.load(Ordering::Relaxed)
    }

    /// From now on the calls that may block in the kernel when a channel ends run bounded: the
    /// process exit is interrupted and abandoned after the board's
    /// [`listener_leave_ms`](hexrpc_bsp::RecoveryPolicy::listener_leave_ms), and the final
    /// close of a channel (whose kernel release waits for the DSP: without a limit downstream,
    /// up to 10 s upstream) runs on a thread of its own, which `recover()` and drop wait for
    /// only that long (drop: the recovery budget). Until such a close returns, its channel
    /// counts as open: what the driver may still map stays kept, and its DSP identity taken.
    /// `hexrpc-runtime`'s `ServedSession` calls it; without it everything runs on the caller's
    /// thread, as it must without `std`.
    #[cfg(feature = "std")]
    pub fn end_channels_off_thread(&self)
    where
        S: Send + Sync + 'static,
    {
        let _ = self.ender.set(closer::ChannelEnder::new(&self.sys, self.board));
    }

    /// Process exit (handle 4) on a channel, errors ignored as quic and tinygrad do; bounded
    /// once the session ends channels off-thread.
    fn exit_process(&self, fd: hexrpc_drivers::BorrowedFd<'_>) {
        #[cfg(feature = "std")]
        if let Some(ender) = self.ender.get() {
            return ender.exit(fd, ms(self.board.recovery.listener_leave_ms));
        }
        process_exit(&self.sys, self.board, fd.raw());
    }

    /// The final close of the channel that was in cell `cell`: on its own thread when the
    /// session can (waited for at most `bound`), else here. What the channel may map is
    /// released once the close has returned (the kernel then has released its DSP process and
    /// every map), and its identity is free again.
    fn close_channel(&self, cell: usize, fd: hexrpc_drivers::OwnedFd, bound: Duration) {
        let generation = self.cell_gen[cell].load(Ordering::Acquire);
        let identity = crate::identity::Identity::from_index(self.cell_ident[cell].load(Ordering::Acquire));
        #[cfg(feature = "std")]
        if let Some(ender) = self.ender.get() {
            // The closer gives the identity back once the close has returned.
            if let Some(done) = ender.close(fd, identity) {
                if !closer::wait(&done, bound) {
                    log::warn!("the release of channel generation {generation} is still running after {} ms; going on", bound.as_millis());
                    let mut closing = self.closing.lock();
                    closing.retain(|(_, d)| !d.load(Ordering::Acquire));
                    if closing.push((generation, done.clone())).is_err() {
                        drop(closing);
                        // No room to track it: wait for it, the safe side.
                        closer::wait(&done, Duration::MAX);
                    }
                }
            }
            self.settle();
            return;
        }
        let n = fd.raw().0;
        let _ = (generation, bound);
        if let Err(e) = self.sys.close(fd) {
            log::warn!("close of channel fd {n} failed: {e}");
        }
        // The kernel's release named the identity (or the close failed and the number is gone
        // all the same): the identity is free again.
        crate::identity::give_back(&self.sys, identity);
        self.settle();
    }

    /// Generations whose final close is still running (they count as open). Their identities
    /// stay held in the process's table (`identity`) until they return.
    fn closing_generations(&self) -> heapless::Vec<u32, 16> {
        #[cfg(feature = "std")]
        {
            let mut closing = self.closing.lock();
            closing.retain(|(_, d)| !d.load(Ordering::Acquire));
            closing.iter().map(|(g, _)| *g).collect()
        }
        #[cfg(not(feature = "std"))]
        heapless::Vec::new()
    }
}

/// Process exit (handle 4), errors ignored as quic and tinygrad do.
fn process_exit<S: Syscalls>(sys: &S, board: &Board, fd: Fd) {
    if let Ok(mut args) = Call::<'_, 1>::new(calls::CURRENT_PROCESS_EXIT.method()) {
        if let Err(e) = driver::invoke(sys, board, fd, adsprpc::CURRENT_PROCESS_HANDLE, &mut args) {
            log::debug!("process exit (handle 4) on teardown: {e}");
        }
    }
}

impl<S: Syscalls + Clone> ProcessCreated<S> {
    /// Stage 5: registers the reverse-RPC listener (handle 3, init2) and returns the ready
    /// session. The reverse file service then serves its channel (`hexrpc_runtime::ServedSession`).
    pub fn attach_listener(self) -> Result<Session<S>, HalError> {
        stages::attach_listener(&self.prev.sys, &self.channel)?;
        Ok(Session::from_parts(self.prev, self.channel, self.info, self.pm_qos))
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
                        let _ = remotectl_close(&self.sys, self.board, lease.raw(), l.remote);
                    }
                }
            }
        }
        if let Some(i) = current {
            self.end_channel(i, true);
        }
        // A listener borrows the session while it holds a lease: none is out any more.
        self.reap();
        // Every channel is closed, or its release still runs on its own thread: give it the
        // recovery budget, then keep for good (leak) what it may still map rather than free it.
        self.wait_for_closes();
        self.settle();
        self.book.forget_all();
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
