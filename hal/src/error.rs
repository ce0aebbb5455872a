use core::fmt;

use hexrpc_drivers::{aee, Errno, Error as SysError};

/// The init stage (or the session operation) an error belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Stage {
    /// Opening the ION device node.
    HeapOpen,
    /// Reading the DSP shell and staging it in an ION buffer.
    ShellStaged,
    /// Opening the FastRPC device node, GETINFO for the channel, CONTROL kalloc.
    ChannelOpen,
    /// INIT: creating the user process on the DSP.
    ProcessCreate,
    /// Registering the reverse-RPC listener (handle 3, init2).
    ListenerAttach,
    /// Allocating, sharing or mapping an ION buffer.
    Alloc,
    /// Opening a library on the DSP.
    LibraryOpen,
    /// Calling into a library.
    Invoke,
    /// Closing a library.
    LibraryClose,
    /// Rebuilding the DSP process after a restart or a timeout.
    Recover,
    /// Taking in a dma-buf another component owns ([`Session::import`](crate::Session::import)).
    Import,
}

impl Stage {
    /// A short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::HeapOpen => "heap-open",
            Stage::ShellStaged => "shell-staged",
            Stage::ChannelOpen => "channel-open",
            Stage::ProcessCreate => "process-create",
            Stage::ListenerAttach => "listener-attach",
            Stage::Alloc => "alloc",
            Stage::LibraryOpen => "library-open",
            Stage::Invoke => "invoke",
            Stage::LibraryClose => "library-close",
            Stage::Recover => "recover",
            Stage::Import => "import",
        }
    }
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Cause {
    /// A system call failed with this errno.
    Os(Errno),
    /// The DSP (or the driver, as a positive return) answered with this AEE code.
    Dsp(i32),
    /// The DSP restarted: the session needs [`recover`](crate::Session::recover).
    DspRestart,
    /// The call did not finish before its deadline; it was interrupted and the session needs
    /// recovery.
    Timeout,
    /// The session needs recovery before it can be used.
    NeedsRecovery,
    /// Recovery spent its budget; calls fail until a further `recover()` succeeds.
    Failed,
    /// The shell file is not a usable ELF (too short, not ELF, not Hexagon).
    BadShell,
    /// A size or count is beyond what the board or the ABI allows.
    TooLarge,
    /// An argument is invalid (a view out of range, a bad library name, ...).
    Invalid,
    /// A fixed-capacity table is full (libraries).
    Full,
    /// The image registry (the reverse file service) refused the library image.
    Registry,
    /// The reverse-RPC listener of the session stopped (the session cannot load libraries, and
    /// its channel may be retired): `recover()` once a listener serves it again.
    ListenerStopped,
    /// The DSP's loader refused a library: its AEE code and the reason it gave (unresolved
    /// symbol, bad ELF, missing `entry`, ...).
    Refused(Refusal),
    /// None of the board's shell paths exists (they are listed, in the order tried).
    ShellNotFound(ShellSearch),
    /// The lease was handed to a call that was abandoned at its deadline: the DSP process that
    /// ran it may still read and write the memory until the kernel has released that process
    /// (the channel's final close). Until then the lease cannot be read, written, viewed or
    /// launched with, and its memory and fd number are kept even if it is dropped.
    Quarantined,
    /// Every DSP process identity this process can have on the driver is taken by a live
    /// channel (the DSP keys processes by the opener's process id, plus one session bit on the
    /// downstream driver; a second process under a live identity is refused): close another
    /// session first.
    IdentityInUse,
    /// After a DSP restart, recovery's every attempt to reopen the DSP's channel was refused by
    /// the downstream driver (INIT: -1 after the driver's port-connect wait): on the comma
    /// three's driver a channel connect that timed out leaves the port half-open, and the
    /// channel cannot be reopened until the device reboots (`fastrpc_channel_open`,
    /// `fastrpc_glink_open`; docs/kernel-rules.md R16). What was tried is kept.
    ChannelStuck {
        /// Process creates (INIT) sent and refused.
        attempts: u16,
        /// Milliseconds from the start of the recovery to the last refusal.
        waited_ms: u32,
    },
    /// No free range of an [`Arena`](crate::Arena) fits the request (at its alignment): free
    /// sub-allocations or use another arena.
    ArenaFull {
        /// The bytes asked for.
        requested: u64,
        /// The largest free range of the arena, in bytes (it may fit the length but not the
        /// alignment).
        largest_free: u64,
    },
    /// Every bookkeeping node of an [`Arena`](crate::Arena) is in use (one per block, free and
    /// used): the arena holds too many sub-allocations.
    ArenaBlocks {
        /// The arena's node count ([`ARENA_BLOCKS`](crate::ARENA_BLOCKS)).
        blocks: u32,
    },
    /// A budget of the driver that the stack keeps within on its own side was reached: the
    /// call was not sent (docs/kernel-rules.md, R22 onwards).
    Budget(Budget),
    /// A descriptor offered for import is not a buffer the DSP can be given: refused before
    /// anything was sent to a FastRPC driver ([`Session::import`](crate::Session::import)).
    Import(ImportRefusal),
}

/// Why [`Session::import`](crate::Session::import) refused a descriptor. Every case is decided
/// before any FastRPC call, from what the kernel answers about the descriptor itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ImportRefusal {
    /// The number is not an open descriptor of this process (negative, never opened, or
    /// closed): duplicating it failed with `EBADF`.
    NotOpen,
    /// The descriptor is open but is not a dma-buf: a pipe, a socket, a regular file, a device.
    /// The kernel said so: ION's import refused it (ION 4.9), `DMA_BUF_IOCTL_SYNC` was not
    /// understood (a dma-buf heap board), or it has no size to seek to (a pipe or socket).
    NotDmaBuf {
        /// What the kernel answered.
        errno: Errno,
    },
    /// An import of zero bytes.
    Empty,
    /// The length asked for is beyond the buffer's size.
    BeyondBuffer {
        /// The length asked for.
        requested: u64,
        /// The dma-buf's size (`lseek(SEEK_END)`).
        size: u64,
    },
}

impl fmt::Display for ImportRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ImportRefusal::NotOpen => write!(f, "the descriptor is not open in this process"),
            ImportRefusal::NotDmaBuf { errno } => {
                write!(f, "the descriptor is not a dma-buf (a pipe, socket, file or device; the kernel answered {errno})")
            }
            ImportRefusal::Empty => write!(f, "an import of 0 bytes"),
            ImportRefusal::BeyondBuffer { requested, size } => {
                write!(f, "{requested} bytes asked for, beyond the dma-buf's {size} bytes")
            }
        }
    }
}

/// A driver budget that [`Cause::Budget`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Budget {
    /// The driver's call contexts: 256 for every process on the kernel (the comma three's
    /// `context_alloc` and mainline's `fastrpc_context_alloc`), held by each call until it
    /// returns and by an abandoned call until its channel is released. A session keeps at most
    /// [`Limits::calls_in_flight`](hexrpc_bsp::Limits::calls_in_flight) of them (R22).
    CallContexts {
        /// The session's share ([`Limits::calls_in_flight`](hexrpc_bsp::Limits::calls_in_flight)).
        limit: u16,
        /// Of them, held by abandoned calls until their channel is released (`recover()`
        /// releases them).
        parked: u16,
    },
    /// The session's IOVA space: on the comma three each FastRPC file's SMMU context bank has
    /// 0x78000000 bytes (`fastrpc_cb_probe`), which every dma-buf the driver maps for it takes
    /// whole, until the map goes. A session's leases, those kept for a channel that may still
    /// map them included, stay within
    /// [`Limits::lease_iova`](hexrpc_bsp::Limits::lease_iova) (R23); past it an allocation is
    /// refused. Drop leases, or `recover()` to release what is kept.
    Iova {
        /// The session's budget, bytes.
        limit: u64,
        /// Bytes held now (page-rounded leases and what is kept).
        held: u64,
        /// Of `held`, bytes kept for channels that may still map them.
        kept: u64,
        /// The bytes asked for, page-rounded.
        requested: u64,
    },
}

/// The shell paths a session tried (the board's list), for [`Cause::ShellNotFound`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShellSearch(pub &'static [&'static core::ffi::CStr]);

impl fmt::Debug for ShellSearch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|p| p.to_str().unwrap_or("?"))).finish()
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for ShellSearch {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "ShellSearch({=usize} paths)", self.0.len())
    }
}

/// Longest loader reason a [`Refusal`] keeps (longer texts are cut at a character boundary). The
/// bound keeps [`HalError`] `Copy` and within 128 bytes (it is returned on every path).
pub const REFUSAL_TEXT: usize = 100;

/// Why the DSP refused to load a library: the AEE code of the remotectl open (with the DSP's
/// offset removed) and the text the loader put in the open's dlerror buffer, copied (no
/// allocation, so the error stays `Copy`). The text comes from the DSP: it is shown as is (control
/// characters replaced) and never interpreted.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refusal {
    code: i32,
    len: u8,
    text: [u8; REFUSAL_TEXT],
}

impl Refusal {
    /// A refusal with AEE `code` (with or without the DSP's offset) and the dlerror bytes (up to
    /// the first NUL; invalid UTF-8 and control characters become `?`).
    pub fn new(code: i32, dlerror: &[u8]) -> Refusal {
        let end = dlerror.iter().position(|&b| b == 0).unwrap_or(dlerror.len());
        let mut text = [0u8; REFUSAL_TEXT];
        let mut len = 0usize;
        let src = match core::str::from_utf8(&dlerror[..end]) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(&dlerror[..e.valid_up_to()]).unwrap_or(""),
        };
        for ch in src.chars() {
            let ch = if ch.is_control() { '?' } else { ch };
            let mut buf = [0u8; 4];
            let enc = ch.encode_utf8(&mut buf).as_bytes();
            if len + enc.len() > REFUSAL_TEXT {
                break;
            }
            text[len..len + enc.len()].copy_from_slice(enc);
            len += enc.len();
        }
        Refusal { code: aee::strip_offset(code), len: len as u8, text }
    }

    /// The AEE code (e.g. `AEE_ENOSUCHSYMBOL`, `AEE_EBADELF`).
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The loader's reason (may be empty when the DSP gave none).
    pub fn reason(&self) -> &str {
        core::str::from_utf8(&self.text[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refusal").field("code", &self.code).field("reason", &self.reason()).finish()
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for Refusal {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "Refusal {{ code: {=i32}, reason: {=str} }}", self.code, self.reason())
    }
}

impl Cause {
    /// Turns a drivers-level error into a cause, decoding positive returns.
    pub fn from_sys(e: SysError) -> Cause {
        if e.is_dsp_restart() {
            return Cause::DspRestart;
        }
        match e {
            SysError::Os(e) => Cause::Os(e),
            SysError::Returned(v) => Cause::Dsp(v),
            SysError::Invalid => Cause::Invalid,
        }
    }
}

/// The error of every HAL operation: the stage and the cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct HalError {
    /// Where it happened.
    pub stage: Stage,
    /// What happened.
    pub cause: Cause,
}

/// Coarse classification for generic callers (retry, recover, give up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ErrorKind {
    /// A device node or file is missing or not accessible: check the board and permissions.
    Unavailable,
    /// The DSP restarted or timed out: call `recover()`.
    Recoverable,
    /// The caller passed something invalid.
    Usage,
    /// The DSP refused the request.
    Remote,
    /// Anything else.
    Other,
}

impl HalError {
    pub(crate) const fn new(stage: Stage, cause: Cause) -> HalError {
        HalError { stage, cause }
    }

    pub(crate) fn sys(stage: Stage, e: SysError) -> HalError {
        HalError { stage, cause: Cause::from_sys(e) }
    }

    pub(crate) fn os(stage: Stage, e: Errno) -> HalError {
        HalError { stage, cause: Cause::Os(e) }
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        match self.cause {
            Cause::Os(Errno::ENOENT | Errno::EACCES | Errno::ENODEV | Errno::EPERM)
                if matches!(self.stage, Stage::HeapOpen | Stage::ShellStaged | Stage::ChannelOpen) =>
            {
                ErrorKind::Unavailable
            }
            Cause::ShellNotFound(_) | Cause::IdentityInUse | Cause::ChannelStuck { .. } => ErrorKind::Unavailable,
            Cause::DspRestart | Cause::Timeout | Cause::NeedsRecovery | Cause::ListenerStopped | Cause::Quarantined => {
                ErrorKind::Recoverable
            }
            Cause::Invalid
            | Cause::TooLarge
            | Cause::Full
            | Cause::ArenaFull { .. }
            | Cause::ArenaBlocks { .. }
            | Cause::Budget(_)
            | Cause::Import(_) => ErrorKind::Usage,
            Cause::Dsp(_) | Cause::Refused(_) => ErrorKind::Remote,
            _ => ErrorKind::Other,
        }
    }

    /// The errno closest to this error (for C callers and exit statuses).
    pub fn errno(&self) -> Errno {
        match self.cause {
            Cause::Os(e) => e,
            Cause::Dsp(_) => Errno::EIO,
            Cause::DspRestart => Errno::ECONNRESET,
            Cause::Timeout => Errno::ETIMEDOUT,
            Cause::NeedsRecovery | Cause::Failed | Cause::ListenerStopped => Errno::ENOTCONN,
            Cause::BadShell => Errno::ENOEXEC,
            Cause::TooLarge => Errno::EFBIG,
            Cause::Invalid => Errno::EINVAL,
            Cause::Full => Errno::ENOSPC,
            Cause::Registry => Errno::EBUSY,
            Cause::Refused(_) => Errno::ENOEXEC,
            Cause::ShellNotFound(_) => Errno::ENOENT,
            Cause::Quarantined => Errno::EBUSY,
            Cause::IdentityInUse => Errno::EBUSY,
            Cause::ChannelStuck { .. } => Errno::EPERM,
            Cause::ArenaFull { .. } => Errno::ENOMEM,
            Cause::ArenaBlocks { .. } => Errno::ENOSPC,
            Cause::Budget(Budget::CallContexts { .. }) => Errno::EAGAIN,
            Cause::Budget(Budget::Iova { .. }) => Errno::ENOMEM,
            Cause::Import(ImportRefusal::NotOpen) => Errno::EBADF,
            Cause::Import(ImportRefusal::NotDmaBuf { .. } | ImportRefusal::Empty | ImportRefusal::BeyondBuffer { .. }) => Errno::EINVAL,
        }
    }
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.stage.name())?;
        match self.cause {
            Cause::Os(e) => write!(f, "{e}"),
            Cause::Dsp(code) => match aee::name(code) {
                Some(n) => write!(f, "the DSP answered {code} ({n}: {})", aee::description(code).unwrap_or("")),
                None => write!(f, "the DSP answered {code}"),
            },
            Cause::DspRestart => write!(f, "the DSP restarted; recover() the session"),
            Cause::Timeout => write!(f, "the call passed its deadline and was interrupted; recover() the session"),
            Cause::NeedsRecovery => write!(f, "the session needs recover() first"),
            Cause::Failed => write!(f, "recovery failed; recover() again once the DSP is back"),
            Cause::BadShell => write!(f, "the DSP shell is not a Hexagon ELF file"),
            Cause::TooLarge => write!(f, "size beyond the board's or the ABI's limit"),
            Cause::Invalid => write!(f, "invalid argument"),
            Cause::Full => write!(f, "fixed-capacity table is full"),
            Cause::Registry => write!(f, "the reverse file service refused the library image"),
            Cause::ListenerStopped => write!(f, "the reverse-RPC listener stopped; recover() once one serves the session again"),
            Cause::ShellNotFound(paths) => {
                write!(f, "no DSP shell found; tried")?;
                for (i, p) in paths.0.iter().enumerate() {
                    write!(f, "{} {}", if i == 0 { "" } else { "," }, p.to_str().unwrap_or("?"))?;
                }
                Ok(())
            }
            Cause::Quarantined => write!(
                f,
                "the lease was used by a call abandoned at its deadline; the DSP may still write it, so it is \
                 refused until recover() has released that DSP process"
            ),
            Cause::IdentityInUse => write!(
                f,
                "the DSP already runs a process under every identity this process can have (one per process id, \
                 two with the downstream session bit); end another session first"
            ),
            Cause::ChannelStuck { attempts, waited_ms } => write!(
                f,
                "the CDSP channel cannot be reopened until reboot: after the DSP restart the driver refused all \
                 {attempts} process creates (INIT: EPERM after its port-connect wait) over {waited_ms} ms; on the \
                 comma three's driver a channel connect that timed out leaves the port stuck until the device \
                 reboots: reboot it"
            ),
            Cause::ArenaFull { requested, largest_free } => write!(
                f,
                "the arena has no free range for {requested} bytes at the requested alignment (largest free range: \
                 {largest_free} bytes); free sub-allocations or use another arena"
            ),
            Cause::ArenaBlocks { blocks } => write!(
                f,
                "all {blocks} bookkeeping blocks of the arena are in use (free and used ranges together); free \
                 sub-allocations or use another arena"
            ),
            Cause::Budget(Budget::CallContexts { limit, parked }) => write!(
                f,
                "the session has {limit} calls in the driver already ({parked} of them abandoned, held until \
                 recover()): its share of the driver's 256 call contexts, which every process on the device \
                 shares; the call was not sent. Wait for a call to return, or make fewer at once"
            ),
            Cause::Budget(Budget::Iova { limit, held, kept, requested }) => write!(
                f,
                "{requested} more bytes of leases would pass the session's IOVA budget of {limit} bytes (the \
                 driver maps every lease whole into the session's SMMU space): {held} held, {kept} of them kept \
                 for a channel that may still map them; drop leases, or recover() to release what is kept"
            ),
            Cause::Import(r) => write!(f, "refused before any FastRPC call: {r}"),
            Cause::Refused(r) => {
                write!(f, "the DSP refused to load the library: {}", r.code())?;
                if let Some(n) = aee::name(r.code()) {
                    write!(f, " ({n})")?;
                }
                if !r.reason().is_empty() {
                    write!(f, ": {}", r.reason())?;
                }
                Ok(())
            }
        }
    }
}

impl core::error::Error for HalError {}

const _: () = assert!(core::mem::size_of::<HalError>() <= 128, "HalError stays small enough to return by value");

/// What a failure to start a session means on `board` and what to do next: the node that could
/// not be opened and the step that usually fixes it, for every front end (the `hexrpc` tool, the
/// C ABI, Python, tinygrad) to print after the error. `Display` writes nothing for failures that
/// are not about opening the board's nodes.
///
/// ```
/// # use hexrpc_hal::{HalError, Stage, Cause, OpenAdvice};
/// # use hexrpc_drivers::Errno;
/// let e = HalError { stage: Stage::HeapOpen, cause: Cause::Os(Errno::ENOENT) };
/// let text = OpenAdvice { error: &e, board: &hexrpc_bsp::COMMA_THREE }.to_string();
/// assert!(text.contains("/dev/ion") && text.contains("hexrpc probe"));
/// ```
pub struct OpenAdvice<'a> {
    /// The failure.
    pub error: &'a HalError,
    /// The board the session was started for.
    pub board: &'a hexrpc_bsp::Board,
}

impl fmt::Display for OpenAdvice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = match self.error.stage {
            Stage::HeapOpen => self.board.ion_path,
            Stage::ChannelOpen => self.board.rpc_path,
            _ => return Ok(()),
        };
        let node = node.to_str().unwrap_or("?");
        match self.error.cause {
            Cause::Os(Errno::ENOENT) => write!(
                f,
                "{node} does not exist: this is not a {} kernel with its DSP drivers (another board? `hexrpc probe` names it; \
                 a machine without a DSP runs on the bench: `hexrpc selftest --bench`, HEXRPC_BENCH=1, Session.bench())",
                self.board.name
            ),
            Cause::Os(Errno::EACCES) | Cause::Os(Errno::EPERM) => write!(
                f,
                "{node} exists but this process may not open it: run as a member of the node's group (`ls -l {node}`; \
                 AGNOS: the `comma` user is in `gpu`), and check SELinux (`dmesg | grep avc`); `hexrpc probe` shows both"
            ),
            Cause::Os(_) => write!(f, "opening {node} failed: see `dmesg | grep -i -e adsprpc -e fastrpc -e ion` and `hexrpc probe`"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_keeps_the_reason_bounded_and_printable() {
        let code = (aee::DSP_AEE_EOFFSET + aee::AEE_ENOSUCHSYMBOL as u32) as i32;
        let r = Refusal::new(code, b"lib-3: unresolved symbol frobnicate\0garbage");
        assert_eq!(r.code(), aee::AEE_ENOSUCHSYMBOL);
        assert_eq!(r.reason(), "lib-3: unresolved symbol frobnicate");
        let e = HalError::new(Stage::LibraryOpen, Cause::Refused(r));
        let mut text = heapless::String::<256>::new();
        core::fmt::Write::write_fmt(&mut text, format_args!("{e}")).unwrap();
        assert!(text.contains("AEE_ENOSUCHSYMBOL") && text.contains("frobnicate"), "{text}");
        assert_eq!(e.kind(), ErrorKind::Remote);
        let long = [b'x'; 400];
        assert_eq!(Refusal::new(1, &long).reason().len(), REFUSAL_TEXT);
        assert_eq!(Refusal::new(1, b"a\nb\xff").reason(), "a?b");
        assert_eq!(Refusal::new(1, b"").reason(), "");
    }
}
