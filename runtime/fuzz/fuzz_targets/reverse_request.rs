//! Fuzz target: arbitrary (handle selector, scalars word, payload) through the request parser
//! and the reverse dispatcher, with a seam where no file exists and no ioctl succeeds.
//!
//! Input layout: byte 0 selects the handle (0 remotectl, 1 apps_std, 2 apps_mem, else the raw
//! u32 at bytes 1..5), bytes 5..9 are the scalars word (LE), the rest is the payload.
#![no_main]

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;

use hexrpc_drivers::listener::REMOTECTL_OPEN;
use hexrpc_drivers::{Errno, Fd, FileStat, OpenFlags, Prot, Scalars, Syscalls};
use hexrpc_runtime::reverse::wire::{pack_request, Request};
use hexrpc_runtime::reverse::{FilePolicy, ReverseService};
use libfuzzer_sys::fuzz_target;

struct NullSys;

// SAFETY: every call fails without touching memory.
unsafe impl Syscalls for NullSys {
    fn open(&self, _: &CStr, _: OpenFlags) -> Result<hexrpc_drivers::OwnedFd, Errno> {
        Err(Errno::ENOENT)
    }
    fn close(&self, _: hexrpc_drivers::OwnedFd) -> Result<(), Errno> {
        Ok(())
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
        Ok(())
    }
}

static IMAGE: [u8; 512] = [0x5A; 512];

/// A fresh service per input: runs are reproducible, and the per-slot generations of module
/// keys (which retire a slot instead of wrapping) are never used up by a long run.
fn service() -> ReverseService<'static, NullSys> {
    let limits = hexrpc_bsp::Limits { max_reverse_request: 8192, ..hexrpc_bsp::BENCH.limits };
    let svc = ReverseService::new(NullSys, Fd(-1), FilePolicy::new(&["/nonexistent/hexrpc"], limits).unwrap());
    svc.register_image("tinylib", &IMAGE).unwrap();
    svc
}

fn open(svc: &ReverseService<'_, NullSys>, name: &[u8], reply: &mut [u8]) -> u32 {
    let mut p = [0u8; 64];
    let mut prim = [0u8; 8];
    prim[..4].copy_from_slice(&(name.len() as u32).to_le_bytes());
    let n = pack_request(&[&prim, name], &[8, 0], &mut p).unwrap();
    let r = svc.dispatch(0, REMOTECTL_OPEN, &p[..n], reply);
    assert_eq!(r.status, 0);
    u32::from_le_bytes(reply[8..12].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let svc = service();
    let mut reply = vec![0u8; 8192 + 64];
    let std_h = open(&svc, b"apps_std\0", &mut reply);
    let mem_h = open(&svc, b"apps_mem\0", &mut reply);
    let handle = match data[0] {
        0 => 0,
        1 => std_h,
        2 => mem_h,
        _ => u32::from_le_bytes(data[1..5].try_into().unwrap()),
    };
    let sc = Scalars::from_raw(u32::from_le_bytes(data[5..9].try_into().unwrap()));
    let payload = &data[9..];
    let _ = Request::parse(sc, payload);
    let r = svc.dispatch(handle, sc, payload, &mut reply);
    assert!(r.reply_len <= reply.len());
    if r.status != 0 {
        assert_eq!(r.reply_len, 0);
    }
});
