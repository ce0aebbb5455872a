//! Linux's real FastRPC driver, in user space.
//!
//! # What runs
//! `drivers/misc/fastrpc.c` of Linux 6.1 ([`KERNEL_VERSION`], from Debian's `linux-source-6.1`
//! package [`PACKAGE_VERSION`]) is compiled unchanged by `build.rs`: the file is extracted from
//! `/usr/src/linux-source-6.1.tar.xz` (or `$HEXRPC_LINUX_SOURCE`) into the build directory at
//! build time and never committed. The version is pinned by the tarball: the Makefile's
//! VERSION/PATCHLEVEL/SUBLEVEL become [`KERNEL_VERSION`], and a different tarball rebuilds.
//!
//! # What is shim
//! Everything the driver calls into is ours: `c/kshim.h` declares the kernel interfaces the
//! driver uses and `c/kshim.c` with its siblings `c/kshim_*.c` (one per concern, listed in
//! `c/kshim.c`) implements them on pthreads (allocation with live counts, plain mutexes for
//! spinlocks and mutexes, atomic krefs, completions with a stand-in for signals
//! ([`interrupt`]), one worker thread for `schedule_work`, `current` = the calling thread,
//! checked user copies through `process_vm_readv`/`process_vm_writev`, coherent DMA memory with
//! fake 32-bit bus addresses ([`bus_to_host`]), dma-bufs resolved by the [`Host`], a device tree
//! with one CDSP node and `sessions` compute context banks, misc device nodes). The C boundary
//! is `c/hx_host.h`; this crate wraps it.
//!
//! A [`Channel`] is one probed rpmsg channel: opening `"fastrpc-cdsp"` or
//! `"fastrpc-cdsp-secure"` gives a [`File`], [`Channel::ioctl`] runs the driver's ioctl, every
//! message the driver sends reaches [`Host::send`] and the answers come back through
//! [`Channel::receive`] (that is where a simulated DSP plugs in).
//!
//! # Looking inside
//! The driver's structures are private to its file, so `c/introspect.c` includes it and adds
//! read-only views of its lists, walked under the driver's own `fl->lock`: an open file's
//! `fl->maps`, `fl->pending`, `fl->mmaps` and `fl->init_mem` ([`Channel::file_state`],
//! [`Channel::file_maps`], ...) and the users whose file was released but which the driver
//! never freed ([`Channel::leaked`]; in 6.1 a context that was interrupted, timed out or in
//! flight at `fastrpc_rpmsg_remove` keeps a reference on its user, so `fastrpc_user_free`
//! never runs).
//!
//! # Not faithful
//! * The driver's exported buffers cannot become descriptors of this process: `dma_buf_fd`
//!   fails with `-ENFILE`, so `FASTRPC_IOCTL_ALLOC_DMA_BUFF` ends with the driver's `-EINVAL`
//!   (after it freed the buffer). `dma_mmap_coherent` fails with `-ENXIO` (only reachable by
//!   mmap of such a buffer).
//! * No preemption, no interrupt context, no memory protection between "kernel" and "user":
//!   spinlocks may sleep, the rpmsg callback runs on the thread calling [`Channel::receive`], and
//!   the driver's kernel-side `memcpy` of user pointers (its `kernel` invocations) just works.
//! * Signals are only modelled for threads blocked in `wait_for_completion_interruptible`.
//! * No secure channel manager (the device tree has no `qcom,vmids`).
//!
//! # unsafe
//! This crate is an FFI boundary, so `#![forbid(unsafe_code)]` is not possible here; every
//! unsafe block says why it is sound, and the public API is safe except [`Channel::ioctl`],
//! whose argument has the contract of `ioctl(2)`.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_ulonglong, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The kernel version the driver was taken from ("6.1.192").
pub const KERNEL_VERSION: &str = env!("HEXRPC_LINUX_KERNEL");
/// The Debian package version of the kernel source ("6.1.192-3"), "unknown" when the tarball
/// was not installed by dpkg.
pub const PACKAGE_VERSION: &str = env!("HEXRPC_LINUX_PACKAGE");

const EIO: i32 = 5;
const EINVAL: i32 = 22;

/// What the driver needs from its surroundings. Every method may be called on any thread,
/// including the shim's worker thread; none may call back into the [`Channel`] synchronously
/// (answer the DSP's messages from another thread).
pub trait Host: Send + Sync + 'static {
    /// `rpmsg_send`: one message (the driver's 40-byte `fastrpc_msg`) to the DSP. Must not wait
    /// for the answer. `Err(negative errno)`.
    fn send(&self, msg: &[u8]) -> Result<(), i32>;
    /// `dma_buf_get(fd)` for a descriptor of the calling thread: the buffer behind it (one
    /// reference, given back by [`Host::dmabuf_put`]). `Err(-EBADF)` for no such descriptor,
    /// `Err(-EINVAL)` for one that is not a dma-buf.
    fn dmabuf_get(&self, fd: i32) -> Result<DmaBuf, i32>;
    /// Gives back one reference taken by [`Host::dmabuf_get`].
    fn dmabuf_put(&self, key: u64);
    /// `vma_lookup(current->mm, addr)`: `[start, end)` of the user mapping containing `addr`.
    fn vma_lookup(&self, addr: u64) -> Option<(u64, u64)>;
}

/// A dma-buf as the host resolved it.
#[derive(Debug, Clone, Copy)]
pub struct DmaBuf {
    /// The host's key for the buffer: the same for every descriptor of one buffer, never 0.
    pub key: u64,
    /// Its size in bytes.
    pub len: u64,
    /// Where its bytes are mapped for the kernel's use (stays valid while a reference is held).
    pub vaddr: *mut u8,
}

/// The channel's device tree.
#[derive(Debug, Clone)]
pub struct Config {
    /// Compute context banks (sessions), 1..=13.
    pub sessions: u32,
    /// The CDSP node carries `qcom,non-secure-domain`.
    pub non_secure: bool,
    /// How long the driver's 10 s kernel-message timeout (`wait_for_completion_timeout(..,
    /// 10 * HZ)`) lasts in real time; `None`: 10 s. A test bench shortens it so that a hung
    /// kernel message fails in milliseconds; the driver's logic is unchanged.
    pub kernel_timeout: Option<std::time::Duration>,
}

/// What the driver holds right now (see `c/hx_host.h`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Live invoke contexts (entries of the channel's context idr).
    pub contexts: i64,
    /// Live dma-buf attachments (one per `fastrpc_map`).
    pub attachments: i64,
    /// dma-buf references held (gets minus puts).
    pub dmabufs: i64,
    /// Live coherent DMA buffers (payloads, init memory, MMAP pages).
    pub coherent: i64,
    /// Files opened whose `fastrpc_user` the driver has not freed yet (observed at its kfree).
    pub users: i64,
    /// kzalloc/kcalloc/devm allocations not yet freed, process-wide.
    pub allocations: i64,
    /// Messages sent to the DSP.
    pub sent: i64,
    /// Answers the driver accepted.
    pub received: i64,
    /// Users whose file was released but which the driver has not freed yet (right after a
    /// release this includes users only the deferred context puts still hold: read it from
    /// [`Channel::settled_counts`], or use [`Channel::leaked`]).
    pub leaked_users: i64,
}

/// One entry of a user's `fl->maps` (the driver's `struct fastrpc_map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapInfo {
    /// `map->fd`: the descriptor number the map was made for.
    pub fd: i32,
    /// The [`Host`]'s key ([`DmaBuf::key`]) of `map->buf`; `None` when the map holds no live
    /// imported buffer (a map being freed right now, `refs == 0`).
    pub key: Option<u64>,
    /// `map->len`.
    pub len: u64,
    /// `map->size`.
    pub size: u64,
    /// `map->phys`: the bus address (session id in bits 32 and up).
    pub phys: u64,
    /// `map->va`: where the buffer's bytes are mapped for the kernel.
    pub va: u64,
    /// `map->raddr`: the DSP address of a `MEM_MAP`, else 0.
    pub raddr: u64,
    /// `map->refcount`.
    pub refs: u32,
    /// `map->attr`.
    pub attr: u32,
}

/// The lists of one `struct fastrpc_user` (an open file's, or a leaked one's).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserState {
    /// Entries of `fl->pending`: invoke contexts still on the file.
    pub pending: usize,
    /// `fl->maps`, in list order (oldest first).
    pub maps: Vec<MapInfo>,
    /// Entries of `fl->mmaps` (`FASTRPC_IOCTL_MMAP` buffers).
    pub mmaps: usize,
    /// `fl->init_mem` is set (a process made by `INIT_CREATE`).
    pub init_mem: bool,
    /// `fl->tgid`: the process that opened the file.
    pub tgid: i32,
}

/// A user whose file was released but which the driver has not freed ([`Channel::leaked`]).
pub type LeakedUser = UserState;

#[repr(C)]
struct HxHostOps {
    ctx: *mut c_void,
    send: unsafe extern "C" fn(*mut c_void, *const c_void, c_int) -> c_int,
    dmabuf_get: unsafe extern "C" fn(*mut c_void, c_int, *mut c_ulonglong, *mut c_ulonglong, *mut *mut c_void) -> c_int,
    dmabuf_put: unsafe extern "C" fn(*mut c_void, c_ulonglong),
    vma_lookup: unsafe extern "C" fn(*mut c_void, c_ulonglong, *mut c_ulonglong, *mut c_ulonglong) -> c_int,
}

#[repr(C)]
struct HxConfig {
    sessions: c_uint,
    non_secure: c_int,
    kernel_timeout_ms: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct HxCounts {
    contexts: c_long,
    attachments: c_long,
    dmabufs: c_long,
    coherent: c_long,
    users: c_long,
    allocations: c_long,
    sent: c_long,
    received: c_long,
}

#[repr(C)]
struct HxMapInfo {
    fd: c_int,
    attr: c_uint,
    refs: c_int,
    has_key: c_int,
    key: c_ulonglong,
    phys: c_ulonglong,
    va: c_ulonglong,
    len: c_ulonglong,
    size: c_ulonglong,
    raddr: c_ulonglong,
}

#[repr(C)]
struct HxUserInfo {
    pending: c_long,
    mmaps: c_long,
    maps: c_long,
    init_mem: c_int,
    tgid: c_int,
}

type HxUserVisit = unsafe extern "C" fn(*mut c_void, *const HxUserInfo, *const HxMapInfo, c_long);

#[repr(C)]
struct HxInstance {
    _opaque: [u8; 0],
}

extern "C" {
    fn hx_create(ops: *const HxHostOps, cfg: *const HxConfig, err: *mut c_int) -> *mut HxInstance;
    fn hx_coherent(bytes: *mut c_ulonglong) -> c_long;
    fn hx_remove(inst: *mut HxInstance);
    fn hx_probe(inst: *mut HxInstance) -> c_int;
    fn hx_destroy(inst: *mut HxInstance);
    fn hx_open(inst: *mut HxInstance, name: *const c_char, file: *mut *mut c_void) -> c_int;
    fn hx_release(inst: *mut HxInstance, file: *mut c_void) -> c_int;
    fn hx_ioctl(inst: *mut HxInstance, file: *mut c_void, cmd: c_uint, arg: c_ulong) -> c_long;
    fn hx_receive(inst: *mut HxInstance, data: *const c_void, len: c_int) -> c_int;
    fn hx_bus_to_host(bus: c_ulonglong, len: c_ulonglong) -> *mut c_void;
    fn hx_interrupt(tid: c_int) -> c_int;
    fn hx_counts(inst: *mut HxInstance, out: *mut HxCounts);
    fn hx_flush_work();
    fn hx_settle(inst: *mut HxInstance);
    fn hx_kernel_version() -> *const c_char;
    fn hx_file_info(inst: *mut HxInstance, file: *mut c_void, visit: HxUserVisit, arg: *mut c_void) -> c_int;
    fn hx_leaked(inst: *mut HxInstance, visit: HxUserVisit, arg: *mut c_void) -> c_long;
    fn hx_leaked_users(inst: *mut HxInstance) -> c_long;
}

type HostBox = Arc<dyn Host>;

fn errno(e: i32) -> c_int {
    match e {
        0 => -EIO,
        e if e < 0 => e,
        e => -e,
    }
}

/// # Safety
/// `ctx` must be the `HostBox` pointer a live [`Channel`] passed as `ops.ctx`.
unsafe fn host<'a>(ctx: *mut c_void) -> &'a HostBox {
    // SAFETY: the caller guarantees ctx points to the HostBox the Channel keeps alive.
    unsafe { &*(ctx as *const HostBox) }
}

unsafe extern "C" fn tr_send(ctx: *mut c_void, data: *const c_void, len: c_int) -> c_int {
    // SAFETY: the shim passes back the ctx of the channel's ops.
    let host = unsafe { host(ctx) };
    if data.is_null() || len < 0 {
        return -EINVAL;
    }
    // SAFETY: rpmsg_send's data is len readable bytes for the duration of the call.
    let msg = unsafe { std::slice::from_raw_parts(data as *const u8, len as usize) };
    match catch_unwind(AssertUnwindSafe(|| host.send(msg))) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => errno(e),
        Err(_) => -EIO,
    }
}

unsafe extern "C" fn tr_dmabuf_get(
    ctx: *mut c_void,
    fd: c_int,
    key: *mut c_ulonglong,
    size: *mut c_ulonglong,
    vaddr: *mut *mut c_void,
) -> c_int {
    // SAFETY: the shim passes back the ctx of the channel's ops.
    let host = unsafe { host(ctx) };
    match catch_unwind(AssertUnwindSafe(|| host.dmabuf_get(fd))) {
        Ok(Ok(b)) if b.key != 0 => {
            // SAFETY: the shim passes three valid out pointers.
            unsafe {
                *key = b.key;
                *size = b.len;
                *vaddr = b.vaddr as *mut c_void;
            }
            0
        }
        Ok(Ok(_)) => -EINVAL,
        Ok(Err(e)) => errno(e),
        Err(_) => -EIO,
    }
}

unsafe extern "C" fn tr_dmabuf_put(ctx: *mut c_void, key: c_ulonglong) {
    // SAFETY: the shim passes back the ctx of the channel's ops.
    let host = unsafe { host(ctx) };
    let _ = catch_unwind(AssertUnwindSafe(|| host.dmabuf_put(key)));
}

unsafe extern "C" fn tr_vma_lookup(ctx: *mut c_void, addr: c_ulonglong, start: *mut c_ulonglong, end: *mut c_ulonglong) -> c_int {
    // SAFETY: the shim passes back the ctx of the channel's ops.
    let host = unsafe { host(ctx) };
    match catch_unwind(AssertUnwindSafe(|| host.vma_lookup(addr))) {
        Ok(Some((s, e))) => {
            // SAFETY: the shim passes two valid out pointers.
            unsafe {
                *start = s;
                *end = e;
            }
            1
        }
        _ => 0,
    }
}

fn count(n: c_long) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// The visitor of `hx_file_info`/`hx_leaked`: appends one [`UserState`] to the `Vec` at `arg`.
unsafe extern "C" fn tr_visit(arg: *mut c_void, user: *const HxUserInfo, maps: *const HxMapInfo, n: c_long) {
    // SAFETY: arg is the &mut Vec<UserState> the caller passed for this call only, and user is
    // valid for the call.
    let (out, u) = unsafe { (&mut *(arg as *mut Vec<UserState>), &*user) };
    let maps: &[HxMapInfo] = if maps.is_null() || n <= 0 {
        &[]
    } else {
        // SAFETY: the C side passes n initialized entries, valid for the call.
        unsafe { std::slice::from_raw_parts(maps, count(n)) }
    };
    out.push(UserState {
        pending: count(u.pending),
        maps: maps
            .iter()
            .map(|m| MapInfo {
                fd: m.fd,
                key: (m.has_key != 0).then_some(m.key),
                len: m.len,
                size: m.size,
                phys: m.phys,
                va: m.va,
                raddr: m.raddr,
                refs: u32::try_from(m.refs).unwrap_or(0),
                attr: m.attr,
            })
            .collect(),
        mmaps: count(u.mmaps),
        init_mem: u.init_mem != 0,
        tgid: u.tgid,
    });
}

/// One FastRPC channel (a probed CDSP rpmsg device) of the real driver.
pub struct Channel {
    inst: *mut HxInstance,
    host: *mut HostBox,
}

// SAFETY: the shim's entry points are thread-safe (the driver's own locking plus the shim's);
// the host box is only read, and Host is Send + Sync.
unsafe impl Send for Channel {}
// SAFETY: as above; every method takes &self and the C side synchronizes.
unsafe impl Sync for Channel {}

/// A file open on a node of a [`Channel`] (the driver's `struct file`). Give it back with
/// [`Channel::release`]; dropping it without release leaks it, like a never-closed descriptor.
#[derive(Debug)]
pub struct File {
    ptr: *mut c_void,
}

// SAFETY: the pointer is an opaque handle; the driver synchronizes access to the file's state.
unsafe impl Send for File {}
// SAFETY: as above.
unsafe impl Sync for File {}

impl File {
    /// An identity for the open file (the driver's `struct file` address), stable until release.
    pub fn id(&self) -> usize {
        self.ptr as usize
    }
}

impl Channel {
    /// Module init (once per process), then the rpmsg driver's probe of a new CDSP channel.
    /// `Err(-EINVAL)` for a configuration outside 1..=13 sessions, else the probe's error.
    pub fn probe(host: Arc<dyn Host>, cfg: &Config) -> Result<Channel, i32> {
        let boxed: *mut HostBox = Box::into_raw(Box::new(host));
        let ops = HxHostOps {
            ctx: boxed as *mut c_void,
            send: tr_send,
            dmabuf_get: tr_dmabuf_get,
            dmabuf_put: tr_dmabuf_put,
            vma_lookup: tr_vma_lookup,
        };
        let kernel_timeout_ms = cfg.kernel_timeout.map_or(0, |d| c_uint::try_from(d.as_millis().max(1)).unwrap_or(c_uint::MAX));
        let c = HxConfig { sessions: cfg.sessions, non_secure: c_int::from(cfg.non_secure), kernel_timeout_ms };
        let mut err: c_int = 0;
        // SAFETY: ops and cfg are valid for the call (the shim copies them); ops.ctx stays valid
        // until the Channel is dropped.
        let inst = unsafe { hx_create(&ops, &c, &mut err) };
        if inst.is_null() {
            // SAFETY: no instance holds the box; it came from Box::into_raw above.
            drop(unsafe { Box::from_raw(boxed) });
            return Err(errno(err));
        }
        Ok(Channel { inst, host: boxed })
    }

    /// `fastrpc_rpmsg_remove`: the DSP went down. Calls in flight end with `-EPIPE`, the nodes
    /// disappear (open gives `-ENODEV`), open files stay until released.
    pub fn remove(&self) {
        // SAFETY: inst is live while self is.
        unsafe { hx_remove(self.inst) }
    }

    /// The DSP is back: probe the channel again (`-EBUSY` when it is probed).
    pub fn reprobe(&self) -> Result<(), i32> {
        // SAFETY: inst is live while self is.
        match unsafe { hx_probe(self.inst) } {
            0 => Ok(()),
            e => Err(errno(e)),
        }
    }

    /// Opens a node ("fastrpc-cdsp", "fastrpc-cdsp-secure"); `Err(-ENODEV)` when it is not
    /// registered.
    pub fn open(&self, node: &str) -> Result<File, i32> {
        let name = CString::new(node).map_err(|_| -EINVAL)?;
        let mut file: *mut c_void = std::ptr::null_mut();
        // SAFETY: inst is live, name is a NUL-terminated string, file an out pointer.
        match unsafe { hx_open(self.inst, name.as_ptr(), &mut file) } {
            0 => Ok(File { ptr: file }),
            e => Err(errno(e)),
        }
    }

    /// The driver's `unlocked_ioctl(file, cmd, arg)`: its raw return (0, a negative errno,
    /// -512 for -ERESTARTSYS).
    ///
    /// # Safety
    /// `arg` must satisfy the request's contract (as for `ioctl(2)`): the driver reads and
    /// writes user memory through it, checked by the shim against unmapped addresses but not
    /// against memory the caller does not own. `file` must come from this channel.
    pub unsafe fn ioctl(&self, file: &File, cmd: u32, arg: *mut c_void) -> i64 {
        // SAFETY: inst is live, file is an open file of it (caller), arg per the contract.
        #[allow(clippy::useless_conversion)] // c_long is 32 bits on some targets
        i64::from(unsafe { hx_ioctl(self.inst, file.ptr, cmd, arg as c_ulong) })
    }

    /// The file's last close (`fops->release`; the driver asks the DSP to release the process
    /// and waits up to 10 s for the answer).
    pub fn release(&self, file: File) -> i32 {
        // SAFETY: inst is live and file an open file of it, consumed here.
        unsafe { hx_release(self.inst, file.ptr) }
    }

    /// One answer from the DSP (`fastrpc_rpmsg_callback`): 0, or the driver's error
    /// (`-ENOENT` for an unknown context, `-EINVAL` for a short message, `-ENODEV` when the
    /// channel is removed).
    pub fn receive(&self, rsp: &[u8]) -> i32 {
        let len = c_int::try_from(rsp.len()).unwrap_or(c_int::MAX);
        // SAFETY: inst is live; rsp is len readable bytes (the driver only reads them).
        unsafe { hx_receive(self.inst, rsp.as_ptr() as *const c_void, len) }
    }

    /// What the driver holds right now (deferred context puts may still be queued).
    pub fn counts(&self) -> Counts {
        let mut c = HxCounts::default();
        // SAFETY: inst is live, c is a valid out struct.
        unsafe { hx_counts(self.inst, &mut c) };
        #[allow(clippy::unnecessary_cast)] // c_long is 32 bits on some targets
        Counts {
            contexts: c.contexts as i64,
            attachments: c.attachments as i64,
            dmabufs: c.dmabufs as i64,
            coherent: c.coherent as i64,
            users: c.users as i64,
            allocations: c.allocations as i64,
            sent: c.sent as i64,
            received: c.received as i64,
            // SAFETY: inst is live; a lookup in the shim's users table.
            leaked_users: unsafe { hx_leaked_users(self.inst) } as i64,
        }
    }

    /// The driver's lists of an open file's `fastrpc_user`, read under its `fl->lock`.
    /// Panics when the driver runs out of memory for the copy.
    pub fn file_state(&self, file: &File) -> UserState {
        let mut out: Vec<UserState> = Vec::with_capacity(1);
        // SAFETY: inst is live, file an open file (its user lives until release, which takes
        // the File by value); the visitor gets &mut out for this call only.
        let r = unsafe { hx_file_info(self.inst, file.ptr, tr_visit, &mut out as *mut Vec<UserState> as *mut c_void) };
        assert_eq!(r, 0, "hx_file_info");
        out.pop().expect("one visit")
    }

    /// The file's `fl->maps` (oldest first).
    pub fn file_maps(&self, file: &File) -> Vec<MapInfo> {
        self.file_state(file).maps
    }

    /// How many invoke contexts are on the file's `fl->pending`.
    pub fn file_pending(&self, file: &File) -> usize {
        self.file_state(file).pending
    }

    /// How many buffers are on the file's `fl->mmaps`.
    pub fn file_mmaps(&self, file: &File) -> usize {
        self.file_state(file).mmaps
    }

    /// Whether the file's `fl->init_mem` is set.
    pub fn file_has_init_mem(&self, file: &File) -> bool {
        self.file_state(file).init_mem
    }

    /// The users of this channel whose file was released ([`Channel::release`] returned) but
    /// which the driver has not freed, oldest open first, with what they still hold.
    ///
    /// Settles first, like [`Channel::settled_counts`]: a release's own last context put is
    /// deferred to the shim's worker, and until it ran the user is still held; a user the
    /// queued work would free is not a leak. Must not be called from a [`Host`] method.
    /// Each user is pinned with a reference while it is read; should that turn out to be the
    /// last one, the driver's free runs on the shim's worker ([`flush_work`]), never here.
    /// Panics when the driver runs out of memory for the copy.
    pub fn leaked(&self) -> Vec<LeakedUser> {
        let mut out: Vec<UserState> = Vec::new();
        // SAFETY: inst is live while self is.
        unsafe { hx_settle(self.inst) };
        // SAFETY: inst is live; the visitor gets &mut out for this call only.
        let r = unsafe { hx_leaked(self.inst, tr_visit, &mut out as *mut Vec<UserState> as *mut c_void) };
        assert!(r >= 0, "hx_leaked: {r}");
        out
    }

    /// [`Channel::counts`] once the answers being delivered right now are through the driver's
    /// callback and the shim's worker ran every queued work (the driver's deferred context
    /// puts). Must not be called from a [`Host`] method.
    pub fn settled_counts(&self) -> Counts {
        // SAFETY: inst is live while self is.
        unsafe { hx_settle(self.inst) };
        self.counts()
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: inst is live until hx_destroy below.
        unsafe { hx_remove(self.inst) };
        let c = self.settled_counts();
        let held = c.contexts != 0 || c.users != 0 || c.attachments != 0 || c.dmabufs != 0 || c.coherent != 0;
        // SAFETY: inst is live; after this call it is not used again. hx_destroy keeps the
        // instance when the driver still holds objects of it (see `held`).
        unsafe { hx_destroy(self.inst) };
        if !held {
            // SAFETY: the instance is gone, nothing refers to the box any more.
            drop(unsafe { Box::from_raw(self.host) });
        }
        // else: the driver still holds objects that may call the host (a leaked context or
        // user of this kernel version); the host stays alive with them.
    }
}

/// Live coherent DMA buffers of every channel in this process (`dma_alloc_coherent`: invoke
/// payloads, a process's init memory, MMAP pages, whatever leaked users still hold): their
/// number and bytes. Each is an anonymous mapping of its own, so a footprint measurement can
/// tell the simulated kernel's memory from the process's.
pub fn coherent() -> (usize, u64) {
    let mut bytes: c_ulonglong = 0;
    // SAFETY: `bytes` is a live out-parameter; the call only reads counters.
    let n = unsafe { hx_coherent(&mut bytes) };
    (usize::try_from(n).unwrap_or(0), bytes)
}

/// The host address of bus range `[bus, bus + len)` (any DMA address the shim handed out; the
/// session id bits above bit 31 are ignored), `None` when it is not inside one live range.
pub fn bus_to_host(bus: u64, len: u64) -> Option<*mut u8> {
    // SAFETY: a pure lookup in the shim's table.
    let p = unsafe { hx_bus_to_host(bus, len) };
    (!p.is_null()).then_some(p as *mut u8)
}

/// A signal for thread `tid`: true when it was blocked in `wait_for_completion_interruptible`
/// (the wait then ends with -ERESTARTSYS), false otherwise (nothing happens).
pub fn interrupt(tid: i32) -> bool {
    // SAFETY: a lookup in the shim's waiter list.
    unsafe { hx_interrupt(tid) != 0 }
}

/// Waits until the shim's worker thread has run every queued work (the driver's deferred
/// context puts). Must not be called from a [`Host`] method.
pub fn flush_work() {
    // SAFETY: no arguments; waits on the shim's work queue.
    unsafe { hx_flush_work() }
}

/// The kernel version compiled into the C side (the same as [`KERNEL_VERSION`]).
pub fn c_kernel_version() -> &'static str {
    // SAFETY: hx_kernel_version returns a static NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(hx_kernel_version()) };
    s.to_str().unwrap_or("unknown")
}
