//! The owned objects behind every binding handle (C and Python): a served session, leases and
//! kernels that hold a share of their session, so each can be kept, passed and released on its
//! own. Release order is by ownership: a lease or kernel releases what it owns before its share
//! of the session goes, and the session (listener, DSP process, channel, ION device) goes last.

use std::sync::Arc;
use std::time::Duration;

use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::Fd;
use hexrpc_hal::{ArenaStats, BufferView, LatencyPolicy, Lease, LibraryImage, SharedArena, SharedArenaBuf, SharedLease, SharedLibrary};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, LibraryRecord, Scalar, ScalarType, Signature, MAX_BUFFERS};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::{Kernel, ServedSession};

use crate::error::Failure;
use crate::seam::{Seam, SeamKind};

/// Largest library file [`SessionObj::open_library_path`] reads.
pub const MAX_LIBRARY_FILE: u64 = 64 << 20;

/// A served session (the reverse file service runs on its own thread).
///
/// In a child forked after it was opened, every use is refused ([`check`](Self::check):
/// `HEXRPC_ERR_FORKED`) before anything is sent: its DSP process, channel and threads are the
/// parent's (the child has copies of the descriptors, not the threads). Dropping it there sends
/// nothing and joins nothing (its memory in the child is left as the fork copied it); the
/// parent's session goes on. A new session opened in the child is the child's own.
pub struct SessionObj {
    /// `None` only while it is dropped.
    served: Option<ServedSession<Seam>>,
    /// The process that opened it.
    pid: u32,
}

impl Drop for SessionObj {
    fn drop(&mut self) {
        if let Some(served) = self.served.take() {
            if served.session().sys().forked() {
                // The parent's session: no release to its DSP process, no join of threads that
                // are not in this process (the seam refuses every call here anyway).
                std::mem::forget(served);
            }
        }
    }
}

impl SessionObj {
    /// Starts a session on the device board named `board` (`comma-three`, `msm-android`).
    pub fn open_device(board: &str) -> Result<SessionObj, Failure> {
        Self::open_device_with(board, LatencyPolicy::default())
    }

    /// [`open_device`](Self::open_device) with the latency policy `latency`.
    pub fn open_device_with(board: &str, latency: LatencyPolicy) -> Result<SessionObj, Failure> {
        let b = hexrpc_bsp::by_name(board).filter(|b| !hexrpc_bsp::BENCH_BOARDS.contains(b)).ok_or_else(|| {
            Failure::invalid("session-start", format!("no device board named {board:?} (known: {})", device_board_names()))
        })?;
        Self::start(Seam::new(SeamKind::Device(hexrpc_drivers::RustixSys)), DeviceAccess::for_device(b), latency)
    }

    fn start(seam: Seam, access: DeviceAccess, latency: LatencyPolicy) -> Result<SessionObj, Failure> {
        let policy = FilePolicy::for_board(access.board()).map_err(|e| Failure::invalid("session-start", format!("file policy: {e}")))?;
        let started = hexrpc_hal::Session::start_with(seam, &access, latency).map_err(hexrpc_runtime::Error::from);
        let served = started.and_then(|s| ServedSession::serve(s, policy)).map_err(|e| {
            // A node that could not be opened: say which and what to do next.
            let advice = e.hal().map(|h| hexrpc_hal::OpenAdvice { error: &h, board: access.board() }.to_string()).unwrap_or_default();
            let mut f = Failure::from(e);
            if !advice.is_empty() {
                f.cause = format!("{}: {advice}", f.cause);
            }
            f
        })?;
        Ok(SessionObj { served: Some(served), pid: std::process::id() })
    }

    /// Starts a session on the bench. `executor`: refuse unless clang-19, ld.lld-19 and
    /// qemu-hexagon can run here (the reason is the error). `returning`: launches return at once
    /// (a measuring instrument; see [`SeamKind::Returning`]).
    #[cfg(feature = "bench")]
    pub fn open_bench(executor: bool, returning: bool) -> Result<SessionObj, Failure> {
        Self::open_bench_with(executor, returning, None)
    }

    /// [`open_bench`](Self::open_bench) with the executor's per-call limit `call_limit` (else
    /// `HEXRPC_BENCH_CALL_LIMIT_MS`, else the bench's default).
    #[cfg(feature = "bench")]
    pub fn open_bench_with(executor: bool, returning: bool, call_limit: Option<std::time::Duration>) -> Result<SessionObj, Failure> {
        Self::open_bench_latency(executor, returning, call_limit, LatencyPolicy::default())
    }

    /// [`open_bench_with`](Self::open_bench_with) with the latency policy `latency`.
    #[cfg(feature = "bench")]
    pub fn open_bench_latency(
        executor: bool,
        returning: bool,
        call_limit: Option<std::time::Duration>,
        latency: LatencyPolicy,
    ) -> Result<SessionObj, Failure> {
        if executor {
            hexrpc_bench::executor::runner().map_err(|why| Failure::unavailable("session-start", format!("the bench executor: {why}")))?;
        }
        let bench = crate::bench::bench_with_models(call_limit)?;
        let kind =
            if returning { SeamKind::Returning(bench, Arc::new(hexrpc_bench::measure::NullSys::new())) } else { SeamKind::Bench(bench) };
        let seam = Seam::new(kind);
        Self::start(seam, DeviceAccess::for_bench(), latency)
    }

    /// Starts a session on a bench of `board` (a bench board: [`hexrpc_bench::KERNELS`]) with
    /// the catalogue's models, for tests that run on every bench kernel.
    #[cfg(feature = "bench")]
    pub fn open_bench_on(board: &'static hexrpc_bsp::Board) -> Result<SessionObj, Failure> {
        let access = DeviceAccess::for_bench_board(board)
            .ok_or_else(|| Failure::invalid("session-start", format!("{} is not a bench board", board.name)))?;
        let bench = crate::bench::bench_with_models_on(board, None)?;
        Self::start(Seam::new(SeamKind::Bench(bench)), access, LatencyPolicy::default())
    }

    /// The served session.
    pub fn served(&self) -> &ServedSession<Seam> {
        // Taken only by `drop`.
        self.served.as_ref().expect("a session's service is there until it is dropped")
    }

    /// True in a child forked after the session was opened.
    pub fn forked(&self) -> bool {
        self.served().session().sys().forked()
    }

    /// `HEXRPC_ERR_FORKED` in a child forked after the session was opened (see the type's docs).
    pub fn check(&self) -> Result<(), Failure> {
        if self.forked() {
            return Err(Failure::forked(self.pid));
        }
        Ok(())
    }

    /// The bench behind the session, if it runs on one.
    #[cfg(feature = "bench")]
    pub fn bench(&self) -> Option<&hexrpc_bench::Bench> {
        self.served().session().sys().bench()
    }

    /// True while calls can be made (no restart or timeout pending recovery).
    pub fn is_healthy(&self) -> bool {
        !self.forked() && self.served().session().is_healthy()
    }

    /// Rebuilds the DSP side after a restart or a passed deadline (once).
    pub fn recover(&self) -> Result<(), Failure> {
        self.check()?;
        self.served().session().recover().map_err(Failure::hal)
    }

    /// Allocates `len` bytes (rounded up to a page).
    pub fn alloc(self: &Arc<Self>, len: usize) -> Result<LeaseObj, Failure> {
        self.check()?;
        let lease = self.served().alloc_shared(len)?;
        Ok(LeaseObj { mem: Memory::Lease(lease), session: self.clone() })
    }

    /// Imports `len` bytes of the dma-buf behind `fd`, a descriptor another process or component
    /// owns (a camera frame): a lease over that buffer, which the kernels read and write in
    /// place (`docs/import.md`). `fd` stays the caller's (duplicated, never closed). Not
    /// `writable`: mapped read-only here ([`LeaseObj::writable`]). A descriptor that is not open,
    /// not a dma-buf or shorter than `len` is refused before any call (`HEXRPC_ERR_INVALID`).
    pub fn import(self: &Arc<Self>, fd: i32, len: usize, writable: bool) -> Result<LeaseObj, Failure> {
        self.check()?;
        let access = if writable { hexrpc_hal::Access::ReadWrite } else { hexrpc_hal::Access::ReadOnly };
        let lease = self.served().import_shared(Fd(fd), len, access)?;
        Ok(LeaseObj { mem: Memory::Lease(lease), session: self.clone() })
    }

    /// An arena over a new lease of `len` bytes (rounded up to a page).
    pub fn arena(self: &Arc<Self>, len: usize) -> Result<ArenaObj, Failure> {
        self.check()?;
        let lease = self.served().alloc_shared(len)?;
        Ok(ArenaObj { arena: SharedArena::new(lease), session: self.clone() })
    }

    /// Opens a library from its bytes, for a kernel of `signature` under `abi`; with
    /// `signature` `None`, those its build record names (`hexrpc build-lib` writes one). `abi`
    /// `None` with a signature means v2.
    pub fn open_library(
        self: &Arc<Self>,
        name: &str,
        image: impl Into<LibraryImage>,
        signature: Option<&str>,
        abi: Option<AbiVersion>,
    ) -> Result<KernelObj, Failure> {
        self.check()?;
        let launch = match signature {
            Some(text) => Some((
                Signature::parse(text).map_err(|e| Failure::invalid("library-open", format!("signature {text:?}: {e}")))?,
                abi.unwrap_or(AbiVersion::V2),
            )),
            None => None,
        };
        let name = library_name(name);
        let image = image.into();
        let table = KernelTable::of(image.bytes());
        let kernel = self.served().open_kernel_shared(&name, image, launch)?;
        if signature.is_none() {
            if let Some(want) = abi.filter(|a| *a != kernel.abi()) {
                return Err(Failure::invalid("library-open", format!("the build record names {:?}, not {want:?}", kernel.abi())));
            }
        }
        Ok(KernelObj { kernel, table, session: self.clone() })
    }

    /// Opens a library from a file (at most [`MAX_LIBRARY_FILE`] bytes); its name is the file's
    /// stem. `signature` and `abi` as in [`open_library`](Self::open_library).
    pub fn open_library_path(
        self: &Arc<Self>,
        path: &std::path::Path,
        signature: Option<&str>,
        abi: Option<AbiVersion>,
    ) -> Result<KernelObj, Failure> {
        let bytes = read_bounded(path)?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        self.open_library(&stem, bytes, signature, abi)
    }
}

fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let what = |e: std::io::Error| Failure::io("library-open", format!("{}: {e}", path.display()), e.raw_os_error());
    let f = std::fs::File::open(path).map_err(what)?;
    let meta = f.metadata().map_err(what)?;
    if !meta.is_file() {
        return Err(Failure::invalid("library-open", format!("{} is not a regular file", path.display())));
    }
    let mut bytes = Vec::new();
    f.take(MAX_LIBRARY_FILE + 1).read_to_end(&mut bytes).map_err(what)?;
    if bytes.len() as u64 > MAX_LIBRARY_FILE {
        return Err(Failure::invalid("library-open", format!("{} is larger than {MAX_LIBRARY_FILE} bytes", path.display())));
    }
    Ok(bytes)
}

/// A library name the HAL accepts: ASCII letters, digits, `_`, `-`, `.`; at most 32 bytes; other
/// bytes become `_`, an empty name becomes `lib`.
pub fn library_name(name: &str) -> String {
    let mut n: String =
        name.chars().take(32).map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' }).collect();
    if n.is_empty() {
        n.push_str("lib");
    }
    n
}

/// The device board this machine's device-tree model names (hexrpc's board table), or
/// `Unavailable` quoting the model (or why it could not be read) and listing the boards.
pub fn detect_board() -> Result<&'static str, Failure> {
    let mut why = String::new();
    for path in ["/proc/device-tree/model", "/sys/firmware/devicetree/base/model"] {
        match std::fs::read(path) {
            Ok(bytes) => {
                let model = String::from_utf8_lossy(&bytes).trim_end_matches('\0').to_string();
                return match hexrpc_bsp::detect(&model).filter(|b| !hexrpc_bsp::BENCH_BOARDS.contains(b)) {
                    Some(b) => Ok(b.name),
                    None => Err(Failure::unavailable(
                        "board",
                        format!(
                            "no hexrpc board claims the device-tree model {model:?} ({path}); pass a board by name ({})",
                            device_board_names()
                        ),
                    )),
                };
            }
            Err(e) => {
                if !why.is_empty() {
                    why.push_str(", ");
                }
                why.push_str(&format!("{path}: {e}"));
            }
        }
    }
    Err(Failure::unavailable(
        "board",
        format!("no device-tree model to detect the board from ({why}); pass a board by name ({})", device_board_names()),
    ))
}

/// The names of hexrpc's device boards (every board but the bench's), comma-separated.
pub fn device_board_names() -> String {
    hexrpc_bsp::device_boards().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

/// What a lease handle names: a lease of its own, or a sub-allocation of an arena (a range of
/// the arena's lease). Either way launches map the whole lease behind it ([`LeaseObj::base`]).
enum Memory {
    Lease(SharedLease<Seam>),
    Sub(SharedArenaBuf<Seam>),
}

/// A lease holding a share of its session: a lease of its own or a sub-allocation of an arena
/// ([`ArenaObj::alloc`]), which the bindings treat alike: its memory, views (offsets relative
/// to it), launches and batches. Dropping it frees the lease, or gives the range back to the
/// arena.
pub struct LeaseObj {
    // Field order is release order: the lease (or range) before the session.
    mem: Memory,
    session: Arc<SessionObj>,
}

impl LeaseObj {
    /// The lease launches map: this one, or the arena's.
    pub fn base(&self) -> &Lease<'static, Seam> {
        match &self.mem {
            Memory::Lease(l) => l.lease(),
            Memory::Sub(b) => b.lease(),
        }
    }

    /// Where this object's bytes start in [`base`](Self::base) (0 for a lease of its own).
    pub fn base_offset(&self) -> usize {
        match &self.mem {
            Memory::Lease(_) => 0,
            Memory::Sub(b) => b.offset(),
        }
    }

    /// Its length: the lease's (rounded up to a page) or the sub-allocation's (as asked).
    pub fn len(&self) -> usize {
        match &self.mem {
            Memory::Lease(l) => l.lease().len(),
            Memory::Sub(b) => b.len(),
        }
    }

    /// Never true: a lease has a page at least, a sub-allocation a byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the lease launches map ([`hexrpc_hal::Lease::lease_id`]): equal for every
    /// sub-allocation of one arena, which a batch counts as one lease.
    pub fn lease_id(&self) -> u32 {
        self.base().lease_id()
    }

    /// False for a read-only import ([`SessionObj::import`]): nothing may write its memory
    /// from this process.
    pub fn writable(&self) -> bool {
        self.base().writable()
    }

    /// True for a sub-allocation of an arena.
    pub fn is_sub(&self) -> bool {
        matches!(self.mem, Memory::Sub(_))
    }

    /// The session it belongs to.
    pub fn session(&self) -> &Arc<SessionObj> {
        &self.session
    }

    /// The host address and length of its memory (shared with the DSP).
    pub fn memory(&self) -> (usize, usize) {
        (self.base().host_addr() + self.base_offset(), self.len())
    }

    /// A checked view (`offset` relative to this object): a view of [`base`](Self::base).
    pub fn view(&self, offset: usize, len: usize) -> Result<BufferView<'_>, Failure> {
        let v = match &self.mem {
            Memory::Lease(l) => l.view(offset, len),
            Memory::Sub(b) => b.view(offset, len),
        };
        v.map_err(|e| match e.cause {
            hexrpc_hal::Cause::Invalid => {
                let what = if self.is_sub() { "an arena buffer" } else { "a lease" };
                Failure::invalid("view", format!("view {offset}+{len} does not fit {what} of {} bytes", self.len()))
            }
            _ => Failure::hal(e),
        })
    }
}

/// A model input bound to a lease holds the lease object (and so its session share and, for a
/// sub-allocation, its arena) for as long as the binding lasts.
impl hexrpc_model::bind::LeaseHolder<Seam> for LeaseObj {
    fn lease(&self) -> &Lease<'static, Seam> {
        self.base()
    }
}

/// An arena holding a share of its session: one lease carved into sub-allocations
/// ([`alloc`](Self::alloc)), each a [`LeaseObj`]. Its lease is released when the arena and every
/// sub-allocation of it are gone.
pub struct ArenaObj {
    // Field order is release order: the arena before the session.
    arena: Arc<SharedArena<Seam>>,
    session: Arc<SessionObj>,
}

impl ArenaObj {
    /// A sub-allocation of `len` bytes at an offset that is a multiple of `align` (0: the
    /// arena's alignment, [`hexrpc_hal::ARENA_ALIGN`]).
    pub fn alloc(&self, len: usize, align: usize) -> Result<LeaseObj, Failure> {
        self.session.check()?;
        let align = if align == 0 { hexrpc_hal::ARENA_ALIGN } else { align };
        let buf = self.arena.alloc_aligned(len, align).map_err(|e| match e.cause {
            hexrpc_hal::Cause::Invalid => Failure::invalid(
                "alloc",
                format!("arena sub-allocation of {len} bytes at alignment {align}: the length must be non-zero and the alignment a power of two"),
            ),
            _ => Failure::hal(e),
        })?;
        Ok(LeaseObj { mem: Memory::Sub(buf), session: self.session.clone() })
    }

    /// Bytes, blocks and the largest free range.
    pub fn stats(&self) -> ArenaStats {
        self.arena.stats()
    }

    /// The arena's length (its lease's).
    pub fn len(&self) -> usize {
        self.arena.len()
    }

    /// Never true (a lease has a page at least).
    pub fn is_empty(&self) -> bool {
        self.arena.is_empty()
    }

    /// The id of the arena's lease (every sub-allocation's [`LeaseObj::lease_id`]).
    pub fn lease_id(&self) -> u32 {
        self.arena.lease().lease_id()
    }

    /// The session it belongs to.
    pub fn session(&self) -> &Arc<SessionObj> {
        &self.session
    }
}

/// An open library with its kernel's signature, holding a share of its session.
pub struct KernelObj {
    // Field order is release order: the library before the session.
    kernel: Kernel<SharedLibrary<Seam>>,
    table: KernelTable,
    session: Arc<SessionObj>,
}

/// What a library's build record says about its kernel table, read when the library is opened
/// (the record is not kept past the open), so a batch on a library whose entry does not run
/// batches is refused when the batch is made, not when it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelTable {
    /// The build record lists these kernels as the entry's table (`hexrpc build-lib --table`).
    Recorded(Vec<Signature>),
    /// The build record says the entry launches one kernel and runs no batches.
    None,
    /// No (readable) build record: a library built elsewhere; only a run can tell.
    Unknown,
}

impl KernelTable {
    /// The table an image's build record describes.
    pub fn of(image: &[u8]) -> KernelTable {
        match LibraryRecord::find(image) {
            Ok(Some(rec)) if rec.batches() => match rec.kernels().map(|k| k.parse_signature()).collect::<Result<Vec<_>, _>>() {
                Ok(sigs) => KernelTable::Recorded(sigs),
                Err(_) => KernelTable::Unknown,
            },
            Ok(Some(_)) => KernelTable::None,
            _ => KernelTable::Unknown,
        }
    }
}

/// One buffer argument of a launch: a lease and a range of it.
pub struct ViewArg<'a> {
    /// The lease.
    pub lease: &'a LeaseObj,
    /// Offset in bytes.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl KernelObj {
    /// The kernel table its build record names, read at the open.
    pub fn table(&self) -> &KernelTable {
        &self.table
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel<SharedLibrary<Seam>> {
        &self.kernel
    }

    /// The session it belongs to.
    pub fn session(&self) -> &Arc<SessionObj> {
        &self.session
    }

    /// One launch; returns the DSP microseconds. Nothing is allocated on success.
    pub fn launch(&self, views: &[ViewArg<'_>], scalars: &[Scalar], deadline: Option<Duration>) -> Result<u64, Failure> {
        self.session.check()?;
        if views.len() > MAX_BUFFERS {
            return Err(Failure::refused(format!("{} buffers: a launch carries at most {MAX_BUFFERS}", views.len())));
        }
        let owner = ();
        let mut refs = [BufferRef::borrowing(&owner, Fd(-1), 0, 0, 0); MAX_BUFFERS];
        for (i, (r, v)) in refs.iter_mut().zip(views).enumerate() {
            if !Arc::ptr_eq(&v.lease.session, &self.session) {
                return Err(Failure::invalid("launch-pack", format!("buffer {i}: its lease belongs to another session")));
            }
            let lease = v.lease.base();
            let fits = v.offset.checked_add(v.len).is_some_and(|end| end <= v.lease.len());
            if !fits {
                let what = if v.lease.is_sub() { "arena buffer" } else { "lease" };
                return Err(Failure::invalid(
                    "launch-pack",
                    format!("buffer {i}: view {}+{} does not fit its {what} of {} bytes", v.offset, v.len, v.lease.len()),
                ));
            }
            // The record borrows the lease object, which the caller keeps alive for the call: a
            // sub-allocation's view is a view of its arena's lease at the sub-allocation's offset.
            let offset = (v.lease.base_offset() + v.offset) as u64;
            *r = BufferRef::borrowing(v.lease, lease.fd(), lease.len() as u64, offset, v.len as u64);
        }
        self.kernel.launch_buffers(&refs[..views.len()], scalars, deadline).map_err(Failure::runtime)
    }
}

/// A scalar from its type and raw bits (the value's little-endian bits, zero-extended; floats as
/// their IEEE bits).
pub fn scalar_from_bits(ty: ScalarType, bits: u64) -> Scalar {
    match ty {
        ScalarType::I8 => Scalar::I8(bits as u8 as i8),
        ScalarType::U8 => Scalar::U8(bits as u8),
        ScalarType::I16 => Scalar::I16(bits as u16 as i16),
        ScalarType::U16 => Scalar::U16(bits as u16),
        ScalarType::I32 => Scalar::I32(bits as u32 as i32),
        ScalarType::U32 => Scalar::U32(bits as u32),
        ScalarType::I64 => Scalar::I64(bits as i64),
        ScalarType::U64 => Scalar::U64(bits),
        ScalarType::F16 => Scalar::F16(bits as u16),
        ScalarType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
        ScalarType::F64 => Scalar::F64(f64::from_bits(bits)),
    }
}
