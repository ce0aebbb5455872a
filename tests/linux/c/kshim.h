/*
 * hexrpc-linux kernel shim: the declarations Linux's drivers/misc/fastrpc.c needs, written for
 * user space (our own minimal versions, not the kernel's headers). Every <linux/...> header the
 * driver includes is a one-line forwarder to this file; kshim.c and its siblings (kshim_*.c, see
 * kshim.c) implement the functions.
 *
 * Types carry a few fields of our own after the ones the driver reads (marked "shim").
 * No <stdint.h>: the driver's integer types are defined here (u64 is unsigned long long, as in
 * the kernel, so the driver's printf formats match).
 */
#ifndef KSHIM_H
#define KSHIM_H
#include <stddef.h>
#include <stdbool.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include_next <linux/types.h>
#include_next <linux/ioctl.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef u32 uint32_t;
typedef u64 uint64_t;
typedef unsigned long uintptr_t;
typedef int s32;
typedef long long s64;
typedef u64 dma_addr_t;
typedef unsigned int gfp_t;

#define __user
#define GFP_KERNEL 0u
#define GFP_ATOMIC 1u
#define ERESTARTSYS 512
#define EPROBE_DEFER 517
#define HZ 1000
#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)
#define PAGE_MASK (~(PAGE_SIZE - 1))
#define BIT(n) (1UL << (n))
#define ALIGN(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define roundup(x, y) ((((x) + ((y) - 1)) / (y)) * (y))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
#define MAX_ERRNO 4095
#define IS_ERR(p) ((unsigned long)(const void *)(p) >= (unsigned long)-MAX_ERRNO)
#define PTR_ERR(p) ((long)(p))
#define ERR_PTR(e) ((void *)(long)(e))
#define DMA_BIT_MASK(n) (((n) == 64) ? ~0ULL : ((1ULL << (n)) - 1))
#define dma_wmb() __atomic_thread_fence(__ATOMIC_RELEASE)
#define dma_rmb() __atomic_thread_fence(__ATOMIC_ACQUIRE)

/* Doubly linked lists (circular, with a head node). */
struct list_head {
	struct list_head *next, *prev;
};
#define INIT_LIST_HEAD(l) \
	do { \
		(l)->next = (l); \
		(l)->prev = (l); \
	} while (0)
void list_add(struct list_head *n, struct list_head *h);
void list_add_tail(struct list_head *n, struct list_head *h);
void list_del(struct list_head *e);
#define list_entry(p, T, m) container_of(p, T, m)
#define list_for_each_entry(pos, head, m) \
	for (pos = list_entry((head)->next, __typeof__(*pos), m); &pos->m != (head); \
	     pos = list_entry(pos->m.next, __typeof__(*pos), m))
#define list_for_each_entry_safe(pos, n, head, m) \
	for (pos = list_entry((head)->next, __typeof__(*pos), m), \
	    n = list_entry(pos->m.next, __typeof__(*pos), m); \
	     &pos->m != (head); pos = n, n = list_entry(n->m.next, __typeof__(*n), m))

/* Locks: both kinds are plain (non-recursive) pthread mutexes kept in opaque storage; a zeroed
 * lock is a valid unlocked one (glibc's static initializer is all zeroes). */
struct kshim_lock {
	_Alignas(16) unsigned char opaque[64];
};
typedef struct {
	struct kshim_lock l;
} spinlock_t;
struct mutex {
	struct kshim_lock l;
};
void spin_lock_init(spinlock_t *l);
void spin_lock(spinlock_t *l);
void spin_unlock(spinlock_t *l);
#define spin_lock_irqsave(l, f) \
	do { \
		(f) = 0; \
		spin_lock(l); \
	} while (0)
#define spin_unlock_irqrestore(l, f) \
	do { \
		(void)(f); \
		spin_unlock(l); \
	} while (0)
void mutex_init(struct mutex *m);
void mutex_destroy(struct mutex *m);
void mutex_lock(struct mutex *m);
void mutex_unlock(struct mutex *m);

/* Reference counts (atomic). */
struct kref {
	int refcount;
};
void kref_init(struct kref *k);
void kref_get(struct kref *k);
int kref_get_unless_zero(struct kref *k);
int kref_put(struct kref *k, void (*release)(struct kref *));

/* Completions: one process-wide mutex and condition variable behind all of them. */
struct completion {
	unsigned int done;
};
void init_completion(struct completion *c);
void complete(struct completion *c);
int wait_for_completion_interruptible(struct completion *c);
unsigned long wait_for_completion_timeout(struct completion *c, unsigned long timeout);

/* Deferred work: one worker thread runs queued works in order. */
struct work_struct;
typedef void (*work_func_t)(struct work_struct *);
struct work_struct {
	work_func_t func;
	struct work_struct *kshim_next; /* shim: queue link */
	int kshim_pending;              /* shim: queued, not yet started */
};
#define INIT_WORK(w, f) \
	do { \
		(w)->func = (f); \
		(w)->kshim_next = NULL; \
		(w)->kshim_pending = 0; \
	} while (0)
bool schedule_work(struct work_struct *w);

/* Allocation, ids, sorting. */
void *kzalloc(size_t n, gfp_t f);
void *kcalloc(size_t n, size_t s, gfp_t f);
void kfree(const void *p);
struct idr {
	void *impl;
};
void idr_init(struct idr *i);
void idr_destroy(struct idr *i);
int idr_alloc_cyclic(struct idr *i, void *p, int start, int end, gfp_t f);
void *idr_find(struct idr *i, unsigned long id);
void *idr_remove(struct idr *i, unsigned long id);
void sort(void *base, size_t num, size_t size, int (*cmp)(const void *, const void *),
	  void (*swap)(void *, void *, int));

/* The calling task, its address space, user copies. */
struct mm_struct;
struct vm_area_struct {
	unsigned long vm_start, vm_end;
	unsigned long vm_pgoff;
};
struct task_struct {
	int pid, tgid;
	char comm[16];
	struct mm_struct *mm;
};
struct task_struct *kshim_current(void);
#define current (kshim_current())
void mmap_read_lock(struct mm_struct *mm);
void mmap_read_unlock(struct mm_struct *mm);
struct vm_area_struct *vma_lookup(struct mm_struct *mm, unsigned long addr);
unsigned long copy_from_user(void *to, const void *from, unsigned long n);
unsigned long copy_to_user(void *to, const void *from, unsigned long n);

/* Devices, device tree, logging. */
struct device_node;
struct hx_instance;
struct kshim_devres;
struct device {
	struct device *parent;
	struct device_node *of_node;
	u64 *dma_mask;
	void *driver_data;
	struct hx_instance *kshim_owner;    /* shim: the channel this device belongs to */
	struct kshim_devres *kshim_devres;  /* shim: devm allocations, freed on unbind */
	u64 kshim_dma_mask;                 /* shim: default mask storage */
};
static inline void *dev_get_drvdata(const struct device *d)
{
	return d->driver_data;
}
static inline void dev_set_drvdata(struct device *d, void *p)
{
	d->driver_data = p;
}
void kshim_dev_log(const struct device *d, const char *lvl, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define dev_err(d, ...) kshim_dev_log(d, "err", __VA_ARGS__)
#define dev_info(d, ...) kshim_dev_log(d, "info", __VA_ARGS__)
#define dev_dbg(d, ...) kshim_dev_log(d, "dbg", __VA_ARGS__)
#define dev_warn_ratelimited(d, ...) kshim_dev_log(d, "warn", __VA_ARGS__)
#define pr_err(...) kshim_dev_log(NULL, "err", __VA_ARGS__)
void *devm_kzalloc(struct device *d, size_t n, gfp_t f);
char *devm_kasprintf(struct device *d, gfp_t f, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct platform_device {
	struct device dev;
	struct platform_device *kshim_next; /* shim: sibling created by of_platform_populate */
	int kshim_bound;                    /* shim: the driver's probe succeeded */
};
struct of_device_id {
	char compatible[128];
};
struct device_driver {
	const char *name;
	const struct of_device_id *of_match_table;
	bool suppress_bind_attrs;
};
struct platform_driver {
	int (*probe)(struct platform_device *);
	int (*remove)(struct platform_device *);
	struct device_driver driver;
};
int platform_driver_register(struct platform_driver *d);
void platform_driver_unregister(struct platform_driver *d);
int of_property_read_u32(const struct device_node *n, const char *name, u32 *out);
int of_property_read_string(const struct device_node *n, const char *name, const char **out);
bool of_property_read_bool(const struct device_node *n, const char *name);
int of_property_read_variable_u32_array(const struct device_node *n, const char *name, u32 *out,
					size_t min, size_t max);
int of_platform_populate(struct device_node *root, const void *matches, const void *lookup,
			 struct device *parent);
void of_platform_depopulate(struct device *parent);
#define MODULE_DEVICE_TABLE(t, n)
#define MODULE_LICENSE(s)
#define MODULE_IMPORT_NS(s)
#define module_init(f) \
	int kshim_module_init(void) \
	{ \
		return f(); \
	}
#define module_exit(f) \
	void kshim_module_exit(void) \
	{ \
		f(); \
	}
int kshim_module_init(void);
void kshim_module_exit(void);

/* Files and misc devices. */
struct inode;
struct file_operations;
struct file {
	void *private_data;
	const struct file_operations *kshim_fops; /* shim: the node's operations at open */
};
struct file_operations {
	int (*open)(struct inode *, struct file *);
	int (*release)(struct inode *, struct file *);
	long (*unlocked_ioctl)(struct file *, unsigned int, unsigned long);
	long (*compat_ioctl)(struct file *, unsigned int, unsigned long);
};
#define MISC_DYNAMIC_MINOR 255
struct miscdevice {
	int minor;
	const char *name;
	const struct file_operations *fops;
};
int misc_register(struct miscdevice *m);
void misc_deregister(struct miscdevice *m);

/* DMA mapping and scatter lists. */
enum dma_data_direction { DMA_BIDIRECTIONAL = 0, DMA_TO_DEVICE = 1, DMA_FROM_DEVICE = 2 };
struct scatterlist {
	void *virt;
	dma_addr_t dma_address;
	unsigned int length;
};
struct sg_table {
	struct scatterlist *sgl;
	unsigned int nents, orig_nents;
};
#define sg_dma_address(sg) ((sg)->dma_address)
static inline void *sg_virt(struct scatterlist *sg)
{
	return sg->virt;
}
void sg_free_table(struct sg_table *t);
void *dma_alloc_coherent(struct device *d, size_t size, dma_addr_t *handle, gfp_t f);
void dma_free_coherent(struct device *d, size_t size, void *cpu, dma_addr_t handle);
int dma_get_sgtable(struct device *d, struct sg_table *t, void *cpu, dma_addr_t handle, size_t size);
int dma_map_sgtable(struct device *d, struct sg_table *t, enum dma_data_direction dir, unsigned long attrs);
void dma_unmap_sgtable(struct device *d, struct sg_table *t, enum dma_data_direction dir,
		       unsigned long attrs);
int dma_mmap_coherent(struct device *d, struct vm_area_struct *v, void *cpu, dma_addr_t handle, size_t size);
int dma_set_mask(struct device *d, u64 mask);
int dma_set_mask_and_coherent(struct device *d, u64 mask);

/* dma-buf. */
struct iosys_map {
	void *vaddr;
	bool is_iomem;
};
static inline void iosys_map_set_vaddr(struct iosys_map *m, void *v)
{
	m->vaddr = v;
	m->is_iomem = false;
}
struct dma_buf;
struct dma_buf_attachment;
struct dma_buf_ops {
	int (*attach)(struct dma_buf *, struct dma_buf_attachment *);
	void (*detach)(struct dma_buf *, struct dma_buf_attachment *);
	struct sg_table *(*map_dma_buf)(struct dma_buf_attachment *, enum dma_data_direction);
	void (*unmap_dma_buf)(struct dma_buf_attachment *, struct sg_table *, enum dma_data_direction);
	int (*mmap)(struct dma_buf *, struct vm_area_struct *);
	int (*vmap)(struct dma_buf *, struct iosys_map *);
	void (*release)(struct dma_buf *);
};
struct dma_buf {
	size_t size;
	const struct dma_buf_ops *ops;
	void *priv;
	/* shim */
	int kshim_refs;                  /* references (dma_buf_get / export minus dma_buf_put) */
	struct hx_instance *kshim_owner; /* imported: the channel whose host resolved it */
	u64 kshim_key;                   /* imported: the host's key (0: exported by the driver) */
	void *kshim_vaddr;               /* imported: host mapping of the bytes */
	struct dma_buf *kshim_next;      /* imported: link in the (instance, key) table */
};
struct dma_buf_attachment {
	struct dma_buf *dmabuf;
	struct device *dev;
	void *priv;
};
struct dma_buf_export_info {
	const char *exp_name;
	const struct dma_buf_ops *ops;
	size_t size;
	int flags;
	void *priv;
};
#define DEFINE_DMA_BUF_EXPORT_INFO(n) struct dma_buf_export_info n = { .exp_name = "fastrpc" }
struct dma_buf *dma_buf_export(const struct dma_buf_export_info *info);
int dma_buf_fd(struct dma_buf *b, int flags);
struct dma_buf *dma_buf_get(int fd);
void dma_buf_put(struct dma_buf *b);
struct dma_buf_attachment *dma_buf_attach(struct dma_buf *b, struct device *d);
void dma_buf_detach(struct dma_buf *b, struct dma_buf_attachment *a);
struct sg_table *dma_buf_map_attachment_unlocked(struct dma_buf_attachment *a, enum dma_data_direction dir);
void dma_buf_unmap_attachment_unlocked(struct dma_buf_attachment *a, struct sg_table *t,
				       enum dma_data_direction dir);

/* rpmsg. */
struct rpmsg_endpoint;
struct rpmsg_device {
	struct device dev;
	struct rpmsg_endpoint *ept;
};
typedef int (*rpmsg_rx_cb_t)(struct rpmsg_device *, void *, int, void *, u32);
struct rpmsg_driver {
	int (*probe)(struct rpmsg_device *);
	void (*remove)(struct rpmsg_device *);
	rpmsg_rx_cb_t callback;
	struct device_driver drv;
};
int rpmsg_send(struct rpmsg_endpoint *ept, void *data, int len);
int register_rpmsg_driver(struct rpmsg_driver *d);
void unregister_rpmsg_driver(struct rpmsg_driver *d);

/* Qualcomm secure channel manager: absent (no "qcom,vmids" in our device tree). */
#define QCOM_SCM_VMID_HLOS 0x3
#define QCOM_SCM_PERM_RWX 0x7
struct qcom_scm_vmperm {
	int vmid;
	int perm;
};
bool qcom_scm_is_available(void);
int qcom_scm_assign_mem(u64 mem_addr, size_t mem_sz, unsigned int *src, const struct qcom_scm_vmperm *newvm,
			unsigned int dest_cnt);

/* Shim internals for c/introspect.c (never called by the driver). */
/* fn(fl, arg) for every fastrpc_user of `in` whose file was released (hx_release returned) and
 * which the driver has not freed, oldest open first, with the shim's users table locked: the
 * user's memory is not freed during fn (its kfree waits for the table), but the driver may be
 * tearing it down, so fn may only try to pin it (kref_get_unless_zero) and must not block. */
void kshim_users_released(struct hx_instance *in, void (*fn)(void *fl, void *arg), void *arg);
/* The imported dma-buf table's lock (taken after the driver's locks, never before). */
void kshim_bufs_lock(void);
void kshim_bufs_unlock(void);
/* With the table locked: 1 and the host's key when b is a live imported buffer; b itself is
 * only compared, so any pointer may be asked about. */
int kshim_imported_key(const struct dma_buf *b, u64 *key);
#endif
