/*
 * A C service's use of libhexrpc on the bench: a session, one lease, launches on views at
 * non-zero offsets with outputs checked, a library opened from a file, refusals, misused
 * handles, a DSP restart and recovery, deadlines, and closing. With --executor it also runs a
 * real Hexagon kernel under qemu-hexagon (skipped, with the reason, when the tools are absent).
 *
 * Build (see .ci/bindings): cc -std=c11 -Wall -Wextra -Werror -DHEXRPC_BENCH -DHEXRPC_BUILD_LIB -Ibindings/c/include \
 *   bindings/c/examples/launch.c -Ltarget/debug -lhexrpc -o launch
 * On a device: hexrpc_session_open("comma-three", &s) and the bytes of a `hexrpc build-lib` .so.
 */
#define _POSIX_C_SOURCE 200809L
#include <hexrpc.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;

/* hexrpc's log records, counted (the callback may run on any thread). */
#include <stdatomic.h>
static atomic_int warnings_seen;
static atomic_int restart_mentions;
static void on_log(void *user, uint32_t level, const char *target, const char *message) {
  (void)user;
  (void)target;
  if (level <= HEXRPC_LOG_WARN) atomic_fetch_add(&warnings_seen, 1);
  if (strstr(message, "restart") != NULL) atomic_fetch_add(&restart_mentions, 1);
}

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      failures++;                                         \
    }                                                     \
  } while (0)

#define OK(call)                                                                            \
  do {                                                                                      \
    hexrpc_status st_ = (call);                                                             \
    if (st_ != HEXRPC_OK) {                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call,             \
              hexrpc_status_name(st_), hexrpc_last_error_message());                        \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define EXPECT(call, want)                                                                       \
  do {                                                                                           \
    hexrpc_status st_ = (call);                                                                  \
    CHECK(st_ == (want), "%s -> %s, expected %s (%s)", #call, hexrpc_status_name(st_),           \
          hexrpc_status_name(want), hexrpc_last_error_message());                               \
  } while (0)

static void scale_launches(hexrpc_session *s) {
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("scale_f32", &image, &image_len));
  hexrpc_library *scale;
  OK(hexrpc_library_open(s, "scale", image, image_len, "buf,buf,f32", HEXRPC_ABI_V2, &scale));

  hexrpc_lease *lease;
  OK(hexrpc_lease_alloc(s, 64 * 1024, &lease));
  void *mem;
  size_t len;
  OK(hexrpc_lease_memory(lease, &mem, &len));
  CHECK(len == 64 * 1024, "lease length %zu", len);

  /* x: 256 floats at offset 4100, y: 256 floats at offset 32784 (both non-zero). */
  enum { N = 256 };
  const size_t x_off = 4100, y_off = 32 * 1024 + 16;
  float *x = (float *)((char *)mem + x_off);
  float *y = (float *)((char *)mem + y_off);
  for (int i = 0; i < N; i++) x[i] = (float)i - 100.0f;
  hexrpc_view views[2] = {{lease, x_off, N * sizeof(float)}, {lease, y_off, N * sizeof(float)}};
  for (int round = 0; round < 10; round++) {
    float a = 0.5f + (float)round;
    hexrpc_scalar scalars[1] = {hexrpc_scalar_f32(a)};
    uint64_t us = 0;
    OK(hexrpc_launch(scale, views, 2, scalars, 1, 0, &us));
    for (int i = 0; i < N; i++) CHECK(y[i] == a * x[i], "y[%d] = %f, expected %f", i, y[i], a * x[i]);
  }

  /* Refusals: nothing is sent. */
  hexrpc_scalar wrong[1] = {hexrpc_scalar_u32(2)};
  EXPECT(hexrpc_launch(scale, views, 2, wrong, 1, 0, NULL), HEXRPC_ERR_REFUSED);
  CHECK(strstr(hexrpc_last_error_message(), "launch-pack") != NULL, "message: %s", hexrpc_last_error_message());
  CHECK(strcmp(hexrpc_last_error_stage(), "launch-pack") == 0, "stage: %s", hexrpc_last_error_stage());
  hexrpc_view outside[2] = {{lease, 60 * 1024, 8192}, {lease, 0, 16}};
  hexrpc_scalar two[1] = {hexrpc_scalar_f32(2.0f)};
  EXPECT(hexrpc_launch(scale, outside, 2, two, 1, 0, NULL), HEXRPC_ERR_INVALID);
  EXPECT(hexrpc_launch(scale, views, 1, two, 1, 0, NULL), HEXRPC_ERR_REFUSED);
  hexrpc_library *v1;
  OK(hexrpc_library_open(s, "scale-v1", image, image_len, "buf,buf,f32", HEXRPC_ABI_V1, &v1));
  EXPECT(hexrpc_launch(v1, views, 2, two, 1, 0, NULL), HEXRPC_ERR_REFUSED);
  CHECK(strstr(hexrpc_last_error_message(), "v2") != NULL, "v1 message: %s", hexrpc_last_error_message());
  OK(hexrpc_library_close(v1));

  /* A DSP restart: the launch reports it, recovery rebuilds, launches work again; hexrpc's
     warnings about it reach the log callback. */
  OK(hexrpc_set_log_callback(on_log, NULL, HEXRPC_LOG_INFO));
  EXPECT(hexrpc_set_log_callback(on_log, NULL, 9), HEXRPC_ERR_INVALID);
  OK(hexrpc_bench_restart_dsp(s));
  EXPECT(hexrpc_launch(scale, views, 2, two, 1, 0, NULL), HEXRPC_ERR_RECOVERABLE);
  uint32_t healthy = 1;
  OK(hexrpc_session_health(s, &healthy));
  CHECK(healthy == 0, "healthy after a restart");
  OK(hexrpc_session_recover(s));
  OK(hexrpc_session_health(s, &healthy));
  CHECK(healthy == 1, "not healthy after recovery");
  OK(hexrpc_launch(scale, views, 2, two, 1, 0, NULL));
  CHECK(y[7] == 2.0f * x[7], "after recovery y[7] = %f", y[7]);
  CHECK(atomic_load(&warnings_seen) > 0 && atomic_load(&restart_mentions) > 0, "log callback: %d warnings, %d about the restart",
        atomic_load(&warnings_seen), atomic_load(&restart_mentions));
  OK(hexrpc_set_log_callback(NULL, NULL, HEXRPC_LOG_OFF));

  /* Misuse: closed and freed handles, NULL, kinds mixed up. */
  OK(hexrpc_library_close(scale));
  EXPECT(hexrpc_library_close(scale), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_launch(scale, views, 2, two, 1, 0, NULL), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_launch(NULL, views, 2, two, 1, 0, NULL), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_launch((hexrpc_library *)lease, views, 2, two, 1, 0, NULL), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_lease_free((hexrpc_lease *)(uintptr_t)0x12345678), HEXRPC_ERR_HANDLE);
  OK(hexrpc_lease_free(lease));
  EXPECT(hexrpc_lease_free(lease), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_lease_memory(lease, &mem, &len), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_library_open(s, "x", NULL, 0, "buf", HEXRPC_ABI_V2, &scale), HEXRPC_ERR_NULL);
  EXPECT(hexrpc_library_open(s, "x", image, image_len, "buf,nope", HEXRPC_ABI_V2, &scale), HEXRPC_ERR_INVALID);
  EXPECT(hexrpc_library_open(s, "x", image, image_len, "buf,buf,f32", 7, &scale), HEXRPC_ERR_INVALID);
  EXPECT(hexrpc_library_open(s, "x", image, image_len, NULL, HEXRPC_ABI_RECORDED, &scale), HEXRPC_ERR_INVALID);
  CHECK(strstr(hexrpc_last_error_message(), "build record") != NULL, "no record: %s", hexrpc_last_error_message());
  printf("scale_f32: 10 launches at offsets %zu and %zu checked; refusals, misuse and recovery as expected\n", x_off, y_off);
}

static void path_and_deadline(hexrpc_session *s) {
  /* A library opened from a file. */
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("add_u8", &image, &image_len));
  char path[] = "/tmp/hexrpc-add_u8-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  FILE *f = fdopen(fd, "wb");
  CHECK(f != NULL && fwrite(image, 1, image_len, f) == image_len, "write image");
  fclose(f);
  hexrpc_library *add;
  OK(hexrpc_library_open_path(s, path, "buf,buf,u32", HEXRPC_ABI_V2, &add));
  remove(path);

  hexrpc_lease *in, *out;
  OK(hexrpc_lease_alloc(s, 4096, &in));
  OK(hexrpc_lease_alloc(s, 8192, &out));
  uint8_t *pin, *pout;
  OK(hexrpc_lease_memory(in, (void **)&pin, NULL));
  OK(hexrpc_lease_memory(out, (void **)&pout, NULL));
  for (int i = 0; i < 100; i++) pin[123 + i] = (uint8_t)(i * 3);
  hexrpc_view views[2] = {{in, 123, 100}, {out, 5000, 100}};
  hexrpc_scalar k[1] = {hexrpc_scalar_u32(7)};
  OK(hexrpc_launch(add, views, 2, k, 1, 1000, NULL));
  for (int i = 0; i < 100; i++) CHECK(pout[5000 + i] == (uint8_t)(i * 3 + 7), "out[%d] = %u", i, pout[5000 + i]);

  /* A deadline that passes: abandoned, the session needs recovery. */
  OK(hexrpc_bench_model_image("sleep_ms", &image, &image_len));
  hexrpc_library *sleepy;
  OK(hexrpc_library_open(s, "sleep", image, image_len, "buf,u32", HEXRPC_ABI_V2, &sleepy));
  hexrpc_view one[1] = {{out, 16, 4}};
  hexrpc_scalar ms[1] = {hexrpc_scalar_u32(400)};
  EXPECT(hexrpc_launch(sleepy, one, 1, ms, 1, 50, NULL), HEXRPC_ERR_RECOVERABLE);
  CHECK(strstr(hexrpc_last_error_message(), "deadline") != NULL, "deadline message: %s", hexrpc_last_error_message());
  OK(hexrpc_session_recover(s));
  ms[0] = hexrpc_scalar_u32(1);
  OK(hexrpc_launch(sleepy, one, 1, ms, 1, 5000, NULL));
  OK(hexrpc_launch(add, views, 2, k, 1, 0, NULL));
  printf("add_u8 from a file at offsets 123 and 5000 checked; a passed deadline recovered\n");
  /* Leases and libraries left open: closing the session releases them. */
}

static void batches(hexrpc_session *s) {
  /* A library with a one-kernel table (add_u8): three launches in one FastRPC call. */
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("add_u8_table", &image, &image_len));
  hexrpc_library *lib;
  OK(hexrpc_library_open(s, "add-table", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &lib));
  const char *kernels[1] = {"buf,buf,u32"};
  hexrpc_batch *b;
  const char *wrong[1] = {"buf,u32"};
  EXPECT(hexrpc_batch_new(lib, wrong, 1, &b), HEXRPC_ERR_INVALID); /* not the library's kernel 0 */
  EXPECT(hexrpc_batch_new(lib, kernels, 0, &b), HEXRPC_ERR_INVALID);
  OK(hexrpc_batch_new(lib, kernels, 1, &b));
  hexrpc_lease *in, *out, *other;
  OK(hexrpc_lease_alloc(s, 4096, &in));
  OK(hexrpc_lease_alloc(s, 4096, &out));
  OK(hexrpc_lease_alloc(s, 4096, &other));
  uint8_t *pin, *pout, *pother;
  OK(hexrpc_lease_memory(in, (void **)&pin, NULL));
  OK(hexrpc_lease_memory(out, (void **)&pout, NULL));
  OK(hexrpc_lease_memory(other, (void **)&pother, NULL));
  for (int i = 0; i < 256; i++) pin[i] = (uint8_t)i;
  size_t rec[3];
  for (int r = 0; r < 3; r++) {
    hexrpc_view v[2] = {{in, (size_t)(64 * r), 64}, {out, (size_t)(1000 + 64 * r), 64}};
    hexrpc_scalar k[1] = {hexrpc_scalar_u32((uint32_t)(r + 1))};
    OK(hexrpc_batch_push(b, 0, v, 2, k, 1, &rec[r]));
    CHECK(rec[r] == (size_t)r, "record %zu", rec[r]);
  }
  hexrpc_view v0[2] = {{in, 0, 64}, {out, 0, 64}};
  hexrpc_scalar k1[1] = {hexrpc_scalar_u32(1)};
  EXPECT(hexrpc_batch_push(b, 1, v0, 2, k1, 1, NULL), HEXRPC_ERR_REFUSED); /* no kernel 1 */
  hexrpc_scalar bad[1] = {hexrpc_scalar_f32(1.0f)};
  EXPECT(hexrpc_batch_push(b, 0, v0, 2, bad, 1, NULL), HEXRPC_ERR_REFUSED); /* not a u32 */
  uint64_t us = 0;
  OK(hexrpc_batch_run(b, 0, &us));
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < 64; i++)
      CHECK(pout[1000 + 64 * r + i] == (uint8_t)(64 * r + i + r + 1), "batch out r%d[%d] = %u", r, i, pout[1000 + 64 * r + i]);
  /* In place: record 1 adds 10 and writes to another lease. */
  OK(hexrpc_batch_set_scalar(b, rec[1], 0, hexrpc_scalar_u32(10)));
  EXPECT(hexrpc_batch_set_scalar(b, rec[1], 0, hexrpc_scalar_i32(10)), HEXRPC_ERR_REFUSED);
  hexrpc_view to_other = {other, 512, 64};
  OK(hexrpc_batch_set_view(b, rec[1], 1, to_other));
  EXPECT(hexrpc_batch_set_view(b, 9, 1, to_other), HEXRPC_ERR_REFUSED);
  hexrpc_view outside = {other, 4090, 64};
  EXPECT(hexrpc_batch_set_view(b, rec[1], 1, outside), HEXRPC_ERR_INVALID);
  OK(hexrpc_batch_run(b, 1000, NULL));
  for (int i = 0; i < 64; i++) CHECK(pother[512 + i] == (uint8_t)(64 + i + 10), "set_view out[%d] = %u", i, pother[512 + i]);
  OK(hexrpc_batch_free(b));
  EXPECT(hexrpc_batch_run(b, 0, NULL), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_batch_free(b), HEXRPC_ERR_HANDLE);
  OK(hexrpc_library_close(lib));
  printf("batch: 3 launches in one call, a scalar and a view changed in place, refusals as expected\n");
}

/* The largest batch (256 records on 15 leases) pushed and run by a thread whose whole stack is
 * HEXRPC_BATCH_STACK_BYTES: the records are packed on the heap, never on the caller's stack. */
struct small_stack_job {
  hexrpc_library *lib;
  hexrpc_lease *in[14];
  hexrpc_lease *out;
  int failed;
};

static void *small_stack_batch(void *arg) {
  struct small_stack_job *job = arg;
  const char *kernels[1] = {"buf,buf,u32"};
  hexrpc_batch *b;
  if (hexrpc_batch_new(job->lib, kernels, 1, &b) != HEXRPC_OK) {
    job->failed = 1;
    return NULL;
  }
  enum { PER = 4096 / 256 };
  for (size_t r = 0; r < 256; r++) {
    hexrpc_view v[2] = {{job->in[r % 14], PER * (r / 14), PER}, {job->out, PER * r, PER}};
    hexrpc_scalar k[1] = {hexrpc_scalar_u32((uint32_t)(1 + r % 3))};
    if (hexrpc_batch_push(b, 0, v, 2, k, 1, NULL) != HEXRPC_OK) job->failed = 2;
  }
  hexrpc_view v[2] = {{job->in[0], 0, PER}, {job->out, 0, PER}};
  hexrpc_scalar k[1] = {hexrpc_scalar_u32(1)};
  if (hexrpc_batch_push(b, 0, v, 2, k, 1, NULL) != HEXRPC_ERR_REFUSED) job->failed = 3; /* 257th */
  if (hexrpc_batch_run(b, 0, NULL) != HEXRPC_OK) job->failed = 4;
  if (hexrpc_batch_set_scalar(b, 0, 0, hexrpc_scalar_u32(7)) != HEXRPC_OK) job->failed = 5;
  if (hexrpc_batch_run(b, 5000, NULL) != HEXRPC_OK) job->failed = 6;
  if (hexrpc_batch_free(b) != HEXRPC_OK) job->failed = 7;
  return NULL;
}

static void small_stack(hexrpc_session *s) {
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("add_u8_table", &image, &image_len));
  struct small_stack_job job = {0};
  OK(hexrpc_library_open(s, "add-table", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &job.lib));
  for (int i = 0; i < 14; i++) {
    uint8_t *p;
    OK(hexrpc_lease_alloc(s, 4096, &job.in[i]));
    OK(hexrpc_lease_memory(job.in[i], (void **)&p, NULL));
    memset(p, 10 * i, 4096);
  }
  uint8_t *pout;
  OK(hexrpc_lease_alloc(s, 4096, &job.out));
  OK(hexrpc_lease_memory(job.out, (void **)&pout, NULL));
  size_t stack = HEXRPC_BATCH_STACK_BYTES;
  if (stack < (size_t)PTHREAD_STACK_MIN) { /* aarch64 glibc's minimum is 128 KiB */
    printf("small stack: %zu bytes is below this libc's PTHREAD_STACK_MIN; using %zu\n", stack, (size_t)PTHREAD_STACK_MIN);
    stack = PTHREAD_STACK_MIN;
  }
  pthread_attr_t attr;
  pthread_t t;
  CHECK(pthread_attr_init(&attr) == 0, "pthread_attr_init");
  CHECK(pthread_attr_setstacksize(&attr, stack) == 0, "pthread_attr_setstacksize(%zu)", stack);
  CHECK(pthread_create(&t, &attr, small_stack_batch, &job) == 0, "pthread_create");
  pthread_join(t, NULL);
  pthread_attr_destroy(&attr);
  CHECK(job.failed == 0, "the small-stack thread's batch failed at step %d: %s", job.failed, hexrpc_last_error_message());
  for (int r = 0; r < 256; r++) {
    uint8_t want = (uint8_t)(10 * (r % 14) + (r == 0 ? 7 : 1 + r % 3));
    for (int i = 0; i < 16; i++) CHECK(pout[16 * r + i] == want, "small-stack out r%d[%d] = %u, want %u", r, i, pout[16 * r + i], want);
  }
  for (int i = 0; i < 14; i++) OK(hexrpc_lease_free(job.in[i]));
  OK(hexrpc_lease_free(job.out));
  OK(hexrpc_library_close(job.lib));
  printf("small stack: 256 records on 15 leases pushed and run twice by a thread with a %zu-byte stack\n", stack);
}

/* fork(): the child's copy of the session is refused (HEXRPC_ERR_FORKED) before anything is
 * sent, closing it there sends nothing, and a session of the child's own works; the parent's
 * goes on. */
static void forked(hexrpc_session *s) {
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("add_u8", &image, &image_len));
  hexrpc_library *lib;
  OK(hexrpc_library_open(s, "add-fork", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &lib));
  hexrpc_lease *l;
  uint8_t *p;
  OK(hexrpc_lease_alloc(s, 4096, &l));
  OK(hexrpc_lease_memory(l, (void **)&p, NULL));
  memset(p, 40, 16);
  hexrpc_view v[2] = {{l, 0, 16}, {l, 2048, 16}};
  hexrpc_scalar k[1] = {hexrpc_scalar_u32(2)};
  OK(hexrpc_launch(lib, v, 2, k, 1, 0, NULL));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a hang ends the child */
    int bad = 0;
    hexrpc_lease *l2;
    if (hexrpc_launch(lib, v, 2, k, 1, 0, NULL) != HEXRPC_ERR_FORKED) bad |= 1;
    if (strstr(hexrpc_last_error_message(), "open a new session in the child") == NULL) bad |= 2;
    if (hexrpc_lease_alloc(s, 4096, &l2) != HEXRPC_ERR_FORKED) bad |= 4;
    if (hexrpc_library_close(lib) != HEXRPC_OK || hexrpc_lease_free(l) != HEXRPC_OK) bad |= 8;
    hexrpc_session *mine;
    if (hexrpc_session_open_bench(0, &mine) != HEXRPC_OK) {
      bad |= 16;
    } else {
      hexrpc_library *lib2;
      uint8_t *q;
      if (hexrpc_library_open(mine, "add", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &lib2) != HEXRPC_OK ||
          hexrpc_lease_alloc(mine, 4096, &l2) != HEXRPC_OK || hexrpc_lease_memory(l2, (void **)&q, NULL) != HEXRPC_OK) {
        bad |= 32;
      } else {
        memset(q, 40, 16);
        hexrpc_view w[2] = {{l2, 0, 16}, {l2, 2048, 16}};
        hexrpc_scalar k3[1] = {hexrpc_scalar_u32(3)};
        if (hexrpc_launch(lib2, w, 2, k3, 1, 0, NULL) != HEXRPC_OK || q[2048] != 43) bad |= 64;
      }
      if (hexrpc_session_close(mine) != HEXRPC_OK) bad |= 128;
    }
    _exit(bad);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child's checks: %s %d", WIFEXITED(status) ? "exit" : "signal",
        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  k[0] = hexrpc_scalar_u32(5);
  OK(hexrpc_launch(lib, v, 2, k, 1, 0, NULL));
  CHECK(p[2048] == 45, "the parent's launch after the fork: %u", p[2048]);
  OK(hexrpc_library_close(lib));
  OK(hexrpc_lease_free(l));
  printf("fork: the child's copy of the session refused (HEXRPC_ERR_FORKED), a session of its own worked, the parent's goes on\n");
}

/* An arena: one lease carved into sub-allocations, each a hexrpc_lease of its own size; a batch
 * counts every buffer of one arena as one of its 15 leases. */
static void arenas(hexrpc_session *s) {
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_model_image("add_u8_table", &image, &image_len));
  hexrpc_library *lib;
  OK(hexrpc_library_open(s, "arena-table", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &lib));
  const char *kernels[1] = {"buf,buf,u32"};
  hexrpc_batch *b;
  OK(hexrpc_batch_new(lib, kernels, 1, &b));
  hexrpc_arena *arena;
  OK(hexrpc_arena_new(s, 1 << 20, &arena));
  enum { BUFS = 32 }; /* more than a batch's 15 distinct leases */
  hexrpc_lease *buf[BUFS];
  uint8_t *mem[BUFS];
  for (int i = 0; i < BUFS; i++) {
    size_t len;
    OK(hexrpc_arena_alloc(arena, 1000 + (size_t)i, 0, &buf[i]));
    OK(hexrpc_lease_memory(buf[i], (void **)&mem[i], &len));
    CHECK(len == 1000 + (size_t)i && (uintptr_t)mem[i] % HEXRPC_ARENA_ALIGN == 0, "sub-allocation %d: %zu bytes at %p", i, len, (void *)mem[i]);
    memset(mem[i], i, len);
  }
  for (int i = 0; i + 1 < BUFS; i += 2) { /* buf[i + 1][8..72] = buf[i][0..64] + i */
    hexrpc_view v[2] = {{buf[i], 0, 64}, {buf[i + 1], 8, 64}};
    hexrpc_scalar k[1] = {hexrpc_scalar_u32((uint32_t)i)};
    OK(hexrpc_batch_push(b, 0, v, 2, k, 1, NULL));
  }
  OK(hexrpc_batch_run(b, 0, NULL)); /* 16 launches, 32 buffers, one lease: one call */
  for (int i = 0; i + 1 < BUFS; i += 2)
    for (int j = 0; j < 64; j++) CHECK(mem[i + 1][8 + j] == (uint8_t)(2 * i), "arena out %d[%d] = %u", i + 1, j, mem[i + 1][8 + j]);
  hexrpc_arena_stats st;
  OK(hexrpc_arena_get_stats(arena, &st));
  CHECK(st.live == BUFS && st.capacity == 1 << 20, "arena: %u live of %llu bytes", st.live, (unsigned long long)st.capacity);
  hexrpc_lease *big;
  EXPECT(hexrpc_arena_alloc(arena, 2 << 20, 0, &big), HEXRPC_ERR_INVALID); /* no free range fits */
  CHECK(strstr(hexrpc_last_error_message(), "largest free range") != NULL, "%s", hexrpc_last_error_message());
  OK(hexrpc_batch_free(b));
  for (int i = 0; i < BUFS; i++) OK(hexrpc_lease_free(buf[i]));
  OK(hexrpc_arena_get_stats(arena, &st));
  CHECK(st.live == 0 && st.free == st.capacity, "arena after the frees: %u live, %llu free", st.live, (unsigned long long)st.free);
  OK(hexrpc_arena_free(arena));
  OK(hexrpc_library_close(lib));
  printf("arena: %d sub-allocations of one lease in one batch call, checked and given back\n", BUFS);
}

static int executor(void) {
  hexrpc_session *s;
  hexrpc_status st = hexrpc_session_open_bench(HEXRPC_BENCH_EXECUTOR, &s);
  if (st == HEXRPC_ERR_UNAVAILABLE) {
    printf("SKIPPED executor: %s\n", hexrpc_last_error_message());
    return 0;
  }
  OK(st);
  const uint8_t *image;
  size_t image_len;
  OK(hexrpc_bench_kernel_image("relu_f32", "buf,buf,u32", HEXRPC_ABI_V2, &image, &image_len));
  hexrpc_library *relu;
  OK(hexrpc_library_open(s, "relu", image, image_len, "buf,buf,u32", HEXRPC_ABI_V2, &relu));
  hexrpc_lease *lease;
  OK(hexrpc_lease_alloc(s, 16384, &lease));
  float *mem;
  OK(hexrpc_lease_memory(lease, (void **)&mem, NULL));
  enum { N = 64 };
  const size_t a_off = 1024, o_off = 8192 + 64;
  float *a = (float *)((char *)mem + a_off), *o = (float *)((char *)mem + o_off);
  for (int i = 0; i < N; i++) a[i] = (float)(i % 7) - 3.0f;
  hexrpc_view views[2] = {{lease, a_off, N * 4}, {lease, o_off, N * 4}};
  hexrpc_scalar n[1] = {hexrpc_scalar_u32(N)};
  OK(hexrpc_launch(relu, views, 2, n, 1, 0, NULL));
  for (int i = 0; i < N; i++) CHECK(o[i] == (a[i] > 0 ? a[i] : 0.0f), "relu o[%d] = %f", i, o[i]);

  /* A library made by build-lib carries its signature and ABI: open it without giving them. */
  const char kernel_src[] = "void scale_f32(const float *x, float *y, unsigned int n, float a) {\n"
                            "  for (unsigned int i = 0; i < n; i++) y[i] = a * x[i];\n"
                            "}\n";
  char dir[] = "/tmp/hexrpc-kernel-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char src[128], so[128];
  snprintf(src, sizeof src, "%s/scale_f32.c", dir);
  snprintf(so, sizeof so, "%s/scale_f32.so", dir);
  FILE *f = fopen(src, "w");
  CHECK(f != NULL && fputs(kernel_src, f) >= 0, "write kernel");
  fclose(f);
  OK(hexrpc_build_library(src, NULL, "buf,buf,u32,f32", HEXRPC_ABI_V2, so));
  hexrpc_library *scale;
  EXPECT(hexrpc_library_open_path(s, so, "buf,buf,u32", HEXRPC_ABI_V2, &scale), HEXRPC_ERR_INVALID); /* not what it was built for */
  OK(hexrpc_library_open_path(s, so, NULL, HEXRPC_ABI_RECORDED, &scale));
  for (int i = 0; i < N; i++) a[i] = (float)i;
  hexrpc_scalar sc[2] = {hexrpc_scalar_u32(N), hexrpc_scalar_f32(1.5f)};
  OK(hexrpc_launch(scale, views, 2, sc, 2, 0, NULL));
  for (int i = 0; i < N; i++) CHECK(o[i] == 1.5f * a[i], "scale o[%d] = %f", i, o[i]);
  OK(hexrpc_session_close(s));
  printf("executor: relu_f32 and a build-lib scale_f32 (signature from its build record) under qemu-hexagon at offsets %zu and %zu checked\n",
         a_off, o_off);
  return 0;
}

int main(int argc, char **argv) {
  printf("libhexrpc %s\n", hexrpc_version());
  OK(HEXRPC_VERSION_CHECK()); /* the library serves the header this program was built with */
  CHECK(hexrpc_version_number() == HEXRPC_VERSION, "library %#llx, header %#llx", (unsigned long long)hexrpc_version_number(),
        HEXRPC_VERSION);
  /* another 0.x minor: refused */
  EXPECT(hexrpc_version_check(HEXRPC_VERSION_PACK(HEXRPC_VERSION_MAJOR, HEXRPC_VERSION_MINOR + 1, 0)), HEXRPC_ERR_UNAVAILABLE);
  hexrpc_session *s;
  EXPECT(hexrpc_session_open("no-such-board", &s), HEXRPC_ERR_INVALID);
  if (access("/proc/device-tree/model", F_OK) != 0 && access("/sys/firmware/devicetree/base/model", F_OK) != 0) {
    /* no device tree here: a NULL board (detect it) fails naming the stage and the way out */
    const char *detected = NULL;
    EXPECT(hexrpc_detect_board(&detected), HEXRPC_ERR_UNAVAILABLE);
    CHECK(detected == NULL && strstr(hexrpc_last_error_message(), "pass a board by name") != NULL, "%s", hexrpc_last_error_message());
    EXPECT(hexrpc_session_open(NULL, &s), HEXRPC_ERR_UNAVAILABLE);
    CHECK(strcmp(hexrpc_last_error_stage(), "board") == 0, "stage %s", hexrpc_last_error_stage());
  }
  if (access("/dev/ion", F_OK) != 0) { /* no device here: the failure names the stage */
    EXPECT(hexrpc_session_open("comma-three", &s), HEXRPC_ERR_UNAVAILABLE);
    CHECK(strcmp(hexrpc_last_error_stage(), "heap-open") == 0, "stage %s", hexrpc_last_error_stage());
    CHECK(strstr(hexrpc_last_error_message(), "/dev/ion does not exist") != NULL, "names the node: %s", hexrpc_last_error_message());
  }
  OK(hexrpc_session_open_bench(0, &s));
  scale_launches(s);
  path_and_deadline(s);
  batches(s);
  small_stack(s);
  forked(s);
  arenas(s);
  hexrpc_lease *stray;
  OK(hexrpc_lease_alloc(s, 4096, &stray));
  OK(hexrpc_session_close(s));
  EXPECT(hexrpc_session_close(s), HEXRPC_ERR_HANDLE);
  EXPECT(hexrpc_lease_free(stray), HEXRPC_ERR_HANDLE); /* closed with its session */
  EXPECT(hexrpc_session_recover(s), HEXRPC_ERR_HANDLE);
  if (argc > 1 && strcmp(argv[1], "--executor") == 0) executor();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C example: all checks passed\n");
  return 0;
}
