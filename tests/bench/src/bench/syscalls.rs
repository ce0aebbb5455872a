//! The [`Syscalls`] seam: every call the drivers make, routed to the virtual file table, the
//! kernel models (or Linux's own driver) or the real OS, with the faults, counts and simulated
//! cost of each; and the raw-number calls the kernel tests use.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::MutexGuard;
use std::time::Duration;
#[cfg(feature = "linux")]
use std::time::Instant;

use hexrpc_drivers::{adsprpc, BorrowedFd, Errno, Fd, FileStat, OpenAt, OpenFlags, OwnedFd as SeamOwnedFd, Prot, RustixSys, Syscalls};

use super::vfs::{is_virtual, real_path, AtTarget};
use super::Bench;
use crate::account::{CallKind, Fault, FaultTarget, LatencySample, MunmapRecord, OpenRecord};
use crate::release::{release_file, release_obj};
use crate::state::{FdObj, HostMap, State};
use crate::{dma_heap, ion, rpc, upstream};

impl Bench {
    // ---- raw numbers (tests of the simulated kernel) ----

    /// [`Syscalls::open`] that hands back the bare number: the kernel tests drive the simulated
    /// driver with raw descriptor numbers, as C code would.
    pub fn open_raw(&self, path: &CStr, flags: OpenFlags) -> Result<Fd, Errno> {
        self.open(path, flags).map(SeamOwnedFd::into_raw)
    }

    /// Closes a number this bench handed out (`EBADF` for any other number, which is left
    /// alone): the raw counterpart of [`Syscalls::close`] for kernel tests.
    pub fn close_raw(&self, fd: Fd) -> Result<(), Errno> {
        let ours = {
            let st = self.lock();
            st.fds.contains_key(&fd.0) || st.passthrough.contains(&fd.0)
        };
        if !ours {
            return Err(Errno::EBADF);
        }
        // SAFETY: the number is one this bench handed out and still holds; a test that closes
        // it gives up its use, as `close(2)` would.
        self.close(unsafe { SeamOwnedFd::from_raw(fd) })
    }

    // ---- internals of the seam ----

    fn begin(&self, st: &mut State, kind: CallKind) -> Option<Fault> {
        st.count(kind);
        st.fault(FaultTarget::Call(kind))
    }

    fn finish_cost(&self, kind: CallKind) {
        let (bytes, sim) = rpc::COPIED.with(|c| c.replace((0, Duration::ZERO)));
        let cost = self.sh.cfg.cost.cost(bytes).saturating_add(sim);
        {
            let mut st = self.lock();
            st.counts.bytes_copied = st.counts.bytes_copied.saturating_add(bytes);
            st.record_latency(LatencySample { kind, simulated: cost }, self.sh.cfg.log_capacity);
        }
        if self.sh.cfg.cost.sleep && !cost.is_zero() {
            std::thread::sleep(cost);
        }
    }

    /// An ioctl on a FastRPC file of a [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench: into the
    /// real driver's `fastrpc_device_ioctl`, without the bench's lock (the driver blocks this
    /// thread and calls back into the bench). `Err` gives the lock back for any other file.
    ///
    /// # Safety
    ///
    /// `arg` must satisfy the request's contract, as for `ioctl(2)`.
    #[cfg(feature = "linux")]
    unsafe fn linux_ioctl<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        file: u64,
        request: u32,
        arg: *mut core::ffi::c_void,
        pre: Option<Fault>,
    ) -> LinuxIoctl<'a> {
        let Some((kern, lf)) = self.sh.linux.as_ref().and_then(|k| k.file(file).map(|f| (k, f))) else { return Err(st) };
        // An invoke's wait is interruptible ([`Bench::wait_until_blocked`]).
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let invoke = request == hexrpc_drivers::upstream::FASTRPC_IOCTL_INVOKE;
        if invoke {
            st.blocked.insert(tid);
        }
        drop(st);
        self.sh.cv.notify_all();
        // SAFETY: passed on from our caller.
        let r = unsafe { kern.ioctl(file, &lf, request, arg, pre) };
        drop(lf);
        let mut st = self.lock();
        if invoke {
            st.blocked.remove(&tid);
            st.interrupts.remove(&tid);
        }
        if let Err(e) = r {
            st.linux_errors.push((request, e));
        }
        Ok((st, r))
    }

    /// Without the `linux` feature every file is the models'.
    ///
    /// # Safety
    ///
    /// Nothing is done with `arg`.
    #[cfg(not(feature = "linux"))]
    unsafe fn linux_ioctl<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        _: u64,
        _: u32,
        _: *mut core::ffi::c_void,
        _: Option<Fault>,
    ) -> LinuxIoctl<'a> {
        Err(st)
    }

    fn delay_call(&self, fault: Option<Fault>) -> Option<Errno> {
        match fault {
            Some(Fault::Errno(e)) => Some(e),
            Some(Fault::Returned(_)) => Some(Errno::EINVAL),
            Some(f @ (Fault::Delay(_) | Fault::Hang)) => {
                let st = self.lock();
                drop(rpc::kernel_delay(&self.sh, st, Some(f)));
                None
            }
            None => None,
        }
    }

    /// The start of a call that is not an ioctl, open or close: [`begin`](Self::begin) under the
    /// lock, then its fault applied without it ([`delay_call`](Self::delay_call)).
    fn admit(&self, kind: CallKind) -> Result<(), Errno> {
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, kind)
        };
        match self.delay_call(fault) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

// SAFETY: `mmap` returns real shared mappings (of memfds or of real files) that stay valid until
// `munmap`; `ioctl` only reads and writes the argument struct and the user pointers inside it as
// the simulated driver's ABI says (after the plausibility checks of `user`); everything else is
// plain data or passes through to `RustixSys`.
unsafe impl Syscalls for Bench {
    fn open(&self, path: &CStr, flags: OpenFlags) -> Result<SeamOwnedFd, Errno> {
        let p = path.to_string_lossy().into_owned();
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, CallKind::Open)
        };
        let simulated = is_virtual(&p);
        let result = match self.delay_call(fault) {
            Some(e) => Err(e),
            None => {
                if simulated {
                    match self.open_linux(&p) {
                        Some(r) => r,
                        None => {
                            let mut st = self.lock();
                            self.open_virtual(&mut st, &p, flags)
                        }
                    }
                } else {
                    let r = RustixSys.open(path, flags).map(SeamOwnedFd::into_raw);
                    if let Ok(fd) = r {
                        self.lock().passthrough.insert(fd.0);
                    }
                    r
                }
            }
        };
        self.lock().open_log.push(OpenRecord { path: p, simulated, result });
        // SAFETY: a number this bench just handed out (a reserved simulated one, or a real
        // descriptor it opened); ownership passes to the caller.
        result.map(|fd| unsafe { SeamOwnedFd::from_raw(fd) })
    }

    fn open_at(&self, dir: Option<Fd>, path: &CStr, how: OpenAt) -> Result<SeamOwnedFd, Errno> {
        let name = path.to_string_lossy().into_owned();
        let fault = {
            let mut st = self.lock();
            self.begin(&mut st, CallKind::Open)
        };
        let target = self.at_target(&self.lock(), dir, &name);
        let (logged, simulated, result) = match target {
            Err(e) => (name.clone(), dir.is_none() && is_virtual(&name), Err(e)),
            Ok(AtTarget::Virtual(p)) => {
                let r = match self.delay_call(fault) {
                    Some(e) => Err(e),
                    None => {
                        let mut st = self.lock();
                        match (how, self.vstat(&st, &p)) {
                            (_, Err(e)) => Err(e),
                            (OpenAt::Dir { .. }, Ok(s)) if !s.is_dir() => Err(Errno::ENOTDIR),
                            (OpenAt::Dir { .. } | OpenAt::File, Ok(_)) => self.open_virtual(&mut st, &p, OpenFlags::READ_ONLY),
                        }
                    }
                };
                (p, true, r)
            }
            Ok(AtTarget::Real(d)) => {
                let r = match self.delay_call(fault) {
                    Some(e) => Err(e),
                    None => RustixSys.open_at(d, path, how).map(SeamOwnedFd::into_raw),
                };
                if let Ok(fd) = r {
                    self.lock().passthrough.insert(fd.0);
                }
                let logged = match d {
                    Some(d) => format!("{}/{name}", real_path(d)),
                    None => name.clone(),
                };
                (logged, false, r)
            }
        };
        self.lock().open_log.push(OpenRecord { path: logged, simulated, result });
        // SAFETY: a number this bench just handed out (a reserved simulated one, or a real
        // descriptor it opened); ownership passes to the caller.
        result.map(|fd| unsafe { SeamOwnedFd::from_raw(fd) })
    }

    fn stat_at(&self, dir: Fd, name: &CStr) -> Result<FileStat, Errno> {
        self.admit(CallKind::Stat)?;
        let n = name.to_string_lossy();
        let st = self.lock();
        match self.at_target(&st, Some(dir), &n)? {
            AtTarget::Virtual(p) => self.vstat(&st, &p),
            AtTarget::Real(_) => {
                drop(st);
                RustixSys.stat_at(dir, name)
            }
        }
    }

    fn close(&self, fd: SeamOwnedFd) -> Result<(), Errno> {
        let fd = fd.into_raw();
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Close);
        let injected = match fault {
            Some(Fault::Errno(e)) => Some(e),
            _ => None,
        };
        let r = if let Some(e) = st.fds.remove(&fd.0) {
            if let FdObj::DmaBuf(b) = e.obj {
                st.lease_fd_gone(fd.0, b);
            }
            st = release_obj(&self.sh, st, e.obj);
            Ok(())
        } else if st.passthrough.remove(&fd.0) {
            // SAFETY: a real descriptor this bench opened and its caller has just given back.
            RustixSys.close(unsafe { SeamOwnedFd::from_raw(fd) })
        } else {
            Err(Errno::EBADF)
        };
        drop(st);
        self.sh.cv.notify_all();
        match injected {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// Each bench is a kernel of its own: the HAL keeps the DSP identities its channels hold per
    /// kernel, and tests run many benches in one process.
    fn kernel_instance(&self) -> u64 {
        self.sh.instance
    }

    fn retire(&self, borrowed: BorrowedFd<'_>) -> Result<(), Errno> {
        let fd = borrowed.raw();
        let mut st = self.lock();
        let old = st.fds.get_mut(&fd.0).map(|e| core::mem::replace(&mut e.obj, FdObj::Null));
        let r = match old {
            Some(old) => {
                if let FdObj::DmaBuf(b) = old {
                    st.lease_fd_gone(fd.0, b);
                }
                st = release_obj(&self.sh, st, old);
                Ok(())
            }
            None if st.passthrough.contains(&fd.0) => RustixSys.retire(borrowed),
            None => Err(Errno::EBADF),
        };
        drop(st);
        self.sh.cv.notify_all();
        r
    }

    fn dup_cloexec(&self, fd: Fd) -> Result<SeamOwnedFd, Errno> {
        self.admit(CallKind::Dup)?;
        let mut st = self.lock();
        let r = crate::foreign::dup(&self.sh, &mut st, fd.0).map(Fd);
        // SAFETY: a number this bench just made (a simulated one it now tracks, or a real
        // descriptor it opened); ownership passes to the caller.
        r.map(|fd| unsafe { SeamOwnedFd::from_raw(fd) })
    }

    fn seek_end(&self, fd: Fd) -> Result<u64, Errno> {
        self.admit(CallKind::Seek)?;
        let st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::DmaBuf(b)) => st.buffers.get(b).map(|b| b.len).ok_or(Errno::EBADF),
            Some(FdObj::File(d)) => Ok(d.len() as u64),
            // Character devices and directories: no end to seek to that means a size.
            Some(_) => Err(Errno::EINVAL),
            None if st.passthrough.contains(&fd.0) => {
                drop(st);
                RustixSys.seek_end(fd)
            }
            None => Err(Errno::EBADF),
        }
    }

    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        self.admit(CallKind::Pread)?;
        let st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::File(d)) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(d.len());
                let n = buf.len().min(d.len() - start);
                buf[..n].copy_from_slice(&d[start..start + n]);
                Ok(n)
            }
            Some(FdObj::Dir(_)) => Err(Errno::EISDIR),
            Some(_) => Err(Errno::EINVAL),
            None if st.passthrough.contains(&fd.0) => {
                drop(st);
                RustixSys.pread(fd, buf, offset)
            }
            None => Err(Errno::EBADF),
        }
    }

    fn fstat(&self, fd: Fd) -> Result<FileStat, Errno> {
        self.admit(CallKind::Fstat)?;
        let st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::File(d)) => Ok(FileStat { mode: FileStat::S_IFREG | 0o444, nlink: 1, size: d.len() as u64, ..Default::default() }),
            Some(FdObj::Dir(_)) => Ok(FileStat { mode: FileStat::S_IFDIR | 0o555, nlink: 2, ..Default::default() }),
            Some(FdObj::Ion(_)) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: (10 << 8) | 60, ..Default::default() }),
            Some(FdObj::Rpc(_)) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: 240 << 8, ..Default::default() }),
            Some(FdObj::Heap) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: 241 << 8, ..Default::default() }),
            Some(FdObj::Null) => Ok(FileStat { mode: FileStat::S_IFCHR | 0o666, nlink: 1, rdev: (1 << 8) | 3, ..Default::default() }),
            Some(FdObj::DmaBuf(b)) => {
                Ok(FileStat { mode: 0o600, nlink: 1, size: st.buffers.get(b).map_or(0, |b| b.len), ..Default::default() })
            }
            None if st.passthrough.contains(&fd.0) => {
                drop(st);
                RustixSys.fstat(fd)
            }
            None => Err(Errno::EBADF),
        }
    }

    fn stat(&self, path: &CStr, follow: bool) -> Result<FileStat, Errno> {
        self.admit(CallKind::Stat)?;
        let p = path.to_string_lossy();
        if is_virtual(&p) {
            let st = self.lock();
            self.vstat(&st, &p)
        } else {
            RustixSys.stat(path, follow)
        }
    }

    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut core::ffi::c_void) -> Result<i32, Errno> {
        let mut st = self.lock();
        // Heap nodes and dma-bufs: no faults beyond the call counter, no kernel waits.
        let simple = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Heap) => Some((dma_heap::heap_kind_of(request), None)),
            Some(FdObj::DmaBuf(b)) => Some((dma_heap::dmabuf_kind_of(request), Some(*b))),
            _ => None,
        };
        if let Some((kind, buf)) = simple {
            match self.begin(&mut st, kind) {
                Some(Fault::Errno(e)) => return Err(e),
                Some(Fault::Returned(v)) => return Ok(v),
                _ => {}
            }
            let a = arg as usize as u64;
            return match buf {
                // SAFETY: passed on from our caller.
                None => unsafe { dma_heap::heap_ioctl(&self.sh, &mut st, request, a) },
                // SAFETY: passed on from our caller.
                Some(b) => unsafe { dma_heap::dmabuf_ioctl(&mut st, b, request, a) },
            };
        }
        // Downstream MUNMAP / MUNMAP_64 on downstream files, upstream MUNMAP on upstream ones
        // (upstream INVOKE has the number of downstream MUNMAP; the structs are the same).
        let upstream_rpc = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Rpc(f)) => st.rpc_files.get(f).map(|f| f.upstream),
            _ => None,
        };
        let is_munmap = match upstream_rpc {
            Some(false) => request == adsprpc::FASTRPC_IOCTL_MUNMAP || request == adsprpc::FASTRPC_IOCTL_MUNMAP_64,
            Some(true) => request == hexrpc_drivers::upstream::FASTRPC_IOCTL_MUNMAP,
            // Not a channel (any more): a MUNMAP sent to a retired or closed number is recorded
            // too (by the downstream numbers, as 12a's accounting does).
            None => request == adsprpc::FASTRPC_IOCTL_MUNMAP || request == adsprpc::FASTRPC_IOCTL_MUNMAP_64,
        };
        if is_munmap {
            // SAFETY: passed on from our caller (a struct of the request's size at `arg`); both
            // structs are (vaddrout, size) as two u64.
            if let Some(m) = unsafe { crate::user::read_struct::<adsprpc::fastrpc_ioctl_munmap>(arg as usize as u64) } {
                let channel = match st.fds.get(&fd.0).map(|e| &e.obj) {
                    Some(FdObj::Rpc(f)) => Some(*f),
                    _ => None,
                };
                let channel_epoch = channel.and_then(|f| st.rpc_files.get(&f)).and_then(|f| f.channel_epoch);
                let owner = st.map_origins.get(&m.vaddrout).copied();
                st.munmap_log.push(MunmapRecord { fd: fd.0, channel, channel_epoch, owner, map: (m.vaddrout, m.size) });
            }
        }
        let obj = match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::Ion(c)) => Some(Ok(*c)),
            Some(FdObj::Rpc(f)) => Some(Err(*f)),
            Some(_) => None,
            None if st.passthrough.contains(&fd.0) => {
                st.count(CallKind::OtherIoctl);
                drop(st);
                // SAFETY: a real descriptor the caller opened through us; the caller upholds the
                // ioctl contract for it.
                return unsafe { RustixSys.ioctl(fd, request, arg) };
            }
            None => return Err(Errno::EBADF),
        };
        let Some(obj) = obj else {
            st.count(CallKind::OtherIoctl);
            return Err(Errno::ENOTTY);
        };
        let up = match obj {
            Err(f) => st.rpc_files.get(&f).is_some_and(|f| f.upstream),
            Ok(_) => false,
        };
        let kind = match obj {
            Ok(_) => ion::kind_of(request),
            Err(_) if up => upstream::kind_of(request),
            Err(_) => rpc::kind_of(request),
        };
        let fault = self.begin(&mut st, kind);
        rpc::COPIED.with(|c| c.set((0, Duration::ZERO)));
        let pre = match fault {
            Some(Fault::Errno(e)) => return Err(e),
            Some(Fault::Returned(v)) => return Ok(v),
            Some(f) if kind.is_invoke() => Some(f),
            Some(f) => {
                if let Err(file) = obj {
                    if let Some(file) = st.rpc_files.get_mut(&file) {
                        file.in_ioctl += 1;
                    }
                }
                st = rpc::kernel_delay(&self.sh, st, Some(f));
                if let Err(file) = obj {
                    if let Some(file) = st.rpc_files.get_mut(&file) {
                        file.in_ioctl -= 1;
                    }
                }
                None
            }
            None => None,
        };
        if let Err(file) = obj {
            // SAFETY: passed on from our caller (a struct of the request's size at `arg`).
            unsafe { note_rpc_request(&mut st, file, kind, arg as usize as u64) };
        }
        let r = match obj {
            Ok(client) => {
                if !st.ion_clients.contains_key(&client) {
                    return Err(Errno::EBADF);
                }
                // SAFETY: passed on from our caller.
                let r = unsafe { ion::ioctl(&self.sh, &mut st, client, request, arg as usize as u64) };
                drop(st);
                r
            }
            Err(file) => {
                match st.rpc_files.get_mut(&file) {
                    Some(f) => f.in_ioctl += 1,
                    None => return Err(Errno::EBADF),
                }
                // SAFETY: passed on from our caller.
                let linux = unsafe { self.linux_ioctl(st, file, request, arg, pre) };
                let (mut st, r) = match linux {
                    Ok(done) => done,
                    // SAFETY: passed on from our caller.
                    Err(st) if up => unsafe { upstream::ioctl(&self.sh, st, file, request, arg, pre) },
                    // SAFETY: passed on from our caller.
                    Err(st) => unsafe { rpc::ioctl(&self.sh, st, file, request, arg, pre) },
                };
                let teardown = match st.rpc_files.get_mut(&file) {
                    Some(f) => {
                        // An INIT that returned 0 (after a GETINFO downstream) sets the file up.
                        if kind.is_init() && r == Ok(0) && f.cid.is_some() {
                            f.inited = true;
                        }
                        f.in_ioctl -= 1;
                        f.closed && f.in_ioctl == 0
                    }
                    None => false,
                };
                if teardown {
                    st = release_file(&self.sh, st, file);
                }
                drop(st);
                self.sh.cv.notify_all();
                r
            }
        };
        self.finish_cost(kind);
        r
    }

    unsafe fn mmap(&self, fd: Fd, len: usize, prot: Prot, offset: u64) -> Result<NonNull<u8>, Errno> {
        self.admit(CallKind::Mmap)?;
        let mut st = self.lock();
        match st.fds.get(&fd.0).map(|e| &e.obj) {
            Some(FdObj::DmaBuf(b)) => {
                let b = *b;
                let blen = st.buffers.get(&b).map_or(0, |x| x.len);
                let pages = (len as u64).div_ceil(4096) * 4096;
                if len == 0 || !offset.is_multiple_of(4096) || offset.checked_add(pages).is_none_or(|e| e > blen) {
                    return Err(Errno::EINVAL);
                }
                // SAFETY: a fresh shared mapping of a real descriptor; the caller takes on the
                // shared-memory contract.
                let p = unsafe { RustixSys.mmap(fd, len, prot, offset) }?;
                st.host_maps.insert(p.as_ptr() as usize, HostMap { len, buf: Some(b) });
                if let Some(x) = st.buffers.get_mut(&b) {
                    x.host_maps += 1;
                }
                Ok(p)
            }
            Some(_) => Err(Errno::ENODEV),
            None if st.passthrough.contains(&fd.0) => {
                // SAFETY: as above, for a real file the caller opened through us.
                let p = unsafe { RustixSys.mmap(fd, len, prot, offset) }?;
                st.host_maps.insert(p.as_ptr() as usize, HostMap { len, buf: None });
                Ok(p)
            }
            None => Err(Errno::EBADF),
        }
    }

    unsafe fn munmap(&self, addr: NonNull<u8>, len: usize) -> Result<(), Errno> {
        let mut st = self.lock();
        let fault = self.begin(&mut st, CallKind::Munmap);
        if let Some(Fault::Errno(e)) = fault {
            return Err(e);
        }
        let a = addr.as_ptr() as usize;
        match st.host_maps.get(&a) {
            Some(m) if m.len == len => {
                let m = st.host_maps.remove(&a).ok_or(Errno::EINVAL)?;
                // SAFETY: the range is a mapping this bench made with this length, and the
                // caller guarantees nothing uses it any more.
                unsafe { RustixSys.munmap(addr, len) }?;
                if let Some(b) = m.buf {
                    if let Some(x) = st.buffers.get_mut(&b) {
                        x.host_maps = x.host_maps.saturating_sub(1);
                    }
                    st.maybe_free_buffer(b);
                }
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    fn thread_id(&self) -> i32 {
        // As a device's seam answers: remembered per thread, asked again after a fork (a
        // `gettid` system call per deadline call would be the bench's cost, not hexrpc's).
        hexrpc_drivers::Syscalls::thread_id(&hexrpc_drivers::RustixSys)
    }

    fn interrupt(&self, tid: i32) -> Result<(), Errno> {
        if tid <= 0 {
            return Err(Errno(3)); // ESRCH
        }
        #[cfg(feature = "linux")]
        if self.sh.linux.is_some() {
            // The driver's interruptible wait: a thread inside an invoke that has not reached
            // it yet gets the signal when it does (as a pending signal would); one outside every
            // invoke loses it.
            let end = Instant::now() + Duration::from_secs(1);
            loop {
                if hexrpc_linux::interrupt(tid) {
                    self.lock().counts.interrupts_delivered += 1;
                    return Ok(());
                }
                if !self.lock().blocked.contains(&tid) || Instant::now() >= end {
                    self.lock().counts.interrupts_lost += 1;
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let mut st = self.lock();
        if st.blocked.contains(&tid) {
            st.interrupts.insert(tid);
            st.counts.interrupts_delivered += 1;
            drop(st);
            self.sh.cv.notify_all();
        } else {
            st.counts.interrupts_lost += 1;
        }
        Ok(())
    }
}

/// [`Bench::linux_ioctl`]: the lock and the result, or the lock back for a file of the models.
type LinuxIoctl<'a> = Result<(MutexGuard<'a, State>, Result<i32, Errno>), MutexGuard<'a, State>>;

/// Accounting of a FastRPC request that reached the kernel:
/// [`CallCounts::mmap_flags`](crate::CallCounts::mmap_flags) for MMAP / MMAP_64 (downstream and
/// upstream, Linux's own driver included) and
/// [`CallCounts::before_init`](crate::CallCounts::before_init).
///
/// # Safety
///
/// `a` must satisfy the ioctl contract of the request (a struct of its size).
unsafe fn note_rpc_request(st: &mut State, file: u64, kind: CallKind, a: u64) {
    let Some(f) = st.rpc_files.get(&file) else { return };
    let early = !f.inited
        && match kind {
            k if k.is_invoke() => true,
            CallKind::RpcMmap | CallKind::RpcMmap64 | CallKind::RpcMunmap | CallKind::RpcMunmap64 => true,
            CallKind::UpMmap | CallKind::UpMunmap | CallKind::UpMemMap | CallKind::UpMemUnmap => true,
            _ => false,
        };
    if early {
        st.counts.before_init += 1;
    }
    if matches!(kind, CallKind::RpcMmap | CallKind::RpcMmap64 | CallKind::UpMmap) {
        // Both drivers' structs start with `int fd; u32 flags`.
        // SAFETY: passed on from the caller.
        if let Some(m) = unsafe { crate::user::read_struct::<adsprpc::fastrpc_ioctl_mmap>(a) } {
            *st.counts.mmap_flags.entry(m.flags).or_insert(0) += 1;
        }
    }
}
