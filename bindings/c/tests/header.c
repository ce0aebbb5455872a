/*
 * hexrpc.h compiles cleanly as C99 (-pedantic) and as C++ (-Wold-style-cast), with every
 * optional part declared, its inline scalar constructors give the documented bits, and the
 * structs and constants a compiled program depends on keep their values and layout.
 * Built and run by .ci/bindings:
 *   cc  -std=c99   -Wall -Wextra -pedantic -Werror -DHEXRPC_BENCH -DHEXRPC_BUILD_LIB -Ibindings/c/include header.c
 *   c++ -x c++ -std=c++17 -Wall -Wextra -Wold-style-cast -Werror -DHEXRPC_BENCH -DHEXRPC_BUILD_LIB -Ibindings/c/include header.c
 * It links nothing: only the header is under test.
 */
#include <hexrpc.h>
#include <stddef.h>
#include <stdio.h>

static int check(int ok, const char *what) {
  if (!ok) fprintf(stderr, "header check failed: %s\n", what);
  return ok ? 0 : 1;
}

int main(void) {
  int bad = 0;
  hexrpc_scalar s;
  s = hexrpc_scalar_i8(-1);
  bad += check(s.kind == HEXRPC_SCALAR_I8 && s.bits == 0xffu && s.reserved == 0, "i8(-1) is 0xff");
  s = hexrpc_scalar_i16(-2);
  bad += check(s.bits == 0xfffeu, "i16(-2) is 0xfffe");
  s = hexrpc_scalar_i32(-3);
  bad += check(s.bits == 0xfffffffdu, "i32(-3) is 0xfffffffd");
  s = hexrpc_scalar_i64(-4);
  bad += check(s.bits == 0xfffffffffffffffcull, "i64(-4) is two's complement");
  s = hexrpc_scalar_f32(1.0f);
  bad += check(s.kind == HEXRPC_SCALAR_F32 && s.bits == 0x3f800000u, "f32(1) bits");
  s = hexrpc_scalar_f64(-2.0);
  bad += check(s.bits == 0xc000000000000000ull, "f64(-2) bits");
  s = hexrpc_scalar_u64(0xffffffffffffffffull);
  bad += check(s.kind == HEXRPC_SCALAR_U64 && s.bits == 0xffffffffffffffffull, "u64 max");
  bad += check(HEXRPC_IMPORT_READ_ONLY == 0 && HEXRPC_IMPORT_READ_WRITE == 1, "import flags 0 and 1");
  /* input_bytes_copied took the place of `reserved`: the report's layout is the one programs
     compiled against earlier headers have. */
  bad += check(sizeof(hexrpc_model_report) == 24 && offsetof(hexrpc_model_report, calls) == 8 &&
                   offsetof(hexrpc_model_report, input_bytes_copied) == 12 && offsetof(hexrpc_model_report, dsp_us) == 16,
               "hexrpc_model_report layout");
  {
    /* A bound input's entry: no bytes. */
    hexrpc_input bound = {NULL, 0};
    bad += check(bound.data == NULL && bound.len == 0, "a bound input's entry");
  }
  if (bad == 0) printf("hexrpc.h: C/C++ header checks passed\n");
  return bad;
}
