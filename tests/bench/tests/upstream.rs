//! Fidelity of the upstream bench kernel (dma-heap + upstream fastrpc, board `bench-upstream`):
//! raw requests get the upstream driver's errors and semantics, and the typed calls of
//! `hexrpc_drivers::{dma_heap, upstream}` work against it.

mod common;

use core::ffi::c_void;
use std::time::Duration;

use hexrpc_bench::{elf, Bench, BenchConfig, CallKind, DspCallKind, Fault, FaultTarget};
use hexrpc_bsp::{BENCH, BENCH_UPSTREAM};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::ioc::{ioc, IOC_READ, IOC_WRITE};
use hexrpc_drivers::upstream::{self, FastrpcFd, InvokeArgs};
use hexrpc_drivers::{adsprpc, aee, ion, Errno, Error, Fd, Mapping, OpenFlags, OwnedFd, Prot, Syscalls};

fn up_bench() -> Bench {
    Bench::with_config(BenchConfig { kernel_call_timeout: Duration::from_millis(300), ..BenchConfig::for_board(&BENCH_UPSTREAM) })
}

fn raw(b: &Bench, fd: Fd, request: u32, bytes: &mut [u8]) -> Result<i32, Errno> {
    // SAFETY: `bytes` is a live buffer at least as large as the request's size field, holding no
    // user pointers except where a test puts valid ones.
    unsafe { b.ioctl(fd, request, bytes.as_mut_ptr().cast()) }
}

/// The heap node: the owned descriptor and its typed view.
fn heap(b: &Bench) -> (OwnedFd, HeapFd) {
    let o = b.open(b.board().ion_path, OpenFlags::READ_WRITE).expect("open heap");
    let h = HeapFd::from_raw(o.raw());
    (o, h)
}

/// The FastRPC node: the owned descriptor and its typed view.
fn node(b: &Bench) -> (OwnedFd, FastrpcFd) {
    let o = b.open(b.board().rpc_path, OpenFlags::READ_WRITE).expect("open fastrpc");
    let f = FastrpcFd::from_raw(o.raw());
    (o, f)
}

/// A heap buffer with a host mapping.
struct HeapBuf {
    owned: OwnedFd,
    map: Mapping<Bench>,
}

fn heap_buf(b: &Bench, h: HeapFd, len: usize) -> HeapBuf {
    let owned = dma_heap::alloc(b, h, len as u64).expect("heap alloc");
    let map = Mapping::map_shared(b.clone(), owned.raw(), len, Prot::ReadWrite).expect("mmap");
    HeapBuf { owned, map }
}

impl HeapBuf {
    fn fd(&self) -> Fd {
        self.owned.raw()
    }

    fn release(self, b: &Bench) {
        self.map.unmap().expect("munmap");
        b.close(self.owned).expect("close dma-buf");
    }
}

/// Opens the node and creates the user PD from the board's shell, staged in a heap buffer.
fn create(b: &Bench, h: HeapFd) -> (OwnedFd, FastrpcFd, HeapBuf, u32) {
    let (rpc_owned, rpc) = node(b);
    let shell = elf::hexagon_elf(hexrpc_bench::DEFAULT_SHELL_LEN);
    let mut buf = heap_buf(b, h, shell.len());
    buf.map.write_at(0, &shell).unwrap();
    upstream::init_create(b, rpc, &buf.map, buf.fd(), shell.len() as u32, upstream::FASTRPC_MODE_UNSIGNED_MODULE, 0).expect("INIT_CREATE");
    (rpc_owned, rpc, buf, shell.len() as u32)
}

#[test]
fn heap_decodes_by_number_with_the_kernels_checks() {
    let b = up_bench();
    let start = b.snapshot();
    let (h_owned, h) = heap(&b);
    let alloc = dma_heap::DMA_HEAP_IOCTL_ALLOC;
    let le = |len: u64, fd: u32, fd_flags: u32, heap_flags: u64| {
        [&len.to_le_bytes()[..], &fd.to_le_bytes(), &fd_flags.to_le_bytes(), &heap_flags.to_le_bytes()].concat()
    };
    let rw_cloexec = dma_heap::O_RDWR | dma_heap::O_CLOEXEC;
    // Input checks, each EINVAL, and the struct is copied back even then.
    for (len, fd, ff, hf) in [(4096, 7, rw_cloexec, 0), (4096, 0, 0o100, 0), (4096, 0, rw_cloexec, 1), (0, 0, rw_cloexec, 0)] {
        let mut v = le(len, fd, ff, hf);
        assert_eq!(raw(&b, h.fd(), alloc, &mut v), Err(Errno::EINVAL), "{len} {fd} {ff:#o} {hf}");
    }
    // A command number other than 0 is EINVAL, not ENOTTY.
    let mut v = le(4096, 0, rw_cloexec, 0);
    assert_eq!(raw(&b, h.fd(), ioc(IOC_READ | IOC_WRITE, b'H', 1, 24), &mut v), Err(Errno::EINVAL));
    // ION 4.9's ALLOC (nr 0, 32 bytes) is read as a heap ALLOC: its `align` lands in `fd`.
    let mut ion_alloc =
        [&4096u64.to_le_bytes()[..], &0x200u64.to_le_bytes(), &(1u32 << 25).to_le_bytes(), &1u32.to_le_bytes(), &[0; 8]].concat();
    assert_eq!(raw(&b, h.fd(), ion::ION_IOC_ALLOC, &mut ion_alloc), Err(Errno::EINVAL));
    // A shorter user struct (16 bytes): the rest is zero, only 16 bytes come back.
    let mut short = le(100, 0, rw_cloexec, 0)[..16].to_vec();
    assert_eq!(raw(&b, h.fd(), ioc(IOC_READ | IOC_WRITE, b'H', 0, 16), &mut short), Ok(0));
    let fd = Fd(i32::from_le_bytes(short[8..12].try_into().unwrap()));
    assert!(fd.0 > 0);
    assert_eq!(b.fstat(fd).unwrap().size, 4096, "page-aligned");
    // SAFETY: the heap just installed this descriptor for us and nothing else owns it.
    b.close(unsafe { OwnedFd::from_raw(fd) }).unwrap();
    // Bad pointer: EFAULT.
    // SAFETY: the bench refuses the pointer before touching it.
    assert_eq!(unsafe { b.ioctl(h.fd(), alloc, 16 as *mut c_void) }, Err(Errno::EFAULT));
    // Typed: alloc, sync bracket, sync checks.
    let buf = heap_buf(&b, h, 8192);
    dma_heap::sync(&b, buf.fd(), dma_heap::DMA_BUF_SYNC_START | dma_heap::DMA_BUF_SYNC_WRITE).unwrap();
    dma_heap::sync(&b, buf.fd(), dma_heap::DMA_BUF_SYNC_END | dma_heap::DMA_BUF_SYNC_WRITE).unwrap();
    assert_eq!(dma_heap::sync(&b, buf.fd(), dma_heap::DMA_BUF_SYNC_END), Err(Error::Invalid), "no direction");
    let mut no_dir = 4u64.to_le_bytes();
    assert_eq!(raw(&b, buf.fd(), dma_heap::DMA_BUF_IOCTL_SYNC, &mut no_dir), Err(Errno::EINVAL));
    let mut bad_bit = 9u64.to_le_bytes();
    assert_eq!(raw(&b, buf.fd(), dma_heap::DMA_BUF_IOCTL_SYNC, &mut bad_bit), Err(Errno::EINVAL));
    assert_eq!(b.counts().of(CallKind::DmaBufSync), 4);
    buf.release(&b);
    b.close(h_owned).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(1)), start);
}

#[test]
fn reused_request_numbers_are_refused_with_each_drivers_errno() {
    let b = up_bench();
    let start = b.snapshot();
    let (rpc_owned, rpc) = node(&b);
    // Downstream requests on the upstream node.
    let mut info = 3u32.to_le_bytes();
    assert_eq!(raw(&b, rpc.fd(), adsprpc::FASTRPC_IOCTL_GETINFO, &mut info), Err(Errno::ENOTTY));
    let mut init = [0u8; 40];
    assert_eq!(raw(&b, rpc.fd(), adsprpc::FASTRPC_IOCTL_INIT, &mut init), Err(Errno::ENOTTY));
    let mut ctrl = [3u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(raw(&b, rpc.fd(), adsprpc::FASTRPC_IOCTL_CONTROL, &mut ctrl), Err(Errno::ENOTTY));
    // Downstream INVOKE has upstream ALLOC_DMA_BUFF's number: the invoke struct is read as
    // {fd, flags, size} and the "size" is the argument-array pointer: ENOMEM.
    let pra = [0u8; 16];
    let mut inv = [&3u32.to_le_bytes()[..], &0x0300_0000u32.to_le_bytes(), &(pra.as_ptr() as u64).to_le_bytes()].concat();
    assert_eq!(adsprpc::FASTRPC_IOCTL_INVOKE, upstream::FASTRPC_IOCTL_ALLOC_DMA_BUFF);
    assert_eq!(raw(&b, rpc.fd(), adsprpc::FASTRPC_IOCTL_INVOKE, &mut inv), Err(Errno::ENOMEM));
    // The header's FREE_DMA_BUFF has no handler.
    assert_eq!(upstream::free_dma_buff(&b, rpc, Fd(5)), Err(Error::Os(Errno::ENOTTY)));
    b.close(rpc_owned).unwrap();

    // Upstream requests on a downstream node: INVOKE is downstream MUNMAP (no such map: -1/EPERM).
    let d = Bench::for_board(&BENCH);
    let dfd_owned = d.open(BENCH.rpc_path, OpenFlags::READ_WRITE).unwrap();
    let dfd = dfd_owned.raw();
    adsprpc::getinfo(&d, dfd, BENCH.channel).unwrap();
    let args = [0u8; 24];
    let mut inv = [&3u32.to_le_bytes()[..], &0x0300_0000u32.to_le_bytes(), &(args.as_ptr() as u64).to_le_bytes()].concat();
    assert_eq!(raw(&d, dfd, upstream::FASTRPC_IOCTL_INVOKE, &mut inv), Err(Errno::EPERM));
    let mut none = [0u8; 8];
    assert_eq!(raw(&d, dfd, upstream::FASTRPC_IOCTL_INIT_ATTACH, &mut none), Err(Errno::ENOTTY));
    let mut cap = [0u8; 28];
    assert_eq!(raw(&d, dfd, upstream::FASTRPC_IOCTL_GET_DSP_INFO, &mut cap), Err(Errno::ENOTTY));
    d.close(dfd_owned).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(1)), start);
}

#[test]
fn init_create_checks_and_process_lifecycle() {
    let b = up_bench();
    let start = b.snapshot();
    let (h_owned, h) = heap(&b);
    let shell = elf::hexagon_elf(hexrpc_bench::DEFAULT_SHELL_LEN);
    let mut buf = heap_buf(&b, h, shell.len());
    buf.map.write_at(0, &shell).unwrap();
    let (rpc_owned, rpc) = node(&b);
    let len = shell.len() as u32;
    // A signed PD from the non-secure node of a secure channel.
    assert_eq!(upstream::init_create(&b, rpc, &buf.map, buf.fd(), len, 0, 0), Err(Error::Os(Errno::ECONNREFUSED)));
    // Over 2 MiB: EINVAL (raw, the typed call would refuse the length first).
    let mut big = [
        &(3u32 << 20).to_le_bytes()[..],
        &buf.fd().0.to_le_bytes(),
        &8u32.to_le_bytes(),
        &0u32.to_le_bytes(),
        &(buf.map.addr() as u64).to_le_bytes(),
    ]
    .concat();
    assert_eq!(raw(&b, rpc.fd(), upstream::FASTRPC_IOCTL_INIT_CREATE, &mut big), Err(Errno::EINVAL));
    // A shell fd that is not a dma-buf (the heap node itself): EINVAL from the map.
    let mut bad_fd =
        [&len.to_le_bytes()[..], &h.fd().0.to_le_bytes(), &8u32.to_le_bytes(), &0u32.to_le_bytes(), &(buf.map.addr() as u64).to_le_bytes()]
            .concat();
    assert_eq!(raw(&b, rpc.fd(), upstream::FASTRPC_IOCTL_INIT_CREATE, &mut bad_fd), Err(Errno::EINVAL));
    // A faulting struct pointer: EFAULT (downstream would say -1/EPERM).
    // SAFETY: refused before any access.
    assert_eq!(unsafe { b.ioctl(rpc.fd(), upstream::FASTRPC_IOCTL_INIT_CREATE, 8 as *mut c_void) }, Err(Errno::EFAULT));
    // An invoke before INIT: the simulated DSP's AEE_EBADSTATE.
    let mut args = InvokeArgs::<'_, 1>::new(3).unwrap();
    assert_eq!(upstream::invoke(&b, rpc, 3, &mut args), Err(Error::Returned(aee::AEE_EBADSTATE)));
    // Handle 1 is the kernel's.
    assert_eq!(upstream::invoke(&b, rpc, upstream::FASTRPC_INIT_HANDLE, &mut args), Err(Error::Os(Errno::EPERM)));
    upstream::init_create(&b, rpc, &buf.map, buf.fd(), len, upstream::FASTRPC_MODE_UNSIGNED_MODULE, 0).unwrap();
    assert!(b.dsp_pid(rpc.fd()).is_some());
    // The listener registers on the same fd.
    let mut init2 = InvokeArgs::<'_, 1>::new(3).unwrap();
    upstream::invoke(&b, rpc, 3, &mut init2).unwrap();
    // The shell's map is kept by the driver until close: the buffer outlives its fd and mapping.
    buf.release(&b);
    assert_eq!(b.snapshot().ion_buffers, start.ion_buffers + 1);
    b.close(rpc_owned).unwrap();
    b.close(h_owned).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(1)), start);
}

#[test]
fn invoke_maps_fd_arguments_and_copies_back_after_dsp_errors() {
    for board in [&BENCH, &BENCH_UPSTREAM] {
        // The same call on both kernels: an unknown method of the listener with one
        // out-buffer. The DSP answers AEE_EUNSUPPORTED; only the upstream driver copies back.
        let b = Bench::for_board(board);
        let mut out = [0xEEu8; 32];
        let rv = if board.abi == hexrpc_bsp::KernelAbi::Upstream {
            let (h_owned, h) = heap(&b);
            let (rpc_owned, rpc, shell, _) = create(&b, h);
            let mut args = InvokeArgs::<'_, 1>::new(9).unwrap();
            args.output(&mut out).unwrap();
            let rv = upstream::invoke(&b, rpc, 3, &mut args);
            b.close(rpc_owned).unwrap();
            shell.release(&b);
            b.close(h_owned).unwrap();
            rv
        } else {
            let s = common::open_session(&b);
            let mut args = adsprpc::InvokeArgs::<'_, 1>::new(9).unwrap();
            args.output(&mut out).unwrap();
            let rv = adsprpc::invoke(&b, s.rpc, 3, &mut args);
            s.close(&b);
            rv
        };
        assert_eq!(rv, Err(Error::Returned(aee::AEE_EUNSUPPORTED)), "{}", board.name);
        if board.abi == hexrpc_bsp::KernelAbi::Upstream {
            assert_eq!(out, [0u8; 32], "upstream: the zeroed payload comes back even after an error");
        } else {
            assert_eq!(out, [0xEEu8; 32], "downstream: no copy-back after an error");
        }
    }

    // Upstream: an argument whose fd is not a dma-buf is EINVAL; a buffer passed by fd must be
    // inside a mapping of it.
    let b = up_bench();
    let start = b.snapshot();
    let (h_owned, h) = heap(&b);
    let (rpc_owned, rpc, shell, _) = create(&b, h);
    let mut data = heap_buf(&b, h, 4096);
    data.map.write_at(0, b"hello").unwrap();
    let mut args = InvokeArgs::<'_, 2>::new(9).unwrap();
    args.in_handle(h.fd(), 0, 4096, 0).unwrap();
    assert_eq!(upstream::invoke(&b, rpc, 3, &mut args), Err(Error::Os(Errno::EINVAL)));
    let ok = [0u8; 16];
    let mut raw_args =
        [&(ok.as_ptr() as u64).to_le_bytes()[..], &16u64.to_le_bytes(), &data.fd().0.to_le_bytes(), &0u32.to_le_bytes()].concat();
    let mut inv = [&3u32.to_le_bytes()[..], &0x0901_0000u32.to_le_bytes(), &(raw_args.as_mut_ptr() as u64).to_le_bytes()].concat();
    assert_eq!(raw(&b, rpc.fd(), upstream::FASTRPC_IOCTL_INVOKE, &mut inv), Err(Errno::EFAULT), "pointer outside the fd's mapping");
    // A mapped input buffer inside its mapping reaches the DSP (unknown method: AEE answer).
    let mut args = InvokeArgs::<'_, 2>::new(9).unwrap();
    args.input_fd(&data.map, data.fd(), 0, 5, 0).unwrap();
    assert_eq!(upstream::invoke(&b, rpc, 3, &mut args), Err(Error::Returned(aee::AEE_EUNSUPPORTED)));
    // MEM_MAP keeps a map until MEM_UNMAP; a second unmap finds nothing.
    let before = b.snapshot().dsp_maps;
    let va = upstream::mem_map(&b, rpc, data.fd(), 0, upstream::FASTRPC_MAP_FD, data.map.addr() as u64, 4096).unwrap();
    assert_ne!(va, 0);
    assert_eq!(b.snapshot().dsp_maps, before + 1);
    upstream::mem_unmap(&b, rpc, data.fd(), va, 4096).unwrap();
    assert_eq!(upstream::mem_unmap(&b, rpc, data.fd(), va, 4096), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(upstream::mem_map(&b, rpc, h.fd(), 0, 0, 0, 4096), Err(Error::Os(Errno::EINVAL)), "not a dma-buf");
    // MMAP: only kernel pages with vaddrin 0.
    let mut m =
        [&(-1i32).to_le_bytes()[..], &0u32.to_le_bytes(), &0u64.to_le_bytes(), &4096u64.to_le_bytes(), &0u64.to_le_bytes()].concat();
    assert_eq!(raw(&b, rpc.fd(), upstream::FASTRPC_IOCTL_MMAP, &mut m), Err(Errno::EINVAL), "flags 0");
    let mut m =
        [&(-1i32).to_le_bytes()[..], &0x1000u32.to_le_bytes(), &0x1000u64.to_le_bytes(), &4096u64.to_le_bytes(), &0u64.to_le_bytes()]
            .concat();
    assert_eq!(raw(&b, rpc.fd(), upstream::FASTRPC_IOCTL_MMAP, &mut m), Err(Errno::EINVAL), "vaddrin");
    let dva = upstream::mmap(&b, rpc, upstream::ADSP_MMAP_ADD_PAGES, 8192).unwrap();
    assert_eq!(upstream::munmap(&b, rpc, dva, 4096), Err(Error::Os(Errno::EINVAL)), "size must match");
    upstream::munmap(&b, rpc, dva, 8192).unwrap();
    // GET_DSP_INFO checks.
    assert_eq!(upstream::get_dsp_info(&b, rpc, 1, 0), Err(Error::Os(Errno::ECHRNG)));
    assert_eq!(upstream::get_dsp_info(&b, rpc, 5, 0), Err(Error::Os(Errno::ECHRNG)));
    assert_eq!(upstream::get_dsp_info(&b, rpc, 3, 256), Err(Error::Os(Errno::EOVERFLOW)));
    assert_eq!(upstream::get_dsp_info(&b, rpc, 3, 6), Ok(0x68));
    b.inject(FaultTarget::Dsp(DspCallKind::DspInfo), 1, Fault::Returned(upstream::DSP_UNSUPPORTED_API as i32));
    assert_eq!(upstream::get_dsp_info(&b, rpc, 3, 6), Err(Error::Os(Errno::ENOTSUP)));
    // ALLOC_DMA_BUFF gives a dma-buf fd.
    let dfd = upstream::alloc_dma_buff(&b, rpc, 4096).unwrap();
    assert_eq!(b.fstat(dfd.raw()).unwrap().size, 4096);
    b.close(dfd).unwrap();
    data.release(&b);
    b.close(rpc_owned).unwrap();
    shell.release(&b);
    b.close(h_owned).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(1)), start);
}

#[test]
fn restart_timeouts_sessions_and_interrupts() {
    let b = up_bench();
    let start = b.snapshot();
    let (h_owned, h) = heap(&b);
    let (rpc_owned, rpc, shell, len) = create(&b, h);
    // Kernel messages time out (10 s on a device, 300 ms here).
    b.inject(FaultTarget::Dsp(DspCallKind::KernelMmap), 1, Fault::Hang);
    assert_eq!(upstream::mmap(&b, rpc, upstream::ADSP_MMAP_ADD_PAGES, 4096), Err(Error::Os(Errno::ETIMEDOUT)));
    b.release_hangs();
    // An interrupted user invoke returns EINTR and is not resumed; its context stays until close.
    b.inject(FaultTarget::Call(CallKind::UpInvoke), 1, Fault::Hang);
    let (b2, rpc2) = (b.clone(), rpc);
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(b2.thread_id()).unwrap();
        let mut out = [0u8; 8];
        let mut args = InvokeArgs::<'_, 1>::new(9).unwrap();
        args.output(&mut out).unwrap();
        upstream::invoke(&b2, rpc2, 3, &mut args)
    });
    let tid = rx.recv().unwrap();
    assert!(b.wait_until_blocked(tid, Duration::from_secs(2)));
    b.interrupt(tid).unwrap();
    assert_eq!(t.join().unwrap(), Err(Error::Os(Errno::EINTR)));
    assert_eq!(b.snapshot().parked, 1, "the context stays with the file");
    b.release_hangs();
    // A DSP restart: the old fd fails with EPIPE forever; the node is gone while the DSP is down.
    b.set_dsp_available(false);
    b.restart_dsp();
    let mut args = InvokeArgs::<'_, 1>::new(3).unwrap();
    assert_eq!(upstream::invoke(&b, rpc, 3, &mut args), Err(Error::Os(Errno::EPIPE)));
    assert_eq!(b.open(BENCH_UPSTREAM.rpc_path, OpenFlags::READ_WRITE), Err(Errno::ENOENT));
    b.set_dsp_available(true);
    let (rpc3_owned, rpc3) = node(&b);
    upstream::init_create(&b, rpc3, &shell.map, shell.fd(), len, upstream::FASTRPC_MODE_UNSIGNED_MODULE, 0).unwrap();
    upstream::invoke(&b, rpc3, 3, &mut args).unwrap();
    assert_eq!(upstream::invoke(&b, rpc, 3, &mut args), Err(Error::Os(Errno::EPIPE)));
    b.close(rpc3_owned).unwrap();
    b.close(rpc_owned).unwrap();
    // Sessions are taken at open: the ninth open of an 8-session channel is EBUSY.
    let fds: Vec<(OwnedFd, FastrpcFd)> = (0..8).map(|_| node(&b)).collect();
    assert_eq!(b.open(BENCH_UPSTREAM.rpc_path, OpenFlags::READ_WRITE), Err(Errno::EBUSY));
    for (o, _) in fds {
        b.close(o).unwrap();
    }
    shell.release(&b);
    b.close(h_owned).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}
