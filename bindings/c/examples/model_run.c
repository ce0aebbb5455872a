/*
 * A C service running a model file with libhexrpc: open the file (from a path, mapped read-only,
 * or from bytes), describe its inputs and outputs, run it on zeros or on the inputs given, in one
 * FastRPC call a run, and print each output's first bytes. With no file on a bench build, the
 * bench's sample model (input x, outputs y = x + 3 and z = y + 5) is run and checked, then run
 * again with its input bound to a lease (read in place, nothing copied: what a service does with
 * a camera frame it imported with hexrpc_session_import), and a pipe is refused as an import.
 *
 * Build (see .ci/bindings): cc -std=c11 -Wall -Wextra -Werror -DHEXRPC_BENCH -Ibindings/c/include \
 *   bindings/c/examples/model_run.c -Ltarget/debug -lhexrpc -o model_run
 * Usage: model_run [--bench] [--outputs DIR] [MODEL.hxm [INPUT.bin...]]
 *   INPUT.bin: the input's raw bytes; --outputs DIR: output j's raw bytes to DIR/j.bin (by index:
 *   a name may hold '/').
 * On a device: model_run MODEL.hxm (a session of the board this device's model names).
 */
#define _POSIX_C_SOURCE 200809L
#include <hexrpc.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OK(call)                                                                            \
  do {                                                                                      \
    hexrpc_status st_ = (call);                                                             \
    if (st_ != HEXRPC_OK) {                                                                 \
      fprintf(stderr, "model_run: %s -> %s (%s)\n", #call, hexrpc_status_name(st_),         \
              hexrpc_last_error_message());                                                 \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = n > 0 ? malloc((size_t)n) : NULL;
  if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *len = b != NULL ? (size_t)n : 0;
  return b;
}

/* The sample model's outputs for the input k % 250 + base: y = x + 3, z = y + 5. */
static int check_sample(hexrpc_model *m, const hexrpc_output *outs, size_t no, unsigned base) {
  for (size_t j = 0; j < no; j++) {
    hexrpc_tensor t;
    OK(hexrpc_model_output(m, j, &t));
    const unsigned char *o = outs[j].data;
    unsigned add = j == 0 ? 3 : 8;
    for (size_t k = 0; k < t.bytes; k++)
      if (o[k] != (unsigned char)(k % 250 + base + add)) {
        fprintf(stderr, "FAIL output %s[%zu] = %u, expected %u\n", t.name, k, o[k], (unsigned)(unsigned char)(k % 250 + base + add));
        return 1;
      }
  }
  return 0;
}

#ifdef HEXRPC_BENCH
/* The sample model's input bound to a lease of the session: written there, read in place by the
 * kernels (data NULL, len 0 in the run's input), nothing copied; then unbound. On a device the
 * lease would be a frame another process shares: hexrpc_session_import(s, fd, len,
 * HEXRPC_IMPORT_READ_ONLY, &frame). */
static int run_bound(hexrpc_session *s, hexrpc_model *m, size_t input_len, hexrpc_output *outs, size_t no) {
  int failures = 0;
  hexrpc_lease *lease;
  void *mem;
  uint32_t writable = 0, bound = 0, was_bound = 0;
  OK(hexrpc_lease_alloc(s, input_len, &lease));
  OK(hexrpc_lease_writable(lease, &writable));
  OK(hexrpc_lease_memory(lease, &mem, NULL));
  for (size_t k = 0; k < input_len; k++) ((unsigned char *)mem)[k] = (unsigned char)(k % 250 + 1);
  OK(hexrpc_model_bind_input(m, 0, lease, 0));
  OK(hexrpc_model_input_bound(m, 0, &bound));
  OK(hexrpc_lease_free(lease)); /* the model holds the lease until the input is unbound */
  for (size_t j = 0; j < no; j++) memset(outs[j].data, 0, outs[j].len);
  hexrpc_input in[1] = {{NULL, 0}};
  hexrpc_model_report r;
  OK(hexrpc_model_run(m, in, 1, outs, no, 10000, &r));
  printf("bound input: %llu launches, %u input bytes copied\n", (unsigned long long)r.launches, r.input_bytes_copied);
  failures += check_sample(m, outs, no, 1);
  if (writable != 1 || bound != 1 || r.input_bytes_copied != 0) {
    fprintf(stderr, "FAIL writable %u, bound %u, %u input bytes copied\n", writable, bound, r.input_bytes_copied);
    failures++;
  }
  OK(hexrpc_model_unbind_input(m, 0, &was_bound));
  OK(hexrpc_model_input_bound(m, 0, &bound));
  if (was_bound != 1 || bound != 0) {
    fprintf(stderr, "FAIL unbind: was bound %u, bound %u\n", was_bound, bound);
    failures++;
  }
  /* Not a dma-buf: refused before any FastRPC call, the message says why. */
  int p[2];
  hexrpc_lease *frame = NULL;
  if (pipe(p) != 0) return failures + 1;
  hexrpc_status st = hexrpc_session_import(s, p[0], 4096, HEXRPC_IMPORT_READ_ONLY, &frame);
  printf("import of a pipe: %s (%s)\n", hexrpc_status_name(st), hexrpc_last_error_message());
  if (st != HEXRPC_ERR_INVALID || frame != NULL || strstr(hexrpc_last_error_message(), "not a dma-buf") == NULL) failures++;
  close(p[0]);
  close(p[1]);
  return failures;
}
#endif

int main(int argc, char **argv) {
  int bench = 0, first = 1;
  const char *out_dir = NULL;
  for (;;) {
    if (argc > first && strcmp(argv[first], "--bench") == 0) {
      bench = 1;
      first++;
    } else if (argc > first + 1 && strcmp(argv[first], "--outputs") == 0) {
      out_dir = argv[first + 1];
      first += 2;
    } else {
      break;
    }
  }
  const char *path = argc > first ? argv[first] : NULL;
#ifndef HEXRPC_BENCH
  (void)bench; /* --bench needs a bench build: a device build opens the device's session */
#endif
  hexrpc_session *s = NULL;
#ifdef HEXRPC_BENCH
  if (bench || path == NULL) OK(hexrpc_session_open_bench(0, &s));
#endif
  if (s == NULL) OK(hexrpc_session_open(NULL, &s));
  hexrpc_model *m = NULL;
  int sample = path == NULL;
  if (sample) {
#ifdef HEXRPC_BENCH
    const uint8_t *bytes;
    size_t len;
    OK(hexrpc_bench_sample_model(1000, &bytes, &len));
    OK(hexrpc_model_open(s, bytes, len, &m));
#else
    fprintf(stderr, "model_run: MODEL.hxm is needed on a device build\n");
    return 2;
#endif
  } else {
    OK(hexrpc_model_open_path(s, path, &m));
  }
  size_t ni, no;
  OK(hexrpc_model_io_count(m, &ni, &no));
  hexrpc_input ins[64];
  hexrpc_output outs[64];
  unsigned char *bufs[128];
  size_t nbufs = 0;
  for (size_t i = 0; i < ni; i++) {
    hexrpc_tensor t;
    OK(hexrpc_model_input(m, i, &t));
    unsigned char *b = calloc(1, (size_t)t.bytes + 1);
    const char *file = argc > first + 1 + (int)i ? argv[first + 1 + (int)i] : NULL;
    if (file != NULL) {
      size_t len;
      unsigned char *data = read_file(file, &len);
      if (data == NULL || len != t.bytes) {
        fprintf(stderr, "model_run: input %s: %s holds %zu bytes, the input needs %llu\n", t.name, file, len,
                (unsigned long long)t.bytes);
        return 2;
      }
      memcpy(b, data, len);
      free(data);
    } else if (sample) {
      for (size_t k = 0; k < t.bytes; k++) b[k] = (unsigned char)(k % 250);
    }
    printf("input  %s: dtype %u, rank %u, %llu bytes\n", t.name, t.dtype, t.rank, (unsigned long long)t.bytes);
    ins[i] = (hexrpc_input){b, (size_t)t.bytes};
    bufs[nbufs++] = b;
  }
  for (size_t j = 0; j < no; j++) {
    hexrpc_tensor t;
    OK(hexrpc_model_output(m, j, &t));
    unsigned char *b = calloc(1, (size_t)t.bytes + 1);
    outs[j] = (hexrpc_output){b, (size_t)t.bytes};
    bufs[nbufs++] = b;
  }
  hexrpc_model_report r;
  OK(hexrpc_model_run(m, ins, ni, outs, no, 10000, &r));
  printf("ran %llu launches in %u FastRPC call(s), %u input bytes copied\n", (unsigned long long)r.launches, r.calls,
         r.input_bytes_copied);
  int failures = 0;
  for (size_t j = 0; j < no; j++) {
    hexrpc_tensor t;
    OK(hexrpc_model_output(m, j, &t));
    const unsigned char *o = outs[j].data;
    printf("output %s:", t.name);
    for (size_t k = 0; k < 8 && k < t.bytes; k++) printf(" %u", o[k]);
    printf("%s\n", t.bytes > 8 ? " ..." : "");
    if (out_dir != NULL) {
      char file[4096];
      snprintf(file, sizeof file, "%s/%zu.bin", out_dir, j);
      FILE *f = fopen(file, "wb");
      if (f == NULL || fwrite(o, 1, (size_t)t.bytes, f) != (size_t)t.bytes || fclose(f) != 0) {
        fprintf(stderr, "model_run: cannot write %s\n", file);
        return 1;
      }
    }
  }
  if (sample) {
    failures += check_sample(m, outs, no, 0);
    if (r.calls != 1 || r.input_bytes_copied != ins[0].len) {
      fprintf(stderr, "FAIL %u calls for one run, %u input bytes copied\n", r.calls, r.input_bytes_copied);
      failures++;
    }
#ifdef HEXRPC_BENCH
    failures += run_bound(s, m, ins[0].len, outs, no);
#endif
  }
  OK(hexrpc_model_close(m));
  OK(hexrpc_session_close(s));
  for (size_t k = 0; k < nbufs; k++) free(bufs[k]);
  if (failures == 0 && sample) printf("model_run: the sample model's outputs are right\n");
  return failures == 0 ? 0 : 1;
}
