/* hexrpc bench executor: the DSP-side runtime's interface, shared by the runtime, the kernels and
 * the generated entry (which declares the HAP_* prototypes itself, identically).
 *
 * Freestanding Hexagon code: no libc. The runtime provides memset/memcpy (the compiler may emit
 * calls to them), the HAP_* functions a generated entry calls, and the request loop (_start). */
#ifndef HRX_DSP_H
#define HRX_DSP_H

typedef unsigned int hrx_u32;
typedef int hrx_i32;
typedef unsigned long long hrx_u64;
typedef __SIZE_TYPE__ hrx_size;

void *memset(void *dst, int c, hrx_size n);
void *memcpy(void *dst, const void *src, hrx_size n);

void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset);
int HAP_munmap(void *addr, unsigned int len);
unsigned long long HAP_perf_get_time_us(void);
int HAP_power_set(void *context, void *request);

/* expf for the kernels (see kernels/hrx_math.c for its error bound). */
float hrx_expf(float x);

#endif
