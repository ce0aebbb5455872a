/* Host harness for a generated launch entry: presents the DSP's 32-bit argument view to an
 * entry compiled by the host `cc`, calls it once, and prints what happened.
 *
 * How the 32-bit view is presented. On the DSP, `remote_arg` is 8 bytes (32-bit pv + len, or
 * fd + offset) and `pv` holds a 32-bit DSP address. The generated C never depends on that size:
 * it indexes `pra[k]` and names fields. So the harness compiles the *same* union text (16 bytes
 * on a 64-bit host) and fills it from a description of the 32-bit records: every `pv` is a 32-bit
 * address into an "arena" (the DSP-side memory that holds the copied in/out buffers), which the
 * harness translates to `arena + pv`; `len`, `fd` and `offset` are copied as they are. The bytes
 * behind each pointer are exactly the packer's bytes, so the entry reads the same fields at the
 * same byte offsets as on the DSP.
 *
 * Input (stdin, whitespace-separated):
 *   sc <u32> handle <u64> arena <nbytes> <hex | ->
 *   nargs <k>, then k records: buf <pv32> <len> | dma <fd> <offset>
 *   any number of: file <fd> <size> | failmap <ordinal>
 *   end
 * Output: the shim's events, then "rc <n>", "pra2 <hex of pra[2]'s bytes>", "live <maps>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch_shim.h"

typedef union {
  struct { void *pv; unsigned int len; } buf;
  struct { int fd; unsigned int offset; } dma;
} remote_arg;

int entry(unsigned long long handle, unsigned int sc, remote_arg *pra);

static void die(const char *what) {
  fprintf(stderr, "harness: bad input at %s\n", what);
  exit(2);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int main(void) {
  char word[32];
  unsigned int sc = 0;
  unsigned long long handle = 0;
  unsigned char *arena = NULL;
  unsigned long arena_len = 0;
  remote_arg pra[32];
  unsigned int pv32[32];
  int kinds[32];
  int nargs = 0;
  memset(pra, 0, sizeof pra);
  while (scanf("%31s", word) == 1) {
    if (strcmp(word, "end") == 0) break;
    if (strcmp(word, "sc") == 0) {
      if (scanf("%u", &sc) != 1) die("sc");
    } else if (strcmp(word, "handle") == 0) {
      if (scanf("%llu", &handle) != 1) die("handle");
    } else if (strcmp(word, "arena") == 0) {
      if (scanf("%lu", &arena_len) != 1) die("arena length");
      arena = calloc(arena_len + 1, 1);
      if (arena == NULL) die("arena allocation");
      int c;
      while ((c = getchar()) == ' ') {
      }
      if (c == '-') continue;
      ungetc(c, stdin);
      for (unsigned long i = 0; i < arena_len; i++) {
        int hi = hexval(getchar()), lo = hexval(getchar());
        if (hi < 0 || lo < 0) die("arena bytes");
        arena[i] = (unsigned char)(hi * 16 + lo);
      }
    } else if (strcmp(word, "nargs") == 0) {
      if (scanf("%d", &nargs) != 1 || nargs < 0 || nargs > 32) die("nargs");
      for (int k = 0; k < nargs; k++) {
        unsigned int a = 0, b = 0;
        if (scanf("%31s %u %u", word, &a, &b) != 3) die("arg");
        if (strcmp(word, "buf") == 0) {
          if (arena == NULL || (unsigned long)a + b > arena_len) die("buf outside the arena");
          kinds[k] = 0;
          pv32[k] = a;
          pra[k].buf.pv = arena + a; /* 32-bit DSP address -> host pointer */
          pra[k].buf.len = b;
        } else if (strcmp(word, "dma") == 0) {
          kinds[k] = 1;
          pra[k].dma.fd = (int)a;
          pra[k].dma.offset = b;
        } else {
          die("arg kind");
        }
      }
    } else if (strcmp(word, "file") == 0) {
      int fd;
      unsigned long long size;
      if (scanf("%d %llu", &fd, &size) != 2) die("file");
      hrx_shim_file(fd, size);
    } else if (strcmp(word, "failmap") == 0) {
      int ordinal;
      if (scanf("%d", &ordinal) != 1) die("failmap");
      hrx_shim_fail_map(ordinal);
    } else {
      die(word);
    }
  }
  int rc = entry(handle, sc, pra);
  printf("rc %d\n", rc);
  printf("pra2 ");
  if (nargs > 2 && kinds[2] == 0) {
    for (unsigned int i = 0; i < pra[2].buf.len; i++) printf("%02x", arena[pv32[2] + i]);
  }
  printf("\nlive %d\n", hrx_shim_live());
  free(arena);
  return 0;
}
