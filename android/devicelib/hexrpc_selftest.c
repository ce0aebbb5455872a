/*
 * hexrpc device test library: the DSP side of `hexrpc selftest --device`.
 *
 * Built by `hexrpc build-lib` during packaging (android/packaging/build.sh):
 *   hexrpc build-lib android/devicelib/hexrpc_selftest.c --kernel hexrpc_selftest \
 *       --signature buf,buf,u32,u32,u32 -o libhexrpc_selftest.so
 * and installed as /usr/lib/hexrpc/libhexrpc_selftest.so (AGNOS .deb) or
 * /vendor/etc/hexrpc/libhexrpc_selftest.so (Android vendor module). The host side is
 * android/src/device.rs; the operation numbers below are its OP_* constants.
 *
 *   op 0  ADD    out[i] = in[i] + k for i < n
 *   op 1  SPIN   busy-wait k milliseconds by the DSP's clock, then out[0] = 1 (the deadline check)
 *   op 2  FOPEN  fopen(in, "r") through the DSP C library, which asks the host's reverse file
 *                service (apps_std); out[0] = 0 refused, 1 opened (and closed again), 2 this
 *                DSP image offers no fopen
 *
 * Freestanding: no headers; the DSP shell provides HAP_perf_get_time_us, and its C library
 * fopen/fclose (declared weak, so the library still loads where a shell lacks them).
 */

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;

extern u64 HAP_perf_get_time_us(void);
extern void *fopen(const char *path, const char *mode) __attribute__((weak));
extern int fclose(void *f) __attribute__((weak));

void hexrpc_selftest(u8 *in, u8 *out, u32 n, u32 op, u32 k) {
    switch (op) {
    case 0:
        for (u32 i = 0; i < n; i++) {
            out[i] = (u8)(in[i] + k);
        }
        break;
    case 1: {
        u64 end = HAP_perf_get_time_us() + (u64)k * 1000u;
        while (HAP_perf_get_time_us() < end) {
        }
        out[0] = 1;
        break;
    }
    case 2:
        if (!fopen) {
            out[0] = 2;
            break;
        }
        {
            void *f = fopen((const char *)in, "r");
            if (f) {
                if (fclose) {
                    fclose(f);
                }
                out[0] = 1;
            } else {
                out[0] = 0;
            }
        }
        break;
    default:
        break;
    }
}
