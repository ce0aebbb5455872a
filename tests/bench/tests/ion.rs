//! ION through the drivers' typed calls: every request kind, each error, and the accounting.

mod common;

use common::*;
use hexrpc_bench::{Bench, BenchConfig, CallKind};
use hexrpc_drivers::ion::{self, CacheOp};
use hexrpc_drivers::{Errno, Error, Fd, Mapping, OpenFlags, Prot, Syscalls};

fn req(len: u64, mask: u32, flags: u32, align: u64) -> ion::ion_allocation_data {
    ion::ion_allocation_data { len, align, heap_id_mask: mask, flags, ..Default::default() }
}

#[test]
fn alloc_share_map_free_and_accounting() {
    let b = bench();
    let start = b.snapshot();
    let fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let mask = b.board().heap_mask();
    let mut a = req(5000, mask, ion::ION_FLAG_CACHED, 0x200);
    ion::alloc(&b, fd, &mut a).unwrap();
    assert_eq!(a.handle, 1, "handle ids start at 1 per client");
    let mut a2 = req(1, mask, 0, 0);
    ion::alloc(&b, fd, &mut a2).unwrap();
    assert_eq!(a2.handle, 2);
    let s = b.snapshot();
    assert_eq!((s.ion_handles, s.ion_buffers, s.ion_bytes), (2, 2, 8192 + 4096), "lengths are page-aligned");

    // SHARE and MAP each export a new fd of the same buffer; the mappings share memory.
    let f1 = ion::share(&b, fd, a.handle).unwrap().into_raw();
    let f2 = ion::map(&b, fd, a.handle).unwrap().into_raw();
    assert_ne!(f1, f2);
    let mut m1 = Mapping::map_shared(b.clone(), f1, 8192, Prot::ReadWrite).unwrap();
    let m2 = Mapping::map_shared(b.clone(), f2, 8192, Prot::ReadWrite).unwrap();
    m1.write_at(8000, b"shared").unwrap();
    let mut got = [0u8; 6];
    m2.read_at(8000, &mut got).unwrap();
    assert_eq!(&got, b"shared");
    assert_eq!(b.snapshot().host_mappings, 2);
    assert_eq!(b.fstat(f1).unwrap().size, 8192);
    // A mapping past the buffer is refused, as dma-buf mmap does.
    assert_eq!(Mapping::map_shared(b.clone(), f1, 8193, Prot::ReadWrite).err(), Some(Errno::EINVAL));

    // IMPORT of our own buffer returns the existing handle (one more user reference).
    assert_eq!(ion::import(&b, fd, f2), Ok(a.handle));
    ion::sync(&b, fd, f1).unwrap();
    for op in [CacheOp::Clean, CacheOp::Invalidate, CacheOp::CleanInvalidate] {
        ion::cache(&b, fd, op, a.handle, f1, &m1, 0, 8192).unwrap();
    }
    let c = b.counts();
    assert_eq!((c.of(CallKind::IonCleanCaches), c.of(CallKind::IonInvCaches), c.of(CallKind::IonCleanInvCaches)), (1, 1, 1));

    // FREE twice (alloc + import references), then the handle is gone.
    ion::free(&b, fd, a.handle).unwrap();
    ion::free(&b, fd, a.handle).unwrap();
    assert_eq!(ion::free(&b, fd, a.handle), Err(Error::Os(Errno::EINVAL)));
    // The buffer lives on while fds and mappings hold it.
    assert_eq!(b.snapshot().ion_buffers, 2);
    m1.read_at(8000, &mut got).unwrap();
    assert_eq!(&got, b"shared");
    drop(m1);
    drop(m2);
    b.close_raw(f1).unwrap();
    b.close_raw(f2).unwrap();
    assert_eq!(b.snapshot().ion_buffers, 1);
    // Closing the client destroys its remaining handles.
    b.close_raw(fd).unwrap();
    assert_eq!(b.snapshot(), start);
    assert_eq!(b.close_raw(fd), Err(Errno::EBADF));
}

#[test]
fn alloc_errors() {
    let b = Bench::with_config(BenchConfig { ram_bytes: 64 << 20, ion_capacity: 16 << 20, extra_heaps: vec![22], ..Default::default() });
    let fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let mask = b.board().heap_mask();
    let e = |mut r: ion::ion_allocation_data| ion::alloc(&b, fd, &mut r).err();
    assert_eq!(e(req(0, mask, 0, 0)), Some(Error::Os(Errno::EINVAL)), "zero length");
    assert_eq!(e(req(u64::MAX - 10, mask, 0, 0)), Some(Error::Os(Errno::EINVAL)), "PAGE_ALIGN wraps to 0");
    assert_eq!(e(req(40 << 20, mask, 0, 0)), Some(Error::Os(Errno::ENOMEM)), "more than half of RAM");
    assert_eq!(e(req(1 << 40, mask, 0, 0)), Some(Error::Os(Errno::ENOMEM)));
    assert_eq!(e(req(4096, 1 << 9, 0, 0)), Some(Error::Os(Errno::ENODEV)), "no such heap");
    assert_eq!(e(req(4096, 0, 0, 0)), Some(Error::Os(Errno::ENODEV)));
    assert_eq!(e(req(4096, mask, 0, 8192)), Some(Error::Os(Errno::EINVAL)), "align above a page");
    assert_eq!(e(req(4096, mask, ion::ION_FLAG_SECURE, 0)), Some(Error::Os(Errno::EINVAL)), "secure on the system heap");
    // Heap 22 exists on this bench: a mask naming only it works.
    let mut ok = req(4096, 1 << 22, 0, 0);
    ion::alloc(&b, fd, &mut ok).unwrap();
    // Capacity: live bytes beyond 16 MiB fail (page shortage), freeing makes room again.
    let mut big = req(12 << 20, mask, 0, 0);
    ion::alloc(&b, fd, &mut big).unwrap();
    assert_eq!(e(req(8 << 20, mask, 0, 0)), Some(Error::Os(Errno::ENOMEM)));
    ion::free(&b, fd, big.handle).unwrap();
    let mut again = req(8 << 20, mask, 0, 0);
    ion::alloc(&b, fd, &mut again).unwrap();
    assert_eq!(again.handle, big.handle, "the lowest free id is reused");
    b.close_raw(fd).unwrap();
    assert_eq!(b.snapshot().ion_bytes, 0);
}

#[test]
fn handle_and_fd_errors() {
    let b = bench();
    let fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let other = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    assert_eq!(ion::share(&b, fd, 7), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(ion::map(&b, fd, 7), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(ion::free(&b, fd, 7), Err(Error::Os(Errno::EINVAL)));
    // SAFETY: arg 0 is never followed: the bench's ION has no custom handler (ENOTTY first).
    assert_eq!(unsafe { ion::custom(&b, fd, 0, 0) }, Err(Error::Os(Errno::ENOTTY)));
    // IMPORT / SYNC: a non-ION descriptor is EINVAL, a closed number EBADF.
    let not_ion = b.open_raw(c"/bench/dev/adsprpc-smd", OpenFlags::READ_ONLY).unwrap();
    assert_eq!(ion::import(&b, fd, not_ion), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(ion::sync(&b, fd, not_ion), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(ion::import(&b, fd, Fd(-1)), Err(Error::Os(Errno::EBADF)));
    // A buffer of one client imported by another gets a handle of its own (ids per client).
    let buf = alloc(&b, fd, 4096);
    assert_eq!(ion::import(&b, other, buf.fd), Ok(1));
    assert_eq!(b.snapshot().ion_handles, 2);
    // Cache maintenance outside every mapping of the buffer is refused.
    let mut d = ion::ion_flush_data { handle: buf.handle, fd: buf.fd.0, vaddr: 0x1000, offset: 0, length: 16 };
    // SAFETY: `d` is a live ion_flush_data, the size the request declares.
    let r = unsafe { b.ioctl(fd, ion::ION_IOC_CLEAN_CACHES, (&mut d as *mut ion::ion_flush_data).cast()) };
    assert_eq!(r, Err(Errno::EINVAL));
    buf.release(&b, fd);
    b.close_raw(other).unwrap();
    b.close_raw(not_ion).unwrap();
    b.close_raw(fd).unwrap();
    assert_eq!(b.snapshot().ion_buffers, 0);
}

#[test]
fn missing_and_unreadable_nodes() {
    let b = bench();
    let path = b.board().ion_path;
    b.set_missing("/bench/dev/ion");
    assert_eq!(b.open_raw(path, OpenFlags::READ_ONLY), Err(Errno::ENOENT));
    assert_eq!(b.stat(path, true), Err(Errno::ENOENT));
    b.set_unreadable("/bench/dev/ion");
    assert_eq!(b.open_raw(path, OpenFlags::READ_ONLY), Err(Errno::EACCES));
    assert!(b.stat(path, true).unwrap().is_char_device());
    b.set_present("/bench/dev/ion");
    let fd = b.open_raw(path, OpenFlags::READ_ONLY).unwrap();
    assert!(b.fstat(fd).unwrap().is_char_device());
    let mut x = [0u8; 4];
    assert_eq!(b.pread(fd, &mut x, 0), Err(Errno::EINVAL));
    b.close_raw(fd).unwrap();
    let log = b.open_log();
    assert_eq!(log.len(), 3);
    assert!(log.iter().all(|r| r.simulated));
    assert_eq!(log[0].result, Err(Errno::ENOENT));
    assert!(b.stat(c"/bench/dev", true).unwrap().is_dir());
}
