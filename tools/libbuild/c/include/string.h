/* hexrpc build-lib's <string.h> for Hexagon kernels: the memory functions the DSP side provides
 * to a loaded library (each in hexrpc-libbuild's DSP_PROVIDED_SYMBOLS). The host's C library
 * headers are never searched; other <string.h> functions are not available on the DSP.
 */
#ifndef HEXRPC_STRING_H
#define HEXRPC_STRING_H

#include <stddef.h>

void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);

#endif
