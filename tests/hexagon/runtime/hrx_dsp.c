/* hexrpc bench executor: the DSP "shell" that runs under qemu-hexagon, one process per simulated
 * DSP process (one protection domain, as on a device), on behalf of the bench's simulated DSP.
 *
 * What it provides (freestanding: raw trap0 syscalls, no libc):
 *  - a loader for Hexagon shared objects (ELF32 ET_DYN, what `hexrpc build-lib` and tinygrad's
 *    DSPCompiler produce): the bench sends the library bytes exactly as the simulated DSP fetched
 *    them through the reverse file service; PT_LOAD segments are placed in one anonymous
 *    mapping and protected, the dynamic relocations lld emits for such objects (R_HEX_RELATIVE,
 *    R_HEX_32, R_HEX_GLOB_DAT, R_HEX_JMP_SLOT) are applied, undefined symbols are resolved
 *    against this shell's export table (hrx_exports below), constructors (DT_INIT_ARRAY, DT_INIT)
 *    run, and the requested symbol (`entry`) is found in the dynamic symbol table. Every refusal
 *    is answered with an AEE code and a text naming the cause (the symbol, the relocation type,
 *    the offset); several libraries live in the process at once, each under its own id; close
 *    runs the destructors and unmaps the library;
 *  - memset / memcpy / memmove, the compiler's Hexagon runtime helpers and a small libm
 *    (hrx_libc.c);
 *  - HAP_mmap / HAP_munmap over mmap2 / munmap of the bench's buffers, which are host memfds
 *    received with each invoke's header (SCM_RIGHTS over the stdin socket, closed after the
 *    invoke; a handle without one is one the bench could not resolve, and HAP_mmap refuses its
 *    fd). Every mapping is
 *    rounded up to qemu's 64 KiB target page and followed by one inaccessible 64 KiB guard, so
 *    a kernel that runs past the rounded mapping faults deterministically. A table holds the
 *    live mappings: HAP_munmap unmaps only an exact (address, length) match of a live mapping,
 *    and otherwise refuses, reports the call and leaves the mapping alive (a leak, as on a
 *    device);
 *  - execution counts: qemu-hexagon counts the packets, instructions and HVX instructions it
 *    executes (its own control registers 20, 21 and 22 in qemu 7.2: QEMU_PKT_CNT, QEMU_INSN_CNT,
 *    QEMU_HVX_CNT, 32 bits each, updated at the end of each translated block; not architectural:
 *    a device's DSP has no such registers, and only this bench shell reads them). The shell reads
 *    them around every invoke and at every HAP_perf_get_time_us, keeps 64-bit sums (a wrap
 *    between two reads, 2^32 packets of one kernel, is not seen), and answers each invoke with
 *    the invoke's counts and the counts at each timer read (the "marks"): the generated entries
 *    read the timer right before and right after each kernel call, so mark 2r to 2r+1 is record
 *    r's kernel (with the few packets of the timer calls themselves). Exactly repeatable run to
 *    run: the same code at the same addresses translates into the same blocks;
 *  - HAP_perf_get_time_us (CLOCK_MONOTONIC of the emulator: host time, not DSP cycles) and
 *    HAP_power_set (accepted and recorded, every field of a DCVS v2 request read back as the
 *    generated entry's hrx_power_request lays it out; no effect);
 *  - the request loop: the bench writes a message on stdin (load, invoke, close, quit); for an
 *    invoke the shell copies the buffer arguments into its own memory, builds the 32-bit
 *    (8-byte) remote_arg view, calls the library's entry(handle, sc, pra), and writes the result,
 *    the output buffers and the HAP events on stdout. The message layout is documented in
 *    tests/src/executor/wire.rs; the constants below are checked against it by a Rust test.
 *
 * Where this differs from a cDSP's loader: qemu-hexagon protects memory in 64 KiB target pages,
 * so a page shared by segments of different permissions gets the union of them (a library whose
 * sections are only 4 KiB-aligned may have writable text on the bench); RELRO is not applied; the
 * export table is this shell's, not a real fastrpc_shell's (a library importing something a real
 * shell has but this one lacks is refused here by name).
 */
#include "hrx_dsp.h"

#define HRX_HELLO_MAGIC 0x4948584Du /* "MXHI" */
#define HRX_REQ_MAGIC 0x51525848u   /* "HXRQ" */
#define HRX_RSP_MAGIC 0x53525848u   /* "HXRS" */
#define HRX_LOD_MAGIC 0x4C525848u   /* "HXRL" */
#define HRX_RVQ_MAGIC 0x51565248u   /* "HRVQ": a library's fopen, to the host's file service */
#define HRX_RVA_MAGIC 0x41565248u   /* "HRVA": its answer */
#define HRX_MAX_FOPEN 256u
#define HRX_PROTOCOL 4u
#define HRX_OP_INVOKE 1u
#define HRX_OP_QUIT 2u
#define HRX_OP_LOAD 3u
#define HRX_OP_CLOSE 4u
#define HRX_MAX_LIBS 256u
#define HRX_MAX_IMAGE 16777216u
#define HRX_MAX_TEXT 200u
#define HRX_MAX_BUFS 16u
#define HRX_MAX_HANDLES 16u
#define HRX_MAX_PATH 64u
#define HRX_ARENA 1048576u
#define HRX_MAX_EVENTS 128u
#define HRX_MAX_LIVE 4096u
#define HRX_MAX_MARKS 8192u
#define HRX_EV_MAP 1u
#define HRX_EV_MAP_FAILED 2u
#define HRX_EV_UNMAP 3u
#define HRX_EV_POWER 4u
#define HRX_EV_DROPPED 5u
#define HRX_EXIT_PROTOCOL 3


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
#define SYS_RECVMSG 212
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
#define MAP_PRIVATE 0x02
#define MAP_ANONYMOUS 0x20
#define PROT_READ 1
#define PROT_WRITE 2
#define PROT_EXEC 4
#define PAGE 4096u
/* qemu-hexagon emulates 64 KiB target pages (a cDSP maps 4 KiB pages): mprotect works in these
 * units, so mappings are rounded up to them and the guard after each mapping is one such unit. */
#define GUARD 65536u

static int hrx_failed(long r) { return (unsigned long)r >= (unsigned long)-4095; }

__attribute__((noreturn)) static void hrx_exit(int code) {
  for (;;) hrx_sys(SYS_EXIT, code, 0, 0, 0, 0, 0);
}

/* ---- state of the current invoke ---------------------------------------------------------- */

struct hrx_handle {
  int fd;
  hrx_u32 offset;
  hrx_u32 size;
  int file; /* the received memfd, or -1 */
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
    if (handles[i].fd == fd && handles[i].file >= 0) h = &handles[i];
  if (h == 0) return hrx_map_fail(fd, len, HRX_MF_UNKNOWN_FD);
  if (len == 0) return hrx_map_fail(fd, len, HRX_MF_ZERO_LEN);
  if (offset < 0 || (unsigned long)offset > h->size || len > h->size - (unsigned long)offset)
    return hrx_map_fail(fd, len, HRX_MF_BEYOND);
  if (((unsigned long)offset & (PAGE - 1u)) != 0) return hrx_map_fail(fd, len, HRX_MF_UNALIGNED);
  if (nlive >= HRX_MAX_LIVE) return hrx_map_fail(fd, len, HRX_MF_TABLE_FULL);
  if (len > 0xffffffffu - 2u * GUARD) return hrx_map_fail(fd, len, HRX_MF_BEYOND);
  const hrx_u32 pages = (len + GUARD - 1u) & ~(GUARD - 1u);
  const hrx_u32 span = pages + GUARD;
  const long file = h->file;
  /* One guard unit more than needed (possibly past the end of the file, never accessed), then
   * that unit is made inaccessible. (qemu-hexagon 7.2 refuses MAP_FIXED over a reserved range,
   * so the guard is carved out of the file mapping instead.) */
  long p = hrx_sys(SYS_MMAP2, 0, span, prot, MAP_SHARED, file, offset / (long)PAGE);
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

/* ---- execution counts (see the header comment) --------------------------------------------- */

/* Rd = Cs with s = 20, 21, 22 and d = 0, one instruction a packet (parse bits 11): the assembler
 * does not name qemu's counter registers, so the words are written out. */
static hrx_u32 hrx_ctr_packets(void) {
  register hrx_u32 v __asm__("r0");
  __asm__ volatile(".word 0x6a14c000" : "=r"(v));
  return v;
}
static hrx_u32 hrx_ctr_insns(void) {
  register hrx_u32 v __asm__("r0");
  __asm__ volatile(".word 0x6a15c000" : "=r"(v));
  return v;
}
static hrx_u32 hrx_ctr_hvx(void) {
  register hrx_u32 v __asm__("r0");
  __asm__ volatile(".word 0x6a16c000" : "=r"(v));
  return v;
}

static hrx_u64 ctr_sum[3];
static hrx_u32 ctr_last[3];
static hrx_u64 marks[HRX_MAX_MARKS][3];
static hrx_u32 nmarks;
static hrx_u32 marks_dropped;

/* The 64-bit sums now (each counter's 32-bit delta since the last read added). */
static void hrx_counts(hrx_u64 out[3]) {
  const hrx_u32 now[3] = {hrx_ctr_packets(), hrx_ctr_insns(), hrx_ctr_hvx()};
  for (int i = 0; i < 3; i++) {
    ctr_sum[i] += (hrx_u32)(now[i] - ctr_last[i]);
    ctr_last[i] = now[i];
    out[i] = ctr_sum[i];
  }
}

static void hrx_mark(void) {
  if (nmarks >= HRX_MAX_MARKS) {
    marks_dropped++;
    return;
  }
  hrx_counts(marks[nmarks++]);
}

unsigned long long HAP_perf_get_time_us(void) {
  hrx_mark();
  long ts[2] = {0, 0};
  if (hrx_failed(hrx_sys(SYS_CLOCK_GETTIME, 1, (long)ts, 0, 0, 0, 0))) return 0;
  return (unsigned long long)(unsigned long)ts[0] * 1000000ull + (unsigned long)ts[1] / 1000u;
}

/* The request as the generated entry declares it (runtime/src/launch/entry/prelude.rs). */
struct hrx_power_req {
  int type;
  union {
    struct {
      unsigned char dcvs_enable;
      int dcvs_option;
      unsigned char set_latency;
      unsigned int latency;
      unsigned char set_dcvs_params;
      struct { int target_corner, min_corner, max_corner; unsigned int param1, param2, param3; } dcvs_params;
      unsigned char set_sleep_disable;
      unsigned char sleep_disable;
    } dcvs_v2;
    unsigned char reserved[124];
  } u;
};

/* Records the request in one event: fd = type | dcvs_option << 16, addr = latency,
 * len = target | min << 8 | max << 16 | sleep_disable << 24 (corners below 256),
 * arg = dcvs_enable | set_latency << 8 | set_dcvs_params << 16 | set_sleep_disable << 24. */
int HAP_power_set(void *context, void *request) {
  (void)context;
  struct hrx_power_req r;
  memset(&r, 0, sizeof r);
  if (request != 0) memcpy(&r, request, sizeof r);
  const hrx_u32 fd = ((hrx_u32)r.type & 0xffffu) | (((hrx_u32)r.u.dcvs_v2.dcvs_option & 0xffffu) << 16);
  const hrx_u32 corners = ((hrx_u32)r.u.dcvs_v2.dcvs_params.target_corner & 0xffu) |
                          (((hrx_u32)r.u.dcvs_v2.dcvs_params.min_corner & 0xffu) << 8) |
                          (((hrx_u32)r.u.dcvs_v2.dcvs_params.max_corner & 0xffu) << 16) |
                          ((hrx_u32)r.u.dcvs_v2.sleep_disable << 24);
  const hrx_u32 flags = (hrx_u32)r.u.dcvs_v2.dcvs_enable | ((hrx_u32)r.u.dcvs_v2.set_latency << 8) |
                        ((hrx_u32)r.u.dcvs_v2.set_dcvs_params << 16) | ((hrx_u32)r.u.dcvs_v2.set_sleep_disable << 24);
  hrx_event(HRX_EV_POWER, fd, r.u.dcvs_v2.latency, corners, flags);
  return 0;
}

/* ---- exports: what a loaded library may import ------------------------------------------- */

struct hrx_export {
  const char *name;
  void *addr;
};

/* The DSP C library's fopen/fclose (defined with the request loop below). */
void *fopen(const char *path, const char *mode);
int fclose(void *file);

#define HRX_EXPORT(f) {#f, (void *)(f)}
static const struct hrx_export hrx_exports[] = {
    HRX_EXPORT(HAP_mmap),
    HRX_EXPORT(HAP_munmap),
    HRX_EXPORT(HAP_perf_get_time_us),
    HRX_EXPORT(HAP_power_set),
    HRX_EXPORT(memcpy),
    HRX_EXPORT(memset),
    HRX_EXPORT(memmove),
    HRX_EXPORT(memcmp),
    HRX_EXPORT(fopen),
    HRX_EXPORT(fclose),
    HRX_EXPORT(__hexagon_divsi3),
    HRX_EXPORT(__hexagon_udivsi3),
    HRX_EXPORT(__hexagon_modsi3),
    HRX_EXPORT(__hexagon_umodsi3),
    HRX_EXPORT(__hexagon_divdi3),
    HRX_EXPORT(__hexagon_udivdi3),
    HRX_EXPORT(__hexagon_moddi3),
    HRX_EXPORT(__hexagon_umoddi3),
    HRX_EXPORT(__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes),
    HRX_EXPORT(__hexagon_sqrtf),
    HRX_EXPORT(__hexagon_adddf3),
    HRX_EXPORT(__hexagon_subdf3),
    HRX_EXPORT(__hexagon_muldf3),
    HRX_EXPORT(__hexagon_divdf3),
    HRX_EXPORT(sqrtf),
    HRX_EXPORT(fabsf),
    HRX_EXPORT(floorf),
    HRX_EXPORT(ceilf),
    HRX_EXPORT(truncf),
    HRX_EXPORT(roundf),
    HRX_EXPORT(fmaxf),
    HRX_EXPORT(fminf),
    HRX_EXPORT(expf),
    HRX_EXPORT(exp2f),
    HRX_EXPORT(logf),
    HRX_EXPORT(log2f),
    HRX_EXPORT(sinf),
    HRX_EXPORT(cosf),
};
#define HRX_NEXPORTS (sizeof hrx_exports / sizeof hrx_exports[0])

static int hrx_streq(const char *a, const char *b) {
  while (*a != 0 && *a == *b) {
    a++;
    b++;
  }
  return *a == *b;
}

static void *hrx_export_lookup(const char *name) {
  for (hrx_u32 i = 0; i < HRX_NEXPORTS; i++)
    if (hrx_streq(hrx_exports[i].name, name)) return hrx_exports[i].addr;
  return 0;
}

/* ---- loader ------------------------------------------------------------------------------- */

#define AEE_ENOMEMORY 0x02
#define AEE_EUNABLETOLOAD 0x06
#define AEE_EBADPARM 0x0E
#define AEE_EOUTOFHANDLES 0x2D
#define AEE_EINVHANDLE 0x2C
#define AEE_ENOSUCHSYMBOL 0x42
#define AEE_EBADELF 0x52

#define ET_DYN 3
#define EM_HEXAGON 164
#define PT_LOAD 1
#define PT_DYNAMIC 2
#define PF_X 1
#define PF_W 2
#define PF_R 4
#define DT_NULL 0
#define DT_NEEDED 1
#define DT_PLTRELSZ 2
#define DT_HASH 4
#define DT_STRTAB 5
#define DT_SYMTAB 6
#define DT_RELA 7
#define DT_RELASZ 8
#define DT_RELAENT 9
#define DT_STRSZ 10
#define DT_SYMENT 11
#define DT_INIT 12
#define DT_FINI 13
#define DT_REL 17
#define DT_PLTREL 20
#define DT_JMPREL 23
#define DT_INIT_ARRAY 25
#define DT_FINI_ARRAY 26
#define DT_INIT_ARRAYSZ 27
#define DT_FINI_ARRAYSZ 28
#define DT_GNU_HASH 0x6ffffef5
#define R_HEX_NONE 0
#define R_HEX_32 6
#define R_HEX_GLOB_DAT 33
#define R_HEX_JMP_SLOT 34
#define R_HEX_RELATIVE 35
#define STB_WEAK 2
#define SHN_UNDEF 0
#define HRX_MAX_SPAN (64u << 20)

typedef int (*hrx_entry_fn)(unsigned long long handle, unsigned int sc, void *pra);
typedef void (*hrx_void_fn)(void);

struct hrx_lib {
  int used;
  hrx_u32 base; /* load bias: address of vaddr 0 */
  hrx_u32 map;  /* the anonymous mapping */
  hrx_u32 span;
  hrx_entry_fn entry;
  hrx_u32 fini_array, fini_count, fini;
};
static struct hrx_lib libs[HRX_MAX_LIBS];

/* The reason of the last refusal, sent back with the load answer. */
static char text[HRX_MAX_TEXT + 1];
static hrx_u32 ntext;

static void t_str(const char *s) {
  while (*s != 0 && ntext < HRX_MAX_TEXT) text[ntext++] = *s++;
  text[ntext] = 0;
}

static void t_hex(hrx_u32 v) {
  char b[11];
  b[0] = '0';
  b[1] = 'x';
  for (int i = 0; i < 8; i++) b[2 + i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 15u];
  b[10] = 0;
  int start = 2;
  while (start < 9 && b[start] == '0') start++;
  b[start - 2] = '0';
  b[start - 1] = 'x';
  t_str(b + start - 2);
}

static void t_dec(hrx_u32 v) {
  char b[11];
  int i = 10;
  b[i] = 0;
  do {
    b[--i] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v != 0 && i > 0);
  t_str(b + i);
}

/* Copies a NUL-terminated name from the library's string table into the text, bounded. */
static void t_name(const char *s, hrx_u32 room) {
  hrx_u32 n = 0;
  while (n < room && s[n] != 0 && n < 96u) n++;
  char b[97];
  for (hrx_u32 i = 0; i < n; i++) b[i] = (s[i] >= 32 && s[i] < 127) ? s[i] : '?';
  b[n] = 0;
  t_str(b);
}

static int refuse(int code, const char *why) {
  ntext = 0;
  t_str(why);
  return code;
}

static hrx_u32 ld32(const unsigned char *p) {
  return (hrx_u32)p[0] | ((hrx_u32)p[1] << 8) | ((hrx_u32)p[2] << 16) | ((hrx_u32)p[3] << 24);
}
static hrx_u32 ld16(const unsigned char *p) { return (hrx_u32)p[0] | ((hrx_u32)p[1] << 8); }
static void st32(unsigned char *p, hrx_u32 v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

/* True if [addr, addr + len) lies inside the library's span (addresses relative to vaddr 0). */
static int inside(hrx_u32 span, hrx_u32 addr, hrx_u32 len) { return addr <= span && len <= span - addr; }

struct hrx_dyn {
  hrx_u32 symtab, strtab, strsz, hash, gnu_hash, rela, relasz, relaent, jmprel, pltrelsz, pltrel;
  hrx_u32 init, fini, init_array, init_arraysz, fini_array, fini_arraysz;
  int have_symtab, have_strtab, have_rel, have_hash, have_gnu_hash;
  hrx_u32 needed; /* string offset of the first DT_NEEDED, or ~0 */
};

/* Number of dynamic symbols, from DT_HASH's nchain or by walking DT_GNU_HASH. 0 = unknown. */
static hrx_u32 symbol_count(const unsigned char *m, hrx_u32 span, const struct hrx_dyn *d) {
  if (d->have_hash) {
    if (!inside(span, d->hash, 8)) return 0;
    return ld32(m + d->hash + 4);
  }
  if (d->have_gnu_hash) {
    if (!inside(span, d->gnu_hash, 16)) return 0;
    const hrx_u32 nbuckets = ld32(m + d->gnu_hash), symoffset = ld32(m + d->gnu_hash + 4);
    const hrx_u32 bloom = ld32(m + d->gnu_hash + 8);
    if (nbuckets > (1u << 20) || bloom > (1u << 20)) return 0;
    const hrx_u32 buckets = d->gnu_hash + 16 + 4 * bloom;
    const hrx_u32 chains = buckets + 4 * nbuckets;
    if (!inside(span, buckets, 4 * nbuckets)) return 0;
    hrx_u32 last = 0;
    for (hrx_u32 i = 0; i < nbuckets; i++) {
      const hrx_u32 b = ld32(m + buckets + 4 * i);
      if (b > last) last = b;
    }
    if (last < symoffset) return symoffset;
    for (;;) {
      const hrx_u32 at = chains + 4 * (last - symoffset);
      if (!inside(span, at, 4)) return 0;
      if (ld32(m + at) & 1u) return last + 1;
      last++;
    }
  }
  return 0;
}

/* Finds a defined dynamic symbol by name; returns its value (relative) or ~0. */
static hrx_u32 find_symbol(const unsigned char *m, hrx_u32 span, const struct hrx_dyn *d, hrx_u32 nsyms, const char *name) {
  for (hrx_u32 i = 1; i < nsyms; i++) {
    const unsigned char *s = m + d->symtab + 16 * i;
    const hrx_u32 st_name = ld32(s), st_value = ld32(s + 4), shndx = ld16(s + 14);
    if (shndx == SHN_UNDEF || st_name >= d->strsz) continue;
    const char *n = (const char *)m + d->strtab + st_name;
    hrx_u32 k = 0;
    while (name[k] != 0 && st_name + k < d->strsz && n[k] == name[k]) k++;
    if (name[k] == 0 && st_name + k < d->strsz && n[k] == 0) return st_value;
  }
  (void)span;
  return 0xffffffffu;
}

static int apply_relocs(unsigned char *m, hrx_u32 base, hrx_u32 span, const struct hrx_dyn *d, hrx_u32 nsyms, hrx_u32 at, hrx_u32 size,
                        const char *table) {
  if (size == 0) return 0;
  if (!inside(span, at, size) || size % 12u != 0) {
    ntext = 0;
    t_str(table);
    t_str(" lies outside the loaded image");
    return AEE_EBADELF;
  }
  for (hrx_u32 off = 0; off < size; off += 12u) {
    const unsigned char *r = m + at + off;
    const hrx_u32 where = ld32(r), info = ld32(r + 4), addend = ld32(r + 8);
    const hrx_u32 type = info & 0xffu, sym = info >> 8;
    if (type == R_HEX_NONE) continue;
    if (type != R_HEX_32 && type != R_HEX_GLOB_DAT && type != R_HEX_JMP_SLOT && type != R_HEX_RELATIVE) {
      ntext = 0;
      t_str("unsupported relocation type ");
      t_dec(type);
      t_str(" at offset ");
      t_hex(where);
      t_str(" (the loader applies R_HEX_RELATIVE, R_HEX_32, R_HEX_GLOB_DAT, R_HEX_JMP_SLOT)");
      return AEE_EBADELF;
    }
    if (!inside(span, where, 4)) {
      ntext = 0;
      t_str("relocation out of range: offset ");
      t_hex(where);
      t_str(" is outside the loaded image (");
      t_hex(span);
      t_str(" bytes)");
      return AEE_EBADELF;
    }
    hrx_u32 value;
    if (type == R_HEX_RELATIVE) {
      value = base + addend;
    } else {
      if (sym == 0 || sym >= nsyms) {
        ntext = 0;
        t_str("relocation at ");
        t_hex(where);
        t_str(" names symbol index ");
        t_dec(sym);
        t_str(" beyond the dynamic symbol table");
        return AEE_EBADELF;
      }
      const unsigned char *s = m + d->symtab + 16 * sym;
      const hrx_u32 st_name = ld32(s), st_value = ld32(s + 4), bind = s[12] >> 4, shndx = ld16(s + 14);
      if (shndx != SHN_UNDEF) {
        value = base + st_value + addend;
      } else {
        if (st_name >= d->strsz) return refuse(AEE_EBADELF, "a symbol name lies outside the string table");
        const char *name = (const char *)m + d->strtab + st_name;
        hrx_u32 k = 0;
        while (st_name + k < d->strsz && name[k] != 0) k++;
        if (st_name + k >= d->strsz) return refuse(AEE_EBADELF, "a symbol name is not terminated inside the string table");
        void *f = hrx_export_lookup(name);
        if (f == 0 && bind != STB_WEAK) {
          ntext = 0;
          t_str("unresolved symbol ");
          t_name(name, d->strsz - st_name);
          t_str(" (not exported by the bench's DSP shell)");
          return AEE_ENOSUCHSYMBOL;
        }
        value = (hrx_u32)(__UINTPTR_TYPE__)f + addend;
      }
    }
    st32(m + where, value);
  }
  return 0;
}

static void unmap_lib(struct hrx_lib *l) {
  hrx_sys(SYS_MUNMAP, (long)l->map, l->span, 0, 0, 0, 0);
  l->used = 0;
}

/* Loads `img` (n bytes); on success returns 0 and the library id in *id. */
static int hrx_load(const unsigned char *img, hrx_u32 n, const char *symbol, hrx_u32 *id) {
  ntext = 0;
  text[0] = 0;
  if (n < 52 || img[0] != 0x7f || img[1] != 'E' || img[2] != 'L' || img[3] != 'F') return refuse(AEE_EBADELF, "not an ELF file");
  if (img[4] != 1 || img[5] != 1) return refuse(AEE_EBADELF, "not a 32-bit little-endian ELF file");
  if (ld16(img + 16) != ET_DYN) {
    ntext = 0;
    t_str("not a shared object (e_type ");
    t_dec(ld16(img + 16));
    t_str(", want 3 = ET_DYN)");
    return AEE_EBADELF;
  }
  if (ld16(img + 18) != EM_HEXAGON) {
    ntext = 0;
    t_str("not a Hexagon object (e_machine ");
    t_dec(ld16(img + 18));
    t_str(")");
    return AEE_EBADELF;
  }
  const hrx_u32 phoff = ld32(img + 28), phentsize = ld16(img + 42), phnum = ld16(img + 44);
  if (phentsize != 32 || phnum == 0 || phoff > n || phnum * 32u > n - phoff) return refuse(AEE_EBADELF, "bad program header table");
  hrx_u32 lo = 0xffffffffu, hi = 0, dyn = 0, dynsz = 0;
  int have_dyn = 0;
  for (hrx_u32 i = 0; i < phnum; i++) {
    const unsigned char *ph = img + phoff + 32 * i;
    const hrx_u32 type = ld32(ph), off = ld32(ph + 4), va = ld32(ph + 8), fsz = ld32(ph + 16), msz = ld32(ph + 20);
    if (type == PT_DYNAMIC) {
      dyn = va;
      dynsz = msz;
      have_dyn = 1;
    }
    if (type != PT_LOAD) continue;
    if (off > n || fsz > n - off || fsz > msz || va > HRX_MAX_SPAN || msz > HRX_MAX_SPAN - va) {
      ntext = 0;
      t_str("PT_LOAD segment ");
      t_dec(i);
      t_str(" lies outside the file or exceeds the loader's limit");
      return AEE_EBADELF;
    }
    if (va < lo) lo = va;
    if (va + msz > hi) hi = va + msz;
  }
  if (hi == 0) return refuse(AEE_EBADELF, "no PT_LOAD segment");
  if (!have_dyn) return refuse(AEE_EBADELF, "no PT_DYNAMIC segment (not a dynamic shared object)");
  /* The mapping always starts at vaddr 0 (lld's shared objects do), so every address checked
   * against the span below is inside it. */
  lo = 0;
  const hrx_u32 span = ((hi - lo) + GUARD - 1u) & ~(GUARD - 1u);
  hrx_u32 slot = HRX_MAX_LIBS;
  for (hrx_u32 i = 0; i < HRX_MAX_LIBS; i++)
    if (!libs[i].used) {
      slot = i;
      break;
    }
  if (slot == HRX_MAX_LIBS) return refuse(AEE_EOUTOFHANDLES, "the shell's library table is full");
  const long p = hrx_sys(SYS_MMAP2, 0, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (hrx_failed(p)) return refuse(AEE_ENOMEMORY, "mmap2 of the library's span failed");
  struct hrx_lib *l = &libs[slot];
  l->used = 1;
  l->map = (hrx_u32)p;
  l->span = span;
  l->base = (hrx_u32)p - lo;
  l->fini_array = l->fini_count = l->fini = 0;
  /* Relative addresses (vaddr) index m; the mapping covers [lo, lo + span). */
  unsigned char *m = (unsigned char *)(__UINTPTR_TYPE__)l->base;
  const hrx_u32 rspan = lo + span;
  for (hrx_u32 i = 0; i < phnum; i++) {
    const unsigned char *ph = img + phoff + 32 * i;
    if (ld32(ph) != PT_LOAD) continue;
    const hrx_u32 off = ld32(ph + 4), va = ld32(ph + 8), fsz = ld32(ph + 16);
    memcpy(m + va, img + off, fsz);
  }
  int rc = 0;
  struct hrx_dyn d;
  memset(&d, 0, sizeof d);
  d.relaent = 12;
  d.needed = 0xffffffffu;
  if (!inside(rspan, dyn, dynsz) || dyn < lo) {
    rc = refuse(AEE_EBADELF, "PT_DYNAMIC lies outside the loaded image");
    goto fail;
  }
  for (hrx_u32 at = dyn; at + 8 <= dyn + dynsz; at += 8) {
    const hrx_u32 tag = ld32(m + at), val = ld32(m + at + 4);
    if (tag == DT_NULL) break;
    switch (tag) {
      case DT_NEEDED: if (d.needed == 0xffffffffu) d.needed = val; break;
      case DT_PLTRELSZ: d.pltrelsz = val; break;
      case DT_HASH: d.hash = val; d.have_hash = 1; break;
      case DT_GNU_HASH: d.gnu_hash = val; d.have_gnu_hash = 1; break;
      case DT_STRTAB: d.strtab = val; d.have_strtab = 1; break;
      case DT_SYMTAB: d.symtab = val; d.have_symtab = 1; break;
      case DT_RELA: d.rela = val; break;
      case DT_RELASZ: d.relasz = val; break;
      case DT_RELAENT: d.relaent = val; break;
      case DT_STRSZ: d.strsz = val; break;
      case DT_SYMENT:
        if (val != 16) {
          rc = refuse(AEE_EBADELF, "DT_SYMENT is not 16");
          goto fail;
        }
        break;
      case DT_INIT: d.init = val; break;
      case DT_FINI: d.fini = val; break;
      case DT_REL: d.have_rel = 1; break;
      case DT_PLTREL: d.pltrel = val; break;
      case DT_JMPREL: d.jmprel = val; break;
      case DT_INIT_ARRAY: d.init_array = val; break;
      case DT_INIT_ARRAYSZ: d.init_arraysz = val; break;
      case DT_FINI_ARRAY: d.fini_array = val; break;
      case DT_FINI_ARRAYSZ: d.fini_arraysz = val; break;
      default: break;
    }
  }
  if (!d.have_symtab || !d.have_strtab || !inside(rspan, d.strtab, d.strsz) || d.strsz == 0) {
    rc = refuse(AEE_EBADELF, "no usable dynamic symbol or string table");
    goto fail;
  }
  if (d.have_rel || (d.jmprel != 0 && d.pltrel != 0 && d.pltrel != DT_RELA) || d.relaent != 12) {
    rc = refuse(AEE_EBADELF, "REL relocations (Hexagon objects use RELA)");
    goto fail;
  }
  if (d.needed != 0xffffffffu) {
    ntext = 0;
    t_str("the library needs another library (DT_NEEDED ");
    if (d.needed < d.strsz) t_name((const char *)m + d.strtab + d.needed, d.strsz - d.needed);
    t_str("), which this shell does not load");
    rc = AEE_EUNABLETOLOAD;
    goto fail;
  }
  const hrx_u32 nsyms = symbol_count(m, rspan, &d);
  if (nsyms == 0 || nsyms > (1u << 20) || !inside(rspan, d.symtab, 16u * nsyms)) {
    rc = refuse(AEE_EBADELF, "the dynamic symbol table has no usable hash table or lies outside the image");
    goto fail;
  }
  rc = apply_relocs(m, l->base, rspan, &d, nsyms, d.rela, d.relasz, ".rela.dyn");
  if (rc == 0) rc = apply_relocs(m, l->base, rspan, &d, nsyms, d.jmprel, d.pltrelsz, ".rela.plt");
  if (rc != 0) goto fail;
  const hrx_u32 ev = find_symbol(m, rspan, &d, nsyms, symbol);
  if (ev == 0xffffffffu || !inside(rspan, ev, 4)) {
    ntext = 0;
    t_str("symbol `");
    t_name(symbol, 64);
    t_str("` is not defined in the dynamic symbol table");
    rc = AEE_ENOSUCHSYMBOL;
    goto fail;
  }
  if ((d.init_arraysz % 4u) != 0 || (d.init_arraysz != 0 && !inside(rspan, d.init_array, d.init_arraysz)) ||
      (d.fini_arraysz % 4u) != 0 || (d.fini_arraysz != 0 && !inside(rspan, d.fini_array, d.fini_arraysz)) ||
      (d.init != 0 && !inside(rspan, d.init, 4)) || (d.fini != 0 && !inside(rspan, d.fini, 4))) {
    rc = refuse(AEE_EBADELF, "constructor or destructor tables lie outside the image");
    goto fail;
  }
  /* Protection: qemu-hexagon's 64 KiB target pages each get the union of the permissions of the
   * segments that overlap them; pages no segment touches become inaccessible. */
  for (hrx_u32 pg = lo; pg < lo + span; pg += GUARD) {
    int prot = 0;
    for (hrx_u32 i = 0; i < phnum; i++) {
      const unsigned char *ph = img + phoff + 32 * i;
      if (ld32(ph) != PT_LOAD) continue;
      const hrx_u32 va = ld32(ph + 8), msz = ld32(ph + 20), fl = ld32(ph + 24);
      if (msz == 0 || va >= pg + GUARD || va + msz <= pg) continue;
      if (fl & PF_R) prot |= PROT_READ;
      if (fl & PF_W) prot |= PROT_WRITE;
      if (fl & PF_X) prot |= PROT_EXEC;
    }
    if (hrx_failed(hrx_sys(SYS_MPROTECT, (long)(l->base + pg), GUARD, prot, 0, 0, 0))) {
      rc = refuse(AEE_ENOMEMORY, "mprotect of a segment failed");
      goto fail;
    }
  }
  l->entry = (hrx_entry_fn)(__UINTPTR_TYPE__)(l->base + ev);
  l->fini_array = d.fini_arraysz != 0 ? l->base + d.fini_array : 0;
  l->fini_count = d.fini_arraysz / 4u;
  l->fini = d.fini != 0 ? l->base + d.fini : 0;
  /* Constructors, as the DSP's dlopen runs them: DT_INIT, then DT_INIT_ARRAY in order. A
   * constructor that faults kills this process: the bench sees a DSP restart. */
  if (d.init != 0) ((hrx_void_fn)(__UINTPTR_TYPE__)(l->base + d.init))();
  for (hrx_u32 i = 0; i < d.init_arraysz / 4u; i++) {
    const hrx_u32 f = ld32(m + d.init_array + 4 * i);
    if (f != 0 && f != 0xffffffffu) ((hrx_void_fn)(__UINTPTR_TYPE__)f)();
  }
  *id = slot + 1u;
  return 0;
fail:
  unmap_lib(l);
  return rc;
}

static int hrx_close(hrx_u32 id) {
  ntext = 0;
  text[0] = 0;
  if (id == 0 || id > HRX_MAX_LIBS || !libs[id - 1].used) return refuse(AEE_EINVHANDLE, "no library loaded under this id");
  struct hrx_lib *l = &libs[id - 1];
  for (hrx_u32 i = l->fini_count; i > 0; i--) {
    const hrx_u32 f = ((const hrx_u32 *)(__UINTPTR_TYPE__)l->fini_array)[i - 1];
    if (f != 0 && f != 0xffffffffu) ((hrx_void_fn)(__UINTPTR_TYPE__)f)();
  }
  if (l->fini != 0) ((hrx_void_fn)(__UINTPTR_TYPE__)l->fini)();
  unmap_lib(l);
  return 0;
}

/* ---- request loop ------------------------------------------------------------------------- */

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

/* The request header, and the memfds that come with it (SCM_RIGHTS on the stdin socket). */
struct hrx_iovec {
  void *base;
  hrx_u32 len;
};
struct hrx_msghdr {
  void *name;
  hrx_u32 namelen;
  struct hrx_iovec *iov;
  hrx_u32 iovlen;
  void *control;
  hrx_u32 controllen;
  int flags;
};
static int received[HRX_MAX_HANDLES];
static hrx_u32 nreceived;

static void hrx_read_header(hrx_u32 *hdr, hrx_u32 n) {
  hrx_u32 control[3 + HRX_MAX_HANDLES]; /* cmsghdr (len, level, type), then the fds */
  struct hrx_iovec iov = {hdr, n};
  struct hrx_msghdr m = {0, 0, &iov, 1, control, (hrx_u32)sizeof control, 0};
  const long r = hrx_sys(SYS_RECVMSG, 0, (long)&m, 0, 0, 0, 0);
  if (r == 0) hrx_exit(0); /* the bench closed the socket: normal end */
  if (hrx_failed(r)) hrx_exit(HRX_EXIT_PROTOCOL);
  nreceived = 0;
  if (m.flags & 8 /* MSG_CTRUNC */) hrx_exit(HRX_EXIT_PROTOCOL);
  if (m.controllen >= 12u && control[1] == 1u /* SOL_SOCKET */ && control[2] == 1u /* SCM_RIGHTS */) {
    const hrx_u32 k = (control[0] - 12u) / 4u;
    if (k > HRX_MAX_HANDLES) hrx_exit(HRX_EXIT_PROTOCOL);
    for (hrx_u32 i = 0; i < k; i++) received[i] = (int)control[3 + i];
    nreceived = k;
  }
  if ((hrx_u32)r < n) hrx_read_all((unsigned char *)hdr + r, n - (hrx_u32)r);
}

static void hrx_close_received(void) {
  for (hrx_u32 i = 0; i < nreceived; i++) hrx_sys(SYS_CLOSE, received[i], 0, 0, 0, 0, 0);
  nreceived = 0;
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

/* fopen as a real DSP's C library does it: the host's reverse file service decides (apps_std
 * fopen_with_env through the listener). Here the request goes up the executor's pipe during the
 * invoke and the bench sends it to the listener; the file is only opened and closed again (the
 * shell offers no fread), so a library learns whether the service allowed the path. Returns a
 * token (not NULL) when it did, NULL when it refused. */
static char hrx_file_token;

/* The tag of the request being served: repeated in every frame sent while serving it, so the
 * bench can tell the shell's frames from bytes a library writes to fd 1 itself. */
static hrx_u32 hrx_tag;

static hrx_u32 hrx_cstrlen(const char *s, hrx_u32 max) {
  hrx_u32 n = 0;
  while (n < max && s[n] != 0) n++;
  return n;
}

void *fopen(const char *path, const char *mode) {
  static const char zero[4] = {0, 0, 0, 0};
  const hrx_u32 plen = hrx_cstrlen(path, HRX_MAX_FOPEN), mlen = hrx_cstrlen(mode, 8u);
  if (plen == HRX_MAX_FOPEN) return 0;
  const hrx_u32 hdr[4] = {HRX_RVQ_MAGIC, hrx_tag, plen, mlen};
  hrx_write_all(hdr, sizeof hdr);
  hrx_write_all(path, plen);
  hrx_write_all(zero, pad4(plen) - plen);
  hrx_write_all(mode, mlen);
  hrx_write_all(zero, pad4(mlen) - mlen);
  hrx_u32 ans[2];
  hrx_read_all(ans, sizeof ans);
  if (ans[0] != HRX_RVA_MAGIC) hrx_exit(HRX_EXIT_PROTOCOL);
  return ans[1] == 0 ? (void *)&hrx_file_token : 0;
}

int fclose(void *file) { return file == (void *)&hrx_file_token ? 0 : -1; }

/* Load / close answer: magic, status, library id, text length, text padded to 4. */
static void hrx_answer(int status, hrx_u32 id) {
  const hrx_u32 n = status == 0 ? 0u : ntext;
  hrx_u32 rsp[5] = {HRX_LOD_MAGIC, hrx_tag, (hrx_u32)status, id, n};
  hrx_write_all(rsp, sizeof rsp);
  static const char zero[4] = {0, 0, 0, 0};
  hrx_write_all(text, n);
  hrx_write_all(zero, pad4(n) - n);
}

static void hrx_serve_load(hrx_u32 symlen, hrx_u32 data_len) {
  char symbol[68];
  if (symlen == 0 || symlen > 64u || data_len < pad4(symlen) || data_len - pad4(symlen) > HRX_MAX_IMAGE) hrx_exit(HRX_EXIT_PROTOCOL);
  hrx_read_all(symbol, pad4(symlen));
  symbol[symlen] = 0;
  const hrx_u32 n = data_len - pad4(symlen);
  const hrx_u32 room = (n + GUARD - 1u) & ~(GUARD - 1u);
  const long buf = n == 0 ? 0 : hrx_sys(SYS_MMAP2, 0, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (hrx_failed(buf)) {
    /* Drain the image, then refuse. */
    unsigned char sink[256];
    for (hrx_u32 left = n; left > 0;) {
      const hrx_u32 k = left < sizeof sink ? left : (hrx_u32)sizeof sink;
      hrx_read_all(sink, k);
      left -= k;
    }
    hrx_answer(refuse(AEE_ENOMEMORY, "no memory for the library image"), 0);
    return;
  }
  if (n != 0) hrx_read_all((void *)buf, n);
  hrx_u32 id = 0;
  const int rc = hrx_load((const unsigned char *)buf, n, symbol, &id);
  if (n != 0) hrx_sys(SYS_MUNMAP, buf, room, 0, 0, 0, 0);
  hrx_answer(rc, id);
}

static void hrx_serve(void) {
  hrx_u32 hdr[9];
  hrx_read_header(hdr, sizeof hdr);
  if (nreceived != 0 && hdr[1] != HRX_OP_INVOKE) hrx_exit(HRX_EXIT_PROTOCOL);
  if (hdr[0] != HRX_REQ_MAGIC) hrx_exit(HRX_EXIT_PROTOCOL);
  hrx_tag = hdr[8];
  const hrx_u32 op = hdr[1], sc = hdr[2], handle = hdr[3], lib = hdr[4], nbufs = hdr[5], nh = hdr[6], data_len = hdr[7];
  if (op == HRX_OP_QUIT) hrx_exit(0);
  if (op == HRX_OP_LOAD) {
    hrx_serve_load(sc, data_len);
    return;
  }
  if (op == HRX_OP_CLOSE) {
    hrx_answer(hrx_close(lib), lib);
    return;
  }
  if (op != HRX_OP_INVOKE) hrx_exit(HRX_EXIT_PROTOCOL);
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
  hrx_u32 next_file = 0;
  for (hrx_u32 i = 0; i < nh; i++) {
    const hrx_u32 passed = htab[i][3];
    if (passed > 1u || next_file + passed > nreceived) hrx_exit(HRX_EXIT_PROTOCOL);
    handles[i].fd = (int)htab[i][0];
    handles[i].offset = htab[i][1];
    handles[i].size = htab[i][2];
    handles[i].file = passed ? received[next_file++] : -1;
    pra[nbufs + i].dma.fd = (int)htab[i][0];
    pra[nbufs + i].dma.offset = htab[i][1];
  }
  nevents = 0;
  dropped = 0;
  nmarks = 0;
  marks_dropped = 0;
  hrx_u64 c0[3], c1[3];
  hrx_counts(c0);

  /* An unknown library id is the DSP framework's "invalid handle"; the bench never sends one. */
  const int rv = (lib == 0 || lib > HRX_MAX_LIBS || !libs[lib - 1].used) ? AEE_EINVHANDLE : libs[lib - 1].entry(handle, sc, pra);
  hrx_counts(c1);

  /* Live mappings keep their memory; the descriptors are not needed after the call. */
  hrx_close_received();
  nhandles = 0;
  if (dropped != 0) hrx_event(HRX_EV_DROPPED, 0, 0, 0, dropped);
  const hrx_u32 nin = (sc >> 16) & 0xffu;
  const hrx_u32 nout = nbufs > nin ? nbufs - nin : 0u;
  hrx_u32 out_len = 0;
  for (hrx_u32 j = 0; j < nout; j++) out_len += pad8(lens[nin + j]);
  hrx_u32 rsp[9] = {HRX_RSP_MAGIC, hrx_tag, (hrx_u32)rv, nout, nevents, nlive, out_len, nmarks, marks_dropped};
  hrx_write_all(rsp, sizeof rsp);
  hrx_write_all(lens + nin, nout * 4u);
  for (hrx_u32 j = 0; j < nout; j++) hrx_write_all(pra[nin + j].buf.pv, pad8(lens[nin + j]));
  hrx_write_all(events, nevents * (hrx_u32)sizeof(struct hrx_event));
  /* The invoke's counts, then each mark's counts since the invoke began. */
  hrx_u64 total[3];
  for (int i = 0; i < 3; i++) total[i] = c1[i] - c0[i];
  hrx_write_all(total, sizeof total);
  for (hrx_u32 m = 0; m < nmarks; m++)
    for (int i = 0; i < 3; i++) marks[m][i] -= c0[i];
  hrx_write_all(marks, nmarks * (hrx_u32)sizeof marks[0]);
}

void _start(void) {
  const hrx_u32 hello[4] = {HRX_HELLO_MAGIC, HRX_PROTOCOL, HRX_ARENA, HRX_MAX_EVENTS};
  hrx_write_all(hello, sizeof hello);
  for (;;) hrx_serve();
}
