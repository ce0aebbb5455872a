/* hexrpc bench executor: the kernel suite (plain C, freestanding). Each kernel is one library's
 * `kernel`: the generated entry passes the buffer views first, then the scalars, in signature
 * order. Rust references: tests/src/executor/reference.rs (same summation order, so float results
 * are expected to agree closely; the bounds the tests apply are stated there).
 *
 * Built twice: as plain scalar code, and with `-mllvm -hexagon-autohvx=true` (the "hvx" flavour;
 * HVX v65 has no floating point, so only the integer kernels become vector code there).
 * Compiled with -ffp-contract=off so no multiply-add is fused. No variable integer division is
 * used (Hexagon has no divide instruction; the DSP shell exports the __hexagon_*div* helpers, but
 * the suite keeps to shifts and multiplies so its results stay comparable with the references). */
#include "hrx_dsp.h"

typedef signed char i8;
typedef unsigned char u8;

#define HRX_ELEMENTWISE2(name, T, expr)                                        \
  void name(const T *a, const T *b, T *o, unsigned int n) {                    \
    for (unsigned int i = 0; i < n; i++) {                                     \
      const T x = a[i], y = b[i];                                              \
      o[i] = (T)(expr);                                                        \
    }                                                                          \
  }

HRX_ELEMENTWISE2(add_f32, float, x + y)
HRX_ELEMENTWISE2(mul_f32, float, x * y)
HRX_ELEMENTWISE2(add_i8, i8, (u8)((u8)x + (u8)y))
HRX_ELEMENTWISE2(mul_i8, i8, (u8)((u8)x * (u8)y))
HRX_ELEMENTWISE2(add_u8, u8, x + y)
HRX_ELEMENTWISE2(mul_u8, u8, x * y)

void relu_f32(const float *a, float *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) o[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

void relu_i8(const i8 *a, i8 *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0;
}

/* Quantized ReLU on unsigned data: the zero point stands for 0.0. */
void relu_u8(const u8 *a, u8 *o, unsigned int n, unsigned char zero_point) {
  for (unsigned int i = 0; i < n; i++) o[i] = a[i] > zero_point ? a[i] : zero_point;
}

/* Sequential sum (index order). */
void sum_f32(const float *a, float *o, unsigned int n) {
  float s = 0.0f;
  for (unsigned int i = 0; i < n; i++) s += a[i];
  o[0] = s;
}

void max_f32(const float *a, float *o, unsigned int n) {
  float m = -__builtin_inff();
  for (unsigned int i = 0; i < n; i++) m = a[i] > m ? a[i] : m;
  o[0] = m;
}

/* Sum of bytes into a 32-bit total (exact). */
void sum_u8(const u8 *a, unsigned int *o, unsigned int n) {
  unsigned int s = 0;
  for (unsigned int i = 0; i < n; i++) s += a[i];
  o[0] = s;
}

/* o[m][n] = sum_k a[m][k] * b[k][n], k ascending. */
void matmul_f32(const float *a, const float *b, float *o, unsigned int M, unsigned int K, unsigned int N) {
  for (unsigned int i = 0; i < M; i++)
    for (unsigned int j = 0; j < N; j++) {
      float acc = 0.0f;
      for (unsigned int k = 0; k < K; k++) acc += a[i * K + k] * b[k * N + j];
      o[i * N + j] = acc;
    }
}

/* Valid 3x3 convolution, stride 1: in [C][H][W], w [F][C][3][3], bias [F],
 * out [F][H-2][W-2]; acc = bias, then c, ky, kx ascending. */
void conv2d_f32(const float *in, const float *w, const float *bias, float *out, unsigned int C, unsigned int H, unsigned int W,
                unsigned int F) {
  const unsigned int OH = H - 2u, OW = W - 2u;
  for (unsigned int f = 0; f < F; f++)
    for (unsigned int y = 0; y < OH; y++)
      for (unsigned int x = 0; x < OW; x++) {
        float acc = bias[f];
        for (unsigned int c = 0; c < C; c++)
          for (unsigned int ky = 0; ky < 3u; ky++)
            for (unsigned int kx = 0; kx < 3u; kx++)
              acc += in[(c * H + y + ky) * W + x + kx] * w[((f * C + c) * 3u + ky) * 3u + kx];
        out[(f * OH + y) * OW + x] = acc;
      }
}

/* 2x2 max pooling, stride 2: in [C][H][W] -> out [C][H/2][W/2]. */
void maxpool2_f32(const float *in, float *out, unsigned int C, unsigned int H, unsigned int W) {
  const unsigned int OH = H >> 1, OW = W >> 1;
  for (unsigned int c = 0; c < C; c++)
    for (unsigned int y = 0; y < OH; y++)
      for (unsigned int x = 0; x < OW; x++) {
        const float *p = in + (c * H + 2u * y) * W + 2u * x;
        float m = p[0];
        m = p[1] > m ? p[1] : m;
        m = p[W] > m ? p[W] : m;
        m = p[W + 1u] > m ? p[W + 1u] : m;
        out[(c * OH + y) * OW + x] = m;
      }
}

/* o[n] = b[n] + sum_k w[n][k] * x[k], k ascending. */
void dense_f32(const float *x, const float *w, const float *b, float *o, unsigned int K, unsigned int N) {
  for (unsigned int n = 0; n < N; n++) {
    float acc = b[n];
    for (unsigned int k = 0; k < K; k++) acc += w[n * K + k] * x[k];
    o[n] = acc;
  }
}

/* Row-wise softmax: out = exp(x - max) / sum(exp(x - max)), sum in index order. */
void softmax_f32(const float *in, float *out, unsigned int R, unsigned int C) {
  for (unsigned int r = 0; r < R; r++) {
    const float *x = in + r * C;
    float *y = out + r * C;
    float m = -__builtin_inff();
    for (unsigned int i = 0; i < C; i++) m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (unsigned int i = 0; i < C; i++) {
      y[i] = hrx_expf(x[i] - m);
      s += y[i];
    }
    for (unsigned int i = 0; i < C; i++) y[i] = y[i] / s;
  }
}

void exp_f32(const float *a, float *o, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) o[i] = hrx_expf(a[i]);
}

/* Busy loop for the fault tests: counts to `iters` (0: forever), then writes the count. */
void spin_u32(unsigned int *o, unsigned int iters) {
  volatile unsigned int c = 0;
  while (iters == 0u || c < iters) c = c + 1u;
  o[0] = c;
}

/* Touches every byte of its view (read, +1, write): the v1/v2 regression kernel. */
void bump_u8(u8 *a, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) a[i] = (u8)(a[i] + 1u);
}

/* A status kernel for batches: 0 when a[0] == want (the batch goes on), otherwise a[0] + 1 (the
 * batch stops at this record and reports the code). Adds 1 to a[1] either way (proof it ran). */
int check_u32(unsigned int *a, unsigned int want) {
  a[1] = a[1] + 1u;
  return a[0] == want ? 0 : (int)(a[0] + 1u);
}
