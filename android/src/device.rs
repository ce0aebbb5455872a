//! The selftest's device checks: real launches of the **device test library**
//! (`android/devicelib/hexrpc_selftest.c`, built by `hexrpc build-lib` during packaging) through
//! the HAL, the launch ABI and the reverse file service, on whatever the syscall seam reaches.
//!
//! On a device that is the DSP. On the bench (`selftest --bench`, and the test seam `selftest
//! --device --seam bench`) the very same functions run on the simulated kernel; the library's
//! code runs as real Hexagon code through the executor (built from its C source by build-lib's
//! code) when clang-19, ld.lld-19 and qemu-hexagon run here, otherwise its behaviour is played by
//! a scripted DSP model of the same kernel, and the report says which.
//!
//! Where the bench is not faithful: the executor's DSP shell answers a library's `fopen` by
//! sending apps_std `fopen_with_env` (and `fclose`) through the listener, as a DSP's C library
//! does, but offers no `fread` on the result; the deadline check's kernel spins on the
//! emulator's host clock, not DSP time.
//!
//! Nothing here needs fault injection or the bench's ledger: what is measured on a device is
//! what the process itself can see (outputs, errors, its own fd and mapping counts, the reverse
//! service's metrics, wall time).

use std::time::{Duration, Instant};

use hexrpc_bsp::DeviceAccess;
use hexrpc_drivers::Syscalls;
// `listener_fd` (diagnostics): the bench's scripted model sends its reverse requests to it.
use hexrpc_hal::internal::ListenerPlumbing;
use hexrpc_hal::{BufferView, Cause, HalError, Library};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackError, PackedLaunch, Scalar, Signature};
use hexrpc_runtime::reverse::{FilePolicy, RequestError};
use hexrpc_runtime::ServedSession;

use crate::verdict::{Check, Outcome};

/// The kernel's C function name.
pub const KERNEL: &str = "hexrpc_selftest";
/// Its signature: `(in, out, n, op, k)`.
pub const SIGNATURE: &str = "buf,buf,u32,u32,u32";
/// `out[i] = in[i] + k` for `i < n`.
pub const OP_ADD: u32 = 0;
/// Spin for `k` ms (by the DSP's clock), then `out[0] = 1`.
pub const OP_SPIN: u32 = 1;
/// `fopen(in, "r")` on the DSP; `out[0]`: 0 refused (NULL), 1 opened, 2 no `fopen` here.
pub const OP_FOPEN: u32 = 2;
/// The library's name as the DSP loads it.
pub const NAME: &str = "hexrpc_selftest";
/// Where packaging installs it: the AGNOS .deb, then the Android vendor module.
pub const INSTALLED: &[&str] = &["/usr/lib/hexrpc/libhexrpc_selftest.so", "/vendor/etc/hexrpc/libhexrpc_selftest.so"];

/// The device test library to run.
pub struct DeviceLibrary {
    /// The image.
    pub image: &'static [u8],
    /// Where it came from, for the report (a path, or what runs it on the bench).
    pub origin: String,
}

/// The device test library for a run: where it was found, or why none was.
pub type LibraryChoice = Result<DeviceLibrary, String>;

/// Called with a new session's seam and listener fd.
pub type OnServed<S> = Box<dyn Fn(&S, hexrpc_drivers::Fd)>;

/// What the checks run on: a syscall seam, the device access for it, and (bench only) a hook
/// called once the served session is up, for the scripted DSP model.
pub struct Target<S> {
    /// Makes the seam for one check (a fresh bench per check; the device is the same device).
    pub make: Box<dyn Fn() -> S>,
    /// The access token.
    pub access: DeviceAccess,
    /// Called with the new session's listener fd (the scripted model needs it to send its
    /// reverse requests as the DSP would).
    pub on_served: OnServed<S>,
}

fn fail(detail: impl std::fmt::Display) -> (String, String) {
    (String::new(), detail.to_string())
}

struct Ctx<S: Syscalls + Clone + Send + Sync + 'static> {
    served: ServedSession<S>,
}

fn start<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>) -> Result<Ctx<S>, (String, String)> {
    let sys = (t.make)();
    let policy = FilePolicy::for_board(t.access.board()).map_err(|e| fail(format!("policy: {e:?}")))?;
    let served = ServedSession::start(sys.clone(), &t.access, policy).map_err(fail)?;
    if let Some((fd, _)) = served.session().listener_fd() {
        (t.on_served)(&sys, fd);
    }
    Ok(Ctx { served })
}

fn launch<S: Syscalls + Clone>(
    lib: &Library<'_, S>,
    input: &BufferView<'_>,
    output: &BufferView<'_>,
    op: u32,
    k: u32,
) -> Result<(), HalError> {
    let sig = Signature::parse(SIGNATURE).expect("fixed signature");
    let bufs = [BufferRef::of(input), BufferRef::of(output)];
    let n = input.len().min(output.len()) as u32;
    let mut packed =
        PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(n), Scalar::U32(op), Scalar::U32(k)]).expect("fixed launch");
    lib.invoke(&mut packed.invoke_args().expect("fits"))
}

fn added(input: &BufferView<'_>, output: &BufferView<'_>, k: u8) -> bool {
    let (mut a, mut b) = (vec![0u8; input.len()], vec![0u8; output.len()]);
    input.read(&mut a).is_ok() && output.read(&mut b).is_ok() && a.iter().zip(&b).all(|(x, y)| x.wrapping_add(k) == *y)
}

/// Launches at view offsets 0 and odd (v2), every output byte checked.
pub fn view_offsets<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Outcome {
    let ctx = start(t)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    let mut lease = ctx.served.session().alloc(64 * 1024).map_err(fail)?;
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 13 + 5) as u8).collect();
    let cases = [(0usize, 8192usize, 4096usize), (1, 20_001, 1000), (4097, 40_003, 333), (60_001, 12_345, 4000)];
    for (n, (i, o, len)) in cases.into_iter().enumerate() {
        lease.write_at(i, &data[..len]).map_err(fail)?;
        lease.write_at(o, &vec![0xEE; len]).map_err(fail)?;
        let (input, output) = (lease.view(i, len).map_err(fail)?, lease.view(o, len).map_err(fail)?);
        let k = 3 + n as u8;
        launch(&l, &input, &output, OP_ADD, u32::from(k)).map_err(fail)?;
        if !added(&input, &output, k) {
            return Err(fail(format!("wrong output for input {i}+{len} -> output {o}+{len}")));
        }
    }
    Ok((format!("{} launches", cases.len()), "v2 views at offsets 0, 1, 4097, 60001 of one lease: every output byte right".into()))
}

/// v1 refuses a view at a non-zero offset before anything reaches the kernel.
pub fn v1_refusal<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>) -> Outcome {
    let ctx = start(t)?;
    let lease = ctx.served.session().alloc(8192).map_err(fail)?;
    let v = lease.view(1, 100).map_err(fail)?;
    let sig = Signature::parse(SIGNATURE).map_err(fail)?;
    let r = PackedLaunch::new(
        AbiVersion::V1,
        &sig,
        &[BufferRef::of(&v), BufferRef::of(&v)],
        &[Scalar::U32(1), Scalar::U32(OP_ADD), Scalar::U32(0)],
    );
    match r {
        // The refusal is a value, not an ioctl: without a PackedLaunch there are no invoke
        // arguments to send.
        Err(PackError::V1NonZeroOffset { .. }) => {
            Ok(("refused".into(), "v1 launch on a view at offset 1 refused by the packer, before any ioctl".into()))
        }
        other => Err(fail(format!("v1 with a view at offset 1 was not refused: {other:?}"))),
    }
}

/// This process's open fds and its file- or device-backed mappings (`/proc/self/maps` lines with
/// an inode: ION and DMA buffers, memfds, files; anonymous memory such as thread stacks, which the
/// C library caches and reuses, is not a DSP resource and is left out).
pub fn own_counts() -> Result<(usize, usize), String> {
    let fds = std::fs::read_dir("/proc/self/fd").map_err(|e| format!("/proc/self/fd: {e}"))?.count();
    let maps = crate::io::read_text(std::path::Path::new("/proc/self/maps"), 64 << 20).map_err(|e| format!("/proc/self/maps: {e}"))?;
    let backed = maps.lines().filter(|l| l.split_whitespace().nth(4).is_some_and(|inode| inode != "0")).count();
    Ok((fds, backed))
}

/// [`own_counts`] once two readings 50 ms apart agree (threads ending after a session close
/// their descriptors asynchronously), at most 2 s.
fn settled_counts() -> Result<(usize, usize), String> {
    let mut last = own_counts()?;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let now = own_counts()?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

fn one_session<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Result<(), (String, String)> {
    let ctx = start(t)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    let lease = ctx.served.session().alloc(16 * 1024).map_err(fail)?;
    let (a, b) = (lease.view(11, 100).map_err(fail)?, lease.view(8001, 100).map_err(fail)?);
    for k in 0..20 {
        launch(&l, &a, &b, OP_ADD, k).map_err(fail)?;
    }
    Ok(())
}

/// fd/mapping reclamation: the process's own fd and file/device mapping counts are back where
/// they were after a session with the library and 20 launches (one warm-up session first, so
/// that one-time state, e.g. the C library's caches, is not counted as a leak).
pub fn reclamation<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Outcome {
    one_session(t, lib)?;
    let before = settled_counts().map_err(fail)?;
    one_session(t, lib)?;
    let t0 = Instant::now();
    let mut after = own_counts().map_err(fail)?;
    while after != before && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
        after = own_counts().map_err(fail)?;
    }
    let figure = format!("{} fds, {} maps", after.0 as i64 - before.0 as i64, after.1 as i64 - before.1 as i64);
    if after != before {
        return Err((figure, format!("fds {} -> {}, mappings {} -> {} after a full session", before.0, after.0, before.1, after.1)));
    }
    Ok((
        "0 leaked".into(),
        format!(
            "{} fds and {} file/device mappings before and after a session (library, 20 launches), from /proc/self",
            before.0, before.1
        ),
    ))
}

/// Reverse-RPC permission refusals: the library, on the DSP, asks to `fopen` paths outside the
/// allowlist; each is refused and counted by the service; an allowlisted file is served.
pub fn reverse_permissions<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Outcome {
    let ctx = start(t)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    let mut lease = ctx.served.session().alloc(8192).map_err(fail)?;
    let shell = t.access.board().shell_path.to_string_lossy().into_owned();
    let shell_name = shell.rsplit('/').next().unwrap_or(&shell).to_string();
    let mut ask = |path: &str| -> Result<u8, (String, String)> {
        let mut z = path.as_bytes().to_vec();
        z.push(0);
        lease.write_at(0, &z).map_err(fail)?;
        lease.write_at(4096, &[0xEE; 4]).map_err(fail)?;
        let (input, output) = (lease.view(0, z.len()).map_err(fail)?, lease.view(4096, 4).map_err(fail)?);
        launch(&l, &input, &output, OP_FOPEN, 0).map_err(fail)?;
        let mut r = [0u8; 4];
        output.read(&mut r).map_err(fail)?;
        Ok(r[0])
    };
    let metrics = || ctx.served.service().metrics().snapshot();
    let refused_before = metrics().error_count(RequestError::NotAllowed) + metrics().error_count(RequestError::ReadOnly);
    let forbidden = ["/etc/passwd", "../../../../etc/shadow", "/proc/self/environ"];
    for p in forbidden {
        match ask(p)? {
            0 => {}
            1 => return Err(fail(format!("the DSP opened {p}: the allowlist let it through"))),
            2 => return Err(fail("this DSP offers no fopen to the library: the refusal could not be exercised")),
            x => return Err(fail(format!("unexpected answer {x} for {p}"))),
        }
    }
    let refused = metrics().error_count(RequestError::NotAllowed) + metrics().error_count(RequestError::ReadOnly) - refused_before;
    if refused < forbidden.len() as u64 {
        return Err((
            format!("{refused} counted"),
            format!("{} forbidden opens but the service counted {refused} refusals", forbidden.len()),
        ));
    }
    if ask(&shell_name)? != 1 {
        return Err(fail(format!("the allowlisted {shell_name} was not served to the library")));
    }
    Ok((
        format!("{refused} refused"),
        format!("the library's fopen of {} refused and counted by the service; allowlisted {shell_name} served", forbidden.join(", ")),
    ))
}

/// A deadline: a launch that spins for 2 s on the DSP ends with a timeout within its 200 ms
/// deadline plus 250 ms; after `recover()` the next launch is correct.
pub fn deadline<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Outcome {
    let ctx = start(t)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    let mut lease = ctx.served.session().alloc(8192).map_err(fail)?;
    lease.write_at(1, &[9u8; 64]).map_err(fail)?;
    let (a, b) = (lease.view(1, 64).map_err(fail)?, lease.view(4099, 64).map_err(fail)?);
    let sig = Signature::parse(SIGNATURE).map_err(fail)?;
    let mut packed = PackedLaunch::new(
        AbiVersion::V2,
        &sig,
        &[BufferRef::of(&a), BufferRef::of(&b)],
        &[Scalar::U32(64), Scalar::U32(OP_SPIN), Scalar::U32(2000)],
    )
    .map_err(fail)?;
    let deadline = Duration::from_millis(200);
    let t0 = Instant::now();
    let r = l.invoke_with_deadline(&mut packed.invoke_args().map_err(|e| fail(format!("{e:?}")))?, deadline);
    let took = t0.elapsed();
    let figure = crate::human::duration(took);
    match r {
        Err(e) if e.cause == Cause::Timeout => {}
        other => return Err((figure, format!("expected a timeout, got {other:?}"))),
    }
    if took > deadline + Duration::from_millis(250) {
        return Err((figure, format!("the timeout came later than the deadline ({}) + 250 ms", crate::human::duration(deadline))));
    }
    ctx.served.session().recover().map_err(fail)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    launch(&l, &a, &b, OP_ADD, 2).map_err(fail)?;
    if !added(&a, &b, 2) {
        return Err((figure, "wrong output after recovery".into()));
    }
    Ok((
        figure,
        format!(
            "a 2 s kernel interrupted at its {} deadline; after recover() the next launch is correct",
            crate::human::duration(deadline)
        ),
    ))
}

/// Launches from `threads` threads at once, each on its own 16 KiB lease from `alloc`: thread `t`
/// writes a pattern of `len` bytes at `i` and makes `launches` launches
/// `launch(input, output, n)` on the views `(i, len)` and `(o, len)` (`(i, o, len) = at(t)`),
/// each of which says whether the output is right. Returns the wall time, the wrong outputs
/// and the errors.
pub(crate) fn launch_in_threads<'s, S: Syscalls + Clone + 's>(
    threads: u32,
    launches: u32,
    alloc: impl Fn() -> Result<hexrpc_hal::Lease<'s, S>, HalError> + Sync,
    at: impl Fn(u32) -> (usize, usize, usize) + Sync,
    launch: impl Fn(&BufferView<'_>, &BufferView<'_>, u32) -> Result<bool, HalError> + Sync,
) -> (Duration, u32, Vec<String>) {
    let wrong = std::sync::atomic::AtomicU32::new(0);
    let errors = std::sync::Mutex::new(Vec::new());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (alloc, at, launch, wrong, errors) = (&alloc, &at, &launch, &wrong, &errors);
            s.spawn(move || {
                let run = || -> Result<(), HalError> {
                    let mut lease = alloc()?;
                    let (i, o, len) = at(t);
                    let data: Vec<u8> = (0..len).map(|k| (k as u32 * 31 + t) as u8).collect();
                    lease.write_at(i, &data)?;
                    let (input, output) = (lease.view(i, len)?, lease.view(o, len)?);
                    for n in 0..launches {
                        if !launch(&input, &output, n)? {
                            wrong.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Ok(())
                };
                if let Err(e) = run() {
                    errors.lock().unwrap_or_else(|p| p.into_inner()).push(e.to_string());
                }
            });
        }
    });
    (t0.elapsed(), wrong.into_inner(), errors.into_inner().unwrap_or_else(|p| p.into_inner()))
}

/// 8 threads launch on one session, each on its own lease at odd offsets; every output right.
pub fn concurrency<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary) -> Outcome {
    const THREADS: u32 = 8;
    const LAUNCHES: u32 = 50;
    let ctx = start(t)?;
    let l = ctx.served.open_library(NAME, lib.image).map_err(fail)?;
    let (took, wrong, errors) = launch_in_threads(
        THREADS,
        LAUNCHES,
        || ctx.served.session().alloc(16 * 1024),
        |th| (1 + 8 * th as usize, 8195 + th as usize, 999 + th as usize),
        |input, output, n| {
            launch(&l, input, output, OP_ADD, n)?;
            Ok(added(input, output, n as u8))
        },
    );
    let figure = format!("{} launches", THREADS * LAUNCHES);
    if !errors.is_empty() || wrong != 0 {
        return Err((figure, format!("{wrong} wrong outputs, errors: {errors:?}")));
    }
    Ok((figure, format!("{THREADS} threads x {LAUNCHES} on one session, all correct, {} wall time", crate::human::duration(took))))
}

/// Every device check, in the acceptance order, reporting progress.
pub fn run<S: Syscalls + Clone + Send + Sync + 'static>(t: &Target<S>, lib: &DeviceLibrary, progress: &mut dyn FnMut(&str)) -> Vec<Check> {
    let mut out = Vec::new();
    let mut step = |name: &'static str, stage: &'static str, f: &dyn Fn() -> Outcome| {
        progress(name);
        out.push(Check::of(name, stage, f()));
    };
    step("view-offsets", "view offsets", &|| view_offsets(t, lib));
    step("v1-refusal", "view offsets", &|| v1_refusal(t));
    step("fd-mapping-reclamation", "fd/mapping reclamation", &|| reclamation(t, lib));
    step("reverse-file-permissions", "reverse-RPC file permissions", &|| reverse_permissions(t, lib));
    step("deadline", "timeouts", &|| deadline(t, lib));
    step("concurrency", "concurrency", &|| concurrency(t, lib));
    out
}

/// `hexrpc capture`'s session: a served session with `tap` installed before anything reaches
/// the DSP, the library opened (the DSP fetches it through the reverse file service), and, for
/// the device test library (`exercise`), one launch and the library's `fopen` of a forbidden and
/// of an allowlisted path. Returns a line saying what ran.
pub fn capture_session<S: Syscalls + Clone + Send + Sync + 'static>(
    t: &Target<S>,
    lib: &DeviceLibrary,
    tap: &'static dyn hexrpc_runtime::reverse::RequestTap,
    exercise: bool,
) -> Result<String, String> {
    let show = |(a, b): (String, String)| if a.is_empty() { b } else { format!("{a}: {b}") };
    let ctx = start(t).map_err(show)?;
    if !ctx.served.service().set_tap(tap) {
        return Err("the service already has a tap".into());
    }
    let l = ctx.served.open_library(NAME, lib.image).map_err(|e| e.to_string())?;
    if !exercise {
        return Ok("library opened".into());
    }
    let mut lease = ctx.served.session().alloc(8192).map_err(|e| e.to_string())?;
    let shell = t.access.board().shell_path.to_string_lossy().into_owned();
    let shell_name = shell.rsplit('/').next().unwrap_or(&shell).to_string();
    let mut answers = Vec::new();
    for path in ["/etc/passwd", shell_name.as_str()] {
        let mut z = path.as_bytes().to_vec();
        z.push(0);
        lease.write_at(0, &z).map_err(|e| e.to_string())?;
        let (input, output) = (lease.view(0, z.len()).map_err(|e| e.to_string())?, lease.view(4096, 4).map_err(|e| e.to_string())?);
        launch(&l, &input, &output, OP_FOPEN, 0).map_err(|e| e.to_string())?;
        let mut r = [0u8; 1];
        output.read(&mut r).map_err(|e| e.to_string())?;
        answers.push(format!("fopen({path}) -> {}", ["refused", "opened", "no fopen on this DSP"].get(r[0] as usize).unwrap_or(&"?")));
    }
    Ok(format!("library opened; {}", answers.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hexrpc_drivers::{Mapping, OpenFlags, Prot, RustixSys};

    #[test]
    fn own_counts_see_a_leaked_fd_and_a_leaked_shared_mapping() {
        let path = std::env::temp_dir().join(format!("hexrpc-own-counts-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // Other tests of this binary open files concurrently: a few attempts, one must be exact.
        let exact = (0..5).any(|_| {
            let before = settled_counts().unwrap();
            let fd = RustixSys.open(&cpath, OpenFlags::READ_WRITE).unwrap();
            let map = Mapping::map_shared(RustixSys, fd.raw(), 8192, Prot::ReadWrite).unwrap();
            let during = own_counts().unwrap();
            map.unmap().unwrap();
            RustixSys.close(fd).unwrap();
            during == (before.0 + 1, before.1 + 1) && settled_counts().unwrap() == before
        });
        let _ = std::fs::remove_file(&path);
        assert!(exact, "one more fd and one more file-backed mapping while held, none after");
    }
}
