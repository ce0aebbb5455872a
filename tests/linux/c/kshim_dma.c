/*
 * hexrpc-linux kernel shim: fake 32-bit bus addresses (hx_bus_to_host), DMA mapping of coherent
 * memory (hx_coherent), dma-buf import, export and attachments. See kshim.c for the overview.
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdlib.h>
#include <sys/mman.h>

#define BUS_BASE 0x10000000ULL
#define BUS_LIMIT 0x100000000ULL

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
		kshim_count(&owner->coherent, 1);
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
		kshim_count(&owner->coherent, -1);
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
	struct hx_instance *in = kshim_cur;
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
	kshim_count(&in->dmabufs, 1);
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
	kshim_count(&in->dmabufs, -1);
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
		kshim_count(&ka->owner->attachments, 1);
	return &ka->a;
}

void dma_buf_detach(struct dma_buf *b, struct dma_buf_attachment *a)
{
	struct kshim_attach *ka = container_of(a, struct kshim_attach, a);

	if (b->ops && b->ops->detach)
		b->ops->detach(b, a);
	if (ka->owner)
		kshim_count(&ka->owner->attachments, -1);
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
