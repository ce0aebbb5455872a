//! The bench **with executor**: real generated entries and real kernels, compiled for Hexagon,
//! run under qemu-hexagon against the bench's own buffers (docs/bench.md, the executor).
//!
//! # How it fits
//!
//! * [`build`] builds the **DSP shell** (`tests/hexagon/runtime/`: a loader for Hexagon shared
//!   objects, HAP_mmap / HAP_munmap with a live-mapping table, HAP_perf_get_time_us,
//!   HAP_power_set, memset/memcpy/memmove, the compiler's Hexagon helpers, a libm subset, and a
//!   request loop) into a static Hexagon executable, and the suite's libraries (an `entry`
//!   whose C text the caller generates, + kernels from `tests/hexagon/kernels/`) into shared
//!   objects laid out by the caller's linker script.
//! * The host publishes a library like any other (HAL `open_library` through the runtime's
//!   reverse file service). The simulated DSP fetches it through the reverse file service as
//!   always; when no Rust [`LibraryModel`] stands for it and the fetched
//!   bytes are a Hexagon shared object ([`is_shared_library`]), the DSP process's shell (one
//!   qemu-hexagon process per DSP process, started at its first such load, [`process`]) loads
//!   those very bytes: any `.so` made by `hexrpc build-lib` or by tinygrad's `DSPCompiler` runs.
//!   A refusal (bad ELF, unresolved symbol, no `entry`, relocation out of range or of an
//!   unsupported type) comes back as an AEE code with the loader's reason in the open's dlerror
//!   text, which the HAL turns into a typed error. Closing the library unloads it in the shell.
//! * Each invoke on that library's handle is sent to the shell ([`wire`]): the in/out buffer
//!   copies the kernel driver made, and for every handle argument the fd number plus
//!   the buffer's memfd itself (passed over the shell's stdin socket), which the shell
//!   `mmap2`s `MAP_SHARED`, so the kernel reads and writes the bench's memfds, the very bytes
//!   the host's ION mappings show.
//!   The shell builds the 32-bit remote_arg view, calls the library's `entry(handle, sc, pra)`
//!   and answers with the return value, the out-buffers and its HAP events, which go into the
//!   bench ledger.
//! * A crash (in a kernel or in a library's constructor during load), a non-zero exit, a
//!   protocol break or a hang (bounded by
//!   [`BenchConfig::executor_timeout`](crate::BenchConfig::executor_timeout); the process is
//!   killed) is a **DSP restart**: the call in flight returns +104 / `ECONNRESET` and the HAL
//!   session needs `recover()`, as after a real DSP subsystem restart. A shell the bench ends
//!   itself because its DSP process is torn down (a release, a restart: [`ExecProcess::kill`])
//!   is no restart of its own. Every such restart is recorded with its reason
//!   ([`RestartReason`]: the per-call limit, a fault with the shell's exit
//!   status or signal and what it printed last, a failed load; [`Bench::last_restart`]). A
//!   non-zero return of the entry is returned as the AEE code, as on a device.
//! * The shell runs untrusted code and is confined ([`confine`]): Landlock (no host writes, no
//!   TCP) and a seccomp system-call filter (no new process, no socket of any kind: a library
//!   that tries is killed with `SIGSYS`, a DSP restart whose reason names the sandbox,
//!   [`SANDBOX_REFUSAL`]); on a kernel without either it is not started unless
//!   `HEXRPC_EXEC_UNCONFINED=1`. It ends with its DSP process and with the bench's process, and
//!   since it can start no process, nothing it ran outlives it ([`process`]).
//! * [`reference`](mod@reference) holds the Rust references of the kernel suite and the
//!   comparison rules; the workloads that run through the whole stack (the model network, the
//!   suite against the references) live in hexrpc-scenarios.
//!
//! # Where qemu-hexagon differs from a cDSP
//!
//! * No timing model: qemu translates Hexagon code to host code. `HAP_perf_get_time_us` returns
//!   the emulator's host clock; HVX instructions are executed functionally, with no cycle cost,
//!   no VTCM, no L2/cache behaviour and no prefetch. Nothing measured here is DSP time: latency
//!   figures are the bench's *simulated* crossing cost, or host wall time of an emulated run, and
//!   are labelled so.
//! * Memory is shared through the memfds passed to the shell and host `mmap`: there is no SMMU, no cache
//!   maintenance is needed or checked. qemu-hexagon emulates 64 KiB pages (a cDSP maps 4 KiB
//!   pages), so each `HAP_mmap` is rounded up to 64 KiB and followed by a 64 KiB `PROT_NONE`
//!   guard: running past the rounded mapping faults deterministically (a DSP restart), while an
//!   overrun inside the rounding reads and writes the file's following bytes; on a device the
//!   neighbouring memory may be mapped and silently corrupted.
//! * No instruction counts are collected (qemu 7.2's plugins are not used), so no figure here is
//!   an instruction count either.
//! * One shell per DSP process holds all its libraries, as one protection domain does; but the
//!   shell runs one invoke at a time (a cDSP process may run calls of several host threads
//!   concurrently). HAP functions other than the four above do not exist; `HAP_mmap` only
//!   resolves the fds of the current invoke's handle arguments. The shell's exports are listed
//!   in `hrx_dsp.c` (`hrx_exports`); a real `fastrpc_shell` exports far more, so a library that
//!   imports something else is refused here by name although a device might load it.
//! * A library's `fopen` goes up the shell's stdout during the invoke; the bench sends apps_std
//!   `fopen_with_env` through the session's listener exactly as a DSP's C library does, then
//!   `fclose`s the FILE at once and answers opened / refused: the shell has no `fread`, so a
//!   library learns only whether the host's file service allowed the path (enough for the
//!   permission checks; a device's C library can read the file).
//! * qemu-hexagon protects memory in 64 KiB pages: a page shared by segments of different
//!   permissions gets their union (lld's 4 KiB-aligned layouts put text and data in one such
//!   page), RELRO is not applied. A device protects in 4 KiB pages.
//! * The DSP-shared memory changes under the host's feet while a kernel runs, exactly as on a
//!   device; the host must not read outputs before the invoke has returned.
//! * System calls: a cDSP library runs on QuRT, which has no Linux `trap0` interface, no
//!   `clone` and no sockets. Here qemu-hexagon serves a library's `trap0` calls on the host,
//!   inside the sandbox ([`confine`]): what the sandbox allows reaches the host, and a refused
//!   call (a new process, a socket) is a DSP restart whose reason names the sandbox
//!   ([`SANDBOX_REFUSAL`]); what a device does with such code is not modelled. A library that
//!   raises `SIGSYS` on itself reads the same: the bench cannot tell the two apart.
//!
//! # Availability
//!
//! [`tools_available`] finds clang-19, ld.lld-19 and qemu-hexagon and refuses when they cannot
//! run from this process (e.g. an aarch64 test binary under qemu-aarch64 finds x86-64 tools).
//! Callers print the reason and skip. Running code needs less than building it: [`runner`]
//! takes the shell named by [`SHELL_ENV`] (`HEXRPC_BENCH_SHELL`, a shell [`build_shell`] made
//! earlier) and needs only qemu-hexagon, so a process with no compiler on `PATH` (a model
//! file's run, as on a device) still runs Hexagon libraries on the bench.

pub mod build;
pub mod confine;
pub mod process;
pub mod reference;
pub mod wire;

use std::os::fd::AsFd;
use std::sync::Arc;

use hexrpc_drivers::aee;
use hexrpc_drivers::Scalars;

pub use build::{
    build_library, build_shell, is_shared_library, runner, tools_available, BuildError, Flavour, LibrarySources, Runner, Tool, Toolchain,
    ToolchainError, CI_INSTALLER, SHELL_ENV,
};
pub use process::{ExecFailure, ExecProcess, ExecStats, ShellEnd, ShellStatus, LAST_OUTPUT, SANDBOX_REFUSAL};

use crate::account::{LedgerEntry, LedgerEvent};
use crate::dsp::Job;
use crate::entry::LibraryModel;
use crate::restart::{RestartReason, ShellFault, ShellStep};
use crate::state::{CtxResult, Shared};
use crate::Bench;

/// One library loaded in an executor shell, as the bench sees it (libraries of one DSP process
/// share the shell: same `os_pid`, same statistics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorInfo {
    /// Simulated DSP process id.
    pub dsp_pid: u64,
    /// The library's remote handle.
    pub handle: u32,
    /// The name the library was loaded under.
    pub library: String,
    /// Host pid of the qemu-hexagon process.
    pub os_pid: u32,
    /// Whether it still runs.
    pub alive: bool,
    /// Its statistics.
    pub stats: ExecStats,
}

/// One executor invoke's execution counts ([`Bench::take_exec_counts`]): what qemu-hexagon
/// executed for it, as the bench shell read its counters (emulated packets, not DSP time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvokeCounts {
    /// Simulated DSP process id.
    pub pid: u64,
    /// The library's name.
    pub library: String,
    /// The invoke's method (the scalars word's top byte: 5 a program, 2 or 3 a batch).
    pub method: u32,
    /// The entry's return value (0: it ran).
    pub retval: i32,
    /// Entry call to return.
    pub total: wire::ExecCounts,
    /// Per kernel call, in run order: the counts between the entry's timer read right before the
    /// call and the one right after it (the generated entries read it exactly there, so each
    /// pair of marks is one kernel, with the few packets of the timer calls). Empty for an
    /// entry that read no timer; `None` when the marks cannot be paired (an odd number, or
    /// some past the shell's table).
    pub kernels: Option<Vec<wire::ExecCounts>>,
}

impl InvokeCounts {
    fn of(pid: u64, library: &str, method: u32, r: &wire::Response) -> InvokeCounts {
        let kernels =
            (r.marks_dropped == 0 && r.marks.len().is_multiple_of(2)).then(|| r.marks.chunks_exact(2).map(|p| p[1].since(p[0])).collect());
        InvokeCounts { pid, library: library.to_owned(), method, retval: r.retval, total: r.counts, kernels }
    }
}

/// Every executor of the bench's loaded libraries.
pub fn executors(bench: &Bench) -> Vec<ExecutorInfo> {
    let st = bench.lock();
    let mut out = Vec::new();
    for (&pid, p) in &st.procs {
        for (&h, lib) in &p.libs {
            if let Some((e, _)) = lib.model.exec.as_ref() {
                out.push(ExecutorInfo {
                    dsp_pid: pid,
                    handle: h,
                    library: lib.name.clone(),
                    os_pid: e.pid(),
                    alive: e.is_alive(),
                    stats: e.stats(),
                });
            }
        }
    }
    out
}

/// Hook for the DSP loader: loads `image` (the bytes the DSP fetched) into the shell of DSP
/// process `pid`, starting the shell first if the process has none. Errors are the (AEE code,
/// text) of a refused load; a shell that dies or hangs while loading (a faulting constructor)
/// is a DSP restart.
pub(crate) fn load_library(
    sh: &Shared,
    pid: u64,
    epoch: u64,
    name: &str,
    symbol: &str,
    image: &[u8],
) -> Result<LibraryModel, (i32, String)> {
    let existing = sh.lock().procs.get(&pid).and_then(|p| p.shell.clone());
    let shell = match existing {
        Some(s) => s,
        None => {
            let run = runner().map_err(|e| (aee::AEE_EUNABLETOLOAD, format!("{name}: the bench's DSP shell is unavailable: {e}")))?;
            let started = ExecProcess::spawn(&run.qemu.to_string_lossy(), &run.shell, sh.cfg.executor_timeout)
                .map_err(|e| (aee::AEE_EUNABLETOLOAD, format!("{name}: starting the DSP shell: {e}")))?;
            let started = Arc::new(started);
            let mut st = sh.lock();
            if st.epoch != epoch {
                return Err((aee::AEE_EBADSTATE, format!("{name}: the DSP restarted during the load")));
            }
            let Some(p) = st.procs.get_mut(&pid).filter(|p| p.alive) else {
                return Err((aee::AEE_EBADSTATE, format!("{name}: process ended during the load")));
            };
            // Another thread may have started one meanwhile: keep the first (ours is dropped,
            // which ends it).
            p.shell.get_or_insert(started).clone()
        }
    };
    match shell.load(symbol, image, sh.cfg.executor_timeout) {
        Ok(a) if a.status == 0 => Ok(LibraryModel::executor(shell, a.lib)),
        Ok(a) => Err((a.status, format!("{name}: {}", a.text))),
        Err(ExecFailure::TooLarge) => Err((
            aee::AEE_EBADSIZE,
            format!("{name}: {} bytes or the symbol name exceed the DSP shell's limits ({} bytes)", image.len(), wire::MAX_IMAGE),
        )),
        Err(e) if shell.was_killed() => Err((aee::AEE_EBADSTATE, format!("{name}: the process ended during the load ({e})"))),
        Err(e) => {
            log::warn!("bench DSP shell while loading {name}: {e}; the DSP restarts");
            let reason = reason(sh, name, ShellStep::Load, e);
            let text = format!("{name}: the DSP shell died while loading: {reason}");
            restart(sh, reason);
            Err((aee::AEE_EUNABLETOLOAD, text))
        }
    }
}

/// Hook for the DSP's library close: unloads `lib` in `shell` (its destructors run). A shell
/// that fails here is a DSP restart.
pub(crate) fn close_library(sh: &Shared, name: &str, shell: &ExecProcess, lib: u32) {
    match shell.close(lib, sh.cfg.executor_timeout) {
        Ok(a) if a.status == 0 => {}
        Ok(a) => log::warn!("bench DSP shell refused to close {name}: {} {}", a.status, a.text),
        Err(_) if shell.was_killed() => {}
        Err(e) => {
            log::warn!("bench DSP shell while closing {name}: {e}; the DSP restarts");
            restart(sh, reason(sh, name, ShellStep::Close, e));
        }
    }
}

/// Why a failure of the shell while it did `step` for `library` restarts the DSP.
fn reason(sh: &Shared, library: &str, step: ShellStep, failure: ExecFailure) -> RestartReason {
    let fault = match failure {
        ExecFailure::Hang => return RestartReason::CallLimit { limit: sh.cfg.executor_timeout, library: library.to_string(), step },
        ExecFailure::Died(end) => ShellFault::Ended(end),
        ExecFailure::Protocol(detail) => ShellFault::Protocol(detail),
        // Neither comes back from a load, an invoke or a close of a running shell (a spawn
        // failure is a refused load, an oversized request a refused call): kept as text.
        other @ (ExecFailure::Spawn(_) | ExecFailure::TooLarge) => ShellFault::Protocol(other.to_string()),
    };
    match step {
        ShellStep::Load => RestartReason::LoadFailure { library: library.to_string(), fault },
        step => RestartReason::Fault { library: library.to_string(), step, fault },
    }
}

/// The DSP restart an executor failure stands for ([`Bench::restart_dsp`](crate::Bench::restart_dsp)),
/// recorded with its reason ([`Bench::last_restart`](crate::Bench::last_restart)).
fn restart(sh: &Shared, reason: RestartReason) {
    crate::release::restart_dsp(sh, reason);
}

/// Hook for library invokes: runs `job` on the executor.
pub(crate) fn invoke(sh: &Shared, job: &Job, library: &str, exec: &ExecProcess, lib: u32, mut outs: Vec<Vec<u8>>) -> CtxResult {
    let sc = Scalars::from_raw(job.sc);
    let nbuf = sc.buffers();
    let owned: Vec<Vec<u8>> = (0..nbuf.min(job.wire.len())).map(|i| crate::dsp::arg_bytes(job, i)).collect();
    let bufs: Vec<&[u8]> = owned.iter().map(|v| &v[..]).collect();
    let mut files = Vec::new();
    let handles: Vec<wire::HandleArg> = job
        .wire
        .iter()
        .skip(nbuf)
        .map(|rec| {
            let d = rec.dma();
            let found = job.handles.iter().find(|h| h.fd == d.fd);
            if let Some(h) = found {
                files.push(h.memfd.as_fd());
            }
            wire::HandleArg {
                fd: d.fd,
                offset: d.offset,
                size: found.map_or(0, |h| u32::try_from(h.len).unwrap_or(u32::MAX)),
                passed: found.is_some(),
            }
        })
        .collect();
    let fail = |retval| CtxResult { retval, outs: Vec::new(), fdlist: Vec::new(), sim_dsp: std::time::Duration::ZERO };
    // A library's fopen goes to the host's reverse file service through the listener, as a real
    // DSP's C library sends it.
    let mut fopen = |path: &[u8], mode: &[u8]| crate::dsp::library_fopen(sh, job, path, mode);
    let resp = match exec.invoke(lib, job.sc, job.handle, &bufs, &handles, &files, sh.cfg.executor_timeout, &mut fopen) {
        Ok(r) => r,
        Err(ExecFailure::TooLarge) => return fail(aee::AEE_ENOMEMORY),
        // Its process was torn down under it (a release, a restart): no DSP crash of its own.
        Err(_) if exec.was_killed() => return fail(aee::AEE_EBADSTATE),
        Err(e) => {
            log::warn!("bench executor for {library}: {e}; the DSP restarts");
            restart(sh, reason(sh, library, ShellStep::Invoke, e));
            return fail(-1);
        }
    };
    for (j, o) in outs.iter_mut().enumerate() {
        if let Some(r) = resp.outs.get(j) {
            let n = o.len().min(r.len());
            o[..n].copy_from_slice(&r[..n]);
        }
    }
    {
        let mut st = sh.lock();
        // A launch or batch that ran and mapped nothing for a handle used a mapping its entry
        // kept from an earlier call (the map cache): it must have been made for the buffer the
        // handle's fd names now.
        let mapped_now: Vec<i32> = resp.events.iter().filter_map(map_fd).collect();
        if resp.retval == 0 && matches!(job.sc >> 24, 2 | 3) {
            let stale: Vec<LedgerEvent> = job
                .handles
                .iter()
                .filter(|h| !mapped_now.contains(&h.fd))
                .flat_map(|h| {
                    st.procs.get(&job.pid).into_iter().flat_map(move |p| {
                        p.lease_maps.iter().filter(move |m| m.fd == h.fd && m.buf != h.buf).map(|m| LedgerEvent::StaleMappingUsed {
                            fd: m.fd,
                            addr: m.addr,
                            len: m.len,
                        })
                    })
                })
                .collect();
            for event in stale {
                st.record_ledger(LedgerEntry { pid: job.pid, library: library.to_string(), event }, sh.cfg.log_capacity);
            }
        }
        if st.exec_counts.len() < sh.cfg.log_capacity {
            st.exec_counts.push(InvokeCounts::of(job.pid, library, job.sc >> 24, &resp));
        } else {
            st.exec_counts_dropped += 1;
        }
        for e in &resp.events {
            let wire::HapEvent::Ledger(event) = e else { continue };
            match *event {
                LedgerEvent::Map { fd, addr, len, .. } => {
                    if let Some(h) = job.handles.iter().find(|h| h.fd == fd) {
                        st.lease_mapped(job.pid, library, fd, h.buf, addr, len);
                    }
                }
                LedgerEvent::Unmap { addr, len, matched: true } => st.lease_unmapped(job.pid, addr, len),
                _ => {}
            }
            let event = event.clone();
            st.record_ledger(LedgerEntry { pid: job.pid, library: library.to_string(), event }, sh.cfg.log_capacity);
        }
    }
    let fdlist = crate::dsp::fdlist(sh, job, resp.retval);
    let hap = sh.cfg.cost.map_cost_of(resp.events.iter().filter_map(|e| match e {
        wire::HapEvent::Ledger(l) => Some(l),
        _ => None,
    }));
    CtxResult { retval: resp.retval, outs, fdlist, sim_dsp: hap }
}

/// The fd of a `Map` event.
fn map_fd(e: &wire::HapEvent) -> Option<i32> {
    match e {
        wire::HapEvent::Ledger(LedgerEvent::Map { fd, .. }) => Some(*fd),
        _ => None,
    }
}
