/* A kernel clang-19 cannot compile with HVX (tools/libbuild/tests/hvx.rs, and the Python
 * package's test_tinygrad_codegen.py): the store of a 32-lane _Bool vector (an HVX predicate)
 * fails instruction selection ("Cannot select"); without HVX it compiles. */
#include <stdint.h>
typedef int32_t int32x32 __attribute__((ext_vector_type(32)));
typedef _Bool bool32 __attribute__((ext_vector_type(32)));
void below(const int32_t *a, uint32_t *mask, int32_t limit) {
  int32x32 v;
  __builtin_memcpy(&v, a, sizeof v);
  bool32 m = __builtin_convertvector(v < limit, bool32);
  *mask = __builtin_bit_cast(uint32_t, m);
}
void below2(const int32_t *a, uint32_t *mask, int32_t limit) { below(a, mask, limit + 1); }
