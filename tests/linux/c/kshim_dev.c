/*
 * hexrpc-linux kernel shim: the device tree, the platform and rpmsg drivers, the rpmsg channel
 * (hx_probe, hx_remove, hx_receive, rpmsg_send), the absent secure channel manager. See kshim.c
 * for the overview.
 */
#define _GNU_SOURCE
#include "kshim_internal.h"

#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* Device tree, drivers                                                                       */

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
				kshim_devres_release_all(&p->pd.dev);
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
		kshim_devres_release_all(&p->pd.dev);
		p->pd.kshim_bound = 0;
		p->registered = 0;
	}
}

int rpmsg_send(struct rpmsg_endpoint *ept, void *data, int len)
{
	struct hx_instance *in = ept->in;
	int r;

	if (!in->ops.send)
		return -ENODEV;
	r = in->ops.send(in->ops.ctx, data, len);
	if (r == 0)
		kshim_count(&in->sent, 1);
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
/* hx_host.h: the rpmsg channel                                                               */

int hx_probe(struct hx_instance *in)
{
	struct hx_instance *prev = kshim_cur;
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
	kshim_cur = in;
	r = g_rdrv->probe(&d->rp);
	kshim_cur = prev;
	if (r)
		kshim_devres_release_all(&d->rp.dev);
	else
		in->rpdev = &d->rp;
	pthread_rwlock_unlock(&in->state);
	return r;
}

void hx_remove(struct hx_instance *in)
{
	struct hx_instance *prev = kshim_cur;
	struct timespec dl;

	/* Wait until no thread is between its rpdev check and its send (see kshim_gate_enter). */
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
		kshim_cur = in;
		g_rdrv->remove(in->rpdev);
		kshim_devres_release_all(&in->rpdev->dev);
		in->rpdev = NULL;
		kshim_cur = prev;
	}
	pthread_rwlock_unlock(&in->state);
	pthread_mutex_lock(&in->gate_lock);
	in->removing--;
	pthread_cond_broadcast(&in->gate_cond);
	pthread_mutex_unlock(&in->gate_lock);
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
		kshim_count(&in->received, 1);
	pthread_rwlock_unlock(&in->state);
	return r;
}
