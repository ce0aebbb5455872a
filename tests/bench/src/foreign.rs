//! Descriptors this kernel did not hand out, duplicated with `fcntl(F_DUPFD_CLOEXEC)`
//! ([`Syscalls::dup_cloexec`](hexrpc_drivers::Syscalls::dup_cloexec)): what an importer of a
//! buffer another process shares does with the number it received over a UNIX socket.
//!
//! On a device a dma-buf is one kernel object whichever process made it, and `SCM_RIGHTS` hands
//! the receiver a descriptor of that object. The bench's kernel lives in each process's memory,
//! so a buffer another process allocated from *its* bench (ION or a dma-heap) is unknown here;
//! what crosses the socket is the real memfd behind it. This module recognises such a memfd by
//! the name every bench buffer's memfd carries ([`ion::new_buffer`]) and adopts it: the first
//! duplicate makes it a buffer of this kernel (counted in `ion_buffers` / `ion_bytes`, keyed by
//! the memfd's device and inode, so every later duplicate names the same buffer), and the
//! duplicate is a dma-buf descriptor of it as an ION SHARE would be. When the last descriptor,
//! host mapping and driver map of it are gone here the buffer is forgotten, as the other
//! process's references are not this kernel's to count.
//!
//! Where this is not the device:
//!
//! * the other process's references to the buffer are invisible here: the memory lives on as
//!   long as any process holds the memfd (the real kernel's reference counting of the file),
//!   which is what a dma-buf does, but this kernel's `ion_buffers` counts it only while this
//!   process holds it;
//! * a memfd made by anything other than a bench (another program's `memfd_create` with the same
//!   name) would be taken for a dma-buf; a device's kernel checks the file's operations;
//! * a duplicate of one of this kernel's own device files (an ION client, a FastRPC file, a heap
//!   node, a virtual file) is refused with `EINVAL`: the models count their objects per number
//!   and do not share one between two numbers. A duplicate of one of its dma-bufs is another
//!   share of the same buffer, as on a device.
//!
//! Anything else (a pipe, a socket, a regular file) is duplicated for real and passes through
//! to the OS like any real descriptor; a number that is not open is `EBADF`.

use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::sync::Arc;

use hexrpc_drivers::Errno;

use crate::ion;
use crate::state::{Buffer, FdEntry, FdObj, Shared, State};

/// The name prefix `/proc/self/fd` shows for a bench buffer's memfd.
const BENCH_MEMFD: &str = "/memfd:hexrpc-bench-ion";

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 0)` as this kernel answers it (see the module docs). Returns the
/// new number, which the caller owns.
pub(crate) fn dup(sh: &Shared, st: &mut State, fd: i32) -> Result<i32, Errno> {
    if fd < 0 {
        return Err(Errno::EBADF);
    }
    if let Some(e) = st.fds.get(&fd) {
        return match e.obj {
            FdObj::DmaBuf(b) => ion::export(st, b),
            _ => Err(Errno::EINVAL),
        };
    }
    // SAFETY: the borrow lives for the one `fcntl` below only. The number is the caller's (a
    // descriptor it received or opened, which it keeps open across this call); a number that is
    // not open makes the system call fail with EBADF, as the C call would.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let real = rustix::io::fcntl_dupfd_cloexec(borrowed, 0).map_err(errno)?;
    if !is_bench_buffer(&real) {
        let n = real.into_raw_fd();
        st.passthrough.insert(n);
        return Ok(n);
    }
    let stat = rustix::fs::fstat(&real).map_err(errno)?;
    let key = (stat.st_dev as u64, stat.st_ino as u64);
    let buf = match known_buffer(st, key) {
        Some(b) => b,
        None => {
            let len = u64::try_from(stat.st_size).map_err(|_| Errno::EINVAL)?;
            let memfd = ion::out_of_the_way(rustix::io::fcntl_dupfd_cloexec(&real, 0).map_err(errno)?);
            let id = st.id();
            st.buffers.insert(
                id,
                Buffer {
                    memfd: Arc::new(memfd),
                    len,
                    handles: 0,
                    share_fds: 0,
                    host_maps: 0,
                    driver_maps: 0,
                    cached: sh.cfg.board.cached,
                    cpu_access: 0,
                },
            );
            st.ion_bytes = st.ion_bytes.saturating_add(len);
            st.foreign.insert(key, id);
            id
        }
    };
    if let Some(b) = st.buffers.get_mut(&buf) {
        b.share_fds += 1;
    }
    let n = real.as_raw_fd();
    st.fds.insert(n, FdEntry { _owned: real, obj: FdObj::DmaBuf(buf) });
    Ok(n)
}

/// Whether `fd` is the memfd of a bench buffer (this process's or another's).
fn is_bench_buffer(fd: &OwnedFd) -> bool {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match std::fs::read_link(path) {
        Ok(target) => target.to_string_lossy().starts_with(BENCH_MEMFD),
        Err(_) => false,
    }
}

/// The buffer of this kernel whose memfd is `key`: one adopted before, or one of its own (a
/// descriptor of it duplicated outside the seam).
fn known_buffer(st: &State, key: (u64, u64)) -> Option<u64> {
    if let Some(&b) = st.foreign.get(&key) {
        if st.buffers.contains_key(&b) {
            return Some(b);
        }
    }
    st.buffers.iter().find_map(|(&id, b)| {
        let s = rustix::fs::fstat(&*b.memfd).ok()?;
        ((s.st_dev as u64, s.st_ino as u64) == key).then_some(id)
    })
}

impl crate::Bench {
    /// The real file behind dma-buf number `fd` of this kernel, as a new descriptor of this
    /// process that the caller owns: what `SCM_RIGHTS` carries when a process shares a dma-buf
    /// over a UNIX socket (the file, not the number). The receiving process's bench takes it in
    /// as a dma-buf when it duplicates it through its seam (the module docs). `EBADF` for a
    /// number this kernel did not hand out, `EINVAL` for one that is not a dma-buf.
    pub fn export_descriptor(&self, fd: hexrpc_drivers::Fd) -> Result<OwnedFd, Errno> {
        let st = self.lock();
        match st.fds.get(&fd.0) {
            Some(FdEntry { _owned: real, obj: FdObj::DmaBuf(_) }) => real.try_clone().map_err(|e| Errno(e.raw_os_error().unwrap_or(5))),
            Some(_) => Err(Errno::EINVAL),
            None => Err(Errno::EBADF),
        }
    }
}
