/*
 * hexrpc-linux: read-only views of what Linux's drivers/misc/fastrpc.c holds (hx_host.h,
 * "Introspection").
 *
 * The driver's structures are private to its file, so this translation unit *is* the driver:
 * it includes fastrpc.c as extracted into the build directory (build.rs compiles the driver only
 * through this file), unchanged, and adds functions that walk the driver's own lists with the
 * driver's own locks. Nothing of the driver is copied here.
 *
 * Rules kept here:
 *  - a user's lists are read under fl->lock, as the driver reads them; a map's buffer is named
 *    through the shim's imported-buffer table (locked after fl->lock), never by dereferencing
 *    map->buf, which a map being freed may already have dropped;
 *  - a released user is pinned with a reference taken while the shim's users table guarantees
 *    its memory is live; if our put might be the last one it runs on the shim's worker, so the
 *    driver's free (and the host callbacks it makes) never runs on the caller;
 *  - visitors are called with no lock held.
 */
#include "fastrpc.c"

#include "hx_host.h"

#include <stdlib.h>

struct ix_maps {
	struct hx_map_info *v;
	long n, cap;
	int oom;
};

static void ix_push(struct ix_maps *m, const struct hx_map_info *mi)
{
	if (m->oom)
		return;
	if (m->n == m->cap) {
		long cap = m->cap ? m->cap * 2 : 8;
		struct hx_map_info *v = realloc(m->v, (size_t)cap * sizeof(*v));

		if (!v) {
			m->oom = 1;
			return;
		}
		m->v = v;
		m->cap = cap;
	}
	m->v[m->n++] = *mi;
}

/* fl must be pinned (an open file's reference or one of ours). */
static int ix_snapshot(struct fastrpc_user *fl, struct hx_user_info *u, struct ix_maps *m)
{
	struct fastrpc_invoke_ctx *ctx;
	struct fastrpc_buf *buf;
	struct fastrpc_map *map;

	memset(u, 0, sizeof(*u));
	spin_lock(&fl->lock);
	list_for_each_entry(ctx, &fl->pending, node)
		u->pending++;
	list_for_each_entry(buf, &fl->mmaps, node)
		u->mmaps++;
	kshim_bufs_lock();
	list_for_each_entry(map, &fl->maps, node) {
		struct hx_map_info mi;

		memset(&mi, 0, sizeof(mi));
		mi.fd = map->fd;
		mi.attr = map->attr;
		mi.refs = __atomic_load_n(&map->refcount.refcount, __ATOMIC_SEQ_CST);
		mi.phys = map->phys;
		mi.va = (unsigned long long)(uintptr_t)map->va;
		mi.len = map->len;
		mi.size = map->size;
		mi.raddr = map->raddr;
		/* refs > 0 read with the table locked: the map's reference on its buffer was not
		 * dropped yet, so a table entry equal to map->buf is that buffer (not a new one at a
		 * reused address) */
		if (mi.refs > 0)
			mi.has_key = kshim_imported_key(map->buf, &mi.key);
		ix_push(m, &mi);
	}
	kshim_bufs_unlock();
	u->tgid = fl->tgid;
	spin_unlock(&fl->lock);
	u->init_mem = __atomic_load_n(&fl->init_mem, __ATOMIC_SEQ_CST) != NULL;
	u->maps = m->n;
	return m->oom ? -ENOMEM : 0;
}

int hx_file_info(struct hx_instance *in, void *file, hx_user_visit visit, void *arg)
{
	struct file *f = file;
	struct fastrpc_user *fl = f ? f->private_data : NULL;
	struct hx_user_info u;
	struct ix_maps m = { 0 };
	int r;

	(void)in;
	if (!fl)
		return -EBADF;
	r = ix_snapshot(fl, &u, &m);
	if (r == 0)
		visit(arg, &u, m.v, m.n);
	free(m.v);
	return r;
}

struct ix_pins {
	struct fastrpc_user **v;
	long n, cap;
	int oom;
};

/* Under the shim's users table lock: fl is not freed yet, but may be being torn down. */
static void ix_pin(void *p, void *arg)
{
	struct fastrpc_user *fl = p;
	struct ix_pins *pins = arg;

	if (pins->n == pins->cap) {
		long cap = pins->cap ? pins->cap * 2 : 8;
		struct fastrpc_user **v = realloc(pins->v, (size_t)cap * sizeof(*v));

		if (!v) {
			pins->oom = 1;
			return;
		}
		pins->v = v;
		pins->cap = cap;
	}
	/* 0: fastrpc_user_free is running; it is not ours to look at */
	if (kref_get_unless_zero(&fl->refcount))
		pins->v[pins->n++] = fl;
}

struct ix_put {
	struct work_struct work;
	struct fastrpc_user *fl;
};

static void ix_put_work(struct work_struct *w)
{
	struct ix_put *p = container_of(w, struct ix_put, work);

	fastrpc_user_put(p->fl);
	free(p);
}

static void ix_unpin(struct fastrpc_user *fl)
{
	int v = __atomic_load_n(&fl->refcount.refcount, __ATOMIC_SEQ_CST);
	struct ix_put *p;

	while (v > 1)
		if (__atomic_compare_exchange_n(&fl->refcount.refcount, &v, v - 1, false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			return;
	/* ours may be the last reference: the driver's free runs on the worker, like its own
	 * deferred context puts */
	p = calloc(1, sizeof(*p));
	if (!p) {
		fastrpc_user_put(fl);
		return;
	}
	INIT_WORK(&p->work, ix_put_work);
	p->fl = fl;
	schedule_work(&p->work);
}

long hx_leaked(struct hx_instance *in, hx_user_visit visit, void *arg)
{
	struct ix_pins pins = { 0 };
	long k, seen = 0;
	int oom;

	kshim_users_released(in, ix_pin, &pins);
	oom = pins.oom;
	for (k = 0; k < pins.n; k++) {
		struct hx_user_info u;
		struct ix_maps m = { 0 };

		if (ix_snapshot(pins.v[k], &u, &m) == 0) {
			visit(arg, &u, m.v, m.n);
			seen++;
		} else {
			oom = 1;
		}
		free(m.v);
		ix_unpin(pins.v[k]);
	}
	free(pins.v);
	return oom ? -ENOMEM : seen;
}
