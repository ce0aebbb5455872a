/* hexrpc bench executor: the C library the DSP shell exports to the libraries it loads.
 *
 * Freestanding Hexagon code (compiled without -fPIC into the static shell):
 *  - memset / memcpy / memmove / memcmp (byte loops through volatile pointers, so the compiler
 *    cannot turn them back into calls to themselves);
 *  - the runtime helpers clang emits for Hexagon under -nostdlib: 32- and 64-bit integer
 *    division and remainder (__hexagon_{,u}{div,mod}{si,di}3: restoring shift-subtract division;
 *    division by zero gives all ones as quotient and the dividend as remainder, the overflowing
 *    INT_MIN / -1 gives INT_MIN and remainder 0) and __hexagon_memcpy_likely_aligned_min32bytes_
 *    mult8bytes (a memcpy), __hexagon_sqrtf (clang's call for sqrtf under -ffast-math: sqrtf). The
 *    double-precision arithmetic helpers (__hexagon_adddf3, __hexagon_subdf3, __hexagon_muldf3,
 *    __hexagon_divdf3: software IEEE binary64, see the end of this file); double `sqrt` and
 *    anything else is NOT provided: a library that needs it is refused at load time with its
 *    name, and `hexrpc build-lib` refuses to produce it;
 *  - a libm subset, with the accuracy the executor tests check (f32 results against an f64
 *    reference): sqrtf correctly rounded (integer digit recurrence); fabsf, floorf, ceilf,
 *    truncf, roundf, fmaxf, fminf exact (fmaxf/fminf return the other operand when one is NaN);
 *    expf = hrx_expf (kernels/hrx_math.c), exp2f, logf, log2f within 4 ulp; sinf and cosf within
 *    4 ulp for |x| <= 8192, except near their zeros (|result| < 1e-3), where the bound is
 *    absolute, 4 * 2^-23 (Cody-Waite reduction by pi/2 in three parts; beyond |x| = 8192 the
 *    reduction loses accuracy; a real libm reduces exactly). The executor test measured at most
 *    1 ulp for each over ~1000 inputs. Special values: NaN in, NaN out; logf/log2f of a negative
 *    number NaN, of +-0 -inf; sqrtf of a negative number NaN. */
#include "hrx_dsp.h"

/* ---- memory --------------------------------------------------------------------------------- */

void *memset(void *dst, int c, hrx_size n) {
  volatile unsigned char *d = (volatile unsigned char *)dst;
  for (hrx_size i = 0; i < n; i++) d[i] = (unsigned char)c;
  return dst;
}

void *memcpy(void *dst, const void *src, hrx_size n) {
  volatile unsigned char *d = (volatile unsigned char *)dst;
  const unsigned char *s = (const unsigned char *)src;
  for (hrx_size i = 0; i < n; i++) d[i] = s[i];
  return dst;
}

void *memmove(void *dst, const void *src, hrx_size n) {
  volatile unsigned char *d = (volatile unsigned char *)dst;
  const volatile unsigned char *s = (const volatile unsigned char *)src;
  if ((__UINTPTR_TYPE__)d <= (__UINTPTR_TYPE__)s) {
    for (hrx_size i = 0; i < n; i++) d[i] = s[i];
  } else {
    for (hrx_size i = n; i > 0; i--) d[i - 1] = s[i - 1];
  }
  return dst;
}

int memcmp(const void *a, const void *b, hrx_size n) {
  const volatile unsigned char *x = (const volatile unsigned char *)a;
  const volatile unsigned char *y = (const volatile unsigned char *)b;
  for (hrx_size i = 0; i < n; i++)
    if (x[i] != y[i]) return (int)x[i] - (int)y[i];
  return 0;
}

void *__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes(void *dst, const void *src, hrx_size n) { return memcpy(dst, src, n); }

/* ---- integer division ------------------------------------------------------------------------ */

static unsigned long long hrx_udivmod64(unsigned long long n, unsigned long long d, unsigned long long *rem) {
  if (d == 0) {
    *rem = n;
    return ~0ull;
  }
  unsigned long long q = 0, r = 0;
  for (int i = 63; i >= 0; i--) {
    r = (r << 1) | ((n >> i) & 1ull);
    if (r >= d) {
      r -= d;
      q |= 1ull << i;
    }
  }
  *rem = r;
  return q;
}

static unsigned int hrx_udivmod32(unsigned int n, unsigned int d, unsigned int *rem) {
  if (d == 0) {
    *rem = n;
    return ~0u;
  }
  unsigned int q = 0, r = 0;
  for (int i = 31; i >= 0; i--) {
    r = (r << 1) | ((n >> i) & 1u);
    if (r >= d) {
      r -= d;
      q |= 1u << i;
    }
  }
  *rem = r;
  return q;
}

unsigned int __hexagon_udivsi3(unsigned int a, unsigned int b) {
  unsigned int r;
  return hrx_udivmod32(a, b, &r);
}

unsigned int __hexagon_umodsi3(unsigned int a, unsigned int b) {
  unsigned int r;
  hrx_udivmod32(a, b, &r);
  return r;
}

int __hexagon_divsi3(int a, int b) {
  unsigned int r;
  const unsigned int ua = a < 0 ? 0u - (unsigned int)a : (unsigned int)a;
  const unsigned int ub = b < 0 ? 0u - (unsigned int)b : (unsigned int)b;
  const unsigned int q = hrx_udivmod32(ua, ub, &r);
  return (int)(((a < 0) != (b < 0)) ? 0u - q : q);
}

int __hexagon_modsi3(int a, int b) {
  unsigned int r;
  const unsigned int ua = a < 0 ? 0u - (unsigned int)a : (unsigned int)a;
  const unsigned int ub = b < 0 ? 0u - (unsigned int)b : (unsigned int)b;
  hrx_udivmod32(ua, ub, &r);
  return (int)(a < 0 ? 0u - r : r);
}

unsigned long long __hexagon_udivdi3(unsigned long long a, unsigned long long b) {
  unsigned long long r;
  return hrx_udivmod64(a, b, &r);
}

unsigned long long __hexagon_umoddi3(unsigned long long a, unsigned long long b) {
  unsigned long long r;
  hrx_udivmod64(a, b, &r);
  return r;
}

long long __hexagon_divdi3(long long a, long long b) {
  unsigned long long r;
  const unsigned long long ua = a < 0 ? 0ull - (unsigned long long)a : (unsigned long long)a;
  const unsigned long long ub = b < 0 ? 0ull - (unsigned long long)b : (unsigned long long)b;
  const unsigned long long q = hrx_udivmod64(ua, ub, &r);
  return (long long)(((a < 0) != (b < 0)) ? 0ull - q : q);
}

long long __hexagon_moddi3(long long a, long long b) {
  unsigned long long r;
  const unsigned long long ua = a < 0 ? 0ull - (unsigned long long)a : (unsigned long long)a;
  const unsigned long long ub = b < 0 ? 0ull - (unsigned long long)b : (unsigned long long)b;
  hrx_udivmod64(ua, ub, &r);
  return (long long)(a < 0 ? 0ull - r : r);
}

/* ---- libm ------------------------------------------------------------------------------------ */

typedef union {
  unsigned int u;
  float f;
} hrx_bits;

static unsigned int bits_of(float x) {
  hrx_bits b;
  b.f = x;
  return b.u;
}

static float float_of(unsigned int u) {
  hrx_bits b;
  b.u = u;
  return b.f;
}

static float hrx_nan(void) { return float_of(0x7fc00000u); }

float fabsf(float x) { return float_of(bits_of(x) & 0x7fffffffu); }

/* What clang calls for sqrtf under -ffast-math. */
float __hexagon_sqrtf(float x) { return sqrtf(x); }

float truncf(float x) {
  const unsigned int u = bits_of(x);
  const int e = (int)((u >> 23) & 0xffu) - 127;
  if (e >= 23) return x;
  if (e < 0) return float_of(u & 0x80000000u);
  return float_of(u & ~(0x7fffffu >> e));
}

float floorf(float x) {
  const float t = truncf(x);
  return (x < 0.0f && t != x) ? t - 1.0f : t;
}

float ceilf(float x) {
  const float t = truncf(x);
  return (x > 0.0f && t != x) ? t + 1.0f : t;
}

float roundf(float x) {
  const float t = truncf(x);
  const float d = x - t;
  if (d >= 0.5f) return t + 1.0f;
  if (d <= -0.5f) return t - 1.0f;
  return t;
}

float fmaxf(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}

float fminf(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a < b ? a : b;
}

float sqrtf(float x) {
  const unsigned int u = bits_of(x);
  if (x != x) return x;
  if ((u & 0x7fffffffu) == 0) return x; /* +-0 */
  if (u & 0x80000000u) return hrx_nan();
  if (u == 0x7f800000u) return x;
  int e;
  unsigned long long m;
  if ((u >> 23) == 0) { /* subnormal: normalise */
    m = u & 0x7fffffu;
    e = 1 - 150;
    while ((m & 0x800000u) == 0) {
      m <<= 1;
      e--;
    }
  } else {
    m = (u & 0x7fffffu) | 0x800000u;
    e = (int)(u >> 23) - 150;
  }
  if (e & 1) {
    m <<= 1;
    e--;
  }
  /* r = floor(sqrt(m << 26)), the remainder says whether the root is exact. */
  unsigned long long op = m << 26, res = 0, one = 1ull << 62;
  while (one > op) one >>= 2;
  while (one != 0) {
    if (op >= res + one) {
      op -= res + one;
      res = (res >> 1) + one;
    } else {
      res >>= 1;
    }
    one >>= 2;
  }
  unsigned long long r = res;
  int shift = 0;
  if (r >= (1ull << 25)) {
    r >>= 1;
    shift = 1;
  }
  /* r has 25 bits: 24 of result and the rounding bit (a tie is impossible for a square root). */
  unsigned int q = (unsigned int)(r >> 1) + (unsigned int)(r & 1u);
  int eo = e / 2 - 13 + shift + 1 + 150;
  if (q == (1u << 24)) {
    q >>= 1;
    eo++;
  }
  return float_of(((unsigned int)eo << 23) | (q & 0x7fffffu));
}

/* x * 2^k for any k in [-300, 300] without forming an out-of-range power of two. */
static float hrx_scale(float x, int k) {
  while (k > 100) {
    x *= float_of(0x71800000u); /* 2^100 */
    k -= 100;
  }
  while (k < -100) {
    x *= float_of(0x0d800000u); /* 2^-100 */
    k += 100;
  }
  return x * float_of((unsigned int)(k + 127) << 23);
}

float expf(float x) { return hrx_expf(x); }

float exp2f(float x) {
  if (x != x) return x;
  if (x >= 128.0f) return __builtin_inff();
  if (x < -150.0f) return 0.0f;
  const int k = (int)(x + (x >= 0.0f ? 0.5f : -0.5f));
  const float f = x - (float)k; /* exact: |x| < 2^8 */
  return hrx_scale(hrx_expf(f * 0.693147180559945309f), k);
}

/* log(x) = k ln 2 + log(m), m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m - 1) / (m + 1). */
static float hrx_log_parts(float x, int *k_out, int *special) {
  unsigned int u = bits_of(x);
  *special = 1;
  if (x != x) return x;
  if ((u & 0x7fffffffu) == 0) return -__builtin_inff();
  if (u & 0x80000000u) return hrx_nan();
  if (u == 0x7f800000u) return x;
  *special = 0;
  int k = 0;
  if ((u >> 23) == 0) { /* subnormal */
    x *= float_of(0x4b800000u); /* 2^24 */
    u = bits_of(x);
    k = -24;
  }
  k += (int)(u >> 23) - 127;
  float m = float_of((u & 0x7fffffu) | 0x3f800000u);
  if (m > 1.41421356237f) {
    m *= 0.5f;
    k++;
  }
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = 1.0f / 11.0f;
  p = p * s2 + 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  *k_out = k;
  return 2.0f * s + 2.0f * s * s2 * p;
}

float logf(float x) {
  int k, special;
  const float lm = hrx_log_parts(x, &k, &special);
  if (special) return lm;
  const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187045e-06f;
  return ((float)k * ln2_hi + lm) + (float)k * ln2_lo;
}

float log2f(float x) {
  int k, special;
  const float lm = hrx_log_parts(x, &k, &special);
  if (special) return lm;
  return (float)k + lm * 1.44269504088896340736f;
}

/* Reduction by pi/2: x = q pi/2 + r, |r| <= pi/4 (three-part constant, exact products for
 * |q| < 2^13). */
static float hrx_reduce(float x, int *q) {
  const float t = x * 0.636619772367581343f;
  const int k = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));
  const float kf = (float)k;
  *q = k;
  return ((x - kf * 1.5703125f) - kf * 4.837512969970703125e-4f) - kf * 7.54978995489188216e-8f;
}

static float hrx_sin_poly(float r) {
  const float r2 = r * r;
  float p = 1.0f / 362880.0f;
  p = p * r2 - 1.0f / 5040.0f;
  p = p * r2 + 1.0f / 120.0f;
  p = p * r2 - 1.0f / 6.0f;
  return r + r * r2 * p;
}

static float hrx_cos_poly(float r) {
  const float r2 = r * r;
  float p = -1.0f / 3628800.0f;
  p = p * r2 + 1.0f / 40320.0f;
  p = p * r2 - 1.0f / 720.0f;
  p = p * r2 + 1.0f / 24.0f;
  p = p * r2 - 0.5f;
  return 1.0f + r2 * p;
}

float sinf(float x) {
  if (x != x || fabsf(x) == __builtin_inff()) return hrx_nan();
  int q;
  const float r = hrx_reduce(x, &q);
  switch (q & 3) {
    case 0: return hrx_sin_poly(r);
    case 1: return hrx_cos_poly(r);
    case 2: return -hrx_sin_poly(r);
    default: return -hrx_cos_poly(r);
  }
}

float cosf(float x) {
  if (x != x || fabsf(x) == __builtin_inff()) return hrx_nan();
  int q;
  const float r = hrx_reduce(x, &q);
  switch (q & 3) {
    case 0: return hrx_cos_poly(r);
    case 1: return -hrx_sin_poly(r);
    case 2: return -hrx_cos_poly(r);
    default: return hrx_sin_poly(r);
  }
}

/* ---- double precision: the arithmetic helpers clang calls for Hexagon v65 ---------------------
 * IEEE binary64 add, subtract, multiply and divide on the integer unit, round to nearest even,
 * with subnormals, signed zeros, infinities and NaN (a NaN operand is returned quieted; an
 * invalid operation gives the default NaN). The executor test compares them bit for bit with the
 * host's f64 arithmetic. Comparisons and conversions are single instructions on v65 and need no
 * helper; sqrt (double) is not provided. */

typedef unsigned long long hrx_u64b;

typedef union {
  hrx_u64b u;
  double d;
} hrx_dbits;

static hrx_u64b dbits_of(double x) {
  hrx_dbits b;
  b.d = x;
  return b.u;
}

static double double_of(hrx_u64b u) {
  hrx_dbits b;
  b.u = u;
  return b.d;
}

#define D_SIGN 0x8000000000000000ull
#define D_EXP 0x7ff0000000000000ull
#define D_MANT 0x000fffffffffffffull
#define D_QNAN 0x7ff8000000000000ull
#define D_HIDDEN (1ull << 52)

static int d_isnan(hrx_u64b x) { return (x & D_EXP) == D_EXP && (x & D_MANT) != 0; }

/* Right shift that ORs every bit shifted out into bit 0 (sticky). */
static hrx_u64b shr_sticky(hrx_u64b m, int sh) {
  if (sh <= 0) return m;
  if (sh >= 64) return m != 0;
  return (m >> sh) | ((m << (64 - sh)) != 0);
}

/* Packs sign | value m * 2^(e - 1023 - 55), m's leading bit at bit 55 when normal (e >= 1). */
static double d_pack(hrx_u64b sign, int e, hrx_u64b m) {
  if (e <= 0) {
    m = shr_sticky(m, 1 - e);
    e = 1;
  }
  const hrx_u64b r = m & 7u;
  m >>= 3;
  if (r > 4u || (r == 4u && (m & 1u))) m++;
  if (e >= 0x7ff) return double_of(sign | D_EXP);
  /* The hidden bit (if any) carries into the exponent field: e - 1 + 1 for a normal number, 0 +
   * m for a subnormal one, and a rounding carry to 2^53 bumps the exponent by one. */
  const hrx_u64b enc = ((hrx_u64b)(e - 1) << 52) + m;
  if (enc >= D_EXP) return double_of(sign | D_EXP);
  return double_of(sign | enc);
}

/* Unpacks a finite non-zero operand: mantissa with the hidden bit at 52, exponent >= 1 for
 * normals; subnormals are normalised (exponent may go below 1). */
static hrx_u64b d_unpack(hrx_u64b x, int *e) {
  hrx_u64b m = x & D_MANT;
  int ex = (int)((x >> 52) & 0x7ffu);
  if (ex != 0) {
    m |= D_HIDDEN;
  } else {
    ex = 1;
    while ((m & D_HIDDEN) == 0) {
      m <<= 1;
      ex--;
    }
  }
  *e = ex;
  return m;
}

double __hexagon_adddf3(double a, double b) {
  hrx_u64b x = dbits_of(a), y = dbits_of(b);
  if (d_isnan(x)) return double_of(x | D_QNAN);
  if (d_isnan(y)) return double_of(y | D_QNAN);
  if ((x & D_EXP) == D_EXP) {
    if ((y & D_EXP) == D_EXP && ((x ^ y) & D_SIGN)) return double_of(D_QNAN);
    return a;
  }
  if ((y & D_EXP) == D_EXP) return b;
  if ((x & ~D_SIGN) == 0) return (y & ~D_SIGN) == 0 ? double_of(x & y) : b;
  if ((y & ~D_SIGN) == 0) return a;
  if ((x & ~D_SIGN) < (y & ~D_SIGN)) {
    const hrx_u64b t = x;
    x = y;
    y = t;
  }
  int ex, ey;
  hrx_u64b mx = d_unpack(x, &ex) << 3, my = d_unpack(y, &ey) << 3;
  const hrx_u64b sign = x & D_SIGN;
  my = shr_sticky(my, ex - ey);
  hrx_u64b m;
  if (((x ^ y) & D_SIGN) == 0) {
    m = mx + my;
    if (m >> 56) {
      m = (m >> 1) | (m & 1u);
      ex++;
    }
  } else {
    m = mx - my;
    if (m == 0) return double_of(0); /* x - x = +0 in round to nearest */
    while ((m >> 55) == 0) {
      m <<= 1;
      ex--;
    }
  }
  return d_pack(sign, ex, m);
}

double __hexagon_subdf3(double a, double b) { return __hexagon_adddf3(a, double_of(dbits_of(b) ^ D_SIGN)); }

double __hexagon_muldf3(double a, double b) {
  const hrx_u64b x = dbits_of(a), y = dbits_of(b);
  const hrx_u64b sign = (x ^ y) & D_SIGN;
  if (d_isnan(x)) return double_of(x | D_QNAN);
  if (d_isnan(y)) return double_of(y | D_QNAN);
  const int xinf = (x & D_EXP) == D_EXP, yinf = (y & D_EXP) == D_EXP;
  const int xzero = (x & ~D_SIGN) == 0, yzero = (y & ~D_SIGN) == 0;
  if (xinf || yinf) return (xzero || yzero) ? double_of(D_QNAN) : double_of(sign | D_EXP);
  if (xzero || yzero) return double_of(sign);
  int ex, ey;
  const hrx_u64b mx = d_unpack(x, &ex), my = d_unpack(y, &ey);
  /* 53 x 53 -> 106 bits, from 32-bit pieces. */
  const hrx_u64b a0 = mx & 0xffffffffu, a1 = mx >> 32, b0 = my & 0xffffffffu, b1 = my >> 32;
  const hrx_u64b p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const hrx_u64b mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
  const hrx_u64b lo = (p00 & 0xffffffffu) | (mid << 32);
  const hrx_u64b hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  int e = ex + ey - 1023;
  int sh = 49;
  if (hi >> 41) { /* product >= 2^105 */
    sh = 50;
    e++;
  }
  hrx_u64b m = (hi << (64 - sh)) | (lo >> sh);
  if (lo << (64 - sh)) m |= 1u;
  return d_pack(sign, e, m);
}

double __hexagon_divdf3(double a, double b) {
  const hrx_u64b x = dbits_of(a), y = dbits_of(b);
  const hrx_u64b sign = (x ^ y) & D_SIGN;
  if (d_isnan(x)) return double_of(x | D_QNAN);
  if (d_isnan(y)) return double_of(y | D_QNAN);
  const int xinf = (x & D_EXP) == D_EXP, yinf = (y & D_EXP) == D_EXP;
  const int xzero = (x & ~D_SIGN) == 0, yzero = (y & ~D_SIGN) == 0;
  if ((xinf && yinf) || (xzero && yzero)) return double_of(D_QNAN);
  if (xinf || yzero) return double_of(sign | D_EXP);
  if (yinf || xzero) return double_of(sign);
  int ex, ey;
  hrx_u64b r = d_unpack(x, &ex);
  const hrx_u64b my = d_unpack(y, &ey);
  int e = ex - ey + 1023;
  if (r < my) {
    r <<= 1;
    e--;
  }
  hrx_u64b q = 0;
  for (int i = 0; i < 56; i++) {
    q <<= 1;
    if (r >= my) {
      r -= my;
      q |= 1u;
    }
    r <<= 1;
  }
  if (r != 0) q |= 1u;
  return d_pack(sign, e, q);
}
