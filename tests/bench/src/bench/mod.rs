//! [`Bench`]: the simulated kernel behind the syscall seam, and its control API.
//!
//! This file is the handle itself (what a bench is made of, how one is made); the API it offers
//! is split by what it is for: the virtual file table ([`vfs`]), accounting and the kernel's
//! state as tests inspect it ([`inspect`]), faults and restarts ([`faults`]), library models and
//! the hostile DSP ([`reverse`]), and the [`Syscalls`](hexrpc_drivers::Syscalls) seam itself
//! ([`syscalls`]). The kernel's release paths, which the models share, are `crate::release`.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use hexrpc_bsp::{Allocator, Board, KernelAbi};
use hexrpc_drivers::Fd;

use crate::config::BenchConfig;
use crate::elf;
use crate::state::{Access, DeviceKind, FdEntry, FdObj, Shared, State, VEntry, VNode};

pub(crate) mod faults;
pub(crate) mod inspect;
pub(crate) mod reverse;
pub(crate) mod syscalls;
pub(crate) mod vfs;

/// Size of the default shell image the bench serves at the board's shell path.
pub const DEFAULT_SHELL_LEN: usize = 8192;

/// The next bench's [`Syscalls::kernel_instance`](hexrpc_drivers::Syscalls::kernel_instance):
/// never reused in a process, so a bench never inherits what the HAL keeps for an earlier one.
static NEXT_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The isolated bench: a simulated msm ION 4.9 + downstream adsprpc kernel and a simulated DSP,
/// implementing [`Syscalls`](hexrpc_drivers::Syscalls). Cloning is cheap and every clone is the
/// same bench, so it can be handed to the HAL by value
/// (`Bench: Syscalls + Clone + Send + Sync + 'static`) and shared with listener threads.
#[derive(Clone)]
pub struct Bench {
    sh: Arc<Shared>,
}

/// A [`Bench`] that does not keep it alive ([`Bench::downgrade`]).
#[derive(Clone)]
pub struct WeakBench(std::sync::Weak<Shared>);

impl WeakBench {
    /// The bench, while it lives.
    pub fn upgrade(&self) -> Option<Bench> {
        self.0.upgrade().map(|sh| Bench { sh })
    }
}

impl core::fmt::Debug for Bench {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bench").field("board", &self.sh.cfg.board.name).field("snapshot", &self.snapshot()).finish()
    }
}

impl Default for Bench {
    fn default() -> Self {
        Bench::new()
    }
}

impl Bench {
    /// A bench with the default configuration ([`hexrpc_bsp::BENCH`] board, default shell).
    pub fn new() -> Bench {
        Bench::with_config(BenchConfig::default())
    }

    /// A bench with the default configuration on `board` ([`hexrpc_bsp::BENCH`]: ION 4.9 +
    /// downstream adsprpc; [`hexrpc_bsp::BENCH_UPSTREAM`]: dma-heap + upstream fastrpc).
    pub fn for_board(board: &'static Board) -> Bench {
        Bench::with_config(BenchConfig::for_board(board))
    }

    /// A bench with `cfg`. The board's two device nodes exist, and its shell path holds a
    /// [`DEFAULT_SHELL_LEN`]-byte Hexagon ELF.
    pub fn with_config(cfg: BenchConfig) -> Bench {
        let mut st = State { ledger_capacity: cfg.log_capacity, ..State::default() };
        let b = cfg.board;
        let s = |c: &CStr| c.to_string_lossy().into_owned();
        let alloc = match b.allocator {
            Allocator::Ion49 => DeviceKind::Ion,
            Allocator::DmaHeap => DeviceKind::DmaHeap,
        };
        let rpc = match b.abi {
            KernelAbi::DownstreamMsm => DeviceKind::Rpc,
            KernelAbi::Upstream => DeviceKind::Fastrpc,
        };
        st.vfs.insert(s(b.ion_path), VEntry { node: VNode::Device(alloc), access: Access::Present });
        st.vfs.insert(s(b.rpc_path), VEntry { node: VNode::Device(rpc), access: Access::Present });
        st.vfs
            .insert(s(b.shell_path), VEntry { node: VNode::File(Arc::new(elf::hexagon_elf(DEFAULT_SHELL_LEN))), access: Access::Present });
        #[cfg(not(feature = "linux"))]
        assert!(*b != hexrpc_bsp::BENCH_LINUX, "the bench-linux board needs hexrpc-bench's `linux` feature (Linux's own fastrpc.c)");
        #[cfg(feature = "linux")]
        let linux = *b == hexrpc_bsp::BENCH_LINUX;
        Bench {
            sh: Arc::new_cyclic(|_weak| Shared {
                #[cfg(feature = "linux")]
                linux: linux.then(|| crate::linux::LinuxKernel::probe(_weak.clone(), &cfg)),
                cfg,
                st: Mutex::new(st),
                restart: Mutex::new(()),
                cv: Condvar::new(),
                dsp_host_mmaps: Arc::new(AtomicUsize::new(0)),
                instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.sh.lock()
    }

    /// The configuration.
    pub fn config(&self) -> &BenchConfig {
        &self.sh.cfg
    }

    /// The board.
    pub fn board(&self) -> &'static Board {
        self.sh.cfg.board
    }

    /// A handle that does not keep the bench alive: for a library model that must reach its own
    /// bench (a scripted kernel sending reverse requests as DSP code would) without a cycle.
    pub fn downgrade(&self) -> WeakBench {
        WeakBench(Arc::downgrade(&self.sh))
    }

    /// The live DSP process behind a FastRPC fd (for [`Bench::dsp_pid`] and the hostile DSP).
    fn pid_of(&self, st: &State, rpc_fd: Fd) -> Option<u64> {
        match st.fds.get(&rpc_fd.0) {
            Some(FdEntry { obj: FdObj::Rpc(f), .. }) => st.rpc_files.get(f).and_then(|f| f.proc_id).filter(|p| st.procs.contains_key(p)),
            _ => None,
        }
    }
}
