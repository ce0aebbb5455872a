//! `hexrpc probe`: a step-by-step health check of everything a DSP session needs, in the order
//! the session needs it. Each step names the exact prerequisite when it fails and stops the
//! chain; everything acquired is released when the probe returns.

use std::ffi::CStr;

use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{Errno, FileStat, OpenFlags, Syscalls};
use hexrpc_hal::{Cause, HalError, IonOpened};

use crate::json;

pub use crate::selftest::Status;

/// One step of the report.
#[derive(Clone, Debug)]
pub struct Step {
    /// Step name.
    pub name: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was found, or what is missing.
    pub detail: String,
}

/// The names of the steps, in order.
pub const STEPS: &[&str] = &["kernel", "device-nodes", "ion-alloc", "shell", "channel", "process", "listener", "library"];

/// Which FastRPC driver and allocator the device (or the bench) exposes, and whether they are
/// the board's. On the bench the simulated nodes of both bench kernels are looked for; on a
/// device the standard `/dev` nodes.
///
/// `Ok(None)`: no driver node was found at all; the step is skipped and `device-nodes` names the
/// board's missing node.
fn kernel_step<S: Syscalls>(sys: &S, board: &Board) -> Result<Option<String>, String> {
    let exists = |p: &CStr| sys.stat(p, true).is_ok();
    let bench = hexrpc_bsp::BENCH_BOARDS.iter().any(|b| b.name == board.name);
    let found = if bench {
        hexrpc_bsp::detect_kernel_in(hexrpc_bsp::BENCH_RPC_NODES, hexrpc_bsp::BENCH_ALLOC_NODES, exists)
    } else {
        hexrpc_bsp::detect_kernel(exists)
    };
    let Some(k) = found else {
        return Ok(None);
    };
    let what = format!(
        "{} driver ({}) with the {} allocator ({})",
        k.abi.name(),
        k.rpc_path.to_string_lossy(),
        k.allocator.name(),
        k.alloc_path.to_string_lossy()
    );
    if k.abi != board.abi || k.allocator != board.allocator {
        let suggest = hexrpc_bsp::generic_board(&k).map_or("no board of this build".to_string(), |b| format!("--board {}", b.name));
        return Err(format!(
            "found the {what}, but board {} is for the {} driver with {}; use {suggest}",
            board.name,
            board.abi.name(),
            board.allocator.name()
        ));
    }
    Ok(Some(format!("{what}: the ABI of board {}", board.name)))
}

fn mode_string(st: &FileStat) -> String {
    let kind = if st.is_char_device() {
        'c'
    } else if st.is_dir() {
        'd'
    } else if st.is_file() {
        '-'
    } else {
        '?'
    };
    let mut s = String::from(kind);
    for shift in [6, 3, 0] {
        let bits = (st.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// `name(id)` from a passwd/group file, or the number when the file or entry is missing.
fn id_name(file: &str, id: u32) -> String {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                let num: u32 = f.nth(1)?.parse().ok()?;
                (num == id).then(|| name.to_string())
            })
        })
        .map(|n| format!("{n}({id})"))
        .unwrap_or_else(|| id.to_string())
}

fn node<S: Syscalls>(sys: &S, path: &CStr, what: &str) -> Result<String, String> {
    let p = path.to_string_lossy();
    let st = match sys.stat(path, true) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Err(format!("missing {p} ({what}): this kernel does not expose it")),
        Err(e) => return Err(format!("cannot stat {p} ({what}): {e}")),
    };
    let owner = format!("{} {}:{}", mode_string(&st), id_name("/etc/passwd", st.uid), id_name("/etc/group", st.gid));
    if !st.is_char_device() {
        return Err(format!("{p} is not a character device ({owner})"));
    }
    match sys.open(path, OpenFlags::READ_ONLY) {
        Ok(fd) => {
            let _ = sys.close(fd);
            Ok(format!("{p} {owner}, openable"))
        }
        Err(e) => Err(format!("{p} {owner} cannot be opened by this process: {e} (on AGNOS the user must be in group gpu)")),
    }
}

fn hal_detail(e: &HalError) -> String {
    match e.cause {
        Cause::Os(Errno::ENOENT) => format!("{e} (file or node missing)"),
        _ => e.to_string(),
    }
}

/// A library for the last step: its name and image bytes.
pub struct ProbeLibrary {
    /// Name the DSP loads it under (made unique by the session).
    pub name: String,
    /// The image.
    pub image: &'static [u8],
}

/// Runs the probe on `sys` for the board `access` grants. The `library` step loads `library`
/// through the reverse file service when one is given, and is skipped (saying why) otherwise.
pub fn run<S: Syscalls + Clone + Send + Sync + 'static>(sys: S, access: &DeviceAccess, library: Option<&ProbeLibrary>) -> Vec<Step> {
    let mut steps = Vec::new();
    chain(sys, access, library, &mut steps);
    let failed = steps.iter().any(|s| s.status == Status::Fail);
    for name in STEPS {
        if !steps.iter().any(|s| s.name == *name) {
            let detail = if failed {
                "not run: an earlier step failed".to_string()
            } else {
                "not run: pass --library LIB.so (a library built with `hexrpc build-lib`) to load one".to_string()
            };
            steps.push(Step { name, status: Status::Skip, detail });
        }
    }
    steps
}

fn push(steps: &mut Vec<Step>, name: &'static str, r: Result<String, String>) -> bool {
    let ok = r.is_ok();
    steps.push(match r {
        Ok(detail) => Step { name, status: Status::Pass, detail },
        Err(detail) => Step { name, status: Status::Fail, detail },
    });
    ok
}

/// Runs the steps until one fails; dropping the stages on return releases everything.
fn chain<S: Syscalls + Clone + Send + Sync + 'static>(
    sys: S,
    access: &DeviceAccess,
    library: Option<&ProbeLibrary>,
    steps: &mut Vec<Step>,
) {
    let board: &Board = access.board();
    {
        match kernel_step(&sys, board) {
            Ok(Some(detail)) => steps.push(Step { name: "kernel", status: Status::Pass, detail }),
            Ok(None) => steps.push(Step {
                name: "kernel",
                status: Status::Skip,
                detail: "no FastRPC driver node together with an allocator node (looked for /dev/adsprpc-smd, /dev/fastrpc-cdsp[-secure], \
                         /dev/ion, /dev/dma_heap/system, or the bench's nodes); device-nodes names what the board needs"
                    .into(),
            }),
            Err(detail) => {
                steps.push(Step { name: "kernel", status: Status::Fail, detail });
                return;
            }
        }
        let alloc_what = match board.allocator {
            hexrpc_bsp::Allocator::Ion49 => "the ION allocator",
            hexrpc_bsp::Allocator::DmaHeap => "the dma-buf heap",
        };
        let nodes = node(&sys, board.ion_path, alloc_what)
            .and_then(|a| node(&sys, board.rpc_path, "the FastRPC driver").map(|b| format!("{a}; {b}")));
        if !push(steps, "device-nodes", nodes) {
            return;
        }
        let ion = match IonOpened::open(sys.clone(), access) {
            Ok(ion) => ion,
            Err(e) => {
                push(steps, "ion-alloc", Err(hal_detail(&e)));
                return;
            }
        };
        let alloc = (|| {
            let mut lease =
                ion.alloc(4096).map_err(|e| format!("heap {} flags {:#x}: {}", board.heap_id, board.heap_flags, hal_detail(&e)))?;
            let pattern: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
            lease.write_at(0, &pattern).map_err(|e| e.to_string())?;
            let mut back = vec![0u8; 4096];
            lease.read_at(0, &mut back).map_err(|e| e.to_string())?;
            if back != pattern {
                return Err("the buffer did not read back what was written".to_string());
            }
            Ok(match board.allocator {
                hexrpc_bsp::Allocator::Ion49 => format!(
                    "4096 bytes from ION heap {} (mask {:#x}) flags {:#x}, shared fd {}, mapped and verified",
                    board.heap_id,
                    board.heap_mask(),
                    board.heap_flags,
                    lease.fd().0
                ),
                hexrpc_bsp::Allocator::DmaHeap => format!(
                    "4096 bytes from dma-heap {} ({}), dma-buf fd {}, mapped and verified{}",
                    board.ion_path.to_string_lossy(),
                    if board.cached { "cached" } else { "uncached" },
                    lease.fd().0,
                    if board.cached { " with DMA_BUF_IOCTL_SYNC around the CPU accesses" } else { "" }
                ),
            })
        })();
        if !push(steps, "ion-alloc", alloc) {
            return;
        }
        let shell_path = board.shell_path.to_string_lossy().into_owned();
        let staged = match ion.stage_shell() {
            Ok(s) => s,
            Err(e) => {
                push(steps, "shell", Err(format!("{shell_path}: {}", hal_detail(&e))));
                return;
            }
        };
        push(
            steps,
            "shell",
            Ok(format!(
                "{shell_path}: {} bytes, ELF machine 164 (Hexagon), staged in a buffer from the {} allocator",
                staged.shell_len(),
                board.allocator.name()
            )),
        );
        let channel = match staged.open_channel() {
            Ok(c) => c,
            Err(e) => {
                push(steps, "channel", Err(hal_detail(&e)));
                return;
            }
        };
        let channel_detail = match board.abi {
            hexrpc_bsp::KernelAbi::DownstreamMsm => format!(
                "GETINFO on channel {} (CDSP): info {:#x}, SMMU {}",
                board.channel,
                channel.info(),
                if channel.info() & 1 != 0 { "on" } else { "off" }
            ),
            hexrpc_bsp::KernelAbi::Upstream => {
                format!(
                    "{} opened (domain {}, CDSP): the upstream driver took an SMMU session at open",
                    board.rpc_path.to_string_lossy(),
                    board.channel
                )
            }
        };
        push(steps, "channel", Ok(channel_detail));
        let process = match channel.create_process() {
            Ok(p) => p,
            Err(e) => {
                push(steps, "process", Err(hal_detail(&e)));
                return;
            }
        };
        push(
            steps,
            "process",
            Ok(match board.abi {
                hexrpc_bsp::KernelAbi::DownstreamMsm => "INIT created the user process on the DSP".into(),
                hexrpc_bsp::KernelAbi::Upstream => {
                    format!("INIT_CREATE (attrs {:#x}) created the user process on the DSP", board.process_attrs)
                }
            }),
        );
        let session = match process.attach_listener() {
            Ok(session) => session,
            Err(e) => {
                push(steps, "listener", Err(hal_detail(&e)));
                return;
            }
        };
        push(steps, "listener", Ok("reverse-RPC listener registered (handle 3 init2)".into()));
        let Some(lib) = library else { return };
        let policy = match hexrpc_runtime::reverse::FilePolicy::for_board(board) {
            Ok(p) => p,
            Err(e) => {
                push(steps, "library", Err(format!("the board's file policy is invalid: {e:?}")));
                return;
            }
        };
        let served = match hexrpc_runtime::ServedSession::serve(session, policy) {
            Ok(s) => s,
            Err(e) => {
                push(steps, "library", Err(e.to_string()));
                return;
            }
        };
        let r = served.open_library(&lib.name, lib.image).map(|l| {
            let handle = l.remote_handle().unwrap_or(0);
            format!(
                "{} ({} bytes) fetched by the DSP through the reverse file service and loaded, handle {handle:#x}",
                lib.name,
                lib.image.len()
            )
        });
        push(steps, "library", r.map_err(|e| hal_detail(&e)));
    }
}

/// `{"board": NAME, "steps": [{"name", "status", "detail"}]}`.
pub fn to_json(board: &Board, steps: &[Step]) -> String {
    let mut out = String::new();
    let mut top = json::Object::new(&mut out);
    top.str("board", board.name);
    top.raw("steps", |o| {
        o.push('[');
        for (i, s) in steps.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let mut e = json::Object::new(o);
            e.str("name", s.name).str("status", s.status.name()).str("detail", &s.detail);
            e.end();
        }
        o.push(']');
    });
    top.end();
    out.push('\n');
    out
}

/// The readable report.
pub fn to_text(board: &Board, steps: &[Step]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "hexrpc probe on board {} ({})", board.name, board.description);
    for s in steps {
        let _ = writeln!(out, "{}  {:<13} {}", s.status.tag(), s.name, s.detail);
    }
    out
}
