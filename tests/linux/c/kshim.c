/*
 * hexrpc-linux kernel shim: just enough of the kernel, on pthreads, for Linux's
 * drivers/misc/fastrpc.c to run unchanged in a user process (see kshim.h and hx_host.h).
 *
 * What is modelled, and how:
 *  - memory: kzalloc/kcalloc/devm_* on calloc, counted process-wide; devm allocations are freed
 *    when the device is unbound (driver remove, failed probe);
 *  - locks: spinlock_t and struct mutex are plain pthread mutexes (not recursive); kref is atomic;
 *  - completions share one mutex + condition variable; an interruptible wait ends with
 *    -ERESTARTSYS when hx_interrupt() names its thread (our stand-in for a signal);
 *  - schedule_work: one worker thread runs queued works in order;
 *  - current: the calling thread (pid = its tid, tgid = the process, comm = its name);
 *    vma_lookup asks the host of the channel whose entry point the thread is in;
 *  - user copies: process_vm_readv/writev on our own process, so a bad user pointer gives a
 *    short copy (-EFAULT in the driver) instead of a crash; where those calls are missing
 *    (qemu user mode) a pipe does the same checked copy;
 *  - DMA: coherent memory is page-aligned zeroed host memory with a fake 32-bit bus address from
 *    a page-granular allocator (never 0, never reused while live); every live bus range is in one
 *    table that hx_bus_to_host reads (that is how a simulated DSP reaches the payload);
 *  - dma-buf: an imported buffer (dma_buf_get) is resolved by the host; one struct dma_buf per
 *    (channel, host key), shared by every reference, so the driver's pointer comparisons hold;
 *    mapping an attachment gives a one-entry scatter list with a fresh bus range;
 *  - device tree: a CDSP node ("qcom,fastrpc", label "cdsp") with one compute-cb child per
 *    session ("reg" = 1..n), no "qcom,vmids" (so the secure channel manager is never needed);
 *  - misc devices: per-channel registry of node names; hx_open does what misc_open does.
 *
 * Not faithful (by design):
 *  - dma_buf_fd cannot hand out a descriptor here (the driver's exported buffers are not files of
 *    this process), so it fails with -ENFILE and FASTRPC_IOCTL_ALLOC_DMA_BUFF ends with the
 *    driver's -EINVAL after freeing the buffer;
 *  - dma_mmap_coherent fails with -ENXIO (only reachable by mmap of an exported buffer);
 *  - no preemption or interrupt context: "spin" locks may sleep, callbacks run on the caller's
 *    thread (hx_receive), and there is no memory protection between "kernel" and "user".
 *
 * The shim is split by responsibility; kshim_internal.h holds what its files share:
 *  - kshim.c: the channel instance (hx_create/hx_destroy/hx_settle/hx_counts), the remove gate,
 *    logging;
 *  - kshim_sync.c: lists, locks, krefs, completions and interruption, the work queue;
 *  - kshim_mem.c: allocation, devres, idr, sort; current, the address space, user copies;
 *  - kshim_dma.c: bus addresses, DMA mapping, dma-buf;
 *  - kshim_dev.c: the device tree, platform and rpmsg drivers, the rpmsg channel
 *    (hx_probe/hx_remove/hx_receive, rpmsg_send), the absent secure channel manager;
 *  - kshim_file.c: the users table, misc devices, the file entry points (hx_open/hx_release/
 *    hx_ioctl).
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef HX_KERNEL_VERSION
#define HX_KERNEL_VERSION "unknown"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Instances                                                                                  */

__thread struct hx_instance *kshim_cur; /* the channel whose entry point this thread is in */
static __thread struct hx_instance *t_gated; /* the channel this thread is counted active on */

/*
 * The remove gate. fastrpc_internal_invoke checks cctx->rpdev and fastrpc_invoke_send later
 * dereferences cctx->rpdev->ept without the channel lock: a fastrpc_rpmsg_remove between the
 * two (a DSP restart) is a NULL dereference in 6.1.192 (an oops on a device; a crash here). The
 * harness does not model that race: a remove waits (up to 2 s) until every thread inside an
 * entry point is blocked in a completion wait, and entry points wait while a remove runs. Every
 * other interleaving of remove and calls is left as it is.
 */
void kshim_gate_enter(struct hx_instance *in)
{
	pthread_mutex_lock(&in->gate_lock);
	while (in->removing)
		pthread_cond_wait(&in->gate_cond, &in->gate_lock);
	in->active++;
	pthread_mutex_unlock(&in->gate_lock);
	t_gated = in;
}

void kshim_gate_leave(struct hx_instance *in)
{
	t_gated = NULL;
	pthread_mutex_lock(&in->gate_lock);
	in->active--;
	pthread_cond_broadcast(&in->gate_cond);
	pthread_mutex_unlock(&in->gate_lock);
}

/* A gated thread about to block in a completion wait: it is past its send. */
struct hx_instance *kshim_gate_park(void)
{
	struct hx_instance *in = t_gated;

	if (in) {
		pthread_mutex_lock(&in->gate_lock);
		in->active--;
		pthread_cond_broadcast(&in->gate_cond);
		pthread_mutex_unlock(&in->gate_lock);
	}
	return in;
}

void kshim_gate_unpark(struct hx_instance *in)
{
	if (in) {
		pthread_mutex_lock(&in->gate_lock);
		while (in->removing)
			pthread_cond_wait(&in->gate_cond, &in->gate_lock);
		in->active++;
		pthread_mutex_unlock(&in->gate_lock);
	}
}

long kshim_allocs;

void kshim_count(long *c, long d)
{
	__atomic_add_fetch(c, d, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------------------------------ */
/* Logging                                                                                    */

static int log_enabled(void)
{
	static int on = -1;
	int v = __atomic_load_n(&on, __ATOMIC_RELAXED);

	if (v < 0) {
		v = getenv("HEXRPC_LINUX_LOG") != NULL;
		__atomic_store_n(&on, v, __ATOMIC_RELAXED);
	}
	return v;
}

void kshim_dev_log(const struct device *d, const char *lvl, const char *fmt, ...)
{
	va_list ap;
	size_t n = strlen(fmt);

	if (!log_enabled())
		return;
	fprintf(stderr, "[fastrpc %s %p] ", lvl, (const void *)d);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (n == 0 || fmt[n - 1] != '\n')
		fputc('\n', stderr);
}

/* ------------------------------------------------------------------------------------------ */
/* hx_host.h                                                                                  */

static pthread_once_t g_mod_once = PTHREAD_ONCE_INIT;
static int g_mod_err;

static void module_load(void)
{
	g_mod_err = kshim_module_init();
}

const char *hx_kernel_version(void)
{
	return HX_KERNEL_VERSION;
}

struct hx_instance *hx_create(const struct hx_host_ops *ops, const struct hx_config *cfg, int *err)
{
	struct hx_instance *in;
	unsigned int k;
	int r;

	pthread_once(&g_mod_once, module_load);
	if (g_mod_err) {
		*err = g_mod_err;
		return NULL;
	}
	if (!ops || !cfg || cfg->sessions < 1 || cfg->sessions > 13) {
		*err = -EINVAL;
		return NULL;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		*err = -ENOMEM;
		return NULL;
	}
	in->ops = *ops;
	in->cfg = *cfg;
	pthread_rwlock_init(&in->state, NULL);
	pthread_mutex_init(&in->gate_lock, NULL);
	pthread_cond_init(&in->gate_cond, NULL);
	in->root.name = "fastrpc";
	in->root.compatible = "qcom,fastrpc";
	in->root.label = "cdsp";
	in->root.non_secure = cfg->non_secure != 0;
	in->cbs = calloc(cfg->sessions, sizeof(*in->cbs));
	if (!in->cbs) {
		free(in);
		*err = -ENOMEM;
		return NULL;
	}
	/* children in "reg" order: of_platform_populate walks them first to last */
	for (k = cfg->sessions; k-- > 0;) {
		struct device_node *c = &in->cbs[k];

		c->name = "compute-cb";
		c->compatible = "qcom,fastrpc-compute-cb";
		c->has_reg = 1;
		c->reg = k + 1;
		c->sibling = in->root.child;
		in->root.child = c;
	}
	r = hx_probe(in);
	if (r) {
		hx_destroy(in);
		*err = r;
		return NULL;
	}
	*err = 0;
	return in;
}

void hx_destroy(struct hx_instance *in)
{
	struct kshim_rpdev *d, *dn;
	struct kshim_pdev *p, *pn;

	if (!in)
		return;
	hx_remove(in);
	hx_flush_work();
	/* Objects the driver still holds (e.g. the context of an interrupted call, which keeps its
	 * file's user alive in this kernel) point at our devices and counters: keep them. */
	if (__atomic_load_n(&in->contexts, __ATOMIC_SEQ_CST) || __atomic_load_n(&in->users, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&in->attachments, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&in->dmabufs, __ATOMIC_SEQ_CST) || __atomic_load_n(&in->coherent, __ATOMIC_SEQ_CST))
		return;
	for (d = in->rpdevs; d; d = dn) {
		dn = d->next;
		free(d);
	}
	for (p = in->pdevs; p; p = pn) {
		pn = p->next;
		free(p);
	}
	pthread_rwlock_destroy(&in->state);
	pthread_mutex_destroy(&in->gate_lock);
	pthread_cond_destroy(&in->gate_cond);
	free(in->cbs);
	free(in);
}

void hx_settle(struct hx_instance *in)
{
	pthread_rwlock_wrlock(&in->state);
	pthread_rwlock_unlock(&in->state);
	hx_flush_work();
}

void hx_counts(struct hx_instance *in, struct hx_counts *out)
{
	out->contexts = __atomic_load_n(&in->contexts, __ATOMIC_SEQ_CST);
	out->attachments = __atomic_load_n(&in->attachments, __ATOMIC_SEQ_CST);
	out->dmabufs = __atomic_load_n(&in->dmabufs, __ATOMIC_SEQ_CST);
	out->coherent = __atomic_load_n(&in->coherent, __ATOMIC_SEQ_CST);
	out->users = __atomic_load_n(&in->users, __ATOMIC_SEQ_CST);
	out->allocations = __atomic_load_n(&kshim_allocs, __ATOMIC_SEQ_CST);
	out->sent = __atomic_load_n(&in->sent, __ATOMIC_SEQ_CST);
	out->received = __atomic_load_n(&in->received, __ATOMIC_SEQ_CST);
}
