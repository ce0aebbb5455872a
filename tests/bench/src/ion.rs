//! The simulated msm ION 4.9 driver (`/dev/ion` of the board), kernel-abi.md 1.1 and 1.2.
//!
//! Decoding follows `ion_ioctl`: an argument larger than the 32-byte union is `EINVAL`; the
//! argument is copied in (`_IOC_SIZE` bytes) when the direction has WRITE (FREE, SYNC and CUSTOM
//! count as write-only); a bad pointer is `EFAULT`; the command is then matched by its full 32-bit
//! number, so anything else (including the 4.12 ALLOC number) is `ENOTTY`.
//!
//! Buffers are memfds sized to the page-aligned length, so a SHARE fd is a real descriptor and
//! `mmap` on it is the real system call. Every heap is modelled as the system heap (align above
//! a page and secure/VMID flags: `EINVAL`; more than half of [`BenchConfig::ram_bytes`]: `ENOMEM`;
//! beyond [`BenchConfig::ion_capacity`] live bytes: `ENOMEM`). Not modelled: the checks of the
//! msm cache-maintenance handler were not read; the bench requires the handle (or, with handle 0,
//! the fd) to name an ION buffer and `[vaddr + offset, + length)` to lie in a live host mapping of
//! it (an inference), and counts the call. The "FREE with a user count of 0 only WARNs" corner is
//! not reachable here because a handle is removed when its user count reaches 0.
//!
//! [`BenchConfig::ram_bytes`]: crate::BenchConfig::ram_bytes
//! [`BenchConfig::ion_capacity`]: crate::BenchConfig::ion_capacity

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use hexrpc_drivers::ion::*;
use hexrpc_drivers::{ioc, Errno};
use zerocopy::{FromBytes, IntoBytes};

use crate::account::CallKind;
use crate::state::{Buffer, FdEntry, FdObj, IonHandle, Shared, State};
use crate::user;

const PAGE: u64 = 4096;
/// Flags that ask for a secure/VMID buffer (CP_* bits and ION_FLAG_SECURE).
const SECURE_FLAGS: u32 = 0x06FE_0000 | ION_FLAG_SECURE;

pub(crate) fn kind_of(request: u32) -> CallKind {
    match request {
        ION_IOC_ALLOC => CallKind::IonAlloc,
        ION_IOC_FREE => CallKind::IonFree,
        ION_IOC_MAP => CallKind::IonMap,
        ION_IOC_SHARE => CallKind::IonShare,
        ION_IOC_IMPORT => CallKind::IonImport,
        ION_IOC_CUSTOM => CallKind::IonCustom,
        ION_IOC_SYNC => CallKind::IonSync,
        ION_IOC_CLEAN_CACHES => CallKind::IonCleanCaches,
        ION_IOC_INV_CACHES => CallKind::IonInvCaches,
        ION_IOC_CLEAN_INV_CACHES => CallKind::IonCleanInvCaches,
        _ => CallKind::IonUnknown,
    }
}

/// Handles one ioctl on ION client `client`.
///
/// # Safety
///
/// `arg` must satisfy the `Syscalls::ioctl` contract for a plausible pointer.
pub(crate) unsafe fn ioctl(sh: &Shared, st: &mut State, client: u64, request: u32, arg: u64) -> Result<i32, Errno> {
    let size = ioc::size(request);
    if size > core::mem::size_of::<ion_allocation_data>() {
        return Err(Errno::EINVAL);
    }
    let dir = match request {
        ION_IOC_FREE | ION_IOC_SYNC | ION_IOC_CUSTOM => ioc::IOC_WRITE,
        _ => ioc::dir(request),
    };
    let mut data = [0u8; 32];
    if dir & ioc::IOC_WRITE != 0 {
        // SAFETY: passed on from the caller.
        let bytes = unsafe { user::copy_from_user(arg, size) }.ok_or(Errno::EFAULT)?;
        data[..size].copy_from_slice(&bytes);
    }
    match request {
        ION_IOC_ALLOC => {
            let mut a = ion_allocation_data::read_from_bytes(&data[..32]).map_err(|_| Errno::EINVAL)?;
            a.handle = alloc(sh, st, client, &a)?;
            data.copy_from_slice(a.as_bytes());
        }
        ION_IOC_FREE => {
            let h = ion_handle_data::read_from_bytes(&data[..4]).map_err(|_| Errno::EINVAL)?;
            free(st, client, h.handle)?;
        }
        ION_IOC_SHARE | ION_IOC_MAP => {
            let mut d = ion_fd_data::read_from_bytes(&data[..8]).map_err(|_| Errno::EINVAL)?;
            d.fd = share(st, client, d.handle)?;
            data[..8].copy_from_slice(d.as_bytes());
        }
        ION_IOC_IMPORT => {
            let mut d = ion_fd_data::read_from_bytes(&data[..8]).map_err(|_| Errno::EINVAL)?;
            d.handle = import(st, client, d.fd)?;
            data[..8].copy_from_slice(d.as_bytes());
        }
        ION_IOC_SYNC => {
            let d = ion_fd_data::read_from_bytes(&data[..8]).map_err(|_| Errno::EINVAL)?;
            buffer_of_fd(st, d.fd)?;
        }
        ION_IOC_CUSTOM => return Err(Errno::ENOTTY),
        ION_IOC_CLEAN_CACHES | ION_IOC_INV_CACHES | ION_IOC_CLEAN_INV_CACHES => {
            let d = ion_flush_data::read_from_bytes(&data[..24]).map_err(|_| Errno::EINVAL)?;
            cache(st, client, &d)?;
        }
        _ => return Err(Errno::ENOTTY),
    }
    if dir & ioc::IOC_READ != 0 {
        // SAFETY: passed on from the caller; the range was checked on copy-in or is checked now.
        if !unsafe { user::copy_to_user(arg, &data[..size]) } {
            return Err(Errno::EFAULT);
        }
    }
    Ok(0)
}

fn alloc(sh: &Shared, st: &mut State, client: u64, a: &ion_allocation_data) -> Result<i32, Errno> {
    let len = a.len.checked_add(PAGE - 1).map_or(0, |l| l & !(PAGE - 1));
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    let mut heaps: Vec<u32> = std::iter::once(sh.cfg.board.heap_id).chain(sh.cfg.extra_heaps.iter().copied()).collect();
    heaps.sort_unstable_by(|a, b| b.cmp(a));
    heaps.dedup();
    let mut err = Errno::ENODEV;
    for id in heaps {
        if id >= 32 || a.heap_id_mask & (1 << id) == 0 {
            continue;
        }
        err = if a.align > PAGE || a.flags & SECURE_FLAGS != 0 {
            Errno::EINVAL
        } else if len / PAGE > sh.cfg.ram_bytes / PAGE / 2 || st.ion_bytes.saturating_add(len) > sh.cfg.ion_capacity {
            Errno::ENOMEM
        } else {
            match new_buffer(len) {
                Ok(memfd) => {
                    let buf = st.id();
                    let cached = a.flags & ION_FLAG_CACHED != 0;
                    let b = Buffer {
                        memfd: Arc::new(memfd),
                        len,
                        handles: 1,
                        share_fds: 0,
                        host_maps: 0,
                        driver_maps: 0,
                        cached,
                        cpu_access: 0,
                    };
                    st.buffers.insert(buf, b);
                    st.ion_bytes += len;
                    let c = st.ion_clients.get_mut(&client).ok_or(Errno::EBADF)?;
                    let h = (1..).find(|h| !c.handles.contains_key(h)).unwrap_or(i32::MAX);
                    c.handles.insert(h, IonHandle { buf, user_refs: 1 });
                    return Ok(h);
                }
                Err(e) => e,
            }
        };
    }
    Err(err)
}

pub(crate) fn new_buffer(len: u64) -> Result<OwnedFd, Errno> {
    let fd = rustix::fs::memfd_create("hexrpc-bench-ion", rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| Errno(e.raw_os_error()))?;
    rustix::fs::ftruncate(&fd, len).map_err(|_| Errno::ENOMEM)?;
    Ok(out_of_the_way(fd))
}

/// Moves a backing descriptor of the bench (a buffer's memfd, which only the bench holds) to a
/// number at or above [`backing_floor`], so that it does not take a low number the simulated
/// kernel would hand out: "close fd 7, allocate" then gives 7 again, as on a device, even while
/// a driver map keeps the closed buffer's memory alive. Falls back to the original number when
/// no high number is free.
pub(crate) fn out_of_the_way(fd: OwnedFd) -> OwnedFd {
    match rustix::io::fcntl_dupfd_cloexec(&fd, backing_floor()) {
        Ok(high) => high,
        Err(_) => fd,
    }
}

/// The lowest number the bench uses for its own backing descriptors: half the soft
/// `RLIMIT_NOFILE`, at least 64 and at most 65536.
pub(crate) fn backing_floor() -> i32 {
    static FLOOR: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *FLOOR.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1 << 20);
        i32::try_from((soft / 2).clamp(64, 65536)).unwrap_or(64)
    })
}

fn free(st: &mut State, client: u64, handle: i32) -> Result<(), Errno> {
    let c = st.ion_clients.get_mut(&client).ok_or(Errno::EBADF)?;
    let h = c.handles.get_mut(&handle).ok_or(Errno::EINVAL)?;
    h.user_refs -= 1;
    if h.user_refs == 0 {
        let buf = h.buf;
        c.handles.remove(&handle);
        if let Some(b) = st.buffers.get_mut(&buf) {
            b.handles -= 1;
        }
        st.maybe_free_buffer(buf);
    }
    Ok(())
}

/// Exports buffer `buf` as a new dma-buf fd.
pub(crate) fn export(st: &mut State, buf: u64) -> Result<i32, Errno> {
    let b = st.buffers.get_mut(&buf).ok_or(Errno::EINVAL)?;
    let fd = rustix::io::fcntl_dupfd_cloexec(&*b.memfd, 0).map_err(|e| Errno(e.raw_os_error()))?;
    b.share_fds += 1;
    let n = fd.as_raw_fd();
    st.fds.insert(n, FdEntry { _owned: fd, obj: FdObj::DmaBuf(buf) });
    Ok(n)
}

fn share(st: &mut State, client: u64, handle: i32) -> Result<i32, Errno> {
    let buf = st.ion_clients.get(&client).and_then(|c| c.handles.get(&handle)).map(|h| h.buf).ok_or(Errno::EINVAL)?;
    export(st, buf)
}

/// The buffer behind `fd`: `EINVAL` for a descriptor that is not an ION dma-buf, `EBADF` for one
/// that is not open at all.
pub(crate) fn buffer_of_fd(st: &State, fd: i32) -> Result<u64, Errno> {
    if let Some(b) = st.dmabuf(fd) {
        return Ok(b);
    }
    if fd < 0 || (!st.fds.contains_key(&fd) && !st.passthrough.contains(&fd)) {
        return Err(Errno::EBADF);
    }
    Err(Errno::EINVAL)
}

fn import(st: &mut State, client: u64, fd: i32) -> Result<i32, Errno> {
    let buf = buffer_of_fd(st, fd)?;
    let c = st.ion_clients.get_mut(&client).ok_or(Errno::EBADF)?;
    if let Some((&id, h)) = c.handles.iter_mut().find(|(_, h)| h.buf == buf) {
        h.user_refs += 1;
        return Ok(id);
    }
    let id = (1..).find(|h| !c.handles.contains_key(h)).unwrap_or(i32::MAX);
    c.handles.insert(id, IonHandle { buf, user_refs: 1 });
    if let Some(b) = st.buffers.get_mut(&buf) {
        b.handles += 1;
    }
    Ok(id)
}

fn cache(st: &State, client: u64, d: &ion_flush_data) -> Result<(), Errno> {
    let buf = if d.handle > 0 {
        st.ion_clients.get(&client).and_then(|c| c.handles.get(&d.handle)).map(|h| h.buf).ok_or(Errno::EINVAL)?
    } else {
        st.dmabuf(d.fd).ok_or(Errno::EINVAL)?
    };
    let end = d.vaddr.checked_add(d.offset as u64 + d.length as u64).ok_or(Errno::EINVAL)?;
    let inside = st.host_maps.iter().any(|(&a, m)| m.buf == Some(buf) && d.vaddr >= a as u64 && end <= a as u64 + m.len as u64);
    if inside {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// `release` of an ION client: destroys every handle.
pub(crate) fn close_client(st: &mut State, client: u64) {
    if let Some(c) = st.ion_clients.remove(&client) {
        for h in c.handles.values() {
            if let Some(b) = st.buffers.get_mut(&h.buf) {
                b.handles = b.handles.saturating_sub(1);
            }
            st.maybe_free_buffer(h.buf);
        }
    }
}
