/*
 * c_launch_overhead_ns: what one hexrpc_launch costs through the C ABI when the ioctl returns at
 * once (a bench session opened with HEXRPC_BENCH_RETURNING_LAUNCHES): handle lookups, argument
 * checks, packing 3 views + 2 scalars (v2) and one INVOKE_ATTRS through the seam. Median over 30
 * batches of 10,000 launches of the thread's CPU time per launch (CLOCK_THREAD_CPUTIME_ID: time
 * descheduled on a busy machine does not count; the wall-clock median is printed beside it).
 * Host time on this machine; not a device figure.
 * Prints one JSON object. Run by bindings/bench.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <hexrpc.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define OK(call)                                                                                 \
  do {                                                                                           \
    hexrpc_status st_ = (call);                                                                  \
    if (st_ != HEXRPC_OK) {                                                                      \
      fprintf(stderr, "%s -> %s (%s)\n", #call, hexrpc_status_name(st_), hexrpc_last_error_message()); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

static double now_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(void) {
  /* A 3-buffer, 2-scalar kernel, as launch_overhead_ns measures: the bench DSP never sees it
   * (launches return at once), so any image will do; scale_f32's is used. */
  hexrpc_session *s;
  OK(hexrpc_session_open_bench(HEXRPC_BENCH_RETURNING_LAUNCHES, &s));
  const uint8_t *image;
  size_t len;
  OK(hexrpc_bench_model_image("scale_f32", &image, &len));
  hexrpc_library *lib;
  OK(hexrpc_library_open(s, "overhead", image, len, "buf,buf,buf,i32,f32", HEXRPC_ABI_V2, &lib));
  hexrpc_lease *lease;
  OK(hexrpc_lease_alloc(s, 65536, &lease));
  hexrpc_view views[3] = {{lease, 0, 4096}, {lease, 4096, 4096}, {lease, 8192, 4096}};
  hexrpc_scalar scalars[2] = {hexrpc_scalar_i32(3), hexrpc_scalar_f32(0.5f)};
  for (int i = 0; i < 10000; i++) OK(hexrpc_launch(lib, views, 3, scalars, 2, 0, NULL));
  enum { BATCHES = 30, BATCH = 10000 };
  double cpu[BATCHES], wall[BATCHES];
  for (int b = 0; b < BATCHES; b++) {
    double c = now_ns(CLOCK_THREAD_CPUTIME_ID), w = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < BATCH; i++) OK(hexrpc_launch(lib, views, 3, scalars, 2, 0, NULL));
    cpu[b] = (now_ns(CLOCK_THREAD_CPUTIME_ID) - c) / BATCH;
    wall[b] = (now_ns(CLOCK_MONOTONIC) - w) / BATCH;
  }
  qsort(cpu, BATCHES, sizeof cpu[0], cmp);
  qsort(wall, BATCHES, sizeof wall[0], cmp);
  printf("{\"c_launch_overhead_ns\": %.1f, \"c_launch_overhead_wall_ns\": %.1f, \"launches\": %d}\n", cpu[BATCHES / 2],
         wall[BATCHES / 2], BATCHES * BATCH);
  OK(hexrpc_session_close(s));
  return 0;
}
