//! The init stages as types. Each transition consumes the previous stage and returns the next
//! one, or an error naming the stage, after releasing what the failed stage acquired; the
//! previous stage's resources are released by dropping it (reverse order of acquisition).
//!
//! ```text
//! HeapOpened --stage_shell--> ShellStaged --open_channel--> ChannelOpened
//!   --create_process--> ProcessCreated --attach_listener--> Session
//! ```

use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::{adsprpc, elf, listener, Errno, Fd, OpenFlags, Syscalls};

use crate::call::Call;
use crate::driver;

use crate::buffer::RawLease;
use crate::error::{Cause, HalError, ShellSearch, Stage};
use crate::fd::OwnedFd;
use crate::identity;
pub(crate) use crate::identity::Identity;
use crate::latency::{self, LatencyPolicy, PmQosState};

/// Stage 1: the board's allocator node is open (`/dev/ion`, or a dma-heap node such as
/// `/dev/dma_heap/system`).
pub struct HeapOpened<S: Syscalls + Clone> {
    pub(crate) ion: OwnedFd<S>,
    pub(crate) sys: S,
    pub(crate) board: &'static Board,
    /// The latency policy every channel of the session gets.
    pub(crate) policy: LatencyPolicy,
}

impl<S: Syscalls + Clone> HeapOpened<S> {
    /// Opens the allocator node of the board `access` grants; the session gets the default
    /// latency policy ([`LatencyPolicy::REALTIME`]).
    pub fn open(sys: S, access: &DeviceAccess) -> Result<Self, HalError> {
        Self::open_with(sys, access, LatencyPolicy::default())
    }

    /// [`open`](HeapOpened::open) with the latency policy `policy` for every channel of the
    /// session.
    pub fn open_with(sys: S, access: &DeviceAccess, policy: LatencyPolicy) -> Result<Self, HalError> {
        let board = access.board();
        let fd = sys.open(board.ion_path, OpenFlags::READ_ONLY).map_err(|e| HalError::os(Stage::HeapOpen, e))?;
        Ok(HeapOpened { ion: OwnedFd::new(sys.clone(), fd), sys, board, policy })
    }

    /// The board.
    pub fn board(&self) -> &'static Board {
        self.board
    }

    /// Stage 2: reads the DSP shell ELF into an ION buffer.
    pub fn stage_shell(self) -> Result<ShellStaged<S>, HalError> {
        let shell = stage_shell(&self.sys, self.ion.raw(), self.board)?;
        Ok(ShellStaged { shell, prev: self })
    }
}

/// Opens the first of the board's shell paths that exists ([`Board::shell_search`], the
/// FastRPC user library's order). A path that exists but cannot be opened is that error; none
/// existing is [`Cause::ShellNotFound`] naming every path tried.
fn open_shell<S: Syscalls + Clone>(sys: &S, board: &Board) -> Result<OwnedFd<S>, HalError> {
    let st = Stage::ShellStaged;
    for path in board.shell_search {
        match sys.open(path, OpenFlags::READ_ONLY) {
            Ok(fd) => return Ok(OwnedFd::new(sys.clone(), fd)),
            Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
            Err(e) => return Err(HalError::os(st, e)),
        }
    }
    Err(HalError::new(st, Cause::ShellNotFound(ShellSearch(board.shell_search))))
}

/// Reads the board's shell into a fresh lease and checks that it is a Hexagon ELF.
pub(crate) fn stage_shell<S: Syscalls + Clone>(sys: &S, ion: Fd, board: &Board) -> Result<(RawLease<S>, u32), HalError> {
    let st = Stage::ShellStaged;
    let file = open_shell(sys, board)?;
    let stat = sys.fstat(file.raw()).map_err(|e| HalError::os(st, e))?;
    if !stat.is_file() {
        return Err(HalError::new(st, Cause::BadShell));
    }
    if stat.size > u64::from(board.limits.max_shell_len) {
        return Err(HalError::new(st, Cause::TooLarge));
    }
    let size = stat.size as usize;
    if size < 52 {
        return Err(HalError::new(st, Cause::BadShell));
    }
    let mut lease = RawLease::alloc(sys, ion, board, size, st)?;
    let mut chunk = [0u8; 4096];
    let mut off = 0usize;
    while off < size {
        let want = (size - off).min(chunk.len());
        let n = sys.pread(file.raw(), &mut chunk[..want], off as u64).map_err(|e| HalError::os(st, e))?;
        if n == 0 {
            // The file shrank under us.
            return Err(HalError::new(st, Cause::BadShell));
        }
        lease.write_at(off, &chunk[..n]).map_err(|_| HalError::new(st, Cause::Invalid))?;
        off += n;
    }
    let mut head = [0u8; core::mem::size_of::<elf::Elf32Ehdr>()];
    lease.read_at(0, &mut head).map_err(|_| HalError::new(st, Cause::BadShell))?;
    if elf::Elf::header_of(&head).map(|h| h.e_machine.get()) != Ok(elf::EM_HEXAGON) {
        return Err(HalError::new(st, Cause::BadShell));
    }
    Ok((lease, size as u32))
}

/// Stage 2: the shell is staged in an ION buffer.
pub struct ShellStaged<S: Syscalls + Clone> {
    pub(crate) shell: (RawLease<S>, u32),
    pub(crate) prev: HeapOpened<S>,
}

impl<S: Syscalls + Clone> ShellStaged<S> {
    /// Length of the shell file in bytes.
    pub fn shell_len(&self) -> u32 {
        self.shell.1
    }

    /// Stage 3: opens the FastRPC node, binds it to the board's channel (GETINFO) and allows
    /// kernel allocations (CONTROL kalloc).
    ///
    /// The file is opened under the DSP identity no other channel of this process holds on this
    /// kernel (the process id, else downstream the process id with the session bit; see
    /// `identity`). If every identity is held, nothing is opened and the error is
    /// [`Cause::IdentityInUse`].
    pub fn open_channel(self) -> Result<ChannelOpened<S>, HalError> {
        let sys = &self.prev.sys;
        let identity = identity::reserve(sys, self.prev.board).ok_or(HalError::new(Stage::ChannelOpen, Cause::IdentityInUse))?;
        let (rpc, info) = open_channel(sys, self.prev.board, identity.identity())?;
        Ok(ChannelOpened { rpc, info, identity, prev: self })
    }
}

/// What the DSP answers to a process create for an identity that already has a live process
/// ("a bad request" in Qualcomm's words): `AEE_EBADSTATE`.
fn identity_in_use(e: &HalError) -> bool {
    matches!(e.cause, Cause::Dsp(code) if hexrpc_drivers::aee::strip_offset(code) == hexrpc_drivers::aee::AEE_EBADSTATE)
}

pub(crate) fn open_channel<S: Syscalls + Clone>(sys: &S, board: &Board, identity: Identity) -> Result<(OwnedFd<S>, u32), HalError> {
    let st = Stage::ChannelOpen;
    let flags = OpenFlags { read_write: false, nonblock: true, nofollow: false };
    let rpc = OwnedFd::new(sys.clone(), sys.open(board.rpc_path, flags).map_err(|e| HalError::os(st, e))?);
    let info = driver::bind_channel(sys, board, rpc.raw()).map_err(|e| HalError::sys(st, e))?;
    if identity == Identity::Session && board.abi == KernelAbi::DownstreamMsm {
        adsprpc::setmode(sys, rpc.raw(), adsprpc::FASTRPC_MODE_SESSION).map_err(|e| HalError::sys(st, e))?;
    }
    Ok((rpc, info))
}

/// Stage 3: the FastRPC channel is open.
pub struct ChannelOpened<S: Syscalls + Clone> {
    // Field order is release order: the channel before the shell and the ION device.
    pub(crate) rpc: OwnedFd<S>,
    pub(crate) info: u32,
    /// The identity the file was opened under, reserved until INIT (given back if the stage is
    /// dropped).
    pub(crate) identity: identity::Reserved<S>,
    pub(crate) prev: ShellStaged<S>,
}

impl<S: Syscalls + Clone> ChannelOpened<S> {
    /// The GETINFO answer (bit 0: the session has an SMMU).
    pub fn info(&self) -> u32 {
        self.info
    }

    /// Stage 4: INIT creates the user process on the DSP from the staged shell, then the policy's
    /// PM-QoS vote goes out on the channel (`crate::LatencyPolicy`). Downstream the
    /// shell buffer is released afterwards (`fastrpc_init_process` drops its map of it on every
    /// path); upstream the driver keeps that map until the channel closes
    /// (`fastrpc_init_create_process`), so the channel keeps the shell buffer, and its fd
    /// number, as long (a new buffer under the same number would be handed the shell's pages).
    pub fn create_process(self) -> Result<ProcessCreated<S>, HalError> {
        let ChannelOpened { rpc, info, identity, prev } = self;
        let ShellStaged { shell, prev: ion } = prev;
        // The shell buffer goes before the ION device on both paths.
        let created = create_process(&ion.sys, ion.board, rpc, identity, shell);
        match created {
            Ok(channel) => {
                let pm_qos = latency::vote(&ion.sys, ion.board, channel.fd(), ion.policy.pm_qos());
                Ok(ProcessCreated { channel, info, pm_qos, prev: ion })
            }
            Err(e) => {
                drop(ion);
                Err(e)
            }
        }
    }
}

/// An open channel with a DSP process: on drop, asks the process to exit (handle 4, errors
/// ignored as quic and tinygrad do), then closes the fd, which frees every parked call.
pub(crate) struct Channel<S: Syscalls> {
    rpc: Option<OwnedFd<S>>,
    /// The identity its DSP process was created under.
    pub(crate) identity: Identity,
    /// The shell buffer while the driver keeps a map of it (upstream): released after the
    /// channel is closed.
    shell: Option<RawLease<S>>,
    sys: S,
    pub(crate) board: &'static Board,
}

impl<S: Syscalls> Channel<S> {
    pub(crate) fn fd(&self) -> Fd {
        self.rpc.as_ref().map_or(Fd(-1), OwnedFd::raw)
    }

    /// Hands the descriptor over (to a session's cell) without ending the process, with the
    /// shell buffer the channel must keep (the session keeps it until the channel closes).
    pub(crate) fn into_parts(mut self) -> (Option<hexrpc_drivers::OwnedFd>, Option<RawLease<S>>) {
        (self.rpc.take().and_then(OwnedFd::into_token), self.shell.take())
    }
}

impl<S: Syscalls> Drop for Channel<S> {
    fn drop(&mut self) {
        if let Some(rpc) = self.rpc.take() {
            if let Ok(mut args) = Call::<'_, 1>::new(listener::CURRENT_PROCESS_EXIT.method()) {
                if let Err(e) = driver::invoke(&self.sys, self.board, rpc.raw(), adsprpc::CURRENT_PROCESS_HANDLE, &mut args) {
                    log::debug!("process exit (handle 4) on teardown: {e}");
                }
            }
            drop(rpc);
            // The kernel's release named the identity: it is free again.
            identity::give_back(&self.sys, self.identity);
        }
        // After the close: the driver's map of the shell is gone with the channel.
        drop(self.shell.take());
    }
}

/// INIT from `shell` on `rpc` (opened for the reserved `identity`). The shell buffer is released
/// unless the driver keeps a map of it (upstream, on success), in which case the channel keeps
/// it. On success the channel holds the identity in this process's table (`identity`) until its
/// close; on failure the reservation is given back.
///
/// A file is INITed once, never again: on the comma three's driver a second INIT on a file takes
/// the channel reference again and allocates new init memory over the first, both leaked for
/// good (`fastrpc_init_process`, docs/kernel-rules.md R13).
///
/// If the DSP refuses because `identity` has a live process that is not one of ours (another
/// FastRPC user in this process; our own channels' identities are avoided before INIT), it is the
/// process id, and no channel of ours holds the session bit, a **fresh** file is opened under it
/// (`SETMODE(FASTRPC_MODE_SESSION)` before its INIT, downstream) and INITed. A refused file is
/// **not closed**: its close would send the kernel's release for its identity, which names only
/// the identity and so would end the other user's DSP process (`fastrpc_file_free` /
/// `fastrpc_device_release`). It is left open for good (logged). If no identity is left, the
/// error is [`Cause::IdentityInUse`].
pub(crate) fn create_process<S: Syscalls + Clone>(
    sys: &S,
    board: &'static Board,
    rpc: OwnedFd<S>,
    identity: identity::Reserved<S>,
    shell: (RawLease<S>, u32),
) -> Result<Channel<S>, HalError> {
    let (lease, len) = shell;
    let mut rpc = rpc;
    let mut reserved = identity;
    loop {
        let identity = reserved.identity();
        match driver::create_process(sys, board, rpc.raw(), lease.mapping(), lease_fd(&lease), len)
            .map_err(|e| HalError::sys(Stage::ProcessCreate, e))
        {
            Ok(()) => break,
            Err(e) if identity_in_use(&e) => {
                let n = rpc.raw().0;
                log::error!(
                    "the DSP refused a process under identity {identity:?}, held by another FastRPC user of this process; \
                     FastRPC fd {n} is left open for good (closing it would end that user's DSP process)"
                );
                if let Some(t) = rpc.into_token() {
                    let _ = t.into_raw();
                }
                // The other user holds the process id, not a channel of ours: our reservation
                // of it goes back when `reserved` is replaced (or dropped with the error).
                let other = match (identity, board.abi) {
                    (Identity::Plain, KernelAbi::DownstreamMsm) => identity::reserve_exactly(sys, Identity::Session),
                    _ => None,
                };
                let Some(other) = other else { return Err(HalError::new(Stage::ProcessCreate, Cause::IdentityInUse)) };
                log::info!("this session takes the session-bit identity on a fresh FastRPC file");
                rpc = open_channel(sys, board, other.identity()).map_err(|e| HalError::new(Stage::ProcessCreate, e.cause))?.0;
                reserved = other;
            }
            Err(e) => return Err(e),
        }
    }
    let identity = reserved.commit();
    let shell = match board.abi {
        KernelAbi::Upstream => Some(lease),
        KernelAbi::DownstreamMsm => None,
    };
    Ok(Channel { rpc: Some(rpc), identity, shell, sys: sys.clone(), board })
}

fn lease_fd<S: Syscalls>(l: &RawLease<S>) -> Fd {
    l.share_fd()
}

/// Stage 4: the DSP process exists. Stage 5, [`attach_listener`](ProcessCreated::attach_listener),
/// makes the [`Session`](crate::Session) (in the session's module, which is built on the stages).
pub struct ProcessCreated<S: Syscalls + Clone> {
    pub(crate) channel: Channel<S>,
    pub(crate) info: u32,
    /// What became of the PM-QoS vote on the channel.
    pub(crate) pm_qos: PmQosState,
    pub(crate) prev: HeapOpened<S>,
}

impl<S: Syscalls + Clone> ProcessCreated<S> {
    /// What became of the policy's PM-QoS vote on the channel ([`crate::LatencyPolicy`]).
    pub fn pm_qos(&self) -> PmQosState {
        self.pm_qos
    }
}

pub(crate) fn attach_listener<S: Syscalls>(sys: &S, ch: &Channel<S>) -> Result<(), HalError> {
    let mut args =
        Call::<'_, 1>::new(listener::LISTENER_INIT2.method()).map_err(|_| HalError::new(Stage::ListenerAttach, Cause::Invalid))?;
    driver::invoke(sys, ch.board, ch.fd(), adsprpc::FASTRPC_STATIC_HANDLE_LISTENER, &mut args)
        .map_err(|e| HalError::sys(Stage::ListenerAttach, e))
}
