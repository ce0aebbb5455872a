//! The process's watchdog (feature `std`): one thread that calls an action on behalf of a
//! thread blocked in a system call once that call's deadline has passed, and again every
//! `repeat` until the call returns. This is how a deadline ends a FastRPC invoke, which has no
//! timeout of its own (the action interrupts the blocked thread through the seam).
//!
//! # Slots
//!
//! A thread arming a deadline uses a slot of its own: claimed at its first deadline, handed
//! back when the thread exits and reused by a later one (a deadline armed inside another's body
//! on the same thread, or while the thread exits, claims a spare slot for its duration). The
//! slots form a list that only grows, to the most threads that ever had deadlines at once; the
//! watchdog scans it when it wakes. A slot holds one word, the deadline and a state (`IDLE`,
//! `ARMED`) together, and a `busy` flag the watchdog raises while it decides on the slot:
//!
//! * arming writes the action into the slot and stores `deadline | ARMED`;
//! * disarming stores `IDLE`, then waits (yielding) while `busy` is up: the only wait, and only
//!   while the watchdog checks the slot or calls its action (an interrupt: microseconds);
//! * the watchdog fires a slot whose deadline has passed by raising `busy`, reading the word
//!   again, and only if it is still the same armed word calling the action and moving the word
//!   to `next deadline | ARMED` (a compare-exchange, which loses to a disarm), then lowering
//!   `busy`.
//!
//! Each side stores, then reads what the other side stores (the owner: its word, then `busy`;
//! the watchdog: `busy`, then the word), so at least one of them sees the other's store: a
//! disarm either is seen by the watchdog, which then leaves the slot alone, or sees `busy` and
//! waits. That needs a full barrier between each side's store and its load. The owner's side is
//! the hot one (every deadline launch), so where the kernel offers it
//! (`membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, Linux 4.14 and later) the barrier is
//! asymmetric: the owner's is only a compiler fence, and the watchdog, the rare side, makes
//! every thread of the process pass a full barrier with one `membarrier` call. Without it (older
//! kernels such as the comma three's 4.9, qemu-user, Miri) both sides use a sequentially
//! consistent fence. No lock, no system call, no allocation on the owner's side in the common
//! case: with `membarrier`, arming and disarming are release stores and acquire or relaxed
//! loads (no atomic read-modify-write, no fence instruction); only an arm whose deadline is
//! earlier than the watchdog's plan lowers it (`fetch_min`) and wakes it (a mutex).
//!
//! # Waking the watchdog
//!
//! The watchdog publishes when it will look next (`WAKE_AT`); an arm whose deadline is earlier
//! lowers it to that deadline and wakes the watchdog (a mutex and a condition variable), a later
//! one does not, so a stream of calls with
//! the same timeout costs the watchdog about two wake-ups per timeout, not one per call: with
//! nothing armed it sleeps until the time it had planned, then without a limit. The arm's store
//! and its read of `WAKE_AT` are sequentially consistent with the watchdog's publication and
//! its second look at the slots, so an arm is either seen by the watchdog before it sleeps or
//! wakes it (the same store-then-load handshake, with the same barriers). A timerfd would need a
//! system call per arm and per disarm; a wheel is not needed
//! for the handful of calls a process has in flight at once.
//!
//! # Clocks
//!
//! Deadlines are nanoseconds of the monotonic clock (`CLOCK_MONOTONIC`, the clock of
//! [`Instant`]) since the watchdog started, and the watchdog compares them with that clock read
//! precisely. [`scoped`] takes an [`Instant`]: exact (late by the tens of nanoseconds between
//! two clock reads at start-up). [`scoped_for`] takes a timeout and reads the coarse monotonic
//! clock (`CLOCK_MONOTONIC_COARSE`, a few nanoseconds where a precise read costs tens): the
//! monotonic clock as the kernel last accumulated it, in whole ticks (the coarse clock's
//! resolution, `clock_getres`: 1 to 10 ms) at every tick. It is never ahead of the precise
//! clock, and behind it by less than two ticks while ticks come on time: under one tick of
//! unaccumulated time (a fixed phase, since the accumulation is in whole ticks) plus the time
//! since the last tick (measured here: 2 to 6 ms behind with a 4 ms tick, so one tick of
//! margin is not enough). A [`scoped_for`] deadline is therefore the coarse reading + the
//! timeout + three ticks (one more than that bound, for ticks that come late): the action runs
//! no sooner than the timeout after the call unless the kernel's ticks are more than a whole
//! tick late (e.g. a long-descheduled virtual CPU), and at most three ticks (plus the
//! watchdog's wake-up latency) after.
//! Without the coarse clock (no `rustix` feature, not Linux), [`scoped_for`] reads [`Instant`].
//!
//! # Fork
//!
//! A child forked after the watchdog started has no watchdog thread (only the forking thread
//! comes along) and inherits the slots as the parent's threads left them. A `pthread_atfork`
//! handler counts forks (`rustix_sys::fork_generation`): in a child, every deadline is watched
//! by a thread of its own for that one call, as when the watchdog thread cannot be started.
//! (Without the handler, which only a failed registration leaves out, a fork goes unnoticed.)
//!
//! # Soundness
//!
//! The action is borrowed from the caller's stack: [`scoped`] does not return (not even by
//! unwinding) before it has stored `IDLE` and then seen `busy` down, and the watchdog reads a
//! slot's action only with `busy` up and after seeing the slot's armed word again behind a full
//! barrier (see "Slots"), so it never calls an action whose borrows have ended.

extern crate std;

use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::boxed::Box;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// An action as the watchdog stores it: borrowed from the stack of a [`scoped`] call, its
/// lifetime erased (see the safety argument in [`arm`]).
type Action = *const (dyn Fn() + Sync + 'static);

/// The low two bits of a slot's word; the deadline (nanoseconds) is the rest.
const STATE: u64 = 0b11;
/// No deadline armed: only the slot's owner writes the slot.
const IDLE: u64 = 0;
/// A deadline armed: the watchdog may call the slot's action once it has passed.
const ARMED: u64 = 1;
/// The latest deadline a word holds (146 years): later ones are not armed (they never pass).
const NEVER: u64 = u64::MAX >> 2;

/// One thread's deadline. Aligned so that arming one thread's slot does not touch the cache
/// line of another's.
#[repr(align(128))]
struct Slot {
    /// `deadline << 2 | state`.
    word: AtomicU64,
    /// The action and its repeat (ns). Written by the slot's owner only while the slot is
    /// `IDLE` and its last disarm has seen `busy` down; read by the watchdog only with `busy`
    /// up, after seeing an armed word that the owner stored after writing it (or the
    /// watchdog's own next deadline, a compare-exchange continuing that store).
    call: UnsafeCell<(Action, u64)>,
    /// Raised by the watchdog while it checks the slot again and calls its action.
    busy: AtomicBool,
    /// Claimed by a thread (its slot) or by a nested call (a spare).
    owned: AtomicBool,
    /// The next slot in the list, set before this one is published and never changed after.
    next: AtomicPtr<Slot>,
}

// SAFETY: `call` is the only field that is not itself `Sync`. It is written only by the thread
// that owns the slot, while the word is `IDLE` and after its last disarm saw `busy` down
// (acquiring the watchdog's releasing store that ended its last read), and read by the
// watchdog only with `busy` up and after an acquiring load of an armed word, which the owner
// stored (releasing) after its write, or which the watchdog's compare-exchange wrote in the
// release sequence headed by that store. A write and a read cannot overlap: a write follows a
// disarm, and a disarm that does not wait for `busy` is one the watchdog's second look sees
// (the store-then-load handshake of "Slots"), after which it does not read `call`. The raw
// action pointer is dereferenced only under that same protocol, and its pointee is `Sync`, so
// calling it from the watchdog thread is allowed.
unsafe impl Sync for Slot {}

/// The head of the list of slots (each leaked, never freed).
static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(core::ptr::null_mut());

/// How many slots the list holds (each one heap block of [`SLOT_BYTES`]).
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The heap block each slot takes, in bytes.
pub const SLOT_BYTES: usize = core::mem::size_of::<Slot>();

/// Slots made so far: the most threads that had deadlines armed at once, each kept for good as
/// one heap block of [`SLOT_BYTES`] (the watchdog's only memory). A leak check that counts heap
/// blocks exactly takes their growth into account: it is a high-water mark, not a leak.
pub fn slot_count() -> usize {
    SLOT_COUNT.load(Ordering::Relaxed)
}

/// Every slot, newest first.
fn slots() -> impl Iterator<Item = &'static Slot> {
    let mut p = SLOTS.load(Ordering::SeqCst);
    core::iter::from_fn(move || {
        // SAFETY: every pointer in the list comes from `Box::leak` (never freed) and was
        // initialised, `next` included, before the exchange that published it; loading the head
        // (sequentially consistent, so acquiring) orders those writes before this read, and each
        // `next` points at a slot published before its predecessor was.
        let s = unsafe { p.as_ref() }?;
        p = s.next.load(Ordering::Relaxed);
        Some(s)
    })
}

fn noop() {}

/// An idle slot owned by the caller: a free one from the list, or a new one.
fn claim_spare() -> &'static Slot {
    for s in slots() {
        if !s.owned.load(Ordering::Relaxed) && s.owned.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return s;
        }
    }
    let action: &'static (dyn Fn() + Sync) = &noop;
    let s: &'static Slot = Box::leak(Box::new(Slot {
        word: AtomicU64::new(IDLE),
        call: UnsafeCell::new((action, 0)),
        busy: AtomicBool::new(false),
        owned: AtomicBool::new(true),
        next: AtomicPtr::new(core::ptr::null_mut()),
    }));
    SLOT_COUNT.fetch_add(1, Ordering::Relaxed);
    let mut head = SLOTS.load(Ordering::SeqCst);
    loop {
        s.next.store(head, Ordering::Relaxed);
        // Sequentially consistent: the watchdog's second look (see `watch`) sees this slot if
        // the arm that follows did not see its publication.
        match SLOTS.compare_exchange_weak(head, core::ptr::from_ref(s).cast_mut(), Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return s,
            Err(h) => head = h,
        }
    }
}

/// This thread's slot, handed back when the thread exits.
struct Mine(Cell<Option<&'static Slot>>);

impl Drop for Mine {
    fn drop(&mut self) {
        if let Some(s) = self.0.get() {
            // Idle unless a deadline is armed on it, which cannot be while the thread exits
            // (a slot left armed stays owned: it is never reused).
            if s.word.load(Ordering::Relaxed) & STATE == IDLE {
                s.owned.store(false, Ordering::Release);
            }
        }
    }
}

std::thread_local! {
    static MINE: Mine = const { Mine(Cell::new(None)) };
}

/// An idle slot for one deadline: this thread's, or a spare (`true`) when this thread's is
/// armed (a nested deadline) or gone (the thread is exiting).
fn claim() -> (&'static Slot, bool) {
    let mine = MINE.try_with(|m| match m.0.get() {
        Some(s) => s,
        None => {
            let s = claim_spare();
            m.0.set(Some(s));
            s
        }
    });
    match mine {
        // Only this thread arms its slot; the watchdog writes the word only from an armed word
        // to the next armed word, which loses to the disarm's `IDLE`. So after this thread's
        // last disarm the word is `IDLE`, and it is armed only inside a `scoped` of this thread.
        Ok(s) if s.word.load(Ordering::Relaxed) & STATE == IDLE => (s, false),
        _ => (claim_spare(), true),
    }
}

/// When the watchdog looks next (ns on the watchdog's clock; `NEVER`: when woken).
static WAKE_AT: AtomicU64 = AtomicU64::new(NEVER);
/// Bumped (then `WAKE` notified) when a deadline earlier than `WAKE_AT` is armed; the watchdog
/// sleeps only if it is unchanged since before its last scan, so no wake is lost between its
/// scan and its sleep.
static WAKES: Mutex<u64> = Mutex::new(0);
/// The watchdog waits on it (with `WAKES`).
static WAKE: Condvar = Condvar::new();
/// The watchdog's clock and barriers, once its thread is started (`None`: it could not be).
static WATCHDOG: OnceLock<Option<Watchdog>> = OnceLock::new();
/// Set by [`use_fences_only`] before the watchdog starts.
static FENCES_ONLY: AtomicBool = AtomicBool::new(false);

/// What a started watchdog gives the threads that arm deadlines.
#[derive(Clone, Copy)]
struct Watchdog {
    clock: Clock,
    barrier: Barrier,
    /// The process's fork generation when the thread started (`None`: forks go unnoticed).
    forks: Option<i32>,
}

/// The watchdog of this process: `None` if its thread could not be started, or if this process
/// is a child forked after it started (the thread did not come along, and the slots may hold
/// the parent's state).
#[inline]
fn running() -> Option<&'static Watchdog> {
    watchdog().filter(|w| w.forks.is_none() || w.forks == os::fork_generation())
}

/// The full barrier between a side's store and its load in the handshakes of "Slots" and
/// "Waking the watchdog", chosen once, before the watchdog thread starts (both sides must use
/// the same kind for the whole life of the process).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Barrier {
    /// The owner's side is a compiler fence; the watchdog's side is
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes every running thread of the
    /// process pass a full barrier (a thread that is not running passed one when it was switched
    /// out).
    Membarrier,
    /// A sequentially consistent fence on both sides.
    Fences,
}

impl Barrier {
    /// The kind this process can use: `membarrier` if the kernel has the private expedited
    /// command and registering for it works, else fences.
    fn choose() -> Barrier {
        if FENCES_ONLY.load(Ordering::SeqCst) {
            return Barrier::Fences;
        }
        if os::private_membarrier() {
            Barrier::Membarrier
        } else {
            Barrier::Fences
        }
    }

    /// The owner's side (the hot path).
    #[inline(always)]
    fn light(self) {
        match self {
            Barrier::Membarrier => core::sync::atomic::compiler_fence(Ordering::SeqCst),
            Barrier::Fences => core::sync::atomic::fence(Ordering::SeqCst),
        }
    }

    /// The watchdog's side; `false` if the barrier could not be made (`membarrier` can fail
    /// even after a successful registration, e.g. `ENOMEM` for its CPU mask). The caller must
    /// then not rely on the handshake: going on without the barrier could call an action whose
    /// borrows have ended.
    fn try_heavy(self) -> bool {
        core::sync::atomic::fence(Ordering::SeqCst);
        match self {
            Barrier::Fences => true,
            Barrier::Membarrier => match os::membarrier() {
                Ok(()) => true,
                Err(e) => {
                    log::error!("membarrier failed ({e}); the watchdog retries in 1 ms");
                    false
                }
            },
        }
    }

    /// [`try_heavy`](Self::try_heavy) until it succeeds, sleeping 1 ms between tries (only where
    /// the watchdog holds no slot `busy`, so that waiting delays deadlines and nothing else).
    fn heavy(self) {
        while !self.try_heavy() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Makes this process's watchdog use sequentially consistent fences on both sides even where
/// `membarrier` is available (what it does without it). Only before the watchdog starts (the
/// first deadline armed): returns whether the watchdog had not started yet, which means the
/// choice was applied only if no other thread was arming its first deadline at the same time.
/// For tests of that path: call it before any other thread can arm a deadline.
pub fn use_fences_only() -> bool {
    FENCES_ONLY.store(true, Ordering::SeqCst);
    WATCHDOG.get().is_none()
}

/// Whether this process's watchdog uses `membarrier` (`Some(true)`), fences (`Some(false)`),
/// or has not started (`None`).
pub fn uses_membarrier() -> Option<bool> {
    WATCHDOG.get().map(|w| w.is_some_and(|w| w.barrier == Barrier::Membarrier))
}

fn wake_watchdog() {
    *WAKES.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    WAKE.notify_one();
}

fn watchdog() -> Option<&'static Watchdog> {
    WATCHDOG
        .get_or_init(|| {
            let w = Watchdog { clock: Clock::new(), barrier: Barrier::choose(), forks: os::fork_generation() };
            match std::thread::Builder::new().name("hexrpc-watchdog".into()).spawn(move || watch(w)) {
                Ok(_) => Some(w),
                Err(e) => {
                    log::error!("cannot start the watchdog thread ({e}); deadlines are watched by a thread per call");
                    None
                }
            }
        })
        .as_ref()
}

/// Runs `body` on this thread. If it has not returned at `deadline`, the process's watchdog
/// thread calls `action` (on the watchdog thread), then again every `repeat` while `body` runs.
/// When `scoped` returns, `action` is not running and will never be called again.
///
/// If the watchdog thread cannot be started, a thread of its own watches this one call (as
/// before a watchdog existed), with the same guarantees.
pub fn scoped<R>(deadline: Instant, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    match running() {
        Some(w) => arm(w.barrier, w.clock.at(deadline), repeat, action, body),
        None => scoped_thread(deadline, repeat, action, body),
    }
}

/// [`scoped`] with the deadline `timeout` from now, read from the coarse monotonic clock: the
/// action runs no sooner than `timeout` after this call and at most three clock ticks (3 to 30
/// ms: three times the coarse clock's resolution) plus the watchdog's wake-up latency later. A deadline
/// beyond the clock's range never passes. This is the cheap way to arm a timeout (see the
/// module's "Clocks").
pub fn scoped_for<R>(timeout: Duration, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    match running() {
        Some(w) => arm(w.barrier, w.clock.after(timeout), repeat, action, body),
        None => match Instant::now().checked_add(timeout) {
            Some(deadline) => scoped_thread(deadline, repeat, action, body),
            None => body(),
        },
    }
}

/// Arms `action` at `deadline` (ns on the watchdog's clock) in a slot of this thread's, runs
/// `body`, disarms.
#[inline]
fn arm<R>(barrier: Barrier, deadline: u64, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    if deadline >= NEVER {
        return body();
    }
    // SAFETY: only the lifetime is erased (same pointee, same vtable). The pointer is stored in
    // a slot that `Disarm` below takes back to `IDLE`, and then waits until the watchdog is not
    // deciding on it (`busy` down), before `arm` returns or unwinds; the watchdog dereferences
    // a slot's pointer only with `busy` up and after seeing the armed word again behind a full
    // barrier, which it cannot after a disarm that did not wait (see "Slots"). So the pointer is
    // never used after the borrow of `action` ends.
    let erased: Action = unsafe { core::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync + 'static)>(action) };
    let (slot, spare) = claim();
    // SAFETY: the slot is `IDLE` and this call alone uses it (its thread's, not armed, or a
    // spare claimed through `owned`); see the `Sync` impl of `Slot`.
    unsafe { *slot.call.get() = (erased, nanos(repeat)) };
    // Releasing: the watchdog's acquiring load of this word sees the write of `call` above.
    slot.word.store(deadline << 2 | ARMED, Ordering::Release);
    let _disarm = Disarm { slot, spare, barrier };
    // The store above, then the read of `WAKE_AT` (the watchdog: `WAKE_AT`, then the words).
    barrier.light();
    if deadline < WAKE_AT.load(Ordering::Relaxed) {
        // The watchdog plans to look no later than this deadline (see `watch`), so the calls
        // after this one with later deadlines need not wake it.
        WAKE_AT.fetch_min(deadline, Ordering::SeqCst);
        wake_watchdog();
    }
    body()
}

/// Takes a slot back to `IDLE`, then waits while the watchdog decides on it or calls its
/// action (on return and on unwind).
struct Disarm {
    slot: &'static Slot,
    /// Hand the slot back after (a spare).
    spare: bool,
    barrier: Barrier,
}

impl Drop for Disarm {
    #[inline]
    fn drop(&mut self) {
        // Whatever the word holds (this arm's, or the watchdog's next deadline after a call of
        // the action): the watchdog's compare-exchange from the word it saw loses to this store.
        self.slot.word.store(IDLE, Ordering::Release);
        // The store above, then the read of `busy` (the watchdog: `busy`, then the word).
        self.barrier.light();
        // Acquiring: the watchdog's last read of `call` and its last call of the action come
        // before this returns.
        while self.slot.busy.load(Ordering::Acquire) {
            // The watchdog is checking this slot or calling its action (an interrupt:
            // microseconds).
            std::thread::yield_now();
        }
        if self.spare {
            self.slot.owned.store(false, Ordering::Release);
        }
    }
}

/// The watchdog thread: calls every action whose time has come, then sleeps until the next.
fn watch(w: Watchdog) {
    let Watchdog { clock, barrier, .. } = w;
    loop {
        let wakes = *WAKES.lock().unwrap_or_else(PoisonError::into_inner);
        let now = clock.now();
        // What this thread published last, or an earlier deadline an arm lowered it to.
        let planned = WAKE_AT.load(Ordering::SeqCst);
        let mut earliest = NEVER;
        for s in slots() {
            let mut w = s.word.load(Ordering::Acquire);
            if w & STATE == ARMED && w >> 2 <= now {
                w = fire(barrier, &clock, s, w);
            }
            if w & STATE == ARMED {
                earliest = earliest.min(w >> 2);
            }
        }
        // The earliest deadline armed; with none, the time already planned (if still ahead), so
        // that calls arming and disarming in a stream find the watchdog asleep until a time no
        // later than theirs and need not wake it (it sleeps without a limit only after a
        // planned wake found nothing).
        let next = if planned > now { earliest.min(planned) } else { earliest };
        // (An arm lowering `WAKE_AT` between the load above and this store also bumps `WAKES`:
        // this thread then looks again before sleeping.)
        WAKE_AT.store(next, Ordering::SeqCst);
        // The store above, then a second look at the words (an arm: its word, then `WAKE_AT`):
        // an arm that read the old `WAKE_AT` (and so did not wake this thread) is seen here.
        barrier.heavy();
        if slots().any(|s| {
            let w = s.word.load(Ordering::Relaxed);
            w & STATE == ARMED && w >> 2 < next
        }) {
            continue;
        }
        let g = WAKES.lock().unwrap_or_else(PoisonError::into_inner);
        if *g != wakes {
            continue;
        }
        drop(if next == NEVER {
            WAKE.wait(g).unwrap_or_else(PoisonError::into_inner)
        } else {
            let left = Duration::from_nanos(next.saturating_sub(clock.now()));
            WAKE.wait_timeout(g, left).unwrap_or_else(PoisonError::into_inner).0
        });
    }
}

/// Calls the action of slot `s`, whose word `w` the watchdog read armed with a deadline that has
/// passed, if it is still armed with that word, and arms the slot for the next call; returns
/// the slot's word as this leaves it (for the earliest deadline).
fn fire(barrier: Barrier, clock: &Clock, s: &Slot, w: u64) -> u64 {
    s.busy.store(true, Ordering::Relaxed);
    // `busy`, then the word again (the owner's disarm: the word, then `busy`). Without the
    // barrier the word read again proves nothing: lower `busy` (the owner may be waiting for it)
    // and leave the slot armed for a later look.
    if !barrier.try_heavy() {
        s.busy.store(false, Ordering::Release);
        std::thread::sleep(Duration::from_millis(1));
        return w;
    }
    let again = s.word.load(Ordering::Acquire);
    let left = if again == w {
        // SAFETY: `busy` is up and, behind the full barrier, the word is still the armed word
        // the owner stored (releasing) after writing `call`: its `scoped` call is inside `body`
        // or waiting in `Disarm` for `busy` to go down, and it writes `call` again only after
        // that, so the borrow behind the action is alive and `call` unchanged until `busy` is
        // lowered below.
        let (action, repeat) = unsafe { *s.call.get() };
        // SAFETY: as above.
        let action = unsafe { &*action };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(action)).is_err() {
            log::error!("a deadline action panicked");
        }
        let next = clock.now().saturating_add(repeat).min(NEVER - 1) << 2 | ARMED;
        // Loses to a disarm that stored `IDLE` meanwhile.
        match s.word.compare_exchange(w, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => next,
            Err(now) => now,
        }
    } else {
        again
    };
    // Releasing: this thread's reads of `call` and the action's effects come before a disarm
    // that sees `busy` down.
    s.busy.store(false, Ordering::Release);
    left
}

/// [`scoped`] with a thread of its own (when the watchdog thread cannot be started).
fn scoped_thread<R>(deadline: Instant, repeat: Duration, action: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let now = Instant::now();
                if now >= deadline {
                    action();
                    std::thread::park_timeout(repeat);
                } else {
                    std::thread::park_timeout(deadline - now);
                }
            }
        });
        // Unparks and stops the watcher on return and on unwind.
        struct Stop<'a>(&'a AtomicBool, &'a std::thread::Thread);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
                self.1.unpark();
            }
        }
        let _stop = Stop(&done, watcher.thread());
        body()
    })
}

/// Deadlines armed now (for tests: 0 once every [`scoped`] call has returned).
pub fn armed() -> usize {
    slots().filter(|s| s.word.load(Ordering::SeqCst) & STATE != IDLE).count()
}

fn nanos(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

/// The watchdog's clock: nanoseconds of the monotonic clock since the watchdog started.
#[derive(Clone, Copy)]
struct Clock {
    /// [`Instant`] at the start.
    base: Instant,
    /// The monotonic clock read by the system (see [`os`]), when there is one.
    os: Option<Os>,
}

#[derive(Clone, Copy)]
struct Os {
    /// `CLOCK_MONOTONIC` (ns) read just before `base`.
    raw: u64,
    /// How long reading `base` took (ns): `base` is at most this after `raw`.
    skew: u64,
    /// The margin added to coarse deadlines (ns): three of its ticks (it is behind the precise
    /// clock by less than two while ticks come on time; the third absorbs a late tick).
    lag: u64,
}

impl Clock {
    fn new() -> Self {
        let mut best: Option<(Instant, Os)> = None;
        // The tightest of a few (raw, base, raw) brackets: a preemption inside one only makes
        // `skew` (the lateness of `scoped` deadlines) larger.
        for _ in 0..8 {
            let (Some(before), base, Some(after), Some(tick)) = (os::monotonic(), Instant::now(), os::monotonic(), os::coarse_tick())
            else {
                return Clock { base: Instant::now(), os: None };
            };
            let os = Os { raw: before, skew: after.saturating_sub(before), lag: tick.saturating_mul(3) };
            if best.is_none_or(|(_, b)| os.skew < b.skew) {
                best = Some((base, os));
            }
            if os.skew < 10_000 {
                break;
            }
        }
        let (base, os) = best.map_or((Instant::now(), None), |(b, o)| (b, Some(o)));
        Clock { base, os }
    }

    /// Now, precisely.
    fn now(&self) -> u64 {
        match self.os {
            // A failed read (never, with a valid clock id) counts as the start: late, never early.
            Some(os) => os::monotonic().map_or(0, |t| t.saturating_sub(os.raw)),
            None => nanos(Instant::now().saturating_duration_since(self.base)),
        }
    }

    /// `deadline` on this clock, never earlier than it.
    #[inline]
    fn at(&self, deadline: Instant) -> u64 {
        let skew = self.os.map_or(0, |os| os.skew);
        nanos(deadline.saturating_duration_since(self.base)).saturating_add(skew)
    }

    /// `timeout` from now on this clock, never earlier (the coarse clock when there is one).
    #[inline]
    fn after(&self, timeout: Duration) -> u64 {
        let start = match self.os.and_then(|os| Some(os::coarse()?.saturating_sub(os.raw).saturating_add(os.lag))) {
            Some(start) => start,
            None => self.at(Instant::now()),
        };
        start.saturating_add(nanos(timeout))
    }
}

/// The system's monotonic clocks (ns).
#[cfg(all(feature = "rustix", any(target_os = "linux", target_os = "android")))]
mod os {
    fn read(id: libc::clockid_t) -> Option<u64> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(id, &mut ts) };
        let (s, ns) = (u64::try_from(ts.tv_sec).ok()?, u64::try_from(ts.tv_nsec).ok()?);
        (rc == 0).then(|| s.saturating_mul(1_000_000_000).saturating_add(ns))
    }

    /// `CLOCK_MONOTONIC`, the clock of `Instant`.
    pub(super) fn monotonic() -> Option<u64> {
        read(libc::CLOCK_MONOTONIC)
    }

    /// `CLOCK_MONOTONIC_COARSE`: `CLOCK_MONOTONIC` as of the last tick.
    #[inline]
    pub(super) fn coarse() -> Option<u64> {
        read(libc::CLOCK_MONOTONIC_COARSE)
    }

    /// The resolution of [`coarse`] (ns), if it can be read.
    #[cfg(not(miri))]
    pub(super) fn coarse_tick() -> Option<u64> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        let (s, ns) = (u64::try_from(ts.tv_sec).ok()?, u64::try_from(ts.tv_nsec).ok()?);
        (rc == 0 && coarse().is_some()).then(|| s.saturating_mul(1_000_000_000).saturating_add(ns))
    }

    /// Miri has no `clock_getres`; its coarse clock is its precise one, so any tick is a margin.
    #[cfg(miri)]
    pub(super) fn coarse_tick() -> Option<u64> {
        coarse().map(|_| 1_000_000)
    }

    /// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` works for this process: the kernel
    /// has the command (Linux 4.14 and later), the process registered for it, and one call
    /// succeeded. Not under Miri, which has no `membarrier` and checks the fence path.
    #[cfg(not(miri))]
    pub(super) fn private_membarrier() -> bool {
        use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};
        let q = membarrier_query();
        q.contains_command(MembarrierCommand::PrivateExpedited)
            && q.contains_command(MembarrierCommand::RegisterPrivateExpedited)
            && membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok()
            && membarrier(MembarrierCommand::PrivateExpedited).is_ok()
    }

    #[cfg(miri)]
    pub(super) fn private_membarrier() -> bool {
        false
    }

    /// A full barrier on every running thread of the process (after [`private_membarrier`]).
    pub(super) fn membarrier() -> Result<(), rustix::io::Errno> {
        rustix::thread::membarrier(rustix::thread::MembarrierCommand::PrivateExpedited)
    }

    /// The process's fork generation (`None`: forks go unnoticed).
    #[cfg(not(miri))]
    #[inline]
    pub(super) fn fork_generation() -> Option<i32> {
        crate::rustix_sys::fork_generation()
    }

    /// Miri has no `pthread_atfork` (and no `fork`).
    #[cfg(miri)]
    pub(super) fn fork_generation() -> Option<i32> {
        None
    }
}

/// The number of `fork`s this process descends through: 0 in a process that was not forked
/// since the handler was registered (at the first call), bumped in the child of every `fork` by
/// a `pthread_atfork` handler. `None` where forks cannot be noticed (no real system calls,
/// Miri, or a registration that failed). After the first call it is one atomic load, cheap
/// enough to check on every call: an object made in one generation and used in another is in a
/// forked child, whose threads did not come along and whose descriptors are the parent's.
pub fn fork_generation() -> Option<i32> {
    os::fork_generation()
}

/// No system clocks: the watchdog reads [`Instant`] only.
#[cfg(not(all(feature = "rustix", any(target_os = "linux", target_os = "android"))))]
mod os {
    pub(super) fn monotonic() -> Option<u64> {
        None
    }
    pub(super) fn coarse() -> Option<u64> {
        None
    }
    pub(super) fn coarse_tick() -> Option<u64> {
        None
    }
    pub(super) fn private_membarrier() -> bool {
        false
    }
    pub(super) fn membarrier() -> Result<(), core::convert::Infallible> {
        Ok(())
    }
    pub(super) fn fork_generation() -> Option<i32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;
    use std::vec::Vec;

    /// Whether this thread's own slot is idle (it has one once it armed a deadline).
    fn my_slot_is_idle() -> bool {
        MINE.with(|m| m.0.get().is_none_or(|s| s.word.load(Ordering::SeqCst) & STATE == IDLE))
    }

    #[test]
    fn a_call_that_returns_in_time_never_sees_the_action() {
        let calls = AtomicU32::new(0);
        let action = || {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        for i in 0..1000 {
            let r = if i % 2 == 0 {
                scoped(Instant::now() + Duration::from_secs(5), Duration::from_millis(2), &action, || 7)
            } else {
                scoped_for(Duration::from_secs(5), Duration::from_millis(2), &action, || 7)
            };
            assert_eq!(r, 7);
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert!(my_slot_is_idle());
    }

    #[test]
    fn a_late_call_gets_the_action_repeatedly_until_it_returns_and_never_after() {
        let calls = AtomicU32::new(0);
        let action = || {
            calls.fetch_add(1, Ordering::SeqCst);
        };
        let start = Instant::now();
        scoped(start + Duration::from_millis(10), Duration::from_millis(2), &action, || {
            while calls.load(Ordering::SeqCst) < 3 {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert!(start.elapsed() >= Duration::from_millis(10), "not before the deadline");
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), after, "no call after scoped returned");
    }

    #[test]
    fn a_timeout_on_the_coarse_clock_never_fires_early() {
        // Timeouts shorter than a tick, several within one tick of the coarse clock: without
        // the margin (three ticks), its lag (up to two ticks) would fire most of these early.
        for k in 0..if cfg!(miri) { 2 } else { 20 } {
            let timeout = Duration::from_micros(300 + 97 * k);
            let first = std::sync::Mutex::new(None::<Instant>);
            let action = || {
                first.lock().unwrap().get_or_insert_with(Instant::now);
            };
            let start = Instant::now();
            scoped_for(timeout, Duration::from_millis(1), &action, || {
                while first.lock().unwrap().is_none() {
                    assert!(start.elapsed() < Duration::from_secs(10), "the deadline never passed");
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            let at = first.lock().unwrap().unwrap();
            assert!(at >= start + timeout, "fired {:?} after the call, before its timeout {timeout:?}", at - start);
        }
    }

    #[test]
    fn an_earlier_deadline_wakes_the_watchdog_and_many_calls_are_watched_at_once() {
        // A long deadline first puts the watchdog to sleep for a minute.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let waiter = std::thread::spawn(move || {
            let nothing = || {};
            scoped(Instant::now() + Duration::from_secs(60), Duration::from_millis(2), &nothing, || {
                ready_tx.send(()).unwrap();
                rx.recv().unwrap();
            })
        });
        ready_rx.recv().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|k| {
                std::thread::spawn(move || {
                    let hits = AtomicU32::new(0);
                    let action = || {
                        hits.fetch_add(1, Ordering::SeqCst);
                    };
                    let start = Instant::now();
                    let body = || {
                        while hits.load(Ordering::SeqCst) == 0 {
                            assert!(start.elapsed() < Duration::from_secs(5), "the watchdog did not wake for an earlier deadline");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    };
                    if k % 2 == 0 {
                        scoped(start + Duration::from_millis(5 + k), Duration::from_millis(2), &action, body);
                    } else {
                        scoped_for(Duration::from_millis(5 + k), Duration::from_millis(2), &action, body);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        tx.send(()).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn nested_deadlines_on_one_thread_are_each_watched() {
        let (outer, inner) = (AtomicU32::new(0), AtomicU32::new(0));
        let outer_action = || {
            outer.fetch_add(1, Ordering::SeqCst);
        };
        let inner_action = || {
            inner.fetch_add(1, Ordering::SeqCst);
        };
        let start = Instant::now();
        // The inner deadline passes first, then the outer one while the inner body still runs.
        scoped(start + Duration::from_millis(30), Duration::from_millis(2), &outer_action, || {
            scoped(start + Duration::from_millis(5), Duration::from_millis(2), &inner_action, || {
                while outer.load(Ordering::SeqCst) == 0 {
                    assert!(start.elapsed() < Duration::from_secs(10), "the outer deadline was not watched");
                    std::thread::sleep(Duration::from_millis(1));
                }
                assert!(inner.load(Ordering::SeqCst) > 0, "the inner deadline was not watched");
            });
            assert!(!my_slot_is_idle(), "the outer deadline is still armed");
        });
        assert!(my_slot_is_idle());
        let (o, i) = (outer.load(Ordering::SeqCst), inner.load(Ordering::SeqCst));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!((outer.load(Ordering::SeqCst), inner.load(Ordering::SeqCst)), (o, i), "no call after scoped returned");
    }

    #[test]
    fn a_panicking_body_is_disarmed() {
        static CALLS: AtomicU32 = AtomicU32::new(0);
        let action = || {
            CALLS.fetch_add(1, Ordering::SeqCst);
        };
        for nested in [false, true] {
            let r = std::panic::catch_unwind(|| {
                let armed = || scoped(Instant::now() + Duration::from_millis(5), Duration::from_millis(1), &action, || panic!("boom"));
                if nested {
                    scoped_for(Duration::from_secs(60), Duration::from_millis(1), &action, armed)
                } else {
                    armed()
                }
            });
            assert!(r.is_err());
            assert!(my_slot_is_idle(), "the deadline outlived its scoped call");
        }
        // The panic hook (a backtrace) may outlast the deadline: calls until then are allowed.
        let calls = CALLS.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(CALLS.load(Ordering::SeqCst), calls, "an action ran after its scoped call unwound");
    }

    mod race {
        use super::scoped;
        include!("watchdog_race.rs");
    }

    /// Many threads whose calls return right around their deadlines, the watchdog firing some
    /// of them as they disarm: an action never runs after its `scoped` call returned, nor
    /// before its deadline.
    #[test]
    fn an_action_never_runs_after_scoped_returns_even_at_the_deadline() {
        let (late, early, fired) = if cfg!(miri) { race::race(3, 20) } else { race::race(8, 1500) };
        assert_eq!((late, early), (0, 0), "(calls after scoped returned, calls before the deadline)");
        assert!(fired > 0, "no deadline passed: the race was not exercised");
    }

    /// The barrier kind is the one the kernel offers (`membarrier` where it works), fixed at the
    /// first deadline; the fence path is raced in `tests/watchdog_fences.rs`.
    #[test]
    fn the_barrier_is_membarrier_where_the_kernel_has_it() {
        scoped_for(Duration::from_secs(5), Duration::from_millis(2), &|| {}, || ());
        assert_eq!(uses_membarrier(), Some(os::private_membarrier()));
        assert!(!use_fences_only(), "too late once the watchdog runs");
        FENCES_ONLY.store(false, Ordering::SeqCst);
    }

    #[test]
    fn slots_are_handed_back_by_exiting_threads() {
        let action = || {};
        for _ in 0..if cfg!(miri) { 10 } else { 200 } {
            std::thread::spawn(move || scoped_for(Duration::from_secs(60), Duration::from_millis(1), &action, || ())).join().unwrap();
        }
        // Other tests run at once, but far fewer than 200 threads of them.
        let slots = slots().count();
        assert!(slots < 100, "{slots} slots: exited threads' slots are not reused");
    }
}
