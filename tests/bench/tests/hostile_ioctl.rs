//! Malformed FastRPC requests against Linux's own `fastrpc.c` (6.1.192, the `bench-linux` board)
//! and the bench's upstream model (`bench-upstream`), side by side: every request in the corpus
//! below is refused by the real driver; the model's answer is compared, and where the two differ
//! the difference is one this file names ([`KNOWN_DIFFERENCES`]), so a drift of either side
//! fails. Where hexrpc has a typed call for the same intent, the typed call is refused too.
//!
//! Run with `--nocapture` for the table.
//!
//! Not in the corpus, because the real driver does not refuse it: INIT_CREATE with the shell
//! copied (`filefd` 0) from a bad address. `fastrpc_init_create_process` hands the user's
//! `file` pointer to a *kernel* invoke, and `fastrpc_get_args` copies kernel invokes with
//! `memcpy`, not `copy_from_user`: the kernel reads an unchecked user pointer (on the harness
//! the test process crashes; on a device it is an oops or a read of whatever is mapped there).
//! hexrpc's `upstream::init_create` always passes the shell by its dma-buf descriptor, which
//! the driver maps instead (`typed_init_create_passes_the_shell_by_descriptor` below).
#![cfg(feature = "linux")]

use core::ffi::c_void;
use std::time::Duration;

use hexrpc_bench::{elf, Bench, BenchConfig};
use hexrpc_bsp::{Board, BENCH_LINUX, BENCH_UPSTREAM};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::upstream::{self as up, FastrpcFd, InvokeArgs};
use hexrpc_drivers::{Errno, Error, Mapping, OpenFlags, OwnedFd, Prot, Scalars, Syscalls};

/// A session on one board: the heap, a created DSP process, a library, a lease, a real file.
struct Rig {
    b: Bench,
    heap: OwnedFd,
    rpc: OwnedFd,
    shell: (OwnedFd, Mapping<Bench>),
    lease: (OwnedFd, Mapping<Bench>),
    file: OwnedFd,
    lib: u32,
}

fn rig(board: &'static Board) -> Rig {
    let b = Bench::with_config(BenchConfig { kernel_call_timeout: Duration::from_millis(500), ..BenchConfig::for_board(board) });
    b.register_library("noop", hexrpc_bench::LibraryModel::new(hexrpc_bench::EntryVersion::V2, 1, 0, |_| {}));
    let heap = b.open(board.ion_path, OpenFlags::READ_WRITE).expect("heap");
    let h = HeapFd::from_raw(heap.raw());
    let buf = |len: usize| {
        let o = dma_heap::alloc(&b, h, len as u64).expect("alloc");
        let m = Mapping::map_shared(b.clone(), o.raw(), len, Prot::ReadWrite).expect("mmap");
        (o, m)
    };
    let image = elf::hexagon_elf(hexrpc_bench::DEFAULT_SHELL_LEN);
    let mut shell = buf(image.len());
    shell.1.write_at(0, &image).unwrap();
    let rpc = b.open(board.rpc_path, OpenFlags::READ_WRITE).expect("node");
    let f = FastrpcFd::from_raw(rpc.raw());
    up::init_create(&b, f, &shell.1, shell.0.raw(), image.len() as u32, up::FASTRPC_MODE_UNSIGNED_MODULE, 0).expect("INIT_CREATE");
    let lib = b.preload_library(rpc.raw(), "noop").expect("library");
    let lease = buf(8192);
    let file = b.open(c"/proc/self/stat", OpenFlags::READ_ONLY).expect("a real file");
    Rig { b, heap, rpc, shell, lease, file, lib }
}

impl Rig {
    fn fd(&self) -> FastrpcFd {
        FastrpcFd::from_raw(self.rpc.raw())
    }

    fn raw(&self, request: u32, bytes: &mut [u8]) -> Result<i32, Errno> {
        // SAFETY: `bytes` is a live buffer of at least the request's size; the pointers inside
        // are either ours (live for the call) or deliberately bad ones the kernel must refuse
        // without touching memory it cannot reach.
        unsafe { self.b.ioctl(self.rpc.raw(), request, bytes.as_mut_ptr().cast()) }
    }

    fn close(self) {
        let Rig { b, heap, rpc, shell, lease, file, .. } = self;
        b.close(rpc).unwrap();
        for (o, m) in [shell, lease] {
            m.unmap().unwrap();
            b.close(o).unwrap();
        }
        b.close(file).unwrap();
        b.close(heap).unwrap();
    }
}

fn le(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `fastrpc_invoke` {handle, sc, args} with `args` records {ptr, length, fd, attr}.
fn invoke(r: &Rig, handle: u32, sc: Scalars, args: &[(u64, u64, i32)], args_ptr: Option<u64>) -> Result<i32, Errno> {
    let recs: Vec<u8> =
        args.iter().flat_map(|&(p, l, fd)| le(&[&p.to_le_bytes(), &l.to_le_bytes(), &fd.to_le_bytes(), &0u32.to_le_bytes()])).collect();
    let ptr = args_ptr.unwrap_or(recs.as_ptr() as u64);
    let mut inv = le(&[&handle.to_le_bytes(), &sc.raw().to_le_bytes(), &ptr.to_le_bytes()]);
    r.raw(up::FASTRPC_IOCTL_INVOKE, &mut inv)
}

fn sc(i: u8, o: u8, h: u8) -> Scalars {
    Scalars::new(0, i, o, h, 0).unwrap()
}

/// A user address no process can have (beyond the 48-bit user space).
const KERNEL_HALF: u64 = 0xFFFF_8000_0000_0000;

type Raw = fn(&Rig) -> Result<i32, Errno>;
type Typed = fn(&Rig) -> Result<(), Error>;

/// The corpus: each entry a request no well-behaved host sends.
fn corpus() -> Vec<(&'static str, Raw, Option<Typed>)> {
    vec![
        (
            "invoke: handle 1 (the kernel's) from user space",
            |r| invoke(r, 1, sc(0, 0, 0), &[], None),
            Some(|r| {
                let mut a = InvokeArgs::<4>::new(0).unwrap();
                up::invoke(&r.b, r.fd(), 1, &mut a)
            }),
        ),
        ("invoke: the argument array at address 8", |r| invoke(r, r.lib, sc(1, 0, 0), &[], Some(8)), None),
        ("invoke: the argument array in the kernel half", |r| invoke(r, r.lib, sc(1, 0, 0), &[], Some(KERNEL_HALF)), None),
        ("invoke: an input buffer at address 8", |r| invoke(r, r.lib, sc(1, 0, 0), &[(8, 64, -1)], None), None),
        ("invoke: an output buffer in the kernel half", |r| invoke(r, r.lib, sc(0, 1, 0), &[(KERNEL_HALF, 64, -1)], None), None),
        (
            "invoke: a buffer by a closed descriptor number",
            |r| invoke(r, r.lib, sc(1, 0, 0), &[(r.lease.1.addr() as u64, 64, 999)], None),
            None,
        ),
        (
            "invoke: a buffer by a descriptor that is not a dma-buf",
            |r| invoke(r, r.lib, sc(1, 0, 0), &[(r.lease.1.addr() as u64, 64, r.file.raw().0)], None),
            None,
        ),
        ("invoke: a handle by a closed descriptor number", |r| invoke(r, r.lib, sc(0, 0, 1), &[(0, 4096, 999)], None), None),
        (
            "invoke: a handle by a descriptor that is not a dma-buf",
            |r| invoke(r, r.lib, sc(0, 0, 1), &[(0, 4096, r.file.raw().0)], None),
            None,
        ),
        (
            "ioctl: the request's struct at address 8",
            |r| {
                // SAFETY: a pointer the kernel must refuse without touching.
                unsafe { r.b.ioctl(r.rpc.raw(), up::FASTRPC_IOCTL_INVOKE, 8 as *mut c_void) }
            },
            None,
        ),
        (
            "ioctl: an unknown request ('R', 99)",
            |r| r.raw(hexrpc_drivers::ioc::ioc(hexrpc_drivers::ioc::IOC_READ | hexrpc_drivers::ioc::IOC_WRITE, b'R', 99, 8), &mut [0; 8]),
            None,
        ),
        (
            "init_create: a shell over 2 MiB",
            |r| {
                let mut i = le(&[
                    &(3u32 << 20).to_le_bytes(),
                    &r.shell.0.raw().0.to_le_bytes(),
                    &up::FASTRPC_MODE_UNSIGNED_MODULE.to_le_bytes(),
                    &0u32.to_le_bytes(),
                    &(r.shell.1.addr() as u64).to_le_bytes(),
                ]);
                r.raw(up::FASTRPC_IOCTL_INIT_CREATE, &mut i)
            },
            None,
        ),
        (
            "init_create: the shell by a descriptor that is not a dma-buf",
            |r| {
                let mut i = le(&[
                    &4096u32.to_le_bytes(),
                    &r.file.raw().0.to_le_bytes(),
                    &up::FASTRPC_MODE_UNSIGNED_MODULE.to_le_bytes(),
                    &0u32.to_le_bytes(),
                    &(r.shell.1.addr() as u64).to_le_bytes(),
                ]);
                r.raw(up::FASTRPC_IOCTL_INIT_CREATE, &mut i)
            },
            None,
        ),
        (
            "init_create_static (no handler on 6.1)",
            |r| {
                let name = b"audiopd";
                let mut i = le(&[&(name.len() as u32).to_le_bytes(), &(1u32 << 20).to_le_bytes(), &(name.as_ptr() as u64).to_le_bytes()]);
                r.raw(up::FASTRPC_IOCTL_INIT_CREATE_STATIC, &mut i)
            },
            Some(|r| up::init_create_static(&r.b, r.fd(), b"audiopd", 1 << 20)),
        ),
        (
            "free_dma_buff (declared, never handled)",
            |r| r.raw(up::FASTRPC_IOCTL_FREE_DMA_BUFF, &mut r.lease.0.raw().0.to_le_bytes()),
            Some(|r| up::free_dma_buff(&r.b, r.fd(), r.lease.0.raw())),
        ),
        (
            "mmap: REMOTE_HEAP_ADDR",
            |r| {
                let mut m = le(&[
                    &(-1i32).to_le_bytes(),
                    &up::ADSP_MMAP_REMOTE_HEAP_ADDR.to_le_bytes(),
                    &0u64.to_le_bytes(),
                    &4096u64.to_le_bytes(),
                    &0u64.to_le_bytes(),
                ]);
                r.raw(up::FASTRPC_IOCTL_MMAP, &mut m)
            },
            Some(|r| up::mmap(&r.b, r.fd(), up::ADSP_MMAP_REMOTE_HEAP_ADDR, 4096).map(drop)),
        ),
        (
            "mmap: unknown flags",
            |r| {
                let mut m = le(&[
                    &(-1i32).to_le_bytes(),
                    &0xdeadu32.to_le_bytes(),
                    &0u64.to_le_bytes(),
                    &4096u64.to_le_bytes(),
                    &0u64.to_le_bytes(),
                ]);
                r.raw(up::FASTRPC_IOCTL_MMAP, &mut m)
            },
            Some(|r| up::mmap(&r.b, r.fd(), 0xdead, 4096).map(drop)),
        ),
        (
            "munmap: an address never mapped",
            |r| {
                let mut m = le(&[&0x1234_5000u64.to_le_bytes(), &4096u64.to_le_bytes()]);
                r.raw(up::FASTRPC_IOCTL_MUNMAP, &mut m)
            },
            Some(|r| up::munmap(&r.b, r.fd(), 0x1234_5000, 4096)),
        ),
        (
            "mem_unmap: a buffer never mapped",
            |r| {
                let mut m = le(&[
                    &0i32.to_le_bytes(),
                    &r.lease.0.raw().0.to_le_bytes(),
                    &0x1234_5000u64.to_le_bytes(),
                    &4096u64.to_le_bytes(),
                    &[0u8; 24],
                ]);
                r.raw(up::FASTRPC_IOCTL_MEM_UNMAP, &mut m)
            },
            Some(|r| up::mem_unmap(&r.b, r.fd(), r.lease.0.raw(), 0x1234_5000, 4096)),
        ),
        (
            "mem_map: a descriptor that is not a dma-buf",
            |r| up::mem_map(&r.b, r.fd(), r.file.raw(), 0, 0, r.lease.1.addr() as u64, 4096).map(|_| 0).map_err(os),
            Some(|r| up::mem_map(&r.b, r.fd(), r.file.raw(), 0, 0, r.lease.1.addr() as u64, 4096).map(drop)),
        ),
        (
            "get_dsp_info: domain 4 (FASTRPC_DEV_MAX)",
            |r| up::get_dsp_info(&r.b, r.fd(), 4, 1).map(|v| v as i32).map_err(os),
            Some(|r| up::get_dsp_info(&r.b, r.fd(), 4, 1).map(drop)),
        ),
        (
            "get_dsp_info: attribute 256",
            |r| up::get_dsp_info(&r.b, r.fd(), up::CDSP_DOMAIN_ID, 256).map(|v| v as i32).map_err(os),
            Some(|r| up::get_dsp_info(&r.b, r.fd(), up::CDSP_DOMAIN_ID, 256).map(drop)),
        ),
    ]
}

fn os(e: Error) -> Errno {
    match e {
        Error::Os(e) => e,
        other => panic!("a typed refusal where the kernel's answer was wanted: {other:?}"),
    }
}

/// A corpus entry, the real driver's answer, the model's.
type Difference = (&'static str, Result<i32, Errno>, Result<i32, Errno>);

/// Where Linux 6.1.192 and the bench's upstream model answer a corpus entry differently: (entry,
/// the real driver, the model). The model implements three requests this driver does not
/// (docs/kernel-rules.md, "Linux's own driver"); hexrpc never sends them to an upstream kernel
/// in its own paths.
const KNOWN_DIFFERENCES: &[Difference] = &[
    // fastrpc_device_ioctl has no case for it.
    // (The model's answer: the DSP's AEE_EBADSTATE, this file already has a process.)
    ("init_create_static (no handler on 6.1)", Err(Errno::ENOTTY), Ok(hexrpc_drivers::aee::AEE_EBADSTATE)),
    // fastrpc_req_mmap: only ADSP_MMAP_ADD_PAGES.
    ("mmap: REMOTE_HEAP_ADDR", Err(Errno::EINVAL), Ok(0)),
    // fastrpc_get_dsp_info: domain >= FASTRPC_DEV_MAX (4).
    ("get_dsp_info: domain 4 (FASTRPC_DEV_MAX)", Err(Errno::ECHRNG), Ok(1)),
];

#[test]
fn malformed_requests_are_refused_by_the_real_driver_and_compared_with_the_model() {
    let real = rig(&BENCH_LINUX);
    let model = rig(&BENCH_UPSTREAM);
    let mut refused_real = 0;
    let mut agree = 0;
    let mut typed_refused = 0;
    let mut typed = 0;
    let mut differences = Vec::new();
    println!("{:<62} {:<14} {:<14} hexrpc typed", "request", "linux 6.1.192", "model");
    for (name, run, typed_call) in corpus() {
        let (r, m) = (run(&real), run(&model));
        let t = typed_call.map(|f| f(&real));
        println!("{name:<62} {:<14} {:<14} {}", format!("{r:?}"), format!("{m:?}"), t.map_or("-".to_string(), |t| format!("{t:?}")));
        assert!(r.is_err(), "{name}: the real driver accepted it: {r:?}");
        refused_real += 1;
        if let Some(t) = t {
            typed += 1;
            assert!(t.is_err(), "{name}: hexrpc's typed call went through: {t:?}");
            typed_refused += 1;
        }
        if r == m {
            agree += 1;
        } else {
            differences.push((name, r, m));
        }
    }
    println!(
        "corpus: {} requests; refused by Linux {refused_real}; the model agrees on {agree}; hexrpc's typed calls refused {typed_refused} of {typed}",
        corpus().len()
    );
    let known: Vec<_> = KNOWN_DIFFERENCES.to_vec();
    assert_eq!(differences, known, "the real driver and the model differ where this file does not say so");
    assert!(real.b.linux_errors().len() >= refused_real, "every refusal came from the real driver");
    real.close();
    model.close();
}

/// hexrpc never sends INIT_CREATE with a copied shell (see the module docs): the typed call
/// puts the shell's descriptor in `filefd`, so the driver maps it (the harness shows the map).
#[test]
fn typed_init_create_passes_the_shell_by_descriptor() {
    let r = rig(&BENCH_LINUX);
    let maps = r.b.driver_maps(r.rpc.raw()).expect("the real driver's list");
    let shell = r.b.buffer_of(r.shell.0.raw()).expect("the shell's buffer");
    assert!(maps.iter().any(|m| m.fd == r.shell.0.raw().0 && m.buffer == Some(shell)), "the shell is mapped by its descriptor: {maps:?}");
    r.close();
}
