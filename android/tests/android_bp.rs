//! `Android.bp` (the checkout's only one, at its root) must describe the crates as Cargo builds
//! them: one module per crate with its real crate name, edition and source root; every path it
//! names exists relative to its own directory, and no module name repeats.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root")
}

/// `key = "value"` from a Cargo.toml section (a tiny reader: enough for our manifests).
fn toml_value(text: &str, section: &str, key: &str) -> Option<String> {
    let mut in_section = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_section = line == format!("[{section}]");
            continue;
        }
        if in_section {
            if let Some(rest) = line.strip_prefix(key) {
                let rest = rest.trim_start();
                if let Some(v) = rest.strip_prefix('=') {
                    return Some(v.trim().trim_matches('"').to_string());
                }
            }
        }
    }
    None
}

/// The Soong modules of Android.bp: (module type, [(property, raw value)]).
fn modules(bp: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    let mut cur: Option<(String, Vec<(String, String)>)> = None;
    for line in bp.lines() {
        let t = line.trim();
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        if let Some(kind) = t.strip_suffix(" {").filter(|_| !line.starts_with(' ')) {
            cur = Some((kind.to_string(), Vec::new()));
        } else if t == "}" && !line.starts_with(' ') {
            out.extend(cur.take());
        } else if let (Some((_, props)), Some((k, v))) = (cur.as_mut(), t.split_once(':')) {
            if line.starts_with("    ") && !line.starts_with("        ") {
                props.push((k.trim().to_string(), v.trim().trim_end_matches(',').to_string()));
            }
        }
    }
    out
}

#[test]
fn every_crate_is_described_with_its_real_name_edition_and_root() {
    let bp = std::fs::read_to_string(root().join("Android.bp")).expect("read Android.bp");
    let mods = modules(&bp);
    let root_toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let edition = toml_value(&root_toml, "workspace.package", "edition").expect("workspace edition");
    let members = ["drivers", "bsp", "hal", "runtime", "tests/bench", "android", "bindings/c"];
    let rust_mods = mods.iter().filter(|(kind, _)| kind.starts_with("rust_")).count();
    assert_eq!(rust_mods, members.len(), "one Rust module per crate");
    for dir in members {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
        let package = toml_value(&manifest, "package", "name").expect("package name");
        let is_bin = dir == "android";
        // The C ABI's crate is `hexrpc` (libhexrpc.so), a rust_ffi module.
        let is_ffi = dir == "bindings/c";
        let kind = if is_bin {
            "rust_binary"
        } else if is_ffi {
            "rust_ffi"
        } else {
            "rust_library"
        };
        let crate_name = if is_bin || is_ffi { "hexrpc".to_string() } else { package.replace('-', "_") };
        let src = if is_bin { format!("{dir}/src/main.rs") } else { format!("{dir}/src/lib.rs") };
        assert!(root().join(&src).exists(), "{src}");
        let m = mods
            .iter()
            .find(|(t, p)| t == kind && p.iter().any(|(k, v)| k == "crate_name" && v == &format!("\"{crate_name}\"")))
            .unwrap_or_else(|| panic!("no module for crate {crate_name}"));
        let get = |k: &str| m.1.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone()).unwrap_or_default();
        assert_eq!(m.0, kind, "{crate_name}");
        assert_eq!(get("edition"), format!("\"{edition}\""), "{crate_name} edition");
        assert_eq!(get("srcs"), format!("[\"{src}\"]"), "{crate_name} source root");
        assert_eq!(get("vendor"), "true", "{crate_name} is a vendor module");
        let name = get("name");
        let expected = if is_bin { "\"hexrpc\"".to_string() } else { format!("\"lib{crate_name}\"") };
        assert_eq!(name, expected, "{crate_name} module name");
        if is_ffi {
            // The header goes through a cc_library_headers module (every Soong has it; rust_ffi's
            // own export_include_dirs only newer Soong).
            assert_eq!(get("export_include_dirs"), "", "rust_ffi's export_include_dirs needs a newer Soong");
            let headers = mods
                .iter()
                .find(|(t, p)| t == "cc_library_headers" && p.iter().any(|(k, v)| k == "name" && v == "\"libhexrpc_headers\""))
                .expect("the libhexrpc_headers module");
            assert!(headers.1.iter().any(|(k, v)| k == "export_include_dirs" && v == "[\"bindings/c/include\"]"));
            assert!(root().join("bindings/c/include/hexrpc.h").exists());
        }
        if is_bin {
            assert_eq!(get("init_rc"), "[\"android/packaging/android/hexrpc.rc\"]");
            assert!(root().join("android/packaging/android/hexrpc.rc").exists());
        }
    }
}

#[test]
fn the_vendor_binary_has_no_simulator_and_ships_the_device_test_library() {
    let bp = std::fs::read_to_string(root().join("Android.bp")).expect("read Android.bp");
    let mods = modules(&bp);
    let bin = mods.iter().find(|(kind, _)| kind == "rust_binary").expect("the binary");
    let get = |m: &(String, Vec<(String, String)>), k: &str| m.1.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone()).unwrap_or_default();
    // Its rustlibs list spans lines: read the block from the file.
    let start = bp.find("rust_binary {").unwrap();
    let block = &bp[start..start + bp[start..].find("\n}").unwrap()];
    assert!(!block.contains("libhexrpc_bench"), "the simulator is linked into the vendor binary: {block}");
    assert!(!block.contains("\"bench\""), "the bench feature is on in the vendor binary: {block}");
    assert!(
        !block.contains("libhexrpc_libbuild") && !block.contains("\"build-lib\""),
        "the library builder is in the vendor binary: {block}"
    );
    assert_eq!(get(bin, "required"), "[\"libhexrpc_selftest.so\"]");
    let lib = mods
        .iter()
        .find(|(kind, p)| kind == "prebuilt_etc" && p.iter().any(|(k, v)| k == "name" && v == "\"libhexrpc_selftest.so\""))
        .expect("device test library module");
    assert_eq!(get(lib, "sub_dir"), "\"hexrpc\"");
    assert_eq!(get(lib, "vendor"), "true");
    // The path the CLI looks for it at is the one the module installs to.
    let device = std::fs::read_to_string(root().join("android/src/device.rs")).unwrap();
    assert!(device.contains("/vendor/etc/hexrpc/libhexrpc_selftest.so"));
    // The Cargo manifest's default features (the bench and the library builder) are what the
    // vendor build leaves off.
    let manifest = std::fs::read_to_string(root().join("android/Cargo.toml")).unwrap();
    assert_eq!(toml_value(&manifest, "features", "default").as_deref(), Some("[\"bench\", \"build-lib\"]"));
    // The property the .rc triggers on has a property_contexts entry.
    let rc = std::fs::read_to_string(root().join("android/packaging/android/hexrpc.rc")).unwrap();
    let contexts = std::fs::read_to_string(root().join("android/packaging/android/sepolicy/property_contexts")).unwrap();
    for prop in rc.split_whitespace().filter_map(|w| w.strip_prefix("property:")).filter_map(|p| p.split_once('=')).map(|(k, _)| k) {
        if prop.starts_with("sys.") {
            continue;
        }
        assert!(contexts.lines().any(|l| l.split_whitespace().next() == Some(prop)), "{prop} has no property_contexts entry");
    }
}

/// Every Android.bp under `dir`, skipping build outputs and VCS metadata.
fn android_bps(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        let ty = e.file_type().unwrap();
        if ty.is_dir() && !ty.is_symlink() {
            if !matches!(name.as_ref(), ".git" | "target" | "out" | "node_modules") && !name.starts_with('.') {
                android_bps(&path, out);
            }
        } else if name == "Android.bp" || name == "Android.mk" {
            out.push(path);
        }
    }
}

/// The quoted strings of a property's value (`["a", "b"]` or `"a"`).
fn strings(value: &str) -> Vec<String> {
    value.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

#[test]
fn one_android_bp_at_the_root_whose_paths_exist_and_whose_names_are_unique() {
    let mut found = Vec::new();
    android_bps(root(), &mut found);
    let found: Vec<String> = found.iter().map(|p| p.strip_prefix(root()).unwrap().display().to_string()).collect();
    assert_eq!(found, ["Android.bp"], "Soong would read every one of these: the checkout has exactly one, at its root");
    let bp = std::fs::read_to_string(root().join("Android.bp")).unwrap();
    let mods = modules(&bp);
    assert!(mods.len() >= 8, "{} modules", mods.len());
    let mut names = std::collections::BTreeSet::new();
    for (kind, props) in &mods {
        let name = props.iter().find(|(k, _)| k == "name").map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("a {kind} without a name"));
        assert!(names.insert(name.clone()), "module {name} is defined twice");
        for (k, v) in props {
            if !matches!(k.as_str(), "srcs" | "src" | "init_rc" | "export_include_dirs") {
                continue;
            }
            for path in strings(v) {
                assert!(
                    !path.starts_with('/') && !path.split('/').any(|c| c == ".."),
                    "{name}: {k} {path:?} leaves the module's directory"
                );
                // The device test library is built by android/packaging/build.sh into out/ (Soong
                // has no Hexagon toolchain): it exists once that ran, as docs/android.md says.
                if path.starts_with("out/") {
                    assert_eq!(path, "out/libhexrpc_selftest.so");
                    let build = std::fs::read_to_string(root().join("android/packaging/build.sh")).unwrap();
                    assert!(build.contains("${1:-$root/out}") && build.contains("\"$out/libhexrpc_selftest.so\""));
                    continue;
                }
                assert!(root().join(&path).exists(), "{name}: {k} {path:?} does not exist relative to Android.bp");
            }
        }
    }
    // The docs say the same layout.
    let doc = std::fs::read_to_string(root().join("docs/android.md")).unwrap();
    assert!(
        !doc.contains("android/Android.bp") && !doc.to_lowercase().contains("copy or link"),
        "docs/android.md still describes another layout"
    );
    assert!(doc.contains("qdsp_device") && doc.contains("adsprpcd_file"), "docs/android.md must name the Qualcomm policy types");
    // The policy that uses Qualcomm's types says so.
    let te = std::fs::read_to_string(root().join("android/packaging/android/sepolicy/hexrpc.te")).unwrap();
    for ty in ["qdsp_device", "adsprpcd_file"] {
        assert!(te.contains(ty), "hexrpc.te no longer uses {ty}: update docs/android.md");
    }
    assert!(te.contains("Depends on Qualcomm's device policy"), "hexrpc.te must say it depends on Qualcomm's device policy");
}
