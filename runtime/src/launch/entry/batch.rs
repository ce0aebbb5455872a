//! The batch's C (method 3, [`write_batch_entry`](super::write_batch_entry)): the record
//! parser and validator `hrx_record`, the kernel dispatcher `hrx_call` and `hrx_batch`; and the
//! program's (method 5), `hrx_program`, written by the same function from the [`PROGRAM`] table.

use core::fmt::{self, Write};

use super::helpers::scalar_load;
use super::spec::KernelSpec;
use crate::launch::abi::{BatchLayout, BATCH, PROGRAM, TIMES_MAGIC};

/// The batch part: the record parser/validator, the kernel dispatcher, `hrx_batch` and
/// `hrx_program`.
pub(super) fn write_batch<W: Write + ?Sized>(out: &mut W, kernels: &[KernelSpec<'_>], cache: bool) -> fmt::Result {
    let b = &BATCH;
    // The record form is one for both methods: the runners differ only in where the records are.
    const _: () = assert!(
        BATCH.record_header_len == PROGRAM.record_header_len
            && BATCH.view_size == PROGRAM.view_size
            && BATCH.slot_size == PROGRAM.slot_size
            && BATCH.kernel_at == PROGRAM.kernel_at
            && BATCH.lease_entry_size == PROGRAM.lease_entry_size
            && BATCH.max_leases == PROGRAM.max_leases
    );
    let bad = b.err_bad_param;
    let (rh, vs, ss) = (b.record_header_len, b.view_size, b.slot_size);
    writeln!(out, "/* Parses and validates the record at hrx_at (< hrx_end); with hrx_base set, also computes the kernel")?;
    writeln!(out, " * pointers. Every field is read once. No view may name lease hrx_px (the one holding a program's")?;
    writeln!(out, " * records; a batch passes hrx_nl). 0 if valid. */")?;
    writeln!(
        out,
        "static int hrx_record(const unsigned char *hrx_a0, unsigned int hrx_at, unsigned int hrx_end, const unsigned int *hrx_lease,"
    )?;
    writeln!(
        out,
        "                      unsigned int hrx_nl, unsigned int hrx_px, void *const *hrx_base, unsigned int *hrx_kernel, void **hrx_ptr,"
    )?;
    writeln!(out, "                      const unsigned char **hrx_scal, unsigned int *hrx_next) {{")?;
    writeln!(out, "  if (hrx_at > hrx_end || hrx_end - hrx_at < {rh}u) return 1;")?;
    writeln!(out, "  const unsigned int hrx_k = hrx_ld_u32(hrx_a0 + hrx_at + {});", b.kernel_at)?;
    writeln!(out, "  const unsigned int hrx_nv = hrx_ld_u16(hrx_a0 + hrx_at + {});", b.views_at)?;
    writeln!(out, "  const unsigned int hrx_ns = hrx_ld_u16(hrx_a0 + hrx_at + {});", b.scalars_at)?;
    writeln!(out, "  unsigned int hrx_wv, hrx_ws;")?;
    writeln!(out, "  switch (hrx_k) {{")?;
    for (i, k) in kernels.iter().enumerate() {
        writeln!(out, "  case {i}u: hrx_wv = {}u; hrx_ws = {}u; break;", k.signature.buffers(), k.signature.scalars())?;
    }
    writeln!(out, "  default: return 1;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_nv != hrx_wv || hrx_ns != hrx_ws) return 1;")?;
    writeln!(out, "  const unsigned int hrx_len = {rh}u + {vs}u * hrx_nv + {ss}u * hrx_ns;")?;
    writeln!(out, "  if (hrx_end - hrx_at < hrx_len) return 1;")?;
    writeln!(out, "  for (unsigned int hrx_v = 0; hrx_v < hrx_nv; hrx_v++) {{")?;
    writeln!(out, "    const unsigned char *const hrx_e = hrx_a0 + hrx_at + {rh}u + {vs}u * hrx_v;")?;
    writeln!(out, "    const unsigned int hrx_l = hrx_ld_u32(hrx_e + {});", b.view_lease_at)?;
    writeln!(out, "    const unsigned int hrx_off = hrx_ld_u32(hrx_e + {});", b.view_offset_at)?;
    writeln!(out, "    const unsigned int hrx_n = hrx_ld_u32(hrx_e + {});", b.view_len_at)?;
    writeln!(
        out,
        "    if (hrx_l >= hrx_nl || hrx_l == hrx_px || hrx_off > hrx_lease[hrx_l] || hrx_n > hrx_lease[hrx_l] - hrx_off) return 1;"
    )?;
    writeln!(out, "    if (hrx_base) hrx_ptr[hrx_v] = (unsigned char *)hrx_base[hrx_l] + hrx_off;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  *hrx_kernel = hrx_k;")?;
    writeln!(out, "  *hrx_scal = hrx_a0 + hrx_at + {rh}u + {vs}u * hrx_nv;")?;
    writeln!(out, "  *hrx_next = hrx_at + hrx_len;")?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)?;
    writeln!(out, "/* Calls kernel hrx_k with its (validated) pointers and scalars; its status, 0 for void kernels. */")?;
    writeln!(out, "static int hrx_call(unsigned int hrx_k, void *const *hrx_p, const unsigned char *hrx_s) {{")?;
    writeln!(out, "  switch (hrx_k) {{")?;
    for (i, k) in kernels.iter().enumerate() {
        write!(out, "  case {i}u: ")?;
        if k.returns_status {
            out.write_str("return ")?;
        }
        write!(out, "{}(", k.name)?;
        let n = k.signature.buffers();
        for v in 0..n {
            write!(out, "{}hrx_p[{v}]", if v > 0 { ", " } else { "" })?;
        }
        for (j, t) in k.signature.scalar_types().enumerate() {
            out.write_str(if n + j > 0 { ", " } else { "" })?;
            scalar_load(out, t, "hrx_s", j * ss)?;
        }
        out.write_str(");")?;
        if !k.returns_status {
            out.write_str(" return 0;")?;
        }
        writeln!(out)?;
    }
    writeln!(out, "  default: return {bad};")?;
    writeln!(out, "  }}")?;
    writeln!(out, "}}")?;
    writeln!(out)?;
    write_runner(out, &BATCH, cache)?;
    write_runner(out, &PROGRAM, cache)
}

/// One runner: `hrx_batch` (records in pra 0) or `hrx_program` (records in a lease), from the
/// table. Everything is checked before the first `HAP_mmap` that can be (a program's records
/// only once their lease is mapped: then a bad record unmaps every lease and touches nothing
/// else); each record is checked again right before it runs.
fn write_runner<W: Write + ?Sized>(out: &mut W, b: &BatchLayout, cache: bool) -> fmt::Result {
    let bad = b.err_bad_param;
    let name = if b.records_in_lease.is_some() { "hrx_program" } else { "hrx_batch" };
    let sc_bits = b.scalars(0).map_or(0, |sc| sc.raw()) & 0x00ff_fff0;
    let hl = b.header_len;
    writeln!(out, "static int {name}(unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  const unsigned int hrx_nl = sc & 0xfu;")?;
    writeln!(out, "  if ((sc & 0xfffff0u) != {sc_bits:#x}u) return {bad};")?;
    writeln!(
        out,
        "  if (pra[{}].buf.len < {hl}u || pra[{}].buf.len < {}u || pra[{}].buf.len < {}u * hrx_nl) return {bad};",
        b.pra_records, b.pra_status, b.status_len, b.pra_leases, b.lease_entry_size
    )?;
    writeln!(out, "  const unsigned char *const hrx_a0 = (const unsigned char *)pra[{}].buf.pv;", b.pra_records)?;
    writeln!(out, "  const unsigned char *const hrx_a1 = (const unsigned char *)pra[{}].buf.pv;", b.pra_leases)?;
    writeln!(out, "  const unsigned int hrx_nk = hrx_ld_u32(hrx_a0 + {});", b.count_at)?;
    writeln!(out, "  const unsigned int hrx_bytes = hrx_ld_u32(hrx_a0 + {});", b.bytes_at)?;
    writeln!(
        out,
        "  if (hrx_ld_u32(hrx_a0 + {}) != {:#010x}u || hrx_ld_u32(hrx_a0 + {}) != hrx_nl) return {bad};",
        b.magic_at, b.magic, b.leases_at
    )?;
    match b.records_in_lease {
        None => {
            writeln!(
                out,
                "  if (hrx_nk == 0u || hrx_nk > {}u || hrx_bytes > {}u || hrx_bytes > pra[{}].buf.len - {hl}u) return {bad};",
                b.max_launches, b.max_record_bytes, b.pra_records
            )?;
            writeln!(out, "  const unsigned int hrx_px = hrx_nl; /* no lease holds the records: they are in pra {} */", b.pra_records)?;
            writeln!(out, "  const unsigned int hrx_first = {hl}u, hrx_end = {hl}u + hrx_bytes;")?;
        }
        Some((p_at, o_at)) => {
            writeln!(out, "  if (hrx_nk == 0u || hrx_nk > {}u || hrx_bytes > {}u) return {bad};", b.max_launches, b.max_record_bytes)?;
            writeln!(out, "  const unsigned int hrx_px = hrx_ld_u32(hrx_a0 + {p_at}); /* the lease holding the records */")?;
            writeln!(out, "  const unsigned int hrx_po = hrx_ld_u32(hrx_a0 + {o_at}); /* their offset in it */")?;
            writeln!(out, "  if (hrx_px >= hrx_nl) return {bad};")?;
            writeln!(out, "  const unsigned int hrx_first = 0u, hrx_end = hrx_bytes;")?;
        }
    }
    let ml = b.max_leases;
    writeln!(out, "  unsigned int hrx_lease[{ml}];")?;
    writeln!(out, "  int hrx_fd[{ml}];")?;
    if cache {
        writeln!(out, "  unsigned int hrx_id[{ml}];")?;
        writeln!(out, "  int hrx_slot[{ml}];")?;
    }
    writeln!(out, "  void *hrx_base[{ml}];")?;
    writeln!(out, "  void *hrx_ptr[{ml}];")?;
    writeln!(out, "  const unsigned char *hrx_s = hrx_a0;")?;
    writeln!(out, "  unsigned int hrx_k = 0, hrx_at = hrx_first;")?;
    writeln!(out, "  for (unsigned int hrx_l = 0; hrx_l < hrx_nl; hrx_l++) {{")?;
    writeln!(out, "    hrx_lease[hrx_l] = hrx_ld_u32(hrx_a1 + {}u * hrx_l + {});", b.lease_entry_size, b.lease_len_at)?;
    if cache {
        writeln!(
            out,
            "    hrx_id[hrx_l] = hrx_ld_u32(hrx_a1 + {}u * hrx_l + {}); /* the lease id (0: not cached) */",
            b.lease_entry_size, b.lease_id_at
        )?;
        writeln!(out, "    if (hrx_lease[hrx_l] == 0u) return {bad};")?;
    } else {
        writeln!(
            out,
            "    if (hrx_lease[hrx_l] == 0u || hrx_ld_u32(hrx_a1 + {}u * hrx_l + {}) != 0u) return {bad};",
            b.lease_entry_size, b.lease_reserved_at
        )?;
    }
    writeln!(out, "    hrx_fd[hrx_l] = pra[{} + hrx_l].dma.fd;", b.first_handle)?;
    writeln!(out, "  }}")?;
    let unmap_all = |out: &mut W, indent: &str| -> fmt::Result {
        if cache {
            writeln!(
                out,
                "{indent}for (unsigned int hrx_l = hrx_nl; hrx_l-- > 0u;) hrx_put(hrx_slot[hrx_l], hrx_base[hrx_l], hrx_lease[hrx_l]);"
            )
        } else {
            writeln!(out, "{indent}for (unsigned int hrx_l = hrx_nl; hrx_l-- > 0u;) HAP_munmap(hrx_base[hrx_l], hrx_lease[hrx_l]);")
        }
    };
    // A failed check returns `bad` at once (a batch: nothing is mapped yet) or marks the program
    // invalid (its leases are mapped and are unmapped first).
    let validate = |out: &mut W, early: bool| -> fmt::Result {
        let fail = |out: &mut W| if early { write!(out, "return {bad};") } else { out.write_str("hrx_valid = 0;") };
        writeln!(out, "  for (unsigned int hrx_r = 0; hrx_r < hrx_nk; hrx_r++)")?;
        out.write_str(
            "    if (hrx_record(hrx_rec, hrx_at, hrx_end, hrx_lease, hrx_nl, hrx_px, (void *const *)0, &hrx_k, hrx_ptr, &hrx_s, &hrx_at) != 0) ",
        )?;
        fail(out)?;
        out.write_str("\n  if (hrx_at != hrx_end) ")?;
        fail(out)?;
        writeln!(out)
    };
    if b.records_in_lease.is_none() {
        writeln!(out, "  const unsigned char *const hrx_rec = hrx_a0;")?;
        writeln!(out, "  /* Validate every record before mapping anything. */")?;
        validate(out, true)?;
    } else {
        writeln!(out, "  if (hrx_po > hrx_lease[hrx_px] || hrx_bytes > hrx_lease[hrx_px] - hrx_po) return {bad};")?;
    }
    writeln!(out, "  /* Map each lease once for the whole call. */")?;
    writeln!(out, "  for (unsigned int hrx_l = 0; hrx_l < hrx_nl; hrx_l++) {{")?;
    if cache {
        writeln!(out, "    hrx_base[hrx_l] = hrx_acquire(hrx_id[hrx_l], hrx_fd[hrx_l], hrx_lease[hrx_l], &hrx_slot[hrx_l]);")?;
    } else {
        writeln!(out, "    hrx_base[hrx_l] = HAP_mmap((void *)0, hrx_lease[hrx_l], {}, {}, hrx_fd[hrx_l], 0);", b.map_prot, b.map_flags)?;
    }
    writeln!(out, "    if (hrx_map_failed(hrx_base[hrx_l])) {{")?;
    if cache {
        writeln!(out, "      while (hrx_l-- > 0u) hrx_put(hrx_slot[hrx_l], hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    } else {
        writeln!(out, "      while (hrx_l-- > 0u) HAP_munmap(hrx_base[hrx_l], hrx_lease[hrx_l]);")?;
    }
    writeln!(out, "      return {};", b.err_map)?;
    writeln!(out, "    }}")?;
    writeln!(out, "  }}")?;
    if b.records_in_lease.is_some() {
        writeln!(out, "  const unsigned char *const hrx_rec = (const unsigned char *)hrx_base[hrx_px] + hrx_po;")?;
        writeln!(out, "  /* Validate every record before running any; a bad one unmaps every lease. */")?;
        writeln!(out, "  int hrx_valid = 1;")?;
        validate(out, false)?;
        writeln!(out, "  if (!hrx_valid) {{")?;
        unmap_all(out, "    ")?;
        writeln!(out, "    return {bad};")?;
        writeln!(out, "  }}")?;
    }
    writeln!(out, "  /* Run the records in order; stop at the first kernel that fails. */")?;
    writeln!(out, "  unsigned int hrx_done = 0, hrx_failed = 0xffffffffu;")?;
    writeln!(out, "  int hrx_code = 0, hrx_rc = 0;")?;
    writeln!(out, "  unsigned long long hrx_us = 0;")?;
    writeln!(out, "  unsigned char *const hrx_st = (unsigned char *)pra[{}].buf.pv;", b.pra_status)?;
    writeln!(out, "  /* Per-record times when the status has room for them (see TIMES_MAGIC). */")?;
    writeln!(
        out,
        "  const int hrx_timed = pra[{ps}].buf.len >= {t}u && (pra[{ps}].buf.len - {t}u) / 4u >= hrx_nk;",
        ps = b.pra_status,
        t = b.status_len + 8
    )?;
    writeln!(out, "  hrx_at = hrx_first;")?;
    writeln!(out, "  for (unsigned int hrx_r = 0; hrx_r < hrx_nk; hrx_r++) {{")?;
    writeln!(
        out,
        "    if (hrx_record(hrx_rec, hrx_at, hrx_end, hrx_lease, hrx_nl, hrx_px, hrx_base, &hrx_k, hrx_ptr, &hrx_s, &hrx_at) != 0) {{ hrx_rc = {bad}; break; }}"
    )?;
    writeln!(out, "    const unsigned long long hrx_t0 = HAP_perf_get_time_us();")?;
    writeln!(out, "    hrx_code = hrx_call(hrx_k, hrx_ptr, hrx_s);")?;
    writeln!(out, "    const unsigned long long hrx_dt = HAP_perf_get_time_us() - hrx_t0;")?;
    writeln!(out, "    hrx_us += hrx_dt;")?;
    writeln!(
        out,
        "    if (hrx_timed) hrx_st_u32(hrx_st + {}u + 4u * hrx_r, hrx_dt > 0xffffffffull ? 0xffffffffu : (unsigned int)hrx_dt);",
        b.status_len + 8
    )?;
    writeln!(out, "    if (hrx_code != 0) {{ hrx_failed = hrx_r; break; }}")?;
    writeln!(out, "    hrx_done++;")?;
    writeln!(out, "  }}")?;
    unmap_all(out, "  ")?;
    writeln!(out, "  if (hrx_rc != 0) return hrx_rc;")?;
    writeln!(out, "  if (hrx_timed) {{")?;
    writeln!(out, "    hrx_st_u32(hrx_st + {}, {:#010x}u);", b.status_len, TIMES_MAGIC)?;
    writeln!(out, "    hrx_st_u32(hrx_st + {}, hrx_done + (hrx_failed != 0xffffffffu ? 1u : 0u));", b.status_len + 4)?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, {:#010x}u);", b.status_magic_at, b.magic)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, hrx_done);", b.status_done_at)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, hrx_failed);", b.status_failed_at)?;
    writeln!(out, "  hrx_st_u32(hrx_st + {}, (unsigned int)hrx_code);", b.status_code_at)?;
    writeln!(out, "  hrx_st_u64(hrx_st + {}, hrx_us);", b.status_micros_at)?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)
}
