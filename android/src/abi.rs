//! `hexrpc abi`: the kernel ABI this build was compiled for.

use hexrpc_drivers::{adsprpc, ion, layout};

use crate::json;

/// Every ioctl request number, ION first.
pub fn ioctls() -> impl Iterator<Item = &'static (&'static str, u32)> {
    ion::IOCTLS.iter().chain(adsprpc::IOCTLS.iter())
}

/// Every named constant.
pub fn constants() -> impl Iterator<Item = &'static (&'static str, u64)> {
    ion::CONSTANTS.iter().chain(adsprpc::CONSTANTS.iter())
}

/// The `--json` document: `{"structs": {...}, "ioctls": {...}, "constants": {...}}`.
pub fn to_json() -> String {
    let mut out = String::new();
    let mut top = json::Object::new(&mut out);
    top.str("target", std::env::consts::ARCH);
    top.raw("structs", |o| {
        let mut s = json::Object::new(o);
        for st in layout::STRUCTS {
            s.raw(st.name, |o| {
                let mut d = json::Object::new(o);
                d.num("size", st.size as u64).num("align", st.align as u64);
                d.raw("fields", |o| {
                    let mut f = json::Object::new(o);
                    for (name, off) in st.fields {
                        f.num(name, *off as u64);
                    }
                    f.end();
                });
                d.end();
            });
        }
        s.end();
    });
    top.raw("ioctls", |o| {
        let mut s = json::Object::new(o);
        for (name, nr) in ioctls() {
            s.num(name, u64::from(*nr));
        }
        s.end();
    });
    top.raw("constants", |o| {
        let mut s = json::Object::new(o);
        for (name, v) in constants() {
            s.num(name, *v);
        }
        s.end();
    });
    top.end();
    out.push('\n');
    out
}

/// The readable table.
pub fn to_text() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "Kernel ABI of this build ({}): msm ION 4.9 + downstream adsprpc", std::env::consts::ARCH);
    let _ = writeln!(out, "\nStructs (size/align in bytes; field @ offset)");
    for st in layout::STRUCTS {
        let fields: Vec<String> = st.fields.iter().map(|(n, o)| format!("{n}@{o}")).collect();
        let _ = writeln!(out, "  {:<28} {:>3} / {}  {}", st.name, st.size, st.align, fields.join(" "));
    }
    let _ = writeln!(out, "\nioctl requests");
    for (name, nr) in ioctls() {
        let _ = writeln!(out, "  {:<28} {:#010x}  ({nr})", name, nr);
    }
    let _ = writeln!(out, "\nConstants");
    for (name, v) in constants() {
        let _ = writeln!(out, "  {:<32} {:#x}  ({v})", name, v);
    }
    out
}
