//! The simulated dma-buf heap (`/dev/dma_heap/system` of an upstream board) and the dma-buf
//! ioctls on buffer fds (kernel-abi.md 1.4; `drivers/dma-buf/dma-heap.c`, `dma-buf.c`).
//!
//! The heap decodes as `dma_heap_ioctl` does: the request is matched by its **number only**
//! (`_IOC_NR`; nr >= 1 is `EINVAL`, the group byte and size are not checked, so any nr-0
//! request is an ALLOC); the user's size decides how many bytes are copied in (when both the
//! user's and the kernel's direction have WRITE) and back out (both have READ), the rest of the
//! 24-byte struct is zero; the struct is copied back *even when the allocation failed*. Then:
//! `fd` != 0, `fd_flags` outside `O_CLOEXEC | O_ACCMODE` or `heap_flags` != 0: `EINVAL`; the
//! length is page-aligned (0: `EINVAL`); more than [`BenchConfig::ion_capacity`] live bytes:
//! `ENOMEM`.
//!
//! Buffers are memfds, as ION buffers are, and are counted in the same snapshot fields
//! (`ion_buffers`, `ion_bytes`). The system heap is cached: `DMA_BUF_IOCTL_SYNC` START/END are
//! counted per buffer, and a buffer handed to the DSP while a CPU access is open is counted in
//! [`CallCounts::dsp_use_during_cpu_access`](crate::CallCounts::dsp_use_during_cpu_access).
//! Not modelled: the caches themselves (the bench's memory is coherent), so a missing sync is
//! only visible in that counter, never in the data.
//!
//! [`BenchConfig::ion_capacity`]: crate::BenchConfig::ion_capacity

use std::sync::Arc;

use hexrpc_drivers::dma_heap::*;
use hexrpc_drivers::{ioc, Errno};
use zerocopy::{FromBytes, IntoBytes};

use crate::account::CallKind;
use crate::state::{Buffer, Shared, State};
use crate::{ion, user};

const PAGE: u64 = 4096;

pub(crate) fn heap_kind_of(request: u32) -> CallKind {
    if ioc::nr(request) == 0 {
        CallKind::HeapAlloc
    } else {
        CallKind::HeapUnknown
    }
}

pub(crate) fn dmabuf_kind_of(request: u32) -> CallKind {
    if request == DMA_BUF_IOCTL_SYNC {
        CallKind::DmaBufSync
    } else {
        CallKind::OtherIoctl
    }
}

/// One ioctl on a heap node.
///
/// # Safety
///
/// `arg` must satisfy the `Syscalls::ioctl` contract for a plausible pointer.
pub(crate) unsafe fn heap_ioctl(sh: &Shared, st: &mut State, request: u32, arg: u64) -> Result<i32, Errno> {
    if ioc::nr(request) != 0 {
        return Err(Errno::EINVAL);
    }
    let kcmd = DMA_HEAP_IOCTL_ALLOC;
    let user_size = ioc::size(request);
    let in_size = if ioc::dir(request) & ioc::dir(kcmd) & ioc::IOC_WRITE != 0 { user_size } else { 0 };
    let out_size = if ioc::dir(request) & ioc::dir(kcmd) & ioc::IOC_READ != 0 { user_size } else { 0 };
    let ksize = in_size.max(out_size).max(core::mem::size_of::<dma_heap_allocation_data>());
    let mut kdata = vec![0u8; ksize];
    // SAFETY: passed on from the caller.
    let bytes = unsafe { user::copy_from_user(arg, in_size) }.ok_or(Errno::EFAULT)?;
    kdata[..in_size].copy_from_slice(&bytes);
    let mut a = dma_heap_allocation_data::read_from_bytes(&kdata[..24]).map_err(|_| Errno::EINVAL)?;
    let r = alloc(sh, st, &mut a);
    kdata[..24].copy_from_slice(a.as_bytes());
    // SAFETY: passed on from the caller.
    if !unsafe { user::copy_to_user(arg, &kdata[..out_size]) } {
        return Err(Errno::EFAULT);
    }
    r
}

fn alloc(sh: &Shared, st: &mut State, a: &mut dma_heap_allocation_data) -> Result<i32, Errno> {
    if a.fd != 0 || a.fd_flags & !DMA_HEAP_VALID_FD_FLAGS != 0 || a.heap_flags & !DMA_HEAP_VALID_HEAP_FLAGS != 0 {
        return Err(Errno::EINVAL);
    }
    let len = a.len.checked_add(PAGE - 1).map_or(0, |l| l & !(PAGE - 1));
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    if st.ion_bytes.saturating_add(len) > sh.cfg.ion_capacity {
        return Err(Errno::ENOMEM);
    }
    let memfd = ion::new_buffer(len)?;
    let id = st.id();
    st.buffers.insert(
        id,
        Buffer { memfd: Arc::new(memfd), len, handles: 0, share_fds: 0, host_maps: 0, driver_maps: 0, cached: true, cpu_access: 0 },
    );
    st.ion_bytes += len;
    match ion::export(st, id) {
        Ok(fd) => {
            a.fd = fd as u32;
            Ok(0)
        }
        Err(e) => {
            st.maybe_free_buffer(id);
            Err(e)
        }
    }
}

/// One ioctl on a dma-buf fd (from a heap, an ION SHARE or ALLOC_DMA_BUFF): only
/// `DMA_BUF_IOCTL_SYNC` is modelled; anything else is `ENOTTY`.
///
/// # Safety
///
/// `arg` must satisfy the `Syscalls::ioctl` contract for a plausible pointer.
pub(crate) unsafe fn dmabuf_ioctl(st: &mut State, buf: u64, request: u32, arg: u64) -> Result<i32, Errno> {
    if request != DMA_BUF_IOCTL_SYNC {
        return Err(Errno::ENOTTY);
    }
    // SAFETY: passed on from the caller.
    let s: dma_buf_sync = unsafe { user::read_struct(arg) }.ok_or(Errno::EFAULT)?;
    if s.flags & !DMA_BUF_SYNC_VALID_FLAGS_MASK != 0 || s.flags & DMA_BUF_SYNC_RW == 0 {
        return Err(Errno::EINVAL);
    }
    let b = st.buffers.get_mut(&buf).ok_or(Errno::EBADF)?;
    if s.flags & DMA_BUF_SYNC_END != 0 {
        b.cpu_access = b.cpu_access.saturating_sub(1);
    } else {
        b.cpu_access += 1;
    }
    Ok(0)
}

/// Counts a DSP use of `buf` while a CPU access of a cached buffer is open.
pub(crate) fn note_dsp_use(st: &mut State, buf: u64) {
    if st.buffers.get(&buf).is_some_and(|b| b.cached && b.cpu_access > 0) {
        st.counts.dsp_use_during_cpu_access += 1;
    }
}
