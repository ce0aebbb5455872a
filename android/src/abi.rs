//! `hexrpc abi`: the kernel ABIs this build was compiled for.
//!
//! Both kernel generations are listed in the same maps: msm ION 4.9 + downstream adsprpc, and
//! dma-heap + upstream fastrpc. Struct names are distinct between the two (`fastrpc_ioctl_invoke`
//! downstream, `fastrpc_invoke` upstream); request and constant names are not (both headers
//! define `FASTRPC_IOCTL_INVOKE`, with different numbers), so the upstream ones are listed as
//! `upstream:NAME`. Every member of an anonymous union is listed with its offset.

use hexrpc_drivers::{adsprpc, dma_heap, ion, layout, upstream};

use crate::json;

/// Prefix of the upstream fastrpc names, which reuse downstream names.
pub const UPSTREAM_PREFIX: &str = "upstream:";

fn upstream_names<T: Copy>(table: &'static [(&'static str, T)]) -> impl Iterator<Item = (String, T)> {
    table.iter().map(|(n, v)| (format!("{UPSTREAM_PREFIX}{n}"), *v))
}

fn plain<T: Copy>(table: &'static [(&'static str, T)]) -> impl Iterator<Item = (String, T)> {
    table.iter().map(|(n, v)| ((*n).to_string(), *v))
}

/// Every ioctl request number: ION, downstream adsprpc, dma-heap / dma-buf, upstream fastrpc.
pub fn ioctls() -> impl Iterator<Item = (String, u32)> {
    plain(ion::IOCTLS).chain(plain(adsprpc::IOCTLS)).chain(plain(dma_heap::IOCTLS)).chain(upstream_names(upstream::IOCTLS))
}

/// Every named constant, in the same order.
pub fn constants() -> impl Iterator<Item = (String, u64)> {
    plain(ion::CONSTANTS).chain(plain(adsprpc::CONSTANTS)).chain(plain(dma_heap::CONSTANTS)).chain(upstream_names(upstream::CONSTANTS))
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
            s.num(&name, u64::from(nr));
        }
        s.end();
    });
    top.raw("constants", |o| {
        let mut s = json::Object::new(o);
        for (name, v) in constants() {
            s.num(&name, v);
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
    let _ = writeln!(
        out,
        "Kernel ABIs of this build ({}): msm ION 4.9 + downstream adsprpc; dma-heap + upstream fastrpc ({UPSTREAM_PREFIX}NAME)",
        std::env::consts::ARCH
    );
    let _ = writeln!(out, "\nStructs (size/align in bytes; field @ offset)");
    for st in layout::STRUCTS {
        let fields: Vec<String> = st.fields.iter().map(|(n, o)| format!("{n}@{o}")).collect();
        let _ = writeln!(out, "  {:<28} {:>3} / {}  {}", st.name, st.size, st.align, fields.join(" "));
    }
    let _ = writeln!(out, "\nioctl requests");
    for (name, nr) in ioctls() {
        let _ = writeln!(out, "  {:<40} {:#010x}  ({nr})", name, nr);
    }
    let _ = writeln!(out, "\nConstants");
    for (name, v) in constants() {
        let _ = writeln!(out, "  {:<40} {:#x}  ({v})", name, v);
    }
    out
}
