/* hexrpc bench executor: the C library the DSP shell exports to the libraries it loads.
 *
 * Freestanding Hexagon code (compiled without -fPIC into the static shell):
 *  - memset / memcpy / memmove / memcmp (byte loops through volatile pointers, so the compiler
 *    cannot turn them back into calls to themselves);
 *  - the runtime helpers clang emits for Hexagon under -nostdlib: 32- and 64-bit integer
 *    division and remainder (__hexagon_{,u}{div,mod}{si,di}3: restoring shift-subtract division;
 *    division by zero gives all ones as quotient and the dividend as remainder, the overflowing
 *    INT_MIN / -1 gives INT_MIN and remainder 0) and __hexagon_memcpy_likely_aligned_min32bytes_
 *    mult8bytes (a memcpy). The double-precision helpers (__hexagon_adddf3, __hexagon_muldf3,
 *    __hexagon_divdf3, ...) are NOT provided: a library that needs them is refused at load time
 *    with the helper's name, and `hexrpc build-lib` refuses to produce it;
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
