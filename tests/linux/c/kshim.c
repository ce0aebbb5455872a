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
 */
#define _GNU_SOURCE
#include "kshim.h"
#include "hx_host.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#ifndef HX_KERNEL_VERSION
#define HX_KERNEL_VERSION "unknown"
#endif

_Static_assert(sizeof(pthread_mutex_t) <= sizeof(struct kshim_lock), "kshim_lock too small");

#define BUS_BASE 0x10000000ULL
#define BUS_LIMIT 0x100000000ULL

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
	/* The remove gate (see gate_enter): threads inside an entry point and not blocked in a
	 * completion wait, and whether a remove is waiting for them. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	int active;
	int removing;
};

static __thread struct hx_instance *t_cur; /* the channel whose entry point this thread is in */
static __thread struct hx_instance *t_gated; /* the channel this thread is counted active on */

/*
 * The remove gate. fastrpc_internal_invoke checks cctx->rpdev and fastrpc_invoke_send later
 * dereferences cctx->rpdev->ept without the channel lock: a fastrpc_rpmsg_remove between the
 * two (a DSP restart) is a NULL dereference in 6.1.192 (an oops on a device; a crash here). The
 * harness does not model that race: a remove waits (up to 2 s) until every thread inside an
 * entry point is blocked in a completion wait, and entry points wait while a remove runs. Every
 * other interleaving of remove and calls is left as it is.
 */
static void gate_enter(struct hx_instance *in)
{
	pthread_mutex_lock(&in->gate_lock);
	while (in->removing)
		pthread_cond_wait(&in->gate_cond, &in->gate_lock);
	in->active++;
	pthread_mutex_unlock(&in->gate_lock);
	t_gated = in;
}

static void gate_leave(struct hx_instance *in)
{
	t_gated = NULL;
	pthread_mutex_lock(&in->gate_lock);
	in->active--;
	pthread_cond_broadcast(&in->gate_cond);
	pthread_mutex_unlock(&in->gate_lock);
}

/* A gated thread about to block in a completion wait: it is past its send. */
static struct hx_instance *gate_park(void)
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

static void gate_unpark(struct hx_instance *in)
{
	if (in) {
		pthread_mutex_lock(&in->gate_lock);
		while (in->removing)
			pthread_cond_wait(&in->gate_cond, &in->gate_lock);
		in->active++;
		pthread_mutex_unlock(&in->gate_lock);
	}
}

static long g_allocs;

static void count(long *c, long d)
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
/* Lists, locks, krefs                                                                        */

static void list_insert(struct list_head *n, struct list_head *prev, struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

void list_add(struct list_head *n, struct list_head *h)
{
	list_insert(n, h, h->next);
}

void list_add_tail(struct list_head *n, struct list_head *h)
{
	list_insert(n, h->prev, h);
}

void list_del(struct list_head *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	/* like the kernel's poison: a second delete faults */
	e->next = NULL;
	e->prev = NULL;
}

static pthread_mutex_t *lock_of(struct kshim_lock *l)
{
	return (pthread_mutex_t *)(void *)l->opaque;
}

static void lock_init(struct kshim_lock *l)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_init(lock_of(l), NULL);
}

void spin_lock_init(spinlock_t *l)
{
	lock_init(&l->l);
}

void spin_lock(spinlock_t *l)
{
	pthread_mutex_lock(lock_of(&l->l));
}

void spin_unlock(spinlock_t *l)
{
	pthread_mutex_unlock(lock_of(&l->l));
}

void mutex_init(struct mutex *m)
{
	lock_init(&m->l);
}

void mutex_destroy(struct mutex *m)
{
	pthread_mutex_destroy(lock_of(&m->l));
}

void mutex_lock(struct mutex *m)
{
	pthread_mutex_lock(lock_of(&m->l));
}

void mutex_unlock(struct mutex *m)
{
	pthread_mutex_unlock(lock_of(&m->l));
}

void kref_init(struct kref *k)
{
	__atomic_store_n(&k->refcount, 1, __ATOMIC_SEQ_CST);
}

void kref_get(struct kref *k)
{
	__atomic_add_fetch(&k->refcount, 1, __ATOMIC_SEQ_CST);
}

int kref_get_unless_zero(struct kref *k)
{
	int v = __atomic_load_n(&k->refcount, __ATOMIC_SEQ_CST);

	while (v != 0) {
		if (__atomic_compare_exchange_n(&k->refcount, &v, v + 1, false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			return 1;
	}
	return 0;
}

int kref_put(struct kref *k, void (*release)(struct kref *))
{
	if (__atomic_sub_fetch(&k->refcount, 1, __ATOMIC_SEQ_CST) == 0) {
		release(k);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Allocation; the users table (fastrpc_user objects the driver has not freed yet)            */

enum user_state { USER_OPEN, USER_RELEASING, USER_RELEASED };

struct user_rec {
	const void *fl;
	struct hx_instance *in;
	unsigned long serial;  /* open order, never reused */
	enum user_state state; /* USER_RELEASED: hx_release returned, the driver still holds it */
	struct user_rec *next;
};

static pthread_mutex_t g_users_lock = PTHREAD_MUTEX_INITIALIZER;
static struct user_rec *g_users; /* newest first */
static unsigned long g_users_serial;

static void users_track(const void *fl, struct hx_instance *in)
{
	struct user_rec *r = calloc(1, sizeof(*r));

	if (!r)
		abort();
	r->fl = fl;
	r->in = in;
	r->state = USER_OPEN;
	pthread_mutex_lock(&g_users_lock);
	r->serial = ++g_users_serial;
	r->next = g_users;
	g_users = r;
	pthread_mutex_unlock(&g_users_lock);
	count(&in->users, 1);
}

static void users_forget(const void *p)
{
	struct user_rec **pp, *r = NULL;

	pthread_mutex_lock(&g_users_lock);
	for (pp = &g_users; *pp; pp = &(*pp)->next) {
		if ((*pp)->fl == p) {
			r = *pp;
			*pp = r->next;
			break;
		}
	}
	pthread_mutex_unlock(&g_users_lock);
	if (r) {
		count(&r->in->users, -1);
		free(r);
	}
}

/* hx_release, before the driver's release: the record of `fl` is releasing; returns its serial
 * (0: not tracked). The pointer is only compared, never dereferenced. */
static unsigned long users_releasing(const void *fl)
{
	struct user_rec *r;
	unsigned long serial = 0;

	pthread_mutex_lock(&g_users_lock);
	for (r = g_users; r; r = r->next) {
		if (r->fl == fl && r->state == USER_OPEN) {
			r->state = USER_RELEASING;
			serial = r->serial;
			break;
		}
	}
	pthread_mutex_unlock(&g_users_lock);
	return serial;
}

/* hx_release, after the driver's release: the record (if the driver did not free the user) is
 * released. Found by serial, so a new user at a reused address is never marked. */
static void users_released(unsigned long serial)
{
	struct user_rec *r;

	if (!serial)
		return;
	pthread_mutex_lock(&g_users_lock);
	for (r = g_users; r; r = r->next) {
		if (r->serial == serial) {
			r->state = USER_RELEASED;
			break;
		}
	}
	pthread_mutex_unlock(&g_users_lock);
}

void kshim_users_released(struct hx_instance *in, void (*fn)(void *fl, void *arg), void *arg)
{
	struct user_rec *r, **v = NULL;
	size_t n = 0, cap = 0, k;

	pthread_mutex_lock(&g_users_lock);
	for (r = g_users; r; r = r->next) {
		if (r->in != in || r->state != USER_RELEASED)
			continue;
		if (n == cap) {
			size_t c = cap ? cap * 2 : 8;
			struct user_rec **nv = realloc(v, c * sizeof(*nv));

			if (!nv)
				break;
			v = nv;
			cap = c;
		}
		v[n++] = r;
	}
	/* oldest first (the list is newest first) */
	for (k = n; k-- > 0;)
		fn((void *)v[k]->fl, arg);
	pthread_mutex_unlock(&g_users_lock);
	free(v);
}

long hx_leaked_users(struct hx_instance *in)
{
	struct user_rec *r;
	long n = 0;

	pthread_mutex_lock(&g_users_lock);
	for (r = g_users; r; r = r->next)
		if (r->in == in && r->state == USER_RELEASED)
			n++;
	pthread_mutex_unlock(&g_users_lock);
	return n;
}

void *kzalloc(size_t n, gfp_t f)
{
	void *p = calloc(1, n ? n : 1);

	(void)f;
	if (p)
		count(&g_allocs, 1);
	return p;
}

void *kcalloc(size_t n, size_t s, gfp_t f)
{
	void *p;

	(void)f;
	if (s && n > (size_t)-1 / s)
		return NULL;
	p = calloc(n ? n : 1, s ? s : 1);
	if (p)
		count(&g_allocs, 1);
	return p;
}

void kfree(const void *p)
{
	if (!p)
		return;
	users_forget(p);
	count(&g_allocs, -1);
	free((void *)p);
}

struct kshim_devres {
	struct kshim_devres *next;
	_Alignas(16) unsigned char data[];
};

void *devm_kzalloc(struct device *d, size_t n, gfp_t f)
{
	struct kshim_devres *r = calloc(1, sizeof(*r) + n);

	(void)f;
	if (!r)
		return NULL;
	count(&g_allocs, 1);
	r->next = d->kshim_devres;
	d->kshim_devres = r;
	return r->data;
}

char *devm_kasprintf(struct device *d, gfp_t f, const char *fmt, ...)
{
	va_list ap;
	int n;
	char *s;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	s = devm_kzalloc(d, (size_t)n + 1, f);
	if (!s)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

static void devres_release_all(struct device *d)
{
	struct kshim_devres *r = d->kshim_devres, *n;

	d->kshim_devres = NULL;
	for (; r; r = n) {
		n = r->next;
		count(&g_allocs, -1);
		free(r);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* idr: a slot table per idr, cyclic allocation like the kernel's                             */

struct kshim_idr {
	void **slots;
	int cap;
	int next;
	struct hx_instance *owner; /* counts live ids as the channel's contexts */
};

void idr_init(struct idr *i)
{
	struct kshim_idr *x = calloc(1, sizeof(*x));

	if (!x)
		abort();
	x->owner = t_cur;
	i->impl = x;
}

void idr_destroy(struct idr *i)
{
	struct kshim_idr *x = i->impl;
	int k;

	if (!x)
		return;
	if (x->owner)
		for (k = 0; k < x->cap; k++)
			if (x->slots[k])
				count(&x->owner->contexts, -1);
	free(x->slots);
	free(x);
	i->impl = NULL;
}

static int idr_scan(struct kshim_idr *x, int from, int to)
{
	int k;

	for (k = from; k < to; k++)
		if (k >= x->cap || !x->slots[k])
			return k;
	return -1;
}

int idr_alloc_cyclic(struct idr *i, void *p, int start, int end, gfp_t f)
{
	struct kshim_idr *x = i->impl;
	int from, id;

	(void)f;
	if (start < 0)
		return -EINVAL;
	if (end <= 0)
		end = 1 << 20;
	if (start >= end)
		return -ENOSPC;
	from = x->next < start || x->next >= end ? start : x->next;
	id = idr_scan(x, from, end);
	if (id < 0)
		id = idr_scan(x, start, from);
	if (id < 0)
		return -ENOSPC;
	if (id >= x->cap) {
		int cap = x->cap ? x->cap : 64;
		void **s;

		while (cap <= id)
			cap *= 2;
		s = realloc(x->slots, (size_t)cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		memset(s + x->cap, 0, (size_t)(cap - x->cap) * sizeof(*s));
		x->slots = s;
		x->cap = cap;
	}
	x->slots[id] = p;
	x->next = id + 1;
	if (x->owner)
		count(&x->owner->contexts, 1);
	return id;
}

void *idr_find(struct idr *i, unsigned long id)
{
	struct kshim_idr *x = i->impl;

	if (!x || id >= (unsigned long)x->cap)
		return NULL;
	return x->slots[id];
}

void *idr_remove(struct idr *i, unsigned long id)
{
	struct kshim_idr *x = i->impl;
	void *p;

	if (!x || id >= (unsigned long)x->cap)
		return NULL;
	p = x->slots[id];
	x->slots[id] = NULL;
	if (p && x->owner)
		count(&x->owner->contexts, -1);
	return p;
}

void sort(void *base, size_t num, size_t size, int (*cmp)(const void *, const void *),
	  void (*swap)(void *, void *, int))
{
	(void)swap;
	qsort(base, num, size, cmp);
}

/* ------------------------------------------------------------------------------------------ */
/* Completions and interruption                                                               */

struct waiter {
	int tid;
	int interrupted;
	struct waiter *next;
};

static pthread_mutex_t g_cmp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cmp_cond;
static pthread_once_t g_cmp_once = PTHREAD_ONCE_INIT;
static struct waiter *g_waiters;

static void cmp_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&g_cmp_cond, &a);
	pthread_condattr_destroy(&a);
}

static int gettid_now(void)
{
	return (int)syscall(SYS_gettid);
}

void init_completion(struct completion *c)
{
	pthread_once(&g_cmp_once, cmp_init);
	pthread_mutex_lock(&g_cmp_lock);
	c->done = 0;
	pthread_mutex_unlock(&g_cmp_lock);
}

void complete(struct completion *c)
{
	pthread_once(&g_cmp_once, cmp_init);
	pthread_mutex_lock(&g_cmp_lock);
	if (c->done != ~0u)
		c->done++;
	pthread_cond_broadcast(&g_cmp_cond);
	pthread_mutex_unlock(&g_cmp_lock);
}

int wait_for_completion_interruptible(struct completion *c)
{
	struct waiter w = { .tid = gettid_now() }, **pp;
	struct hx_instance *parked = gate_park();
	int ret;

	pthread_once(&g_cmp_once, cmp_init);
	pthread_mutex_lock(&g_cmp_lock);
	w.next = g_waiters;
	g_waiters = &w;
	while (!c->done && !w.interrupted)
		pthread_cond_wait(&g_cmp_cond, &g_cmp_lock);
	if (c->done) {
		c->done--;
		ret = 0;
	} else {
		ret = -ERESTARTSYS;
	}
	for (pp = &g_waiters; *pp; pp = &(*pp)->next) {
		if (*pp == &w) {
			*pp = w.next;
			break;
		}
	}
	pthread_mutex_unlock(&g_cmp_lock);
	gate_unpark(parked);
	return ret;
}

static unsigned long wait_for_completion_timeout_gated(struct completion *c, unsigned long timeout);

unsigned long wait_for_completion_timeout(struct completion *c, unsigned long timeout)
{
	struct hx_instance *parked = gate_park();
	unsigned long left = wait_for_completion_timeout_gated(c, timeout);

	gate_unpark(parked);
	return left;
}

static unsigned long wait_for_completion_timeout_gated(struct completion *c, unsigned long timeout)
{
	struct timespec now, dl;
	unsigned long left = timeout;

	/* The channel's clock for the driver's timed waits (hx_config.kernel_timeout_ms). */
	unsigned long long scaled_ms = (unsigned long long)timeout * 1000ULL / HZ;

	if (t_cur && t_cur->cfg.kernel_timeout_ms)
		scaled_ms = scaled_ms * t_cur->cfg.kernel_timeout_ms / 10000ULL;
	pthread_once(&g_cmp_once, cmp_init);
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)(scaled_ms / 1000ULL);
	dl.tv_nsec += (long)(scaled_ms % 1000ULL) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&g_cmp_lock);
	while (!c->done) {
		if (pthread_cond_timedwait(&g_cmp_cond, &g_cmp_lock, &dl) == ETIMEDOUT && !c->done) {
			pthread_mutex_unlock(&g_cmp_lock);
			return 0;
		}
	}
	c->done--;
	pthread_mutex_unlock(&g_cmp_lock);
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec < dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec < dl.tv_nsec)) {
		long long ms = (long long)(dl.tv_sec - now.tv_sec) * 1000 + (dl.tv_nsec - now.tv_nsec) / 1000000;

		left = ms > 0 ? (unsigned long)ms : 1;
	} else {
		left = 1;
	}
	return left ? left : 1;
}

int hx_interrupt(int tid)
{
	struct waiter *w;
	int hit = 0;

	pthread_once(&g_cmp_once, cmp_init);
	pthread_mutex_lock(&g_cmp_lock);
	for (w = g_waiters; w; w = w->next) {
		if (w->tid == tid && !w->interrupted) {
			w->interrupted = 1;
			hit = 1;
		}
	}
	if (hit)
		pthread_cond_broadcast(&g_cmp_cond);
	pthread_mutex_unlock(&g_cmp_lock);
	return hit;
}

/* ------------------------------------------------------------------------------------------ */
/* Work queue: one worker thread                                                              */

static pthread_mutex_t g_work_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_work_idle = PTHREAD_COND_INITIALIZER;
static struct work_struct *g_work_head, *g_work_tail;
static int g_work_running;
static pthread_t g_worker;
static pthread_once_t g_work_once = PTHREAD_ONCE_INIT;

static void *worker_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "kshim-worker", 0, 0, 0);
	pthread_mutex_lock(&g_work_lock);
	for (;;) {
		struct work_struct *w;

		while (!g_work_head)
			pthread_cond_wait(&g_work_cond, &g_work_lock);
		w = g_work_head;
		g_work_head = w->kshim_next;
		if (!g_work_head)
			g_work_tail = NULL;
		w->kshim_next = NULL;
		w->kshim_pending = 0;
		g_work_running = 1;
		pthread_mutex_unlock(&g_work_lock);
		t_cur = NULL;
		w->func(w); /* may free w */
		pthread_mutex_lock(&g_work_lock);
		g_work_running = 0;
		if (!g_work_head)
			pthread_cond_broadcast(&g_work_idle);
	}
	return NULL;
}

static void worker_start(void)
{
	pthread_attr_t a;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&g_worker, &a, worker_main, NULL))
		abort();
	pthread_attr_destroy(&a);
}

bool schedule_work(struct work_struct *w)
{
	pthread_once(&g_work_once, worker_start);
	pthread_mutex_lock(&g_work_lock);
	if (w->kshim_pending) {
		pthread_mutex_unlock(&g_work_lock);
		return false;
	}
	w->kshim_pending = 1;
	w->kshim_next = NULL;
	if (g_work_tail)
		g_work_tail->kshim_next = w;
	else
		g_work_head = w;
	g_work_tail = w;
	pthread_cond_signal(&g_work_cond);
	pthread_mutex_unlock(&g_work_lock);
	return true;
}

void hx_flush_work(void)
{
	pthread_once(&g_work_once, worker_start);
	if (pthread_equal(pthread_self(), g_worker))
		return;
	pthread_mutex_lock(&g_work_lock);
	while (g_work_head || g_work_running)
		pthread_cond_wait(&g_work_idle, &g_work_lock);
	pthread_mutex_unlock(&g_work_lock);
}

/* ------------------------------------------------------------------------------------------ */
/* current, address space, user copies                                                       */

struct mm_struct {
	int unused;
};

static struct mm_struct g_mm;
static __thread struct task_struct t_task;
static __thread int t_task_ready;
static __thread struct vm_area_struct t_vma;

struct task_struct *kshim_current(void)
{
	if (!t_task_ready) {
		char name[17] = { 0 };

		t_task.pid = gettid_now();
		t_task.tgid = getpid();
		if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0 || !name[0])
			strcpy(name, "hexrpc");
		memcpy(t_task.comm, name, sizeof(t_task.comm) - 1);
		t_task.comm[sizeof(t_task.comm) - 1] = 0;
		t_task.mm = &g_mm;
		t_task_ready = 1;
	}
	return &t_task;
}

void mmap_read_lock(struct mm_struct *mm)
{
	(void)mm;
}

void mmap_read_unlock(struct mm_struct *mm)
{
	(void)mm;
}

struct vm_area_struct *vma_lookup(struct mm_struct *mm, unsigned long addr)
{
	struct hx_instance *in = t_cur;
	unsigned long long s = 0, e = 0;

	(void)mm;
	if (!in || !in->ops.vma_lookup)
		return NULL;
	if (in->ops.vma_lookup(in->ops.ctx, addr, &s, &e) != 1)
		return NULL;
	t_vma.vm_start = (unsigned long)s;
	t_vma.vm_end = (unsigned long)e;
	t_vma.vm_pgoff = 0;
	return &t_vma;
}

static __thread int t_pipe[2] = { -1, -1 };

/* Checked copy through a pipe: the kernel validates both pointers of read/write (EFAULT). */
static unsigned long pipe_copy(void *to, const void *from, unsigned long n)
{
	unsigned long off = 0;
	char junk[256];

	if (t_pipe[0] < 0 && pipe2(t_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		return n;
	while (off < n) {
		size_t c = n - off > 4096 ? 4096 : n - off;
		ssize_t w = write(t_pipe[1], (const char *)from + off, c);
		ssize_t r;

		if (w <= 0)
			return n - off;
		r = read(t_pipe[0], (char *)to + off, (size_t)w);
		if (r != w) {
			while (read(t_pipe[0], junk, sizeof(junk)) > 0)
				;
			return n - off;
		}
		off += (unsigned long)w;
	}
	return 0;
}

unsigned long copy_from_user(void *to, const void *from, unsigned long n)
{
	struct iovec l = { to, n }, r = { (void *)from, n };
	ssize_t got;

	if (!n)
		return 0;
	got = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
	if (got >= 0)
		return n - (unsigned long)got;
	if (errno == EFAULT)
		return n;
	return pipe_copy(to, from, n);
}

unsigned long copy_to_user(void *to, const void *from, unsigned long n)
{
	struct iovec l = { (void *)from, n }, r = { to, n };
	ssize_t got;

	if (!n)
		return 0;
	got = process_vm_writev(getpid(), &l, 1, &r, 1, 0);
	if (got >= 0)
		return n - (unsigned long)got;
	if (errno == EFAULT)
		return n;
	return pipe_copy(to, from, n);
}

/* ------------------------------------------------------------------------------------------ */
/* Bus addresses                                                                              */

enum bus_kind { BUS_COHERENT, BUS_DMABUF };

struct bus_range {
	u64 bus, len;
	void *host;
	struct hx_instance *owner;
	enum bus_kind kind;
};

static pthread_mutex_t g_bus_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bus_range *g_bus;
static size_t g_bus_n, g_bus_cap;
static u64 g_bus_next = BUS_BASE;

/* A free page-aligned range of len bytes; 0 when the 32-bit space is full. */
static u64 bus_map(void *host, u64 len, struct hx_instance *owner, enum bus_kind kind)
{
	u64 size = (len + PAGE_SIZE - 1) & ~(u64)(PAGE_SIZE - 1), cand;
	int wrapped = 0;
	size_t k;

	if (!size)
		size = PAGE_SIZE;
	pthread_mutex_lock(&g_bus_lock);
	cand = g_bus_next;
	for (;;) {
		int clash = 0;

		if (cand + size > BUS_LIMIT) {
			if (wrapped) {
				pthread_mutex_unlock(&g_bus_lock);
				return 0;
			}
			wrapped = 1;
			cand = BUS_BASE;
		}
		for (k = 0; k < g_bus_n; k++) {
			struct bus_range *b = &g_bus[k];
			u64 bend = b->bus + ((b->len + PAGE_SIZE - 1) & ~(u64)(PAGE_SIZE - 1));

			if (cand < bend && b->bus < cand + size) {
				cand = bend;
				clash = 1;
				break;
			}
		}
		if (!clash)
			break;
	}
	if (g_bus_n == g_bus_cap) {
		size_t cap = g_bus_cap ? g_bus_cap * 2 : 64;
		struct bus_range *nb = realloc(g_bus, cap * sizeof(*nb));

		if (!nb) {
			pthread_mutex_unlock(&g_bus_lock);
			return 0;
		}
		g_bus = nb;
		g_bus_cap = cap;
	}
	g_bus[g_bus_n++] = (struct bus_range){ cand, size, host, owner, kind };
	g_bus_next = cand + size;
	pthread_mutex_unlock(&g_bus_lock);
	if (kind == BUS_COHERENT && owner)
		count(&owner->coherent, 1);
	return cand;
}

static void *bus_unmap(u64 bus)
{
	size_t k;
	void *host = NULL;
	struct hx_instance *owner = NULL;
	int coherent = 0;

	bus &= 0xffffffffULL;
	pthread_mutex_lock(&g_bus_lock);
	for (k = 0; k < g_bus_n; k++) {
		if (g_bus[k].bus == bus) {
			host = g_bus[k].host;
			owner = g_bus[k].owner;
			coherent = g_bus[k].kind == BUS_COHERENT;
			g_bus[k] = g_bus[--g_bus_n];
			break;
		}
	}
	pthread_mutex_unlock(&g_bus_lock);
	if (coherent && owner)
		count(&owner->coherent, -1);
	return host;
}

void *hx_bus_to_host(unsigned long long bus, unsigned long long len)
{
	size_t k;
	void *host = NULL;

	bus &= 0xffffffffULL;
	pthread_mutex_lock(&g_bus_lock);
	for (k = 0; k < g_bus_n; k++) {
		struct bus_range *b = &g_bus[k];

		if (bus >= b->bus && bus - b->bus <= b->len && len <= b->len - (bus - b->bus)) {
			host = (char *)b->host + (bus - b->bus);
			break;
		}
	}
	pthread_mutex_unlock(&g_bus_lock);
	return host;
}

/* ------------------------------------------------------------------------------------------ */
/* DMA mapping                                                                                */

/* Live coherent memory, process-wide: each allocation is an anonymous mapping of its own, so
 * what the "kernel" holds is visible apart from the process's own memory (hx_coherent). */
static long g_coherent_count;
static long long g_coherent_bytes;

static size_t coherent_len(size_t size)
{
	size_t len = (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);

	return len ? len : PAGE_SIZE;
}

void *dma_alloc_coherent(struct device *d, size_t size, dma_addr_t *handle, gfp_t f)
{
	size_t len = coherent_len(size);
	void *p;
	u64 bus;

	(void)f;
	/* zeroed, as the kernel's coherent pages are */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	bus = bus_map(p, len, d ? d->kshim_owner : NULL, BUS_COHERENT);
	if (!bus) {
		munmap(p, len);
		return NULL;
	}
	__atomic_add_fetch(&g_coherent_count, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&g_coherent_bytes, (long long)len, __ATOMIC_SEQ_CST);
	*handle = bus;
	return p;
}

long hx_coherent(unsigned long long *bytes)
{
	if (bytes)
		*bytes = (unsigned long long)__atomic_load_n(&g_coherent_bytes, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&g_coherent_count, __ATOMIC_SEQ_CST);
}

void dma_free_coherent(struct device *d, size_t size, void *cpu, dma_addr_t handle)
{
	void *host;

	(void)d;
	host = bus_unmap(handle);
	if (host != cpu)
		kshim_dev_log(d, "err", "dma_free_coherent: bus 0x%llx does not map %p", handle, cpu);
	munmap(cpu, coherent_len(size));
	__atomic_sub_fetch(&g_coherent_count, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&g_coherent_bytes, (long long)coherent_len(size), __ATOMIC_SEQ_CST);
}

int dma_get_sgtable(struct device *d, struct sg_table *t, void *cpu, dma_addr_t handle, size_t size)
{
	(void)d;
	t->sgl = calloc(1, sizeof(*t->sgl));
	if (!t->sgl)
		return -ENOMEM;
	t->sgl->virt = cpu;
	t->sgl->dma_address = handle;
	t->sgl->length = (unsigned int)size;
	t->nents = t->orig_nents = 1;
	return 0;
}

void sg_free_table(struct sg_table *t)
{
	free(t->sgl);
	t->sgl = NULL;
	t->nents = t->orig_nents = 0;
}

int dma_map_sgtable(struct device *d, struct sg_table *t, enum dma_data_direction dir, unsigned long attrs)
{
	/* the entries already carry bus addresses (coherent memory); no IOMMU to program */
	(void)d;
	(void)t;
	(void)dir;
	(void)attrs;
	return 0;
}

void dma_unmap_sgtable(struct device *d, struct sg_table *t, enum dma_data_direction dir,
		       unsigned long attrs)
{
	(void)d;
	(void)t;
	(void)dir;
	(void)attrs;
}

int dma_mmap_coherent(struct device *d, struct vm_area_struct *v, void *cpu, dma_addr_t handle, size_t size)
{
	(void)d;
	(void)v;
	(void)cpu;
	(void)handle;
	(void)size;
	return -ENXIO;
}

int dma_set_mask(struct device *d, u64 mask)
{
	if (!d->dma_mask)
		d->dma_mask = &d->kshim_dma_mask;
	*d->dma_mask = mask;
	return 0;
}

int dma_set_mask_and_coherent(struct device *d, u64 mask)
{
	return dma_set_mask(d, mask);
}

/* ------------------------------------------------------------------------------------------ */
/* dma-buf                                                                                    */

struct kshim_attach {
	struct dma_buf_attachment a;
	struct hx_instance *owner;
	struct sg_table tbl;
	struct scatterlist sg;
};

static pthread_mutex_t g_buf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dma_buf *g_bufs; /* imported buffers, one per (channel, key) */

void kshim_bufs_lock(void)
{
	pthread_mutex_lock(&g_buf_lock);
}

void kshim_bufs_unlock(void)
{
	pthread_mutex_unlock(&g_buf_lock);
}

int kshim_imported_key(const struct dma_buf *b, u64 *key)
{
	struct dma_buf *x;

	/* compare first: b is only dereferenced once it is known to be a live table entry */
	for (x = g_bufs; x; x = x->kshim_next) {
		if (x == b) {
			*key = x->kshim_key;
			return 1;
		}
	}
	return 0;
}

struct dma_buf *dma_buf_get(int fd)
{
	struct hx_instance *in = t_cur;
	unsigned long long key = 0, size = 0;
	void *vaddr = NULL;
	struct dma_buf *b;
	int r;

	if (!in || !in->ops.dmabuf_get)
		return ERR_PTR(-EBADF);
	r = in->ops.dmabuf_get(in->ops.ctx, fd, &key, &size, &vaddr);
	if (r < 0)
		return ERR_PTR(r);
	if (r > 0 || key == 0)
		return ERR_PTR(-EINVAL);
	pthread_mutex_lock(&g_buf_lock);
	for (b = g_bufs; b; b = b->kshim_next)
		if (b->kshim_owner == in && b->kshim_key == key)
			break;
	if (b) {
		b->kshim_refs++;
	} else {
		b = calloc(1, sizeof(*b));
		if (!b) {
			pthread_mutex_unlock(&g_buf_lock);
			in->ops.dmabuf_put(in->ops.ctx, key);
			return ERR_PTR(-ENOMEM);
		}
		b->size = (size_t)size;
		b->kshim_refs = 1;
		b->kshim_owner = in;
		b->kshim_key = key;
		b->kshim_vaddr = vaddr;
		b->kshim_next = g_bufs;
		g_bufs = b;
	}
	pthread_mutex_unlock(&g_buf_lock);
	count(&in->dmabufs, 1);
	return b;
}

void dma_buf_put(struct dma_buf *b)
{
	struct hx_instance *in;
	struct dma_buf **pp;
	int last = 0;

	if (!b || IS_ERR(b))
		return;
	in = b->kshim_owner;
	if (!in) {
		/* exported by the driver */
		if (__atomic_sub_fetch(&b->kshim_refs, 1, __ATOMIC_SEQ_CST) == 0) {
			if (b->ops && b->ops->release)
				b->ops->release(b);
			free(b);
		}
		return;
	}
	pthread_mutex_lock(&g_buf_lock);
	if (--b->kshim_refs == 0) {
		last = 1;
		for (pp = &g_bufs; *pp; pp = &(*pp)->kshim_next) {
			if (*pp == b) {
				*pp = b->kshim_next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&g_buf_lock);
	in->ops.dmabuf_put(in->ops.ctx, b->kshim_key);
	count(&in->dmabufs, -1);
	if (last)
		free(b);
}

struct dma_buf *dma_buf_export(const struct dma_buf_export_info *info)
{
	struct dma_buf *b = calloc(1, sizeof(*b));

	if (!b)
		return ERR_PTR(-ENOMEM);
	b->size = info->size;
	b->ops = info->ops;
	b->priv = info->priv;
	b->kshim_refs = 1;
	return b;
}

int dma_buf_fd(struct dma_buf *b, int flags)
{
	/* The harness has no file table to install a driver-exported buffer in. */
	(void)b;
	(void)flags;
	return -ENFILE;
}

struct dma_buf_attachment *dma_buf_attach(struct dma_buf *b, struct device *d)
{
	struct kshim_attach *ka = calloc(1, sizeof(*ka));

	if (!ka)
		return ERR_PTR(-ENOMEM);
	ka->a.dmabuf = b;
	ka->a.dev = d;
	ka->owner = d ? d->kshim_owner : NULL;
	if (b->ops && b->ops->attach) {
		int r = b->ops->attach(b, &ka->a);

		if (r) {
			free(ka);
			return ERR_PTR(r);
		}
	}
	if (ka->owner)
		count(&ka->owner->attachments, 1);
	return &ka->a;
}

void dma_buf_detach(struct dma_buf *b, struct dma_buf_attachment *a)
{
	struct kshim_attach *ka = container_of(a, struct kshim_attach, a);

	if (b->ops && b->ops->detach)
		b->ops->detach(b, a);
	if (ka->owner)
		count(&ka->owner->attachments, -1);
	free(ka);
}

struct sg_table *dma_buf_map_attachment_unlocked(struct dma_buf_attachment *a, enum dma_data_direction dir)
{
	struct kshim_attach *ka = container_of(a, struct kshim_attach, a);
	struct dma_buf *b = a->dmabuf;
	u64 bus;

	if (!b->kshim_owner)
		return b->ops->map_dma_buf(a, dir);
	bus = bus_map(b->kshim_vaddr, b->size, ka->owner, BUS_DMABUF);
	if (!bus)
		return ERR_PTR(-ENOMEM);
	ka->sg.virt = b->kshim_vaddr;
	ka->sg.dma_address = bus;
	ka->sg.length = (unsigned int)b->size;
	ka->tbl.sgl = &ka->sg;
	ka->tbl.nents = ka->tbl.orig_nents = 1;
	return &ka->tbl;
}

void dma_buf_unmap_attachment_unlocked(struct dma_buf_attachment *a, struct sg_table *t,
				       enum dma_data_direction dir)
{
	struct dma_buf *b = a->dmabuf;

	if (!b->kshim_owner) {
		b->ops->unmap_dma_buf(a, t, dir);
		return;
	}
	bus_unmap(t->sgl->dma_address);
	t->sgl = NULL;
	t->nents = t->orig_nents = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Device tree, drivers, misc devices                                                         */

static struct platform_driver *g_pdrv;
static struct rpmsg_driver *g_rdrv;

int platform_driver_register(struct platform_driver *d)
{
	g_pdrv = d;
	return 0;
}

void platform_driver_unregister(struct platform_driver *d)
{
	if (g_pdrv == d)
		g_pdrv = NULL;
}

int register_rpmsg_driver(struct rpmsg_driver *d)
{
	g_rdrv = d;
	return 0;
}

void unregister_rpmsg_driver(struct rpmsg_driver *d)
{
	if (g_rdrv == d)
		g_rdrv = NULL;
}

static int matches(const struct of_device_id *table, const char *compatible)
{
	for (; table && table->compatible[0]; table++)
		if (!strcmp(table->compatible, compatible))
			return 1;
	return 0;
}

int of_property_read_u32(const struct device_node *n, const char *name, u32 *out)
{
	if (n && n->has_reg && !strcmp(name, "reg")) {
		*out = n->reg;
		return 0;
	}
	return -EINVAL;
}

int of_property_read_string(const struct device_node *n, const char *name, const char **out)
{
	if (n && n->label && !strcmp(name, "label")) {
		*out = n->label;
		return 0;
	}
	if (n && n->compatible && !strcmp(name, "compatible")) {
		*out = n->compatible;
		return 0;
	}
	return -EINVAL;
}

bool of_property_read_bool(const struct device_node *n, const char *name)
{
	return n && n->non_secure && !strcmp(name, "qcom,non-secure-domain");
}

int of_property_read_variable_u32_array(const struct device_node *n, const char *name, u32 *out,
					size_t min, size_t max)
{
	/* no u32 array properties in our tree ("qcom,vmids" is absent) */
	(void)n;
	(void)name;
	(void)out;
	(void)min;
	(void)max;
	return -EINVAL;
}

int of_platform_populate(struct device_node *root, const void *match, const void *lookup,
			 struct device *parent)
{
	struct hx_instance *in = parent->kshim_owner;
	struct device_node *c;

	(void)match;
	(void)lookup;
	for (c = root->child; c; c = c->sibling) {
		struct kshim_pdev *p = calloc(1, sizeof(*p));

		if (!p)
			return -ENOMEM;
		p->pd.dev.parent = parent;
		p->pd.dev.of_node = c;
		p->pd.dev.kshim_owner = in;
		p->registered = 1;
		p->next = in->pdevs;
		in->pdevs = p;
		if (g_pdrv && matches(g_pdrv->driver.of_match_table, c->compatible)) {
			if (g_pdrv->probe(&p->pd) == 0)
				p->pd.kshim_bound = 1;
			else
				devres_release_all(&p->pd.dev);
		}
	}
	return 0;
}

void of_platform_depopulate(struct device *parent)
{
	struct hx_instance *in = parent->kshim_owner;
	struct kshim_pdev *p;

	for (p = in->pdevs; p; p = p->next) {
		if (!p->registered || p->pd.dev.parent != parent)
			continue;
		if (p->pd.kshim_bound && g_pdrv && g_pdrv->remove)
			g_pdrv->remove(&p->pd);
		devres_release_all(&p->pd.dev);
		p->pd.kshim_bound = 0;
		p->registered = 0;
	}
}

struct misc_rec {
	struct hx_instance *in;
	struct miscdevice *m;
	struct misc_rec *next;
};

static pthread_mutex_t g_misc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct misc_rec *g_misc;

int misc_register(struct miscdevice *m)
{
	struct hx_instance *in = t_cur;
	struct misc_rec *r;

	if (!in || !m->name)
		return -EINVAL;
	pthread_mutex_lock(&g_misc_lock);
	for (r = g_misc; r; r = r->next) {
		if (r->in == in && !strcmp(r->m->name, m->name)) {
			pthread_mutex_unlock(&g_misc_lock);
			return -EBUSY;
		}
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&g_misc_lock);
		return -ENOMEM;
	}
	r->in = in;
	r->m = m;
	r->next = g_misc;
	g_misc = r;
	pthread_mutex_unlock(&g_misc_lock);
	return 0;
}

void misc_deregister(struct miscdevice *m)
{
	struct misc_rec **pp, *r;

	pthread_mutex_lock(&g_misc_lock);
	for (pp = &g_misc; *pp; pp = &(*pp)->next) {
		if ((*pp)->m == m) {
			r = *pp;
			*pp = r->next;
			free(r);
			break;
		}
	}
	pthread_mutex_unlock(&g_misc_lock);
}

int rpmsg_send(struct rpmsg_endpoint *ept, void *data, int len)
{
	struct hx_instance *in = ept->in;
	int r;

	if (!in->ops.send)
		return -ENODEV;
	r = in->ops.send(in->ops.ctx, data, len);
	if (r == 0)
		count(&in->sent, 1);
	return r;
}

bool qcom_scm_is_available(void)
{
	return false;
}

int qcom_scm_assign_mem(u64 mem_addr, size_t mem_sz, unsigned int *src, const struct qcom_scm_vmperm *newvm,
			unsigned int dest_cnt)
{
	(void)mem_addr;
	(void)mem_sz;
	(void)src;
	(void)newvm;
	(void)dest_cnt;
	return -EINVAL;
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

int hx_probe(struct hx_instance *in)
{
	struct hx_instance *prev = t_cur;
	struct kshim_rpdev *d;
	int r;

	pthread_rwlock_wrlock(&in->state);
	if (in->rpdev) {
		pthread_rwlock_unlock(&in->state);
		return -EBUSY;
	}
	if (!g_rdrv || !matches(g_rdrv->drv.of_match_table, in->root.compatible)) {
		pthread_rwlock_unlock(&in->state);
		return -ENODEV;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		pthread_rwlock_unlock(&in->state);
		return -ENOMEM;
	}
	d->rp.dev.of_node = &in->root;
	d->rp.dev.kshim_owner = in;
	d->ept.in = in;
	d->rp.ept = &d->ept;
	d->next = in->rpdevs;
	in->rpdevs = d;
	t_cur = in;
	r = g_rdrv->probe(&d->rp);
	t_cur = prev;
	if (r)
		devres_release_all(&d->rp.dev);
	else
		in->rpdev = &d->rp;
	pthread_rwlock_unlock(&in->state);
	return r;
}

void hx_remove(struct hx_instance *in)
{
	struct hx_instance *prev = t_cur;
	struct timespec dl;

	/* Wait until no thread is between its rpdev check and its send (see gate_enter). */
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 2;
	pthread_mutex_lock(&in->gate_lock);
	in->removing++;
	while (in->active > 0)
		if (pthread_cond_timedwait(&in->gate_cond, &in->gate_lock, &dl) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&in->gate_lock);
	pthread_rwlock_wrlock(&in->state);
	if (in->rpdev) {
		t_cur = in;
		g_rdrv->remove(in->rpdev);
		devres_release_all(&in->rpdev->dev);
		in->rpdev = NULL;
		t_cur = prev;
	}
	pthread_rwlock_unlock(&in->state);
	pthread_mutex_lock(&in->gate_lock);
	in->removing--;
	pthread_cond_broadcast(&in->gate_cond);
	pthread_mutex_unlock(&in->gate_lock);
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

int hx_open(struct hx_instance *in, const char *name, void **file)
{
	struct hx_instance *prev = t_cur;
	struct misc_rec *r;
	struct file *f;
	int ret = 0;

	t_cur = in;
	pthread_mutex_lock(&g_misc_lock);
	for (r = g_misc; r; r = r->next)
		if (r->in == in && !strcmp(r->m->name, name))
			break;
	if (!r) {
		pthread_mutex_unlock(&g_misc_lock);
		t_cur = prev;
		return -ENODEV;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&g_misc_lock);
		t_cur = prev;
		return -ENOMEM;
	}
	/* what misc_open does: the file's private data is the miscdevice, then the node's open */
	f->private_data = r->m;
	f->kshim_fops = r->m->fops;
	if (f->kshim_fops->open)
		ret = f->kshim_fops->open(NULL, f);
	pthread_mutex_unlock(&g_misc_lock);
	t_cur = prev;
	if (ret) {
		free(f);
		return ret;
	}
	/* fastrpc_device_open leaves its fastrpc_user in private_data: count it until kfree */
	users_track(f->private_data, in);
	*file = f;
	return 0;
}

int hx_release(struct hx_instance *in, void *file)
{
	struct hx_instance *prev = t_cur;
	struct file *f = file;
	unsigned long serial;
	int r = 0;

	serial = users_releasing(f->private_data);
	gate_enter(in);
	t_cur = in;
	if (f->kshim_fops->release)
		r = f->kshim_fops->release(NULL, f);
	t_cur = prev;
	gate_leave(in);
	users_released(serial);
	free(f);
	return r;
}

long hx_ioctl(struct hx_instance *in, void *file, unsigned int cmd, unsigned long arg)
{
	struct hx_instance *prev = t_cur;
	struct file *f = file;
	long r;

	if (!f->kshim_fops->unlocked_ioctl)
		return -ENOTTY;
	gate_enter(in);
	t_cur = in;
	r = f->kshim_fops->unlocked_ioctl(f, cmd, arg);
	t_cur = prev;
	gate_leave(in);
	return r;
}

int hx_receive(struct hx_instance *in, const void *data, int len)
{
	int r;

	pthread_rwlock_rdlock(&in->state);
	if (!in->rpdev) {
		pthread_rwlock_unlock(&in->state);
		return -ENODEV;
	}
	r = g_rdrv->callback(in->rpdev, (void *)data, len, NULL, 0);
	if (r == 0)
		count(&in->received, 1);
	pthread_rwlock_unlock(&in->state);
	return r;
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
	out->allocations = __atomic_load_n(&g_allocs, __ATOMIC_SEQ_CST);
	out->sent = __atomic_load_n(&in->sent, __ATOMIC_SEQ_CST);
	out->received = __atomic_load_n(&in->received, __ATOMIC_SEQ_CST);
}
