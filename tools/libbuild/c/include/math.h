/* hexrpc build-lib's <math.h> for Hexagon kernels (freestanding: the host's C library headers are
 * never searched).
 *
 * Declared functions are the ones the DSP side provides to a loaded library (each name in
 * hexrpc-libbuild's DSP_PROVIDED_SYMBOLS, the bench shell's export list), then the ones the
 * library carries itself (in its CARRIED_HELPERS: build-lib compiles and links them, hidden, when
 * a kernel calls them); a test keeps the header and both lists in step. The static inline
 * functions and the macros are resolved by the compiler (no call remains). Anything else, the
 * other double-precision functions included, is not declared: a kernel that calls one does not
 * compile, and a library that imports one anyway (through __builtin_sqrt, say) is refused by
 * build-lib with the symbol named.
 */
#ifndef HEXRPC_MATH_H
#define HEXRPC_MATH_H

typedef float float_t;
typedef double double_t;

#define INFINITY (__builtin_inff())
#define NAN (__builtin_nanf(""))
#define HUGE_VALF (__builtin_huge_valf())
#define HUGE_VAL (__builtin_huge_val())

#define FP_NAN 0
#define FP_INFINITE 1
#define FP_NORMAL 2
#define FP_SUBNORMAL 3
#define FP_ZERO 4
#define fpclassify(x) (__builtin_fpclassify(FP_NAN, FP_INFINITE, FP_NORMAL, FP_SUBNORMAL, FP_ZERO, x))
#define isnan(x) (__builtin_isnan(x))
#define isinf(x) (__builtin_isinf(x))
#define isfinite(x) (__builtin_isfinite(x))
#define isnormal(x) (__builtin_isnormal(x))
#define signbit(x) (__builtin_signbit(x))
#define isgreater(x, y) (__builtin_isgreater(x, y))
#define isgreaterequal(x, y) (__builtin_isgreaterequal(x, y))
#define isless(x, y) (__builtin_isless(x, y))
#define islessequal(x, y) (__builtin_islessequal(x, y))
#define islessgreater(x, y) (__builtin_islessgreater(x, y))
#define isunordered(x, y) (__builtin_isunordered(x, y))

#define M_E 2.71828182845904523536
#define M_LOG2E 1.44269504088896340736
#define M_LOG10E 0.434294481903251827651
#define M_LN2 0.693147180559945309417
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.785398163397448309616
#define M_1_PI 0.318309886183790671538
#define M_2_PI 0.636619772367581343076
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.707106781186547524401

/* Provided by the DSP (the shell's C library). */
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

/* Carried in the library (hrx_libm.c, linked hidden when a kernel calls it): exact. */
double trunc(double x);

/* Resolved by the compiler: sign-bit operations, no call. */
static inline double fabs(double x) { return __builtin_fabs(x); }
static inline float copysignf(float x, float y) { return __builtin_copysignf(x, y); }
static inline double copysign(double x, double y) { return __builtin_copysign(x, y); }

#endif
