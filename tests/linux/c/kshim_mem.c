/*
 * hexrpc-linux kernel shim: allocation (counted), devm allocations, idr, sort; current, the
 * address space, user copies. See kshim.c for the overview.
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/uio.h>

/* ------------------------------------------------------------------------------------------ */
/* Allocation                                                                                 */

void *kzalloc(size_t n, gfp_t f)
{
	void *p = calloc(1, n ? n : 1);

	(void)f;
	if (p)
		kshim_count(&kshim_allocs, 1);
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
		kshim_count(&kshim_allocs, 1);
	return p;
}

void kfree(const void *p)
{
	if (!p)
		return;
	kshim_users_forget(p);
	kshim_count(&kshim_allocs, -1);
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
	kshim_count(&kshim_allocs, 1);
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

void kshim_devres_release_all(struct device *d)
{
	struct kshim_devres *r = d->kshim_devres, *n;

	d->kshim_devres = NULL;
	for (; r; r = n) {
		n = r->next;
		kshim_count(&kshim_allocs, -1);
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
	x->owner = kshim_cur;
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
				kshim_count(&x->owner->contexts, -1);
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
		kshim_count(&x->owner->contexts, 1);
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
		kshim_count(&x->owner->contexts, -1);
	return p;
}

void sort(void *base, size_t num, size_t size, int (*cmp)(const void *, const void *),
	  void (*swap)(void *, void *, int))
{
	(void)swap;
	qsort(base, num, size, cmp);
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
/*
 * Bumped in the child of every fork: the forking thread's cached task (its tid, the parent's
 * tgid) is the parent's, and the child is a process of its own (its files name it).
 */
static int g_task_forks;
static __thread int t_task_forks;
static pthread_once_t g_task_atfork = PTHREAD_ONCE_INIT;

static void task_child(void)
{
	__atomic_add_fetch(&g_task_forks, 1, __ATOMIC_RELAXED);
}

static void task_atfork_register(void)
{
	if (pthread_atfork(NULL, NULL, task_child))
		abort();
}

struct task_struct *kshim_current(void)
{
	pthread_once(&g_task_atfork, task_atfork_register);
	if (!t_task_ready || t_task_forks != __atomic_load_n(&g_task_forks, __ATOMIC_RELAXED)) {
		t_task_forks = __atomic_load_n(&g_task_forks, __ATOMIC_RELAXED);
		char name[17] = { 0 };

		t_task.pid = kshim_gettid();
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
	struct hx_instance *in = kshim_cur;
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
