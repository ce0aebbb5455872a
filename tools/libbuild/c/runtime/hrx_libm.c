/* hexrpc build-lib: the double-precision libm functions a Hexagon library carries itself.
 *
 * The bench's DSP shell exports only a float libm subset (sqrtf, truncf, ...), and which
 * double-precision functions a real fastrpc_shell exports cannot be checked without a device.
 * tinygrad 0.14's DSP renderer prints `__builtin_trunc` for a float64 trunc, and builds floor,
 * ceil, round, `%` and `//` of float64 from it (comparisons, + - * /); clang-19 lowers it to a
 * call to `trunc` (Hexagon v65 has no double rounding instruction). Every other float64 op it
 * renders is decomposed into arithmetic (the __hexagon_*df3 helpers the shell exports) or is a
 * single instruction. So this file holds what those renders import: trunc.
 *
 * As for the half helpers (hrx_half.c), hexrpc build-lib compiles the functions a library's
 * objects import from this file (each guarded by HRX_NEED_<name>) with the library's flags
 * plus -Wall -Werror, and links them with hidden visibility: the library neither exports nor
 * imports them and loads on any shell.
 *
 * Results are exact for every input (integer operations on the bits only, nothing here calls
 * out): a finite x is rounded toward zero keeping its sign (so -0.5 gives -0, -0 gives -0);
 * |x| >= 2^52 is already an integer and is returned as it is, as are +-inf and every NaN, bit
 * for bit (a signalling NaN stays signalling, as with Rust's f64::trunc, musl's trunc and the
 * bench shell's truncf; IEEE 754 and glibc would quiet it, and the next arithmetic operation
 * does).
 */

typedef unsigned int hrx_u32;
typedef unsigned long long hrx_u64;

#define HRX_RT __attribute__((visibility("hidden")))

#define HRX_D_SIGN 0x8000000000000000ull
#define HRX_D_MANT 0x000fffffffffffffull
#define HRX_D_BIAS 1023u

union hrx_f64 {
  double d;
  hrx_u64 u;
};

#if defined(HRX_NEED_trunc)
HRX_RT double trunc(double x);
HRX_RT double trunc(double x) {
  union hrx_f64 v;
  v.d = x;
  hrx_u32 biased = (hrx_u32)(v.u >> 52) & 0x7ffu;
  if (biased >= HRX_D_BIAS + 52u) /* |x| >= 2^52 (no fraction bits), +-inf, NaN: x itself */
    return v.d;
  if (biased < HRX_D_BIAS) { /* |x| < 1, subnormals and zeros included: a zero of x's sign */
    v.u &= HRX_D_SIGN;
    return v.d;
  }
  /* 1 <= |x| < 2^52: the low 52 - (biased - 1023) mantissa bits are the fraction. */
  v.u &= ~(HRX_D_MANT >> (biased - HRX_D_BIAS));
  return v.d;
}
#endif
