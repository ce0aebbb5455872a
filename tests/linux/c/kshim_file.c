/*
 * hexrpc-linux kernel shim: the users table (fastrpc_user objects the driver has not freed yet),
 * misc devices, and the file entry points hx_open, hx_release, hx_ioctl. See kshim.c for the
 * overview.
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------------------------ */
/* The users table (fastrpc_user objects the driver has not freed yet)                        */

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
	kshim_count(&in->users, 1);
}

void kshim_users_forget(const void *p)
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
		kshim_count(&r->in->users, -1);
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

/* ------------------------------------------------------------------------------------------ */
/* Misc devices                                                                               */

struct misc_rec {
	struct hx_instance *in;
	struct miscdevice *m;
	struct misc_rec *next;
};

static pthread_mutex_t g_misc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct misc_rec *g_misc;

int misc_register(struct miscdevice *m)
{
	struct hx_instance *in = kshim_cur;
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

/* ------------------------------------------------------------------------------------------ */
/* hx_host.h: files                                                                           */

int hx_open(struct hx_instance *in, const char *name, void **file)
{
	struct hx_instance *prev = kshim_cur;
	struct misc_rec *r;
	struct file *f;
	int ret = 0;

	kshim_cur = in;
	pthread_mutex_lock(&g_misc_lock);
	for (r = g_misc; r; r = r->next)
		if (r->in == in && !strcmp(r->m->name, name))
			break;
	if (!r) {
		pthread_mutex_unlock(&g_misc_lock);
		kshim_cur = prev;
		return -ENODEV;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&g_misc_lock);
		kshim_cur = prev;
		return -ENOMEM;
	}
	/* what misc_open does: the file's private data is the miscdevice, then the node's open */
	f->private_data = r->m;
	f->kshim_fops = r->m->fops;
	if (f->kshim_fops->open)
		ret = f->kshim_fops->open(NULL, f);
	pthread_mutex_unlock(&g_misc_lock);
	kshim_cur = prev;
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
	struct hx_instance *prev = kshim_cur;
	struct file *f = file;
	unsigned long serial;
	int r = 0;

	serial = users_releasing(f->private_data);
	kshim_gate_enter(in);
	kshim_cur = in;
	if (f->kshim_fops->release)
		r = f->kshim_fops->release(NULL, f);
	kshim_cur = prev;
	kshim_gate_leave(in);
	users_released(serial);
	free(f);
	return r;
}

long hx_ioctl(struct hx_instance *in, void *file, unsigned int cmd, unsigned long arg)
{
	struct hx_instance *prev = kshim_cur;
	struct file *f = file;
	long r;

	if (!f->kshim_fops->unlocked_ioctl)
		return -ENOTTY;
	kshim_gate_enter(in);
	kshim_cur = in;
	r = f->kshim_fops->unlocked_ioctl(f, cmd, arg);
	kshim_cur = prev;
	kshim_gate_leave(in);
	return r;
}
