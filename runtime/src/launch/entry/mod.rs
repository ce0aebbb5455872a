//! The DSP-side entry generator: writes the C `entry` function a launch library exports, for one
//! kernel signature and ABI version, into any [`core::fmt::Write`] sink, without allocating.
//!
//! Every number in the generated text (scalars word, pra lengths, field offsets, strides, the
//! magic, `HAP_mmap` arguments, error codes) comes from the version's [`LaunchLayout`](super::LaunchLayout), the same
//! table the packer writes with.
//!
//! # What the generated C is written against
//!
//! * The 32-bit `remote_arg` view the DSP framework presents to library entries:
//!   `union { struct { void *pv; unsigned len; } buf; struct { int fd; unsigned offset; } dma; }`.
//!   The text is the same for every compiler; a `_Static_assert` fails the build if a 32-bit
//!   target lays it out in anything but 8 bytes. On a 64-bit host the same text compiles to a
//!   16-byte union: the host test harness builds its argument array with that native type and
//!   points `pv` at host copies of the bytes, so the generated code reads the same fields
//!   (see `runtime/c/launch_harness.c`). Nothing in the generated code depends on the size of
//!   `remote_arg`: it only indexes `pra[k]` and names fields.
//! * Its own declarations of the Hexagon SDK functions it calls (no SDK headers exist here):
//!   `void *HAP_mmap(void *, unsigned int len, int prot, int flags, int fd, long offset)`,
//!   `int HAP_munmap(void *, unsigned int len)`, `unsigned long long HAP_perf_get_time_us(void)`
//!   and, with the power request, `int HAP_power_set(void *, void *)`. `unsigned int` lengths
//!   travel in the same register as the SDK's `int` on Hexagon. A mapping counts as failed if
//!   `HAP_mmap` returns NULL or `(void *)-1`.
//! * Loads from pra 0/pra 1 are byte-wise little-endian (`hrx_ld_u32`), so no alignment of the
//!   incoming buffers is assumed; every field is read once into a local, validated, then used
//!   (the DSP framework copies in-buffers, but the entry does not rely on it).
//! * No library calls beyond the HAP functions: no `memset`/`memcpy` are needed (the power
//!   request is zeroed through a volatile pointer), which the build step's test checks on the
//!   linked library.
//!
//! # Behaviour
//!
//! Both versions first (optionally) make tinygrad's power request, then answer 0 without doing
//! anything if `(sc >> 24) != 2`, as tinygrad does: the method index *and* the three attribute
//! bits must be exactly 2 (method 2, no attributes).
//!
//! **v2** then validates everything before mapping anything: the scalars word's counts (2 in,
//! 1 out, N out-handles, so `pra[3 + i]` exists), the lengths of pra 0 and pra 1, the magic and
//! N, and for every buffer `off <= lease && len <= lease - off` (no overflow). Any failure returns
//! `AEE_EBADPARM` (14) and touches nothing. It maps each lease whole
//! (`HAP_mmap(0, lease, 3, 0, fd, 0)`); if a map fails it unmaps the ones already made in reverse
//! order and returns `AEE_EMMAP`. The kernel gets `base + off`; the timer is written only if
//! pra 2 holds 8 bytes; finally every lease is unmapped with its base and length, in reverse
//! order.
//!
//! **Batches** ([`write_batch_entry`], v2 only): a library generated for a kernel table answers
//! method 2 exactly as the v2 entry of kernel 0 does, and method 3 with a batch (the [`BATCH`]
//! layout): it checks the scalars word (2 in, 1 out, no in-handles, L out-handles), the lengths
//! of pra 0, pra 1 and the 24-byte status, the header (magic, L equal to the handle count,
//! 1 <= K <= [`MAX_BATCH_LAUNCHES`](super::MAX_BATCH_LAUNCHES) (256),
//! R <= [`MAX_BATCH_RECORD_BYTES`](super::MAX_BATCH_RECORD_BYTES) (65536) and inside pra 0),
//! every lease entry (length non-zero, reserved word 0) and every record (kernel index in the table, view and scalar counts equal to that
//! kernel's, each view's lease index < L and `off <= lease && len <= lease - off`, the K records
//! filling exactly R bytes) — all before the first `HAP_mmap`, answering `AEE_EBADPARM` and
//! touching nothing otherwise. It maps each lease once (unwinding on failure, `AEE_EMMAP`),
//! re-checks each record right before running it, calls the kernels in order (timing each),
//! stops at the first kernel declared to return `int` that returns non-zero, unmaps every lease
//! in reverse order, writes the status (magic, records done, failed record or `0xffffffff`, its
//! code, summed microseconds) and returns 0, so the status reaches the host (the driver copies
//! out-buffers only on 0). Per-call state is a few fixed arrays of
//! [`MAX_BATCH_LEASES`](super::MAX_BATCH_LEASES) (15) entries on the stack, sized by the lease
//! capacity alone: the records are read where the framework put them (pra 0), never copied, so
//! neither the record count, the record bytes nor the table's size reaches the DSP stack (a
//! larger table only adds `case`s to the two `switch`es). The one other array is the release
//! method's [`MAX_RELEASE_IDS`](super::MAX_RELEASE_IDS) ids.
//!
//! **v1** is tinygrad's entry: no validation, maps the view length at file offset 0, hands the
//! kernel `base + off`, writes the timer unconditionally, unmaps `(base + off, len)`. It is
//! correct only for offset 0, which is why the packer refuses anything else for v1.
//!
//! **The map cache** ([`EntryOptions::map_cache`], v2 and batches): the same checks, then each
//! lease goes through `hrx_acquire` (a kept mapping with the same lease id, fd and lease length,
//! or a new `HAP_mmap` kept in a free or least recently used unused entry of a static table of
//! [`MAP_CACHE_SLOTS`](super::MAP_CACHE_SLOTS)) and `hrx_put` (a kept mapping stays mapped); id 0 maps and unmaps per
//! call as without the cache. The table is guarded by a spin lock of `__atomic` builtins (no C
//! library call). Method [`RELEASE_METHOD`](super::RELEASE_METHOD) unmaps the mappings of the ids it names (all for
//! none); one in use is unmapped by its last user. See `docs/entry-abi.md` §2.3 for the host's
//! side and for what is not verified on a device: that a `HAP_mmap` of a handle's fd outlives
//! the call while the kernel keeps its map of the fd (downstream until MUNMAP_FD, which the host
//! sends only after the release; upstream until the DSP lists the fd, which it should not while
//! it holds a mapping of it).

//!
//! # Files
//!
//! The text is written in parts, each in a file of its own, read bottom-up: `spec` (the options,
//! the kernel table, the name rule, the error), `helpers` (the load/store helpers and scalar
//! loads), `map_cache` (the cache table, `hrx_acquire` / `hrx_put`, the release method),
//! `prelude` (the header comment, declarations and prototypes), `batch` (method 3) and `body` (the
//! `entry` function and the single launch); this file puts them together.

use core::fmt::Write;

use super::abi::{AbiVersion, MAX_BATCH_KERNELS};
#[cfg(doc)]
use super::abi::{BATCH, PROGRAM};
use super::signature::Signature;

mod batch;
mod body;
mod helpers;
mod map_cache;
mod power;
mod prelude;
mod spec;

use batch::write_batch;
use body::write_body;
use prelude::write_prelude;
pub use spec::{check_kernel_name, EntryError, EntryOptions, KernelSpec, PowerRequest};

/// Writes the complete C translation unit of the entry for kernel `kernel` with signature `sig`.
/// The kernel is declared as `void kernel(void *, ..., <scalar C types>)`; define it in a
/// separate translation unit (its buffer parameters may be any data pointer type).
pub fn write_entry<W: Write + ?Sized>(out: &mut W, sig: &Signature, kernel: &str, opts: &EntryOptions) -> Result<(), EntryError> {
    check_kernel_name(kernel)?;
    if opts.map_cache && opts.version != AbiVersion::V2 {
        return Err(EntryError::MapCacheNeedsV2);
    }
    let l = opts.version.layout();
    let k = [KernelSpec { name: kernel, signature: *sig, returns_status: false }];
    write_prelude(out, l, &k, false, opts)?;
    write_body(out, l, &k[0], false, opts)?;
    Ok(())
}

/// Writes the entry of a library whose kernel table is `kernels` (index = position): method 2
/// is the v2 single launch of kernel 0, exactly as [`write_entry`] writes it; method 3 runs a
/// batch ([`BATCH`]: validate every record, map each lease once, run the records in order,
/// stop at the first failing kernel, unmap every lease, write the status).
pub fn write_batch_entry<W: Write + ?Sized>(out: &mut W, kernels: &[KernelSpec<'_>], opts: &EntryOptions) -> Result<(), EntryError> {
    if opts.version != AbiVersion::V2 {
        return Err(EntryError::BatchNeedsV2);
    }
    if kernels.is_empty() || kernels.len() > MAX_BATCH_KERNELS {
        return Err(EntryError::KernelCount);
    }
    for (i, k) in kernels.iter().enumerate() {
        check_kernel_name(k.name)?;
        if kernels[..i].iter().any(|o| o.name == k.name) {
            return Err(EntryError::DuplicateKernel);
        }
    }
    let l = opts.version.layout();
    write_prelude(out, l, kernels, true, opts)?;
    write_batch(out, kernels, opts.map_cache)?;
    write_body(out, l, &kernels[0], true, opts)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::fmt;
    use std::string::String;

    use super::*;
    use crate::launch::abi::{MAP_CACHE_SLOTS, MAX_RELEASE_IDS};

    fn gen(sig: &str, opts: &EntryOptions) -> String {
        let mut s = String::new();
        write_entry(&mut s, &Signature::parse(sig).unwrap(), "kern", opts).unwrap();
        s
    }

    #[test]
    fn v2_text_carries_the_table() {
        let c = gen("buf,buf,i32,f32", &EntryOptions::V2);
        for needle in [
            "if ((sc & 0xffffffu) != 0x20102u) return 14;",
            "if (pra[0].buf.len < 40u) return 14;",
            "if (pra[1].buf.len < 16u) return 14;",
            "hrx_ld_u32(hrx_a0 + 0) != 0x32585248u || hrx_ld_u32(hrx_a0 + 4) != 2u",
            "hrx_len1 = hrx_ld_u32(hrx_a0 + 16);",
            "hrx_off1 = hrx_ld_u32(hrx_a1 + 8);",
            "hrx_lease1 = hrx_ld_u32(hrx_a1 + 12);",
            "hrx_fd1 = pra[4].dma.fd;",
            "const int hrx_s0 = (int)hrx_ld_u32(hrx_a0 + 24);",
            "const float hrx_s1 = hrx_f32(hrx_ld_u32(hrx_a0 + 32));",
            "HAP_mmap((void *)0, hrx_lease1, 3, 0, hrx_fd1, 0);",
            "if (hrx_map_failed(hrx_base1)) { HAP_munmap(hrx_base0, hrx_lease0); return 101; }",
            "kern(hrx_ptr0, hrx_ptr1, hrx_s0, hrx_s1);",
            "if (pra[2].buf.len >= 8u) hrx_st_u64((unsigned char *)pra[2].buf.pv, hrx_t1 - hrx_t0);",
            "HAP_munmap(hrx_base1, hrx_lease1);\n  HAP_munmap(hrx_base0, hrx_lease0);",
            "void kern(void *, void *, int, float);",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert!(!c.contains("HAP_power_set"));
    }

    #[test]
    fn v1_text_reproduces_tinygrads_entry() {
        let c = gen("buf,u16", &EntryOptions::TINYGRAD);
        for needle in [
            "const int hrx_len0 = (int)hrx_ld_u32(hrx_a0 + 0);",
            "hrx_off0 = hrx_ld_u32(hrx_a1 + 0);",
            "HAP_mmap((void *)0, (unsigned int)hrx_len0, 3, 0, hrx_fd0, 0);",
            "hrx_ptr0 = (unsigned char *)hrx_base0 + hrx_off0;",
            "HAP_munmap(hrx_ptr0, (unsigned int)hrx_len0);",
            "const unsigned short hrx_s0 = hrx_ld_u16(hrx_a0 + 8);",
            "hrx_req.type = 7;",
            "hrx_req.u.dcvs_v2.latency = 100u;",
            "hrx_req.u.dcvs_v2.dcvs_params.target_corner = 6;",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        assert!(!c.contains("return 14"), "v1 validates nothing");
        assert!(c.find("HAP_power_set").unwrap() < c.find("(sc >> 24)").unwrap(), "power request comes first");
    }

    #[test]
    fn batch_text_carries_the_table_and_refuses_bad_tables() {
        let k = |name| KernelSpec { name, signature: Signature::parse("buf,buf,u32").unwrap(), returns_status: false };
        let st = KernelSpec { name: "chk", signature: Signature::parse("buf,i32").unwrap(), returns_status: true };
        let mut c = String::new();
        write_batch_entry(&mut c, &[k("a"), st], &EntryOptions::V2).unwrap();
        for needle in [
            "if ((sc >> 24) == 3u) return hrx_batch(sc, pra);",
            "if ((sc & 0xfffff0u) != 0x20100u) return 14;",
            "if (pra[0].buf.len < 16u || pra[2].buf.len < 24u || pra[1].buf.len < 8u * hrx_nl) return 14;",
            "if (hrx_ld_u32(hrx_a0 + 0) != 0x42585248u || hrx_ld_u32(hrx_a0 + 8) != hrx_nl) return 14;",
            "if (hrx_nk == 0u || hrx_nk > 256u || hrx_bytes > 65536u || hrx_bytes > pra[0].buf.len - 16u) return 14;",
            " * At most 256 records, 15 leases, 65536 record bytes.",
            "if ((sc >> 24) == 5u) return hrx_program(sc, pra);",
            " * At most 4096 records, 1048576 record bytes. */",
            "if (hrx_nk == 0u || hrx_nk > 4096u || hrx_bytes > 1048576u) return 14;",
            "const unsigned int hrx_px = hrx_ld_u32(hrx_a0 + 16);",
            "const unsigned int hrx_po = hrx_ld_u32(hrx_a0 + 20);",
            "if (hrx_ld_u32(hrx_a0 + 0) != 0x50585248u || hrx_ld_u32(hrx_a0 + 8) != hrx_nl) return 14;",
            "if (hrx_po > hrx_lease[hrx_px] || hrx_bytes > hrx_lease[hrx_px] - hrx_po) return 14;",
            "hrx_l >= hrx_nl || hrx_l == hrx_px ||",
            "const unsigned char *const hrx_rec = (const unsigned char *)hrx_base[hrx_px] + hrx_po;",
            "hrx_st_u32(hrx_st + 0, 0x50585248u);",
            "case 0u: hrx_wv = 2u; hrx_ws = 1u; break;",
            "case 1u: hrx_wv = 1u; hrx_ws = 1u; break;",
            "const unsigned int hrx_len = 8u + 12u * hrx_nv + 8u * hrx_ns;",
            "case 0u: a(hrx_p[0], hrx_p[1], hrx_ld_u32(hrx_s + 0)); return 0;",
            "case 1u: return chk(hrx_p[0], (int)hrx_ld_u32(hrx_s + 0));",
            "int chk(void *, int);",
            "void a(void *, void *, unsigned int);",
            "HAP_mmap((void *)0, hrx_lease[hrx_l], 3, 0, hrx_fd[hrx_l], 0);",
            "hrx_st_u32(hrx_st + 8, hrx_failed);",
            "hrx_st_u64(hrx_st + 16, hrx_us);",
            "a(hrx_ptr0, hrx_ptr1, hrx_s0);",
        ] {
            assert!(c.contains(needle), "missing {needle:?} in\n{c}");
        }
        let mut s = String::new();
        assert_eq!(write_batch_entry(&mut s, &[k("a")], &EntryOptions::V1), Err(EntryError::BatchNeedsV2));
        assert_eq!(write_batch_entry(&mut s, &[], &EntryOptions::V2), Err(EntryError::KernelCount));
        assert_eq!(write_batch_entry(&mut s, &std::vec![k("a"); MAX_BATCH_KERNELS + 1], &EntryOptions::V2), Err(EntryError::KernelCount));
        assert_eq!(write_batch_entry(&mut s, &[k("a"), k("b"), k("a")], &EntryOptions::V2), Err(EntryError::DuplicateKernel));
        assert_eq!(write_batch_entry(&mut s, &[k("a"), k("entry")], &EntryOptions::V2), Err(EntryError::KernelName));
        assert!(s.is_empty());
    }

    #[test]
    fn a_full_kernel_table_is_generated_and_sizes_nothing_on_the_stack_by_it() {
        use crate::launch::MAX_BATCH_LEASES;
        use std::format;
        use std::vec::Vec;
        let names: Vec<String> = (0..MAX_BATCH_KERNELS).map(|i| format!("k{i}")).collect();
        let sig = Signature::parse("buf,buf,u32").unwrap();
        let table: Vec<KernelSpec<'_>> = names.iter().map(|n| KernelSpec { name: n, signature: sig, returns_status: false }).collect();
        let mut c = String::new();
        write_batch_entry(&mut c, &table, &EntryOptions::V2_CACHED).unwrap();
        let last = MAX_BATCH_KERNELS - 1;
        for needle in [
            format!("case {last}u: hrx_wv = 2u; hrx_ws = 1u; break;"),
            format!("case {last}u: k{last}(hrx_p[0], hrx_p[1], hrx_ld_u32(hrx_s + 0)); return 0;"),
        ] {
            assert!(c.contains(&needle), "missing {needle:?}");
        }
        // Every array the entry declares, with its size: the per-lease ones (15), the release's
        // ids and the static map cache; none is sized by the records, record bytes or kernels.
        let mut sizes = Vec::new();
        for line in c.lines() {
            let t = line.trim_start();
            if t.starts_with("//") || t.starts_with("/*") || t.starts_with('*') {
                continue;
            }
            if let Some(open) = t.find('[') {
                let decl = t.starts_with("unsigned int hrx_")
                    || t.starts_with("int hrx_")
                    || t.starts_with("void *hrx_")
                    || t.starts_with("static ");
                if decl && t.ends_with("];") {
                    let n: usize = t[open + 1..t.len() - 2].parse().unwrap_or_else(|_| panic!("array size of {t:?}"));
                    sizes.push((String::from(t.split('[').next().unwrap_or("")), n));
                }
            }
        }
        let allowed = [MAX_BATCH_LEASES, MAX_RELEASE_IDS, MAP_CACHE_SLOTS];
        assert!(sizes.len() >= 5, "{sizes:?}");
        for (decl, n) in &sizes {
            assert!(allowed.contains(n), "{decl}[{n}]");
        }
    }

    #[test]
    fn empty_signature_and_names() {
        let c = gen("", &EntryOptions::V2);
        assert!(c.contains("void kern(void);") && c.contains("kern();"));
        assert!(!c.contains("hrx_a1"));
        let sig = Signature::parse("buf").unwrap();
        let mut s = String::new();
        for bad in ["", "1k", "entry", "int", "hrx_k", "HAP_mmap", "__k", "a-b", "ü"] {
            assert_eq!(write_entry(&mut s, &sig, bad, &EntryOptions::V2), Err(EntryError::KernelName), "{bad:?}");
        }
        assert!(s.is_empty());
        assert_eq!(check_kernel_name("r_16_4"), Ok(()));
        struct Full;
        impl Write for Full {
            fn write_str(&mut self, _: &str) -> fmt::Result {
                Err(fmt::Error)
            }
        }
        assert_eq!(write_entry(&mut Full, &sig, "k", &EntryOptions::V2), Err(EntryError::Format));
    }
}
