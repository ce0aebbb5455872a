//! The C load/store helpers (`hrx_ld_u32`, `hrx_st_u64`, ...) a generated entry defines, only the
//! ones its body uses, and the scalar loads written with them.

use core::fmt::{self, Write};

use super::spec::KernelSpec;
use crate::launch::abi::LaunchLayout;
use crate::launch::scalar::ScalarType;

/// Writes the load/store helpers the body uses, and only those (clang warns about unused
/// `static inline` functions under `-Wall`).
pub(super) fn write_helpers<W: Write + ?Sized>(
    out: &mut W,
    l: &LaunchLayout,
    kernels: &[KernelSpec<'_>],
    batch: bool,
    cache: bool,
) -> fmt::Result {
    let n = kernels[0].signature.buffers();
    // The single path uses kernel 0's types; the batch path every kernel's.
    let used = if batch { kernels } else { &kernels[..1] };
    let uses = |ts: &[ScalarType]| used.iter().any(|k| k.signature.scalar_types().any(|t| ts.contains(&t)));
    let u64_ = uses(&[ScalarType::I64, ScalarType::U64, ScalarType::F64]);
    let u32_ =
        batch || cache || n > 0 || (l.validates && l.magic.is_some()) || u64_ || uses(&[ScalarType::I32, ScalarType::U32, ScalarType::F32]);
    writeln!(out)?;
    if u32_ {
        out.write_str(concat!(
            "static inline unsigned int hrx_ld_u32(const unsigned char *p) {\n",
            "  return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) | ((unsigned int)p[3] << 24);\n",
            "}\n",
        ))?;
    }
    if batch || uses(&[ScalarType::I16, ScalarType::U16, ScalarType::F16]) {
        out.write_str(
            "static inline unsigned short hrx_ld_u16(const unsigned char *p) { return (unsigned short)(p[0] | (p[1] << 8)); }\n",
        )?;
    }
    if u64_ {
        out.write_str(concat!(
            "static inline unsigned long long hrx_ld_u64(const unsigned char *p) {\n",
            "  return (unsigned long long)hrx_ld_u32(p) | ((unsigned long long)hrx_ld_u32(p + 4) << 32);\n",
            "}\n",
        ))?;
    }
    if uses(&[ScalarType::F32]) {
        out.write_str(
            "static inline float hrx_f32(unsigned int bits) { union { unsigned int u; float f; } c; c.u = bits; return c.f; }\n",
        )?;
    }
    if uses(&[ScalarType::F64]) {
        out.write_str(
            "static inline double hrx_f64(unsigned long long bits) { union { unsigned long long u; double f; } c; c.u = bits; return c.f; }\n",
        )?;
    }
    out.write_str(concat!(
        "static inline void hrx_st_u64(unsigned char *p, unsigned long long v) {\n",
        "  for (unsigned int i = 0; i < 8u; i++) p[i] = (unsigned char)(v >> (8u * i));\n",
        "}\n",
    ))?;
    if batch {
        out.write_str(concat!(
            "static inline void hrx_st_u32(unsigned char *p, unsigned int v) {\n",
            "  for (unsigned int i = 0; i < 4u; i++) p[i] = (unsigned char)(v >> (8u * i));\n",
            "}\n",
        ))?;
    }
    if batch || cache || (l.unwinds && n > 0) {
        out.write_str("static inline int hrx_map_failed(const void *p) { return p == (const void *)0 || p == (const void *)-1; }\n")?;
    }
    writeln!(out)
}

pub(super) fn scalar_load<W: Write + ?Sized>(out: &mut W, t: ScalarType, base: &str, at: usize) -> fmt::Result {
    match t {
        ScalarType::I8 => write!(out, "(signed char){base}[{at}]"),
        ScalarType::U8 => write!(out, "{base}[{at}]"),
        ScalarType::I16 => write!(out, "(short)hrx_ld_u16({base} + {at})"),
        ScalarType::U16 | ScalarType::F16 => write!(out, "hrx_ld_u16({base} + {at})"),
        ScalarType::I32 => write!(out, "(int)hrx_ld_u32({base} + {at})"),
        ScalarType::U32 => write!(out, "hrx_ld_u32({base} + {at})"),
        ScalarType::I64 => write!(out, "(long long)hrx_ld_u64({base} + {at})"),
        ScalarType::U64 => write!(out, "hrx_ld_u64({base} + {at})"),
        ScalarType::F32 => write!(out, "hrx_f32(hrx_ld_u32({base} + {at}))"),
        ScalarType::F64 => write!(out, "hrx_f64(hrx_ld_u64({base} + {at}))"),
    }
}
