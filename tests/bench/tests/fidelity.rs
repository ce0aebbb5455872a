//! Fidelity: requests built from raw bytes with a wrong size, a wrong field order or a wrong
//! request number get the kernel's error, not success.

mod common;

use core::ffi::c_void;

use common::*;
use hexrpc_drivers::adsprpc::{self, FASTRPC_IOCTL_MAGIC};
use hexrpc_drivers::ioc::{ioc, iowr, IOC_READ, IOC_WRITE};
use hexrpc_drivers::ion;
use hexrpc_drivers::{Errno, Fd, OpenFlags, Syscalls};

fn raw(b: &hexrpc_bench::Bench, fd: Fd, request: u32, bytes: &mut [u8]) -> Result<i32, Errno> {
    // SAFETY: `bytes` is a live buffer at least as large as the request's size field (every caller
    // sizes it so), and holds no user pointers except where a test puts valid ones.
    unsafe { b.ioctl(fd, request, bytes.as_mut_ptr().cast()) }
}

fn le(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn ion_rejects_wrong_numbers_sizes_orders_and_pointers() {
    let b = bench();
    let fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let mask = b.board().heap_mask();
    // The 4.12 ALLOC: 24-byte struct {len, heap_id_mask, flags, fd, unused}: ENOTTY on 4.9.
    let alloc_412 = ioc(IOC_READ | IOC_WRITE, b'I', 0, 24);
    let mut v = le(&[&4096u64.to_le_bytes(), &mask.to_le_bytes(), &1u32.to_le_bytes(), &[0; 8]]);
    assert_eq!(raw(&b, fd, alloc_412, &mut v), Err(Errno::ENOTTY));
    // An argument larger than the driver's union: EINVAL before anything else.
    let mut big = vec![0u8; 40];
    assert_eq!(raw(&b, fd, ioc(IOC_READ | IOC_WRITE, b'I', 0, 40), &mut big), Err(Errno::EINVAL));
    // FREE declared with the 8-byte ion_fd_data: another number, ENOTTY.
    let mut f = vec![0u8; 8];
    assert_eq!(raw(&b, fd, iowr::<ion::ion_fd_data>(b'I', 1), &mut f), Err(Errno::ENOTTY));
    // Unknown command numbers.
    assert_eq!(raw(&b, fd, iowr::<ion::ion_fd_data>(b'I', 3), &mut f), Err(Errno::ENOTTY));
    assert_eq!(raw(&b, fd, adsprpc::FASTRPC_IOCTL_GETINFO, &mut f), Err(Errno::ENOTTY), "an adsprpc number on /dev/ion");
    // Field order: align and heap_id_mask swapped -> the mask the kernel reads is 0: ENODEV.
    let mut swapped = le(&[&4096u64.to_le_bytes(), &(mask as u64).to_le_bytes(), &0u32.to_le_bytes(), &1u32.to_le_bytes(), &[0; 8]]);
    assert_eq!(raw(&b, fd, ion::ION_IOC_ALLOC, &mut swapped), Err(Errno::ENODEV));
    // The same bytes in the right order succeed, and the handle lands at offset 24.
    let mut right = le(&[&4096u64.to_le_bytes(), &0u64.to_le_bytes(), &mask.to_le_bytes(), &1u32.to_le_bytes(), &[0xFF; 8]]);
    assert_eq!(raw(&b, fd, ion::ION_IOC_ALLOC, &mut right), Ok(0));
    assert_eq!(&right[24..28], &1i32.to_le_bytes());
    // Bad pointers: EFAULT (ION reports faults as EFAULT).
    for p in [0usize, 0x10, 4095] {
        // SAFETY: the bench refuses these pointers before touching them.
        let r = unsafe { b.ioctl(fd, ion::ION_IOC_ALLOC, p as *mut c_void) };
        assert_eq!(r, Err(Errno::EFAULT));
    }
    b.close_raw(fd).unwrap();
}

#[test]
fn adsprpc_rejects_wrong_numbers_sizes_orders_and_pointers() {
    let b = bench();
    let s = open_session(&b);
    // INVOKE declared with a 24-byte struct is not INVOKE: ENOTTY.
    let mut inv = vec![0u8; 24];
    assert_eq!(raw(&b, s.rpc, ioc(IOC_READ | IOC_WRITE, FASTRPC_IOCTL_MAGIC, 1, 24), &mut inv), Err(Errno::ENOTTY));
    assert_eq!(raw(&b, s.rpc, ioc(IOC_READ | IOC_WRITE, FASTRPC_IOCTL_MAGIC, 16, 16), &mut inv), Err(Errno::ENOTTY));
    assert_eq!(raw(&b, s.rpc, ion::ION_IOC_ALLOC, &mut [0u8; 32]), Err(Errno::ENOTTY), "an ION number on adsprpc");
    // The upstream INVOKE number is the downstream MUNMAP: the invoke bytes read as a munmap of
    // a map that does not exist, -1.
    let upstream_invoke = ioc(IOC_READ | IOC_WRITE, FASTRPC_IOCTL_MAGIC, 3, 16);
    assert_eq!(upstream_invoke, adsprpc::FASTRPC_IOCTL_MUNMAP);
    let mut up = le(&[&3u32.to_le_bytes(), &0x0300_0000u32.to_le_bytes(), &0u64.to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, upstream_invoke, &mut up), Err(Errno::EPERM));
    // Faulting copies are -1 / EPERM here, not EFAULT.
    // SAFETY: the bench refuses the null pointer before touching it.
    assert_eq!(unsafe { b.ioctl(s.rpc, adsprpc::FASTRPC_IOCTL_GETINFO, core::ptr::null_mut()) }, Err(Errno::EPERM));
    // SAFETY: as above.
    assert_eq!(unsafe { b.ioctl(s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE, core::ptr::null_mut()) }, Err(Errno::EPERM));
    // LENGTH(sc) = 2 with a null pra: the table copy faults.
    let mut nullpra = le(&[&0x777u32.to_le_bytes(), &0x0002_0000u32.to_le_bytes(), &0u64.to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE, &mut nullpra), Err(Errno::EPERM));
    // handle and sc swapped: the kernel sends sc 0x3 (3 out-handles, no fds) -> -1.
    let mut sw = le(&[&0x0300_0000u32.to_le_bytes(), &3u32.to_le_bytes(), &0u64.to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE, &mut sw), Err(Errno::EPERM));
    // A buffer whose end wraps: -1.
    let mut wrap = le(&[&0x1000_0000u64.to_le_bytes(), &u64::MAX.to_le_bytes()]);
    let mut w = le(&[&0x777u32.to_le_bytes(), &0x0001_0000u32.to_le_bytes(), &(wrap.as_mut_ptr() as u64).to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE, &mut w), Err(Errno::EPERM));
    // INVOKE_ATTRS of a call with a handle, fds and attrs pointers swapped: the kernel reads the
    // attrs (1 = NOVA) as the fd, which is not an ION buffer: -1.
    let buf = alloc(&b, s.ion, 4096);
    let mut fds = [buf.fd.0];
    let mut attrs = [adsprpc::FASTRPC_ATTR_NOVA];
    let mut pra = [0u8; 16];
    let hdr = le(&[&0x777u32.to_le_bytes(), &0x0200_0001u32.to_le_bytes(), &(pra.as_mut_ptr() as u64).to_le_bytes()]);
    let mut good = le(&[&hdr, &(fds.as_mut_ptr() as u64).to_le_bytes(), &(attrs.as_mut_ptr() as u64).to_le_bytes()]);
    let mut bad = le(&[&hdr, &(attrs.as_mut_ptr() as u64).to_le_bytes(), &(fds.as_mut_ptr() as u64).to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, &mut bad), Err(Errno::EPERM));
    // In the right order the call reaches the DSP, which does not know handle 0x777.
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_INVOKE_ATTRS, &mut good), Ok(hexrpc_drivers::aee::AEE_EINVHANDLE));
    // SETMODE takes the value, not a pointer: a pointer is an unknown mode.
    let mut mode = 1u32;
    // SAFETY: SETMODE never dereferences its argument.
    let r = unsafe { b.ioctl(s.rpc, adsprpc::FASTRPC_IOCTL_SETMODE, (&mut mode as *mut u32).cast()) };
    assert_eq!(r, Err(Errno::ENOTTY));
    // CONTROL with req one word too late: req reads as 0, ENOTTY.
    let mut ctl = le(&[&0u32.to_le_bytes(), &3u32.to_le_bytes(), &0u32.to_le_bytes()]);
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_CONTROL, &mut ctl), Err(Errno::ENOTTY));
    // MMAP with fd and flags swapped: fd 0 is not an ION buffer: -1. (The flags are then the
    // buffer's number: were it 4, ADSP_MMAP_HEAP_ADDR, the driver would make a heap map, which
    // ignores the fd, and succeed; were it 8, the heap map's hyp-assign fails: -1.)
    let mut mm =
        le(&[&0u32.to_le_bytes(), &(buf.fd.0 as u32).to_le_bytes(), &0u64.to_le_bytes(), &4096u64.to_le_bytes(), &0u64.to_le_bytes()]);
    let want = if buf.fd.0 as u32 == adsprpc::ADSP_MMAP_HEAP_ADDR { Ok(0) } else { Err(Errno::EPERM) };
    assert_eq!(raw(&b, s.rpc, adsprpc::FASTRPC_IOCTL_MMAP, &mut mm), want);
    buf.release(&b, s.ion);
    s.close(&b);
}

#[test]
fn init_struct_with_swapped_fields_is_refused() {
    let b = bench();
    let ion_fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let rpc = b.open_raw(b.board().rpc_path, OpenFlags::READ_ONLY).unwrap();
    adsprpc::getinfo(&b, rpc, 3).unwrap();
    let mut shell = alloc(&b, ion_fd, 8192);
    shell.map.write_at(0, &hexrpc_bench::elf::hexagon_elf(8192)).unwrap();
    let file = shell.map.addr() as u64;
    let init = |filelen: u32, filefd: i32, mem: u64| {
        le(&[
            &1u32.to_le_bytes(),
            &0u32.to_le_bytes(),
            &file.to_le_bytes(),
            &filelen.to_le_bytes(),
            &filefd.to_le_bytes(),
            &mem.to_le_bytes(),
            &0u32.to_le_bytes(),
            &(-1i32).to_le_bytes(),
        ])
    };
    // filelen and filefd swapped: the "fd" is 8192, not an ION buffer.
    assert_eq!(raw(&b, rpc, adsprpc::FASTRPC_IOCTL_INIT, &mut init(shell.fd.0 as u32, 8192, 0)), Err(Errno::EPERM));
    // Donated memory is refused.
    assert_eq!(raw(&b, rpc, adsprpc::FASTRPC_IOCTL_INIT, &mut init(8192, shell.fd.0, 0x1000)), Err(Errno::EINVAL));
    // A range beyond the mapping of filefd.
    assert_eq!(raw(&b, rpc, adsprpc::FASTRPC_IOCTL_INIT, &mut init(8192 + 4096, shell.fd.0, 0)), Err(Errno::EPERM));
    assert_eq!(raw(&b, rpc, adsprpc::FASTRPC_IOCTL_INIT, &mut init(8192, shell.fd.0, 0)), Ok(0));
    shell.release(&b, ion_fd);
    b.close_raw(rpc).unwrap();
    b.close_raw(ion_fd).unwrap();
}
