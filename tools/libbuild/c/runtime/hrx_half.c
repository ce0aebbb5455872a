/* hexrpc build-lib: the IEEE 754 binary16 conversion helpers a Hexagon library carries itself.
 *
 * clang-19 for Hexagon below v68 has no native half type: `__fp16` is a storage type whose loads
 * and stores become calls to __extendhfsf2 (half -> float) and __truncsfhf2 / __truncdfhf2
 * (float / double -> half), and clang ships no compiler runtime for Hexagon that defines them.
 * hexrpc build-lib compiles the ones a library's objects import from this file (each guarded by
 * HRX_NEED_<name>, set on the command line) with the library's own flags and links them into
 * the library with hidden visibility: the library does not export them and does not import
 * them, so it loads on any DSP shell, whether or not its compiler runtime has them (which
 * cannot be checked for a real fastrpc_shell without a device).
 *
 * Calling convention (checked against clang-19's call sites for hexagonv65): the half value
 * travels as its 16 bits in the low half of r0. The caller loads it with memuh but may leave the
 * upper 16 bits undefined (LLVM passes an any-extended i16), so the parameter is a 32-bit
 * integer masked here; a half result is returned zero-extended in r0. float is passed and
 * returned in r0, double in r1:0.
 *
 * Conversions are exact (half -> float, half -> double) or rounded to nearest, ties to even
 * (float -> half, double -> half, each directly from the source bits, never through another
 * rounding). Overflow gives infinity, underflow a subnormal or a signed zero; NaNs stay NaNs,
 * made quiet, keeping the payload's top bits. Integer arithmetic only: nothing here calls out.
 */

typedef unsigned int hrx_u32;
typedef unsigned long long hrx_u64;

#define HRX_RT __attribute__((visibility("hidden")))

union hrx_f32 {
  float f;
  hrx_u32 u;
};
union hrx_f64 {
  double d;
  hrx_u64 u;
};

/* Index of the highest set bit of a non-zero 10-bit half mantissa (0..9). */
__attribute__((unused)) static inline int hrx_top_bit(hrx_u32 m) { return 31 - __builtin_clz(m); }

/* The 16 result bits of `bits >> shift` (1 <= shift <= 63) rounded to nearest, ties to even. */
__attribute__((unused)) static inline hrx_u32 hrx_round_shift(hrx_u64 bits, int shift) {
  hrx_u64 kept = bits >> shift;
  hrx_u64 rest = bits & ((1ull << shift) - 1u);
  hrx_u64 half = 1ull << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u) != 0))
    kept++;
  return (hrx_u32)kept;
}

#if defined(HRX_NEED___extendhfsf2)
HRX_RT float __extendhfsf2(hrx_u32 h);
HRX_RT float __extendhfsf2(hrx_u32 h) {
  hrx_u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  union hrx_f32 r;
  if (e == 0x1fu) {
    r.u = sign | 0x7f800000u | (m != 0 ? 0x400000u : 0) | (m << 13);
  } else if (e != 0) {
    r.u = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    r.u = sign;
  } else {
    /* Subnormal: m * 2^-24, normalised; its top bit p gives the exponent p - 24. */
    int p = hrx_top_bit(m);
    r.u = sign | ((hrx_u32)(p + 103) << 23) | ((m << (23 - p)) & 0x7fffffu);
  }
  return r.f;
}
#endif

#if defined(HRX_NEED___extendhfdf2)
HRX_RT double __extendhfdf2(hrx_u32 h);
HRX_RT double __extendhfdf2(hrx_u32 h) {
  hrx_u64 sign = (hrx_u64)(h & 0x8000u) << 48, m = h & 0x3ffu;
  hrx_u32 e = (h >> 10) & 0x1fu;
  union hrx_f64 r;
  if (e == 0x1fu) {
    r.u = sign | 0x7ff0000000000000ull | (m != 0 ? 0x8000000000000ull : 0) | (m << 42);
  } else if (e != 0) {
    r.u = sign | ((hrx_u64)(e + 1008u) << 52) | (m << 42);
  } else if (m == 0) {
    r.u = sign;
  } else {
    int p = hrx_top_bit((hrx_u32)m);
    r.u = sign | ((hrx_u64)(p + 999) << 52) | ((m << (52 - p)) & 0xfffffffffffffull);
  }
  return r.d;
}
#endif

#if defined(HRX_NEED___truncsfhf2)
HRX_RT hrx_u32 __truncsfhf2(float x);
HRX_RT hrx_u32 __truncsfhf2(float x) {
  union hrx_f32 v;
  v.f = x;
  hrx_u32 sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: quiet, the payload's top 9 bits kept */
    return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) /* >= 65520 (half-way from 65504 up to 2^16; ties go to even = up): inf */
    return sign | 0x7c00u;
  if (a >= 0x38800000u) /* >= 2^-14: a normal half; a carry out of the mantissa bumps the exponent */
    return sign | ((((a >> 23) - 112u) << 10) + hrx_round_shift(a & 0x7fffffu, 13));
  if (a <= 0x33000000u) /* <= 2^-25 (the tie between 0 and 2^-24 goes to even = 0) */
    return sign;
  /* Subnormal: (1.m * 2^(E-150)) / 2^-24 = M >> (126 - E), 14 <= shift <= 24. */
  return sign | hrx_round_shift((a & 0x7fffffu) | 0x800000u, (int)(126u - (a >> 23)));
}
#endif

#if defined(HRX_NEED___truncdfhf2)
HRX_RT hrx_u32 __truncdfhf2(double x);
HRX_RT hrx_u32 __truncdfhf2(double x) {
  union hrx_f64 v;
  v.d = x;
  hrx_u32 sign = (hrx_u32)(v.u >> 48) & 0x8000u;
  hrx_u64 a = v.u & 0x7fffffffffffffffull;
  if (a > 0x7ff0000000000000ull)
    return sign | 0x7e00u | ((hrx_u32)(a >> 42) & 0x3ffu);
  if (a >= 0x40effe0000000000ull) /* >= 65520 */
    return sign | 0x7c00u;
  if (a >= 0x3f10000000000000ull) /* >= 2^-14 */
    return sign | ((((hrx_u32)(a >> 52) - 1008u) << 10) + hrx_round_shift(a & 0xfffffffffffffull, 42));
  if (a <= 0x3e60000000000000ull) /* <= 2^-25 */
    return sign;
  /* Subnormal: M >> (1051 - E), 43 <= shift <= 53. */
  return sign | hrx_round_shift((a & 0xfffffffffffffull) | 0x10000000000000ull, (int)(1051u - (hrx_u32)(a >> 52)));
}
#endif
