/* hexrpc bench executor: kernels written with HVX intrinsics (128-byte vectors, v65).
 * Loads and stores go through an unaligned vector type (vmemu), because views can start at any
 * offset; the tail shorter than one vector is done in scalar code. */
#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>

#include "hrx_dsp.h"

typedef HVX_Vector hrx_uvec __attribute__((aligned(1)));

/* o = a + b (wrapping), u8. */
void add_u8_hvx(const unsigned char *a, const unsigned char *b, unsigned char *o, unsigned int n) {
  unsigned int i = 0;
  for (; i + 128u <= n; i += 128u) {
    const HVX_Vector va = *(const hrx_uvec *)(a + i);
    const HVX_Vector vb = *(const hrx_uvec *)(b + i);
    *(hrx_uvec *)(o + i) = Q6_Vb_vadd_VbVb(va, vb);
  }
  for (; i < n; i++) o[i] = (unsigned char)(a[i] + b[i]);
}

/* o = max(a, 0), i8. */
void relu_i8_hvx(const signed char *a, signed char *o, unsigned int n) {
  const HVX_Vector zero = Q6_V_vsplat_R(0);
  unsigned int i = 0;
  for (; i + 128u <= n; i += 128u) *(hrx_uvec *)(o + i) = Q6_Vb_vmax_VbVb(*(const hrx_uvec *)(a + i), zero);
  for (; i < n; i++) o[i] = a[i] > 0 ? a[i] : 0;
}

/* o = max(a, zero_point), u8 (quantized ReLU). */
void relu_u8_hvx(const unsigned char *a, unsigned char *o, unsigned int n, unsigned char zero_point) {
  const HVX_Vector zp = Q6_Vb_vsplat_R(zero_point);
  unsigned int i = 0;
  for (; i + 128u <= n; i += 128u) *(hrx_uvec *)(o + i) = Q6_Vub_vmax_VubVub(*(const hrx_uvec *)(a + i), zp);
  for (; i < n; i++) o[i] = a[i] > zero_point ? a[i] : zero_point;
}
