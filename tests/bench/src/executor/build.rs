//! The executor's build step, with clang-19 and ld.lld-19:
//!
//! * the **DSP shell** (`tests/hexagon/runtime/`: loader, HAP functions, C library, request
//!   loop) -> a static Hexagon executable, started once per simulated DSP process;
//! * a **suite library**: an entry's C source + the suite's kernels + `hrx_expf` -> a Hexagon
//!   shared object laid out by a given linker script, which the bench publishes like any
//!   library and the shell loads ([`build_library`]). The bench does not generate entries: the
//!   caller passes the entry's C text and the linker script (hexrpc-scenarios' `suite` module
//!   makes them with hexrpc-runtime's entry generator and `hexrpc build-lib`'s linker script).
//!
//! ```text
//! clang-19 --target=hexagon -mcpu=hexagonv65 -O2 -fPIC -ffreestanding -fno-builtin -nostdlib
//!          -ffp-contract=off -Wall -Werror -I tests/hexagon/runtime [HVX flags] -c X.c -o X.o
//! ld.lld-19 -static -e _start -o shell.elf hrx_dsp.o hrx_libc.o hrx_math.o
//! ld.lld-19 -shared --hash-style=sysv -z max-page-size=4096 -T link.ld -o LIB.so entry.o math.o kernels.o
//! ```
//!
//! HVX flavour flags: `-mhvx=v65 -mhvx-length=128b -mllvm -hexagon-autohvx=true`. Sources are
//! compiled in from `tests/hexagon/` (so the build does not depend on the working directory);
//! outputs are cached in `<cache root>/<hash of sources and flags>/` (see [`cache_root`]) and in
//! memory, so each test binary builds each artefact at most once.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The DSP shell source (loader, HAP functions, request loop).
pub const RUNTIME_C: &str = include_str!("../../../hexagon/runtime/hrx_dsp.c");
/// The shell's C library (memory functions, compiler helpers, libm subset).
pub const LIBC_C: &str = include_str!("../../../hexagon/runtime/hrx_libc.c");
/// Its header.
pub const RUNTIME_H: &str = include_str!("../../../hexagon/runtime/hrx_dsp.h");
/// The plain-C kernel suite.
pub const KERNELS_C: &str = include_str!("../../../hexagon/kernels/kernels.c");
/// Kernels written with HVX intrinsics.
pub const HVX_C: &str = include_str!("../../../hexagon/kernels/hvx.c");
/// `hrx_expf`.
pub const MATH_C: &str = include_str!("../../../hexagon/kernels/hrx_math.c");

/// Flags of every translation unit.
pub const CFLAGS: &[&str] = &[
    "--target=hexagon",
    "-mcpu=hexagonv65",
    "-O2",
    "-fPIC",
    "-ffreestanding",
    "-fno-builtin",
    "-nostdlib",
    "-ffp-contract=off",
    "-Wall",
    "-Werror",
];
/// Extra flags of the HVX flavour (and of the intrinsics file, always).
pub const HVX_FLAGS: &[&str] = &["-mhvx=v65", "-mhvx-length=128b", "-mllvm", "-hexagon-autohvx=true"];

/// Which build of the kernel sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// Scalar code (no HVX).
    Scalar,
    /// `-mhvx=v65 -mhvx-length=128b -mllvm -hexagon-autohvx=true`; the `*_hvx` kernels use
    /// intrinsics.
    Hvx,
}

/// The tools, found on `PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// clang-19.
    pub clang: PathBuf,
    /// ld.lld-19.
    pub lld: PathBuf,
    /// qemu-hexagon.
    pub qemu: PathBuf,
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// `e_machine` of an ELF file (None if it is not ELF, e.g. a script).
fn elf_machine(p: &Path) -> Option<u16> {
    use std::io::Read;
    let mut h = [0u8; 20];
    std::fs::File::open(p).ok()?.read_exact(&mut h).ok()?;
    hexrpc_drivers::elf::machine_of(&h).ok()
}

fn host_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        "x86" => Some(3),
        "arm" => Some(40),
        "riscv64" => Some(243),
        _ => None,
    }
}

/// Finds clang-19, ld.lld-19 and qemu-hexagon, and checks that they are binaries of the
/// architecture this process runs as. A test under qemu-aarch64 (cross testing) finds x86-64
/// tools it cannot be expected to launch from inside the emulator: that is reported as the
/// reason, like a missing tool.
pub fn tools_available() -> Result<Toolchain, String> {
    let find = |t: &str| which(t).ok_or_else(|| format!("{t} not found on PATH"));
    let tc = Toolchain { clang: find("clang-19")?, lld: find("ld.lld-19")?, qemu: find("qemu-hexagon")? };
    let host = host_machine();
    for p in [&tc.qemu, &tc.clang, &tc.lld] {
        if let (Some(m), Some(h)) = (elf_machine(p), host) {
            if m != h {
                return Err(format!(
                    "{} is an ELF for machine {m} but this process runs as {} (machine {h}), probably under qemu-user; \
                     launching it from inside the emulator is not expected to work",
                    p.display(),
                    std::env::consts::ARCH
                ));
            }
        }
    }
    Ok(tc)
}

/// Why an artefact could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The caller could not generate the entry (bad signature or kernel name).
    Entry(String),
    /// A file operation failed.
    Io(String),
    /// A tool failed: the command and what it printed.
    Tool(String),
    /// The output is not a loadable Hexagon shared object.
    NotLibrary,
}

impl core::fmt::Display for BuildError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BuildError::Entry(e) => write!(f, "entry: {e}"),
            BuildError::Io(e) => write!(f, "io: {e}"),
            BuildError::Tool(e) => write!(f, "{e}"),
            BuildError::NotLibrary => f.write_str("the linked file is not a Hexagon shared object with a dynamic section"),
        }
    }
}

impl std::error::Error for BuildError {}

/// True if `image` is what the bench's DSP hands to the shell's loader: an ELF32 little-endian
/// Hexagon shared object (`ET_DYN`) with a `PT_DYNAMIC` program header (bounds-checked; the
/// shell's loader checks everything else and names what it refuses).
pub fn is_shared_library(image: &[u8]) -> bool {
    use hexrpc_drivers::elf::{Elf, EM_HEXAGON, ET_DYN, PT_DYNAMIC};
    Elf::parse(image).is_ok_and(|elf| {
        elf.elf_type() == ET_DYN && elf.machine() == EM_HEXAGON && elf.program_headers().iter().any(|p| p.p_type.get() == PT_DYNAMIC)
    })
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

struct Cache {
    dir: PathBuf,
    objects: HashMap<String, PathBuf>,
    images: HashMap<String, &'static [u8]>,
    shell: Option<PathBuf>,
}

fn cache(tc: &Toolchain) -> Result<&'static Mutex<Cache>, BuildError> {
    static CACHE: OnceLock<Result<Mutex<Cache>, BuildError>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let mut h = 0xcbf2_9ce4_8422_2325u64;
            for s in [RUNTIME_C, RUNTIME_H, LIBC_C, KERNELS_C, HVX_C, MATH_C] {
                fnv(&mut h, s.as_bytes());
            }
            for f in CFLAGS.iter().chain(HVX_FLAGS) {
                fnv(&mut h, f.as_bytes());
            }
            fnv(&mut h, tc.clang.as_os_str().as_encoded_bytes());
            let dir = cache_root().join(format!("{h:016x}"));
            std::fs::create_dir_all(&dir).map_err(|e| BuildError::Io(format!("{}: {e}", dir.display())))?;
            for (name, text) in [
                ("hrx_dsp.c", RUNTIME_C),
                ("hrx_dsp.h", RUNTIME_H),
                ("hrx_libc.c", LIBC_C),
                ("kernels.c", KERNELS_C),
                ("hvx.c", HVX_C),
                ("hrx_math.c", MATH_C),
            ] {
                write_atomic(&dir.join(name), text.as_bytes())?;
            }
            Ok(Mutex::new(Cache { dir, objects: HashMap::new(), images: HashMap::new(), shell: None }))
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)).map_err(|e| BuildError::Io(format!("{}: {e}", path.display())))
}

fn run(tool: &Path, args: &[OsString]) -> Result<(), BuildError> {
    let out = Command::new(tool).args(args).output().map_err(|e| BuildError::Tool(format!("{}: {e}", tool.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let cmd: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    Err(BuildError::Tool(format!(
        "{} {} failed ({}):\n{}",
        tool.display(),
        cmd.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    )))
}

fn compile(tc: &Toolchain, c: &mut Cache, source: &str, object: &str, hvx: bool) -> Result<PathBuf, BuildError> {
    if let Some(p) = c.objects.get(object) {
        return Ok(p.clone());
    }
    let out = c.dir.join(object);
    if !out.exists() {
        let mut args: Vec<OsString> = CFLAGS.iter().map(OsString::from).collect();
        if hvx {
            args.extend(HVX_FLAGS.iter().map(OsString::from));
        }
        let tmp = c.dir.join(format!("{object}.tmp{}", std::process::id()));
        args.extend(["-I".into(), c.dir.clone().into(), "-c".into(), c.dir.join(source).into(), "-o".into(), tmp.clone().into()]);
        run(&tc.clang, &args)?;
        std::fs::rename(&tmp, &out).map_err(|e| BuildError::Io(format!("{}: {e}", out.display())))?;
    }
    c.objects.insert(object.to_string(), out.clone());
    Ok(out)
}

/// Builds (or finds in the cache) the shell executable the bench starts under qemu-hexagon.
pub fn build_shell(tc: &Toolchain) -> Result<PathBuf, BuildError> {
    let mut c = cache(tc)?.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &c.shell {
        return Ok(p.clone());
    }
    let runtime = compile(tc, &mut c, "hrx_dsp.c", "hrx_dsp.o", false)?;
    let libc = compile(tc, &mut c, "hrx_libc.c", "hrx_libc.o", false)?;
    let math = compile(tc, &mut c, "hrx_math.c", "hrx_math-scalar.o", false)?;
    let out = c.dir.join("shell.elf");
    if !out.exists() {
        let tmp = c.dir.join(format!("shell.elf.tmp{}", std::process::id()));
        let args: Vec<OsString> =
            vec!["-static".into(), "-e".into(), "_start".into(), "-o".into(), tmp.clone().into(), runtime.into(), libc.into(), math.into()];
        run(&tc.lld, &args)?;
        std::fs::rename(&tmp, &out).map_err(|e| BuildError::Io(format!("{}: {e}", out.display())))?;
    }
    c.shell = Some(out.clone());
    Ok(out)
}

/// Kernels of the suite that return a status (`int`) instead of `void`.
pub const STATUS_KERNELS: &[&str] = &["check_u32"];

/// What a suite library is made of: an entry generated by the caller, the suite kernels it
/// calls, and the layout.
#[derive(Clone, Copy, Debug)]
pub struct LibrarySources<'a> {
    /// The entry's C source (e.g. hexrpc-runtime's `write_entry` or `write_batch_entry` output).
    pub entry_c: &'a str,
    /// The linker script the shared object is laid out by (e.g. `hexrpc build-lib`'s).
    pub linker_script: &'a str,
    /// The suite kernels the entry calls: those named `*_hvx` come from the intrinsics file
    /// (always built with HVX), the others from the plain-C suite in `flavour`.
    pub kernels: &'a [&'a str],
    /// Which build of the plain-C suite and of `hrx_expf`.
    pub flavour: Flavour,
}

/// Builds (or finds in the cache) the shared object of `sources`: the entry, `hrx_expf` and the
/// kernel objects the entry needs, linked by the given script. The library imports memset,
/// memcpy and the compiler helpers from the shell. Images are published as `&'static [u8]`
/// (the HAL's registry contract): each artefact is leaked once per process.
pub fn build_library(tc: &Toolchain, sources: &LibrarySources<'_>) -> Result<&'static [u8], BuildError> {
    let fl = match sources.flavour {
        Flavour::Scalar => "scalar",
        Flavour::Hvx => "hvx",
    };
    let plain = sources.kernels.iter().any(|k| !k.ends_with("_hvx"));
    let intrinsics = sources.kernels.iter().any(|k| k.ends_with("_hvx"));
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, sources.entry_c.as_bytes());
    fnv(&mut h, &[0, u8::from(plain), u8::from(intrinsics), 0]);
    let mut s = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut s, sources.linker_script.as_bytes());
    let key = format!("lib-{fl}-{h:016x}-{s:016x}");
    let mut c = cache(tc)?.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(img) = c.images.get(&key) {
        return Ok(img);
    }
    let script = c.dir.join(format!("link-{s:016x}.ld"));
    write_atomic(&script, sources.linker_script.as_bytes())?;
    let entry_c = format!("entry-{key}.c");
    write_atomic(&c.dir.join(&entry_c), sources.entry_c.as_bytes())?;
    let hvx = sources.flavour == Flavour::Hvx;
    let entry = compile(tc, &mut c, &entry_c, &format!("entry-{key}.o"), false)?;
    let math = compile(tc, &mut c, "hrx_math.c", &format!("hrx_math-{fl}.o"), hvx)?;
    let mut objects = vec![entry, math];
    if plain {
        objects.push(compile(tc, &mut c, "kernels.c", &format!("kernels-{fl}.o"), hvx)?);
    }
    if intrinsics {
        objects.push(compile(tc, &mut c, "hvx.c", "hvx.o", true)?);
    }
    let out = c.dir.join(format!("{key}.so"));
    if !out.exists() {
        let tmp = c.dir.join(format!("{key}.so.tmp{}", std::process::id()));
        let mut args: Vec<OsString> = vec![
            "-shared".into(),
            "--hash-style=sysv".into(),
            "-z".into(),
            "max-page-size=4096".into(),
            "-T".into(),
            script.into(),
            "-o".into(),
            tmp.clone().into(),
        ];
        args.extend(objects.into_iter().map(OsString::from));
        run(&tc.lld, &args)?;
        std::fs::rename(&tmp, &out).map_err(|e| BuildError::Io(format!("{}: {e}", out.display())))?;
    }
    let bytes = std::fs::read(&out).map_err(|e| BuildError::Io(format!("{}: {e}", out.display())))?;
    if !is_shared_library(&bytes) {
        return Err(BuildError::NotLibrary);
    }
    let img: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    c.images.insert(key, img);
    Ok(img)
}

/// The directory holding the cached artefacts (for inspection, e.g. disassembly in a test).
pub fn cache_dir(tc: &Toolchain) -> Result<PathBuf, BuildError> {
    Ok(cache(tc)?.lock().unwrap_or_else(|e| e.into_inner()).dir.clone())
}

/// Where built artefacts are kept between processes: `HEXRPC_EXEC_CACHE` if set; beside a test
/// binary in a Cargo target directory (`target/<profile>/hexrpc-exec-build`, removed with the
/// build); else the user's cache directory (`$XDG_CACHE_HOME` or `~/.cache`, `hexrpc/exec-build`).
/// The shared temporary directory only when neither is set (a cache there outlives everything
/// that made it).
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("HEXRPC_EXEC_CACHE") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().ok();
    if let Some(profile) = exe.as_deref().and_then(Path::parent).filter(|d| d.ends_with("deps")).and_then(Path::parent) {
        return profile.join("hexrpc-exec-build");
    }
    let home_cache = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"));
    match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or(home_cache) {
        Some(cache) => cache.join("hexrpc").join("exec-build"),
        None => std::env::temp_dir().join("hexrpc-exec-build"),
    }
}
