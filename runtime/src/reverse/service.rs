//! The dispatcher: routes a request by (handle, method) to apps_remotectl, apps_std or apps_mem
//! and runs the handler under the policy.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use hexrpc_bsp::KernelAbi;
use hexrpc_drivers::adsprpc::{self, ADSP_MMAP_ADD_PAGES, ADSP_MMAP_HEAP_ADDR, ADSP_MMAP_REMOTE_HEAP_ADDR, REMOTECTL_HANDLE};
use hexrpc_drivers::apps_std::{self as std_abi, method as m, APPS_STD_EXTENDED};
use hexrpc_drivers::upstream::{self, FastrpcFd};
use hexrpc_drivers::{Fd, FileStat, Scalars, Syscalls};
use zerocopy::little_endian::{I32, I64, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::metrics::Metrics;
use super::policy::{FilePolicy, ImageBytes, ImageError, ImageTable};
use super::session::{FileTable, MapTable, Module, ModuleTable, Source, SourceView, ToClose};
use super::wire::{Reply, Request};
use super::RequestError;

/// rflags apps_mem `request_map64` may ask for, on every kernel: kernel-allocated pages added
/// to the requesting process's heap (`ADSP_MMAP_ADD_PAGES`, fd -1), owned by the session's
/// FastRPC file and freed with it.
///
/// The heap flags are refused before the kernel is called ([`REFUSED_MAP_FLAGS`],
/// docs/kernel-rules.md R12).
pub const ALLOWED_MAP_FLAGS: [u32; 1] = [ADSP_MMAP_ADD_PAGES];

/// rflags apps_mem `request_map64` refuses with [`RequestError::MapFlags`] (`AEE_EUNSUPPORTED`)
/// without calling the kernel:
///
/// * `ADSP_MMAP_HEAP_ADDR` (4) and `ADSP_MMAP_REMOTE_HEAP_ADDR` (8) on the comma three's driver
///   (`fastrpc_internal_mmap` → `fastrpc_mmap_create`) ignore the fd, take unzeroed memory
///   from the global adsprpc-mem region shared with the ADSP and keep it on the driver-global
///   map list with no owning file: no close frees it, only an unmap by DSP address (which the
///   driver never tells the client, R2) or an ADSP restart. Flag 4 then asks TrustZone to
///   protect the pages for the ADSP, flag 8 hyp-assigns them to the remote-heap VMs; when that
///   fails, the driver frees pages the DSP still maps. Nothing a user process on the CDSP
///   needs, and every use would leak or corrupt memory outside the session.
/// * Linux 6.1's `fastrpc_req_mmap` refuses anything but `ADD_PAGES` (`EINVAL`); newer mainline
///   hands `REMOTE_HEAP_ADDR` pages to the DSP's VMs (`qcom_scm_assign_mem`), which a user
///   process has no use for either.
pub const REFUSED_MAP_FLAGS: [u32; 2] = [ADSP_MMAP_HEAP_ADDR, ADSP_MMAP_REMOTE_HEAP_ADDR];

/// The answer to one request: the status sent as `prevResult` and the reply length sent as
/// `prevbufsLen` (0 whenever the status is not 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Response {
    /// 0 or an AEE code.
    pub status: i32,
    /// Bytes of packed reply at the start of the reply buffer.
    pub reply_len: usize,
}

impl Response {
    fn from(r: Result<usize, RequestError>) -> Self {
        match r {
            Ok(reply_len) => Response { status: 0, reply_len },
            Err(e) => Response { status: e.aee(), reply_len: 0 },
        }
    }
}

/// What [`ReverseService::end_session`] released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Open files closed.
    pub files: usize,
    /// DSP maps released (or, for a map whose address the kernel never reported, dropped from
    /// the books).
    pub maps: usize,
}

/// Live session resources, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounts {
    /// Open virtual FILE handles.
    pub files: usize,
    /// Open reverse module handles.
    pub modules: usize,
    /// Live apps_mem maps.
    pub maps: usize,
    /// Bytes they hold.
    pub map_bytes: u64,
}

/// How a serving loop is asked to stop: a flag and the thread id to interrupt.
#[derive(Debug, Default)]
pub struct StopSignal {
    requested: AtomicBool,
    tid: AtomicI32,
}

impl StopSignal {
    /// Not requested.
    pub const fn new() -> Self {
        StopSignal { requested: AtomicBool::new(false), tid: AtomicI32::new(0) }
    }

    /// Asks the loop to leave; the caller must also interrupt [`thread`](Self::thread) so that a
    /// blocked `next2` returns.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    /// True once [`request`](Self::request) was called (until [`reset`](Self::reset)).
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Clears the request (before serving again).
    pub fn reset(&self) {
        self.requested.store(false, Ordering::SeqCst);
    }

    /// The kernel thread id of the thread currently serving, if any.
    pub fn thread(&self) -> Option<i32> {
        match self.tid.load(Ordering::SeqCst) {
            0 => None,
            t => Some(t),
        }
    }

    pub(crate) fn set_thread(&self, tid: i32) {
        self.tid.store(tid, Ordering::SeqCst);
    }
}

struct Session<'img> {
    files: FileTable<'img>,
    modules: ModuleTable,
    maps: MapTable,
}

/// The hardened reverse file service of one FastRPC session.
///
/// It answers the DSP's reverse requests (apps_remotectl, apps_std, apps_mem) under a
/// [`FilePolicy`], reaching files only through the [`Syscalls`] seam and serving registered
/// library images from memory. All state is fixed capacity; the request path does not allocate.
/// [`dispatch`](Self::dispatch) answers one request; [`serve`](Self::serve) runs the listener
/// loop; with `std`, [`spawn`](Self::spawn) runs it on a thread. Dropping the service ends the
/// session ([`end_session`](Self::end_session)): every host file is closed and every DSP map
/// released.
pub struct ReverseService<'img, S: Syscalls> {
    sys: S,
    rpc_fd: AtomicI32,
    /// The FastRPC fd is an upstream `/dev/fastrpc-*` node (see [`ReverseService::set_kernel_abi`]).
    upstream: AtomicBool,
    policy: FilePolicy,
    images: spin::Mutex<ImageTable<'img>>,
    session: spin::Mutex<Session<'img>>,
    metrics: Metrics,
    pub(crate) stop: StopSignal,
    tap: spin::Once<&'img dyn RequestTap>,
}

/// Sees every request the service answers, after it was answered (`hexrpc capture` records them
/// as request files). Called outside the service's locks; it must not block for long: the DSP
/// waits for the answer.
pub trait RequestTap: Sync {
    /// `module` is the module the handle named (`None`: no such module), `handle`, `sc` and
    /// `payload` the request exactly as received, `status` the answer (0 or an AEE code).
    fn request(&self, module: Option<Module>, handle: u32, sc: Scalars, payload: &[u8], status: i32);

    /// The DSP opened `name`, which the service serves from a registered library image `image`
    /// (not from the host's files): a capture keeps it so a replay can serve the same bytes.
    /// Called before the open's answer; the default does nothing.
    fn image_opened(&self, name: &[u8], image: &[u8]) {
        let _ = (name, image);
    }
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct OpenIn {
    name_len: U32,
    err_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct OpenOut {
    handle: U32,
    dl_err: I32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct CloseIn {
    handle: U32,
    err_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct FopenWithEnvIn {
    env_len: U32,
    delim_len: U32,
    name_len: U32,
    mode_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct FopenIn {
    name_len: U32,
    mode_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct FreadIn {
    file: U32,
    buf_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct FreadOut {
    bytes_read: I32,
    eof: I32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct FseekIn {
    file: U32,
    offset: I32,
    whence: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct ExtPathIn {
    id: U32,
    path_len: U32,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Map64In {
    heapid: I32,
    ion_flags: U32,
    rflags: U32,
    pad: U32,
    vin: U64,
    len: I64,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Map64Out {
    vapps: U64,
    vadsp: U64,
}

#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
struct Unmap64In {
    vadsp: U64,
    len: I64,
}

fn shape(req: &Request<'_>, ins: usize, outs: usize) -> Result<(), RequestError> {
    if req.in_count() == ins && req.out_count() == outs {
        Ok(())
    } else {
        Err(RequestError::BadParm)
    }
}

/// Reads the fixed-size head of input `i`.
fn prim<T: FromBytes>(req: &Request<'_>, i: usize) -> Result<T, RequestError> {
    let bytes = req.input(i).ok_or(RequestError::BadParm)?;
    T::read_from_prefix(bytes).map(|(v, _)| v).map_err(|_| RequestError::BadParm)
}

fn u32_at(req: &Request<'_>, i: usize) -> Result<u32, RequestError> {
    prim::<U32>(req, i).map(|v| v.get())
}

/// Input `i` as a C string: exactly `declared` bytes (the length primIn announced), at least
/// one, NUL-terminated, with no other NUL. Returns it without the NUL.
fn string<'a>(req: &Request<'a>, i: usize, declared: u32) -> Result<&'a [u8], RequestError> {
    let b = req.input(i).ok_or(RequestError::BadParm)?;
    match b.split_last() {
        Some((0, body)) if b.len() == declared as usize && !body.contains(&0) => Ok(body),
        _ => Err(RequestError::BadParm),
    }
}

/// Output `j` must be at least `min` bytes.
fn out_at_least(req: &Request<'_>, j: usize, min: u32) -> Result<u32, RequestError> {
    match req.out_len(j) {
        Some(n) if n >= min => Ok(n),
        _ => Err(RequestError::BadParm),
    }
}

/// Read-only stdio modes only: `r` followed by any of `b`, `e`, `t`; a write or append mode
/// (`w`, `a`, `x`, `+`) is [`RequestError::ReadOnly`], anything else [`RequestError::BadParm`].
pub fn check_mode(mode: &[u8]) -> Result<(), RequestError> {
    if mode.iter().any(|c| matches!(c, b'w' | b'a' | b'x' | b'+')) {
        return Err(RequestError::ReadOnly);
    }
    match mode.split_first() {
        Some((b'r', rest)) if rest.iter().all(|c| matches!(c, b'b' | b'e' | b't')) => Ok(()),
        _ => Err(RequestError::BadParm),
    }
}

/// Printable-ASCII rendering of DSP-supplied bytes for logs (anything else as `\xNN`).
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &c in self.0 {
            if (0x20..0x7F).contains(&c) && c != b'\\' {
                fmt::Write::write_char(f, c as char)?;
            } else {
                write!(f, "\\x{c:02x}")?;
            }
        }
        Ok(())
    }
}

impl<'img, S: Syscalls> ReverseService<'img, S> {
    /// A service for the session on `rpc_fd` (used for apps_mem maps), under `policy`.
    pub fn new(sys: S, rpc_fd: Fd, policy: FilePolicy) -> Self {
        let limit = policy.max_handles();
        ReverseService {
            sys,
            rpc_fd: AtomicI32::new(rpc_fd.0),
            upstream: AtomicBool::new(false),
            policy,
            images: spin::Mutex::new(ImageTable::new()),
            session: spin::Mutex::new(Session { files: FileTable::new(limit), modules: ModuleTable::new(), maps: MapTable::new() }),
            metrics: Metrics::new(),
            stop: StopSignal::new(),
            tap: spin::Once::new(),
        }
    }

    /// Installs `tap` to see every request from now on; false if a tap was already installed
    /// (there is at most one, for the service's life).
    pub fn set_tap(&self, tap: &'img dyn RequestTap) -> bool {
        let mut installed = false;
        self.tap.call_once(|| {
            installed = true;
            tap
        });
        installed
    }

    /// The syscall seam.
    pub fn sys(&self) -> &S {
        &self.sys
    }

    /// Which FastRPC driver the session's fd belongs to; the listener's calls and apps_mem's
    /// maps use that driver's requests. A new service assumes the downstream driver;
    /// `ServedSession` sets the session board's.
    pub fn set_kernel_abi(&self, abi: KernelAbi) {
        self.upstream.store(abi == KernelAbi::Upstream, Ordering::SeqCst);
    }

    /// The FastRPC driver the service talks to.
    pub fn kernel_abi(&self) -> KernelAbi {
        if self.upstream.load(Ordering::SeqCst) {
            KernelAbi::Upstream
        } else {
            KernelAbi::DownstreamMsm
        }
    }

    fn dsp_mmap(&self, fd: Fd, flags: u32, len: u64) -> Result<u64, hexrpc_drivers::Error> {
        match self.kernel_abi() {
            KernelAbi::DownstreamMsm => adsprpc::mmap(&self.sys, fd, Fd(-1), flags, 0, len),
            KernelAbi::Upstream => upstream::mmap(&self.sys, FastrpcFd::from_raw(fd), flags, len),
        }
    }

    fn dsp_munmap(&self, fd: Fd, vadsp: u64, len: u64) -> Result<(), hexrpc_drivers::Error> {
        match self.kernel_abi() {
            KernelAbi::DownstreamMsm => adsprpc::munmap(&self.sys, fd, vadsp, len),
            KernelAbi::Upstream => upstream::munmap(&self.sys, FastrpcFd::from_raw(fd), vadsp, len),
        }
    }

    /// The FastRPC fd of the session.
    pub fn rpc_fd(&self) -> Fd {
        Fd(self.rpc_fd.load(Ordering::SeqCst))
    }

    /// Points the service at a new FastRPC fd (after a DSP restart and
    /// [`end_session`](Self::end_session)).
    pub fn set_rpc_fd(&self, fd: Fd) {
        self.rpc_fd.store(fd.0, Ordering::SeqCst);
    }

    /// The policy.
    pub fn policy(&self) -> &FilePolicy {
        &self.policy
    }

    /// The live counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The stop signal of the serving loop.
    pub fn stop_signal(&self) -> &StopSignal {
        &self.stop
    }

    /// Registers a library image, served from memory to an open of exactly `name`.
    pub fn register_image(&self, name: &str, bytes: impl Into<ImageBytes<'img>>) -> Result<(), ImageError> {
        self.images.lock().register(name, bytes)
    }

    /// Removes a library image: new opens of `name` fail; handles already open keep reading.
    pub fn unregister_image(&self, name: &str) -> Result<(), ImageError> {
        self.images.lock().unregister(name)
    }

    /// Number of library images registered now.
    pub fn image_count(&self) -> usize {
        self.images.lock().len()
    }

    /// Live session resources.
    pub fn session_counts(&self) -> SessionCounts {
        let s = self.session.lock();
        SessionCounts { files: s.files.open_count(), modules: s.modules.open_count(), maps: s.maps.len(), map_bytes: s.maps.used() }
    }

    /// Ends the session: closes every open file, releases every DSP map through the kernel
    /// (failures are logged, the books are cleared anyway: closing the FastRPC fd frees what
    /// remains) and forgets every module handle. Call it before closing the FastRPC fd. The
    /// books are taken under the lock; the closes and unmaps run after it is released. A file
    /// a request is reading at that moment is closed by that request when its read ends (it is
    /// counted here all the same); a map in flight is released by its request.
    pub fn end_session(&self) -> Released {
        let (files, busy, maps) = {
            let mut s = self.session.lock();
            let before = s.files.open_count();
            let files = s.files.take_all();
            let busy = before - files.len();
            let maps = s.maps.take_all();
            s.modules.clear();
            (files, busy, maps)
        };
        let mut rel = Released { files: files.len() + busy, maps: 0 };
        self.close_all(files);
        let fd = self.rpc_fd();
        for (vadsp, len) in maps {
            // No channel (fd -1): it was retired or closed, and its maps went with the file.
            if vadsp != 0 && fd.0 >= 0 {
                if let Err(e) = self.dsp_munmap(fd, vadsp, len) {
                    log::warn!("reverse: releasing DSP map {vadsp:#x}+{len:#x} failed: {e}");
                }
            }
            rel.maps += 1;
        }
        rel
    }

    /// Answers one request exactly as the listener does: `handle` and `sc` from the next2
    /// header, `payload` the request bytes received, `reply` the buffer the reply is packed
    /// into. Never panics; any refusal is an AEE status with an empty reply. No lock is held
    /// across a file operation or an ioctl (module docs of `session`).
    pub fn dispatch(&self, handle: u32, sc: Scalars, payload: &[u8], reply: &mut [u8]) -> Response {
        let module = if handle == REMOTECTL_HANDLE { Some(Module::RemoteCtl) } else { self.session.lock().modules.lookup(handle) };
        let (method, result) = match module {
            None => (sc.method() as u32, Err(RequestError::NoSuchModule)),
            Some(_) if payload.len() > self.policy.limits().max_reverse_request as usize => {
                (sc.method() as u32, Err(RequestError::BadSize))
            }
            Some(module) => match Request::parse(sc, payload) {
                Err(e) => (sc.method() as u32, Err(e)),
                Ok(req) => match module {
                    Module::RemoteCtl => (sc.method() as u32, self.remotectl(&req, reply)),
                    Module::AppsStd => self.apps_std(handle, &req, reply),
                    Module::AppsMem => (sc.method() as u32, self.apps_mem(&req, reply)),
                },
            },
        };
        self.metrics.request(module, method);
        self.metrics.outcome(result.map(|_| ()));
        if let Err(e) = result {
            log::debug!("reverse: handle {handle:#x} sc {sc} refused: {e}");
        }
        let response = Response::from(result);
        if let Some(tap) = self.tap.get() {
            tap.request(module, handle, sc, payload, response.status);
        }
        response
    }

    fn remotectl(&self, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        match req.scalars().method() {
            0 => {
                shape(req, 2, 2)?;
                let p: OpenIn = prim(req, 0)?;
                let name = string(req, 1, p.name_len.get())?;
                out_at_least(req, 0, 8)?;
                if req.out_len(1) != Some(p.err_len.get()) {
                    return Err(RequestError::BadParm);
                }
                let module = Module::by_name(name).ok_or(RequestError::NoSuchModule)?;
                let mut r = Reply::layout(req.out_lens(), reply)?;
                let handle = self.session.lock().modules.open(module)?;
                let out = OpenOut { handle: handle.into(), dl_err: 0.into() };
                r.write(0, out.as_bytes());
                r.write(1, &[]);
                Ok(r.finish())
            }
            1 => {
                shape(req, 1, 2)?;
                let p: CloseIn = prim(req, 0)?;
                out_at_least(req, 0, 4)?;
                if req.out_len(1) != Some(p.err_len.get()) {
                    return Err(RequestError::BadParm);
                }
                let mut r = Reply::layout(req.out_lens(), reply)?;
                let key = p.handle.get();
                // Closing a module closes the files opened through it.
                let files = {
                    let mut s = self.session.lock();
                    s.modules.close(key)?;
                    s.files.remove_owned_by(key)
                };
                self.close_all(files);
                r.write(0, &0i32.to_le_bytes());
                Ok(r.finish())
            }
            _ => Err(RequestError::Unsupported),
        }
    }

    fn apps_std(&self, owner: u32, req: &Request<'_>, reply: &mut [u8]) -> (u32, Result<usize, RequestError>) {
        let field = req.scalars().method();
        let id = if field == APPS_STD_EXTENDED {
            match req.input(0).filter(|b| b.len() >= 4).map(|_| u32_at(req, 0)) {
                Some(Ok(id @ m::STAT..=m::FOPEN_WITH_ENV_FD)) => id,
                Some(Ok(_)) | Some(Err(_)) | None => return (field as u32, Err(RequestError::BadParm)),
            }
        } else {
            field as u32
        };
        let r = match id {
            m::FOPEN => self.std_fopen(owner, req, reply, false),
            m::FOPEN_WITH_ENV => self.std_fopen(owner, req, reply, true),
            m::FCLOSE => self.std_fclose(owner, req),
            m::FREAD => self.std_fread(owner, req, reply),
            m::FTELL => self.std_ftell(owner, req, reply),
            m::FSEEK => self.std_fseek(owner, req),
            m::FLEN => self.std_flen(owner, req, reply),
            m::REWIND => self.std_rewind(owner, req),
            m::PRINT_STRING => self.std_print(req),
            m::FILE_EXISTS => self.std_file_exists(req, reply),
            m::STAT => self.std_stat(req, reply),
            _ => Err(RequestError::Unsupported),
        };
        (id, r)
    }

    fn open_source(&self, name: &[u8]) -> Result<Source<'img>, RequestError> {
        // The table's lock is released before the tap runs.
        let found = self.images.lock().find(name);
        if let Some(bytes) = found {
            if let Some(tap) = self.tap.get() {
                tap.image_opened(name, &bytes);
            }
            return Ok(Source::Image(bytes));
        }
        let (fd, st) = self.policy.open_host(&self.sys, name)?;
        Ok(Source::Host { fd, size: st.size })
    }

    fn close_source(&self, src: Source<'img>) {
        if let Source::Host { fd, .. } = src {
            let n = fd.raw().0;
            if let Err(e) = self.sys.close(fd) {
                log::warn!("reverse: closing host file {n} failed: {e}");
            }
        }
    }

    fn close_all(&self, files: ToClose<'img>) {
        for src in files {
            self.close_source(src);
        }
    }

    fn std_fopen(&self, owner: u32, req: &Request<'_>, reply: &mut [u8], with_env: bool) -> Result<usize, RequestError> {
        let (name, mode) = if with_env {
            shape(req, 5, 1)?;
            let p: FopenWithEnvIn = prim(req, 0)?;
            // The environment variable's name and the delimiter are validated, then ignored:
            // the search path is the policy's.
            string(req, 1, p.env_len.get())?;
            string(req, 2, p.delim_len.get())?;
            (string(req, 3, p.name_len.get())?, string(req, 4, p.mode_len.get())?)
        } else {
            shape(req, 3, 1)?;
            let p: FopenIn = prim(req, 0)?;
            (string(req, 1, p.name_len.get())?, string(req, 2, p.mode_len.get())?)
        };
        out_at_least(req, 0, 4)?;
        check_mode(mode)?;
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let src = self.open_source(name)?;
        // The module may have been closed while the file was opened: re-checked under the lock.
        let inserted = {
            let mut s = self.session.lock();
            match s.modules.lookup(owner) {
                Some(Module::AppsStd) => s.files.insert(src, owner),
                _ => Err((RequestError::NoSuchModule, src)),
            }
        };
        let handle = match inserted {
            Ok(h) => h,
            Err((e, src)) => {
                self.close_source(src);
                return Err(e);
            }
        };
        r.write(0, &handle.to_le_bytes());
        Ok(r.finish())
    }

    fn std_fclose(&self, owner: u32, req: &Request<'_>) -> Result<usize, RequestError> {
        shape(req, 1, 0)?;
        let handle = u32_at(req, 0)?;
        let src = self.session.lock().files.remove(handle, owner)?;
        if let Some(src) = src {
            self.close_source(src);
        }
        Ok(0)
    }

    fn std_fread(&self, owner: u32, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        shape(req, 1, 2)?;
        let p: FreadIn = prim(req, 0)?;
        let want = p.buf_len.get();
        out_at_least(req, 0, 8)?;
        if req.out_len(1) != Some(want) {
            return Err(RequestError::BadParm);
        }
        if want > self.policy.limits().max_reverse_request || want > i32::MAX as u32 {
            return Err(RequestError::BadSize);
        }
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let used = self.session.lock().files.begin(p.file.get(), owner)?;
        let (src, offset) = (used.src.clone(), used.offset);
        let budget = self.policy.limits().max_reverse_file_bytes.saturating_sub(used.served);
        let size = src.size();
        let allowed = (want as u64).min(budget) as usize;
        let result = if allowed == 0 && want != 0 && offset < size {
            Err(RequestError::FileBudget)
        } else {
            let mut failed = None;
            let n = r
                .fill(1, |region| {
                    let region = &mut region[..allowed];
                    match read_at(&self.sys, &src, offset, region) {
                        Ok(n) => n,
                        Err(e) => {
                            failed = Some(e);
                            0
                        }
                    }
                })
                .unwrap_or(0);
            match failed {
                Some(e) => Err(e),
                None => Ok(n),
            }
        };
        let n = *result.as_ref().unwrap_or(&0);
        // Re-validated under the lock: if the file was closed meanwhile the offset is not
        // applied, and the last user closes it.
        let closed = self.session.lock().files.finish(used, |f| {
            f.offset = offset.saturating_add(n as u64);
            f.served = f.served.saturating_add(n as u64);
        });
        if let Some(src) = closed {
            self.close_source(src);
        }
        let n = result?;
        self.metrics.served(n as u64);
        let eof = n < allowed || offset.saturating_add(n as u64) >= size;
        // `n <= want <= i32::MAX` (checked above).
        let out = FreadOut { bytes_read: (n as i32).into(), eof: (eof as i32).into() };
        r.write(0, out.as_bytes());
        Ok(r.finish())
    }

    fn std_ftell(&self, owner: u32, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        shape(req, 1, 1)?;
        let len = out_at_least(req, 0, 4)?;
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let pos = self.session.lock().files.get_mut(u32_at(req, 0)?, owner)?.offset;
        if len >= 8 {
            r.write(0, &pos.to_le_bytes());
        } else {
            let pos = i32::try_from(pos).map_err(|_| RequestError::BadSize)?;
            r.write(0, &pos.to_le_bytes());
        }
        Ok(r.finish())
    }

    fn std_fseek(&self, owner: u32, req: &Request<'_>) -> Result<usize, RequestError> {
        shape(req, 1, 0)?;
        let p: FseekIn = prim(req, 0)?;
        let mut s = self.session.lock();
        let file = s.files.get_mut(p.file.get(), owner)?;
        let base: i128 = match p.whence.get() {
            std_abi::APPS_STD_SEEK_SET => 0,
            std_abi::APPS_STD_SEEK_CUR => file.offset as i128,
            std_abi::APPS_STD_SEEK_END => file.src.size() as i128,
            _ => return Err(RequestError::BadParm),
        };
        let target = base + p.offset.get() as i128;
        if target < 0 || target > file.src.size() as i128 {
            return Err(RequestError::Seek);
        }
        file.offset = target as u64;
        Ok(0)
    }

    fn std_flen(&self, owner: u32, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        shape(req, 1, 1)?;
        out_at_least(req, 0, 8)?;
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let size = self.session.lock().files.get_mut(u32_at(req, 0)?, owner)?.src.size();
        r.write(0, &size.to_le_bytes());
        Ok(r.finish())
    }

    fn std_rewind(&self, owner: u32, req: &Request<'_>) -> Result<usize, RequestError> {
        shape(req, 1, 0)?;
        self.session.lock().files.get_mut(u32_at(req, 0)?, owner)?.offset = 0;
        Ok(0)
    }

    fn std_print(&self, req: &Request<'_>) -> Result<usize, RequestError> {
        shape(req, 2, 0)?;
        let text = string(req, 1, u32_at(req, 0)?)?;
        log::info!("dsp: {}", Escaped(&text[..text.len().min(512)]));
        Ok(0)
    }

    /// Looks `name` up as an open would, without keeping anything open: its size and, for a host
    /// file, its `fstat`.
    fn probe(&self, name: &[u8]) -> Result<(u64, Option<FileStat>), RequestError> {
        match self.open_source(name)? {
            Source::Image(b) => Ok((b.len() as u64, None)),
            src @ Source::Host { .. } => {
                let (st, size) = match &src {
                    Source::Host { fd, size } => (self.sys.fstat(fd.raw()), *size),
                    Source::Image(_) => (Err(hexrpc_drivers::Errno::EBADF), 0),
                };
                self.close_source(src);
                let st = st.map_err(|_| RequestError::NoSuchFile)?;
                Ok((size, Some(st)))
            }
        }
    }

    fn std_file_exists(&self, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        shape(req, 2, 1)?;
        let path = string(req, 1, u32_at(req, 0)?)?;
        out_at_least(req, 0, 1)?;
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let exists = match self.probe(path) {
            Ok(_) => true,
            Err(RequestError::NoSuchFile | RequestError::NotAllowed | RequestError::BadSize) => false,
            Err(e) => return Err(e),
        };
        r.write(0, &[exists as u8]);
        Ok(r.finish())
    }

    fn std_stat(&self, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        shape(req, 2, 1)?;
        let p: ExtPathIn = prim(req, 0)?;
        let path = string(req, 1, p.path_len.get())?;
        out_at_least(req, 0, core::mem::size_of::<std_abi::apps_std_STAT>() as u32)?;
        let mut r = Reply::layout(req.out_lens(), reply)?;
        let st = match self.probe(path)? {
            (size, None) => std_abi::apps_std_STAT { mode: FileStat::S_IFREG | 0o444, nlink: 1, size, ..Default::default() },
            (_, Some(st)) => std_abi::apps_std_STAT {
                tsz: 0,
                dev: st.dev,
                ino: st.ino,
                mode: st.mode,
                nlink: st.nlink,
                rdev: st.rdev,
                size: st.size,
                atime: st.atime.0,
                atimensec: st.atime.1,
                mtime: st.mtime.0,
                mtimensec: st.mtime.1,
                ctime: st.ctime.0,
                ctimensec: st.ctime.1,
            },
        };
        r.write(0, st.as_bytes());
        Ok(r.finish())
    }

    fn apps_mem(&self, req: &Request<'_>, reply: &mut [u8]) -> Result<usize, RequestError> {
        match req.scalars().method() as u32 {
            std_abi::mem_method::REQUEST_MAP64 => {
                shape(req, 1, 1)?;
                let p: Map64In = prim(req, 0)?;
                out_at_least(req, 0, 16)?;
                let len = u64::try_from(p.len.get()).ok().filter(|&l| l != 0).ok_or(RequestError::BadParm)?;
                let flags = p.rflags.get();
                if REFUSED_MAP_FLAGS.contains(&flags) {
                    log::warn!("reverse: apps_mem map with heap flag {flags:#x} refused (the driver would keep it outside the session)");
                    return Err(RequestError::MapFlags);
                }
                if !ALLOWED_MAP_FLAGS.contains(&flags) {
                    return Err(RequestError::Unsupported);
                }
                let mut r = Reply::layout(req.out_lens(), reply)?;
                let reservation = self.session.lock().maps.reserve(len, self.policy.limits().max_dsp_map_bytes)?;
                let fd = self.rpc_fd();
                let made = self.dsp_mmap(fd, p.rflags.get(), len);
                let mut s = self.session.lock();
                let vadsp = match made {
                    Ok(v) => v,
                    Err(e) => {
                        s.maps.cancel(reservation);
                        drop(s);
                        log::warn!("reverse: DSP map of {len:#x} bytes refused: {e}");
                        return Err(RequestError::Mmap);
                    }
                };
                // Charged even when the kernel did not report the address (kernel-abi.md 2.9):
                // the memory exists until the session's fd is closed.
                if !s.maps.commit(reservation, vadsp) {
                    // The session ended while the map was made: release it on the fd that made it.
                    drop(s);
                    if vadsp != 0 && fd.0 >= 0 {
                        if let Err(e) = self.dsp_munmap(fd, vadsp, len) {
                            log::warn!("reverse: releasing a map made across session end failed: {e}");
                        }
                    }
                    return Err(RequestError::Mmap);
                }
                drop(s);
                if vadsp == 0 && self.kernel_abi() == KernelAbi::Upstream {
                    // The upstream driver always writes the DSP address back (`fastrpc_req_mmap`):
                    // a 0 there means no usable map.
                    return Err(RequestError::Mmap);
                }
                // Downstream, a 0 is what a working map looks like on the comma three: the AGNOS
                // driver (`fastrpc_internal_mmap`) keeps the DSP address to itself and copies our
                // own input struct back, whose `vaddrout` the drivers' `mmap` pre-sets to 0 (so a
                // stale value can never be echoed back as an address). The kernel has already
                // told the DSP about the pages (its own mmap message, which the DSP answered),
                // so the map exists and the requester's heap has grown; answering a failure would
                // only make the DSP give up on memory it has. tinygrad's listener answers
                // success with the same 0 on that kernel. The map stays charged until the
                // channel closes (an unmap by address cannot name it).
                let out = Map64Out { vapps: 0.into(), vadsp: vadsp.into() };
                r.write(0, out.as_bytes());
                Ok(r.finish())
            }
            std_abi::mem_method::REQUEST_UNMAP64 => {
                shape(req, 1, 0)?;
                let p: Unmap64In = prim(req, 0)?;
                let len = u64::try_from(p.len.get()).ok().filter(|&l| l != 0).ok_or(RequestError::BadParm)?;
                let vadsp = p.vadsp.get();
                let taken = self.session.lock().maps.take(vadsp, len).ok_or(RequestError::NoSuchMap)?;
                if let Err(e) = self.dsp_munmap(self.rpc_fd(), vadsp, len) {
                    self.session.lock().maps.restore(taken, vadsp);
                    log::warn!("reverse: DSP unmap refused: {e}");
                    return Err(RequestError::Mmap);
                }
                Ok(0)
            }
            _ => Err(RequestError::Unsupported),
        }
    }
}

/// Reads at `offset` of `src` into `region` (the whole region unless end of file).
fn read_at<S: Syscalls + ?Sized>(sys: &S, src: &SourceView<'_>, offset: u64, region: &mut [u8]) -> Result<usize, RequestError> {
    match src {
        SourceView::Image(bytes) => {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
            let n = region.len().min(bytes.len() - start);
            region[..n].copy_from_slice(&bytes[start..start + n]);
            Ok(n)
        }
        &SourceView::Host { fd, .. } => {
            let mut done = 0usize;
            while done < region.len() {
                let at = offset.checked_add(done as u64).ok_or(RequestError::Read)?;
                match sys.pread(fd, &mut region[done..], at) {
                    Ok(0) => break,
                    // A seam answering more than asked is clamped.
                    Ok(n) => done += n.min(region.len() - done),
                    Err(_) => return Err(RequestError::Read),
                }
            }
            Ok(done)
        }
    }
}

impl<S: Syscalls> Drop for ReverseService<'_, S> {
    fn drop(&mut self) {
        let rel = self.end_session();
        if rel != Released::default() {
            log::debug!("reverse: session end released {} files and {} maps", rel.files, rel.maps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        for ok in [&b"r"[..], b"rb", b"re", b"rbe", b"rt"] {
            assert_eq!(check_mode(ok), Ok(()));
        }
        for w in [&b"w"[..], b"rb+", b"a", b"r+", b"wx", b"ra"] {
            assert_eq!(check_mode(w), Err(RequestError::ReadOnly));
        }
        for bad in [&b""[..], b"b", b"rz", b"R"] {
            assert_eq!(check_mode(bad), Err(RequestError::BadParm));
        }
    }

    #[test]
    fn escaping() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(Escaped(b"ok \\ \n\x7f").to_string(), "ok \\x5c \\x0a\\x7f");
    }
}
