//! `hexrpc`: diagnose and exercise the Hexagon compute DSP through FastRPC from `adb shell` or an
//! AGNOS shell, and run the acceptance report on the isolated bench where no DSP is present.
#![forbid(unsafe_code)]
// Without the bench (the vendor build), the bench commands parse but refuse; the pieces only
// they use are then unused.
#![cfg_attr(not(feature = "bench"), allow(dead_code))]

mod abi;
mod capture;
#[cfg(feature = "bench")]
mod checks;
mod device;
#[cfg(feature = "bench")]
mod figures;
mod human;
mod io;
mod json;
mod logging;
mod probe;
mod progress;
mod report;
mod run;
mod selftest;

use std::io::Write as _;

use std::process::ExitCode;

const USAGE: &str = "\
hexrpc - drive the Hexagon compute DSP (CDSP) through FastRPC, safely

USAGE:
    hexrpc [GLOBAL OPTIONS] <COMMAND> [OPTIONS]

COMMANDS:
    probe       Health check of the device: nodes, ION, shell, channel, DSP process, listener
    selftest    Run the acceptance report (on the bench when no DSP is present)
    bench       Measure launch overhead, crossings and allocations per launch, and the
                reverse file service's throughput
    abi         Print the kernel ABI (structs, ioctl numbers, constants) of this build
    build-lib   Build a DSP library (.so) from kernel C: generated entry + kernel, for Hexagon
    run         Launch a library's kernel with buffers from files, on the device or the bench
    reverse-replay
                Feed recorded DSP reverse requests through the hardened file service
    capture     Record a session's reverse-RPC requests as files reverse-replay reads
    report      Probe + selftest + kernel version + DSP kernel log + versions in one tar
    help        Print this help, or a command's help: hexrpc help <COMMAND>

GLOBAL OPTIONS:
    -v, --verbose   More log output (repeat for more: info, debug, trace)
    -q, --quiet     Less log output (errors only; twice: none)
    -h, --help      Print help
    -V, --version   Print the version

ENVIRONMENT:
    HEXRPC_LOG      Log level when neither -v nor -q is given:
                    off, error, warn (default), info, debug, trace

EXIT STATUS:
    0   success
    1   a check failed, or the operation failed
    2   usage error

Logs go to stderr (to logcat with tag 'hexrpc' on Android); reports go to stdout.
";

const SELFTEST_HELP: &str = "\
hexrpc selftest - run the acceptance report

USAGE:
    hexrpc selftest [--bench | --device [--seam bench]] [--board NAME]
                    [--library LIB.so] [--json]

Checks in the seed's acceptance order: parameter layout, view offsets, fd/mapping
reclamation, reverse-RPC file permissions, timeouts, concurrency, then numerics
and latency. Each line is PASS, FAIL or SKIP with the measured figure; SKIP says
why the check could not run here.

--device opens the DSP nodes through the probe chain (a missing node is a FAIL
that names it) and then runs the device test library on the DSP: v2 launches at
view offsets 0 and odd (outputs checked), v1 refusal, the process's own fd and
mapping counts before and after a session, the library's fopen of forbidden
paths refused and counted, a 200 ms deadline on a 2 s kernel, 8 threads. Checks
that need the bench are SKIP there, with the reason; no simulated figure is
printed under the DEVICE header. --bench runs the bench-only checks and the same
device checks on the bench.

OPTIONS:
    --bench           Run on the isolated bench (simulated kernel and DSP)
    --device          Run on the real device (fails if the DSP nodes are missing)
    --seam bench      Test seam for --device: the bench stands in for the device
                      nodes (the header says so; figures are not device figures)
    --board NAME      Board facts for --device (default: detected); with --bench the
                      bench kernel: bench (ION 4.9 + downstream adsprpc, the
                      default) or bench-upstream (dma-heap + upstream fastrpc)
    --library FILE    The device test library (default: /usr/lib/hexrpc/ or
                      /vendor/etc/hexrpc/libhexrpc_selftest.so)
    --json            Print {\"platform\": \"bench\"|\"device\", \"checks\": [{\"name\",
                      \"stage\", \"status\": \"pass\"|\"fail\"|\"skip\", \"figure\", \"detail\"}]}
    -h, --help        Print this help

Without --bench or --device, the device is used when /dev/adsprpc-smd exists,
the bench otherwise; the first line of the report says which.

EXIT STATUS: 0 when no check failed, 1 when one failed, 2 on usage errors.
";

const PROBE_HELP: &str = "\
hexrpc probe - step-by-step health check of the DSP prerequisites

USAGE:
    hexrpc probe [--device | --bench] [--board NAME] [--library LIB.so] [--json]
                 [--output FILE]

Checks every prerequisite, even after one failed, and says what to do about
each failure:
    board         detected from the device-tree model (else from the kernel's
                  nodes), or --board (never assumed silently: an unknown model
                  fails this step)
    kernel        which FastRPC driver (downstream /dev/adsprpc-smd or upstream
                  /dev/fastrpc-cdsp) and allocator (ION or /dev/dma_heap/system)
                  the kernel exposes, and whether they are the board's
    ion-node      /dev/ion: owner, group, mode, SELinux label, openable by us
    rpc-node      /dev/adsprpc-smd: the same (an upstream /dev/fastrpc-* is named)
    groups        this process's groups against the nodes' group
    selinux       enforcing or not, this process's context
    shell-file    the DSP shell file: present, Hexagon ELF, size
then the session chain as far as it can go:
    ion-alloc     4 KiB from the board's ION heap, mapped and verified
    shell-stage   the shell staged in ION
    channel       GETINFO on the compute DSP channel (SMMU flag), CONTROL kalloc
    process       creating the user process on the DSP (INIT)
    listener      registering the reverse-RPC listener (handle 3)
    library       loading a library through the reverse file service (with
                  --library; on the bench a built-in test library)
and ends with a summary line. Everything acquired is released before it exits.

OPTIONS:
    --device        Probe the real device (the default)
    --bench         Probe the isolated bench instead (simulated kernel and DSP)
    --board NAME    Board facts to use: comma-three, msm-android, qcom-rb5,
                    upstream (default: detected from /proc/device-tree/model, else
                    from the kernel's nodes); with --bench: bench (downstream
                    kernel, the default) or bench-upstream
    --library FILE  A Hexagon library (from `hexrpc build-lib`) for the library step
    --json          Print {\"board\", \"board_source\", \"steps\": [{\"name\", \"status\":
                    \"pass\"|\"fail\"|\"skip\", \"detail\", \"hint\"}], \"summary\"}
    --output FILE   Write the report to FILE instead of stdout: a new file in the
                    same directory renamed over it; a symlink or device as FILE is
                    refused; - is stdout
    -h, --help      Print this help

EXIT STATUS: 0 when no step failed, 1 when one failed or the report could not be
written, 2 on usage errors.
";

const BUILD_LIB_HELP: &str = "\
hexrpc build-lib - build a Hexagon library from a kernel written in C

USAGE:
    hexrpc build-lib KERNEL.c --signature SIG -o LIB.so [OPTIONS]
    hexrpc build-lib [OPTIONS] -- KERNEL.c      (a file name that starts with -)
    hexrpc build-lib KERNEL.c [MORE.c...] --table [FILE:]NAME:SIG... -o LIB.so [OPTIONS]

Generates the DSP-side `entry` wrapper for the kernel's signature (launch ABI v2
unless --v1), compiles it and KERNEL.c with clang-19 for Hexagon (v65, HVX 128 B,
-O2, -fPIC, freestanding), links a shared object with ld.lld-19 with every
section aligned to 4 KiB, and records the signature and ABI version in it (a
.note.hexrpc section that `hexrpc run` checks).

Checks: the kernel function exists and matches the signature (it is compiled
against a prototype generated from SIG), every symbol the library imports is
one the DSP provides (others are named), -o is not the kernel source, and the
kernel is a file. Each build starts from a fresh LIB.so.build/ work directory,
where the intermediate files stay. Needs clang-19 and ld.lld-19
(apt-get install clang-19 lld-19).

SIGNATURE:
    Comma-separated parameter kinds, buffers first: buf, i8, u8, i16, u16, i32,
    u32, i64, u64, f16, f32, f64. Example: --signature buf,buf,buf,i32,f32

OPTIONS:
    --signature SIG   The kernel's parameters (required)
    -o, --output LIB  The shared object to write (required)
    --kernel NAME     The kernel's C function name (default: KERNEL.c's file stem)
    --table [FILE:]NAME:SIG
                      A kernel table (repeatable, in table order): one library whose
                      entry runs single v2 launches of kernel 0 and batches of many
                      launches in one call (hexrpc-runtime's Batch). Kernels may come
                      from one file with several functions or from several files
                      (FILE defaults to the first KERNEL.c); a kernel returning int
                      stops a batch with its status when non-zero
    --v1              Generate tinygrad's v1 entry (only offset-0 views are safe)
    --power           Add tinygrad's HAP_power_set request (DCVS off, turbo corner)
    --cflag FLAG      Extra flag for the kernel's compilation (repeatable), e.g.
                      --cflag=-mllvm --cflag=-hexagon-autohvx=true
    --clang PATH      Compiler (default: clang-19)
    --lld PATH        Linker (default: ld.lld-19)
    -h, --help        Print this help

EXIT STATUS: 0 on success, 1 when the build fails, 2 on usage errors.
";

const RUN_HELP: &str = "\
hexrpc run - launch a library on the device or on the bench

USAGE:
    hexrpc run LIBRARY.so --signature SIG [--abi v1|v2] [--bench | --device]
               [--arg SPEC]... [--repeat N] [--deadline-ms MS] [--json]
               [--capture DIR]

Opens LIBRARY.so on the DSP (served through the reverse file service), launches
its entry N times with one --arg per parameter of SIG, in order, and writes the
output buffers. The library's build record (from build-lib) must agree with
--signature and --abi; libraries built elsewhere are taken as described.

ARGUMENTS:
    buf parameter   comma-separated key=value: in=FILE (initial contents),
                    out=FILE (written after the last launch), size=BYTES (default:
                    the size of in), offset=BYTES (the view's offset inside its own
                    lease, default 0). Each buffer gets its own ION lease of
                    offset+size bytes rounded up to a page.
    scalar          the literal value (23, -1.5), parsed by the signature's type

OPTIONS:
    --signature SIG   The kernel's parameters, as for build-lib (required)
    --abi v1|v2       The launch ABI of the library's entry (default v2); v1 with a
                      non-zero offset is refused before anything is sent
    --bench           Run on the bench: the library runs under qemu-hexagon
                      (needs clang-19, ld.lld-19 and qemu-hexagon)
    --device          Run on the device (the default when /dev/adsprpc-smd exists)
    --arg SPEC        One per parameter, in order
    --repeat N        Launch N times (default 1); times are reported as p50/p99
    --deadline-ms MS  Abandon a launch that has not returned after MS milliseconds
    --json            Print {\"library\", \"abi\", \"mode\", \"launches\",
                      \"dsp_us\": {\"p50\", \"p99\"}, \"round_trip_us\": {\"p50\", \"p99\"},
                      \"outputs\": [{\"arg\", \"file\", \"bytes\"}]}
    --capture DIR     Record the session's reverse-RPC requests into DIR as
                      `hexrpc capture` does (written even when the launch fails)
    -h, --help        Print this help

Prints the DSP-reported time around the kernel and the host round trip. On the
bench both are emulated figures (host clock under qemu-hexagon), never device
figures.

EXIT STATUS: 0 on success, 1 when the launch failed or was refused (the reason
on stderr), 2 on usage errors.
";

const REPLAY_HELP: &str = "\
hexrpc reverse-replay - replay DSP reverse requests through the file service

USAGE:
    hexrpc reverse-replay [--json] [--policy FILE] REQUEST...

Feeds each request file through the reverse file service exactly as if the DSP
had sent it (on the bench platform, with the bench board's default policy unless
--policy is given) and prints, per file, the status returned (0 or the AEE code)
and the length of the reply. For security review: files may be truncated or
hostile; a malformed or unreadable file is reported as such and the rest still
run. All files run in one service session, in order. Only regular files are read
(a device, FIFO or directory is refused before reading), each at most 1 MiB +
512 bytes; file names are printed with control characters escaped.

REQUEST FILE FORMAT (little-endian):
    4 bytes   \"HXRQ\"
    u8        length of the module name, then that many bytes: apps_std, apps_mem,
              ... (the module is opened through apps_remotectl first and its
              handle used); empty means: use the raw handle below
    u32       handle (only when the name is empty; 0 is apps_remotectl)
    u32       scalars word
    rest      the request payload as next2 delivers it

POLICY FILE: lines of `dir /absolute/dir`, `max_request N`, `max_file_bytes N`,
`max_handles N`, `max_map_bytes N`; `#` starts a comment.

OPTIONS:
    --json          Print {\"results\": [{\"file\", \"status\", \"reply_len\", \"error\"}]}
                    (status null for a malformed file)
    --policy FILE   The file policy to apply instead of the board's default
    -h, --help      Print this help

EXIT STATUS: 0 when every file was read, well-formed and answered; 1 when any
file could not be used (missing, not a regular file, too large, malformed) or the
service failed; 2 on usage errors (no files, unreadable or invalid policy).
";

const CAPTURE_HELP: &str = "\
hexrpc capture - record the DSP's reverse-RPC requests of a session

USAGE:
    hexrpc capture --dir DIR [--device | --bench] [--board NAME] [--library LIB.so]

Starts a session (on the device, or on the bench with --bench), installs a tap on
the reverse file service, opens the library (the DSP fetches it through the
service) and, for the device test library (the default), runs one launch that
makes the library fopen a forbidden and an allowlisted path. Every request the
DSP sent is written to DIR as NNNN-MODULE-mMETHOD.hxrq (the request file format
of `hexrpc reverse-replay`), with DIR/index.json listing file, module, handle,
scalars word and the status the service answered. Replay them on a desk with
`hexrpc reverse-replay DIR/*.hxrq`.

OPTIONS:
    --dir DIR       Where to write the files (created; must not hold .hxrq files)
    --device        Capture on the device (the default)
    --bench         Capture on the bench (simulated kernel and DSP)
    --board NAME    Board facts (default: detected)
    --library FILE  The library to open instead of the device test library
    -h, --help      Print this help

EXIT STATUS: 0 when the session ran and the files were written, 1 otherwise, 2 on
usage errors.
";

const REPORT_HELP: &str = "\
hexrpc report - one file to attach to a bug

USAGE:
    hexrpc report [-o FILE.tar] [--board NAME] [--library LIB.so]

Writes a tar archive holding:
    probe.json      `hexrpc probe --json` on this machine
    selftest.json   `hexrpc selftest --json` (device when /dev/adsprpc-smd exists,
                    else the bench, as its \"platform\" says)
    kernel.txt      /proc/version
    dmesg.txt       kernel log lines about adsprpc, fastrpc, ION, the CDSP, SMMU and
                    SELinux denials (from /dev/kmsg; says so when unreadable)
    versions.txt    hexrpc, the device-tree model, /VERSION or build.prop, os-release

OPTIONS:
    -o, --output FILE  The archive (default: hexrpc-report.tar; - for stdout)
    --board NAME       Board facts (default: detected)
    --library FILE     The device test library (default: its installed path)
    -h, --help         Print this help

EXIT STATUS: 0 when the archive was written (whatever the checks found), 1 when it
could not be written, 2 on usage errors.
";

const BENCH_HELP: &str = "\
hexrpc bench - measure what hexrpc costs

USAGE:
    hexrpc bench [--json] [--long]

Measures, on this machine:
    launch_overhead_ns      packing a 3-buffer v2 launch plus one INVOKE_ATTRS through
                            a syscall seam that returns at once (hexrpc's own cost)
    bench_round_trip_ns     a whole launch through the HAL on the bench (simulated
                            kernel and DSP; median of 2000)
    crossings_per_launch    kernel crossings (ioctls) per steady-state launch
    allocations_per_launch  heap allocations per steady-state launch
    reverse_stream_mib_s    a 4 MiB library image streamed through 64 KiB freads of
                            the reverse file service
    memcpy_mib_s            a plain memcpy of the same bytes in the same run
    batch_crossings_per_model   the model network (5 nodes) as one batch: ioctls per run
    batch_maps_per_model        HAP_mmaps per batched run (one per distinct lease)
    batch_pack_ns               building the model's batch (5 records), host time
    model_latency_us            {batch, per_kernel}: simulated latency per model run on
                                the bench's cost model (60 us/crossing + 2 us/KiB)
Bench figures are host time of a simulated kernel and DSP, never device figures.

OPTIONS:
    --json      Print an object of the figures above plus \"launches\",
                \"platform\": \"bench\" and \"simulated\": true
    --long      Ten times as many repetitions
    -h, --help  Print this help

EXIT STATUS: 0 on success, 1 if a measurement failed, 2 on usage errors.
";

const ABI_HELP: &str = "\
hexrpc abi - print the kernel ABI this build was compiled for

USAGE:
    hexrpc abi [--json]

Prints every ABI struct (size, alignment, field offsets), every ioctl request
number and the named constants, with the kernel headers' own names
(fastrpc_ioctl_invoke_attrs, FASTRPC_IOCTL_INVOKE_ATTRS, ION_SYSTEM_HEAP_ID, ...).
Compare them with the headers of the device's kernel (include/uapi/linux/
adsprpc_shared.h, ion.h, msm_ion.h) before trusting this build on a new kernel.

OPTIONS:
    --json      Print {\"structs\": {NAME: {\"size\", \"align\", \"fields\": {FIELD: OFFSET}}},
                \"ioctls\": {NAME: NUMBER}, \"constants\": {NAME: VALUE}} (numbers in decimal)
    -h, --help  Print this help

EXIT STATUS: 0 on success, 1 if the output cannot be written, 2 on usage errors.
";

struct Usage(String);

#[derive(Default)]
struct BuildLib {
    kernel: Option<std::path::PathBuf>,
    /// More kernel sources (a kernel table may come from several).
    more: Vec<std::path::PathBuf>,
    /// `--table [FILE:]NAME:SIG`, in table order.
    table: Vec<String>,
    signature: Option<String>,
    output: Option<std::path::PathBuf>,
    kernel_name: Option<String>,
    v1: bool,
    power: bool,
    cflags: Vec<std::ffi::OsString>,
    clang: Option<std::path::PathBuf>,
    lld: Option<std::path::PathBuf>,
}

impl<E: std::fmt::Display> From<E> for Usage {
    fn from(e: E) -> Self {
        Usage(e.to_string())
    }
}

enum Command {
    Help(Option<String>),
    Version,
    Abi {
        json: bool,
    },
    Probe {
        json: bool,
        board: Option<String>,
        output: Option<std::path::PathBuf>,
        bench: bool,
        library: Option<std::path::PathBuf>,
    },
    BuildLib(BuildLib),
    Replay {
        json: bool,
        policy: Option<std::path::PathBuf>,
        files: Vec<std::path::PathBuf>,
    },
    Bench {
        json: bool,
        long: bool,
    },
    Capture {
        dir: Option<std::path::PathBuf>,
        bench: bool,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
    },
    Report {
        output: Option<std::path::PathBuf>,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
    },
    Run(run::RunArgs),
    Selftest {
        json: bool,
        platform: Option<selftest::Platform>,
        seam_bench: bool,
        board: Option<String>,
        library: Option<std::path::PathBuf>,
    },
}

fn parse(args: Vec<std::ffi::OsString>) -> Result<(i32, Command), Usage> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut verbosity = 0i32;
    let mut command: Option<String> = None;
    while command.is_none() {
        match p.next()? {
            Some(Short('v') | Long("verbose")) => verbosity += 1,
            Some(Short('q') | Long("quiet")) => verbosity -= 1,
            Some(Short('h') | Long("help")) => return Ok((verbosity, Command::Help(None))),
            Some(Short('V') | Long("version")) => return Ok((verbosity, Command::Version)),
            Some(Value(v)) => command = Some(v.string()?),
            Some(arg) => return Err(arg.unexpected().into()),
            None => return Err(Usage("no command given (try 'hexrpc help')".into())),
        }
    }
    let command = command.unwrap_or_default();
    let mut json = false;
    let mut platform = None;
    let mut topic = None;
    let mut board = None;
    let mut output = None;
    let mut bl = BuildLib::default();
    let mut policy = None;
    let mut files = Vec::new();
    let mut long = false;
    let mut library = None;
    let mut probe_bench = false;
    let mut seam_bench = false;
    let mut ra = run::RunArgs::default();
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok((verbosity, Command::Help(Some(command)))),
            Short('v') | Long("verbose") => verbosity += 1,
            Short('q') | Long("quiet") => verbosity -= 1,
            Long("json") if matches!(command.as_str(), "abi" | "selftest" | "probe" | "reverse-replay" | "bench") => json = true,
            Long("long") if command == "bench" => long = true,
            Long("policy") if command == "reverse-replay" => policy = Some(p.value()?.into()),
            Value(v) if command == "reverse-replay" => files.push(v.into()),
            Long("board") if matches!(command.as_str(), "probe" | "selftest" | "capture" | "report") => board = Some(p.value()?.string()?),
            Long("library") if matches!(command.as_str(), "probe" | "selftest" | "capture" | "report") => library = Some(p.value()?.into()),
            Long("dir") if command == "capture" => output = Some(p.value()?.into()),
            Long("bench") if command == "capture" => probe_bench = true,
            Long("device") if command == "capture" => probe_bench = false,
            Short('o') | Long("output") if command == "report" => output = Some(p.value()?.into()),
            Long("seam") if command == "selftest" => match p.value()?.string()?.as_str() {
                "bench" => seam_bench = true,
                other => return Err(Usage(format!("--seam {other:?}: the only test seam is 'bench'"))),
            },
            Long("bench") if command == "probe" => probe_bench = true,
            Long("device") if command == "probe" => probe_bench = false,
            Long("output") if command == "probe" => output = Some(p.value()?.into()),
            Long("signature") if command == "build-lib" => bl.signature = Some(p.value()?.string()?),
            Short('o') | Long("output") if command == "build-lib" => bl.output = Some(p.value()?.into()),
            Long("kernel") if command == "build-lib" => bl.kernel_name = Some(p.value()?.string()?),
            Long("v1") if command == "build-lib" => bl.v1 = true,
            Long("power") if command == "build-lib" => bl.power = true,
            Long("cflag") if command == "build-lib" => bl.cflags.push(p.value()?),
            Long("clang") if command == "build-lib" => bl.clang = Some(p.value()?.into()),
            Long("lld") if command == "build-lib" => bl.lld = Some(p.value()?.into()),
            Long("table") if command == "build-lib" => bl.table.push(p.value()?.string()?),
            Value(v) if command == "build-lib" && bl.kernel.is_none() => bl.kernel = Some(v.into()),
            Long("signature") if command == "run" => ra.signature = Some(p.value()?.string()?),
            Long("abi") if command == "run" => ra.abi = Some(p.value()?.string()?),
            Long("bench") if command == "run" => ra.mode = Some(run::Mode::Bench),
            Long("device") if command == "run" => ra.mode = Some(run::Mode::Device),
            Long("arg") if command == "run" => ra.args.push(p.value()?.string()?),
            Long("repeat") if command == "run" => ra.repeat = Some(p.value()?.string()?),
            Long("deadline-ms") if command == "run" => ra.deadline_ms = Some(p.value()?.string()?),
            Long("json") if command == "run" => ra.json = true,
            Long("capture") if command == "run" => ra.capture = Some(p.value()?.into()),
            Value(v) if command == "run" && ra.library.is_none() => ra.library = Some(v.into()),
            Value(v) if command == "build-lib" => bl.more.push(v.into()),
            Long("bench") if command == "selftest" => platform = Some(selftest::Platform::Bench),
            Long("device") if command == "selftest" => platform = Some(selftest::Platform::Device),
            Value(v) if command == "help" && topic.is_none() => topic = Some(v.string()?),
            arg => return Err(Usage(format!("{} (for '{command}')", arg.unexpected()))),
        }
    }
    let cmd = match command.as_str() {
        "help" => Command::Help(topic),
        "abi" => Command::Abi { json },
        "probe" => Command::Probe { json, board, output, bench: probe_bench, library },
        "bench" => Command::Bench { json, long },
        "reverse-replay" => {
            if files.is_empty() {
                return Err(Usage("reverse-replay needs at least one REQUEST file".into()));
            }
            Command::Replay { json, policy, files }
        }
        "build-lib" => {
            if bl.table.is_empty() {
                if bl.kernel.is_none() || bl.signature.is_none() || bl.output.is_none() {
                    return Err(Usage("build-lib needs KERNEL.c, --signature SIG and -o LIB.so (try 'hexrpc build-lib --help')".into()));
                }
                if !bl.more.is_empty() {
                    return Err(Usage("build-lib takes one KERNEL.c, or several with --table".into()));
                }
            } else {
                if bl.kernel.is_none() || bl.output.is_none() {
                    return Err(Usage("build-lib --table needs KERNEL.c and -o LIB.so (try 'hexrpc build-lib --help')".into()));
                }
                if bl.signature.is_some() || bl.kernel_name.is_some() || bl.v1 {
                    return Err(Usage("--table names every kernel with its signature: no --signature, --kernel or --v1 with it".into()));
                }
            }
            Command::BuildLib(bl)
        }
        "run" => {
            if ra.library.is_none() || ra.signature.is_none() {
                return Err(Usage("run needs LIBRARY.so and --signature SIG (try 'hexrpc run --help')".into()));
            }
            Command::Run(ra)
        }
        "capture" => {
            if output.is_none() {
                return Err(Usage("capture needs --dir DIR (try 'hexrpc capture --help')".into()));
            }
            Command::Capture { dir: output, bench: probe_bench, board, library }
        }
        "report" => Command::Report { output, board, library },
        "selftest" => {
            if seam_bench && platform != Some(selftest::Platform::Device) {
                return Err(Usage("--seam bench goes with --device (it substitutes the bench for the device nodes)".into()));
            }
            Command::Selftest { json, platform, seam_bench, board, library }
        }
        other => return Err(Usage(format!("unknown command '{other}' (try 'hexrpc help')"))),
    };
    Ok((verbosity, cmd))
}

fn help(topic: Option<&str>) -> Result<&'static str, Usage> {
    match topic {
        None => Ok(USAGE),
        Some("selftest") => Ok(SELFTEST_HELP),
        Some("abi") => Ok(ABI_HELP),
        Some("probe") => Ok(PROBE_HELP),
        Some("build-lib") => Ok(BUILD_LIB_HELP),
        Some("bench") => Ok(BENCH_HELP),
        Some("reverse-replay") => Ok(REPLAY_HELP),
        Some("capture") => Ok(CAPTURE_HELP),
        Some("report") => Ok(REPORT_HELP),
        Some("run") => Ok(RUN_HELP),
        Some("help") => Ok(USAGE),
        Some(t) => Err(Usage(format!("no help for unknown command '{t}'"))),
    }
}

pub(crate) fn print(s: &str) -> ExitCode {
    print_bytes(s.as_bytes())
}

/// Writes `bytes` to stdout; a closed pipe is not an error, any other failure is reported.
fn print_bytes(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`hexrpc abi | head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            error(&format!("writing to stdout: {e}"));
            ExitCode::from(1)
        }
    }
}

/// Reports an error: on stderr and in the log (logcat on Android).
fn error(msg: &str) {
    logging::error(msg);
}

/// The board for a device command: `--board`, else the device-tree model; when neither names a
/// known board, comma-three's facts with [`probe::BoardSource::Assumed`] (the probe's `board`
/// step then fails and says to pass `--board`).
fn device_board(name: Option<&str>) -> Result<(&'static hexrpc_bsp::Board, probe::BoardSource), Usage> {
    if let Some(n) = name {
        return match hexrpc_bsp::by_name(n) {
            Some(b) if !hexrpc_bsp::BENCH_BOARDS.contains(&b) => Ok((b, probe::BoardSource::Given)),
            _ => Err(Usage(format!("unknown board '{n}' (known: comma-three, msm-android, qcom-rb5, upstream)"))),
        };
    }
    let model = probe::device_tree_model();
    if let Some(b) = model.as_deref().and_then(hexrpc_bsp::detect) {
        return Ok((b, probe::BoardSource::Detected));
    }
    // No board claims the model: the generic board of the driver and allocator the kernel
    // exposes, when it exposes one.
    let sys = hexrpc_drivers::RustixSys;
    let found = hexrpc_bsp::detect_kernel(|p| hexrpc_drivers::Syscalls::stat(&sys, p, true).is_ok());
    match found.as_ref().and_then(hexrpc_bsp::generic_board) {
        Some(b) => {
            log::info!(
                "board not detected (device-tree model {:?}); the kernel exposes {:?}: using {}",
                model.as_deref().unwrap_or("unreadable"),
                found,
                b.name
            );
            Ok((b, probe::BoardSource::Detected))
        }
        None => Ok((&hexrpc_bsp::COMMA_THREE, probe::BoardSource::Assumed)),
    }
}

/// The bench board named by `--board` (default: the downstream bench).
fn bench_board(name: Option<&str>) -> Result<&'static hexrpc_bsp::Board, Usage> {
    match name {
        None => Ok(&hexrpc_bsp::BENCH),
        Some(n) => hexrpc_bsp::BENCH_BOARDS
            .iter()
            .copied()
            .find(|b| b.name == n)
            .ok_or_else(|| Usage(format!("unknown bench board '{n}' (known: bench, bench-upstream)"))),
    }
}

/// Reads a library image for the probe (kept for the life of the process: images are `'static`).
fn load_library(path: &std::path::Path) -> Result<probe::ProbeLibrary, String> {
    let bytes =
        io::read_bounded(path, io::MAX_LIBRARY_FILE).map_err(|e| format!("--library {}: {e}", io::escape(&path.to_string_lossy())))?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(32).collect();
    if name.is_empty() {
        return Err(format!("--library {}: cannot derive a library name from the file name", path.display()));
    }
    Ok(probe::ProbeLibrary { name, image: Box::leak(bytes.into_boxed_slice()) })
}

/// `p` as an operand that no tool can take for an option.
fn operand(p: std::path::PathBuf) -> std::path::PathBuf {
    if p.as_os_str().as_encoded_bytes().starts_with(b"-") {
        std::path::Path::new(".").join(p)
    } else {
        p
    }
}

/// `--table [FILE:]NAME:SIG` -> the table entry (FILE defaults to the first KERNEL.c given).
fn table_entry(text: &str, sources: &[std::path::PathBuf]) -> Result<hexrpc_runtime::launch::build::TableSource, String> {
    use hexrpc_runtime::launch::Signature;
    let mut parts = text.rsplitn(3, ':');
    let (Some(sig), Some(name)) = (parts.next(), parts.next()) else {
        return Err(format!("--table {text:?}: expected [FILE:]NAME:SIG"));
    };
    let source = match parts.next() {
        Some(f) => std::path::PathBuf::from(f),
        None => sources.first().cloned().ok_or_else(|| format!("--table {text:?}: no KERNEL.c given"))?,
    };
    let signature = Signature::parse(sig).map_err(|e| format!("--table {text:?}: {e}"))?;
    Ok(hexrpc_runtime::launch::build::TableSource { source, name: name.to_string(), signature })
}

fn build_lib(bl: BuildLib) -> ExitCode {
    use hexrpc_runtime::launch::{build, EntryOptions, PowerRequest, Signature};
    if !bl.table.is_empty() {
        return build_table(bl);
    }
    let (Some(kernel), Some(sig), Some(out)) = (bl.kernel, bl.signature, bl.output) else {
        return ExitCode::from(2);
    };
    // Operands that start with `-` would reach clang and ld.lld as options: `./` keeps them
    // operands (the intermediates, named after the output, follow).
    let (kernel, out) = (operand(kernel), operand(out));
    let sig = match Signature::parse(&sig) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hexrpc: --signature {sig:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut entry = if bl.v1 { EntryOptions::V1 } else { EntryOptions::V2 };
    if bl.power {
        entry.power_request = Some(PowerRequest::TINYGRAD);
    }
    let defaults = build::BuildOptions::default();
    let opts = build::BuildOptions {
        entry,
        kernel_name: bl.kernel_name,
        kernel_cflags: bl.cflags,
        clang: bl.clang.unwrap_or(defaults.clang),
        lld: bl.lld.unwrap_or(defaults.lld),
        work_dir: None,
    };
    let built = {
        let mut progress = progress::Progress::new();
        progress.step("clang-19 and ld.lld-19");
        build::build_library(&kernel, &sig, &out, &opts)
    };
    match built {
        Ok(report) => print(&format!(
            "built {} (Hexagon shared object, kernel {}, entry {:?}); intermediates: {}\n",
            report.library.display(),
            report.kernel_name,
            opts.entry.version,
            report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
        )),
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}

fn build_table(bl: BuildLib) -> ExitCode {
    use hexrpc_runtime::launch::{build, EntryOptions, PowerRequest};
    let (Some(first), Some(out)) = (bl.kernel, bl.output) else {
        return ExitCode::from(2);
    };
    let mut sources = vec![first];
    sources.extend(bl.more);
    let table: Result<Vec<_>, String> = bl.table.iter().map(|t| table_entry(t, &sources)).collect();
    let table = match table {
        Ok(t) => t,
        Err(e) => {
            eprintln!("hexrpc: {e}");
            return ExitCode::from(2);
        }
    };
    let mut entry = EntryOptions::V2;
    if bl.power {
        entry.power_request = Some(PowerRequest::TINYGRAD);
    }
    let defaults = build::BuildOptions::default();
    let opts = build::BuildOptions {
        entry,
        kernel_name: None,
        kernel_cflags: bl.cflags,
        clang: bl.clang.unwrap_or(defaults.clang),
        lld: bl.lld.unwrap_or(defaults.lld),
        work_dir: None,
    };
    let built = {
        let mut progress = progress::Progress::new();
        progress.step("clang-19 and ld.lld-19");
        build::build_table_library(&table, &out, &opts)
    };
    match built {
        Ok(report) => {
            let kernels: Vec<String> = report
                .kernels
                .iter()
                .enumerate()
                .map(|(i, (n, st))| format!("{i}: {n}{}", if *st { " (returns int)" } else { "" }))
                .collect();
            print(&format!(
                "built {} (Hexagon shared object, kernel table [{}], single launches of kernel 0 and batches); intermediates: {}\n",
                report.library.display(),
                kernels.join(", "),
                report.entry_source.parent().map(|p| p.display().to_string()).unwrap_or_default()
            ))
        }
        Err(e) => {
            eprintln!("hexrpc: build-lib: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(feature = "bench")]
fn replay(json: bool, policy: Option<std::path::PathBuf>, files: &[std::path::PathBuf]) -> ExitCode {
    use hexrpc_runtime::reverse::replay::{self, replay_request, ReplayResult};
    use hexrpc_runtime::reverse::{FilePolicy, ReverseService};
    let bench = hexrpc_bench::Bench::new();
    let board = bench.board();
    let policy = match policy {
        None => match FilePolicy::for_board(board) {
            Ok(p) => p,
            Err(e) => {
                error(&format!("the service cannot start: the bench board's default policy is invalid: {e:?}"));
                return ExitCode::from(1);
            }
        },
        Some(path) => match io::read_text(&path, io::MAX_POLICY_FILE)
            .map_err(|e| e.to_string())
            .and_then(|t| FilePolicy::parse(&t, board.limits).map_err(|e| format!("{e:?}")))
        {
            Ok(p) => p,
            Err(e) => {
                error(&format!("--policy {}: {e}", io::escape(&path.to_string_lossy())));
                return ExitCode::from(2);
            }
        },
    };
    // Offline: no channel exists, so apps_mem requests that would reach the kernel fail as
    // they would on a closed fd.
    let service = ReverseService::new(bench, hexrpc_drivers::Fd(-1), policy);
    // Each file is read with a bound, and only when it is a regular file; one that cannot be
    // read is reported in its line and the rest still run.
    let results: Vec<(String, ReplayResult)> = files
        .iter()
        .map(|p| {
            let name = p.to_string_lossy().into_owned();
            let r = match io::read_bounded(p, io::MAX_REQUEST_FILE) {
                Ok(bytes) => replay_request(&service, &bytes),
                Err(e) => ReplayResult { status: None, reply_len: 0, error: Some(format!("cannot read: {e}")) },
            };
            (name, r)
        })
        .collect();
    let unused = results.iter().filter(|(_, r)| r.status.is_none()).count();
    for (name, r) in results.iter().filter(|(_, r)| r.status.is_none()) {
        error(&format!("{}: not sent: {}", io::escape(name), r.error.as_deref().unwrap_or("unknown reason")));
    }
    let m = service.metrics().snapshot();
    let report = if json {
        // The replay's own object, extended with the service's metrics.
        let mut out = replay::results_json(&results);
        out.pop();
        out.push_str(", \"metrics\": ");
        let _ = m.write_json(&mut out);
        out.push_str("}\n");
        out
    } else {
        // Names come from the command line: escaped before they reach a terminal.
        let shown: Vec<(String, ReplayResult)> = results.iter().map(|(n, r)| (io::escape(n), r.clone())).collect();
        format!(
            "{}service metrics: {} requests, {} ok, {} bytes served, {} to unknown handles\n",
            replay::results_text(&shown),
            m.requests,
            m.ok,
            m.bytes_served,
            m.unknown_handle
        )
    };
    let code = print(&report);
    if unused > 0 {
        ExitCode::from(1)
    } else {
        code
    }
}

fn main() -> ExitCode {
    let (verbosity, cmd) = match parse(std::env::args_os().skip(1).collect()) {
        Ok(x) => x,
        Err(Usage(msg)) => {
            eprintln!("hexrpc: {msg}");
            return ExitCode::from(2);
        }
    };
    logging::init(logging::level(verbosity, std::env::var("HEXRPC_LOG").ok().as_deref()));
    match cmd {
        Command::Help(topic) => match help(topic.as_deref()) {
            Ok(text) => print(text),
            Err(Usage(msg)) => {
                eprintln!("hexrpc: {msg}");
                ExitCode::from(2)
            }
        },
        Command::Version => print(concat!("hexrpc ", env!("CARGO_PKG_VERSION"), "\n")),
        Command::Abi { json } => print(&if json { abi::to_json() } else { abi::to_text() }),
        Command::BuildLib(bl) => build_lib(bl),
        Command::Run(ra) => run::run(ra),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } | Command::Replay { .. } => no_bench(),
        #[cfg(feature = "bench")]
        Command::Bench { json, long } => {
            let figures = {
                let mut progress = progress::Progress::new();
                progress.step("measurements");
                figures::run(if long { 10 } else { 1 })
            };
            match figures {
                Ok(f) => print(&if json { figures::to_json(&f) } else { figures::to_text(&f) }),
                Err(e) => {
                    eprintln!("hexrpc: bench: {e}");
                    ExitCode::from(1)
                }
            }
        }
        #[cfg(feature = "bench")]
        Command::Replay { json, policy, files } => replay(json, policy, &files),
        Command::Probe { json, board, output, bench, library } => probe_cmd(json, board, output, bench, library),
        Command::Selftest { json, platform, seam_bench, board, library } => selftest_cmd(json, platform, seam_bench, board, library),
        Command::Capture { dir, bench, board, library } => capture_cmd(dir.unwrap_or_default(), bench, board, library),
        Command::Report { output, board, library } => report_cmd(output, board, library),
    }
}

/// A command or option that needs the bench, in a build without it.
#[cfg(not(feature = "bench"))]
fn no_bench() -> ExitCode {
    error("this build has no bench: the vendor build leaves the `bench` feature off (use the desk build for --bench, bench and reverse-replay)");
    ExitCode::from(2)
}

/// `capture --bench`: the device test library's scripted model (or a given library) on the
/// bench.
#[cfg(feature = "bench")]
fn bench_capture(
    library: Option<&std::path::Path>,
    recorder: &'static capture::Recorder,
    exercise: bool,
) -> Result<Result<String, String>, ExitCode> {
    let choice = match library.map(|p| device_library(Some(p))).transpose() {
        Ok(Some(l)) => Ok(l),
        Ok(None) => Err("no built library given".to_string()),
        Err(e) => {
            error(&e);
            return Err(ExitCode::from(1));
        }
    };
    // The library under the executor when it runs here, else the scripted model of its kernel.
    let (target, lib) = checks::bench_device_setup(choice);
    Ok(device::capture_session(&target, &lib, recorder, exercise))
}

#[cfg(not(feature = "bench"))]
fn bench_capture(_: Option<&std::path::Path>, _: &'static capture::Recorder, _: bool) -> Result<Result<String, String>, ExitCode> {
    Err(no_bench())
}

/// `probe --bench`.
#[cfg(feature = "bench")]
fn bench_probe(board: Option<&str>, library: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    let board = match bench_board(board) {
        Ok(b) => b,
        Err(Usage(msg)) => {
            error(&msg);
            return Err(ExitCode::from(2));
        }
    };
    checks::set_board(board);
    let Some(access) = hexrpc_bsp::DeviceAccess::for_bench_board(board) else {
        error(&format!("{} is not a bench board", board.name));
        return Err(ExitCode::from(2));
    };
    let sys = checks::bench();
    let lib = library.unwrap_or(probe::ProbeLibrary { name: checks::MODEL.into(), image: checks::image() });
    Ok(probe::run(sys, &access, probe::BoardSource::Bench, probe::Host::Bench, Some(&lib)))
}

#[cfg(not(feature = "bench"))]
fn bench_probe(_: Option<&str>, _: Option<probe::ProbeLibrary>) -> Result<probe::Report, ExitCode> {
    Err(no_bench())
}

fn capture_cmd(dir: std::path::PathBuf, bench: bool, board: Option<String>, library: Option<std::path::PathBuf>) -> ExitCode {
    // The tap lives as long as the service, which needs it for 'static: leaked once per process.
    let recorder: &'static capture::Recorder = Box::leak(Box::default());
    let given = library.is_some();
    let ran = if bench {
        match bench_capture(library.as_deref(), recorder, !given) {
            Ok(r) => r,
            Err(code) => return code,
        }
    } else {
        let board = match device_board(board.as_deref()) {
            Ok((b, _)) => b,
            Err(Usage(msg)) => {
                error(&msg);
                return ExitCode::from(2);
            }
        };
        let lib = match device_library(library.as_deref()) {
            Ok(l) => l,
            Err(e) => {
                error(&e);
                return ExitCode::from(1);
            }
        };
        let target = device::Target {
            make: Box::new(|| hexrpc_drivers::RustixSys),
            access: hexrpc_bsp::DeviceAccess::for_device(board),
            on_served: Box::new(|_, _| {}),
        };
        device::capture_session(&target, &lib, recorder, !given)
    };
    // What was recorded is written even when the session failed: that is the interesting case.
    let written = recorder.write(&dir);
    let code = match &written {
        Ok((n, dropped)) => print(&format!(
            "captured {n} reverse requests into {}{}; replay with: hexrpc reverse-replay {}/*.hxrq\n",
            io::escape(&dir.to_string_lossy()),
            if *dropped > 0 { format!(" ({dropped} more dropped over the limit)") } else { String::new() },
            io::escape(&dir.to_string_lossy())
        )),
        Err(e) => {
            error(&format!("capture: {e}"));
            ExitCode::from(1)
        }
    };
    match ran {
        Ok(line) => {
            log::info!("capture session: {line}");
            code
        }
        Err(e) => {
            error(&format!("capture: the session failed: {e}"));
            ExitCode::from(1)
        }
    }
}

fn report_cmd(output: Option<std::path::PathBuf>, board: Option<String>, library: Option<std::path::PathBuf>) -> ExitCode {
    let (b, source) = match device_board(board.as_deref()) {
        Ok(b) => b,
        Err(Usage(msg)) => {
            error(&msg);
            return ExitCode::from(2);
        }
    };
    let mut progress = progress::Progress::new();
    progress.step("probe");
    let access = hexrpc_bsp::DeviceAccess::for_device(b);
    let lib = device_library(library.as_deref()).ok();
    let probe_lib = lib.as_ref().map(|l| probe::ProbeLibrary { name: device::NAME.into(), image: l.image });
    let probe_report = probe::run(hexrpc_drivers::RustixSys, &access, source, probe::Host::Real, probe_lib.as_ref());
    let platform = if std::path::Path::new("/dev/adsprpc-smd").exists() { selftest::Platform::Device } else { selftest::Platform::Bench };
    let library = match platform {
        selftest::Platform::Device => device_library(library.as_deref()),
        selftest::Platform::Bench => Err("no built library given".into()),
    };
    let level = log::max_level();
    if level == log::LevelFilter::Warn {
        log::set_max_level(log::LevelFilter::Error);
    }
    let checks = selftest::run(platform, selftest::DeviceSeam::Real(b, source), library, &mut |name| progress.step(name));
    log::set_max_level(level);
    progress.step("kernel log");
    let members = [
        ("hexrpc-report/probe.json", probe::to_json(&probe_report).into_bytes()),
        ("hexrpc-report/selftest.json", selftest::to_json(platform, &checks).into_bytes()),
        ("hexrpc-report/kernel.txt", std::fs::read("/proc/version").unwrap_or_else(|e| format!("/proc/version: {e}\n").into_bytes())),
        ("hexrpc-report/dmesg.txt", report::dmesg_lines().into_bytes()),
        ("hexrpc-report/versions.txt", report::versions().into_bytes()),
    ];
    drop(progress);
    let mtime = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let archive = report::tar(&members, mtime);
    let out = io::Output::from_arg(output.unwrap_or_else(|| "hexrpc-report.tar".into()));
    let code = io::emit(&out, &archive);
    if code == ExitCode::SUCCESS {
        if let io::Output::File(p) = &out {
            eprintln!(
                "hexrpc: report written to {} ({}); {}",
                io::escape(&p.to_string_lossy()),
                human::bytes(archive.len() as u64),
                io::escape(&probe_report.summary())
            );
        }
    }
    code
}

fn probe_cmd(
    json: bool,
    board: Option<String>,
    output: Option<std::path::PathBuf>,
    bench: bool,
    library: Option<std::path::PathBuf>,
) -> ExitCode {
    let library = match library.map(|p| load_library(&p)).transpose() {
        Ok(l) => l,
        Err(msg) => {
            error(&msg);
            return ExitCode::from(2);
        }
    };
    let report = if bench {
        match bench_probe(board.as_deref(), library) {
            Ok(r) => r,
            Err(code) => return code,
        }
    } else {
        let (board, source) = match device_board(board.as_deref()) {
            Ok(b) => b,
            Err(Usage(msg)) => {
                error(&msg);
                return ExitCode::from(2);
            }
        };
        // The one place this program decides to touch the device.
        let access = hexrpc_bsp::DeviceAccess::for_device(board);
        probe::run(hexrpc_drivers::RustixSys, &access, source, probe::Host::Real, library.as_ref())
    };
    let text = if json { probe::to_json(&report) } else { probe::to_text(&report) };
    let code = io::emit(&output.map(io::Output::from_arg).unwrap_or(io::Output::Stdout), text.as_bytes());
    if report.failed() {
        ExitCode::from(1)
    } else {
        code
    }
}

/// The device test library: `--library`, else the first installed path that exists.
fn device_library(path: Option<&std::path::Path>) -> selftest::LibraryChoice {
    let candidates: Vec<std::path::PathBuf> = match path {
        Some(p) => vec![p.to_path_buf()],
        None => device::INSTALLED.iter().map(std::path::PathBuf::from).collect(),
    };
    let Some(found) = candidates.iter().find(|p| path.is_some() || p.exists()) else {
        return Err(format!(
            "device test library not found at {} (installed by the hexrpc .deb / vendor module; or pass --library, built with `hexrpc build-lib android/devicelib/hexrpc_selftest.c --kernel {} --signature {} -o libhexrpc_selftest.so`)",
            device::INSTALLED.join(" or "),
            device::KERNEL,
            device::SIGNATURE
        ));
    };
    match io::read_bounded(found, io::MAX_LIBRARY_FILE) {
        Ok(bytes) => Ok(device::DeviceLibrary { image: Box::leak(bytes.into_boxed_slice()), origin: found.display().to_string() }),
        Err(e) => Err(format!("device test library {}: {e}", io::escape(&found.to_string_lossy()))),
    }
}

fn selftest_cmd(
    json: bool,
    platform: Option<selftest::Platform>,
    seam_bench: bool,
    board: Option<String>,
    library: Option<std::path::PathBuf>,
) -> ExitCode {
    let platform = platform.unwrap_or_else(|| {
        if std::path::Path::new("/dev/adsprpc-smd").exists() || cfg!(not(feature = "bench")) {
            selftest::Platform::Device
        } else {
            selftest::Platform::Bench
        }
    });
    #[cfg(not(feature = "bench"))]
    if seam_bench || platform == selftest::Platform::Bench {
        return no_bench();
    }
    #[cfg(feature = "bench")]
    if platform == selftest::Platform::Bench {
        if let Some(name) = board.as_deref() {
            match bench_board(Some(name)) {
                Ok(b) => {
                    checks::set_board(b);
                }
                Err(Usage(msg)) => {
                    error(&msg);
                    return ExitCode::from(2);
                }
            }
        }
    }
    let (seam, header) = if seam_bench || platform == selftest::Platform::Bench {
        #[cfg(not(feature = "bench"))]
        unreachable!("refused above");
        #[cfg(feature = "bench")]
        (
            selftest::DeviceSeam::Bench,
            " through the BENCH SEAM (test: the bench stands in for the nodes; simulated kernel and DSP, not device figures)".to_string(),
        )
    } else {
        match device_board(board.as_deref()) {
            Ok((b, source)) => (selftest::DeviceSeam::Real(b, source), format!(" (board {})", b.name)),
            Err(Usage(msg)) => {
                error(&msg);
                return ExitCode::from(2);
            }
        }
    };
    let library = match (platform, seam_bench, library.as_deref()) {
        // On the bench the built library is used only when given; otherwise the checks fall
        // back to the scripted model of the same kernel.
        (selftest::Platform::Bench, _, None) | (selftest::Platform::Device, true, None) => Err("no built library given".into()),
        (_, _, path) => device_library(path),
    };
    // Several checks provoke failures on purpose (a deadline passing, refused requests); their
    // warnings are expected and the report states each outcome, so at the default level only
    // errors are logged while the checks run (-v shows everything).
    let level = log::max_level();
    if level == log::LevelFilter::Warn {
        log::set_max_level(log::LevelFilter::Error);
    }
    let checks = {
        let mut progress = progress::Progress::new();
        selftest::run(platform, seam, library, &mut |name| progress.step(name))
    };
    log::set_max_level(level);
    let failed = checks.iter().any(|c| c.status == selftest::Status::Fail);
    let code = print(&if json { selftest::to_json(platform, &checks) } else { selftest::to_text(platform, &header, &checks) });
    if failed {
        ExitCode::from(1)
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<std::ffi::OsString> {
        a.iter().map(|s| s.into()).collect()
    }

    #[test]
    fn parsing() {
        assert!(matches!(parse(args(&["abi", "--json"])), Ok((0, Command::Abi { json: true }))));
        assert!(matches!(
            parse(args(&["-vv", "selftest", "--bench"])),
            Ok((2, Command::Selftest { json: false, platform: Some(selftest::Platform::Bench), .. }))
        ));
        assert!(matches!(parse(args(&["selftest", "-h"])), Ok((_, Command::Help(Some(c)))) if c == "selftest"));
        assert!(parse(args(&["abi", "--bench"])).is_err());
        assert!(parse(args(&["frobnicate"])).is_err());
        assert!(parse(args(&[])).is_err());
        assert!(help(Some("nope")).is_err());
    }
}
