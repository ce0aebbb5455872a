/*
 * hexrpc-linux kernel shim: what the shim's own files (kshim.c, kshim_sync.c, kshim_mem.c,
 * kshim_dma.c, kshim_dev.c, kshim_file.c) share among themselves. Neither the driver nor
 * c/introspect.c includes it. Every name declared here that is not the kernel's or hx_host.h's
 * starts with kshim_, so it cannot clash with a kernel symbol.
 */
#ifndef KSHIM_INTERNAL_H
#define KSHIM_INTERNAL_H
#include "kshim.h"
#include "hx_host.h"

#include <pthread.h>

/* ------------------------------------------------------------------------------------------ */
/* Instances                                                                                  */

struct device_node {
	const char *name;
	const char *compatible;
	const char *label; /* NULL: no "label" */
	int non_secure;    /* "qcom,non-secure-domain" present */
	int has_reg;
	u32 reg;
	struct device_node *child, *sibling;
};

struct rpmsg_endpoint {
	struct hx_instance *in;
};

struct kshim_rpdev {
	struct rpmsg_device rp;
	struct rpmsg_endpoint ept;
	struct kshim_rpdev *next;
};

struct kshim_pdev {
	struct platform_device pd;
	int registered;
	struct kshim_pdev *next;
};

struct hx_instance {
	struct hx_host_ops ops;
	struct hx_config cfg;
	pthread_rwlock_t state; /* write: probe/remove; read: receive */
	struct device_node root;
	struct device_node *cbs;
	struct rpmsg_device *rpdev;  /* the probed rpmsg device, NULL while removed */
	struct kshim_rpdev *rpdevs;  /* every rpmsg device made (the driver may keep pointers) */
	struct kshim_pdev *pdevs;    /* every platform device made */
	long contexts, attachments, dmabufs, coherent, users, sent, received;
	/* The remove gate (see kshim_gate_enter): threads inside an entry point and not blocked in a
	 * completion wait, and whether a remove is waiting for them. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	int active;
	int removing;
};

/* ------------------------------------------------------------------------------------------ */
/* Shared helpers (the file that defines each is named)                                       */

/* kshim.c */
extern __thread struct hx_instance *kshim_cur; /* the channel whose entry point this thread is in */
extern long kshim_allocs; /* live kzalloc/kcalloc/devm_* allocations, process-wide */
void kshim_count(long *c, long d);
void kshim_gate_enter(struct hx_instance *in);
void kshim_gate_leave(struct hx_instance *in);
struct hx_instance *kshim_gate_park(void);
void kshim_gate_unpark(struct hx_instance *in);

/* kshim_sync.c */
int kshim_gettid(void);

/* kshim_mem.c */
void kshim_devres_release_all(struct device *d);

/* kshim_file.c */
void kshim_users_forget(const void *p);
#endif
