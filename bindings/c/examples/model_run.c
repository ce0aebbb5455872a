/*
 * A C service running a model file with libhexrpc: open the file (from a path, mapped read-only,
 * or from bytes), describe its inputs and outputs, run it on zeros or on the inputs given, in one
 * FastRPC call a run, and print each output's first bytes. With no file on a bench build, the
 * bench's sample model (input x, outputs y = x + 3 and z = y + 5) is run and checked.
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
  printf("ran %llu launches in %u FastRPC call(s)\n", (unsigned long long)r.launches, r.calls);
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
    if (sample) {
      /* y = x + 3, z = y + 5 */
      unsigned add = j == 0 ? 3 : 8;
      for (size_t k = 0; k < t.bytes; k++)
        if (o[k] != (unsigned char)(k % 250 + add)) {
          fprintf(stderr, "FAIL output %s[%zu] = %u, expected %u\n", t.name, k, o[k], (unsigned)(k % 250 + add));
          failures++;
          break;
        }
    }
  }
  if (sample && r.calls != 1) {
    fprintf(stderr, "FAIL %u calls for one run\n", r.calls);
    failures++;
  }
  OK(hexrpc_model_close(m));
  OK(hexrpc_session_close(s));
  for (size_t k = 0; k < nbufs; k++) free(bufs[k]);
  if (failures == 0 && sample) printf("model_run: the sample model's outputs are right\n");
  return failures == 0 ? 0 : 1;
}
