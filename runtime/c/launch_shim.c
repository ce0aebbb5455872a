/* Host shim of the Hexagon SDK functions a generated launch entry calls, with a ledger, plus the
 * recording functions the test kernels call. Used only by hexrpc-runtime's tests (host `cc`).
 *
 * HAP_mmap "maps" a descriptor registered with hrx_shim_file() by allocating host memory
 * (filled with 0xA5) and recording (id, fd, base, len); it fails (returns (void *)-1) for an
 * unknown fd, a length of 0 or above the registered size, or the ordinal set with
 * hrx_shim_fail_map(). HAP_munmap matches its arguments against the live maps exactly and prints
 * either "unmap #id len=N" or "unmap-bad ..." (the mapping is then left alive: a leak).
 * HAP_perf_get_time_us returns 1000, 1037, 1074, ... so one kernel call measures 37 us.
 * Every event is printed on stdout, one line each, for the Rust test to compare. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_shim.h"

#define HRX_SHIM_MAX 64

struct hrx_map {
  int live;
  int fd;
  unsigned char *base;
  unsigned int len;
};
struct hrx_file {
  int fd;
  unsigned long long size;
};

static struct hrx_map maps[HRX_SHIM_MAX];
static int nmaps;
static struct hrx_file files[HRX_SHIM_MAX];
static int nfiles;
static int map_calls;
static int fail_ordinal = -1;
static unsigned long long now_us = 1000;

void hrx_shim_file(int fd, unsigned long long size) {
  if (nfiles < HRX_SHIM_MAX) {
    files[nfiles].fd = fd;
    files[nfiles].size = size;
    nfiles++;
  }
}

void hrx_shim_fail_map(int ordinal) { fail_ordinal = ordinal; }

int hrx_shim_live(void) {
  int live = 0;
  for (int i = 0; i < nmaps; i++) live += maps[i].live;
  return live;
}

void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset) {
  int ordinal = map_calls++;
  const struct hrx_file *file = NULL;
  for (int i = 0; i < nfiles; i++)
    if (files[i].fd == fd) file = &files[i];
  if (addr != NULL || file == NULL || len == 0 || len > file->size || ordinal == fail_ordinal || nmaps >= HRX_SHIM_MAX) {
    printf("mapfail fd=%d len=%u\n", fd, len);
    return (void *)-1;
  }
  unsigned char *base = malloc(len);
  if (base == NULL) {
    printf("mapfail fd=%d len=%u (host out of memory)\n", fd, len);
    return (void *)-1;
  }
  memset(base, 0xA5, len);
  maps[nmaps].live = 1;
  maps[nmaps].fd = fd;
  maps[nmaps].base = base;
  maps[nmaps].len = len;
  printf("map #%d fd=%d len=%u prot=%d flags=%d off=%ld\n", nmaps, fd, len, prot, flags, offset);
  nmaps++;
  return base;
}

/* Which map holds p: its id, and the byte offset of p in it; -1 if none. */
static int hrx_find(const void *p, unsigned long long *at) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < nmaps; i++) {
    uintptr_t b = (uintptr_t)maps[i].base;
    if (maps[i].live && a >= b && a <= b + maps[i].len) {
      *at = (unsigned long long)(a - b);
      return i;
    }
  }
  return -1;
}

int HAP_munmap(void *addr, unsigned int len) {
  for (int i = 0; i < nmaps; i++) {
    if (maps[i].live && maps[i].base == addr && maps[i].len == len) {
      maps[i].live = 0;
      free(maps[i].base);
      printf("unmap #%d len=%u\n", i, len);
      return 0;
    }
  }
  unsigned long long at = 0;
  int id = hrx_find(addr, &at);
  printf("unmap-bad map=#%d at=%llu len=%u\n", id, at, len);
  return -1;
}

unsigned long long HAP_perf_get_time_us(void) {
  unsigned long long t = now_us;
  now_us += 37;
  return t;
}

int HAP_power_set(void *context, void *request) {
  int type;
  memcpy(&type, request, sizeof type);
  printf("power ctx=%llu type=%d\n", (unsigned long long)(uintptr_t)context, type);
  return 0;
}

void hrx_test_kernel(unsigned int k) { printf("kernel %u\n", k); }

void hrx_test_buf(unsigned int i, const void *p) {
  unsigned long long at = 0;
  int id = hrx_find(p, &at);
  if (id < 0) {
    printf("kbuf %u unmapped\n", i);
  } else {
    printf("kbuf %u map=#%d at=%llu room=%llu\n", i, id, at, (unsigned long long)maps[id].len - at);
  }
}

void hrx_test_int(unsigned int i, long long v) { printf("kint %u %lld\n", i, v); }
void hrx_test_uint(unsigned int i, unsigned long long v) { printf("kuint %u %llu\n", i, v); }
void hrx_test_bits(unsigned int i, unsigned long long bits) { printf("kbits %u %#llx\n", i, bits); }
