//! The help texts: `hexrpc help`, `hexrpc help COMMAND` and `hexrpc COMMAND --help`, written as
//! manual pages (name, synopsis, description, options, exit status).

pub const USAGE: &str = "\
hexrpc - drive the Hexagon compute DSP (CDSP) through FastRPC, safely

USAGE:
    hexrpc [GLOBAL OPTIONS] <COMMAND> [OPTIONS]

COMMANDS:
    probe       Health check of the device: nodes, ION, shell, channel, DSP process, listener
    selftest    Run the acceptance report (desk builds: on the bench when no DSP is present)
    bench       Measure launch overhead, crossings and allocations per launch, and the
                reverse file service's throughput
    abi         Print the kernel ABI (structs, ioctl numbers, constants) of this build
    build-lib   Build a DSP library (.so) from kernel C: generated entry + kernel, for Hexagon
    run         Launch a library's kernel with buffers from files, on the device or the bench
    model       A model file: info, run with .npy inputs, bench, check on the device
    reverse-replay
                Feed recorded DSP reverse requests through the hardened file service
    capture     Record a session's reverse-RPC requests as files reverse-replay reads
    report      Probe + selftest + kernel version + DSP kernel log + versions in one tar
    help        Print this help, or a command's help: hexrpc help <COMMAND>;
                hexrpc help --man prints the manual page hexrpc(1) (roff), made
                from these help texts

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

The bench (a simulated kernel and DSP, and qemu-hexagon for built libraries) and
the library builder are part of desk builds only: in the device packages, bench,
reverse-replay, build-lib and every --bench option exit with status 2 and say so.

SEE ALSO:
    hexrpc help <COMMAND> for each command's options, output and exit status;
    man hexrpc for all of them in one page.
";

pub const SELFTEST_HELP: &str = "\
hexrpc selftest - run the acceptance report

USAGE:
    hexrpc selftest [--bench | --device [--seam bench]] [--board NAME]
                    [--library LIB.so] [--json]

Runs the checks in acceptance order: parameter layout, view offsets, fd/mapping
reclamation, reverse-RPC file permissions, timeouts, concurrency, then numerics
and latency. Each line is PASS, FAIL or SKIP with the measured figure; SKIP says
why the check could not run here. On the bench, numerics and latency run real
Hexagon code (clang-19, ld.lld-19, qemu-hexagon); without those tools they are
SKIP and the report names the missing ones and the Debian packages to install.

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
    --json            Print {\"platform\": \"bench\"|\"device\", \"board\", \"checks\": [{\"name\",
                      \"stage\", \"status\": \"pass\"|\"fail\"|\"skip\", \"figure\", \"detail\",
                      \"hint\"}]} (hint: what to install for a skipped check, or \"\")
    -h, --help        Print this help

Without --bench or --device, the device is used when /dev/adsprpc-smd exists,
the bench otherwise (device packages have no bench: there it is always the
device); the first line of the report says which.

EXIT STATUS: 0 when no check failed, 1 when one failed, 2 on usage errors.
";

pub const PROBE_HELP: &str = "\
hexrpc probe - step-by-step health check of the DSP prerequisites

USAGE:
    hexrpc probe [--device [--seam bench] | --bench] [--board NAME]
                 [--library LIB.so] [--root DIR] [--json] [--output FILE]

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
    pm-qos        the channel's PM-QoS vote (CONTROL LATENCY): taken, refused (a skip
                  with a hint: the session works, wake-ups cost more) or not
                  available (upstream drivers have none)
    listener      registering the reverse-RPC listener (handle 3)
    library       loading a library through the reverse file service: --library,
                  else the shipped device test library (installed by the .deb
                  at /usr/lib/hexrpc/, by the vendor module at /vendor/etc/hexrpc/;
                  the boot check uses it); on the bench a built-in test library
and ends with a summary line. Everything acquired is released before it exits.

OPTIONS:
    --device        Probe the real device (the default)
    --bench         Probe the isolated bench instead (simulated kernel and DSP)
    --board NAME    Board facts to use: comma-three, msm-android, qcom-rb5,
                    upstream (default: detected from /proc/device-tree/model, else
                    from the kernel's nodes); with --bench: bench (downstream
                    kernel, the default) or bench-upstream
    --library FILE  A Hexagon library (from `hexrpc build-lib`) for the library step
                    (default: the shipped device test library, if installed)
    --root DIR      Look for the installed device test library under DIR (an image
                    root, as `dpkg --root` installs into) instead of /
    --seam bench    Test seam for the device probe: the bench stands in for the
                    nodes, and the library runs under qemu-hexagon (desk builds)
    --json          Print {\"board\", \"board_source\", \"steps\": [{\"name\", \"status\":
                    \"pass\"|\"fail\"|\"skip\", \"detail\", \"hint\"}], \"summary\"}
    --output FILE   Write the report to FILE instead of stdout: a new file in the
                    same directory renamed over it; a symlink or device as FILE is
                    refused; - is stdout
    -h, --help      Print this help

EXIT STATUS: 0 when no step failed, 1 when one failed or the report could not be
written, 2 on usage errors.
";

pub const BUILD_LIB_HELP: &str = "\
hexrpc build-lib - build a Hexagon library from a kernel written in C

USAGE:
    hexrpc build-lib KERNEL.c --signature SIG -o LIB.so [OPTIONS]
    hexrpc build-lib [OPTIONS] -- KERNEL.c      (a file name that starts with -)
    hexrpc build-lib KERNEL.c [MORE.c...] --table [FILE:]NAME:SIG... -o LIB.so [OPTIONS]

Generates the DSP-side `entry` wrapper for the kernel's signature (launch ABI v2
unless --v1), compiles it and KERNEL.c with clang-19 for Hexagon (v65, HVX 128 B,
-O2, -fPIC, freestanding; the kernel also with -mllvm -hexagon-autohvx=true, so
clang vectorises its loops for HVX), links a shared object with ld.lld-19 with
every section aligned to 4 KiB, and records the signature and ABI version in it
(a .note.hexrpc section that `hexrpc run` checks).

HVX: clang-19's Hexagon backend cannot compile some vector code with HVX (it
fails with 'Cannot select', e.g. for a _Bool vector stored as its bits). Such a
kernel is compiled again without HVX (the same results, not vectorised), and
build-lib prints, for each kernel of that source, one line on stderr:
    hexrpc build-lib: warning: kernel NAME compiled without HVX (...): REASON
where REASON is the first line of clang's error; the report line on stdout says
'without HVX', and the library's build record counts such kernels (`hexrpc model
info` shows the count). With --require-hvx the build fails instead. Warnings are
printed even under -q: -q silences the log and the progress line, never a
warning.

Checks: the kernel function exists and matches the signature (it is compiled
against a prototype generated from SIG), every symbol the library imports is
one the DSP provides (others are named), every allocated section is on its own
page, -o is not the kernel source nor a link or device, and the kernel is a
file. The library is linked and checked in a fresh LIB.so.build/ work directory,
where the intermediate files stay, and only then put at -o (a temporary file in
its directory renamed over it): a failed build leaves no file at -o and a file
already there as it was. Builds to the same -o run one at a time (each holds a
lock on LIB.so.build.lock, kept beside it): started together, they all succeed;
a build killed at any point never blocks the next one. Needs clang-19 and
ld.lld-19 (apt-get install clang-19 lld-19).

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
                      launches in one call (the runtime's Batch API). Kernels may come
                      from one file with several functions or from several files
                      (FILE defaults to the first KERNEL.c); a kernel returning int
                      stops a batch with its status when non-zero
    --v1              Generate tinygrad's v1 entry (only offset-0 views are safe)
    --power           Add tinygrad's HAP_power_set request (DCVS off, turbo corner)
    --cflag FLAG      Extra flag for the kernel's compilation (repeatable), after
                      build-lib's own, e.g. --cflag=-I../include; the last of
                      repeated options wins, so --cflag=-mllvm
                      --cflag=-hexagon-autohvx=false turns auto-vectorisation off
    --require-hvx     Fail (status 1, nothing written at -o) when clang-19 cannot
                      compile a kernel with HVX, instead of compiling it without
                      HVX and warning
    --clang PATH      Compiler (default: clang-19)
    --lld PATH        Linker (default: ld.lld-19)
    -h, --help        Print this help

EXIT STATUS: 0 on success (also when a kernel was compiled without HVX and
warned about), 1 when the build fails (with --require-hvx: also when a kernel
cannot be compiled with HVX), 2 on usage errors.
";

pub const RUN_HELP: &str = "\
hexrpc run - launch a library on the device or on the bench

USAGE:
    hexrpc run LIBRARY.so [--signature SIG] [--abi v1|v2] [--bench | --device]
               [--arg SPEC]... [--repeat N] [--deadline-ms MS] [--json]
               [--capture DIR]

Opens LIBRARY.so on the DSP (served through the reverse file service), launches
its entry N times with one --arg per parameter of SIG, in order, and writes the
output buffers. A library from build-lib carries its signature and ABI in its
build record: without --signature (and --abi) they come from there, and given
ones must agree with it; a library built elsewhere needs --signature.

ARGUMENTS:
    buf parameter   comma-separated key=value: in=FILE (initial contents),
                    out=FILE (written after the last launch), size=BYTES (default:
                    the size of in), offset=BYTES (the view's offset inside its own
                    lease, default 0). Each buffer gets its own lease of
                    offset+size bytes rounded up to a page. Each key at most
                    once; an out= file must not be the library, an in= file or
                    another out= file (however spelled, links included).
    scalar          the literal value (23, -1.5), parsed by the signature's type

OPTIONS:
    --signature SIG   The kernel's parameters, as for build-lib (default: from the
                      library's build record; required without one)
    --abi v1|v2       The launch ABI of the library's entry (default: the build
                      record's, else v2); v1 with a non-zero offset is refused
                      before anything is sent
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
                      `hexrpc capture` does (written even when the launch fails);
                      DIR must be new or empty, not a symbolic link
    -h, --help        Print this help

Prints the DSP-reported time around the kernel and the host round trip. On the
bench both are emulated figures (host clock under qemu-hexagon), never device
figures.

EXIT STATUS: 0 on success, 1 when the launch failed or was refused (the reason
on stderr), 2 on usage errors.
";

pub const MODEL_HELP: &str = "\
hexrpc model - a model file: its contents, a run, a benchmark, a device check

USAGE:
    hexrpc model info  FILE [--json]
    hexrpc model run   FILE [--input NAME=FILE.npy]... [--output NAME=FILE.npy]...
                            [--runs N] [--deadline-ms MS] [--bench | --device] [--json]
                            [--per-kernel] [--count] [--power LEVEL] [--no-pm-qos]
    hexrpc model bench FILE [--runs N] [--bench | --device] [--json]
                            [--per-kernel] [--count] [--power LEVEL] [--no-pm-qos]
    hexrpc model check FILE [--bench | --device] [--json]
    hexrpc model sample OUT.hxm [--size N]

A model file (.hxm, docs/model-format.md) holds a model compiled at the desk: its
kernel-table libraries, its arenas and weights, the launch records of one run, its
inputs and outputs and where it came from. It runs with no compiler: one FastRPC
call per run for a model of up to 4,096 launches on one library. Files are made at
the desk from an ONNX model or a tinygrad TinyJit by the Python package:
    HEXRPC_BENCH=1 python -m hexrpc.export MODEL.onnx --input x=1x3x48x192 -o FILE
(checked against tinygrad bit for bit before it is written).
On the bench, HEXRPC_BENCH_SHELL names a DSP shell built before, so that a run
needs qemu-hexagon and no compiler, as on a device.

ACTIONS:
    info    Validate the whole file (no DSP session) and print its provenance,
            libraries (with how many of their kernels build-lib compiled without
            HVX, when any), memory and input/output table
    run     Open the model, feed each input from a .npy file, run it N times and
            write the outputs asked for with --output (others are previewed)
    bench   Run it N times (default 100) on zero inputs; print the time per run as
            a tail-latency block (TAIL LATENCY below)
    check   Open it and run it once on zero inputs: for bring-up on a device and
            for the report tarball
    sample  Write the bench's sample model (desk builds): input x uint8[1, N],
            outputs y = x + 3 and z = y + 5, on the bench's own library models

OPTIONS:
    --input NAME=FILE.npy   Input NAME's values; its dtype and shape must be the
                            model's (run needs one per input; bench and check use
                            zeros for inputs without one)
    --output NAME=FILE.npy  Write output NAME after the last run
    --runs N                Run N times (run: default 1; bench: 100)
    --deadline-ms MS        Bound each run: a run not done after MS milliseconds is
                            interrupted (the session then needs recovery)
    --bench                 Run on the bench: Hexagon libraries run under
                            qemu-hexagon, the sample's on the bench's models
    --device                Run on the device (the default when its node exists)
    --per-kernel            Time every kernel on the DSP (PER KERNEL below)
    --count                 Bench only: count the packets, instructions and HVX
                            instructions qemu-hexagon executes per run, and per
                            kernel with --per-kernel (COUNTS below)
    --power LEVEL           The DSP clock vote each library gets after it opens:
                            sustained (default; a clock floor, DCVS above it),
                            burst (top clock, DCVS off) or off (no vote)
    --no-pm-qos             Send no PM-QoS vote (the CPU may sleep deeply while
                            it waits for the DSP; the default sends it)
    --size N                sample: elements of the sample's input (default 1024)
    --json                  Machine-readable output
    -h, --help              Print this help

Every file and every input is checked before a session starts: a file cut short,
corrupted, edited or built for another hexrpc is refused with the part, the field
and the values (exit 1); a missing input, an input of the wrong dtype or shape, or
an unreadable .npy is a usage error (exit 2) that names the input. Times on the
bench are simulated or emulated, never device figures.

TAIL LATENCY:
run, bench and check print p50, p99, p99.9 and max of the runs, in microseconds,
one row per kind of figure:
    simulated  bench: its cost model per run (hexrpc bench's model
               latency): 60 us per kernel crossing, 2 us per KiB
               copied, 20 us per HAP_mmap and 10 us per HAP_munmap
               the DSP makes, plus any DSP time a bench library
               model declares (Hexagon code declares none). The
               kernels' compute is not in it.
    emulated   bench: host wall time per run on this machine, from the
               call to its return; Hexagon code runs under
               qemu-hexagon, far slower than a cDSP.
    device     device: wall time per run, from the call to its return.
Each percentile is a nearest rank, not interpolated: of N runs sorted in
ascending order, the P-th percentile is the run of rank ceil(P/100 x N), so
every figure is one run's own time. With few runs a percentile's rank is the
last one and the figure is the max; it is then marked * and the block says so.
p99 differs from the max from 100 runs on, p99.9 from 1000 runs on: a first run
on a device should use --runs 1000 (README.md says what to record with it).

Under the block, what became of the kernel's PM-QoS vote (FASTRPC_CONTROL_LATENCY,
the CPU-DMA latency asked for while a thread waits for the DSP) on the session's
channel: sent, not asked, not available on this board's driver (upstream), or
refused by the kernel with its errno; --json: \"pm_qos\": \"sent\" | \"not_asked\" |
\"not_available\" | \"refused (ERRNO)\".

With --json the block is \"tail_latency\", an array of one object per row:
    {\"label\": \"simulated\" | \"emulated\" | \"device\",
     \"what\": TEXT, \"method\": \"nearest-rank\", \"unit\": \"us\",
     \"runs\": N, \"p50\", \"p99\", \"p99_9\", \"max\": MICROSECONDS,
     \"equal_to_max\": [the percentiles that are the max]}
\"run_us_p50\" and \"run_us_p99\" are the wall-time row's (emulated or device).
Also: \"dsp_power\" (the clock vote's level), \"setup_failures\" (libraries that
refused it) and \"per_kernel\" (null without --per-kernel).

PER KERNEL:
With --per-kernel each run reads every launch's DSP time, measured on the DSP
right around the kernel call (HAP_perf_get_time_us) and written by the entry
after the run's status, and the table sums them per kernel name (the kernel's
name in the library's build record: tinygrad's), the most time first: launches
and microseconds per run, and the share. On the bench these are emulated
(Hexagon code under qemu-hexagon: the host's clock) or simulated (the bench's
library models) figures; on a device, device figures. A library built before
per-record times is counted as untimed calls. --json: \"per_kernel\":
{\"label\", \"what\", \"untimed_calls\", \"kernels\": [{\"kernel\",
\"launches_per_run\", \"us_per_run\"}]}.

COUNTS:
With --count (and --bench) each run reports what qemu-hexagon executed for it:
packets, instructions, and the instructions that are HVX, as the emulator's own
counters count them (the bench's DSP shell reads them around each call and each
kernel). These are EMULATED PACKETS, NOT DSP TIME: a packet is the emulator's unit
of work, not a cycle, so compare two builds of one model with them (fewer packets,
a larger HVX share), never a deadline. The line gives the last run's counts: they
repeat exactly from the second run on, and the line says whether they did; the
first run counts a few hundred packets more (it maps the model's buffers on the
DSP, which the map cache keeps for later runs). With --per-kernel the table
gains each kernel's packets per run and HVX share. Libraries that the bench
models in Rust (the sample's) run no Hexagon code: nothing to count. On a device
--count is a usage error. --json: \"exec_counts\": null, or {\"label\": \"emulated\",
\"what\", \"runs\", \"packets_per_run\", \"instructions_per_run\", \"hvx_per_run\",
\"first_run_packets\", \"identical\" (runs 2 to N; null for one run)}, and each per-kernel row gains \"packets_per_run\", \"hvx_per_run\".

EXIT STATUS: 0 on success, 1 when the model was refused or a run failed (the
reason on stderr), 2 on usage errors and bad inputs.
";

pub const REPLAY_HELP: &str = "\
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

Files from `hexrpc capture` (an index.json beside them): the library images the
capture kept (DIR/images/) are served again, so the library fetches replay as
recorded, and each status is compared with the one recorded; every difference
is printed (\"differs from its capture\") and makes the exit status 1.

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
    --json          Print {\"results\": [{\"file\", \"status\", \"reply_len\", \"error\"}],
                    \"metrics\", \"differences_from_capture\"} (status null for a
                    malformed file)
    --policy FILE   The file policy to apply instead of the board's default
    -h, --help      Print this help

EXIT STATUS: 0 when every file was read, well-formed and answered (and, for a
capture, answered as recorded); 1 when any file could not be used (missing, not a
regular file, too large, malformed), a status differs from its capture, or the
service failed; 2 on usage errors (no files, unreadable or invalid policy).
";

pub const CAPTURE_HELP: &str = "\
hexrpc capture - record the DSP's reverse-RPC requests of a session

USAGE:
    hexrpc capture --dir DIR [--device | --bench] [--board NAME] [--library LIB.so]

Starts a session (on the device, or on the bench with --bench), installs a tap on
the reverse file service, opens the library (the DSP fetches it through the
service) and, for the device test library (the default), runs one launch that
makes the library fopen a forbidden and an allowlisted path. Every request the
DSP sent is written to DIR as NNNN-MODULE-mMETHOD.hxrq (the request file format
of `hexrpc reverse-replay`), with DIR/index.json listing file, module, handle,
scalars word and the status the service answered, and the library images the
service served from memory in DIR/images/ (so a replay serves the same bytes).
Replay them on a desk with `hexrpc reverse-replay DIR/*.hxrq`.

OPTIONS:
    --dir DIR       Where to write the files: a new directory (created) or an
                    empty one; a non-empty directory or a symbolic link is
                    refused (exit 2) before the session starts
    --device        Capture on the device (the default)
    --bench         Capture on the bench (simulated kernel and DSP)
    --board NAME    Board facts (default: detected)
    --library FILE  The library to open instead of the device test library
    -h, --help      Print this help

EXIT STATUS: 0 when the session ran and the files were written, 1 otherwise, 2 on
usage errors.
";

pub const REPORT_HELP: &str = "\
hexrpc report - one file to attach to a bug

USAGE:
    hexrpc report [-o FILE.tar] [--board NAME] [--library LIB.so] [--model FILE]...

Writes a tar archive holding:
    probe.json      `hexrpc probe --json` on this machine
    selftest.json   `hexrpc selftest --device --json` on this machine (never the
                    bench: without the DSP nodes its checks fail, naming them)
    kernel.txt      /proc/version
    dmesg.txt       kernel log lines about adsprpc, fastrpc, ION, the CDSP, SMMU and
                    SELinux denials (from /dev/kmsg; says so when unreadable)
    versions.txt    hexrpc, the device-tree model, /VERSION or build.prop, os-release
    model-check-N.json
                    `hexrpc model check --json` of the Nth --model file on this
                    machine's DSP, or {\"error\"} saying why it could not run

OPTIONS:
    -o, --output FILE  The archive (default: hexrpc-report.tar; - for stdout)
    --board NAME       Board facts (default: detected)
    --library FILE     The device test library (default: its installed path)
    --model FILE       A model file to check on the DSP (repeatable)
    -h, --help         Print this help

EXIT STATUS: 0 when the archive was written (whatever the checks found), 1 when it
could not be written, 2 on usage errors.
";

pub const BENCH_HELP: &str = "\
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
    raw_ioctl_ns            one raw FASTRPC_IOCTL_INVOKE_ATTRS on /dev/null (ENOTTY),
                            straight through rustix (no seam)
    seam_launch_ns          packing the 3-buffer launch plus the same ioctl through
                            the real seam (RustixSys), as a driver sends it
    launch_vs_ioctl         seam_launch_ns / raw_ioctl_ns (interleaved, same run)
    deadline_launch_ratio   the same seam launch with a deadline over it without one
    batch_new_ns            an empty Batch::new
    batch_build_ns_per_record  building the model's 5-record batch, less an empty
                            Batch::new, per record
    reverse_stream_mib_s    a 4 MiB library image streamed through 64 KiB freads of
                            the reverse file service
    memcpy_mib_s            a memcpy of the same bytes in the same pattern: 64 KiB
                            chunks into one reused buffer, in the same run
    reverse_stream_vs_memcpy    reverse_stream_mib_s / memcpy_mib_s
    batch_crossings_per_model   the model network (5 nodes) as one batch: ioctls per run
    batch_maps_per_model        HAP_mmaps per batched run (one per distinct lease)
    batch_pack_ns               building the model's batch (5 records), host time
    model_latency_us            {batch, per_kernel}: simulated latency per model run on
                                the bench's cost model (60 us/crossing + 2 us/KiB)
The *_ns and ratio figures are medians of the thread's CPU time over batches; all
are host figures on this machine. Bench figures are host time of a simulated kernel
and DSP, never device figures.

OPTIONS:
    --json      Print an object of the figures above plus \"launches\",
                \"platform\": \"bench\" and \"simulated\": true
    --long      Ten times as many repetitions
    -h, --help  Print this help

EXIT STATUS: 0 on success, 1 if a measurement failed, 2 on usage errors.
";

pub const ABI_HELP: &str = "\
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

/// Every command's help text, by name, in the manual page's order (`hexrpc help COMMAND`,
/// `hexrpc COMMAND --help` and `hexrpc.1` all read this table).
pub const COMMANDS: &[(&str, &str)] = &[
    ("probe", PROBE_HELP),
    ("selftest", SELFTEST_HELP),
    ("run", RUN_HELP),
    ("model", MODEL_HELP),
    ("build-lib", BUILD_LIB_HELP),
    ("capture", CAPTURE_HELP),
    ("reverse-replay", REPLAY_HELP),
    ("report", REPORT_HELP),
    ("bench", BENCH_HELP),
    ("abi", ABI_HELP),
];
