//! The map cache's C (feature [`EntryOptions::map_cache`](super::EntryOptions::map_cache)): a
//! static table of lease mappings kept across calls, its spin lock, `hrx_acquire` / `hrx_put`, and
//! the release method.

use core::fmt::{self, Write};

use crate::launch::abi::{LaunchLayout, MAP_CACHE_SLOTS, MAX_RELEASE_IDS, RELEASE_METHOD};

/// The map cache: a fixed table of lease mappings kept across calls, keyed by (lease id, fd,
/// lease length), under a spin lock made of `__atomic` builtins (no C library call; several DSP
/// threads may call the entry at once), and the release method.
pub(super) fn write_map_cache<W: Write + ?Sized>(out: &mut W, l: &LaunchLayout) -> fmt::Result {
    let (prot, flags) = (l.map_prot, l.map_flags);
    let cap = MAP_CACHE_SLOTS;
    writeln!(out, "/* The map cache: up to {cap} lease mappings kept across calls, keyed by (lease id, fd, lease length).")?;
    writeln!(out, " * Id 0 is never cached. An entry in use by a call is never unmapped under it: a release or an")?;
    writeln!(out, " * eviction of a busy entry marks it dead and the last user unmaps it. */")?;
    writeln!(out, "typedef struct {{")?;
    writeln!(out, "  unsigned int id, len, users, tick, dead;")?;
    writeln!(out, "  int fd;")?;
    writeln!(out, "  void *base;")?;
    writeln!(out, "}} hrx_cached;")?;
    writeln!(out, "static hrx_cached hrx_cache[{cap}];")?;
    writeln!(out, "static int hrx_cache_lock;")?;
    writeln!(out, "static unsigned int hrx_cache_tick;")?;
    writeln!(out, "static void hrx_lock(void) {{")?;
    writeln!(out, "  while (__atomic_exchange_n(&hrx_cache_lock, 1, __ATOMIC_ACQUIRE) != 0)")?;
    writeln!(out, "    while (__atomic_load_n(&hrx_cache_lock, __ATOMIC_RELAXED) != 0) {{ }}")?;
    writeln!(out, "}}")?;
    writeln!(out, "static void hrx_unlock(void) {{ __atomic_store_n(&hrx_cache_lock, 0, __ATOMIC_RELEASE); }}")?;
    writeln!(out, "/* Unmaps and frees entry c (the lock is held, nobody uses it). */")?;
    writeln!(out, "static void hrx_drop(hrx_cached *c) {{")?;
    writeln!(out, "  HAP_munmap(c->base, c->len);")?;
    writeln!(out, "  c->base = (void *)0;")?;
    writeln!(out, "  c->id = 0u;")?;
    writeln!(out, "  c->dead = 0u;")?;
    writeln!(out, "}}")?;
    writeln!(out, "/* The mapping of lease (id, fd, len): a cached one, or a new one (cached if an entry is free or")?;
    writeln!(out, " * unused). *hrx_slot: the entry held (give it back with hrx_put), or -1 for a mapping of this")?;
    writeln!(out, " * call alone. NULL or (void *)-1 if HAP_mmap failed. */")?;
    writeln!(out, "__attribute__((unused)) static void *hrx_acquire(unsigned int id, int fd, unsigned int len, int *hrx_slot) {{")?;
    writeln!(out, "  *hrx_slot = -1;")?;
    writeln!(out, "  if (id == 0u) return HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  int hrx_free = -1;")?;
    writeln!(out, "  for (int i = 0; i < {cap}; i++) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[i];")?;
    writeln!(out, "    if (c->base != (void *)0 && c->id == id && c->dead == 0u) {{")?;
    writeln!(out, "      if (c->fd == fd && c->len == len) {{")?;
    writeln!(out, "        c->users++;")?;
    writeln!(out, "        c->tick = ++hrx_cache_tick;")?;
    writeln!(out, "        *hrx_slot = i;")?;
    writeln!(out, "        void *const hrx_b = c->base;")?;
    writeln!(out, "        hrx_unlock();")?;
    writeln!(out, "        return hrx_b;")?;
    writeln!(out, "      }}")?;
    writeln!(out, "      /* The same id with another fd or length: that mapping is never right again. */")?;
    writeln!(out, "      if (c->users == 0u) hrx_drop(c); else c->dead = 1u;")?;
    writeln!(out, "    }}")?;
    writeln!(out, "    if (c->base == (void *)0 && hrx_free < 0) hrx_free = i;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_free < 0) {{ /* full: evict the least recently used entry nobody uses */")?;
    writeln!(out, "    for (int i = 0; i < {cap}; i++)")?;
    writeln!(out, "      if (hrx_cache[i].users == 0u && (hrx_free < 0 || hrx_cache[i].tick < hrx_cache[hrx_free].tick)) hrx_free = i;")?;
    writeln!(out, "    if (hrx_free >= 0) hrx_drop(&hrx_cache[hrx_free]);")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  void *hrx_b = HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "  if (hrx_map_failed(hrx_b)) {{ /* out of DSP address space or mappings: give back every unused entry, once */")?;
    writeln!(out, "    int hrx_gave = 0;")?;
    writeln!(out, "    for (int i = 0; i < {cap}; i++)")?;
    writeln!(out, "      if (hrx_cache[i].base != (void *)0 && hrx_cache[i].users == 0u) {{ hrx_drop(&hrx_cache[i]); hrx_gave = 1; }}")?;
    writeln!(out, "    if (hrx_gave) hrx_b = HAP_mmap((void *)0, len, {prot}, {flags}, fd, 0);")?;
    writeln!(out, "    if (hrx_free < 0) for (int i = 0; i < {cap}; i++) if (hrx_cache[i].base == (void *)0) {{ hrx_free = i; break; }}")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  if (hrx_free >= 0 && !hrx_map_failed(hrx_b)) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[hrx_free];")?;
    writeln!(out, "    c->id = id;")?;
    writeln!(out, "    c->fd = fd;")?;
    writeln!(out, "    c->len = len;")?;
    writeln!(out, "    c->base = hrx_b;")?;
    writeln!(out, "    c->users = 1u;")?;
    writeln!(out, "    c->dead = 0u;")?;
    writeln!(out, "    c->tick = ++hrx_cache_tick;")?;
    writeln!(out, "    *hrx_slot = hrx_free;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "  return hrx_b;")?;
    writeln!(out, "}}")?;
    writeln!(out, "/* Gives back what hrx_acquire returned: unmaps a per-call mapping; a cached one stays mapped")?;
    writeln!(out, " * unless it was released while in use and this was its last user. */")?;
    writeln!(out, "__attribute__((unused)) static void hrx_put(int hrx_slot, void *base, unsigned int len) {{")?;
    writeln!(out, "  if (hrx_slot < 0 || hrx_slot >= {cap}) {{")?;
    writeln!(out, "    HAP_munmap(base, len);")?;
    writeln!(out, "    return;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  hrx_cached *c = &hrx_cache[hrx_slot];")?;
    writeln!(out, "  if (c->users > 0u) c->users--;")?;
    writeln!(out, "  if (c->users == 0u && c->dead != 0u) hrx_drop(c);")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "}}")?;
    let max = MAX_RELEASE_IDS;
    writeln!(out, "/* Method {RELEASE_METHOD}, release: pra[0] = u32 count C, then C u32 lease ids (C = 0: every entry). */")?;
    writeln!(out, "static int hrx_release(unsigned int sc, remote_arg *pra) {{")?;
    writeln!(out, "  if ((sc & 0xffffffu) != 0x10000u) return {};", l.err_bad_param)?;
    writeln!(out, "  const unsigned int hrx_n = pra[0].buf.len;")?;
    writeln!(out, "  if (hrx_n < 4u) return {};", l.err_bad_param)?;
    writeln!(out, "  const unsigned char *const hrx_a = (const unsigned char *)pra[0].buf.pv;")?;
    writeln!(out, "  const unsigned int hrx_count = hrx_ld_u32(hrx_a);")?;
    writeln!(out, "  if (hrx_count > {max}u || (hrx_n - 4u) / 4u < hrx_count) return {};", l.err_bad_param)?;
    writeln!(out, "  unsigned int hrx_ids[{max}];")?;
    writeln!(out, "  for (unsigned int k = 0; k < hrx_count; k++) hrx_ids[k] = hrx_ld_u32(hrx_a + 4u + 4u * k);")?;
    writeln!(out, "  hrx_lock();")?;
    writeln!(out, "  for (int i = 0; i < {cap}; i++) {{")?;
    writeln!(out, "    hrx_cached *c = &hrx_cache[i];")?;
    writeln!(out, "    if (c->base == (void *)0) continue;")?;
    writeln!(out, "    int hrx_hit = hrx_count == 0u;")?;
    writeln!(out, "    for (unsigned int k = 0; k < hrx_count && !hrx_hit; k++) hrx_hit = hrx_ids[k] == c->id;")?;
    writeln!(out, "    if (!hrx_hit) continue;")?;
    writeln!(out, "    if (c->users == 0u) hrx_drop(c); else c->dead = 1u;")?;
    writeln!(out, "  }}")?;
    writeln!(out, "  hrx_unlock();")?;
    writeln!(out, "  return 0;")?;
    writeln!(out, "}}")?;
    writeln!(out)
}
