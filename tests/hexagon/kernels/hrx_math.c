/* hexrpc bench executor: expf for freestanding Hexagon code.
 *
 * exp(x) = 2^k * exp(r), k = nearest integer to x / ln 2, r = x - k ln 2 computed in two parts
 * (Cody-Waite: ln2_hi has 16 significant bits, so k * ln2_hi is exact for |k| <= 255), |r| <=
 * ln2 / 2 (plus rounding). exp(r) is the degree-7 Taylor polynomial in Horner form: its
 * truncation error is below r^8 / 8! <= 5.2e-9 relative (0.09 ulp); the float evaluation adds a
 * few roundings. 2^k is applied in two steps so that subnormal and near-overflow results are
 * scaled without forming an out-of-range power. Stated bound (checked by the executor tests
 * against exp in f64 for results in the normal range): at most 4 ulp; the tests report the
 * maximum they observe. NaN gives NaN, x > 88.7228 gives +inf, x < -103.98 gives +0. */
#include "hrx_dsp.h"

static float hrx_pow2i(int k) {
  union {
    unsigned int u;
    float f;
  } c;
  c.u = (unsigned int)(k + 127) << 23;
  return c.f;
}

float hrx_expf(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return __builtin_inff();
  if (x < -103.97208404541016f) return 0.0f;
  const float log2e = 1.44269502162933349609375f;
  const float ln2_hi = 0.693145751953125f;
  const float ln2_lo = 1.428606765330187045e-06f;
  const float t = x * log2e;
  const int k = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));
  const float kf = (float)k;
  const float r = (x - kf * ln2_hi) - kf * ln2_lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int k1 = k >> 1;
  const int k2 = k - k1;
  return p * hrx_pow2i(k1) * hrx_pow2i(k2);
}
