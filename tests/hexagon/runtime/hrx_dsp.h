/* hexrpc bench executor: the DSP shell's interface, shared by the shell, its C library and the
 * kernels (a library built for the shell imports these names; the generated entry declares the
 * HAP_* prototypes itself, identically).
 *
 * Freestanding Hexagon code: no libc. The shell provides memset/memcpy/memmove/memcmp (the
 * compiler may emit calls to them), the compiler's Hexagon runtime helpers, a small libm, the
 * HAP_* functions a generated entry calls, and the request loop (_start). */
#ifndef HRX_DSP_H
#define HRX_DSP_H

typedef unsigned int hrx_u32;
typedef int hrx_i32;
typedef unsigned long long hrx_u64;
typedef __SIZE_TYPE__ hrx_size;

void *memset(void *dst, int c, hrx_size n);
void *memcpy(void *dst, const void *src, hrx_size n);
void *memmove(void *dst, const void *src, hrx_size n);
int memcmp(const void *a, const void *b, hrx_size n);

void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset);
int HAP_munmap(void *addr, unsigned int len);
unsigned long long HAP_perf_get_time_us(void);
int HAP_power_set(void *context, void *request);

/* Compiler runtime helpers (clang emits calls to these for Hexagon under -nostdlib). */
int __hexagon_divsi3(int a, int b);
unsigned int __hexagon_udivsi3(unsigned int a, unsigned int b);
int __hexagon_modsi3(int a, int b);
unsigned int __hexagon_umodsi3(unsigned int a, unsigned int b);
long long __hexagon_divdi3(long long a, long long b);
unsigned long long __hexagon_udivdi3(unsigned long long a, unsigned long long b);
long long __hexagon_moddi3(long long a, long long b);
unsigned long long __hexagon_umoddi3(unsigned long long a, unsigned long long b);
void *__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes(void *dst, const void *src, hrx_size n);
float __hexagon_sqrtf(float x);
double __hexagon_adddf3(double a, double b);
double __hexagon_subdf3(double a, double b);
double __hexagon_muldf3(double a, double b);
double __hexagon_divdf3(double a, double b);

/* libm subset (hrx_libc.c states the accuracy of each). */
float sqrtf(float x);
float fabsf(float x);
float floorf(float x);
float ceilf(float x);
float truncf(float x);
float roundf(float x);
float fmaxf(float a, float b);
float fminf(float a, float b);
float expf(float x);
float exp2f(float x);
float logf(float x);
float log2f(float x);
float sinf(float x);
float cosf(float x);

/* expf for the kernels (see kernels/hrx_math.c for its error bound). */
float hrx_expf(float x);

#endif
