//! Throughput of the reverse file service: a 4 MiB in-memory library image streamed through
//! apps_std fread requests of 64 KiB via the dispatcher, against a plain memcpy of the same
//! bytes. `cargo bench -p hexrpc-runtime --bench reverse`.
//!
//! The image is served from memory, so the seam is never called: a seam that refuses every call
//! is enough (and proves no file is touched).

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use hexrpc_drivers::{Errno, Fd, FileStat, OpenFlags, Prot, Syscalls};
use hexrpc_runtime::reverse::{stream_throughput, StreamBench};

const IMAGE: usize = 4 << 20;
const CHUNK: u32 = 64 << 10;

/// A seam where every call fails.
struct NoSys;

// SAFETY: no call touches memory; every call fails without side effects.
unsafe impl Syscalls for NoSys {
    fn open(&self, _: &CStr, _: OpenFlags) -> Result<Fd, Errno> {
        Err(Errno::ENOENT)
    }
    fn close(&self, _: Fd) -> Result<(), Errno> {
        Err(Errno::EBADF)
    }
    fn pread(&self, _: Fd, _: &mut [u8], _: u64) -> Result<usize, Errno> {
        Err(Errno::EBADF)
    }
    fn fstat(&self, _: Fd) -> Result<FileStat, Errno> {
        Err(Errno::EBADF)
    }
    fn stat(&self, _: &CStr, _: bool) -> Result<FileStat, Errno> {
        Err(Errno::ENOENT)
    }
    unsafe fn ioctl(&self, _: Fd, _: u32, _: *mut c_void) -> Result<i32, Errno> {
        Err(Errno::ENOTTY)
    }
    unsafe fn mmap(&self, _: Fd, _: usize, _: Prot, _: u64) -> Result<NonNull<u8>, Errno> {
        Err(Errno::ENODEV)
    }
    unsafe fn munmap(&self, _: NonNull<u8>, _: usize) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }
    fn thread_id(&self) -> i32 {
        1
    }
    fn interrupt(&self, _: i32) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }
}

fn main() {
    match stream_throughput(NoSys, IMAGE, CHUNK, 20) {
        Ok(t) => println!(
            "reverse_stream_mib_s {:.0} memcpy_mib_s {:.0} ratio {:.2} (4 MiB image, 64 KiB freads, best of 20)",
            t.reverse_stream_mib_s,
            t.memcpy_mib_s,
            t.ratio()
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    divan::main();
}

/// One full 4 MiB stream through the dispatcher (per iteration).
#[divan::bench(sample_count = 30)]
fn reverse_stream_4mib(bencher: divan::Bencher) {
    let image = vec![7u8; IMAGE];
    let mut stream = StreamBench::new(NoSys, &image, CHUNK).expect("bench setup");
    bencher.counter(divan::counter::BytesCount::new(IMAGE)).bench_local(|| stream.stream(false).expect("stream"));
}

/// A plain copy of the same 4 MiB.
#[divan::bench(sample_count = 30)]
fn memcpy_4mib(bencher: divan::Bencher) {
    let src = vec![7u8; IMAGE];
    let mut dst = vec![0u8; IMAGE];
    bencher.counter(divan::counter::BytesCount::new(IMAGE)).bench_local(|| dst.copy_from_slice(divan::black_box(&src)));
}
