//! Rust models of the generated DSP `entry` (entry-abi.md v1 and v2) and the HAP ledger.
//!
//! A library registered with [`Bench::register_library`](crate::Bench::register_library) is a
//! [`LibraryModel`]: which entry contract it was generated for, how many buffer and scalar
//! parameters the kernel has, and a host function that plays the kernel. When the host invokes
//! the library handle with method 2, the model does what the generated C does, step by step:
//! it reads `pra[0]` / `pra[1]` / `pra[3+i].dma.fd` through the 32-bit (8-byte) `remote_arg`
//! view, calls `HAP_mmap` on the fds (a real `mmap` of the buffer's memfd), computes the kernel
//! pointers, runs the kernel, writes the timer into `pra[2]` and calls `HAP_munmap`.
//!
//! Every `HAP_mmap` / `HAP_munmap` and every contract violation goes into the ledger
//! ([`LedgerEvent`]). Where the C would touch memory it must not (the v1 defect for a view with a
//! non-zero offset), the model checks the range first and **records the violation instead of
//! performing the access**, so the bench never corrupts host memory; a mismatched unmap is
//! recorded and not performed (the real mapping stays until the process ends).
//!
//! A library with a kernel *table* ([`LibraryModel::table`]) also answers batches (method 3,
//! entry-abi.md and the runtime's `launch::abi` batch table): `run_batch` reads the header, the
//! lease table and every record through the same 32-bit view, validates all of it before the first
//! `HAP_mmap`, maps each lease once, runs the records in order (a kernel may report a failure
//! with [`KernelCall::fail`], which stops the batch), unmaps every lease once and writes the
//! 24-byte status. The field offsets here are written from the card, independently of the
//! runtime's table, so a disagreement fails a test. Such a library answers programs too
//! (method 5, `run_program`): the same records, kept in one of the call's leases (header: magic
//! `HRXP`, K, L, R, the lease's index P, the records' offset O in it); the entry checks the
//! header and the lease table, maps the leases, then validates every record where it lies
//! (no view may name lease P) before running any, unmapping everything if one is bad.
//!
//! Not modelled: `HAP_power_set` (the generated entry calls it first; it has no observable effect
//! here), what real `HAP_mmap`/`HAP_munmap` do with unaligned or non-base addresses (unknown,
//! reverse-rpc.md 5), and DSP timing: the timer holds the host wall time of the kernel function
//! (or the simulated time it declares), never DSP cycles.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hexrpc_drivers::aee;
use hexrpc_drivers::dsp::remote_arg32;

use crate::account::{LedgerEntry, LedgerEvent};
use crate::state::{HapMap, HostMmap, Shared};

/// The v2 header magic, "HRX2" little-endian.
pub const V2_MAGIC: u32 = 0x3258_5248;
/// The batch header and status magic, "HRXB" little-endian.
pub const BATCH_MAGIC: u32 = 0x4258_5248;
/// Most records a batch entry accepts (256: tinygrad's fourth jit graph in one call).
pub const BATCH_MAX_LAUNCHES: u32 = 256;
/// Most record bytes a batch entry accepts (64 KiB: 256 records of 8 views and 4 scalars,
/// 136 bytes each, rounded up to a power of two).
pub const BATCH_MAX_RECORD_BYTES: u32 = 65536;
/// The program header and status magic, "HRXP" little-endian.
pub const PROGRAM_MAGIC: u32 = 0x5058_5248;
/// The magic of the per-record times after a batch's or program's status, "HRXT" little-endian
/// (written when the status buffer has room for every record's).
pub const TIMES_MAGIC: u32 = 0x5458_5248;
/// Most records a program entry accepts (4,096: a whole model's run).
pub const PROGRAM_MAX_LAUNCHES: u32 = 4096;
/// Most record bytes a program entry accepts (1 MiB).
pub const PROGRAM_MAX_RECORD_BYTES: u32 = 1 << 20;

/// Which entry contract a library was generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryVersion {
    /// tinygrad's contract: maps `size_i` bytes at file offset 0, kernel pointer `base + off_i`,
    /// unmaps `(base + off_i, size_i)` (defective for `off_i > 0`).
    V1,
    /// hexrpc's contract: validates, maps the whole lease, unmaps exactly what it mapped.
    V2,
}

/// The host function that plays a kernel.
pub type KernelFn = Arc<dyn Fn(&mut KernelCall<'_>) + Send + Sync>;

/// One kernel of a library's kernel table: its buffer and scalar parameter counts and the host
/// function that plays it.
#[derive(Clone)]
pub struct TableKernel {
    pub(crate) buffers: usize,
    pub(crate) scalars: usize,
    pub(crate) kernel: KernelFn,
}

impl TableKernel {
    /// A kernel with `buffers` buffer parameters followed by `scalars` scalar parameters.
    pub fn new(buffers: usize, scalars: usize, kernel: impl Fn(&mut KernelCall<'_>) + Send + Sync + 'static) -> Self {
        TableKernel { buffers, scalars, kernel: Arc::new(kernel) }
    }

    /// A single-kernel library with a v2 entry that runs this kernel.
    pub fn single_library(&self) -> LibraryModel {
        let f = self.kernel.clone();
        LibraryModel::new(EntryVersion::V2, self.buffers, self.scalars, move |c| f(c))
    }
}

/// A library the simulated DSP can load: entry contract, parameter counts and kernel.
#[derive(Clone)]
pub struct LibraryModel {
    pub(crate) version: EntryVersion,
    pub(crate) buffers: usize,
    pub(crate) scalars: usize,
    pub(crate) symbol: String,
    pub(crate) kernel: KernelFn,
    /// The kernel table of a batch-capable library (empty: single-kernel library, no batches).
    pub(crate) table: Vec<TableKernel>,
    /// Executor mode: the DSP process's shell (a qemu-hexagon process) that loaded this
    /// library's real code, and the library's id in it; when set, invokes go there instead of
    /// to `kernel`.
    pub(crate) exec: Option<(Arc<crate::executor::ExecProcess>, u32)>,
    /// The entry keeps lease mappings across calls (the runtime's map cache, v2 only).
    pub(crate) map_cache: bool,
    /// A single launch returns the kernel's status ([`LibraryModel::returning_status`]).
    pub(crate) returns_status: bool,
    /// The table's entry answers programs (method 5), as every table the runtime generates
    /// now does ([`LibraryModel::without_programs`]: one built before).
    pub(crate) programs: bool,
}

impl core::fmt::Debug for LibraryModel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LibraryModel")
            .field("version", &self.version)
            .field("buffers", &self.buffers)
            .field("scalars", &self.scalars)
            .field("symbol", &self.symbol)
            .field("table", &self.table.len())
            .field("executor", &self.exec.as_ref().map(|(e, lib)| (e.pid(), *lib)))
            .finish()
    }
}

impl LibraryModel {
    /// A library whose `entry` was generated for a kernel with `buffers` buffer parameters
    /// followed by `scalars` scalar parameters, under contract `version`.
    pub fn new(
        version: EntryVersion,
        buffers: usize,
        scalars: usize,
        kernel: impl Fn(&mut KernelCall<'_>) + Send + Sync + 'static,
    ) -> Self {
        LibraryModel {
            version,
            buffers,
            scalars,
            symbol: "entry".into(),
            kernel: Arc::new(kernel),
            table: Vec::new(),
            exec: None,
            map_cache: false,
            returns_status: false,
            programs: false,
        }
    }

    /// A v2 library generated for a kernel table (the runtime's `write_batch_entry`): method 2 is
    /// a single launch of kernel 0, method 3 a batch over the table, method 5 a program.
    pub fn table(kernels: Vec<TableKernel>) -> Self {
        let (buffers, scalars, kernel) = match kernels.first() {
            Some(k) => (k.buffers, k.scalars, k.kernel.clone()),
            None => (0, 0, Arc::new(|_: &mut KernelCall<'_>| {}) as KernelFn),
        };
        LibraryModel {
            version: EntryVersion::V2,
            buffers,
            scalars,
            symbol: "entry".into(),
            kernel,
            table: kernels,
            exec: None,
            map_cache: false,
            returns_status: false,
            programs: true,
        }
    }

    /// Kernels in the table (0 for a single-kernel library).
    pub fn kernels(&self) -> usize {
        self.table.len()
    }

    /// Executor mode: library `lib` loaded in the shell `exec` (its entry contract is whatever
    /// the image was built with; the fields the Rust models use are unused).
    pub(crate) fn executor(exec: Arc<crate::executor::ExecProcess>, lib: u32) -> Self {
        LibraryModel {
            version: EntryVersion::V2,
            buffers: 0,
            scalars: 0,
            symbol: "entry".into(),
            kernel: Arc::new(|_| {}),
            table: Vec::new(),
            exec: Some((exec, lib)),
            map_cache: false,
            returns_status: false,
            programs: false,
        }
    }

    /// An entry generated with the map cache (v2 only; the runtime's `EntryOptions::map_cache`):
    /// it keeps up to 16 lease mappings across calls keyed by (lease id, fd, lease length), as
    /// the generated C does, and answers method 4 (release). The host opens such a library with
    /// the map cache (the build record's `FLAG_MAP_CACHE`, or `open_library_with`).
    pub fn with_map_cache(mut self) -> Self {
        self.map_cache = self.version == EntryVersion::V2;
        self
    }

    /// A v2 entry whose single launch returns the kernel's status ([`KernelCall::fail`]) as the
    /// call's result, after it wrote the timer: the shape of an entry generated for a kernel
    /// whose `int` it passes on. hexrpc's generated entries ignore the status; the bench uses
    /// this to make the DSP answer an error after it wrote an out-buffer (driver tests).
    pub fn returning_status(mut self) -> Self {
        self.returns_status = self.version == EntryVersion::V2;
        self
    }

    /// A table library built before programs (method 5) existed: it answers method 5 with 0
    /// and writes no status, as such an entry's method check does.
    pub fn without_programs(mut self) -> Self {
        self.programs = false;
        self
    }

    /// True if the entry keeps lease mappings across calls.
    pub fn map_cache(&self) -> bool {
        self.map_cache
    }

    /// Names the entry symbol (default `entry`); the URI's symbol must match it.
    pub fn with_symbol(mut self, symbol: &str) -> Self {
        self.symbol = symbol.into();
        self
    }

    /// The entry contract.
    pub fn version(&self) -> EntryVersion {
        self.version
    }
}

/// Why a kernel's access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No buffer parameter with this index.
    NoSuchBuffer,
    /// The access is outside the view the kernel was given (a kernel bug).
    OutsideView,
    /// The access is inside the view but outside the DSP mapping it points into (recorded in the
    /// ledger; not performed).
    OutsideMapping,
}

impl std::fmt::Display for AccessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AccessError::NoSuchBuffer => "no buffer parameter with this index",
            AccessError::OutsideView => "access outside the view the kernel was given",
            AccessError::OutsideMapping => "access outside the DSP mapping the view points into",
        })
    }
}

impl std::error::Error for AccessError {}

struct KernelBuffer {
    ptr: u32,
    len: u32,
    map: Option<(u32, u32, Arc<HostMmap>)>,
}

/// What a kernel function sees: its buffer views (bounds-checked against the DSP mappings) and
/// its scalar slots.
pub struct KernelCall<'a> {
    buffers: Vec<KernelBuffer>,
    scalars: Vec<[u8; 8]>,
    events: &'a mut Vec<LedgerEvent>,
    sim: Option<Duration>,
    record: Option<usize>,
    status: i32,
    restart: bool,
}

impl KernelCall<'_> {
    /// Number of buffer parameters.
    pub fn buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Length of buffer view `i` as the entry told the kernel (0 if there is none).
    pub fn buffer_len(&self, i: usize) -> usize {
        self.buffers.get(i).map_or(0, |b| b.len as usize)
    }

    /// The 8-byte slot of scalar parameter `j`.
    pub fn scalar(&self, j: usize) -> Option<[u8; 8]> {
        self.scalars.get(j).copied()
    }

    /// Scalar `j` read as the low 4 bytes, little-endian.
    pub fn scalar_u32(&self, j: usize) -> Option<u32> {
        self.scalar(j).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Scalar `j` read as an `f32`.
    pub fn scalar_f32(&self, j: usize) -> Option<f32> {
        self.scalar_u32(j).map(f32::from_bits)
    }

    /// Declares how long this kernel "took" on the DSP (simulated); written as the timer and
    /// added to the call's simulated latency.
    pub fn set_simulated_time(&mut self, d: Duration) {
        self.sim = Some(d);
    }

    /// The batch record this call runs (`None` for a single launch).
    pub fn record(&self) -> Option<usize> {
        self.record
    }

    /// Returns `code` as the kernel's status (a kernel declared to return `int`): a non-zero
    /// status stops a batch at this record. A single launch ignores it, as the generated C does.
    pub fn fail(&mut self, code: i32) {
        self.status = code;
    }

    /// The DSP subsystem restarts while this kernel runs (as a crash would make it): the call
    /// in flight ends with -1 / `ECONNRESET` and every process, with its mappings, is gone.
    pub fn restart_dsp(&mut self) {
        self.restart = true;
    }

    fn locate(&mut self, i: usize, offset: usize, n: usize, write: bool) -> Result<usize, AccessError> {
        let b = self.buffers.get(i).ok_or(AccessError::NoSuchBuffer)?;
        match offset.checked_add(n) {
            Some(end) if end <= b.len as usize => {}
            _ => return Err(AccessError::OutsideView),
        }
        let start = b.ptr as u64 + offset as u64;
        let end = start + n as u64;
        if let Some((base, mlen, mem)) = &b.map {
            let (base, mend) = (*base as u64, *base as u64 + *mlen as u64);
            if start >= base && end <= mend && (end - base) as usize <= mem.len {
                return Ok(mem.addr + (start - base) as usize);
            }
        }
        self.events.push(LedgerEvent::AccessOutsideMapping { buffer: i, access: (start, n as u64), write });
        Err(AccessError::OutsideMapping)
    }

    /// Copies `out.len()` bytes at `offset` of buffer view `i`.
    pub fn read(&mut self, i: usize, offset: usize, out: &mut [u8]) -> Result<(), AccessError> {
        let at = self.locate(i, offset, out.len(), false)?;
        // SAFETY: `locate` checked that the range lies inside a live shared mapping owned by this
        // call (the `Arc<HostMmap>` is held by `self`); `out` is a distinct Rust buffer.
        unsafe { core::ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `offset` of buffer view `i`.
    pub fn write(&mut self, i: usize, offset: usize, data: &[u8]) -> Result<(), AccessError> {
        let at = self.locate(i, offset, data.len(), true)?;
        // SAFETY: as in `read`; the mapping is read-write.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), at as *mut u8, data.len()) };
        Ok(())
    }

    /// The whole of buffer view `i`.
    pub fn read_all(&mut self, i: usize) -> Result<Vec<u8>, AccessError> {
        let mut v = vec![0u8; self.buffer_len(i)];
        self.read(i, 0, &mut v)?;
        Ok(v)
    }
}

/// One DSP memory region holding a copied buffer argument.
pub(crate) struct Region {
    pub base: u32,
    pub data: Vec<u8>,
}

/// A buffer the call's handles refer to, resolvable by fd for `HAP_mmap`.
pub(crate) struct HandleBuf {
    pub fd: i32,
    pub memfd: Arc<OwnedFd>,
    pub len: u64,
    /// The bench's buffer behind the driver map the number names (what the DSP is handed).
    pub buf: u64,
}

/// What the DSP framework hands a library entry.
pub(crate) struct EntryEnv<'a> {
    pub sh: &'a Shared,
    pub pid: u64,
    pub library: String,
    pub sc: u32,
    pub pra: Vec<remote_arg32>,
    pub regions: Vec<Region>,
    pub handles: Vec<HandleBuf>,
    pub events: Vec<LedgerEvent>,
    pub sim: Option<Duration>,
    /// How many events were recorded when the call found its process gone (a DSP restart killed
    /// it mid-call). A real DSP process stops there; what the model does afterwards on the host
    /// (unmapping, checking views) is not DSP behaviour and is not recorded, so a restart never
    /// shows up as a contract mismatch.
    pub gone: Option<usize>,
    /// The library's map cache (a library with [`LibraryModel::with_map_cache`]).
    pub cache: Option<Arc<std::sync::Mutex<ModelCache>>>,
}

/// Lease mappings a map-cache entry keeps (the generated C's `MAP_CACHE_SLOTS`).
pub const MAP_CACHE_SLOTS: usize = 16;

/// The map cache of one loaded library in one DSP process (the generated C's static table).
#[derive(Default)]
pub(crate) struct ModelCache {
    slots: Vec<Cached>,
    tick: u64,
}

struct Cached {
    id: u32,
    fd: i32,
    len: u32,
    addr: u32,
    mem: Arc<HostMmap>,
    /// The buffer the handle's fd named when the mapping was made.
    buf: u64,
    users: u32,
    tick: u64,
    dead: bool,
}

impl EntryEnv<'_> {
    fn region(&mut self, addr: u64, len: u64) -> Option<(usize, usize)> {
        self.regions.iter().position(|r| addr >= r.base as u64 && addr + len <= r.base as u64 + r.data.len() as u64).map(|i| {
            let off = (addr - self.regions[i].base as u64) as usize;
            (i, off)
        })
    }

    /// Reads `len` bytes at `off` of argument `k` (zeros and a ledger record if out of bounds).
    fn arg_read(&mut self, k: usize, off: u32, len: u32) -> Vec<u8> {
        let mut out = vec![0u8; len as usize];
        let ok = self.pra.get(k).is_some_and(|a| off as u64 + len as u64 <= a.buf.len as u64);
        if ok {
            let addr = self.pra[k].buf.pv as u64 + off as u64;
            if let Some((i, o)) = self.region(addr, len as u64) {
                out.copy_from_slice(&self.regions[i].data[o..o + len as usize]);
                return out;
            }
        }
        self.events.push(LedgerEvent::ArgOutOfBounds { arg: k, offset: off, len });
        out
    }

    fn arg_write(&mut self, k: usize, off: u32, data: &[u8]) -> bool {
        let len = data.len() as u32;
        let ok = self.pra.get(k).is_some_and(|a| off as u64 + len as u64 <= a.buf.len as u64);
        if ok {
            let addr = self.pra[k].buf.pv as u64 + off as u64;
            if let Some((i, o)) = self.region(addr, len as u64) {
                self.regions[i].data[o..o + data.len()].copy_from_slice(data);
                return true;
            }
        }
        self.events.push(LedgerEvent::ArgOutOfBounds { arg: k, offset: off, len });
        false
    }

    fn arg_len(&self, k: usize) -> u32 {
        self.pra.get(k).map_or(0, |a| a.buf.len)
    }

    fn handle_fd(&mut self, k: usize) -> i32 {
        match self.pra.get(k) {
            Some(a) => a.dma().fd,
            None => {
                self.events.push(LedgerEvent::ArgOutOfBounds { arg: k, offset: 0, len: 8 });
                0
            }
        }
    }

    /// `HAP_mmap(0, len, PROT_READ|PROT_WRITE, 0, fd, offset)`.
    fn hap_mmap(&mut self, fd: i32, len: u32, offset: u32) -> Option<(u32, Arc<HostMmap>)> {
        let fail = |me: &mut Self, reason| {
            me.events.push(LedgerEvent::MapFailed { fd, len, reason });
            None
        };
        if len == 0 {
            return fail(self, "zero length");
        }
        let found = match self.handles.iter().find(|h| h.fd == fd) {
            Some(h) => Some((h.memfd.clone(), h.len, h.buf)),
            None => {
                let st = self.sh.lock();
                st.procs
                    .get(&self.pid)
                    .and_then(|p| st.rpc_files.get(&p.file))
                    .and_then(|f| f.maps.iter().find(|m| m.fd == fd && m.buf.is_some()))
                    .and_then(|m| m.buf)
                    .and_then(|id| st.buffers.get(&id).map(|b| (b.memfd.clone(), b.len, id)))
            }
        };
        let Some((memfd, buf_len, buf)) = found else { return fail(self, "fd is not mapped for this process") };
        if offset as u64 + len as u64 > buf_len {
            return fail(self, "range beyond the buffer");
        }
        let Some(mem) = HostMmap::map(&memfd, len as usize, offset as u64, &self.sh.dsp_host_mmaps) else {
            return fail(self, "mmap failed");
        };
        let mem = Arc::new(mem);
        let mut st = self.sh.lock();
        let Some(p) = st.procs.get_mut(&self.pid).filter(|p| p.alive) else {
            drop(st);
            let r = fail(self, "process gone");
            self.gone.get_or_insert(self.events.len());
            return r;
        };
        // Addresses are handed out upwards and start again low when a mapping would pass the
        // end of the DSP's 32-bit space: a range never wraps (a base plus an offset inside it
        // always fits in 32 bits), as the DSP's own allocator never returns such a range.
        let span = (len as u64).div_ceil(4096) * 4096 + 4096;
        let addr = if u64::from(p.next_dva) + span > 1 << 32 { 0x1000_0000 } else { p.next_dva };
        p.next_dva = u32::try_from(u64::from(addr) + span).unwrap_or(0x1000_0000);
        p.hap.push(HapMap { dsp_addr: addr, len, _mem: mem.clone() });
        st.lease_mapped(self.pid, &self.library, fd, buf, addr, len);
        drop(st);
        self.events.push(LedgerEvent::Map { fd, addr, len, offset });
        Some((addr, mem))
    }

    /// `HAP_munmap(addr, len)`: unmaps only an exact match of a live mapping.
    fn hap_munmap(&mut self, addr: u32, len: u32) {
        let mut st = self.sh.lock();
        let matched = match st.procs.get_mut(&self.pid).filter(|p| p.alive) {
            Some(p) => match p.hap.iter().position(|m| m.dsp_addr == addr && m.len == len) {
                Some(i) => {
                    p.hap.remove(i);
                    st.lease_unmapped(self.pid, addr, len);
                    true
                }
                None => false,
            },
            None => {
                // The process died under the call (a restart): its mappings went with it.
                drop(st);
                self.gone.get_or_insert(self.events.len());
                return;
            }
        };
        drop(st);
        self.events.push(LedgerEvent::Unmap { addr, len, matched });
    }

    /// The generated C's `hrx_acquire`: the mapping of lease `(id, fd, len)` from the library's
    /// cache (a hit: nothing is mapped; if the handle's fd now names another buffer than the one
    /// mapped, [`LedgerEvent::StaleMappingUsed`] is recorded, and the stale mapping is used, as
    /// the C would), or a new `HAP_mmap`, kept in the cache when an entry is free or unused.
    /// Returns (address, memory, the cache entry held or -1).
    fn map_lease(&mut self, id: u32, fd: i32, len: u32) -> Option<(u32, Arc<HostMmap>, i32)> {
        let Some(cache) = self.cache.clone().filter(|_| id != 0) else {
            return self.hap_mmap(fd, len, 0).map(|(a, m)| (a, m, -1));
        };
        let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.handles.iter().find(|h| h.fd == fd).map(|h| h.buf);
        let mut free = None;
        for i in 0..c.slots.len() {
            let e = &c.slots[i];
            if e.id == id && !e.dead {
                if e.fd == fd && e.len == len {
                    let (addr, mem, buf) = (e.addr, e.mem.clone(), e.buf);
                    c.tick += 1;
                    let tick = c.tick;
                    let e = &mut c.slots[i];
                    e.users += 1;
                    e.tick = tick;
                    if now.is_some_and(|b| b != buf) {
                        self.events.push(LedgerEvent::StaleMappingUsed { fd, addr, len });
                    }
                    return Some((addr, mem, i as i32));
                }
                if e.users == 0 {
                    let (addr, l) = (e.addr, e.len);
                    self.hap_munmap(addr, l);
                    c.slots[i].dead = true;
                    c.slots[i].id = 0;
                } else {
                    c.slots[i].dead = true;
                }
            }
        }
        // Free entries: the dead, unused ones (unmapped already), else room to grow.
        if let Some(i) = c.slots.iter().position(|e| e.dead && e.users == 0 && e.id == 0) {
            free = Some(i);
        } else if c.slots.len() < MAP_CACHE_SLOTS {
            free = Some(c.slots.len());
        } else if let Some(i) = (0..c.slots.len()).filter(|&i| c.slots[i].users == 0).min_by_key(|&i| c.slots[i].tick) {
            let (addr, l) = (c.slots[i].addr, c.slots[i].len);
            self.hap_munmap(addr, l);
            c.slots[i].dead = true;
            c.slots[i].id = 0;
            free = Some(i);
        }
        let (addr, mem) = match self.hap_mmap(fd, len, 0) {
            Some(m) => m,
            None => {
                // As the C: give back every unused entry once and try again.
                let unused: Vec<usize> = (0..c.slots.len()).filter(|&i| c.slots[i].id != 0 && c.slots[i].users == 0).collect();
                if unused.is_empty() {
                    return None;
                }
                for i in unused {
                    let (addr, l) = (c.slots[i].addr, c.slots[i].len);
                    self.hap_munmap(addr, l);
                    c.slots[i].dead = true;
                    c.slots[i].id = 0;
                }
                if free.is_none() {
                    free = c.slots.iter().position(|e| e.dead && e.users == 0 && e.id == 0);
                }
                self.hap_mmap(fd, len, 0)?
            }
        };
        let Some(i) = free else { return Some((addr, mem, -1)) };
        c.tick += 1;
        let e = Cached { id, fd, len, addr, mem: mem.clone(), buf: now.unwrap_or(0), users: 1, tick: c.tick, dead: false };
        if i == c.slots.len() {
            c.slots.push(e);
        } else {
            c.slots[i] = e;
        }
        Some((addr, mem, i as i32))
    }

    /// The generated C's `hrx_put`: unmaps a per-call mapping; a cached one stays mapped unless
    /// it was released while in use and this was its last user.
    fn put_lease(&mut self, slot: i32, addr: u32, len: u32) {
        let Some(cache) = self.cache.clone().filter(|_| slot >= 0) else { return self.hap_munmap(addr, len) };
        let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
        let Some(e) = c.slots.get_mut(slot as usize) else { return };
        e.users = e.users.saturating_sub(1);
        if e.users == 0 && e.dead && e.id != 0 {
            let (addr, l) = (e.addr, e.len);
            e.id = 0;
            self.hap_munmap(addr, l);
        }
    }

    /// Runs the model's kernel; returns (microseconds for the timer, the kernel's status).
    fn run_kernel(&mut self, model: &LibraryModel, buffers: Vec<KernelBuffer>, scalars: Vec<[u8; 8]>) -> (u64, i32) {
        let (micros, status, restart) = self.call_kernel(&model.kernel, None, buffers, scalars);
        if restart {
            crate::release::restart_dsp(self.sh, crate::RestartReason::ModelKernel { library: self.library.clone() });
        }
        (micros, status)
    }

    /// Runs `kernel`; returns (microseconds for the timer, its status, whether it restarted the
    /// DSP). Its declared simulated time is added to the call's.
    fn call_kernel(
        &mut self,
        kernel: &KernelFn,
        record: Option<usize>,
        buffers: Vec<KernelBuffer>,
        scalars: Vec<[u8; 8]>,
    ) -> (u64, i32, bool) {
        let mut call = KernelCall { buffers, scalars, events: &mut self.events, sim: None, record, status: 0, restart: false };
        let t0 = Instant::now();
        kernel(&mut call);
        let wall = t0.elapsed();
        let (sim, status, restart) = (call.sim, call.status, call.restart);
        if let Some(d) = sim {
            self.sim = Some(self.sim.unwrap_or_default() + d);
        }
        (sim.unwrap_or(wall).as_micros() as u64, status, restart)
    }

    fn process_alive(&self) -> bool {
        self.sh.lock().procs.get(&self.pid).is_some_and(|p| p.alive)
    }

    /// Appends this call's events to the bench ledger.
    pub fn flush(&mut self) {
        if self.events.is_empty() {
            return;
        }
        if let Some(n) = self.gone {
            self.events.truncate(n);
        }
        let mut st = self.sh.lock();
        for e in self.events.drain(..) {
            st.record_ledger(LedgerEntry { pid: self.pid, library: self.library.clone(), event: e }, self.sh.cfg.log_capacity);
        }
    }
}

fn i32_at(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn u32_at(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn slot(b: Vec<u8>) -> [u8; 8] {
    let mut s = [0u8; 8];
    s.copy_from_slice(&b[..8]);
    s
}

/// The v1 generated entry (entry-abi.md "Version 1"), as the C does it, defects included.
pub(crate) fn run_v1(env: &mut EntryEnv<'_>, model: &LibraryModel) -> i32 {
    if env.sc >> 24 != 2 {
        return 0;
    }
    let (n, k) = (model.buffers, model.scalars);
    let mut sizes = Vec::with_capacity(n);
    let mut scalars = Vec::with_capacity(k);
    for i in 0..n + k {
        let s = env.arg_read(0, 8 * i as u32, 8);
        if i < n {
            sizes.push(i32_at(&s));
        } else {
            scalars.push(slot(s));
        }
    }
    let offs: Vec<i32> = (0..n).map(|i| i32_at(&env.arg_read(1, 4 * i as u32, 4))).collect();
    let mut bufs = Vec::with_capacity(n);
    let mut unmaps = Vec::with_capacity(n);
    for i in 0..n {
        let fd = env.handle_fd(3 + i);
        // C: HAP_mmap(0, sz, 3, 0, fd, 0) + off, no error check; an int size converts to size_t.
        let size = sizes[i] as u32;
        let mapped = env.hap_mmap(fd, size, 0);
        let base = mapped.as_ref().map_or(u32::MAX, |m| m.0);
        let ptr = base.wrapping_add(offs[i] as u32);
        let inside = mapped.is_some() && offs[i] == 0;
        if !inside {
            env.events.push(LedgerEvent::ViewOutsideMapping {
                buffer: i,
                view: (ptr, size),
                mapping: mapped.as_ref().map(|m| (m.0, size)),
            });
        }
        bufs.push(KernelBuffer { ptr, len: size, map: mapped.map(|(a, m)| (a, size, m)) });
        unmaps.push((ptr, size));
    }
    let (micros, _) = env.run_kernel(model, bufs, scalars);
    // C: *(unsigned long long *)pra[2].pv = elapsed, whatever pra[2]'s length.
    env.arg_write(2, 0, &micros.to_le_bytes());
    env.events.push(LedgerEvent::Timer { micros });
    for (ptr, size) in unmaps {
        env.hap_munmap(ptr, size);
    }
    0
}

/// The v2 entry (entry-abi.md "Version 2"): validate, map leases, run, unmap what was mapped.
pub(crate) fn run_v2(env: &mut EntryEnv<'_>, model: &LibraryModel) -> i32 {
    if env.sc >> 24 != 2 {
        return 0;
    }
    let (n, k) = (model.buffers, model.scalars);
    let refuse = |env: &mut EntryEnv<'_>| {
        env.events.push(LedgerEvent::Refused { code: aee::AEE_EBADPARM });
        aee::AEE_EBADPARM
    };
    let need0 = 8 * (1 + n + k) as u64;
    let need1 = 8 * n as u64;
    if env.pra.len() < 3 + n || (env.arg_len(0) as u64) < need0 || (env.arg_len(1) as u64) < need1 {
        return refuse(env);
    }
    let hdr = env.arg_read(0, 0, 8);
    if u32_at(&hdr[0..4]) != V2_MAGIC || u32_at(&hdr[4..8]) as usize != n {
        return refuse(env);
    }
    let mut views = Vec::with_capacity(n);
    for i in 0..n {
        let len = u32_at(&env.arg_read(0, 8 * (1 + i) as u32, 8));
        let pair = env.arg_read(1, 8 * i as u32, 8);
        let (off, lease) = (u32_at(&pair[0..4]), u32_at(&pair[4..8]));
        if off as u64 + len as u64 > lease as u64 || lease == 0 {
            return refuse(env);
        }
        views.push((off, len, lease));
    }
    let scalars: Vec<[u8; 8]> = (0..k).map(|j| slot(env.arg_read(0, 8 * (1 + n + j) as u32, 8))).collect();
    // The lease ids (the buffer slots' second words), read only by an entry with the map cache.
    let ids: Vec<u32> = (0..n).map(|i| if env.cache.is_some() { u32_at(&env.arg_read(0, 8 * (1 + i) as u32 + 4, 4)) } else { 0 }).collect();
    let mut bufs = Vec::with_capacity(n);
    let mut mapped: Vec<(u32, u32, i32)> = Vec::with_capacity(n);
    for (i, &(off, len, lease)) in views.iter().enumerate() {
        let fd = env.handle_fd(3 + i);
        match env.map_lease(ids[i], fd, lease) {
            Some((base, mem, slot)) => {
                mapped.push((base, lease, slot));
                bufs.push(KernelBuffer { ptr: base + off, len, map: Some((base, lease, mem)) });
            }
            None => {
                drop(bufs);
                for &(base, l, slot) in mapped.iter().rev() {
                    env.put_lease(slot, base, l);
                }
                return aee::AEE_EMMAP;
            }
        }
    }
    let (micros, status) = env.run_kernel(model, bufs, scalars);
    if env.arg_len(2) >= 8 {
        env.arg_write(2, 0, &micros.to_le_bytes());
        env.events.push(LedgerEvent::Timer { micros });
    }
    for &(base, l, slot) in mapped.iter().rev() {
        env.put_lease(slot, base, l);
    }
    if model.returns_status {
        status
    } else {
        0
    }
}

fn u16_at(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

/// One validated batch record: kernel index, views (lease index, offset, length), scalar slots.
struct BatchRecord {
    kernel: usize,
    views: Vec<(usize, u32, u32)>,
    scalars: Vec<[u8; 8]>,
}

/// The batch entry (method 3 of a library with a kernel table), as the generated C does it:
/// validate sc, pra lengths, header, lease table and every record; map each lease once; run the
/// records in order, stopping at the first kernel with a non-zero status; unmap every lease;
/// write the status (u32 magic, done, failed record or `u32::MAX`, i32 code, u64 microseconds).
pub(crate) fn run_batch(env: &mut EntryEnv<'_>, model: &LibraryModel) -> i32 {
    run_records(env, model, false)
}

/// The program entry (method 5 of a library with a kernel table): a batch whose records are in
/// one of its leases ([`run_batch`] otherwise).
pub(crate) fn run_program(env: &mut EntryEnv<'_>, model: &LibraryModel) -> i32 {
    run_records(env, model, true)
}

/// Parses and validates `k` records filling `bytes` against the table and the lease lengths; no
/// view may name lease `excluded`. `None` if any is bad.
fn parse_records(model: &LibraryModel, bytes: &[u8], k: u32, leases: &[u32], excluded: Option<usize>) -> Option<Vec<BatchRecord>> {
    let mut records = Vec::with_capacity(k as usize);
    let mut at = 0usize;
    for _ in 0..k {
        let h = bytes.get(at..at + 8)?;
        let (kernel, nv, ns) = (u32_at(&h[0..]) as usize, u16_at(&h[4..]) as usize, u16_at(&h[6..]) as usize);
        let tk = model.table.get(kernel)?;
        if nv != tk.buffers || ns != tk.scalars {
            return None;
        }
        let len = 8 + 12 * nv + 8 * ns;
        let rec = bytes.get(at..at + len)?;
        let mut views = Vec::with_capacity(nv);
        for v in 0..nv {
            let e = &rec[8 + 12 * v..];
            let (li, off, n) = (u32_at(&e[0..]) as usize, u32_at(&e[4..]), u32_at(&e[8..]));
            match leases.get(li) {
                Some(&lease) if Some(li) != excluded && off as u64 + n as u64 <= lease as u64 => views.push((li, off, n)),
                _ => return None,
            }
        }
        let scalars = (0..ns).map(|j| slot(rec[8 + 12 * nv + 8 * j..][..8].to_vec())).collect();
        records.push(BatchRecord { kernel, views, scalars });
        at += len;
    }
    (at == bytes.len()).then_some(records)
}

fn run_records(env: &mut EntryEnv<'_>, model: &LibraryModel, program: bool) -> i32 {
    let refuse = |env: &mut EntryEnv<'_>| {
        env.events.push(LedgerEvent::Refused { code: aee::AEE_EBADPARM });
        aee::AEE_EBADPARM
    };
    let (magic_want, max_k, max_r, hl) = if program {
        (PROGRAM_MAGIC, PROGRAM_MAX_LAUNCHES, PROGRAM_MAX_RECORD_BYTES, 24u32)
    } else {
        (BATCH_MAGIC, BATCH_MAX_LAUNCHES, BATCH_MAX_RECORD_BYTES, 16u32)
    };
    let nl = (env.sc & 0xf) as usize;
    if env.sc & 0x00ff_fff0 != 0x0002_0100 || env.pra.len() < 3 + nl {
        return refuse(env);
    }
    if env.arg_len(0) < hl || env.arg_len(2) < 24 || (env.arg_len(1) as u64) < 8 * nl as u64 {
        return refuse(env);
    }
    let hdr = env.arg_read(0, 0, hl);
    let (magic, k, l, r) = (u32_at(&hdr[0..]), u32_at(&hdr[4..]), u32_at(&hdr[8..]), u32_at(&hdr[12..]));
    if magic != magic_want || l as usize != nl || k == 0 || k > max_k || r > max_r || (!program && r > env.arg_len(0) - hl) {
        return refuse(env);
    }
    // A program's records: lease P at offset O.
    let (px, po) = if program { (u32_at(&hdr[16..]) as usize, u32_at(&hdr[20..])) } else { (usize::MAX, 0) };
    if program && px >= nl {
        return refuse(env);
    }
    let mut leases = Vec::with_capacity(nl);
    let mut ids = Vec::with_capacity(nl);
    for i in 0..nl {
        let e = env.arg_read(1, 8 * i as u32, 8);
        let (len, reserved) = (u32_at(&e[0..]), u32_at(&e[4..]));
        // With the map cache the reserved word is the lease id; without it, it must be 0.
        if len == 0 || (reserved != 0 && env.cache.is_none()) {
            return refuse(env);
        }
        leases.push(len);
        ids.push(reserved);
    }
    // A batch's records, validated before anything is mapped.
    let mut records = None;
    if program {
        if po as u64 + r as u64 > leases[px] as u64 {
            return refuse(env);
        }
    } else {
        let bytes = env.arg_read(0, hl, r);
        match parse_records(model, &bytes, k, &leases, None) {
            Some(recs) => records = Some(recs),
            None => return refuse(env),
        }
    }
    // Each lease mapped once for the whole call.
    let mut mapped: Vec<(u32, u32, Arc<HostMmap>, i32)> = Vec::with_capacity(nl);
    for (i, &lease) in leases.iter().enumerate() {
        let fd = env.handle_fd(3 + i);
        match env.map_lease(ids[i], fd, lease) {
            Some((base, mem, slot)) => mapped.push((base, lease, mem, slot)),
            None => {
                for &(base, len, _, slot) in mapped.iter().rev() {
                    env.put_lease(slot, base, len);
                }
                return aee::AEE_EMMAP;
            }
        }
    }
    let records = match records {
        Some(recs) => recs,
        None => {
            // A program's records, read where they lie and validated before any runs.
            let mem = &mapped[px].2;
            let parsed = (po as usize).checked_add(r as usize).filter(|&end| end <= mem.len).and_then(|end| {
                let mut bytes = vec![0u8; end - po as usize];
                // SAFETY: [addr + po, addr + end) lies inside the live shared mapping `mem`
                // (checked just above; the `Arc` keeps it mapped), and `bytes` is a distinct
                // Rust buffer of that length.
                unsafe { core::ptr::copy_nonoverlapping((mem.addr + po as usize) as *const u8, bytes.as_mut_ptr(), bytes.len()) };
                parse_records(model, &bytes, k, &leases, Some(px))
            });
            match parsed {
                Some(recs) => recs,
                None => {
                    for &(base, len, _, slot) in mapped.iter().rev() {
                        env.put_lease(slot, base, len);
                    }
                    return refuse(env);
                }
            }
        }
    };
    let (mut done, mut failed, mut code, mut micros) = (0u32, u32::MAX, 0i32, 0u64);
    let mut times: Vec<u32> = Vec::new();
    for (i, rec) in records.into_iter().enumerate() {
        let bufs = rec
            .views
            .iter()
            .map(|&(li, off, n)| {
                let (base, lease, mem, _) = &mapped[li];
                KernelBuffer { ptr: base + off, len: n, map: Some((*base, *lease, mem.clone())) }
            })
            .collect();
        let kernel = model.table[rec.kernel].kernel.clone();
        let (us, status, restart) = env.call_kernel(&kernel, Some(i), bufs, rec.scalars);
        env.events.push(LedgerEvent::BatchKernel { record: i as u32, kernel: rec.kernel as u32, code: status });
        if restart {
            // The DSP is gone: nothing after this point runs (its mappings went with the process).
            drop(mapped);
            crate::release::restart_dsp(env.sh, crate::RestartReason::ModelKernel { library: env.library.clone() });
            return -1;
        }
        micros += us;
        times.push(u32::try_from(us).unwrap_or(u32::MAX));
        if status != 0 {
            (failed, code) = (i as u32, status);
            break;
        }
        done += 1;
    }
    if !env.process_alive() {
        return -1;
    }
    for &(base, len, _, slot) in mapped.iter().rev() {
        env.put_lease(slot, base, len);
    }
    let mut st = Vec::with_capacity(24);
    for w in [magic_want, done, failed, code as u32] {
        st.extend_from_slice(&w.to_le_bytes());
    }
    st.extend_from_slice(&micros.to_le_bytes());
    // The per-record times, as the generated entry writes them when the status has room for
    // every record's ("HRXT", the count, a u32 each): the simulated kernel's time.
    if (env.arg_len(2) as usize).saturating_sub(32) / 4 >= k as usize {
        st.extend_from_slice(&TIMES_MAGIC.to_le_bytes());
        st.extend_from_slice(&(times.len() as u32).to_le_bytes());
        for t in &times {
            st.extend_from_slice(&t.to_le_bytes());
        }
    }
    env.arg_write(2, 0, &st);
    env.events.push(LedgerEvent::Timer { micros });
    0
}

/// Method 4 of an entry with the map cache (the generated C's `hrx_release`): pra 0 holds a u32
/// count C then C u32 lease ids; the cached mappings of those ids (every one for C = 0) are
/// unmapped, or marked to be unmapped by their last user when a call uses them.
pub(crate) fn run_release(env: &mut EntryEnv<'_>) -> i32 {
    let refuse = |env: &mut EntryEnv<'_>| {
        env.events.push(LedgerEvent::Refused { code: aee::AEE_EBADPARM });
        aee::AEE_EBADPARM
    };
    if env.sc & 0x00ff_ffff != 0x0001_0000 || env.arg_len(0) < 4 {
        return refuse(env);
    }
    let count = u32_at(&env.arg_read(0, 0, 4));
    if count > 64 || (env.arg_len(0) - 4) / 4 < count {
        return refuse(env);
    }
    let ids: Vec<u32> = (0..count).map(|k| u32_at(&env.arg_read(0, 4 + 4 * k, 4))).collect();
    let Some(cache) = env.cache.clone() else { return 0 };
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..c.slots.len() {
        let e = &mut c.slots[i];
        if e.id == 0 || !(ids.is_empty() || ids.contains(&e.id)) {
            continue;
        }
        if e.users == 0 {
            let (addr, len) = (e.addr, e.len);
            e.id = 0;
            e.dead = true;
            env.hap_munmap(addr, len);
        } else {
            e.dead = true;
        }
    }
    0
}
