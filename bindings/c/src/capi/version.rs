//! Versions: the header's `HEXRPC_VERSION_*` numbers, the library's (`hexrpc_version`,
//! `hexrpc_version_number`) and the start-up check that one serves the other
//! (`hexrpc_version_check`).

use std::ffi::c_char;

use super::last_error::run;
use crate::error::{hexrpc_status, Failure};

/// The major version of this hexrpc.h (and of the library it was generated with). Each of the
/// three parts fits 16 bits (a static assertion in the library's source), so `HEXRPC_VERSION`
/// cannot collide.
pub const HEXRPC_VERSION_MAJOR: u32 = 0;
/// The minor version of this hexrpc.h.
pub const HEXRPC_VERSION_MINOR: u32 = 1;
/// The patch version of this hexrpc.h.
pub const HEXRPC_VERSION_PATCH: u32 = 0;

/// True if a version part fits the 16 bits [`HEXRPC_VERSION`] gives it.
const fn fits_16_bits(part: u32) -> bool {
    part <= 0xffff
}

// Each part must fit the 16 bits `HEXRPC_VERSION` gives it, or two versions would pack to the
// same number.
const _: () = assert!(
    fits_16_bits(HEXRPC_VERSION_MAJOR) && fits_16_bits(HEXRPC_VERSION_MINOR) && fits_16_bits(HEXRPC_VERSION_PATCH),
    "each part of the version must fit 16 bits (HEXRPC_VERSION packs MAJOR << 32 | MINOR << 16 | PATCH)"
);

/// `major.minor.patch` packed as `HEXRPC_VERSION` is: `major << 32 | minor << 16 | patch`, each
/// part 16 bits (the header's `HEXRPC_VERSION_PACK(major, minor, patch)`). Two versions whose
/// parts fit 16 bits pack to different numbers, ordered as the versions are.
pub const fn version_pack(major: u32, minor: u32, patch: u32) -> u64 {
    (major as u64) << 32 | (minor as u64) << 16 | patch as u64
}

/// The parts of a number packed by [`version_pack`]: `(major, minor, patch)`. A major above
/// 16 bits (not a packed version) is given as it is, so it matches no library's.
const fn version_parts(v: u64) -> (u64, u64, u64) {
    (v >> 32, (v >> 16) & 0xffff, v & 0xffff)
}

/// This hexrpc.h's version as one number, `MAJOR << 32 | MINOR << 16 | PATCH` (an unsigned
/// 64-bit number; each part 16 bits, so no two versions collide, which `MAJOR * 10000 + MINOR *
/// 100 + PATCH` did once a part reached 100): what a program passes to
/// [`hexrpc_version_check`] (`HEXRPC_VERSION_CHECK()` does). The header defines it from the
/// three parts (`HEXRPC_VERSION_PACK`), with `HEXRPC_VERSION_CMP` and `HEXRPC_VERSION_AT_LEAST`
/// to compare versions in `#if` (cbindgen.toml's trailer).
pub const HEXRPC_VERSION: u64 = version_pack(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH);

/// The library's version, a static string ("0.1.0"). Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as one number, packed as the header's `HEXRPC_VERSION` is
/// (`MAJOR << 32 | MINOR << 16 | PATCH`, each part 16 bits; compare with `HEXRPC_VERSION`, or
/// `HEXRPC_VERSION_PACK(major, minor, patch)`). Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version_number() -> u64 {
    HEXRPC_VERSION
}

/// Whether this library serves a program compiled against the hexrpc.h of version `header`
/// (pass `HEXRPC_VERSION`, packed as `MAJOR << 32 | MINOR << 16 | PATCH`, or call
/// `HEXRPC_VERSION_CHECK()`): `HEXRPC_OK` when the majors are equal and the library's minor is
/// at least the header's (for major 0, the minors must be equal: 0.x releases may change the
/// ABI); otherwise `HEXRPC_ERR_UNAVAILABLE`, and `hexrpc_last_error_message()` names both
/// versions. Call it once at start-up, before anything else. Thread-safe.
#[no_mangle]
pub extern "C" fn hexrpc_version_check(header: u64) -> hexrpc_status {
    run(|| version_compatible(header, HEXRPC_VERSION))
}

fn version_compatible(header: u64, library: u64) -> Result<(), Failure> {
    let ((hmaj, hmin, hpat), (lmaj, lmin, lpat)) = (version_parts(header), version_parts(library));
    let ok = hmaj == lmaj && if hmaj == 0 { hmin == lmin } else { lmin >= hmin };
    if ok {
        return Ok(());
    }
    Err(Failure::unavailable(
        "version",
        format!(
            "the program was compiled against hexrpc.h {hmaj}.{hmin}.{hpat}, this libhexrpc is {lmaj}.{lmin}.{lpat}: \
             rebuild the program against this library's header, or install the library it was built for"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_constants_are_the_crate_version() {
        let v: Vec<u32> = env!("CARGO_PKG_VERSION").split('.').map(|p| p.parse().unwrap()).collect();
        assert_eq!((HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR, HEXRPC_VERSION_PATCH), (v[0], v[1], v[2]));
        assert_eq!(HEXRPC_VERSION, u64::from(v[0]) << 32 | u64::from(v[1]) << 16 | u64::from(v[2]));
        assert_eq!(hexrpc_version_number(), HEXRPC_VERSION);
    }

    #[test]
    fn packed_versions_never_collide_and_order_as_the_versions() {
        // Where MAJOR * 10000 + MINOR * 100 + PATCH was ambiguous: 1.100.0 and 2.0.0 were both
        // 20000, 1.0.100 and 1.1.0 both 10100.
        let ordered = [(0, 0, 0), (0, 0, 65535), (0, 1, 0), (0, 99, 99), (0, 100, 0), (1, 0, 99), (1, 0, 100), (1, 1, 0), (1, 99, 0)];
        let ordered = ordered.iter().chain(&[(1, 100, 0), (2, 0, 0), (65535, 65535, 65535)]);
        let packed: Vec<u64> = ordered.clone().map(|&(a, b, c)| version_pack(a, b, c)).collect();
        assert!(packed.windows(2).all(|w| w[0] < w[1]), "{packed:x?}");
        for (&(a, b, c), &p) in ordered.zip(&packed) {
            assert_eq!(version_parts(p), (u64::from(a), u64::from(b), u64::from(c)));
        }
        assert_eq!(version_pack(1, 2, 3), 0x0000_0001_0002_0003);
    }

    #[test]
    fn compatibility_rules() {
        let v = version_pack;
        assert!(version_compatible(v(0, 1, 0), v(0, 1, 0)).is_ok());
        assert!(version_compatible(v(0, 1, 0), v(0, 1, 5)).is_ok(), "a patch release serves");
        assert!(version_compatible(v(0, 2, 0), v(0, 1, 0)).is_err(), "0.x: another minor does not");
        assert!(version_compatible(v(0, 1, 0), v(0, 2, 0)).is_err());
        assert!(version_compatible(v(1, 1, 0), v(1, 3, 0)).is_ok(), "1.x: a newer minor serves");
        assert!(version_compatible(v(1, 3, 0), v(1, 1, 0)).is_err(), "1.x: an older minor does not");
        assert!(version_compatible(v(2, 0, 0), v(1, 0, 0)).is_err());
        // Minors of 100 and more are minors, not majors.
        assert!(version_compatible(v(1, 99, 0), v(1, 100, 0)).is_ok(), "1.100 serves a 1.99 program");
        assert!(version_compatible(v(1, 100, 0), v(1, 99, 0)).is_err());
        assert!(version_compatible(v(2, 0, 0), v(1, 100, 0)).is_err(), "1.100.0 is not 2.0.0");
        assert!(version_compatible(v(1, 0, 100), v(1, 1, 0)).is_ok());
        let e = version_compatible(v(0, 100, 0), v(0, 1, 0)).unwrap_err();
        assert!(e.to_string().contains("hexrpc.h 0.100.0, this libhexrpc is 0.1.0"), "{e}");
        // Not a packed version (a major past 16 bits): refused, never taken for another.
        assert!(version_compatible(u64::MAX, HEXRPC_VERSION).is_err());
        assert_eq!(hexrpc_version_check(HEXRPC_VERSION), hexrpc_status::HEXRPC_OK);
        let next_minor = version_pack(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR + 1, 0);
        assert_eq!(hexrpc_version_check(next_minor), hexrpc_status::HEXRPC_ERR_UNAVAILABLE);
    }
}
