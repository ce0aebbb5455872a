// A C++ service's use of libhexrpc on the bench, with RAII owners for the handles: one library,
// one lease, launches on views at non-zero offsets, outputs checked, and errors as exceptions
// carrying the stage and the cause.
//
// Build (see .ci/test):
//   c++ -std=c++17 -Wall -Wextra -Werror -DHEXRPC_BENCH -Ibindings/c/include
//       bindings/c/examples/launch.cpp -Ltarget/debug -lhexrpc -o launch_cpp
#include <hexrpc.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Error : std::runtime_error {
  hexrpc_status status;
  std::string stage;
  Error(hexrpc_status s)
      : std::runtime_error(hexrpc_last_error_message()), status(s), stage(hexrpc_last_error_stage()) {}
};

void check(hexrpc_status s) {
  if (s != HEXRPC_OK) throw Error(s);
}

struct SessionClose {
  void operator()(hexrpc_session *s) const { hexrpc_session_close(s); }
};
struct LeaseFree {
  void operator()(hexrpc_lease *l) const { hexrpc_lease_free(l); }
};
struct LibraryClose {
  void operator()(hexrpc_library *l) const { hexrpc_library_close(l); }
};
using Session = std::unique_ptr<hexrpc_session, SessionClose>;
using Lease = std::unique_ptr<hexrpc_lease, LeaseFree>;
using Library = std::unique_ptr<hexrpc_library, LibraryClose>;

Session bench_session() {
  hexrpc_session *s = nullptr;
  check(hexrpc_session_open_bench(0, &s));
  return Session(s);
}

Library open_model(hexrpc_session *s, const char *model, const char *signature) {
  const uint8_t *image = nullptr;
  size_t len = 0;
  check(hexrpc_bench_model_image(model, &image, &len));
  hexrpc_library *l = nullptr;
  check(hexrpc_library_open(s, model, image, len, signature, HEXRPC_ABI_V2, &l));
  return Library(l);
}

Lease alloc(hexrpc_session *s, size_t n, uint8_t **mem) {
  hexrpc_lease *l = nullptr;
  check(hexrpc_lease_alloc(s, n, &l));
  void *p = nullptr;
  check(hexrpc_lease_memory(l, &p, nullptr));
  *mem = static_cast<uint8_t *>(p);
  return Lease(l);
}

uint64_t launch(hexrpc_library *lib, const std::vector<hexrpc_view> &views, const std::vector<hexrpc_scalar> &scalars) {
  uint64_t us = 0;
  check(hexrpc_launch(lib, views.data(), views.size(), scalars.data(), scalars.size(), 0, &us));
  return us;
}

}  // namespace

int main() {
  int failures = 0;
  try {
    Session session = bench_session();
    Library add = open_model(session.get(), "add_u8", "buf,buf,u32");
    Library scale = open_model(session.get(), "scale_f32", "buf,buf,f32");
    uint8_t *mem = nullptr;
    Lease lease = alloc(session.get(), 3 * 4096, &mem);

    const size_t in_off = 777, out_off = 4096 + 333;
    for (size_t i = 0; i < 500; i++) mem[in_off + i] = static_cast<uint8_t>(i);
    for (uint32_t k = 1; k <= 5; k++) {
      launch(add.get(), {{lease.get(), in_off, 500}, {lease.get(), out_off, 500}}, {hexrpc_scalar_u32(k)});
      for (size_t i = 0; i < 500; i++) {
        if (mem[out_off + i] != static_cast<uint8_t>(i + k)) {
          std::fprintf(stderr, "FAIL add_u8 k=%u out[%zu] = %u\n", k, i, mem[out_off + i]);
          failures++;
          break;
        }
      }
    }

    const size_t x_off = 8192 + 4, y_off = 8192 + 2048;
    std::vector<float> x(100);
    for (size_t i = 0; i < x.size(); i++) x[i] = 0.25f * static_cast<float>(i);
    std::memcpy(mem + x_off, x.data(), x.size() * sizeof(float));
    launch(scale.get(), {{lease.get(), x_off, 400}, {lease.get(), y_off, 400}}, {hexrpc_scalar_f32(-3.0f)});
    std::vector<float> y(100);
    std::memcpy(y.data(), mem + y_off, y.size() * sizeof(float));
    for (size_t i = 0; i < y.size(); i++) {
      if (y[i] != -3.0f * x[i]) {
        std::fprintf(stderr, "FAIL scale_f32 y[%zu] = %f\n", i, static_cast<double>(y[i]));
        failures++;
        break;
      }
    }

    // An error arrives as an exception carrying the stage and the cause.
    try {
      launch(scale.get(), {{lease.get(), x_off, 400}}, {hexrpc_scalar_f32(1.0f)});
      std::fprintf(stderr, "FAIL a launch with one buffer too few was not refused\n");
      failures++;
    } catch (const Error &e) {
      if (e.status != HEXRPC_ERR_REFUSED || e.stage != "launch-pack") {
        std::fprintf(stderr, "FAIL unexpected error %s at %s: %s\n", hexrpc_status_name(e.status), e.stage.c_str(), e.what());
        failures++;
      }
    }
    // The owners release in reverse order: lease, libraries, session.
  } catch (const Error &e) {
    std::fprintf(stderr, "FAIL %s at %s: %s\n", hexrpc_status_name(e.status), e.stage.c_str(), e.what());
    return 1;
  }
  if (failures != 0) return 1;
  std::printf("C++ example: add_u8 at offsets 777/4429 and scale_f32 at 8196/10240 checked, refusal caught\n");
  return 0;
}
