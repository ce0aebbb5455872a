//! adsprpc through the drivers' typed calls: every request kind and each named error.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hexrpc_bench::elf::{elf_image, hexagon_elf};
use hexrpc_bench::{Bench, BenchConfig, CallKind, DspCallKind, EntryVersion, Fault, FaultTarget, FdlistPolicy, LibraryModel, STALE_BYTE};
use hexrpc_drivers::adsprpc::{self, InvokeArgs, ADSP_MMAP_ADD_PAGES};
use hexrpc_drivers::{aee, Errno, Error, Fd, OpenFlags, Syscalls};

fn fresh_rpc(b: &Bench) -> Fd {
    b.open_raw(b.board().rpc_path, OpenFlags::READ_ONLY).unwrap()
}

#[test]
fn getinfo_sessions_and_channels() {
    let b = Bench::with_config(BenchConfig { sessions_per_channel: 1, smmu: false, ..Default::default() });
    let r1 = fresh_rpc(&b);
    let r2 = fresh_rpc(&b);
    assert_eq!(adsprpc::getinfo(&b, r1, 4), Err(Error::Os(Errno::EPERM)), "channel must be < 4");
    assert_eq!(adsprpc::getinfo(&b, r1, 3), Ok(0), "no SMMU on this bench");
    assert_eq!(adsprpc::getinfo(&b, r1, 99), Ok(0), "later calls ignore the input");
    assert_eq!(adsprpc::getinfo(&b, r2, 3), Err(Error::Os(Errno::EPERM)), "no free session");
    assert_eq!(b.snapshot().sessions, 1);
    b.close_raw(r1).unwrap();
    // fastrpc_get_info recorded r2's channel before the failed allocation: r2 fails for good;
    // a fresh file takes the session close gave back.
    assert_eq!(adsprpc::getinfo(&b, r2, 3), Err(Error::Os(Errno::EPERM)), "a failed GETINFO is sticky");
    let r4 = fresh_rpc(&b);
    assert_eq!(adsprpc::getinfo(&b, r4, 3), Ok(0), "close gave the session back");
    // Every call that needs a session fails before GETINFO.
    let r3 = fresh_rpc(&b);
    let mut a = InvokeArgs::<'_, 1>::new(3).unwrap();
    assert_eq!(adsprpc::invoke(&b, r3, 3, &mut a), Err(Error::Os(Errno::EPERM)));
    // MMAP(ADD_PAGES) before GETINFO: fastrpc_buf_alloc dereferences fl->sctx NULL, an oops on a
    // device (the bench records it, poisons the file and returns EFAULT).
    assert_eq!(adsprpc::mmap(&b, r3, Fd(-1), ADSP_MMAP_ADD_PAGES, 0, 4096), Err(Error::Os(Errno::EFAULT)));
    assert_eq!(b.oopses().len(), 2, "the invoke's out-of-bounds read and the NULL dereference");
    b.close_raw(r2).unwrap();
    b.close_raw(r3).unwrap();
    b.close_raw(r4).unwrap();
    assert_eq!(b.snapshot().sessions, 0);
}

#[test]
fn control_setmode_getperf() {
    let b = Bench::with_config(BenchConfig { rpc_latency_us: 0, ..Default::default() });
    let s = open_session(&b);
    let mut c =
        adsprpc::fastrpc_ioctl_control { req: adsprpc::FASTRPC_CONTROL_LATENCY, lp: adsprpc::fastrpc_ctrl_latency { enable: 1, level: 0 } };
    assert_eq!(adsprpc::control(&b, s.rpc, &mut c), Err(Error::Os(Errno::EPERM)), "zero DT latency");
    c.lp.enable = 0;
    assert_eq!(adsprpc::control(&b, s.rpc, &mut c), Ok(()));
    c.req = adsprpc::FASTRPC_CONTROL_SMMU;
    assert_eq!(adsprpc::control(&b, s.rpc, &mut c), Ok(()));
    c.req = 9;
    assert_eq!(adsprpc::control(&b, s.rpc, &mut c), Err(Error::Os(Errno::ENOTTY)));
    for m in [0, 1, 2] {
        assert_eq!(adsprpc::setmode(&b, s.rpc, m), Ok(()), "mode {m}");
    }
    // SESSION is accepted at any time; after INIT it would re-target this file's calls to an
    // identity without a process (kernel_rules/), so it goes to a file of its own here.
    let other = fresh_rpc(&b);
    assert_eq!(adsprpc::setmode(&b, other, 4), Ok(()), "mode 4");
    b.close_raw(other).unwrap();
    assert_eq!(adsprpc::setmode(&b, s.rpc, 3), Err(Error::Os(Errno::ENOTTY)));
    // Profile mode is on now: an invoke creates this thread's record.
    assert_eq!(process_exit(&b, s.rpc), Ok(()));
    let mut data = [0i64; adsprpc::PERF_KEYS];
    let mut keys = [0u8; 128];
    assert_eq!(adsprpc::getperf(&b, s.rpc, &mut data, &mut keys), Ok(12));
    assert!(keys.starts_with(b"count:flush:map:copy:glink:getargs:putargs:invalidate:invoke:tid:ptr\0"));
    assert_eq!(data[0], 1, "one invoke counted");
    let c = b.counts();
    assert_eq!(c.of(CallKind::RpcGetperf), 1);
    assert_eq!(c.of(CallKind::RpcSetmode), 5);
    s.close(&b);
}

#[test]
fn init_errors() {
    let b = bench();
    let ion_fd = b.open_raw(b.board().ion_path, OpenFlags::READ_ONLY).unwrap();
    let rpc = fresh_rpc(&b);
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Os(Errno::EPERM)), "no session yet");
    adsprpc::getinfo(&b, rpc, 3).unwrap();
    let shell = "/bench/dsp/cdsp/fastrpc_shell_3";
    b.add_file(shell, b"#!/bin/sh\n".repeat(100));
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Returned(aee::AEE_EBADELF)), "not an ELF");
    b.add_file(shell, elf_image(62, 4096));
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Returned(aee::AEE_EBADELF)), "x86-64 ELF");
    b.add_file(shell, hexagon_elf(40));
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Returned(aee::AEE_EBADELF)), "short shell");
    b.set_missing(shell);
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Os(Errno::ENOENT)));
    b.set_unreadable(shell);
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Os(Errno::EACCES)));
    b.set_present(shell);
    // filelen of 2 MiB or more: -1.
    let big = alloc(&b, ion_fd, 2 << 20);
    assert_eq!(adsprpc::init(&b, rpc, 1, &big.map, big.fd, 2 << 20), Err(Error::Os(Errno::EPERM)));
    assert_eq!(adsprpc::init(&b, rpc, 9, &big.map, big.fd, 4096), Err(Error::Os(Errno::ENOTTY)), "unknown flags");
    big.release(&b, ion_fd);
    b.set_dsp_available(false);
    b.add_file(shell, hexagon_elf(4096));
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Os(Errno::ENOTCONN)));
    b.set_dsp_available(true);
    b.inject(FaultTarget::Dsp(DspCallKind::CreateProcess), 1, Fault::Returned(aee::AEE_ENOMEMORY));
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Returned(aee::AEE_ENOMEMORY)));
    assert_eq!(init_shell(&b, ion_fd, rpc), Ok(()));
    // The kernel never refuses a second INIT (fastrpc_init_process); the DSP refuses a create for
    // the file's live identity.
    assert_eq!(init_shell(&b, ion_fd, rpc), Err(Error::Returned(aee::AEE_EBADSTATE)), "already has a process");
    assert_eq!(b.snapshot().dsp_processes, 1);
    // INIT_ATTRS and ATTACH on fresh fds: each needs an identity without a live process (the
    // second session of this process, then the tgid again once `rpc` released it).
    let r2 = fresh_rpc(&b);
    adsprpc::getinfo(&b, r2, 3).unwrap();
    let mut sh = alloc(&b, ion_fd, 4096);
    sh.map.write_at(0, &hexagon_elf(4096)).unwrap();
    assert_eq!(adsprpc::setmode(&b, r2, adsprpc::FASTRPC_MODE_SESSION), Ok(()));
    assert_eq!(adsprpc::init_attrs(&b, r2, 1, &sh.map, sh.fd, 4096, 0, 0), Ok(()));
    let r3 = fresh_rpc(&b);
    adsprpc::getinfo(&b, r3, 3).unwrap();
    assert_eq!(
        adsprpc::init(&b, r3, adsprpc::FASTRPC_INIT_ATTACH, &sh.map, sh.fd, 0),
        Err(Error::Returned(aee::AEE_EBADSTATE)),
        "the tgid's process is alive"
    );
    b.close_raw(rpc).unwrap();
    assert_eq!(adsprpc::init(&b, r3, adsprpc::FASTRPC_INIT_ATTACH, &sh.map, sh.fd, 0), Ok(()));
    let r4 = fresh_rpc(&b);
    adsprpc::getinfo(&b, r4, 0).unwrap();
    assert_eq!(adsprpc::init(&b, r4, 1, &sh.map, sh.fd, 4096), Err(Error::Os(Errno::EPERM)), "no DSP on channel 0 here");
    sh.release(&b, ion_fd);
    assert_eq!(b.counts().of(CallKind::RpcInitAttrs), 1);
    for f in [r2, r3, r4, ion_fd] {
        b.close_raw(f).unwrap();
    }
    assert_eq!(b.snapshot().dsp_processes, 0);
}

#[test]
fn mmap_munmap_and_munmap_fd() {
    // A CAF driver that writes `vaddrout` (the comma three's does not): the DSP addresses are
    // what this test follows.
    let b =
        Bench::with_config(BenchConfig { mmap_writes_vaddrout: true, reverse_timeout: Duration::from_millis(600), ..Default::default() });
    let start = b.snapshot();
    let s = open_session(&b);
    let buf = alloc(&b, s.ion, 16384);
    let va = buf.map.addr() as u64;
    let r = adsprpc::mmap(&b, s.rpc, buf.fd, 0, va, 16384).unwrap();
    assert_ne!(r, 0);
    // A covering map is reused (refcount 2, same DSP address, no DSP message).
    assert_eq!(adsprpc::mmap_64(&b, s.rpc, buf.fd, 0, va + 4096, 4096), Ok(r));
    assert_eq!(b.counts().dsp_of(DspCallKind::KernelMmap), 1);
    assert_eq!(b.snapshot().dsp_maps, 1);
    assert_eq!(adsprpc::munmap(&b, s.rpc, r, 16384), Err(Error::Os(Errno::EPERM)), "refs == 2");
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, va, 16384), Ok(()));
    assert_eq!(adsprpc::munmap_64(&b, s.rpc, r, 4096), Err(Error::Os(Errno::EPERM)), "size must match");
    assert_eq!(adsprpc::munmap(&b, s.rpc, r, 16384), Ok(()));
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, va, 16), Err(Error::Os(Errno::EPERM)), "no map left");
    // Errors.
    assert_eq!(adsprpc::mmap(&b, s.rpc, buf.fd, 0, va, 0), Err(Error::Os(Errno::EPERM)), "size 0");
    assert_eq!(adsprpc::mmap(&b, s.rpc, buf.fd, 0, va, 1 << 20), Err(Error::Os(Errno::EPERM)), "beyond the buffer");
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(0), 0, va, 4096), Err(Error::Os(Errno::EPERM)), "fd 0 is not ION");
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(-1), ADSP_MMAP_ADD_PAGES, 0x1000, 4096), Err(Error::Os(Errno::EINVAL)));
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(-1), ADSP_MMAP_ADD_PAGES, 0, 0), Err(Error::Os(Errno::EPERM)));
    assert_eq!(adsprpc::mmap(&b, s.rpc, Fd(-1), ADSP_MMAP_ADD_PAGES, 0, 1 << 40), Err(Error::Os(Errno::ENOMEM)));
    let k = adsprpc::mmap(&b, s.rpc, Fd(-1), ADSP_MMAP_ADD_PAGES, 0, 8192).unwrap();
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, Fd(-1), 0, 8192), Err(Error::Os(Errno::EPERM)), "ADD_PAGES is not an fd map");
    b.inject(FaultTarget::Dsp(DspCallKind::KernelMunmap), 1, Fault::Returned(aee::AEE_EBADPARM));
    // fastrpc_internal_munmap wraps the DSP message in a VERIFY: a refusal is -1.
    assert_eq!(adsprpc::munmap(&b, s.rpc, k, 8192), Err(Error::Os(Errno::EPERM)));
    assert_eq!(b.snapshot().dsp_maps, 1, "a refused unmap keeps the map");
    assert_eq!(adsprpc::munmap(&b, s.rpc, k, 8192), Ok(()));
    // A map left behind is freed by close.
    adsprpc::mmap(&b, s.rpc, buf.fd, 0, va, 4096).unwrap();
    buf.release(&b, s.ion);
    assert_eq!(b.snapshot().ion_buffers, 1, "the driver map holds the buffer");
    s.close(&b);
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn mmap_vaddrout_is_a_configuration_choice() {
    let b = Bench::with_config(BenchConfig { mmap_writes_vaddrout: false, ..Default::default() });
    let s = open_session(&b);
    let buf = alloc(&b, s.ion, 4096);
    assert_eq!(adsprpc::mmap(&b, s.rpc, buf.fd, 0, buf.map.addr() as u64, 4096), Ok(0), "AGNOS never writes vaddrout");
    buf.release(&b, s.ion);
    s.close(&b);
}

#[test]
fn invoke_variants_and_errors() {
    // A DSP that lists every handle fd after a successful call (the fdlist mechanism under test).
    let b = Bench::with_config(BenchConfig {
        fdlist: FdlistPolicy::EveryHandle,
        reverse_timeout: Duration::from_millis(600),
        ..Default::default()
    });
    let dir = temp_dir("invoke");
    std::fs::write(dir.join("k"), hexagon_elf(4096)).unwrap();
    b.register_library(
        "k",
        LibraryModel::new(EntryVersion::V2, 1, 0, |k| {
            let _ = k.write(0, 0, b"kernel");
        }),
    );
    let start = b.snapshot();
    let s = open_session(&b);
    let l = spawn_listener(&b, s.rpc, dir);
    let h = open_lib(&b, s.rpc, "k").unwrap().unwrap();
    let buf = alloc(&b, s.ion, 4096);

    // Plain INVOKE cannot carry handles.
    let mut a = InvokeArgs::<'_, 1>::new(2).unwrap();
    a.out_handle(buf.fd, adsprpc::FASTRPC_ATTR_NOVA).unwrap();
    assert_eq!(adsprpc::invoke(&b, s.rpc, h, &mut a), Err(Error::Os(Errno::EPERM)));
    // INVOKE_FD carries them (the v2 entry then refuses the empty call).
    assert_eq!(adsprpc::invoke_fd(&b, s.rpc, h, &mut a), Err(Error::Returned(aee::AEE_EBADPARM)));
    // An unknown handle.
    let mut e = InvokeArgs::<'_, 1>::new(2).unwrap();
    assert_eq!(adsprpc::invoke(&b, s.rpc, 0x4242, &mut e), Err(Error::Returned(aee::AEE_EINVHANDLE)));

    // Out-buffers come back only when the DSP returned 0; buffers with fd -1 or 0 are copied.
    let mut out = [0x11u8; 8];
    b.inject(FaultTarget::Dsp(DspCallKind::Library), 1, Fault::Returned(aee::AEE_EFAILED));
    let call = |out: &mut [u8; 8], crc: Option<&mut [u32; 64]>| {
        let pra0 = [hexrpc_bench::V2_MAGIC.to_le_bytes(), 1u32.to_le_bytes(), 16u32.to_le_bytes(), 0u32.to_le_bytes()].concat();
        let pra1 = [0u32.to_le_bytes(), 4096u32.to_le_bytes()].concat();
        let mut a = InvokeArgs::<'_, 4>::new(2).unwrap();
        a.input(&pra0).unwrap().input(&pra1).unwrap().output(out).unwrap().out_handle(buf.fd, adsprpc::FASTRPC_ATTR_NOVA).unwrap();
        match crc {
            Some(c) => adsprpc::invoke_crc(&b, s.rpc, h, &mut a, c),
            None => adsprpc::invoke_attrs(&b, s.rpc, h, &mut a),
        }
    };
    assert_eq!(call(&mut out, None), Err(Error::Returned(aee::AEE_EFAILED)));
    assert_eq!(out, [0x11; 8], "no copy-back after a DSP error");
    assert_eq!(b.snapshot().dsp_maps, 1, "the handle map stays: no fdlist after an error");
    let mut crc = [7u32; 64];
    assert_eq!(call(&mut out, Some(&mut crc)), Ok(()));
    assert_ne!(out, [0x11; 8], "copied back on success (timer)");
    assert_eq!(crc, [0; 64], "crc list copied back");
    assert_eq!(b.snapshot().dsp_maps, 1, "this call's reference was released by the fdlist");
    // Two references leaked (the refused INVOKE_FD and the failed call): MUNMAP_FD drops them
    // (a handle map has va 0 and len 0: only (fd, 0, 0) reaches it).
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, 0, 4096), Err(Error::Os(Errno::EPERM)));
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, 0, 0), Ok(()));
    assert_eq!(b.snapshot().dsp_maps, 1);
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, 0, 0), Ok(()));
    assert_eq!(b.snapshot().dsp_maps, 0);
    assert_eq!(adsprpc::munmap_fd(&b, s.rpc, buf.fd, 0, 0), Err(Error::Os(Errno::EPERM)));
    let mut kernel_out = [0u8; 6];
    buf.map.read_at(0, &mut kernel_out).unwrap();
    assert_eq!(&kernel_out, b"kernel");

    // An out-buffer the DSP does not write holds stale bytes (the driver does not zero it).
    let mut stale = [0u8; 32];
    {
        let mut a = InvokeArgs::<'_, 2>::new(7).unwrap();
        a.output(&mut stale).unwrap();
        assert_eq!(adsprpc::invoke(&b, s.rpc, h, &mut a), Ok(()));
    }
    assert_eq!(stale, [STALE_BYTE; 32]);

    // Faults on the call kind: the 2nd INVOKE_ATTRS fails with EIO before reaching the DSP.
    b.inject(FaultTarget::Call(CallKind::RpcInvokeAttrs), 2, Fault::Errno(Errno::EIO));
    assert_eq!(call(&mut out, None), Ok(()));
    assert_eq!(call(&mut out, None), Err(Error::Os(Errno::EIO)));
    // A slow DSP.
    b.inject(FaultTarget::Call(CallKind::RpcInvokeAttrs), 1, Fault::Delay(Duration::from_millis(80)));
    let t0 = Instant::now();
    assert_eq!(call(&mut out, None), Ok(()));
    assert!(t0.elapsed() >= Duration::from_millis(80));

    // The process exits: later calls get AEE_EBADSTATE from the DSP.
    assert_eq!(process_exit(&b, s.rpc), Ok(()));
    assert_eq!(call(&mut out, None), Err(Error::Returned(aee::AEE_EBADSTATE)));
    let log = l.join().unwrap();
    assert!(log.exit.is_some());
    buf.release(&b, s.ion);
    b.close_raw(s.rpc).unwrap();
    b.close_raw(s.ion).unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn invoke_before_init_and_other_descriptors() {
    let b = bench();
    let rpc = fresh_rpc(&b);
    adsprpc::getinfo(&b, rpc, 3).unwrap();
    assert_eq!(listener_init2(&b, rpc), Err(Error::Os(Errno::EPERM)), "no process yet");
    let shell = b.open_raw(b.board().shell_path, OpenFlags::READ_ONLY).unwrap();
    let mut w = 0u32;
    // SAFETY: a live u32.
    let r = unsafe { b.ioctl(shell, adsprpc::FASTRPC_IOCTL_GETINFO, (&mut w as *mut u32).cast()) };
    assert_eq!(r, Err(Errno::ENOTTY), "a regular file has no ioctls");
    assert_eq!(b.counts().of(CallKind::OtherIoctl), 1);
    assert_eq!(b.open_raw(b.board().shell_path, OpenFlags::READ_WRITE), Err(Errno::EROFS));
    b.close_raw(shell).unwrap();
    b.close_raw(rpc).unwrap();
}
