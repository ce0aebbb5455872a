/*
 * hexrpc-linux kernel shim: lists, locks and krefs; completions and their interruption
 * (hx_interrupt); the work queue (schedule_work, hx_flush_work). See kshim.c for the overview.
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

_Static_assert(sizeof(pthread_mutex_t) <= sizeof(struct kshim_lock), "kshim_lock too small");

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

static void cmp_cond_init(void)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&g_cmp_cond, &a);
	pthread_condattr_destroy(&a);
}

/*
 * fork(): the parent's waiters did not come along, but the condition variable's copy still
 * counts them, and a broadcast in the child then waits for them forever (glibc's condition
 * variables wait for an old group of waiters to leave). The lock is held across the fork; the
 * child gets a fresh lock, condition variable and waiter list. As for the work queue, this is
 * the bench's need (a process holding a bench may fork), not a kernel's.
 */
static void cmp_prepare(void)
{
	pthread_mutex_lock(&g_cmp_lock);
}

static void cmp_parent(void)
{
	pthread_mutex_unlock(&g_cmp_lock);
}

static void cmp_child(void)
{
	pthread_mutex_init(&g_cmp_lock, NULL);
	cmp_cond_init();
	g_waiters = NULL;
}

static void cmp_init(void)
{
	cmp_cond_init();
	if (pthread_atfork(cmp_prepare, cmp_parent, cmp_child))
		abort();
}

int kshim_gettid(void)
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
	struct waiter w = { .tid = kshim_gettid() }, **pp;
	struct hx_instance *parked = kshim_gate_park();
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
	kshim_gate_unpark(parked);
	return ret;
}

static unsigned long wait_for_completion_timeout_gated(struct completion *c, unsigned long timeout);

unsigned long wait_for_completion_timeout(struct completion *c, unsigned long timeout)
{
	struct hx_instance *parked = kshim_gate_park();
	unsigned long left = wait_for_completion_timeout_gated(c, timeout);

	kshim_gate_unpark(parked);
	return left;
}

static unsigned long wait_for_completion_timeout_gated(struct completion *c, unsigned long timeout)
{
	struct timespec now, dl;
	unsigned long left = timeout;

	/* The channel's clock for the driver's timed waits (hx_config.kernel_timeout_ms). */
	unsigned long long scaled_ms = (unsigned long long)timeout * 1000ULL / HZ;

	if (kshim_cur && kshim_cur->cfg.kernel_timeout_ms)
		scaled_ms = scaled_ms * kshim_cur->cfg.kernel_timeout_ms / 10000ULL;
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
static int g_worker_started; /* under g_work_lock */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/*
 * fork(): only the forking thread comes along, so a child has no worker, and a copy of the
 * queue whose works belong to the parent's instances. The lock is held across the fork (so the
 * copy is consistent); the child gets a fresh lock and an empty queue, and starts a worker of
 * its own at its first work. A kernel has no fork of this kind: it exists so that a process
 * holding a bench can fork (a session's fork tests) without the child waiting forever.
 */
static void work_prepare(void)
{
	pthread_mutex_lock(&g_work_lock);
}

static void work_parent(void)
{
	pthread_mutex_unlock(&g_work_lock);
}

static void work_child(void)
{
	pthread_mutex_init(&g_work_lock, NULL);
	pthread_cond_init(&g_work_cond, NULL);
	pthread_cond_init(&g_work_idle, NULL);
	g_work_head = g_work_tail = NULL;
	g_work_running = 0;
	g_worker_started = 0;
}

static void atfork_register(void)
{
	if (pthread_atfork(work_prepare, work_parent, work_child))
		abort();
}

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
		kshim_cur = NULL;
		w->func(w); /* may free w */
		pthread_mutex_lock(&g_work_lock);
		g_work_running = 0;
		if (!g_work_head)
			pthread_cond_broadcast(&g_work_idle);
	}
	return NULL;
}

/* Starts this process's worker unless it runs; called with g_work_lock held. */
static void worker_start_locked(void)
{
	pthread_attr_t a;

	if (g_worker_started)
		return;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&g_worker, &a, worker_main, NULL))
		abort();
	pthread_attr_destroy(&a);
	g_worker_started = 1;
}

bool schedule_work(struct work_struct *w)
{
	pthread_once(&g_atfork_once, atfork_register);
	pthread_mutex_lock(&g_work_lock);
	worker_start_locked();
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
	pthread_once(&g_atfork_once, atfork_register);
	pthread_mutex_lock(&g_work_lock);
	worker_start_locked();
	if (pthread_equal(pthread_self(), g_worker)) {
		pthread_mutex_unlock(&g_work_lock);
		return;
	}
	while (g_work_head || g_work_running)
		pthread_cond_wait(&g_work_idle, &g_work_lock);
	pthread_mutex_unlock(&g_work_lock);
}
