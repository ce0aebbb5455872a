/*
 * hexrpc-linux: the boundary between Linux's drivers/misc/fastrpc.c, running in user space on
 * our kernel shim (kshim.c and its siblings kshim_*.c), and its Rust owner (src/lib.rs).
 *
 * Nothing here comes from the kernel: the driver file is extracted from Debian's
 * linux-source-6.1 package at build time and never committed.
 *
 * One "instance" is one FastRPC channel: one rpmsg device for a CDSP node whose probe
 * (fastrpc_rpmsg_probe) registers the misc nodes "fastrpc-cdsp" and "fastrpc-cdsp-secure" and
 * populates `sessions` compute context banks (fastrpc_cb_probe). Several instances may live in
 * one process (each test makes its own); the driver's module init runs once per process.
 */
#ifndef HX_HOST_H
#define HX_HOST_H

#ifdef __cplusplus
extern "C" {
#endif

/* Services the owner provides. Every callback may run on any thread; none is called with a
 * driver lock held except where noted. */
struct hx_host_ops {
	void *ctx;
	/* rpmsg_send(ept, data, len): one message to the DSP (the driver's 40-byte fastrpc_msg).
	 * Must not wait for the DSP: the answer comes back later through hx_receive. 0 or -errno. */
	int (*send)(void *ctx, const void *data, int len);
	/* dma_buf_get(fd) for a descriptor of the calling thread's process: the owner's key for the
	 * buffer behind it (the same key for every descriptor of one buffer, never 0), its size and
	 * a host address where its bytes are mapped for the kernel's use; takes one reference that
	 * dmabuf_put gives back. 0 or -errno (-EBADF: no such descriptor; -EINVAL: not a dma-buf). */
	int (*dmabuf_get)(void *ctx, int fd, unsigned long long *key, unsigned long long *size, void **vaddr);
	void (*dmabuf_put)(void *ctx, unsigned long long key);
	/* vma_lookup(current->mm, addr): the owner's user mapping that contains addr.
	 * 1 and [*start, *end) when there is one, 0 when there is none. */
	int (*vma_lookup)(void *ctx, unsigned long long addr, unsigned long long *start, unsigned long long *end);
};

struct hx_config {
	/* compute context banks (each one session, "reg" = its SMMU stream id, 1..). 1..13 */
	unsigned int sessions;
	/* 1: the CDSP node carries "qcom,non-secure-domain" */
	int non_secure;
	/* How many real milliseconds the driver's 10 s (10 * HZ jiffies) of an uninterruptible
	 * kernel-message wait last on this channel; 0 means 10000 (real time). Only
	 * wait_for_completion_timeout is scaled: it is the driver's one timed wait. */
	unsigned int kernel_timeout_ms;
};

struct hx_instance;

/* What the driver holds right now, read from the shim's own bookkeeping. */
struct hx_counts {
	long contexts;      /* live entries of the channel's ctx_idr (invoke contexts) */
	long attachments;   /* live dma_buf attachments made by this instance (one per fastrpc_map) */
	long dmabufs;       /* dma-buf references this instance holds (dma_buf_get minus dma_buf_put) */
	long coherent;      /* live dma_alloc_coherent buffers of this instance (payloads, init memory, MMAP pages) */
	long users;         /* files opened and not yet freed by the driver (fastrpc_device_open .. kfree of the user) */
	long allocations;   /* kzalloc/kcalloc/devm allocations not yet freed, process-wide */
	long sent;          /* messages sent (rpmsg_send) */
	long received;      /* answers delivered (hx_receive) */
};

/* Probes a new channel: module init (once), then the rpmsg driver's probe. */
struct hx_instance *hx_create(const struct hx_host_ops *ops, const struct hx_config *cfg, int *err);
/* fastrpc_rpmsg_remove: the DSP went away (calls in flight end with -EPIPE); files stay open. */
void hx_remove(struct hx_instance *in);
/* The DSP is back: probe the channel again (a new channel context; old files keep the old one). */
int hx_probe(struct hx_instance *in);
/* Removes the channel if probed and frees the instance (after every file was released). */
void hx_destroy(struct hx_instance *in);

/* misc_open of node `name` ("fastrpc-cdsp", "fastrpc-cdsp-secure"): 0 and *file, or -ENODEV
 * when the node is not registered (the DSP is down), or the driver's error. */
int hx_open(struct hx_instance *in, const char *name, void **file);
/* The file's last close: fops->release. */
int hx_release(struct hx_instance *in, void *file);
/* fops->unlocked_ioctl(file, cmd, arg): the driver's raw return (negative errno, -512 for
 * -ERESTARTSYS). */
long hx_ioctl(struct hx_instance *in, void *file, unsigned int cmd, unsigned long arg);
/* fastrpc_rpmsg_callback with one answer from the DSP (16-byte fastrpc_invoke_rsp). */
int hx_receive(struct hx_instance *in, const void *data, int len);
/* The host address of bus range [bus, bus+len) (DMA addresses the shim handed out, sid bits
 * above bit 31 ignored), or NULL when it is not inside one live range. */
void *hx_bus_to_host(unsigned long long bus, unsigned long long len);
/* A signal for thread `tid`: if it is blocked in wait_for_completion_interruptible the wait
 * returns -ERESTARTSYS and 1 is returned; otherwise nothing happens and 0 is returned. */
int hx_interrupt(int tid);
void hx_counts(struct hx_instance *in, struct hx_counts *out);
/* Live dma_alloc_coherent buffers of every channel in the process (each an anonymous mapping
 * of its own) and, in *bytes, their page-rounded size. */
long hx_coherent(unsigned long long *bytes);
/* Waits until the shim's worker has run every queued work (the driver's deferred context puts),
 * so that counts read afterwards include them. Must not be called from a host callback. */
void hx_flush_work(void);
/* Waits for answers being delivered to `in` right now (hx_receive calls in flight, whose
 * callback may have woken a caller before queueing its deferred put), then hx_flush_work. */
void hx_settle(struct hx_instance *in);
/* The kernel version the driver was taken from (the Makefile's VERSION.PATCHLEVEL.SUBLEVEL). */
const char *hx_kernel_version(void);

/* ---- Introspection (c/introspect.c): read-only views of the driver's own lists ------------
 * Each view walks the lists of one struct fastrpc_user under the driver's fl->lock (and the
 * shim's imported-buffer table lock, to name each map's buffer without touching a freed one),
 * copies what it finds, and calls the visitor with no lock held. */

/* One entry of a user's fl->maps (struct fastrpc_map). */
struct hx_map_info {
	int fd;                  /* map->fd */
	unsigned int attr;       /* map->attr */
	int refs;                /* map->refcount (0: being freed right now) */
	int has_key;             /* 1: map->buf is a live imported dma-buf and key is the host's key */
	unsigned long long key;  /* the host's dma-buf key of map->buf (dmabuf_get), when has_key */
	unsigned long long phys; /* map->phys (bus address, session id in bits 32..) */
	unsigned long long va;   /* map->va (host address of the buffer's bytes) */
	unsigned long long len;  /* map->len */
	unsigned long long size; /* map->size */
	unsigned long long raddr; /* map->raddr (the DSP address of a MEM_MAP, else 0) */
};

/* The lists of one struct fastrpc_user. */
struct hx_user_info {
	long pending; /* entries of fl->pending (invoke contexts still on the file) */
	long mmaps;   /* entries of fl->mmaps (FASTRPC_IOCTL_MMAP buffers) */
	long maps;    /* entries of fl->maps (all of them are passed to the visitor) */
	int init_mem; /* 1: fl->init_mem is set (a process created by INIT_CREATE) */
	int tgid;     /* fl->tgid */
};

/* Called with no lock held; the pointers are valid for the call only. */
typedef void (*hx_user_visit)(void *arg, const struct hx_user_info *user, const struct hx_map_info *maps,
			      long nmaps);

/* The lists of an open file's user: 0 after one visit, -EBADF when the file has no user,
 * -ENOMEM. */
int hx_file_info(struct hx_instance *in, void *file, hx_user_visit visit, void *arg);
/* Every user of `in` whose file was released (hx_release returned) but which the driver has not
 * freed yet, oldest open first: one visit each; returns how many were visited, or -ENOMEM.
 * Each user is pinned with a reference for its visit; a put that might be the last one runs on
 * the shim's worker (hx_flush_work), so the driver's free never runs on the caller. */
long hx_leaked(struct hx_instance *in, hx_user_visit visit, void *arg);
/* How many users hx_leaked would visit (from the shim's bookkeeping, nothing dereferenced). */
long hx_leaked_users(struct hx_instance *in);

#ifdef __cplusplus
}
#endif
#endif
