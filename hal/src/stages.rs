//! The init stages as types. Each transition consumes the previous stage and returns the next
//! one, or an error naming the stage, after releasing what the failed stage acquired; the
//! previous stage's resources are released by dropping it (reverse order of acquisition).
//!
//! ```text
//! HeapOpened --stage_shell--> ShellStaged --open_channel--> ChannelOpened
//!   --create_process--> ProcessCreated --attach_listener--> Session
//! ```

use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{adsprpc, elf, listener, Fd, OpenFlags, Syscalls};

use crate::call::Call;
use crate::driver;

use crate::error::{Cause, HalError, Stage};
use crate::fd::OwnedFd;
use crate::lease::RawLease;
use crate::session::Session;

/// Stage 1: the board's allocator node is open (`/dev/ion`, or a dma-heap node such as
/// `/dev/dma_heap/system`).
pub struct HeapOpened<S: Syscalls + Clone> {
    pub(crate) ion: OwnedFd<S>,
    pub(crate) sys: S,
    pub(crate) board: &'static Board,
}

impl<S: Syscalls + Clone> HeapOpened<S> {
    /// Opens the allocator node of the board `access` grants.
    pub fn open(sys: S, access: &DeviceAccess) -> Result<Self, HalError> {
        let board = access.board();
        let fd = sys.open(board.ion_path, OpenFlags::READ_ONLY).map_err(|e| HalError::os(Stage::HeapOpen, e))?;
        Ok(HeapOpened { ion: OwnedFd::new(sys.clone(), fd), sys, board })
    }

    /// The board.
    pub fn board(&self) -> &'static Board {
        self.board
    }

    /// Allocates `len` bytes from the board's heap before the rest of the session exists (what a
    /// health check does to prove ION works); the lease borrows this stage.
    pub fn alloc(&self, len: usize) -> Result<crate::Lease<'_, S>, HalError> {
        let raw = RawLease::alloc(&self.sys, self.ion.raw(), self.board, len, Stage::Alloc)?;
        Ok(crate::Lease::new(raw, self.sys.clone(), self.ion.raw()))
    }

    /// Stage 2: reads the DSP shell ELF into an ION buffer.
    pub fn stage_shell(self) -> Result<ShellStaged<S>, HalError> {
        let shell = stage_shell(&self.sys, self.ion.raw(), self.board)?;
        Ok(ShellStaged { shell, prev: self })
    }
}

/// Reads the board's shell into a fresh lease and checks that it is a Hexagon ELF.
pub(crate) fn stage_shell<S: Syscalls + Clone>(sys: &S, ion: Fd, board: &Board) -> Result<(RawLease<S>, u32), HalError> {
    let st = Stage::ShellStaged;
    let file = OwnedFd::new(sys.clone(), sys.open(board.shell_path, OpenFlags::READ_ONLY).map_err(|e| HalError::os(st, e))?);
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
    pub fn open_channel(self) -> Result<ChannelOpened<S>, HalError> {
        let (rpc, info) = open_channel(&self.prev.sys, self.prev.board)?;
        Ok(ChannelOpened { rpc, info, prev: self })
    }
}

pub(crate) fn open_channel<S: Syscalls + Clone>(sys: &S, board: &Board) -> Result<(OwnedFd<S>, u32), HalError> {
    let st = Stage::ChannelOpen;
    let flags = OpenFlags { read_write: false, nonblock: true, nofollow: false };
    let rpc = OwnedFd::new(sys.clone(), sys.open(board.rpc_path, flags).map_err(|e| HalError::os(st, e))?);
    let info = driver::bind_channel(sys, board, rpc.raw()).map_err(|e| HalError::sys(st, e))?;
    Ok((rpc, info))
}

/// Stage 3: the FastRPC channel is open.
pub struct ChannelOpened<S: Syscalls + Clone> {
    // Field order is release order: the channel before the shell and the ION device.
    pub(crate) rpc: OwnedFd<S>,
    pub(crate) info: u32,
    pub(crate) prev: ShellStaged<S>,
}

impl<S: Syscalls + Clone> ChannelOpened<S> {
    /// The GETINFO answer (bit 0: the session has an SMMU).
    pub fn info(&self) -> u32 {
        self.info
    }

    /// Stage 4: INIT creates the user process on the DSP from the staged shell. The shell buffer
    /// is released afterwards (the kernel drops its mapping at the end of the call).
    pub fn create_process(self) -> Result<ProcessCreated<S>, HalError> {
        let ChannelOpened { rpc, info, prev } = self;
        let ShellStaged { shell, prev: ion } = prev;
        let created = create_process(&ion.sys, ion.board, rpc, &shell);
        // Release order matters on both paths: the shell buffer before the ION device.
        drop(shell);
        match created {
            Ok(channel) => Ok(ProcessCreated { channel, info, prev: ion }),
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
    sys: S,
    pub(crate) board: &'static Board,
}

impl<S: Syscalls> Channel<S> {
    pub(crate) fn fd(&self) -> Fd {
        self.rpc.as_ref().map_or(Fd(-1), OwnedFd::raw)
    }

    /// Hands the descriptor over (to a session's cell) without ending the process.
    pub(crate) fn into_token(mut self) -> Option<hexrpc_drivers::OwnedFd> {
        self.rpc.take().and_then(OwnedFd::into_token)
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
        }
    }
}

pub(crate) fn create_process<S: Syscalls + Clone>(
    sys: &S,
    board: &'static Board,
    rpc: OwnedFd<S>,
    shell: &(RawLease<S>, u32),
) -> Result<Channel<S>, HalError> {
    let (lease, len) = shell;
    driver::create_process(sys, board, rpc.raw(), lease.mapping(), lease_fd(lease), *len)
        .map_err(|e| HalError::sys(Stage::ProcessCreate, e))?;
    Ok(Channel { rpc: Some(rpc), sys: sys.clone(), board })
}

fn lease_fd<S: Syscalls>(l: &RawLease<S>) -> Fd {
    l.share_fd()
}

/// Stage 4: the DSP process exists.
pub struct ProcessCreated<S: Syscalls + Clone> {
    pub(crate) channel: Channel<S>,
    pub(crate) info: u32,
    pub(crate) prev: HeapOpened<S>,
}

impl<S: Syscalls + Clone> ProcessCreated<S> {
    /// Stage 5: registers the reverse-RPC listener (handle 3, init2) and returns the ready
    /// session. The reverse file service then serves its channel (`hexrpc_runtime::ServedSession`).
    pub fn attach_listener(self) -> Result<Session<S>, HalError> {
        attach_listener(&self.prev.sys, &self.channel)?;
        Ok(Session::from_parts(self.prev, self.channel, self.info))
    }
}

pub(crate) fn attach_listener<S: Syscalls>(sys: &S, ch: &Channel<S>) -> Result<(), HalError> {
    let mut args =
        Call::<'_, 1>::new(listener::LISTENER_INIT2.method()).map_err(|_| HalError::new(Stage::ListenerAttach, Cause::Invalid))?;
    driver::invoke(sys, ch.board, ch.fd(), adsprpc::FASTRPC_STATIC_HANDLE_LISTENER, &mut args)
        .map_err(|e| HalError::sys(Stage::ListenerAttach, e))
}
