/*
 * hexrpc.h compiles cleanly as C99 (-pedantic) and as C++ (-Wold-style-cast), with every
 * optional part declared, and its inline scalar constructors give the documented bits.
 * Built and run by .ci/bindings:
 *   cc  -std=c99   -Wall -Wextra -pedantic -Werror -DHEXRPC_BENCH -DHEXRPC_BUILD_LIB -Ibindings/c/include header.c
 *   c++ -x c++ -std=c++17 -Wall -Wextra -Wold-style-cast -Werror -DHEXRPC_BENCH -DHEXRPC_BUILD_LIB -Ibindings/c/include header.c
 * It links nothing: only the header is under test.
 */
#include <hexrpc.h>
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
  if (bad == 0) printf("hexrpc.h: C/C++ header checks passed\n");
  return bad;
}
