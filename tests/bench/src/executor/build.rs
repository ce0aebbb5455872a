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

/// One tool of the executor's toolchain: the command looked up on `PATH` and the Debian 12
/// package that installs it (`dpkg -S /usr/bin/COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `clang-19` (package `clang-19`): compiles the shell and the suite.
    Clang,
    /// `ld.lld-19` (package `lld-19`): links them.
    Lld,
    /// `qemu-hexagon` (package `qemu-user`): runs the shell.
    Qemu,
}

impl Tool {
    /// Every tool, in the order they are looked up.
    pub const ALL: [Tool; 3] = [Tool::Clang, Tool::Lld, Tool::Qemu];

    /// The command looked up on `PATH`.
    pub fn command(self) -> &'static str {
        match self {
            Tool::Clang => "clang-19",
            Tool::Lld => "ld.lld-19",
            Tool::Qemu => "qemu-hexagon",
        }
    }

    /// The Debian package that provides the command (Debian 12, bookworm main).
    pub fn debian_package(self) -> &'static str {
        match self {
            Tool::Clang => "clang-19",
            Tool::Lld => "lld-19",
            Tool::Qemu => "qemu-user",
        }
    }
}

/// The checkout's CI entry point, which installs every Debian package of [`Tool`] (with sudo
/// when not root) before it runs the tests.
pub const CI_INSTALLER: &str = "bash .ci/run";

/// Why the executor's toolchain cannot be used from this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolchainError {
    /// These tools are not on `PATH` as executable files: every missing one, in lookup order
    /// (never empty).
    Missing(Vec<Tool>),
    /// Every tool was found, but this one is an ELF for another machine than the one this
    /// process runs as: probably a test under qemu-user (cross testing) that found the host's
    /// tools, which it cannot be expected to launch from inside the emulator.
    ForeignMachine {
        /// The tool.
        tool: Tool,
        /// Where it was found.
        path: PathBuf,
        /// Its ELF `e_machine`.
        machine: u16,
        /// The `e_machine` of the architecture this process runs as.
        host_machine: u16,
    },
}

impl ToolchainError {
    /// The tools not found on `PATH` (empty for [`ToolchainError::ForeignMachine`]).
    pub fn missing(&self) -> &[Tool] {
        match self {
            ToolchainError::Missing(tools) => tools,
            ToolchainError::ForeignMachine { .. } => &[],
        }
    }

    /// The Debian packages that provide the missing tools, in lookup order.
    pub fn packages(&self) -> Vec<&'static str> {
        self.missing().iter().map(|t| t.debian_package()).collect()
    }

    /// The command that installs [`packages`](Self::packages) (None when nothing is missing).
    pub fn install_command(&self) -> Option<String> {
        let packages = self.packages();
        (!packages.is_empty()).then(|| format!("sudo apt-get install --no-install-recommends {}", packages.join(" ")))
    }

    /// What to do about it, for a person: the packages to install and the command that installs
    /// them (or [`CI_INSTALLER`], which does), or where the executor can run instead.
    pub fn hint(&self) -> String {
        match self {
            ToolchainError::Missing(tools) => {
                // A package named otherwise than its command says which command it provides.
                let provides: Vec<String> = tools
                    .iter()
                    .map(|t| match (t.debian_package(), t.command()) {
                        (p, c) if p == c => p.to_string(),
                        (p, c) => format!("{p} (provides {c})"),
                    })
                    .collect();
                let (noun, them) = if tools.len() == 1 { ("package", "it") } else { ("packages", "them") };
                format!(
                    "install the Debian {noun} {}: `{}`; or run `{CI_INSTALLER}` in the checkout, which installs {them} and then runs every test",
                    list(&provides),
                    self.install_command().unwrap_or_default(),
                )
            }
            ToolchainError::ForeignMachine { .. } => format!(
                "run it natively, not under qemu-user: the executor starts its tools from this process, so they must be {} binaries",
                std::env::consts::ARCH
            ),
        }
    }
}

/// `a`, `a and b`, `a, b and c`.
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl core::fmt::Display for ToolchainError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ToolchainError::Missing(tools) => {
                let mut names = tools.iter().map(|t| t.command());
                write!(f, "{} not found on PATH", names.next().unwrap_or("a tool"))?;
                let rest: Vec<&str> = names.collect();
                if !rest.is_empty() {
                    write!(f, " (also missing: {})", rest.join(", "))?;
                }
                Ok(())
            }
            ToolchainError::ForeignMachine { path, machine, host_machine, .. } => write!(
                f,
                "{} is an ELF for machine {machine} but this process runs as {} (machine {host_machine}), probably under qemu-user; \
                 launching it from inside the emulator is not expected to work",
                path.display(),
                std::env::consts::ARCH
            ),
        }
    }
}

impl std::error::Error for ToolchainError {}

fn which(path: &std::ffi::OsStr, tool: &str) -> Option<PathBuf> {
    std::env::split_paths(path).map(|d| d.join(tool)).find(|p| {
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

impl Toolchain {
    /// Finds clang-19, ld.lld-19 and qemu-hexagon on `PATH` and checks that they are binaries
    /// of the architecture this process runs as. The error names every missing tool (and its
    /// Debian package, [`ToolchainError::hint`]), or the tool of another machine: a test under
    /// qemu-aarch64 (cross testing) finds x86-64 tools it cannot be expected to launch from
    /// inside the emulator.
    pub fn find() -> Result<Toolchain, ToolchainError> {
        Self::find_on(&std::env::var_os("PATH").unwrap_or_default())
    }

    /// [`find`](Self::find) on the search path `path` (a `PATH` value).
    fn find_on(path: &std::ffi::OsStr) -> Result<Toolchain, ToolchainError> {
        let paths = Tool::ALL.map(|t| which(path, t.command()));
        let [Some(clang), Some(lld), Some(qemu)] = paths.clone() else {
            let missing = Tool::ALL.into_iter().zip(&paths).filter(|(_, p)| p.is_none()).map(|(t, _)| t).collect();
            return Err(ToolchainError::Missing(missing));
        };
        let tc = Toolchain { clang, lld, qemu };
        if let Some(host) = host_machine() {
            for (tool, p) in [(Tool::Qemu, &tc.qemu), (Tool::Clang, &tc.clang), (Tool::Lld, &tc.lld)] {
                match elf_machine(p) {
                    Some(m) if m != host => {
                        return Err(ToolchainError::ForeignMachine { tool, path: p.clone(), machine: m, host_machine: host })
                    }
                    _ => {}
                }
            }
        }
        Ok(tc)
    }
}

/// The environment variable naming a DSP shell built earlier (by [`build_shell`], e.g. the path
/// `hexrpc.bench_shell()` prints): with it set, the executor runs that file and needs only
/// qemu-hexagon on `PATH`, so a process with no compiler (a model file's run, as on a device)
/// can still run Hexagon code on the bench.
pub const SHELL_ENV: &str = "HEXRPC_BENCH_SHELL";

/// What runs the DSP processes' code: qemu-hexagon and the shell executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runner {
    /// qemu-hexagon.
    pub qemu: PathBuf,
    /// The shell executable it runs.
    pub shell: PathBuf,
}

/// The executor's [`Runner`]: the shell named by [`SHELL_ENV`] and qemu-hexagon from `PATH`
/// when the variable is set (no compiler needed), else the toolchain's own build
/// ([`Toolchain::find`], [`build_shell`]). The error says what is missing.
pub fn runner() -> Result<Runner, String> {
    match std::env::var_os(SHELL_ENV).filter(|v| !v.is_empty()) {
        Some(shell) => {
            let shell = PathBuf::from(shell);
            if !std::fs::metadata(&shell).is_ok_and(|m| m.is_file()) {
                return Err(format!("{SHELL_ENV}={}: no such file (build one with a toolchain first)", shell.display()));
            }
            // No machine check here, unlike [`Toolchain::find`]: whoever names a shell means to
            // run it, and a process under qemu-user (an aarch64 build on an x86-64 desk) starts
            // the host's qemu-hexagon through the host kernel (measured: it runs; the sandbox
            // cannot be installed from inside the emulator, see `confine`).
            let qemu = which(&std::env::var_os("PATH").unwrap_or_default(), Tool::Qemu.command())
                .ok_or_else(|| format!("{} not found on PATH ({SHELL_ENV} is set, so it is the only tool needed)", Tool::Qemu.command()))?;
            Ok(Runner { qemu, shell })
        }
        None => {
            let tc = tools_available()?;
            let shell = build_shell(&tc).map_err(|e| format!("building the bench's DSP shell: {e}"))?;
            Ok(Runner { qemu: tc.qemu, shell })
        }
    }
}

/// [`Toolchain::find`] with the reason as text ([`ToolchainError`]'s `Display`: which tools are
/// missing, or which one is of another machine); [`ToolchainError::hint`] says what to do.
pub fn tools_available() -> Result<Toolchain, String> {
    Toolchain::find().map_err(|e| e.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_toolchain_names_every_missing_tool_and_its_package() {
        let none = ToolchainError::Missing(Tool::ALL.to_vec());
        assert_eq!(none.to_string(), "clang-19 not found on PATH (also missing: ld.lld-19, qemu-hexagon)");
        assert_eq!(none.packages(), ["clang-19", "lld-19", "qemu-user"]);
        assert_eq!(none.install_command().as_deref(), Some("sudo apt-get install --no-install-recommends clang-19 lld-19 qemu-user"));
        let hint = none.hint();
        assert!(
            hint.starts_with("install the Debian packages clang-19, lld-19 (provides ld.lld-19) and qemu-user (provides qemu-hexagon): "),
            "{hint}"
        );
        assert!(hint.contains("`sudo apt-get install --no-install-recommends clang-19 lld-19 qemu-user`"), "{hint}");
        assert!(hint.contains("`bash .ci/run`") && hint.contains("installs them"), "{hint}");

        let qemu = ToolchainError::Missing(vec![Tool::Qemu]);
        assert_eq!(qemu.to_string(), "qemu-hexagon not found on PATH");
        let hint = qemu.hint();
        assert!(hint.starts_with("install the Debian package qemu-user (provides qemu-hexagon): "), "{hint}");
        assert!(hint.contains("`sudo apt-get install --no-install-recommends qemu-user`") && hint.contains("installs it"), "{hint}");
        assert!(!hint.contains("clang") && !hint.contains("lld"), "{hint}");
    }

    #[test]
    fn a_tool_of_another_machine_is_named_and_installs_nothing() {
        let e = ToolchainError::ForeignMachine { tool: Tool::Qemu, path: "/usr/bin/qemu-hexagon".into(), machine: 62, host_machine: 183 };
        assert!(e.to_string().starts_with("/usr/bin/qemu-hexagon is an ELF for machine 62 but this process runs as "), "{e}");
        assert_eq!((e.missing(), e.install_command()), (&[][..], None));
        assert!(e.hint().contains("not under qemu-user"), "{}", e.hint());
    }

    #[test]
    fn the_lookup_reports_all_missing_tools_of_a_search_path() {
        let dir = std::env::temp_dir().join(format!("hexrpc-toolchain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(Toolchain::find_on(dir.as_os_str()), Err(ToolchainError::Missing(Tool::ALL.to_vec())));
        assert_eq!(Toolchain::find_on(std::ffi::OsStr::new("")), Err(ToolchainError::Missing(Tool::ALL.to_vec())));
        // Executable scripts (not ELF, so no machine to compare) stand in for two of the tools;
        // a non-executable file is not a tool.
        for (name, mode) in [("clang-19", 0o755), ("ld.lld-19", 0o755), ("qemu-hexagon", 0o644)] {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let e = Toolchain::find_on(dir.as_os_str()).unwrap_err();
        assert_eq!(e, ToolchainError::Missing(vec![Tool::Qemu]));
        assert_eq!(e.packages(), ["qemu-user"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
