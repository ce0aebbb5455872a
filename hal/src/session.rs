//! The ready session: buffer allocation, libraries, invokes, recovery.

use core::fmt::Write as _;
use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{adsprpc, listener, Fd, Syscalls};

use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;
use crate::image::LibraryImage;
use crate::ion::{IonLease, RawLease};
use crate::stages::{self, Channel, IonOpened};

/// Most libraries open at once on one session.
pub const MAX_LIBRARIES: usize = 16;
/// Longest library name (the unique name the DSP fetches, `NAME-SEQ`).
pub const MAX_NAME: usize = 48;
/// Bytes of DSP error text kept from a failed library open.
pub const DLERROR_LEN: usize = 256;

const HEALTHY: u8 = 0;
const NEEDS_RECOVERY: u8 = 1;
const FAILED: u8 = 2;

/// Where library images are published so the DSP can fetch them by name: the reverse file
/// service implements it (it serves each image from memory under its unique name).
pub trait ImageRegistry: Sync {
    /// Makes `image` available under `name` until [`withdraw`](ImageRegistry::withdraw).
    /// Returns false if the registry refuses (full, duplicate name).
    fn publish(&self, name: &str, image: LibraryImage) -> bool;
    /// Removes the image published under `name`.
    fn withdraw(&self, name: &str);
}

struct LibSlot {
    name: heapless::String<MAX_NAME>,
    remote: u32,
}

struct ChannelState<S: Syscalls> {
    channel: Option<Channel<S>>,
}

/// A ready session: the DSP process exists and its reverse-RPC listener is registered.
///
/// Share it between threads (`&Session` is `Sync` when `S` is) to launch from many threads;
/// opening and closing libraries is serialized inside. When a call reports
/// [`Cause::DspRestart`] or [`Cause::Timeout`], further calls fail with
/// [`Cause::NeedsRecovery`] until [`recover`](Session::recover) succeeds.
pub struct Session<S: Syscalls + Clone> {
    // Field order is release order: libraries, channel (process exit, fd close), ION device.
    libs: spin::Mutex<[Option<LibSlot>; MAX_LIBRARIES]>,
    chan: spin::RwLock<ChannelState<S>>,
    health: AtomicU8,
    generation: AtomicU32,
    /// `(generation << 32) | fd` of the channel the listener must serve; 0 while none is.
    listener_channel: AtomicU64,
    listener_tid: AtomicI32,
    listener_serving: AtomicU32,
    info: u32,
    pub(crate) ion: OwnedFd<S>,
    pub(crate) sys: S,
    pub(crate) board: &'static Board,
}

static NAME_SEQ: AtomicU32 = AtomicU32::new(1);

fn pack_channel(fd: Fd, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(fd.0 as u32)
}

fn le32(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

impl<S: Syscalls + Clone> Session<S> {
    /// Runs every init stage: ION, shell, channel, process, listener.
    pub fn start(sys: S, access: &DeviceAccess) -> Result<Self, HalError> {
        IonOpened::open(sys, access)?.stage_shell()?.open_channel()?.create_process()?.attach_listener()
    }

    pub(crate) fn from_parts(ion: IonOpened<S>, channel: Channel<S>, info: u32) -> Self {
        let fd = channel.fd();
        Session {
            libs: spin::Mutex::new([const { None }; MAX_LIBRARIES]),
            chan: spin::RwLock::new(ChannelState { channel: Some(channel) }),
            health: AtomicU8::new(HEALTHY),
            generation: AtomicU32::new(1),
            listener_channel: AtomicU64::new(pack_channel(fd, 1)),
            listener_tid: AtomicI32::new(0),
            listener_serving: AtomicU32::new(0),
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

    /// The FastRPC fd the reverse-RPC listener must serve on, and the channel generation (it
    /// changes with every successful recovery). `None` while recovery replaces the channel, and
    /// after recovery failed. A listener serving generation `g` must leave its channel as soon as
    /// this no longer returns `g`.
    pub fn listener_fd(&self) -> Option<(Fd, u32)> {
        if self.health.load(Ordering::Acquire) == FAILED {
            return None;
        }
        match self.listener_channel.load(Ordering::Acquire) {
            0 => None,
            v => Some((Fd(v as u32 as i32), (v >> 32) as u32)),
        }
    }

    /// Records the thread that serves the listener, so that recovery can interrupt its blocked
    /// `next2` before closing the old channel.
    pub fn set_listener_thread(&self, tid: i32) {
        self.listener_tid.store(tid, Ordering::Release);
    }

    /// Records which channel generation the listener thread is serving now (0: none). Recovery
    /// waits for the listener to leave the old channel before closing it: a thread blocked in
    /// `next2` keeps the old file alive, and the DSP would never release it.
    pub fn set_listener_serving(&self, generation: u32) {
        self.listener_serving.store(generation, Ordering::Release);
    }

    /// Reports that channel generation `generation` saw a DSP restart (or the process exiting)
    /// somewhere other than in a call of this session, typically in the reverse-RPC listener:
    /// the session then needs [`recover`](Session::recover), and calls fail with
    /// [`Cause::NeedsRecovery`] until it has run. A report about an older generation is ignored.
    pub fn report_restart(&self, generation: u32) {
        if self.generation.load(Ordering::Acquire) == generation
            && self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            log::warn!("the DSP side of channel generation {generation} went away; the session needs recover()");
        }
    }

    /// Interrupts the listener thread until it has left channel generation `old` (std: at most
    /// one second; without std: one interrupt).
    fn retire_listener(&self, old: u32) {
        let tid = self.listener_tid.load(Ordering::Acquire);
        if tid == 0 {
            return;
        }
        #[cfg(feature = "std")]
        {
            extern crate std;
            let start = std::time::Instant::now();
            while self.listener_serving.load(Ordering::Acquire) == old && start.elapsed() < std::time::Duration::from_secs(1) {
                let _ = self.sys.interrupt(tid);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if self.listener_serving.load(Ordering::Acquire) == old {
                log::warn!("the reverse-RPC listener did not leave the old channel; recovering anyway");
            }
        }
        #[cfg(not(feature = "std"))]
        {
            let _ = old;
            let _ = self.sys.interrupt(tid);
        }
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
            let _ = self.health.compare_exchange(HEALTHY, NEEDS_RECOVERY, Ordering::AcqRel, Ordering::Acquire);
            log::warn!("{e}");
        }
        e
    }

    /// Opens a library: publishes `image` under a unique name in `registry`, asks the DSP to load
    /// it (the DSP fetches the image back through the reverse file service) and returns a handle
    /// that closes the library and withdraws the image when dropped.
    ///
    /// `name` may hold ASCII letters, digits, `_`, `-` and `.` (at most 32 bytes). A library is
    /// opened once and invoked many times. The image is a `&'static [u8]` or (std) owned bytes
    /// ([`LibraryImage`]); the registry keeps it until the library is closed. When the DSP's
    /// loader refuses the image (bad ELF, unresolved symbol, no `entry`, ...) the error is
    /// [`Cause::Refused`] with the AEE code and the loader's reason.
    pub fn open_library<'s>(
        &'s self,
        registry: &'s dyn ImageRegistry,
        name: &str,
        image: impl Into<LibraryImage>,
    ) -> Result<Library<'s, S>, HalError> {
        let st = Stage::LibraryOpen;
        let image = image.into();
        if name.is_empty() || name.len() > 32 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
            return Err(HalError::new(st, Cause::Invalid));
        }
        // Lock order everywhere: `chan` before `libs`, and `libs` never across a DSP call.
        let chan = self.chan.read();
        self.check_health(st)?;
        let ch = chan.channel.as_ref().ok_or(HalError::new(st, Cause::NeedsRecovery))?;
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
            remotectl_open(&self.sys, ch.fd(), &unique).map_err(|e| {
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

    pub(crate) fn close_slot(&self, registry: &dyn ImageRegistry, slot: usize) {
        let chan = self.chan.read();
        let Some(lib) = self.libs.lock()[slot].take() else { return };
        if self.is_healthy() {
            if let Some(ch) = chan.channel.as_ref() {
                if let Err(e) = remotectl_close(&self.sys, ch.fd(), lib.remote) {
                    log::warn!("closing library {}: {e}", lib.name);
                }
            }
        }
        drop(chan);
        registry.withdraw(&lib.name);
    }

    pub(crate) fn remote_handle(&self, slot: usize) -> Option<u32> {
        self.libs.lock()[slot].as_ref().map(|l| l.remote)
    }

    /// One library call. A signal that interrupts it is not ours to act on: the drivers resume
    /// the parked call at once. A deadline that fired abandons it instead: the drivers retire the
    /// channel's descriptor first (nothing can resume the parked call into buffers that are
    /// gone), the error is [`Cause::Timeout`], and the session needs `recover()`, which closes
    /// the channel.
    pub(crate) fn invoke_slot<const CAP: usize>(
        &self,
        slot: usize,
        args: &mut adsprpc::InvokeArgs<'_, CAP>,
        fired: Option<&core::sync::atomic::AtomicBool>,
    ) -> Result<(), HalError> {
        let st = Stage::Invoke;
        // Lock order: `chan` before `libs`; the handle read under `chan` belongs to its channel.
        let chan = self.chan.read();
        self.check_health(st)?;
        let ch = chan.channel.as_ref().ok_or(HalError::new(st, Cause::NeedsRecovery))?;
        let remote = self.remote_handle(slot).ok_or(HalError::new(st, Cause::Invalid))?;
        let abandon = || fired.is_some_and(|f| f.load(Ordering::Acquire));
        match adsprpc::invoke_attrs_abandonable(&self.sys, ch.fd(), remote, args, &abandon) {
            Err(hexrpc_drivers::Error::Os(hexrpc_drivers::Errno::EINTR)) => Err(self.note_failure(HalError::new(st, Cause::Timeout))),
            r => r.map_err(|e| self.note_failure(HalError::sys(st, e))),
        }
    }

    /// Rebuilds the DSP side after a restart or a timeout: asks the old process to exit, closes
    /// the old channel (which frees parked calls), re-runs the stages from the shell, registers
    /// the listener and re-opens every library that was open. One attempt: if it fails the
    /// session is marked failed and the error is returned.
    ///
    /// Waits for calls in flight to return. A listener thread recorded with
    /// [`set_listener_thread`](Session::set_listener_thread) is interrupted until it reports (with
    /// [`set_listener_serving`](Session::set_listener_serving)) that it left the old channel; it
    /// must then serve the new [`listener_fd`](Session::listener_fd) for the library re-opens to
    /// succeed. `ReverseService::spawn_for_session` in the runtime does all of this.
    pub fn recover(&self) -> Result<(), HalError> {
        match self.health.load(Ordering::Acquire) {
            HEALTHY => return Ok(()),
            FAILED => return Err(HalError::new(Stage::Recover, Cause::Failed)),
            _ => {}
        }
        let mut chan = self.chan.write();
        if self.is_healthy() {
            return Ok(());
        }
        // Unpublish the channel first: the listener leaves a channel that is no longer published.
        self.listener_channel.store(0, Ordering::Release);
        self.retire_listener(self.generation.load(Ordering::Acquire));
        drop(chan.channel.take());
        let result = self.rebuild(&mut chan);
        match result {
            Ok(()) => {
                self.health.store(HEALTHY, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                drop(chan.channel.take());
                self.health.store(FAILED, Ordering::Release);
                Err(HalError::new(Stage::Recover, e.cause))
            }
        }
    }

    fn rebuild(&self, chan: &mut ChannelState<S>) -> Result<(), HalError> {
        let shell = stages::stage_shell(&self.sys, self.ion.raw(), self.board)?;
        let (rpc, _) = stages::open_channel(&self.sys, self.board)?;
        let ch = stages::create_process(&self.sys, rpc, &shell)?;
        drop(shell);
        stages::attach_listener(&self.sys, &ch)?;
        let fd = ch.fd();
        chan.channel = Some(ch);
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        // The listener serves the new channel from here on; the libraries need it to load.
        self.listener_channel.store(pack_channel(fd, generation), Ordering::Release);
        let names: heapless::Vec<(usize, heapless::String<MAX_NAME>), MAX_LIBRARIES> =
            self.libs.lock().iter().enumerate().filter_map(|(i, l)| l.as_ref().map(|l| (i, l.name.clone()))).collect();
        for (slot, name) in names {
            let remote = remotectl_open(&self.sys, fd, &name)?;
            if let Some(l) = self.libs.lock()[slot].as_mut() {
                l.remote = remote;
            }
        }
        Ok(())
    }
}

impl<S: Syscalls + Clone> Drop for Session<S> {
    fn drop(&mut self) {
        // Libraries borrow the session, so none is alive here unless one was leaked with
        // `mem::forget`; close those on the DSP side (their images stay with the registry).
        let healthy = self.is_healthy();
        let chan = self.chan.get_mut();
        for lib in self.libs.get_mut().iter_mut() {
            if let (Some(l), Some(ch)) = (lib.take(), chan.channel.as_ref()) {
                if healthy {
                    let _ = remotectl_close(&self.sys, ch.fd(), l.remote);
                }
            }
        }
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

impl<S: Syscalls + Clone> Library<'_, S> {
    /// Gives up the handle without closing the library: the caller closes its slot.
    #[cfg(feature = "std")]
    pub(crate) fn into_slot(self) -> usize {
        let slot = self.slot;
        core::mem::forget(self);
        slot
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
