//! Table test: every request number and every struct layout of the upstream FastRPC and
//! dma-heap modules against the system's kernel headers (`linux-libc-dev`: `misc/fastrpc.h`,
//! `linux/dma-heap.h`, `linux/dma-buf.h`), compiled for aarch64 with `aarch64-linux-gnu-gcc`
//! and run under `qemu-aarch64`.
//!
//! The 6.1 header lacks `FASTRPC_IOCTL_INIT_CREATE_STATIC` and its struct (added after 6.1);
//! when the system header has them they are compared too, otherwise the unit test in
//! `upstream.rs` checks the independently typed mainline value.
//!
//! Skips (with a message) when the cross compiler, the emulator or the headers are missing, and
//! when the test itself runs under emulation (a nested qemu-aarch64 cannot be started there).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use hexrpc_drivers::layout::{StructLayout, STRUCTS};
use hexrpc_drivers::{dma_heap, upstream};

const CC: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64";

/// (struct, fields that exist in the 6.1 header).
const STRUCT_FIELDS: &[(&str, &[&str])] = &[
    ("fastrpc_invoke_args", &["ptr", "length", "fd", "attr"]),
    ("fastrpc_invoke", &["handle", "sc", "args"]),
    ("fastrpc_init_create", &["filelen", "filefd", "attrs", "siglen", "file"]),
    ("fastrpc_alloc_dma_buf", &["fd", "flags", "size"]),
    ("fastrpc_req_mmap", &["fd", "flags", "vaddrin", "size", "vaddrout"]),
    ("fastrpc_mem_map", &["version", "fd", "offset", "flags", "vaddrin", "length", "vaddrout", "attrs", "reserved"]),
    ("fastrpc_req_munmap", &["vaddrout", "size"]),
    ("fastrpc_mem_unmap", &["vesion", "fd", "vaddr", "length", "reserved"]),
    ("fastrpc_ioctl_capability", &["domain", "attribute_id", "capability", "reserved"]),
    ("dma_heap_allocation_data", &["len", "fd", "fd_flags", "heap_flags"]),
    ("dma_buf_sync", &["flags"]),
];

fn tool(name: &str) -> bool {
    Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <sys/ioctl.h>\n#include <fcntl.h>\n\
         #include <linux/types.h>\n#include <misc/fastrpc.h>\n#include <linux/dma-heap.h>\n#include <linux/dma-buf.h>\n\
         int main(void) {\n",
    );
    for (name, _) in upstream::IOCTLS.iter().chain(dma_heap::IOCTLS) {
        c.push_str(&format!("#ifdef {name}\n  printf(\"ioctl {name} %lu\\n\", (unsigned long)({name}));\n#endif\n"));
    }
    for (name, _) in upstream::CONSTANTS.iter().chain(dma_heap::CONSTANTS) {
        if name.starts_with("FASTRPC_MAP_") || name.starts_with("FASTRPC_MODE_") {
            // enum constants: always present in the header
            c.push_str(&format!("  printf(\"const {name} %lu\\n\", (unsigned long)({name}));\n"));
        } else if name.starts_with("FASTRPC_ATTR_") || name.starts_with("DMA_") {
            c.push_str(&format!("#ifdef {name}\n  printf(\"const {name} %lu\\n\", (unsigned long)({name}));\n#endif\n"));
        }
    }
    for (st, fields) in STRUCT_FIELDS {
        c.push_str(&format!("  printf(\"size {st} %zu %zu\\n\", sizeof(struct {st}), _Alignof(struct {st}));\n"));
        for f in *fields {
            c.push_str(&format!("  printf(\"field {st} {f} %zu\\n\", offsetof(struct {st}, {f}));\n"));
        }
    }
    c.push_str("#ifdef FASTRPC_IOCTL_INIT_CREATE_STATIC\n");
    c.push_str("  printf(\"size fastrpc_init_create_static %zu %zu\\n\", sizeof(struct fastrpc_init_create_static), _Alignof(struct fastrpc_init_create_static));\n");
    for f in ["namelen", "memlen", "name"] {
        c.push_str(&format!(
            "  printf(\"field fastrpc_init_create_static {f} %zu\\n\", offsetof(struct fastrpc_init_create_static, {f}));\n"
        ));
    }
    c.push_str("#endif\n  return 0;\n}\n");
    c
}

fn layout(name: &str) -> &'static StructLayout {
    STRUCTS.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no layout for {name}"))
}

#[test]
fn upstream_and_dma_heap_match_the_system_headers_for_aarch64() {
    if cfg!(target_arch = "aarch64") {
        eprintln!("SKIPPED: running under emulation; the host run of this test compiles the headers for aarch64");
        return;
    }
    if !Path::new("/usr/include/misc/fastrpc.h").exists() || !tool(CC) || !tool(QEMU) {
        eprintln!("SKIPPED: needs /usr/include/misc/fastrpc.h (linux-libc-dev), {CC} and {QEMU}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("hexrpc-abi-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join("abi.c"), dir.join("abi"));
    std::fs::write(&src, program()).unwrap();
    // The uapi headers are architecture independent; the cross compiler's own sysroot lacks
    // them, so the system's are added after it (-idirafter keeps its libc and asm/ first).
    let out = Command::new(CC)
        .args(["-static", "-O0", "-Wall", "-Werror", "-idirafter", "/usr/include", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{CC} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(QEMU).arg(&bin).output().unwrap();
    assert!(run.status.success(), "{QEMU} failed: {run:?}");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(run.stdout).unwrap();

    let mut ioctls = BTreeMap::new();
    let mut consts = BTreeMap::new();
    let mut sizes = BTreeMap::new();
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w.as_slice() {
            ["ioctl", n, v] => drop(ioctls.insert(n.to_string(), v.parse::<u64>().unwrap())),
            ["const", n, v] => drop(consts.insert(n.to_string(), v.parse::<u64>().unwrap())),
            ["size", s, sz, al] => drop(sizes.insert(s.to_string(), (sz.parse::<usize>().unwrap(), al.parse::<usize>().unwrap()))),
            ["field", s, f, off] => drop(fields.insert((s.to_string(), f.to_string()), off.parse::<usize>().unwrap())),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    // Every request of the 6.1 header is present and equal; only INIT_CREATE_STATIC may be absent.
    let mut compared = 0;
    for (name, nr) in upstream::IOCTLS.iter().chain(dma_heap::IOCTLS) {
        match ioctls.get(*name) {
            Some(v) => {
                assert_eq!(*v, u64::from(*nr), "{name}");
                compared += 1;
            }
            None => assert_eq!(*name, "FASTRPC_IOCTL_INIT_CREATE_STATIC", "{name} missing from the system header"),
        }
    }
    assert!(compared >= 13, "only {compared} requests compared");
    for (name, v) in upstream::CONSTANTS.iter().chain(dma_heap::CONSTANTS) {
        if let Some(h) = consts.get(*name) {
            assert_eq!(h, v, "{name}");
        }
    }
    assert!(consts.len() >= 20, "constants compared: {consts:?}");
    for (name, (size, align)) in &sizes {
        let l = layout(name);
        assert_eq!((l.size, l.align), (*size, *align), "{name} size/align");
    }
    assert!(sizes.len() >= STRUCT_FIELDS.len());
    for ((st, f), off) in &fields {
        let l = layout(st);
        let ours = l.fields.iter().find(|(n, _)| n == f).unwrap_or_else(|| panic!("{st}.{f} not listed"));
        assert_eq!(ours.1, *off, "{st}.{f}");
    }
}
