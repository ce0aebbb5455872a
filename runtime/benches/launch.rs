//! What hexrpc itself adds per kernel launch, for 3 buffers and 2 scalars (v2): packing, and
//! packing plus one `FASTRPC_IOCTL_INVOKE_ATTRS` through a syscall seam whose ioctl returns at
//! once (no kernel, no DSP). Run with `cargo bench -p hexrpc-runtime --bench launch`.

use core::ffi::{c_void, CStr};
use core::ptr::NonNull;

use divan::{black_box, Bencher};
use hexrpc_drivers::{Errno, Fd, FileStat, OpenFlags, Prot, Syscalls};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, PackedLaunch, Scalar, Signature};

fn main() {
    divan::main();
}

/// A syscall seam whose ioctl succeeds at once; everything else fails with `ENOSYS`.
struct ImmediateSys;

// SAFETY: no call reads or writes any memory, and `mmap` never returns a mapping.
unsafe impl Syscalls for ImmediateSys {
    fn open(&self, _: &CStr, _: OpenFlags) -> Result<Fd, Errno> {
        Err(Errno::ENOSYS)
    }
    fn close(&self, _: Fd) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
    fn pread(&self, _: Fd, _: &mut [u8], _: u64) -> Result<usize, Errno> {
        Err(Errno::ENOSYS)
    }
    fn fstat(&self, _: Fd) -> Result<FileStat, Errno> {
        Err(Errno::ENOSYS)
    }
    fn stat(&self, _: &CStr, _: bool) -> Result<FileStat, Errno> {
        Err(Errno::ENOSYS)
    }
    unsafe fn ioctl(&self, _: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        black_box((request, arg));
        Ok(0)
    }
    unsafe fn mmap(&self, _: Fd, _: usize, _: Prot, _: u64) -> Result<NonNull<u8>, Errno> {
        Err(Errno::ENOSYS)
    }
    unsafe fn munmap(&self, _: NonNull<u8>, _: usize) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
    fn thread_id(&self) -> i32 {
        1
    }
    fn interrupt(&self, _: i32) -> Result<(), Errno> {
        Err(Errno::ENOSYS)
    }
}

struct Lease;

#[divan::bench]
fn pack_3_buffers(bencher: Bencher) {
    let sig = Signature::parse("buf,buf,buf,i32,f32").unwrap();
    let lease = Lease;
    let bufs = [
        BufferRef::borrowing(&lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(&lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(&lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    let scalars = [Scalar::I32(1024), Scalar::F32(0.5)];
    bencher.bench_local(|| {
        PackedLaunch::new(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).map(|p| black_box(p).buffer_count())
    });
}

#[divan::bench]
fn pack_and_invoke_3_buffers(bencher: Bencher) {
    let sig = Signature::parse("buf,buf,buf,i32,f32").unwrap();
    let lease = Lease;
    let bufs = [
        BufferRef::borrowing(&lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(&lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(&lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    let scalars = [Scalar::I32(1024), Scalar::F32(0.5)];
    let sys = ImmediateSys;
    bencher.bench_local(|| {
        let mut p = PackedLaunch::new(AbiVersion::V2, black_box(&sig), black_box(&bufs), black_box(&scalars)).unwrap();
        p.launch(&sys, Fd(3), black_box(21)).unwrap()
    });
}
