//! The selftest's checks on the isolated bench: each runs the real stack (drivers, HAL, runtime)
//! on the simulated kernel and DSP and reports a measured figure. Bench figures are never device
//! figures.

use std::time::{Duration, Instant};

use hexrpc_bench::{elf, Bench, CallKind, DspCallKind, EntryVersion, Fault, FaultTarget, LibraryModel, ReverseRequest};
use hexrpc_bsp::{Board, DeviceAccess};
use hexrpc_drivers::{aee, apps_std, Errno, Fd, Scalars};
use hexrpc_hal::{BufferView, Cause, HalError, Library, Session};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

pub use crate::verdict::Outcome;

fn fail(detail: impl std::fmt::Display) -> (String, String) {
    (String::new(), detail.to_string())
}

/// The selftest library model's name.
pub const MODEL: &str = "selftest-add";

static BOARD: std::sync::OnceLock<&'static Board> = std::sync::OnceLock::new();

/// Chooses the bench board (kernel) the checks run on, once per process: [`hexrpc_bsp::BENCH`]
/// (the default) or [`hexrpc_bsp::BENCH_UPSTREAM`]. Returns false if another board was chosen
/// already.
pub fn set_board(board: &'static Board) -> bool {
    *BOARD.get_or_init(|| board) == board
}

/// The device access token of the bench board the checks run on.
fn bench_access() -> DeviceAccess {
    DeviceAccess::for_bench_board(board()).unwrap_or_else(DeviceAccess::for_bench)
}

/// [`bench_access`] for the measurements.
pub fn bench_device_access() -> DeviceAccess {
    bench_access()
}

/// The bench board the checks run on.
pub fn board() -> &'static Board {
    BOARD.get().copied().unwrap_or(&hexrpc_bsp::BENCH)
}

fn access(bench: &Bench) -> Result<DeviceAccess, (String, String)> {
    DeviceAccess::for_bench_board(bench.board()).ok_or_else(|| fail("not a bench board"))
}

/// A bench (on [`board`]) whose DSP knows the selftest library: a v2 entry over
/// (in, out, u32 k) that writes `in[i] + k` to `out[i]`.
pub fn bench() -> Bench {
    let bench = Bench::for_board(board());
    hexrpc_scenarios::catalogue::register_as(&bench, MODEL, &hexrpc_scenarios::catalogue::ADD_U8);
    bench
}

/// The selftest library image (tagged for the bench DSP).
pub fn image() -> &'static [u8] {
    use std::sync::OnceLock;
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| elf::library_image(MODEL, 8192))
}

fn serve(bench: &Bench) -> Result<ServedSession<Bench>, (String, String)> {
    let policy = FilePolicy::for_board(bench.board()).map_err(|e| fail(format!("policy: {e:?}")))?;
    ServedSession::start(bench.clone(), &access(bench)?, policy).map_err(fail)
}

fn launch(lib: &Library<'_, Bench>, input: &BufferView<'_>, output: &BufferView<'_>, add: u8) -> Result<(), HalError> {
    let sig = Signature::parse("buf,buf,u32").expect("fixed signature");
    let bufs = [BufferRef::of(input), BufferRef::of(output)];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(add as u32)]).expect("fixed launch");
    lib.invoke(&mut packed.invoke_args().expect("fits"))
}

fn check_output(input: &BufferView<'_>, output: &BufferView<'_>, add: u8) -> bool {
    let (mut a, mut b) = (vec![0u8; input.len()], vec![0u8; output.len()]);
    input.read(&mut a).is_ok() && output.read(&mut b).is_ok() && a.iter().zip(&b).all(|(x, y)| x.wrapping_add(add) == *y)
}

/// View offsets: v2 launches on views at non-zero offsets of one lease give the right bytes, and
/// the DSP ledger shows every unmap matching its map; v1 refuses such a view before any ioctl.
pub fn view_offsets() -> Outcome {
    let bench = bench();
    let served = serve(&bench)?;
    let lib = served.open_library(MODEL, image()).map_err(fail)?;
    let mut lease = served.session().alloc(64 * 1024).map_err(fail)?;
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7 + 1) as u8).collect();
    let cases = [(0usize, 8192usize, 4096usize), (100, 20_000, 1000), (4097, 40_000, 3), (58_000, 5000, 6000)];
    for (k, (i, o, len)) in cases.into_iter().enumerate() {
        lease.write_at(i, &data[..len]).map_err(fail)?;
        let (input, output) = (lease.view(i, len).map_err(fail)?, lease.view(o, len).map_err(fail)?);
        launch(&lib, &input, &output, k as u8 + 3).map_err(fail)?;
        if !check_output(&input, &output, k as u8 + 3) {
            return Err(fail(format!("wrong output for the view at {o}+{len}")));
        }
    }
    let mismatches = bench.ledger_mismatches();
    let maps = bench.ledger().len();
    let before = bench.counts().of(CallKind::RpcInvokeAttrs);
    let v = lease.view(100, 100).map_err(fail)?;
    let v1 = PackedLaunch::new(
        AbiVersion::V1,
        &Signature::parse("buf,buf,u32").map_err(fail)?,
        &[BufferRef::of(&v), BufferRef::of(&v)],
        &[Scalar::U32(0)],
    );
    let sent = bench.counts().of(CallKind::RpcInvokeAttrs) - before;
    if mismatches != 0 {
        return Err((format!("{mismatches} mismatches"), format!("{:?}", bench.ledger())));
    }
    if v1.is_ok() || sent != 0 {
        return Err(fail("v1 did not refuse a non-zero offset before any ioctl"));
    }
    Ok((
        format!("{} launches", cases.len()),
        format!("offsets 0..58000 correct; {maps} ledger events, 0 mismatched unmaps; v1 offset view refused, 0 ioctls"),
    ))
}

/// fd/mapping reclamation: a failure at every init stage, and a full session with a library and
/// launches, give every fd, ION handle, mapping, DSP process and library back.
pub fn reclamation() -> Outcome {
    type Setup = fn(&Bench);
    fn path(c: &std::ffi::CStr) -> String {
        c.to_string_lossy().into_owned()
    }
    fn upstream(b: &Bench) -> bool {
        b.board().abi == hexrpc_bsp::KernelAbi::Upstream
    }
    let stages: [(&str, Setup); 6] = [
        ("allocator", |b| b.set_missing(&path(b.board().ion_path))),
        ("shell", |b| b.set_missing(&path(b.board().shell_path))),
        ("shell alloc", |b| {
            let kind = if upstream(b) { CallKind::HeapAlloc } else { CallKind::IonAlloc };
            b.inject(FaultTarget::Call(kind), 1, Fault::Errno(Errno::ENOMEM))
        }),
        ("channel", |b| b.set_missing(&path(b.board().rpc_path))),
        ("process", |b| {
            let kind = if upstream(b) { CallKind::UpInitCreate } else { CallKind::RpcInit };
            b.inject(FaultTarget::Call(kind), 1, Fault::Errno(Errno::EPERM))
        }),
        ("listener", |b| b.inject(FaultTarget::Dsp(DspCallKind::ListenerInit2), 1, Fault::Returned(aee::AEE_EBADPARM))),
    ];
    for (name, setup) in stages {
        let bench = bench();
        let start = bench.snapshot();
        setup(&bench);
        if Session::start(bench.clone(), &access(&bench)?).is_ok() {
            return Err(fail(format!("a fault at stage {name} did not fail the start")));
        }
        let end = bench.settle(&start, Duration::from_secs(2));
        if end != start {
            return Err(fail(format!("stage {name} leaked: {start:?} -> {end:?}")));
        }
    }
    let bench = bench();
    let start = bench.snapshot();
    {
        let served = serve(&bench)?;
        let lib = served.open_library(MODEL, image()).map_err(fail)?;
        let lease = served.session().alloc(16 * 1024).map_err(fail)?;
        let (a, b) = (lease.view(10, 100).map_err(fail)?, lease.view(8000, 100).map_err(fail)?);
        for i in 0..20 {
            launch(&lib, &a, &b, i).map_err(fail)?;
        }
        let live = bench.snapshot();
        if live.loaded_libraries != 1 || live.dsp_processes != 1 {
            return Err(fail(format!("unexpected live state {live:?}")));
        }
    }
    let end = bench.settle(&start, Duration::from_secs(2));
    if end != start {
        return Err(fail(format!("a full session leaked: {start:?} -> {end:?}")));
    }
    Ok((
        "0 leaked".into(),
        format!(
            "6 failing init stages and 1 full session (library, 20 launches) on {}: every fd, buffer, mapping, process and library given back",
            board().name
        ),
    ))
}

pub(crate) fn remotectl_open(bench: &Bench, fd: Fd, module: &str) -> Result<u32, String> {
    let name = format!("{module}\0");
    let mut prim = Vec::new();
    prim.extend_from_slice(&(name.len() as u32).to_le_bytes());
    prim.extend_from_slice(&64u32.to_le_bytes());
    let sc = Scalars::new(0, 2, 2, 0, 0).ok_or("sc")?;
    let reply = bench
        .reverse_call(fd, ReverseRequest::packed(0, sc, &[&prim, name.as_bytes()], &[8, 64]), Duration::from_secs(2))
        .map_err(|e| format!("{e:?}"))?;
    if reply.result != 0 {
        return Err(format!("apps_remotectl open {module}: {}", reply.result));
    }
    let outs = reply.outputs(&[8, 64]).map_err(|e| format!("{e:?}"))?;
    Ok(u32::from_le_bytes([outs[0][0], outs[0][1], outs[0][2], outs[0][3]]))
}

pub(crate) fn fopen(bench: &Bench, fd: Fd, apps_std_handle: u32, name: &str, mode: &str) -> Result<i32, String> {
    let (env, delim, fname, mode) = ("ADSP_LIBRARY_PATH\0", ";\0", format!("{name}\0"), format!("{mode}\0"));
    let mut prim = Vec::new();
    for l in [env.len(), delim.len(), fname.len(), mode.len()] {
        prim.extend_from_slice(&(l as u32).to_le_bytes());
    }
    let sc = Scalars::new(apps_std::method::FOPEN_WITH_ENV as u8, 5, 1, 0, 0).ok_or("sc")?;
    let req =
        ReverseRequest::packed(apps_std_handle, sc, &[&prim, env.as_bytes(), delim.as_bytes(), fname.as_bytes(), mode.as_bytes()], &[4]);
    Ok(bench.reverse_call(fd, req, Duration::from_secs(2)).map_err(|e| format!("{e:?}"))?.result)
}

/// Reverse-RPC file permissions: a hostile DSP asking for files outside the allowlist, by
/// absolute path, by traversal, or for writing, is refused; the canary file outside the
/// allowlist is never opened; an allowlisted file is served.
pub fn reverse_permissions() -> Outcome {
    let bench = bench();
    let dir = std::env::temp_dir().join(format!("hexrpc-selftest-canary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(fail)?;
    let canary = dir.join("canary");
    std::fs::write(&canary, b"secret").map_err(fail)?;
    bench.add_file("/bench/dsp/cdsp/allowed.so", elf::hexagon_elf(128));
    debug_assert!(bench.board().dsp_dirs.contains(&"/bench/dsp/cdsp"));
    let result = (|| {
        let served = serve(&bench)?;
        let (fd, _) = hexrpc_hal::internal::ListenerPlumbing::listener_fd(served.session()).ok_or_else(|| fail("session not healthy"))?;
        let h = remotectl_open(&bench, fd, "apps_std").map_err(fail)?;
        let canary_path = canary.to_string_lossy().into_owned();
        let hostile = [
            (canary_path.clone(), "r"),
            ("../../../../etc/passwd".to_string(), "r"),
            ("/etc/passwd".to_string(), "r"),
            ("/bench/dsp/cdsp/../../../etc/passwd".to_string(), "r"),
            ("allowed.so".to_string(), "w"),
            ("allowed.so".to_string(), "r+"),
        ];
        for (name, mode) in &hostile {
            let status = fopen(&bench, fd, h, name, mode).map_err(fail)?;
            if status == 0 {
                return Err(fail(format!("fopen({name:?}, {mode:?}) was allowed")));
            }
        }
        let ok = fopen(&bench, fd, h, "allowed.so", "r").map_err(fail)?;
        if ok != 0 {
            return Err(fail(format!("the allowlisted file was refused ({ok})")));
        }
        if bench.was_opened(&canary_path) {
            return Err(fail("the canary outside the allowlist was opened"));
        }
        Ok((
            format!("{} refused", hostile.len()),
            "absolute, traversal and write-mode requests refused; canary never opened; allowlisted file served".into(),
        ))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Timeouts: a kernel that never returns ends with a timeout error within its deadline plus
/// 100 ms; after recovery the session launches correctly again.
pub fn timeouts() -> Outcome {
    let bench = bench();
    let served = serve(&bench)?;
    let lib = served.open_library(MODEL, image()).map_err(fail)?;
    let mut lease = served.session().alloc(8192).map_err(fail)?;
    lease.write_at(0, &[5u8; 64]).map_err(fail)?;
    let (a, b) = (lease.view(0, 64).map_err(fail)?, lease.view(4096, 64).map_err(fail)?);
    bench.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Hang);
    let sig = Signature::parse("buf,buf,u32").map_err(fail)?;
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &[BufferRef::of(&a), BufferRef::of(&b)], &[Scalar::U32(1)]).map_err(fail)?;
    let deadline = Duration::from_millis(200);
    let t0 = Instant::now();
    let r = lib.invoke_with_deadline(&mut packed.invoke_args().map_err(|e| fail(format!("{e:?}")))?, deadline);
    let took = t0.elapsed();
    let figure = format!("{} ms", took.as_millis());
    match r {
        Err(e) if e.cause == Cause::Timeout => {}
        other => return Err((figure, format!("expected a timeout, got {other:?}"))),
    }
    if took > deadline + Duration::from_millis(100) {
        return Err((figure, format!("the timeout came later than deadline + 100 ms ({deadline:?})")));
    }
    served.session().recover().map_err(fail)?;
    bench.release_hangs();
    launch(&lib, &a, &b, 2).map_err(fail)?;
    if !check_output(&a, &b, 2) {
        return Err((figure, "wrong output after recovery".into()));
    }
    Ok((
        figure,
        format!("hung kernel interrupted at its {} ms deadline, parked call freed by recovery, next launch correct", deadline.as_millis()),
    ))
}

/// Concurrency: 8 threads launch on one session, each on views at non-zero offsets of its own
/// lease; every output is correct and the DSP ledger stays clean.
pub fn concurrency() -> Outcome {
    let bench = bench();
    let served = serve(&bench)?;
    let lib = served.open_library(MODEL, image()).map_err(fail)?;
    const THREADS: u32 = 8;
    const LAUNCHES: u32 = 250;
    let (took, wrong, errors) = crate::device::launch_in_threads(
        THREADS,
        LAUNCHES,
        || served.session().alloc(16 * 1024),
        |t| (64 + 8 * t as usize, 8195 + t as usize, 1000 + t as usize),
        |input, output, n| {
            launch(&lib, input, output, n as u8)?;
            Ok(check_output(input, output, n as u8))
        },
    );
    let total = THREADS * LAUNCHES;
    let figure = format!("{total} launches");
    if !errors.is_empty() || wrong != 0 || bench.ledger_mismatches() != 0 {
        return Err((figure, format!("{wrong} wrong outputs, {} ledger mismatches, errors: {errors:?}", bench.ledger_mismatches())));
    }
    Ok((
        figure,
        format!(
            "{THREADS} threads x {LAUNCHES} on one session, all correct, 0 ledger mismatches, {:.0} ms on the bench",
            took.as_secs_f64() * 1e3
        ),
    ))
}

/// The device checks on the bench with the device test library's kernel played by a scripted
/// DSP model (used when the executor cannot run the built library here): the same operations as
/// `android/devicelib/hexrpc_selftest.c`; its `fopen` is sent through the listener as reverse
/// requests to `apps_std`, exactly as the DSP's C library does for a library's `fopen`.
pub fn scripted_device_target() -> (crate::device::Target<Bench>, crate::device::DeviceLibrary) {
    use crate::device::{DeviceLibrary, Target, NAME, OP_ADD, OP_FOPEN, OP_SPIN};
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;
    let listener = Arc::new(AtomicI32::new(-1));
    let cell = listener.clone();
    let make = move || {
        let bench = Bench::for_board(board());
        let weak = bench.downgrade();
        let fd_cell = cell.clone();
        bench.register_library(
            NAME,
            LibraryModel::new(EntryVersion::V2, 2, 3, move |k| {
                let (n, op, arg) =
                    (k.scalar_u32(0).unwrap_or(0) as usize, k.scalar_u32(1).unwrap_or(u32::MAX), k.scalar_u32(2).unwrap_or(0));
                match op {
                    OP_ADD => {
                        let n = n.min(k.buffer_len(0)).min(k.buffer_len(1));
                        let mut v = vec![0u8; n];
                        if k.read(0, 0, &mut v).is_ok() {
                            v.iter_mut().for_each(|b| *b = b.wrapping_add(arg as u8));
                            let _ = k.write(1, 0, &v);
                        }
                    }
                    OP_SPIN => {
                        let end = Instant::now() + Duration::from_millis(u64::from(arg));
                        while Instant::now() < end {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        let _ = k.write(1, 0, &[1]);
                    }
                    OP_FOPEN => {
                        let path = k.read_all(0).unwrap_or_default();
                        let path = String::from_utf8_lossy(path.split(|b| *b == 0).next().unwrap_or(&[])).into_owned();
                        let answer = match weak.upgrade() {
                            Some(bench) => {
                                let fd = Fd(fd_cell.load(Ordering::Acquire));
                                let opened = remotectl_open(&bench, fd, "apps_std").and_then(|h| fopen(&bench, fd, h, &path, "r"));
                                u8::from(matches!(opened, Ok(0)))
                            }
                            None => 0,
                        };
                        let _ = k.write(1, 0, &[answer]);
                    }
                    _ => {}
                }
            }),
        );
        bench
    };
    let target =
        Target { make: Box::new(make), access: bench_access(), on_served: Box::new(move |_, fd| listener.store(fd.0, Ordering::Release)) };
    let lib = DeviceLibrary { image: device_model_image(), origin: "scripted model of the library's kernel".into() };
    (target, lib)
}

fn device_model_image() -> &'static [u8] {
    use std::sync::OnceLock;
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| elf::library_image(crate::device::NAME, 8192))
}

/// The source of the device test library, built for the executor at run time.
const DEVICE_LIBRARY_SOURCE: &str = include_str!("../devicelib/hexrpc_selftest.c");

/// The device test library built from its C source with `build-lib`'s code, for the bench's
/// executor (qemu-hexagon runs the very Hexagon code that ships); once per process. `Err` says
/// why it cannot be used here (tools missing, build failed).
pub fn executor_device_library() -> Result<crate::device::DeviceLibrary, String> {
    use std::sync::OnceLock;
    static BUILT: OnceLock<Result<&'static [u8], String>> = OnceLock::new();
    let image = BUILT.get_or_init(|| {
        use hexrpc_libbuild::{build_library, BuildOptions};
        hexrpc_bench::executor::tools_available()?;
        let dir = std::env::temp_dir().join(format!("hexrpc-devicelib-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let built = (|| {
            let src = dir.join("hexrpc_selftest.c");
            std::fs::write(&src, DEVICE_LIBRARY_SOURCE).map_err(|e| e.to_string())?;
            let sig = Signature::parse(crate::device::SIGNATURE).map_err(|e| e.to_string())?;
            let out = dir.join("libhexrpc_selftest.so");
            let opts = BuildOptions { kernel_name: Some(crate::device::KERNEL.into()), ..BuildOptions::default() };
            build_library(&src, &sig, &out, &opts).map_err(|e| format!("build-lib: {e}"))?;
            std::fs::read(&out).map_err(|e| e.to_string())
        })();
        let _ = std::fs::remove_dir_all(&dir);
        built.map(|b| &*Box::leak(b.into_boxed_slice()))
    });
    image.clone().map(|image| crate::device::DeviceLibrary {
        image,
        origin: "the device test library built by build-lib, its Hexagon code run by the executor (qemu-hexagon)".into(),
    })
}

/// A plain bench: a library image that is a Hexagon shared object is loaded by the executor.
pub fn executor_device_target() -> crate::device::Target<Bench> {
    crate::device::Target { make: Box::new(|| Bench::for_board(board())), access: bench_access(), on_served: Box::new(|_, _| {}) }
}

/// The bench target and library for the device checks.
pub fn bench_device_setup(
    library: crate::device::LibraryChoice,
) -> (crate::device::Target<hexrpc_bench::Bench>, crate::device::DeviceLibrary) {
    match library.or_else(|_| crate::checks::executor_device_library()) {
        // The executor's shell sends the library's fopen to the listener as a DSP's C library
        // does, so every check, the permission refusals included, runs the library's code.
        Ok(lib) => (crate::checks::executor_device_target(), lib),
        Err(why) => {
            let (target, scripted) = crate::checks::scripted_device_target();
            let origin = format!("{} (the executor cannot run the built library here: {why})", scripted.origin);
            (target, crate::device::DeviceLibrary { origin, ..scripted })
        }
    }
}
