//! `hexrpc probe`: a step-by-step health check of everything a DSP session needs.
//!
//! Every prerequisite is checked even after one failed (board, both nodes with their owner, mode
//! and SELinux label, this process's groups and SELinux context, the shell file); then the
//! session chain (ION heap, shell staged, channel, DSP process, listener, library) runs as far
//! as it can, and a step that needs an earlier one that failed is skipped saying which. Every
//! failed step says what to do. Everything acquired is released when the probe returns.

use std::ffi::CStr;

use hexrpc_bsp::{Board, DeviceAccess, KernelAbi};
use hexrpc_drivers::{elf, Errno, FileStat, OpenFlags, Syscalls};
use hexrpc_hal::{Cause, HalError, HeapOpened};

use crate::json;

pub use crate::verdict::Status;

/// How the board was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoardSource {
    /// `--board NAME`.
    Given,
    /// From the device-tree model.
    Detected,
    /// The device-tree model is unknown or unreadable: the named board's facts are used for the
    /// remaining checks, and the `board` step fails saying so.
    Assumed,
    /// The bench.
    Bench,
}

/// Where the probe runs: the real host (its groups, SELinux state and kernel are facts) or the
/// bench (simulated nodes: host facts do not apply and are skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// A real device (or a machine that should be one).
    Real,
    /// The isolated bench.
    Bench,
}

/// One step of the report.
#[derive(Clone, Debug)]
pub struct Step {
    /// Step name.
    pub name: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was found, or what is missing.
    pub detail: String,
    /// What to do about a failure (empty when there is nothing to do).
    pub hint: String,
}

/// The names of the steps, in order.
pub const STEPS: &[&str] = &[
    "board",
    "kernel",
    "ion-node",
    "rpc-node",
    "groups",
    "selinux",
    "shell-file",
    "ion-alloc",
    "shell-stage",
    "channel",
    "process",
    "pm-qos",
    "listener",
    "library",
];

const BENCH_HINT: &str = "on a machine without a DSP use `hexrpc probe --bench` / `hexrpc selftest --bench`";

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

/// The name of `id` in a passwd/group file, if any.
fn id_lookup(file: &str, id: u32) -> Option<String> {
    let t = crate::io::read_text(std::path::Path::new(file), 4 << 20).ok()?;
    t.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let num: u32 = f.nth(1)?.parse().ok()?;
        (num == id).then(|| name.to_string())
    })
}

/// `name(id)` from a passwd/group file, or the number when the file or entry is missing.
fn id_name(file: &str, id: u32) -> String {
    id_lookup(file, id).map(|n| format!("{n}({id})")).unwrap_or_else(|| id.to_string())
}

/// The SELinux label of `path`, when the attribute is readable.
fn selinux_label(path: &CStr) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = rustix::fs::getxattr(path, c"security.selinux", &mut buf[..]).ok()?;
    let label = String::from_utf8_lossy(&buf[..n]).trim_end_matches('\0').to_string();
    (!label.is_empty()).then_some(label)
}

/// This process's real and supplementary group ids, from /proc/self/status.
fn process_groups() -> Option<Vec<u32>> {
    let status = crate::io::read_text(std::path::Path::new("/proc/self/status"), 1 << 20).ok()?;
    let mut ids = Vec::new();
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("Gid:") {
            ids.extend(rest.split_whitespace().take(2).filter_map(|x| x.parse::<u32>().ok()));
        } else if let Some(rest) = line.strip_prefix("Groups:") {
            ids.extend(rest.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Some(ids)
}

struct NodeFacts {
    stat: Option<FileStat>,
}

fn node<S: Syscalls>(sys: &S, host: Host, abi: KernelAbi, path: &CStr, what: &str, steps: &mut Vec<Step>, name: &'static str) -> NodeFacts {
    let p = path.to_string_lossy();
    let st = match sys.stat(path, true) {
        Ok(st) => st,
        Err(Errno::ENOENT) => {
            // The other driver family's node, if this kernel has it: then the board is wrong.
            let other: &[&str] = match abi {
                KernelAbi::DownstreamMsm => &["/dev/fastrpc-cdsp", "/dev/fastrpc-cdsp-secure", "/dev/fastrpc-adsp"],
                KernelAbi::Upstream => &["/dev/adsprpc-smd"],
            };
            let found = other.iter().find(|n| host == Host::Real && std::path::Path::new(n).exists());
            let hint = match (found, abi) {
                (Some(n), KernelAbi::DownstreamMsm) => format!(
                    "{n} exists: this kernel runs the upstream fastrpc driver (dma-heap buffers): pass --board upstream \
                     (or qcom-rb5); {BENCH_HINT}"
                ),
                (Some(n), KernelAbi::Upstream) => {
                    format!("{n} exists: this kernel runs the downstream msm adsprpc/ION drivers: pass --board comma-three or msm-android")
                }
                (None, KernelAbi::DownstreamMsm) => format!(
                    "this kernel does not expose {p}: it is not a Snapdragon kernel with the downstream adsprpc/ION drivers; {BENCH_HINT}"
                ),
                (None, KernelAbi::Upstream) => format!(
                    "this kernel does not expose {p}: it is not a kernel with the upstream fastrpc driver and the system dma-heap \
                     (CONFIG_QCOM_FASTRPC, CONFIG_DMABUF_HEAPS_SYSTEM); {BENCH_HINT}"
                ),
            };
            push(steps, name, Err((format!("missing {p} ({what})"), hint)));
            return NodeFacts { stat: None };
        }
        Err(e) => {
            push(
                steps,
                name,
                Err((format!("cannot stat {p} ({what}): {e}"), format!("check that {p} is visible to this process (containers, SELinux)"))),
            );
            return NodeFacts { stat: None };
        }
    };
    let mut owner = format!("{} {}:{}", mode_string(&st), id_name("/etc/passwd", st.uid), id_name("/etc/group", st.gid));
    if host == Host::Real {
        if let Some(label) = selinux_label(path) {
            owner.push_str(&format!(" label {label}"));
        }
    }
    if !st.is_char_device() {
        push(steps, name, Err((format!("{p} is not a character device ({owner})"), "the node is wrong: ask the image maintainer".into())));
        return NodeFacts { stat: Some(st) };
    }
    let r = match sys.open(path, OpenFlags::READ_ONLY) {
        Ok(fd) => {
            let _ = sys.close(fd);
            Ok(format!("{p} {owner}, openable"))
        }
        Err(e) => {
            let group = id_lookup("/etc/group", st.gid).unwrap_or_else(|| st.gid.to_string());
            let hint = if e == Errno::EACCES || e == Errno::EPERM {
                format!(
                    "run as a member of group {group} (AGNOS: the `comma` user is in `gpu`; `usermod -aG {group} USER` then log in again); \
                     if the mode allows it, SELinux denies it: `ls -Z {p}` and `dmesg | grep avc` (Android: the hexrpc domain needs its policy)"
                )
            } else {
                "the driver refused the open: see `dmesg | grep -i -e adsprpc -e fastrpc -e ion`".into()
            };
            Err((format!("{p} {owner} cannot be opened by this process: {e}"), hint))
        }
    };
    push(steps, name, r);
    NodeFacts { stat: Some(st) }
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

/// The probe's result.
pub struct Report {
    /// The board whose facts were used.
    pub board: &'static Board,
    /// How it was chosen.
    pub source: BoardSource,
    /// Every step, in [`STEPS`] order.
    pub steps: Vec<Step>,
}

impl Report {
    /// True when a step failed.
    pub fn failed(&self) -> bool {
        self.steps.iter().any(|s| s.status == Status::Fail)
    }

    /// `(passed, failed, skipped)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.steps.iter().fold((0, 0, 0), |(p, f, s), x| match x.status {
            Status::Pass => (p + 1, f, s),
            Status::Fail => (p, f + 1, s),
            Status::Skip => (p, f, s + 1),
        })
    }

    /// One line: counts and the first failure.
    pub fn summary(&self) -> String {
        let (p, f, s) = self.counts();
        match self.steps.iter().find(|s| s.status == Status::Fail) {
            None => format!("probe: {p} passed, 0 failed, {s} skipped: the DSP is usable from this process"),
            Some(first) => format!("probe: {p} passed, {f} failed, {s} skipped: first failure {}: {}", first.name, first.detail),
        }
    }
}

/// Which FastRPC driver and allocator the device (or the bench) exposes, and whether they are
/// the board's. On the bench the simulated nodes of both bench kernels are looked for; on a
/// device the standard `/dev` nodes. `Ok(None)`: no driver node together with an allocator node
/// was found (the node steps then name what the board needs).
fn kernel_step<S: Syscalls>(sys: &S, board: &Board) -> Result<Option<String>, (String, String)> {
    let exists = |p: &CStr| sys.stat(p, true).is_ok();
    let found = if hexrpc_bsp::BENCH_BOARDS.iter().any(|b| b.name == board.name) {
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
        let suggest =
            hexrpc_bsp::generic_board(&k).map_or("no board of this build fits".to_string(), |b| format!("pass --board {}", b.name));
        return Err((
            format!("found the {what}, but board {} is for the {} driver with {}", board.name, board.abi.name(), board.allocator.name()),
            suggest,
        ));
    }
    Ok(Some(format!("{what}: the ABI of board {}", board.name)))
}

/// Runs the probe on `sys` for the board `access` grants. The `library` step loads `library`
/// through the reverse file service when one is given, and is skipped (saying why) otherwise.
pub fn run<S: Syscalls + Clone + Send + Sync + 'static>(
    sys: S,
    access: &DeviceAccess,
    source: BoardSource,
    host: Host,
    library: Option<&ProbeLibrary>,
) -> Report {
    let board: &'static Board = access.board();
    let mut steps = Vec::new();
    let board_step = match source {
        BoardSource::Given => Ok(format!("{} ({}), given with --board", board.name, board.description)),
        BoardSource::Detected => Ok(format!("{} ({}), detected from the device-tree model", board.name, board.description)),
        BoardSource::Bench => Ok(format!("{} ({})", board.name, board.description)),
        BoardSource::Assumed => Err((
            format!("not detected (device-tree model {}); the {} facts are used for the checks below", model_text(), board.name),
            "pass --board comma-three, msm-android, qcom-rb5 or upstream (or add the model to hexrpc-bsp)".into(),
        )),
    };
    push(&mut steps, "board", board_step);
    match kernel_step(&sys, board) {
        Ok(Some(detail)) => steps.push(Step { name: "kernel", status: Status::Pass, detail, hint: String::new() }),
        Ok(None) => steps.push(Step {
            name: "kernel",
            status: Status::Skip,
            detail: "no FastRPC driver node together with an allocator node (looked for /dev/adsprpc-smd, /dev/fastrpc-cdsp[-secure], \
                     /dev/ion, /dev/dma_heap/system, or the bench's nodes)"
                .into(),
            hint: String::new(),
        }),
        Err(e) => {
            push(&mut steps, "kernel", Err(e));
        }
    }
    let alloc_what = match board.allocator {
        hexrpc_bsp::Allocator::Ion49 => "the ION allocator",
        hexrpc_bsp::Allocator::DmaHeap => "the dma-buf heap",
    };
    let ion = node(&sys, host, board.abi, board.ion_path, alloc_what, &mut steps, "ion-node");
    let rpc = node(&sys, host, board.abi, board.rpc_path, "the FastRPC driver", &mut steps, "rpc-node");
    groups(host, &[&ion, &rpc], &mut steps);
    selinux(host, &mut steps);
    shell_file(&sys, board, &mut steps);
    let passed = |n: &str| steps.iter().any(|s| s.name == n && s.status == Status::Pass);
    // The heap needs only ION; the rest of the chain needs the FastRPC node and the shell too.
    let blocked: Vec<&'static str> = ["ion-node", "rpc-node", "shell-file"].into_iter().filter(|n| !passed(n)).collect();
    let mut chain_steps = Vec::new();
    if passed("ion-node") {
        chain(sys, access, library, blocked.is_empty(), &mut chain_steps);
    }
    let chain_failed = chain_steps.iter().find(|s| s.status == Status::Fail).map(|s| s.name);
    steps.extend(chain_steps);
    for name in STEPS {
        if !steps.iter().any(|s| s.name == *name) {
            let detail = if !blocked.is_empty() {
                format!("not run: needs {}, which failed", blocked.join(" and "))
            } else if let Some(failed) = chain_failed {
                format!("not run: needs {failed}, which failed")
            } else {
                format!(
                    "not run: no device test library (installed at {}) and no --library LIB.so (a library built with `hexrpc build-lib`)",
                    crate::device::INSTALLED.join(" or ")
                )
            };
            steps.push(Step { name, status: Status::Skip, detail, hint: String::new() });
        }
    }
    steps.sort_by_key(|s| STEPS.iter().position(|n| *n == s.name));
    Report { board, source, steps }
}

fn model_text() -> String {
    match device_tree_model() {
        Some(m) => format!("{:?}", m.trim_end_matches(['\0', '\n'])),
        None => "unreadable".into(),
    }
}

/// The device-tree model string, if readable.
pub fn device_tree_model() -> Option<String> {
    ["/proc/device-tree/model", "/sys/firmware/devicetree/base/model"]
        .iter()
        .find_map(|p| crate::io::read_bounded(std::path::Path::new(p), 4096).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn groups(host: Host, nodes: &[&NodeFacts], steps: &mut Vec<Step>) {
    if host == Host::Bench {
        steps.push(Step { name: "groups", status: Status::Skip, detail: "bench: the nodes are simulated".into(), hint: String::new() });
        return;
    }
    let Some(mine) = process_groups() else {
        steps.push(Step { name: "groups", status: Status::Skip, detail: "/proc/self/status unreadable".into(), hint: String::new() });
        return;
    };
    let names: Vec<String> = mine.iter().map(|g| id_name("/etc/group", *g)).collect();
    let uid_root = crate::io::read_text(std::path::Path::new("/proc/self/status"), 1 << 20)
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").and_then(|r| r.split_whitespace().nth(1)).map(|e| e == "0")))
        .unwrap_or(false);
    let mut missing = Vec::new();
    for n in nodes {
        let Some(st) = n.stat else { continue };
        let other_rw = st.mode & 0o006 == 0o006;
        if !uid_root && !other_rw && !mine.contains(&st.gid) {
            missing.push(id_name("/etc/group", st.gid));
        }
    }
    missing.dedup();
    let r = if missing.is_empty() {
        Ok(format!("this process's groups: {}", names.join(" ")))
    } else {
        Err((
            format!("not a member of {} (the nodes' group); this process's groups: {}", missing.join(", "), names.join(" ")),
            format!(
                "add the user to {} (AGNOS: `usermod -aG gpu USER`; the .deb's unit runs as user hexrpc in group gpu)",
                missing.join(", ")
            ),
        ))
    };
    push(steps, "groups", r);
}

fn selinux(host: Host, steps: &mut Vec<Step>) {
    if host == Host::Bench {
        steps.push(Step { name: "selinux", status: Status::Skip, detail: "bench: no kernel policy applies".into(), hint: String::new() });
        return;
    }
    let enforce = crate::io::read_text(std::path::Path::new("/sys/fs/selinux/enforce"), 16).ok();
    let context = crate::io::read_text(std::path::Path::new("/proc/self/attr/current"), 4096)
        .ok()
        .map(|c| c.trim_end_matches(['\0', '\n']).to_string())
        .filter(|c| !c.is_empty() && c != "unconfined");
    let detail = match (enforce.as_deref().map(str::trim), context) {
        (None, _) => "SELinux is not enabled in this kernel".to_string(),
        (Some(mode), ctx) => format!(
            "SELinux {}, this process runs as {}",
            if mode == "1" { "enforcing" } else { "permissive" },
            ctx.unwrap_or_else(|| "an unreadable context".into())
        ),
    };
    steps.push(Step { name: "selinux", status: Status::Pass, detail, hint: String::new() });
}

fn shell_file<S: Syscalls>(sys: &S, board: &Board, steps: &mut Vec<Step>) {
    let path = board.shell_path;
    let p = path.to_string_lossy();
    let where_hint = format!(
        "the DSP firmware files must be present at {}: on AGNOS the /dsp partition is mounted at boot; on Android /vendor/dsp",
        p.rsplit_once('/').map(|(d, _)| d).unwrap_or("/")
    );
    let r = (|| {
        let fd = sys.open(path, OpenFlags::READ_ONLY).map_err(|e| (format!("{p}: {e}"), where_hint.clone()))?;
        let mut head = [0u8; core::mem::size_of::<elf::Elf32Ehdr>()];
        let got = sys.pread(fd.raw(), &mut head, 0);
        let st = sys.fstat(fd.raw());
        let _ = sys.close(fd);
        let n = got.map_err(|e| (format!("{p}: read: {e}"), where_hint.clone()))?;
        let size = st.map(|s| s.size).unwrap_or(0);
        if elf::Elf::header_of(&head[..n]).map(|h| h.e_machine.get()) != Ok(elf::EM_HEXAGON) {
            return Err((
                format!("{p} is not a Hexagon ELF ({n} bytes read)"),
                "the shell file is damaged or for another DSP: reflash the DSP partition".into(),
            ));
        }
        if size > u64::from(board.limits.max_shell_len) {
            return Err((
                format!(
                    "{p} is {} (the driver takes at most {})",
                    crate::human::bytes(size),
                    crate::human::bytes(u64::from(board.limits.max_shell_len))
                ),
                "this shell is too large for the downstream driver's INIT".into(),
            ));
        }
        Ok(format!("{p}: {}, Hexagon ELF", crate::human::bytes(size)))
    })();
    push(steps, "shell-file", r);
}

fn push(steps: &mut Vec<Step>, name: &'static str, r: Result<String, (String, String)>) -> bool {
    let ok = r.is_ok();
    steps.push(match r {
        Ok(detail) => Step { name, status: Status::Pass, detail, hint: String::new() },
        Err((detail, hint)) => Step { name, status: Status::Fail, detail, hint },
    });
    ok
}

fn driver_hint(e: &HalError) -> String {
    match e.cause {
        Cause::Os(Errno::EACCES) | Cause::Os(Errno::EPERM) => {
            "permission refused by the driver or SELinux: `dmesg | grep -e avc -e adsprpc`".into()
        }
        Cause::Os(Errno::ENOMEM) => "the heap is exhausted or the board's heap id is wrong: check `--board`".into(),
        _ => "see `dmesg | grep -i -e adsprpc -e fastrpc -e ion` and attach `hexrpc report` to a bug".into(),
    }
}

/// Runs the session chain until one step fails; dropping the stages on return releases
/// everything.
fn chain<S: Syscalls + Clone + Send + Sync + 'static>(
    sys: S,
    access: &DeviceAccess,
    library: Option<&ProbeLibrary>,
    beyond_heap: bool,
    steps: &mut Vec<Step>,
) {
    let board: &Board = access.board();
    let fail = |e: &HalError| (hal_detail(e), driver_hint(e));
    let ion = match HeapOpened::open(sys.clone(), access) {
        Ok(ion) => ion,
        Err(e) => {
            push(steps, "ion-alloc", Err(fail(&e)));
            return;
        }
    };
    let alloc = (|| {
        let mut lease = ion
            .alloc(4096)
            .map_err(|e| (format!("heap {} flags {:#x}: {}", board.heap_id, board.heap_flags, hal_detail(&e)), driver_hint(&e)))?;
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        lease.write_at(0, &pattern).map_err(|e| (e.to_string(), String::new()))?;
        let mut back = vec![0u8; 4096];
        lease.read_at(0, &mut back).map_err(|e| (e.to_string(), String::new()))?;
        if back != pattern {
            return Err((
                "the ION buffer did not read back what was written".to_string(),
                "the heap's cache flags are wrong for this board".into(),
            ));
        }
        Ok(format!("4 KiB from heap {} (mask {:#x}) flags {:#x}, mapped and verified", board.heap_id, board.heap_mask(), board.heap_flags))
    })();
    if !push(steps, "ion-alloc", alloc) || !beyond_heap {
        return;
    }
    let shell_path = board.shell_path.to_string_lossy().into_owned();
    let staged = match ion.stage_shell() {
        Ok(s) => s,
        Err(e) => {
            push(steps, "shell-stage", Err((format!("{shell_path}: {}", hal_detail(&e)), driver_hint(&e))));
            return;
        }
    };
    push(steps, "shell-stage", Ok(format!("{shell_path}: {} staged in ION", crate::human::bytes(staged.shell_len() as u64))));
    let channel = match staged.open_channel() {
        Ok(c) => c,
        Err(e) => {
            push(steps, "channel", Err(fail(&e)));
            return;
        }
    };
    push(
        steps,
        "channel",
        Ok(format!(
            "GETINFO on channel {} (CDSP): info {:#x}, SMMU {}",
            board.channel,
            channel.info(),
            if channel.info() & 1 != 0 { "on" } else { "off" }
        )),
    );
    let process = match channel.create_process() {
        Ok(p) => p,
        Err(e) => {
            push(steps, "process", Err(fail(&e)));
            return;
        }
    };
    push(steps, "process", Ok("INIT created the user process on the DSP".into()));
    steps.push(pm_qos_step(process.pm_qos()));
    let session = match process.attach_listener() {
        Ok(session) => session,
        Err(e) => {
            push(steps, "listener", Err(fail(&e)));
            return;
        }
    };
    push(steps, "listener", Ok("reverse-RPC listener registered (handle 3 init2)".into()));
    let Some(lib) = library else { return };
    let policy = match hexrpc_runtime::reverse::FilePolicy::for_board(board) {
        Ok(p) => p,
        Err(e) => {
            push(steps, "library", Err((format!("the board's file policy is invalid: {e:?}"), String::new())));
            return;
        }
    };
    let served = match hexrpc_runtime::ServedSession::serve(session, policy) {
        Ok(s) => s,
        Err(e) => {
            push(steps, "library", Err((e.to_string(), String::new())));
            return;
        }
    };
    let r = served.open_library(&lib.name, lib.image).map(|l| {
        let handle = l.remote_handle().unwrap_or(0);
        format!(
            "{} ({}) fetched by the DSP through the reverse file service and loaded, handle {handle:#x}",
            lib.name,
            crate::human::bytes(lib.image.len() as u64)
        )
    });
    push(steps, "library", r.map_err(|e| e.hal().map_or_else(|| (e.to_string(), String::new()), |h| fail(&h))));
}

/// The PM-QoS vote of the channel (sent right after its INIT): informative, never gating (a
/// session works without it, with slower wake-ups).
fn pm_qos_step(state: hexrpc_hal::PmQosState) -> Step {
    use hexrpc_hal::PmQosState;
    let (status, detail, hint) = match state {
        PmQosState::Sent => (
            Status::Pass,
            "FASTRPC_CONTROL_LATENCY taken: the CPU-DMA latency of the device tree (qcom,rpc-latency-us) holds while this file is open"
                .into(),
            String::new(),
        ),
        PmQosState::NotAvailable => {
            (Status::Skip, "this board's driver (upstream fastrpc.c) has no PM-QoS request; nothing sent".into(), String::new())
        }
        PmQosState::NotAsked => (Status::Skip, "the latency policy asks for no vote".into(), String::new()),
        PmQosState::Refused(e) => (
            Status::Skip,
            format!("the kernel refused FASTRPC_CONTROL_LATENCY ({e}); calls pay the CPU's deep-idle wake-up"),
            "the device tree's fastrpc node needs qcom,rpc-latency-us (the driver refuses a zero latency)".into(),
        ),
    };
    Step { name: "pm-qos", status, detail, hint }
}

/// `{"board", "board_source", "steps": [{"name", "status", "detail", "hint"}], "summary": {...}}`.
pub fn to_json(report: &Report) -> String {
    let mut out = String::new();
    let mut top = json::Object::new(&mut out);
    top.str("board", report.board.name);
    top.str(
        "board_source",
        match report.source {
            BoardSource::Given => "given",
            BoardSource::Detected => "detected",
            BoardSource::Assumed => "assumed",
            BoardSource::Bench => "bench",
        },
    );
    top.raw("steps", |o| {
        o.push('[');
        for (i, s) in report.steps.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let mut e = json::Object::new(o);
            e.str("name", s.name).str("status", s.status.name()).str("detail", &s.detail).str("hint", &s.hint);
            e.end();
        }
        o.push(']');
    });
    let (p, f, s) = report.counts();
    top.raw("summary", |o| {
        let mut e = json::Object::new(o);
        e.num("passed", p as u64).num("failed", f as u64).num("skipped", s as u64).str("line", &report.summary());
        e.end();
    });
    top.end();
    out.push('\n');
    out
}

/// The readable report: one aligned line per step, the hint under a failed one, a summary.
pub fn to_text(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "hexrpc probe on board {} ({})", report.board.name, report.board.description);
    for s in &report.steps {
        let _ = writeln!(out, "{}  {:<12} {}", s.status.tag(), s.name, crate::io::escape(&s.detail));
        if !s.hint.is_empty() {
            let _ = writeln!(out, "      {:<12} what to do: {}", "", crate::io::escape(&s.hint));
        }
    }
    let _ = writeln!(out, "{}", crate::io::escape(&report.summary()));
    out
}
