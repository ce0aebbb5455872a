//! Measuring instruments for benchmarks and the CLI's `hexrpc bench`: a syscall seam whose ioctl
//! returns at once (what hexrpc itself costs, without a kernel), and a counting global allocator
//! (heap allocations per launch).

use core::ffi::c_void;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use hexrpc_drivers::{Errno, Fd, RefusingSys};

/// A seam whose `ioctl` succeeds at once and counts its calls; every other call fails with
/// `ENOSYS`. It measures what the layers above the seam add. It touches no argument, except that
/// an `INVOKE_ATTRS` of a program (launch ABI method 5) gets the status a program that ran all
/// its records writes (magic, K done, no failed record, 0 µs), so that a model run can be
/// measured through it too.
#[derive(Debug, Default)]
pub struct NullSys {
    ioctls: AtomicU64,
}

impl NullSys {
    /// A seam with a zero call count.
    pub const fn new() -> Self {
        NullSys { ioctls: AtomicU64::new(0) }
    }

    /// ioctls made so far (the kernel crossings a real seam would make).
    pub fn ioctls(&self) -> u64 {
        self.ioctls.load(Ordering::Relaxed)
    }
}

/// Writes a program's "all ran" status into its call: pra 0's magic and K into pra 2.
///
/// # Safety
/// `arg` points to a live `fastrpc_ioctl_invoke_attrs` whose `pra` holds the entries its scalars
/// word counts, each buffer entry valid for its length (the `INVOKE_ATTRS` contract).
unsafe fn answer_program(arg: *mut c_void) {
    use hexrpc_drivers::adsprpc::{fastrpc_ioctl_invoke_attrs, remote_arg};
    // SAFETY: the caller's contract: a live invoke_attrs.
    let inv = unsafe { (arg as *const fastrpc_ioctl_invoke_attrs).read_unaligned() };
    let sc = hexrpc_drivers::Scalars::from_raw(inv.inv.sc);
    if inv.inv.sc >> 24 != 5 || sc.inbufs() != 2 || sc.outbufs() != 1 || inv.inv.pra == 0 {
        return;
    }
    let pra = inv.inv.pra as *const remote_arg;
    // SAFETY: the scalars word counts 3 buffers, so pra[0..3] are live entries.
    let (header, status) = unsafe { ((*pra).buf(), (*pra.add(2)).buf()) };
    if header.len < 24 || status.len < 24 || header.pv == 0 || status.pv == 0 {
        return;
    }
    let mut h = [0u8; 8];
    // SAFETY: pra 0 is valid for `header.len` (>= 24) bytes of reading, pra 2 for `status.len`
    // (>= 24) of writing, and they are distinct buffers of the call.
    unsafe {
        core::ptr::copy_nonoverlapping(header.pv as *const u8, h.as_mut_ptr(), 8);
        let mut st = [0u8; 24];
        st[..4].copy_from_slice(&h[..4]);
        st[4..8].copy_from_slice(&h[4..8]);
        st[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        core::ptr::copy_nonoverlapping(st.as_ptr(), status.pv as *mut u8, 24);
    }
}

// SAFETY: the hooks touch no memory but a program call's status (`answer_program`, within the
// `INVOKE_ATTRS` contract); every other call goes to `RefusingSys`, which refuses it.
unsafe impl hexrpc_drivers::SeamHooks for NullSys {
    type Inner = RefusingSys;
    fn inner(&self) -> &RefusingSys {
        &RefusingSys
    }
    unsafe fn ioctl(&self, _: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        std::hint::black_box((request, arg));
        self.ioctls.fetch_add(1, Ordering::Relaxed);
        if request == hexrpc_drivers::adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS && !arg.is_null() {
            // SAFETY: `ioctl`'s contract for INVOKE_ATTRS, passed on.
            unsafe { answer_program(arg) };
        }
        Ok(0)
    }
    fn thread_id(&self) -> i32 {
        // As a device's seam answers: remembered per thread, asked again after a fork (a
        // `gettid` system call per deadline call would be the bench's cost, not hexrpc's).
        hexrpc_drivers::Syscalls::thread_id(&hexrpc_drivers::RustixSys)
    }
}

std::thread_local! {
    // Const-initialized and without a destructor, so touching it from the allocator never
    // allocates or registers anything.
    static THREAD_ALLOCATIONS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

fn count_thread() {
    THREAD_ALLOCATIONS.with(|c| c.set(c.get() + 1));
}

/// The system allocator, counting allocations (process-wide and per thread) and what is live.
/// Install it in a binary with `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();`
/// and read [`CountingAlloc::allocations`] around the code to measure, or
/// [`CountingAlloc::live`] before and after it for an exact leak check.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    allocations: AtomicU64,
    /// Blocks handed out and not yet given back (an `i64`: a block allocated before the
    /// allocator was installed cannot exist, but a wrapping subtraction would hide a bug).
    live_blocks: AtomicI64,
    /// Their requested sizes, in bytes.
    live_bytes: AtomicI64,
}

/// The heap in use at one moment ([`CountingAlloc::live`]): exact, unlike RSS, which also
/// counts what the C library keeps cached for its threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveHeap {
    /// Blocks allocated and not freed.
    pub blocks: i64,
    /// Their requested sizes, in bytes.
    pub bytes: i64,
}

impl LiveHeap {
    /// What `self` holds beyond `earlier` (negative where it holds less).
    pub fn since(&self, earlier: &LiveHeap) -> LiveHeap {
        LiveHeap { blocks: self.blocks - earlier.blocks, bytes: self.bytes - earlier.bytes }
    }
}

impl core::fmt::Display for LiveHeap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} blocks, {} bytes", self.blocks, self.bytes)
    }
}

impl CountingAlloc {
    /// A counter at zero.
    pub const fn new() -> Self {
        CountingAlloc { allocations: AtomicU64::new(0), live_blocks: AtomicI64::new(0), live_bytes: AtomicI64::new(0) }
    }

    /// The heap in use now, by every thread.
    pub fn live(&self) -> LiveHeap {
        LiveHeap { blocks: self.live_blocks.load(Ordering::Relaxed), bytes: self.live_bytes.load(Ordering::Relaxed) }
    }

    fn allocated(&self, size: usize) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
        self.live_blocks.fetch_add(1, Ordering::Relaxed);
        self.live_bytes.fetch_add(size as i64, Ordering::Relaxed);
        count_thread();
    }

    /// Allocations (including reallocations) so far, by every thread.
    pub fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }

    /// Allocations (including reallocations) made by the calling thread so far.
    pub fn thread_allocations() -> u64 {
        THREAD_ALLOCATIONS.with(|c| c.get())
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// `GlobalAlloc` contract; the counters have no effect on the memory handed out (and neither
// allocate nor touch the memory).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.allocated(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.live_blocks.fetch_sub(1, Ordering::Relaxed);
        self.live_bytes.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract for `dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed` is passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.allocated(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc` is passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // One block, as before, of the new size (a failed realloc leaves the old one live).
            self.allocations.fetch_add(1, Ordering::Relaxed);
            self.live_bytes.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            count_thread();
        }
        p
    }
}

/// Gives the C library's free heap memory back to the OS (glibc's `malloc_trim`; nothing
/// elsewhere). Every thread's arena keeps the memory its frees made free, so after a run of many
/// threads the RSS includes heap that nothing uses; a leak check compares what remains.
pub fn trim_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer; it only returns free pages of glibc's own arenas
    // to the OS and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What this process holds from the OS, read from `/proc/self` (Linux): for leak checks of long
/// runs (the soak, the restart storm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProcessFootprint {
    /// Open descriptors.
    pub fds: usize,
    /// Mappings of any kind (thread stacks and malloc arenas included: the C library caches
    /// those after the threads that made them ended, so compare this after a warm-up).
    pub maps: usize,
    /// File-backed shared mappings of memfds: ION buffers mapped by the host and the DSP
    /// model's `HAP_mmap`s. What the stack maps and must unmap.
    pub buffer_maps: usize,
    /// Resident set size in KiB.
    pub rss_kib: u64,
    /// True when this process runs under user-mode emulation (qemu-user): `/proc/self/status`
    /// then describes the emulator, so [`rss_kib`](Self::rss_kib) includes its translation
    /// caches and says nothing about hexrpc.
    pub emulated: bool,
}

impl ProcessFootprint {
    /// Reads the footprint now.
    pub fn now() -> ProcessFootprint {
        let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count().saturating_sub(1)).unwrap_or(0);
        let maps_text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let maps = maps_text.lines().count();
        let buffer_maps = maps_text.lines().filter(|l| l.contains("/memfd:")).count();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let emulated = status.lines().find_map(|l| l.strip_prefix("Name:")).is_some_and(|n| n.trim().starts_with("qemu-"));
        ProcessFootprint { fds, maps, buffer_maps, rss_kib: vm_rss_kib(&status), emulated }
    }

    /// The resident set size alone, in KiB (0 where `/proc` cannot tell): a cheap sample of a
    /// run in progress. No trimming: what the C library keeps cached counts.
    pub fn rss_now_kib() -> u64 {
        vm_rss_kib(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
    }

    /// Reads the footprint once descriptors and buffer mappings have stopped changing: five
    /// readings 20 ms apart that agree, or the last reading after `limit`. Threads that were just
    /// joined, and channels retired under a listener that lets go a moment later, close their
    /// descriptors asynchronously: a single reading can catch one still open.
    ///
    /// The C library's free heap is given back to the OS first ([`trim_allocator`]), so that
    /// [`rss_kib`](Self::rss_kib) counts memory in use rather than what the allocator keeps
    /// cached after a burst of threads (a leak stays resident; a freed buffer does not).
    pub fn settled(limit: std::time::Duration) -> ProcessFootprint {
        trim_allocator();
        let t0 = std::time::Instant::now();
        let mut last = ProcessFootprint::now();
        let mut same = 0;
        while same < 5 && t0.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = ProcessFootprint::now();
            same = if (now.fds, now.buffer_maps) == (last.fds, last.buffer_maps) { same + 1 } else { 0 };
            last = now;
        }
        last
    }
}

/// `VmRSS` of a `/proc/<pid>/status` text, in KiB.
fn vm_rss_kib(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The floor every FastRPC call pays on the measuring seam: one `INVOKE_ATTRS` ioctl through a
/// [`NullSys`] with its argument prebuilt, as (median thread-CPU ns, median wall ns) per call
/// over `batches` batches of `batch` calls (after one batch of warm-up). The ratio of a run's
/// host time to this, measured in the same process, is what `overhead.rs` and the Python
/// bindings' `bench_raw_ioctl_ns` report beside a model run.
pub fn raw_invoke_ioctl_ns(batches: usize, batch: u32) -> (f64, f64) {
    use hexrpc_drivers::adsprpc::{fastrpc_ioctl_invoke, fastrpc_ioctl_invoke_attrs, FASTRPC_IOCTL_INVOKE_ATTRS};
    use hexrpc_drivers::Syscalls;
    let null = NullSys::new();
    let mut attrs = fastrpc_ioctl_invoke_attrs { inv: fastrpc_ioctl_invoke { handle: 0, sc: 0, pra: 0 }, fds: 0, attrs: 0 };
    let mut one = || {
        // SAFETY: a live invoke_attrs with no argument entries (sc 0): NullSys reads nothing of it.
        let r = unsafe { null.ioctl(Fd(3), FASTRPC_IOCTL_INVOKE_ATTRS, (&mut attrs as *mut fastrpc_ioctl_invoke_attrs).cast()) };
        assert_eq!(r, Ok(0));
    };
    let cpu_ns = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
    };
    for _ in 0..batch {
        one();
    }
    let (mut cpu, mut wall) = (Vec::with_capacity(batches), Vec::with_capacity(batches));
    for _ in 0..batches.max(1) {
        let (t, c) = (std::time::Instant::now(), cpu_ns());
        for _ in 0..batch {
            one();
        }
        cpu.push((cpu_ns() - c) / f64::from(batch.max(1)));
        wall.push(t.elapsed().as_nanos() as f64 / f64::from(batch.max(1)));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(cpu), median(wall))
}
