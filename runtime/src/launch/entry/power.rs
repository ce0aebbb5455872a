//! The power method of an entry ([`POWER_METHOD`]): the session's DSP clock vote, handed to
//! `HAP_power_set` as the DSP process's own request.
//!
//! pra 0 is a [`PowerVote`](crate::launch::PowerVote): 12 little-endian u32 words (request type,
//! `dcvs_enable`, `dcvs_option`, `set_latency`, `latency`, `set_dcvs_params`, target, minimum and
//! maximum corner, `set_sleep_disable`, `sleep_disable`, the level). The entry copies them into
//! the request structure the prelude declares (zeroed first) and answers what `HAP_power_set`
//! answers. The level word is not part of the request: it names the level for whoever reads the
//! vote back (the bench's DSP shell records every request it is given).

use core::fmt::{self, Write};

use crate::launch::abi::{power_scalars, LaunchLayout, POWER_METHOD, POWER_VOTE_BYTES};

/// Writes `hrx_power`, the power method's handler.
pub(super) fn write_power_method<W: Write + ?Sized>(out: &mut W, l: &LaunchLayout) -> fmt::Result {
    let bad = l.err_bad_param;
    let bits = power_scalars().raw() & 0x00ff_ffff;
    writeln!(out, "/* Method {POWER_METHOD}, the DSP clock vote: pra[0] = 12 u32 words of the request (see power.rs). */")?;
    writeln!(out, "static int hrx_power(unsigned long long handle, unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  if ((sc & 0xffffffu) != {bits:#x}u) return {bad};")?;
    writeln!(out, "  if (pra[0].buf.len < {POWER_VOTE_BYTES}u) return {bad};")?;
    writeln!(out, "  const unsigned char *const hrx_w = (const unsigned char *)pra[0].buf.pv;")?;
    writeln!(out, "  hrx_power_request hrx_req;")?;
    writeln!(out, "  volatile unsigned char *hrx_z = (volatile unsigned char *)&hrx_req;")?;
    writeln!(out, "  for (unsigned int hrx_i = 0; hrx_i < sizeof hrx_req; hrx_i++) hrx_z[hrx_i] = 0;")?;
    writeln!(out, "  hrx_req.type = (int)hrx_ld_u32(hrx_w + 0);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.dcvs_enable = (unsigned char)hrx_ld_u32(hrx_w + 4);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.dcvs_option = (int)hrx_ld_u32(hrx_w + 8);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.set_latency = (unsigned char)hrx_ld_u32(hrx_w + 12);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.latency = hrx_ld_u32(hrx_w + 16);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.set_dcvs_params = (unsigned char)hrx_ld_u32(hrx_w + 20);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.dcvs_params.target_corner = (int)hrx_ld_u32(hrx_w + 24);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.dcvs_params.min_corner = (int)hrx_ld_u32(hrx_w + 28);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.dcvs_params.max_corner = (int)hrx_ld_u32(hrx_w + 32);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.set_sleep_disable = (unsigned char)hrx_ld_u32(hrx_w + 36);")?;
    writeln!(out, "  hrx_req.u.dcvs_v2.sleep_disable = (unsigned char)hrx_ld_u32(hrx_w + 40);")?;
    writeln!(out, "  return HAP_power_set((void *)(__UINTPTR_TYPE__)handle, &hrx_req);")?;
    writeln!(out, "}}")?;
    writeln!(out)
}
