//! The `entry` function itself: the power request, the method dispatch (batch, release, launch)
//! and the single launch (validate, map, call, time, unmap).

use core::fmt::{self, Write};

use super::helpers::scalar_load;
use super::spec::{EntryOptions, KernelSpec, PowerRequest};
use crate::launch::abi::{LaunchLayout, MapExtent, BATCH, ENTRY_SYMBOL, POWER_METHOD, PROGRAM, RELEASE_METHOD};

fn write_power<W: Write + ?Sized>(out: &mut W, p: &PowerRequest) -> fmt::Result {
    writeln!(out, "  {{ /* power request (tinygrad's dcvs_v2) */")?;
    writeln!(out, "    hrx_power_request hrx_req;")?;
    writeln!(out, "    volatile unsigned char *hrx_z = (volatile unsigned char *)&hrx_req;")?;
    writeln!(out, "    for (unsigned int hrx_i = 0; hrx_i < sizeof hrx_req; hrx_i++) hrx_z[hrx_i] = 0;")?;
    writeln!(out, "    hrx_req.type = {};", p.request_type)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.dcvs_enable = {};", p.dcvs_enable)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.set_latency = {};", p.set_latency)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.latency = {}u;", p.latency)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.set_dcvs_params = {};", p.set_dcvs_params)?;
    writeln!(out, "    hrx_req.u.dcvs_v2.dcvs_params.target_corner = {};", p.target_corner)?;
    writeln!(out, "    (void)HAP_power_set((void *)(__UINTPTR_TYPE__)handle, &hrx_req);")?;
    writeln!(out, "  }}")
}

pub(super) fn write_body<W: Write + ?Sized>(
    out: &mut W,
    l: &LaunchLayout,
    k: &KernelSpec<'_>,
    batch: bool,
    opts: &EntryOptions,
) -> fmt::Result {
    let (sig, kernel) = (&k.signature, k.name);
    let n = sig.buffers();
    let s = sig.scalars();
    let handle_bits = l.scalars(n).map_or(0, |sc| sc.raw()) & 0x00ff_ffff;
    let bad = l.err_bad_param;
    writeln!(out, "int {ENTRY_SYMBOL}(unsigned long long handle, unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  (void)handle;")?;
    if let Some(p) = &opts.power_request {
        write_power(out, p)?;
    }
    if batch {
        writeln!(out, "  if ((sc >> 24) == {}u) return hrx_batch(sc, pra); /* a batch over the kernel table */", BATCH.method)?;
        writeln!(out, "  if ((sc >> 24) == {}u) return hrx_program(sc, pra); /* a program: records kept in a lease */", PROGRAM.method)?;
    }
    if opts.power_method {
        writeln!(out, "  if ((sc >> 24) == {POWER_METHOD}u) return hrx_power(handle, sc, pra); /* the session's DSP clock vote */")?;
    }
    let cache = opts.map_cache && l.lease_id_at.is_some();
    if cache {
        writeln!(out, "  if ((sc >> 24) == {RELEASE_METHOD}u) return hrx_release(sc, pra); /* release cached lease mappings */")?;
    }
    writeln!(out, "  if ((sc >> 24) != {}u) return 0; /* method {} only, attribute bits included */", l.method, l.method)?;
    if l.validates {
        writeln!(out, "  if ((sc & 0xffffffu) != {handle_bits:#x}u) return {bad};")?;
        writeln!(out, "  if (pra[{}].buf.len < {}u) return {bad};", l.pra_slots, l.pra0_len(n, s))?;
        if l.pra1_len(n) > 0 {
            writeln!(out, "  if (pra[{}].buf.len < {}u) return {bad};", l.pra_views, l.pra1_len(n))?;
        }
    }
    if l.pra0_len(n, s) > 0 {
        writeln!(out, "  const unsigned char *const hrx_a0 = (const unsigned char *)pra[{}].buf.pv;", l.pra_slots)?;
    }
    if n > 0 {
        writeln!(out, "  const unsigned char *const hrx_a1 = (const unsigned char *)pra[{}].buf.pv;", l.pra_views)?;
    }
    if let (true, Some(magic)) = (l.validates, l.magic) {
        writeln!(
            out,
            "  if (hrx_ld_u32(hrx_a0 + {}) != {magic:#010x}u || hrx_ld_u32(hrx_a0 + {}) != {n}u) return {bad};",
            l.magic_offset(),
            l.count_offset()
        )?;
    }
    for i in 0..n {
        let len_ty = if l.buffer_len_signed { "int" } else { "unsigned int" };
        let cast = if l.buffer_len_signed { "(int)" } else { "" };
        writeln!(out, "  const {len_ty} hrx_len{i} = {cast}hrx_ld_u32(hrx_a0 + {});", l.buffer_len_offset(i))?;
        writeln!(out, "  const unsigned int hrx_off{i} = hrx_ld_u32(hrx_a1 + {});", l.view_offset_offset(i))?;
        if let Some(at) = l.lease_len_offset(i) {
            writeln!(out, "  const unsigned int hrx_lease{i} = hrx_ld_u32(hrx_a1 + {at});")?;
        }
        if let (true, Some(at)) = (cache, l.lease_id_offset(i)) {
            writeln!(out, "  const unsigned int hrx_id{i} = hrx_ld_u32(hrx_a0 + {at});")?;
        }
        writeln!(out, "  const int hrx_fd{i} = pra[{}].dma.fd;", l.first_handle + i)?;
        if l.validates && l.lease_len_at.is_some() {
            writeln!(out, "  if (hrx_off{i} > hrx_lease{i} || hrx_len{i} > hrx_lease{i} - hrx_off{i}) return {bad};")?;
        }
    }
    for (j, t) in sig.scalar_types().enumerate() {
        write!(out, "  const {} hrx_s{j} = ", t.c_type())?;
        scalar_load(out, t, "hrx_a0", l.scalar_offset(n, j))?;
        writeln!(out, ";")?;
    }
    // Map.
    let map_len = match l.map_extent {
        MapExtent::LeaseLength => "hrx_lease",
        MapExtent::ViewLength => "(unsigned int)hrx_len",
    };
    for i in 0..n {
        if cache {
            writeln!(out, "  int hrx_slot{i};")?;
            writeln!(out, "  void *const hrx_base{i} = hrx_acquire(hrx_id{i}, hrx_fd{i}, {map_len}{i}, &hrx_slot{i});")?;
        } else {
            writeln!(out, "  void *const hrx_base{i} = HAP_mmap((void *)0, {map_len}{i}, {}, {}, hrx_fd{i}, 0);", l.map_prot, l.map_flags)?;
        }
        if l.unwinds {
            write!(out, "  if (hrx_map_failed(hrx_base{i})) {{")?;
            for k in (0..i).rev() {
                if cache {
                    write!(out, " hrx_put(hrx_slot{k}, hrx_base{k}, {map_len}{k});")?;
                } else {
                    write!(out, " HAP_munmap(hrx_base{k}, {map_len}{k});")?;
                }
            }
            writeln!(out, " return {}; }}", l.err_map)?;
        }
        writeln!(out, "  void *const hrx_ptr{i} = (unsigned char *)hrx_base{i} + hrx_off{i};")?;
    }
    // Call.
    writeln!(out, "  const unsigned long long hrx_t0 = HAP_perf_get_time_us();")?;
    write!(out, "  {}{kernel}(", if k.returns_status { "(void)" } else { "" })?;
    for i in 0..n {
        write!(out, "{}hrx_ptr{i}", if i > 0 { ", " } else { "" })?;
    }
    for j in 0..s {
        write!(out, "{}hrx_s{j}", if n + j > 0 { ", " } else { "" })?;
    }
    writeln!(out, ");")?;
    writeln!(out, "  const unsigned long long hrx_t1 = HAP_perf_get_time_us();")?;
    if l.timer_len_checked {
        write!(out, "  if (pra[{}].buf.len >= {}u)", l.pra_timer, l.timer_len)?;
    }
    writeln!(
        out,
        "{}hrx_st_u64((unsigned char *)pra[{}].buf.pv, hrx_t1 - hrx_t0);",
        if l.timer_len_checked { " " } else { "  " },
        l.pra_timer
    )?;
    // Unmap.
    match l.map_extent {
        MapExtent::LeaseLength => {
            for i in (0..n).rev() {
                if cache {
                    writeln!(out, "  hrx_put(hrx_slot{i}, hrx_base{i}, hrx_lease{i});")?;
                } else {
                    writeln!(out, "  HAP_munmap(hrx_base{i}, hrx_lease{i});")?;
                }
            }
        }
        MapExtent::ViewLength => {
            // tinygrad's order and arguments: (base + off, view length) -- wrong for off > 0.
            for i in 0..n {
                writeln!(out, "  HAP_munmap(hrx_ptr{i}, (unsigned int)hrx_len{i});")?;
            }
        }
    }
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")
}
