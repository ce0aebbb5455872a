//! Builds Linux's drivers/misc/fastrpc.c (taken from Debian's linux-source-6.1 tarball at build
//! time, never committed) together with our kernel shim, the c/kshim*.c files (`SHIM`). The
//! driver is compiled once, through c/introspect.c, which includes it unchanged and adds read-only
//! views of its lists.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

const DEFAULT_TARBALL: &str = "/usr/src/linux-source-6.1.tar.xz";
const TOP: &str = "linux-source-6.1";
const MEMBERS: [&str; 3] = ["drivers/misc/fastrpc.c", "include/uapi/misc/fastrpc.h", "Makefile"];
/// The kernel shim's files (c/kshim.c has the overview; c/kshim_internal.h is what they share).
const SHIM: [&str; 6] = ["c/kshim.c", "c/kshim_sync.c", "c/kshim_mem.c", "c/kshim_dma.c", "c/kshim_dev.c", "c/kshim_file.c"];

fn main() {
    println!("cargo:rerun-if-env-changed=HEXRPC_LINUX_SOURCE");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=c");
    let tarball = env::var_os("HEXRPC_LINUX_SOURCE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_TARBALL));
    println!("cargo:rerun-if-changed={}", tarball.display());
    let meta = fs::metadata(&tarball).unwrap_or_else(|e| {
        panic!(
            "hexrpc-linux needs the kernel source tarball {} ({e}): install Debian's \
             linux-source-6.1 (apt-get install linux-source-6.1) or set HEXRPC_LINUX_SOURCE",
            tarball.display()
        )
    });
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let src = out.join("src");
    let top = src.join(TOP);
    extract(&tarball, &meta, &out, &src, &top);

    let kernel = kernel_version(&top.join("Makefile"));
    let package = package_version();
    println!("cargo:rustc-env=HEXRPC_LINUX_KERNEL={kernel}");
    println!("cargo:rustc-env=HEXRPC_LINUX_PACKAGE={package}");

    cc::Build::new()
        .file("c/introspect.c")
        .files(SHIM)
        .include("c")
        .include(top.join("drivers/misc"))
        .include(top.join("include"))
        .define("HX_KERNEL_VERSION", format!("\"{kernel}\"").as_str())
        .warnings(false)
        .flag("-Wall")
        .flag("-Wno-pointer-sign")
        .flag("-fno-strict-aliasing")
        .compile("hexrpc_linux");
}

/// Extracts the three files with one tar call, unless the stamp says this tarball (same path,
/// size and mtime) was extracted already.
fn extract(tarball: &Path, meta: &fs::Metadata, out: &Path, src: &Path, top: &Path) {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()))
        .unwrap_or_default();
    let want = format!("{} {} {}\n", tarball.display(), meta.len(), mtime);
    let stamp = out.join("linux-source.stamp");
    let have = fs::read_to_string(&stamp).ok();
    if have.as_deref() == Some(want.as_str()) && MEMBERS.iter().all(|m| top.join(m).is_file()) {
        return;
    }
    let _ = fs::remove_dir_all(src);
    fs::create_dir_all(src).expect("create OUT_DIR/src");
    let status = Command::new("tar")
        .arg("-xf")
        .arg(tarball)
        .args(["-I", "xz -T0", "--occurrence=1", "-C"])
        .arg(src)
        .args(MEMBERS.iter().map(|m| format!("{TOP}/{m}")))
        .status()
        .unwrap_or_else(|e| panic!("running tar: {e}"));
    assert!(status.success(), "tar could not extract {MEMBERS:?} from {}", tarball.display());
    for m in MEMBERS {
        assert!(top.join(m).is_file(), "{} has no {TOP}/{m}", tarball.display());
    }
    fs::write(&stamp, want).expect("write the extraction stamp");
}

/// VERSION.PATCHLEVEL.SUBLEVEL from the kernel's top Makefile.
fn kernel_version(makefile: &Path) -> String {
    let text = fs::read_to_string(makefile).expect("read the kernel Makefile");
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| panic!("the kernel Makefile has no {name}"))
    };
    format!("{}.{}.{}", field("VERSION"), field("PATCHLEVEL"), field("SUBLEVEL"))
}

/// The installed Debian package's version, "unknown" without dpkg or the package.
fn package_version() -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "linux-source-6.1"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
