/* hexrpc bench executor: the DSP-side runtime of a Hexagon executable that runs one generated
 * launch `entry` (and its kernel) under qemu-hexagon, on behalf of the bench's simulated DSP.
 *
 * What it provides (freestanding: raw trap0 syscalls, no libc):
 *  - memset / memcpy;
 *  - HAP_mmap / HAP_munmap over mmap2 / munmap of the bench's buffers, which are host memfds
 *    opened through /proc/<host pid>/fd/<n> (paths sent with each invoke; a handle without a
 *    path is one the bench could not resolve, and HAP_mmap refuses its fd). Every mapping is
 *    rounded up to qemu's 64 KiB target page and followed by one inaccessible 64 KiB guard, so
 *    a kernel that runs past the rounded mapping faults deterministically. A table holds the live mappings: HAP_munmap unmaps only an exact
 *    (address, length) match of a live mapping, and otherwise refuses, reports the call and
 *    leaves the mapping alive (a leak, as on a device);
 *  - HAP_perf_get_time_us (CLOCK_MONOTONIC of the emulator: host time, not DSP cycles) and
 *    HAP_power_set (accepted and recorded, no effect);
 *  - the request loop: the bench writes an invoke message on stdin, the runtime copies the
 *    buffer arguments into its own memory, builds the 32-bit (8-byte) remote_arg view, calls
 *    entry(handle, sc, pra), and writes the result, the output buffers and the HAP events on
 *    stdout. The message layout is documented in tests/src/executor/wire.rs; the constants below
 *    are checked against it by a Rust test.
 */
#include "hrx_dsp.h"

#define HRX_HELLO_MAGIC 0x4948584Du /* "MXHI" */
#define HRX_REQ_MAGIC 0x51525848u   /* "HXRQ" */
#define HRX_RSP_MAGIC 0x53525848u   /* "HXRS" */
#define HRX_PROTOCOL 1u
#define HRX_OP_INVOKE 1u
#define HRX_OP_QUIT 2u
#define HRX_MAX_BUFS 16u
#define HRX_MAX_HANDLES 16u
#define HRX_MAX_PATH 64u
#define HRX_ARENA 1048576u
#define HRX_MAX_EVENTS 128u
#define HRX_MAX_LIVE 64u
#define HRX_EV_MAP 1u
#define HRX_EV_MAP_FAILED 2u
#define HRX_EV_UNMAP 3u
#define HRX_EV_POWER 4u
#define HRX_EV_DROPPED 5u
#define HRX_EXIT_PROTOCOL 3

/* The marker the bench looks for to recognise an executor image. */
__attribute__((used)) const char hrx_exec_marker[] = "HXEXEC-RT1";

/* ---- syscalls ---------------------------------------------------------------------------- */

static long hrx_sys(long n, long a, long b, long c, long d, long e, long f) {
  register long r0 __asm__("r0") = a;
  register long r1 __asm__("r1") = b;
  register long r2 __asm__("r2") = c;
  register long r3 __asm__("r3") = d;
  register long r4 __asm__("r4") = e;
  register long r5 __asm__("r5") = f;
  register long r6 __asm__("r6") = n;
  __asm__ volatile("trap0(#1)" : "+r"(r0) : "r"(r1), "r"(r2), "r"(r3), "r"(r4), "r"(r5), "r"(r6) : "memory");
  return r0;
}

#define SYS_OPENAT 56
#define SYS_CLOSE 57
#define SYS_READ 63
#define SYS_WRITE 64
#define SYS_EXIT 93
#define SYS_CLOCK_GETTIME 113
#define SYS_MUNMAP 215
#define SYS_MMAP2 222
#define SYS_MPROTECT 226
#define AT_FDCWD (-100)
#define O_RDWR 2
#define O_CLOEXEC 0x80000
#define PROT_NONE 0
#define MAP_SHARED 0x01
#define PAGE 4096u
/* qemu-hexagon emulates 64 KiB target pages (a cDSP maps 4 KiB pages): mprotect works in these
 * units, so mappings are rounded up to them and the guard after each mapping is one such unit. */
#define GUARD 65536u

static int hrx_failed(long r) { return (unsigned long)r >= (unsigned long)-4095; }

__attribute__((noreturn)) static void hrx_exit(int code) {
  for (;;) hrx_sys(SYS_EXIT, code, 0, 0, 0, 0, 0);
}

/* ---- libc pieces the compiler may call ---------------------------------------------------- */

void *memset(void *dst, int c, hrx_size n) {
  volatile unsigned char *d = (volatile unsigned char *)dst;
  for (hrx_size i = 0; i < n; i++) d[i] = (unsigned char)c;
  return dst;
}

void *memcpy(void *dst, const void *src, hrx_size n) {
  volatile unsigned char *d = (volatile unsigned char *)dst;
  const unsigned char *s = (const unsigned char *)src;
  for (hrx_size i = 0; i < n; i++) d[i] = s[i];
  return dst;
}

/* ---- state of the current invoke ---------------------------------------------------------- */

struct hrx_handle {
  int fd;
  hrx_u32 offset;
  hrx_u32 size;
  char path[HRX_MAX_PATH];
};

struct hrx_live {
  hrx_u32 addr;
  hrx_u32 len;
  hrx_u32 span;
};

struct hrx_event {
  hrx_u32 kind, fd, addr, len, arg;
};

typedef union {
  struct {
    void *pv;
    unsigned int len;
  } buf;
  struct {
    int fd;
    unsigned int offset;
  } dma;
} hrx_remote_arg;
_Static_assert(sizeof(hrx_remote_arg) == 8, "the 32-bit remote_arg view is 8 bytes");

static struct hrx_handle handles[HRX_MAX_HANDLES];
static hrx_u32 nhandles;
static struct hrx_live live[HRX_MAX_LIVE];
static hrx_u32 nlive;
static struct hrx_event events[HRX_MAX_EVENTS];
static hrx_u32 nevents;
static hrx_u32 dropped;
static unsigned char arena[HRX_ARENA] __attribute__((aligned(128)));
static hrx_remote_arg pra[HRX_MAX_BUFS + HRX_MAX_HANDLES];

static void hrx_event(hrx_u32 kind, hrx_u32 fd, hrx_u32 addr, hrx_u32 len, hrx_u32 arg) {
  if (nevents >= HRX_MAX_EVENTS) {
    dropped++;
    return;
  }
  struct hrx_event *e = &events[nevents++];
  e->kind = kind;
  e->fd = fd;
  e->addr = addr;
  e->len = len;
  e->arg = arg;
}

/* ---- HAP ----------------------------------------------------------------------------------- */

/* Reasons reported with HRX_EV_MAP_FAILED (mirrored in wire.rs). */
#define HRX_MF_UNKNOWN_FD 1u
#define HRX_MF_ZERO_LEN 2u
#define HRX_MF_BEYOND 3u
#define HRX_MF_UNALIGNED 4u
#define HRX_MF_TABLE_FULL 5u
#define HRX_MF_RESERVE 6u /* the guard page could not be set up */
#define HRX_MF_OPEN 7u
#define HRX_MF_MMAP 8u

static void *hrx_map_fail(int fd, unsigned int len, hrx_u32 reason) {
  hrx_event(HRX_EV_MAP_FAILED, (hrx_u32)fd, 0, len, reason);
  return (void *)-1;
}

void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset) {
  (void)addr;
  (void)flags;
  const struct hrx_handle *h = 0;
  for (hrx_u32 i = 0; i < nhandles; i++)
    if (handles[i].fd == fd && handles[i].path[0] != 0) h = &handles[i];
  if (h == 0) return hrx_map_fail(fd, len, HRX_MF_UNKNOWN_FD);
  if (len == 0) return hrx_map_fail(fd, len, HRX_MF_ZERO_LEN);
  if (offset < 0 || (unsigned long)offset > h->size || len > h->size - (unsigned long)offset)
    return hrx_map_fail(fd, len, HRX_MF_BEYOND);
  if (((unsigned long)offset & (PAGE - 1u)) != 0) return hrx_map_fail(fd, len, HRX_MF_UNALIGNED);
  if (nlive >= HRX_MAX_LIVE) return hrx_map_fail(fd, len, HRX_MF_TABLE_FULL);
  if (len > 0xffffffffu - 2u * GUARD) return hrx_map_fail(fd, len, HRX_MF_BEYOND);
  const hrx_u32 pages = (len + GUARD - 1u) & ~(GUARD - 1u);
  const hrx_u32 span = pages + GUARD;
  long file = hrx_sys(SYS_OPENAT, AT_FDCWD, (long)h->path, O_RDWR | O_CLOEXEC, 0, 0, 0);
  if (hrx_failed(file)) return hrx_map_fail(fd, len, HRX_MF_OPEN);
  /* One guard unit more than needed (possibly past the end of the file, never accessed), then
   * that unit is made inaccessible. (qemu-hexagon 7.2 refuses MAP_FIXED over a reserved range,
   * so the guard is carved out of the file mapping instead.) */
  long p = hrx_sys(SYS_MMAP2, 0, span, prot, MAP_SHARED, file, offset / (long)PAGE);
  hrx_sys(SYS_CLOSE, file, 0, 0, 0, 0, 0);
  if (hrx_failed(p)) return hrx_map_fail(fd, len, HRX_MF_MMAP);
  if (hrx_failed(hrx_sys(SYS_MPROTECT, p + (long)pages, GUARD, PROT_NONE, 0, 0, 0))) {
    hrx_sys(SYS_MUNMAP, p, span, 0, 0, 0, 0);
    return hrx_map_fail(fd, len, HRX_MF_RESERVE);
  }
  live[nlive].addr = (hrx_u32)p;
  live[nlive].len = len;
  live[nlive].span = span;
  nlive++;
  hrx_event(HRX_EV_MAP, (hrx_u32)fd, (hrx_u32)p, len, (hrx_u32)offset);
  return (void *)p;
}

int HAP_munmap(void *addr, unsigned int len) {
  const hrx_u32 a = (hrx_u32)(__UINTPTR_TYPE__)addr;
  for (hrx_u32 i = 0; i < nlive; i++) {
    if (live[i].addr == a && live[i].len == len) {
      hrx_sys(SYS_MUNMAP, (long)a, live[i].span, 0, 0, 0, 0);
      live[i] = live[nlive - 1];
      nlive--;
      hrx_event(HRX_EV_UNMAP, 0, a, len, 1);
      return 0;
    }
  }
  /* No live mapping has exactly this address and length: refuse, report, unmap nothing. */
  hrx_event(HRX_EV_UNMAP, 0, a, len, 0);
  return 14;
}

unsigned long long HAP_perf_get_time_us(void) {
  long ts[2] = {0, 0};
  if (hrx_failed(hrx_sys(SYS_CLOCK_GETTIME, 1, (long)ts, 0, 0, 0, 0))) return 0;
  return (unsigned long long)(unsigned long)ts[0] * 1000000ull + (unsigned long)ts[1] / 1000u;
}

int HAP_power_set(void *context, void *request) {
  (void)context;
  hrx_u32 type = 0;
  if (request != 0) memcpy(&type, request, 4);
  hrx_event(HRX_EV_POWER, 0, 0, 0, type);
  return 0;
}

/* ---- request loop ------------------------------------------------------------------------- */

int entry(unsigned long long handle, unsigned int sc, void *pra);

static void hrx_read_all(void *dst, hrx_u32 n) {
  unsigned char *p = (unsigned char *)dst;
  while (n > 0) {
    long r = hrx_sys(SYS_READ, 0, (long)p, n, 0, 0, 0);
    if (r == 0) hrx_exit(0); /* the bench closed the pipe: normal end */
    if (hrx_failed(r)) hrx_exit(HRX_EXIT_PROTOCOL);
    p += r;
    n -= (hrx_u32)r;
  }
}

static void hrx_write_all(const void *src, hrx_u32 n) {
  const unsigned char *p = (const unsigned char *)src;
  while (n > 0) {
    long r = hrx_sys(SYS_WRITE, 1, (long)p, n, 0, 0, 0);
    if (r <= 0) hrx_exit(HRX_EXIT_PROTOCOL);
    p += r;
    n -= (hrx_u32)r;
  }
}

static hrx_u32 pad8(hrx_u32 n) { return (n + 7u) & ~7u; }
static hrx_u32 pad4(hrx_u32 n) { return (n + 3u) & ~3u; }

static void hrx_serve(void) {
  hrx_u32 hdr[7];
  hrx_read_all(hdr, sizeof hdr);
  if (hdr[0] != HRX_REQ_MAGIC) hrx_exit(HRX_EXIT_PROTOCOL);
  if (hdr[1] == HRX_OP_QUIT) hrx_exit(0);
  if (hdr[1] != HRX_OP_INVOKE) hrx_exit(HRX_EXIT_PROTOCOL);
  const hrx_u32 sc = hdr[2], handle = hdr[3], nbufs = hdr[4], nh = hdr[5], data_len = hdr[6];
  if (nbufs > HRX_MAX_BUFS || nh > HRX_MAX_HANDLES || data_len > HRX_ARENA) hrx_exit(HRX_EXIT_PROTOCOL);
  hrx_u32 lens[HRX_MAX_BUFS];
  hrx_u32 htab[HRX_MAX_HANDLES][4];
  hrx_read_all(lens, nbufs * 4u);
  hrx_read_all(htab, nh * 16u);
  hrx_read_all(arena, data_len);
  hrx_u32 at = 0;
  for (hrx_u32 i = 0; i < nbufs; i++) {
    if (lens[i] > data_len - at || pad8(lens[i]) > data_len - at) hrx_exit(HRX_EXIT_PROTOCOL);
    pra[i].buf.pv = arena + at;
    pra[i].buf.len = lens[i];
    at += pad8(lens[i]);
  }
  nhandles = nh;
  for (hrx_u32 i = 0; i < nh; i++) {
    const hrx_u32 plen = htab[i][3];
    if (plen >= HRX_MAX_PATH || pad4(plen) > data_len - at) hrx_exit(HRX_EXIT_PROTOCOL);
    handles[i].fd = (int)htab[i][0];
    handles[i].offset = htab[i][1];
    handles[i].size = htab[i][2];
    memcpy(handles[i].path, arena + at, plen);
    handles[i].path[plen] = 0;
    at += pad4(plen);
    pra[nbufs + i].dma.fd = (int)htab[i][0];
    pra[nbufs + i].dma.offset = htab[i][1];
  }
  nevents = 0;
  dropped = 0;

  const int rv = entry(handle, sc, pra);

  if (dropped != 0) hrx_event(HRX_EV_DROPPED, 0, 0, 0, dropped);
  const hrx_u32 nin = (sc >> 16) & 0xffu;
  const hrx_u32 nout = nbufs > nin ? nbufs - nin : 0u;
  hrx_u32 out_len = 0;
  for (hrx_u32 j = 0; j < nout; j++) out_len += pad8(lens[nin + j]);
  hrx_u32 rsp[6] = {HRX_RSP_MAGIC, (hrx_u32)rv, nout, nevents, nlive, out_len};
  hrx_write_all(rsp, sizeof rsp);
  hrx_write_all(lens + nin, nout * 4u);
  for (hrx_u32 j = 0; j < nout; j++) hrx_write_all(pra[nin + j].buf.pv, pad8(lens[nin + j]));
  hrx_write_all(events, nevents * (hrx_u32)sizeof(struct hrx_event));
}

void _start(void) {
  const hrx_u32 hello[4] = {HRX_HELLO_MAGIC, HRX_PROTOCOL, HRX_ARENA, HRX_MAX_EVENTS};
  hrx_write_all(hello, sizeof hello);
  for (;;) hrx_serve();
}
