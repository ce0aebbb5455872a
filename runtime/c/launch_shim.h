/* Declarations shared by the host shim, the host harness and the test kernels. */
#ifndef HRX_LAUNCH_SHIM_H
#define HRX_LAUNCH_SHIM_H

/* The Hexagon SDK functions, with the prototypes the generated entry declares. */
void *HAP_mmap(void *addr, unsigned int len, int prot, int flags, int fd, long offset);
int HAP_munmap(void *addr, unsigned int len);
unsigned long long HAP_perf_get_time_us(void);
int HAP_power_set(void *context, void *request);

/* Shim control. */
void hrx_shim_file(int fd, unsigned long long size);
void hrx_shim_fail_map(int ordinal);
int hrx_shim_live(void);

/* What a test kernel reports. */
void hrx_test_kernel(unsigned int k);
void hrx_test_buf(unsigned int i, const void *p);
void hrx_test_int(unsigned int i, long long v);
void hrx_test_uint(unsigned int i, unsigned long long v);
void hrx_test_bits(unsigned int i, unsigned long long bits);

#endif
