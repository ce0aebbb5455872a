//! Steady-state launches allocate nothing and cross into the kernel exactly once: a counting
//! global allocator (per thread) around 1000 pack + launch rounds of a 3-buffer kernel through a
//! syscall seam whose `INVOKE_ATTRS` writes a timer and returns at once. Generating an entry into
//! a fixed-capacity string allocates nothing either.

use std::cell::Cell;
use std::ffi::c_void;

use hexrpc_bench::measure::CountingAlloc;
use hexrpc_drivers::adsprpc::{fastrpc_ioctl_invoke_attrs, remote_arg, FASTRPC_IOCTL_INVOKE_ATTRS};
use hexrpc_drivers::upstream::{self, FastrpcFd};
use hexrpc_drivers::{Errno, Fd};
use hexrpc_runtime::launch::{write_entry, AbiVersion, Batch, BatchRun, BufferRef, EntryOptions, PackedLaunch, Scalar, Signature};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

fn allocations() -> u64 {
    CountingAlloc::thread_allocations()
}

/// A seam whose INVOKE_ATTRS checks the request, writes 42 us into pra[2] and returns 0.
struct TimerSys {
    ioctls: Cell<u64>,
}

// SAFETY: `ioctl` only reads the argument struct and writes the 8 bytes of pra[2] that the
// caller's contract makes valid for INVOKE_ATTRS; every other call is refused (`RefusingSys`:
// no memory, no mappings).
unsafe impl hexrpc_drivers::SeamHooks for TimerSys {
    type Inner = hexrpc_drivers::RefusingSys;
    fn inner(&self) -> &hexrpc_drivers::RefusingSys {
        &hexrpc_drivers::RefusingSys
    }
    unsafe fn ioctl(&self, _: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        self.ioctls.set(self.ioctls.get() + 1);
        if request == upstream::FASTRPC_IOCTL_INVOKE {
            // SAFETY: for the upstream INVOKE the caller passes a live `fastrpc_invoke` whose
            // `args` has LENGTH(sc) = 6 records; record 2 is the 8-byte writable timer, records
            // 3..6 the handles with their lease lengths.
            unsafe {
                let inv = *(arg as *const upstream::fastrpc_invoke);
                if inv.sc != 0x0202_0103 || inv.handle != 21 {
                    return Err(Errno::EINVAL);
                }
                let args = inv.args as *const upstream::fastrpc_invoke_args;
                let timer = *args.add(2);
                if timer.length != 8 || (3..6).any(|i| (*args.add(i)).length != 1 << 20) {
                    return Err(Errno::EINVAL);
                }
                (timer.ptr as *mut [u8; 8]).write_unaligned(42u64.to_le_bytes());
            }
            return Ok(0);
        }
        if request != FASTRPC_IOCTL_INVOKE_ATTRS {
            return Err(Errno::ENOTTY);
        }
        // SAFETY: for INVOKE_ATTRS the caller passes a live `fastrpc_ioctl_invoke_attrs`.
        let inv = unsafe { *(arg as *const fastrpc_ioctl_invoke_attrs) };
        if inv.inv.sc == 0x0302_0103 && inv.inv.handle == 21 {
            // A batch on 3 leases: the status says every record ran in 42 us.
            // SAFETY: `pra` has 6 initialized entries; entry 0 is the readable header (>= 16
            // bytes, checked), entry 2 the 24-byte writable status (checked).
            unsafe {
                let pra = inv.inv.pra as *const remote_arg;
                let (hdr, st) = ((*pra).buf(), (*pra.add(2)).buf());
                if hdr.len < 16 || st.len != 24 {
                    return Err(Errno::EINVAL);
                }
                let k = (hdr.pv as *const [u8; 4]).add(1).read_unaligned();
                let mut status = [0u8; 24];
                status[..4].copy_from_slice(b"HRXB");
                status[4..8].copy_from_slice(&k);
                status[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
                status[16..24].copy_from_slice(&42u64.to_le_bytes());
                (st.pv as *mut [u8; 24]).write_unaligned(status);
            }
            return Ok(0);
        }
        if inv.inv.sc != 0x0202_0103 || inv.inv.handle != 21 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: `pra` has LENGTH(sc) = 6 initialized entries; entry 2 is the 8-byte writable
        // output buffer (the timer).
        unsafe {
            let timer = (*(inv.inv.pra as *const remote_arg).add(2)).buf();
            if timer.len != 8 {
                return Err(Errno::EINVAL);
            }
            (timer.pv as *mut [u8; 8]).write_unaligned(42u64.to_le_bytes());
        }
        Ok(0)
    }
}

struct Lease;

#[test]
fn steady_state_launch_allocates_nothing_and_crosses_once() {
    let sig = Signature::parse("buf,buf,buf,i32,f32").unwrap();
    let lease = Lease;
    let bufs = [
        BufferRef::borrowing(&lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(&lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(&lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    let sys = TimerSys { ioctls: Cell::new(0) };
    let launch = |k: i32| {
        let mut p = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::I32(k), Scalar::F32(0.5)]).unwrap();
        p.launch(&sys, Fd(3), 21).unwrap()
    };
    assert_eq!(launch(0), 42, "the DSP microseconds are read back from pra[2]");

    // The counter works (a test that cannot fail proves nothing).
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 16]);
    assert!(allocations() > before);
    drop(v);

    let (a0, i0) = (allocations(), sys.ioctls.get());
    let mut total = 0;
    for k in 0..1000 {
        total += launch(k);
    }
    let (a1, i1) = (allocations(), sys.ioctls.get());
    assert_eq!(total, 42_000);
    assert_eq!(a1 - a0, 0, "heap allocations in 1000 launches");
    assert_eq!(i1 - i0, 1000, "exactly one kernel crossing per launch");
}

/// The upstream driver's launch path, as the HAL takes it on an upstream board: the packed
/// call translated into per-argument records on the stack, one upstream INVOKE. Nothing allocated, one crossing per launch.
#[test]
fn upstream_launch_allocates_nothing_and_crosses_once() {
    let sig = Signature::parse("buf,buf,buf,i32,f32").unwrap();
    let lease = Lease;
    let bufs = [
        BufferRef::borrowing(&lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(&lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(&lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    let sys = TimerSys { ioctls: Cell::new(0) };
    let launch = |k: i32| {
        let mut p = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::I32(k), Scalar::F32(0.5)]).unwrap();
        {
            let mut call = p.invoke_args().unwrap();
            let mut up = call.to_upstream().unwrap();
            upstream::invoke(&sys, FastrpcFd::from_raw(Fd(3)), 21, &mut up).unwrap();
        }
        p.dsp_micros()
    };
    assert_eq!(launch(0), 42);
    let (a0, i0) = (allocations(), sys.ioctls.get());
    let mut total = 0;
    for k in 0..1000 {
        total += launch(k);
    }
    let (a1, i1) = (allocations(), sys.ioctls.get());
    assert_eq!(total, 42_000);
    assert_eq!(a1 - a0, 0, "heap allocations in 1000 upstream launches");
    assert_eq!(i1 - i0, 1000, "exactly one kernel crossing per launch");
}

#[test]
fn batches_are_built_and_run_without_allocating_one_crossing_each() {
    let sigs = [Signature::parse("buf,buf,buf,i32,f32").unwrap(), Signature::parse("buf,u32").unwrap()];
    let lease = Lease;
    let bufs = [
        BufferRef::borrowing(&lease, Fd(5), 1 << 20, 0, 4096),
        BufferRef::borrowing(&lease, Fd(6), 1 << 20, 4096, 4096),
        BufferRef::borrowing(&lease, Fd(7), 1 << 20, 8192, 4096),
    ];
    let sys = TimerSys { ioctls: Cell::new(0) };
    let build_and_run = |k: i32| {
        let mut b = Batch::new(&sigs).unwrap();
        for r in 0..4 {
            b.push(0, &bufs, &[Scalar::I32(k + r), Scalar::F32(0.5)]).unwrap();
        }
        let last = b.push(1, &bufs[2..], &[Scalar::U32(1)]).unwrap();
        b.set_scalar(last, 0, Scalar::U32(k as u32)).unwrap();
        b.launch(&sys, Fd(3), 21).unwrap()
    };
    assert_eq!(build_and_run(0), BatchRun { launches: 5, dsp_micros: 42 });
    let (a0, i0) = (allocations(), sys.ioctls.get());
    for k in 0..1000 {
        assert_eq!(build_and_run(k).launches, 5);
    }
    assert_eq!(allocations() - a0, 0, "heap allocations in 1000 batches");
    assert_eq!(sys.ioctls.get() - i0, 1000, "exactly one kernel crossing per batch of 5 launches");
}

#[test]
fn entry_generation_allocates_nothing() {
    let sig = Signature::parse("buf,buf,buf,buf,buf,i8,u16,i64,f32,f64").unwrap();
    let mut out: heapless::String<16384> = heapless::String::new();
    let before = allocations();
    write_entry(&mut out, &sig, "kern", &EntryOptions::TINYGRAD).unwrap();
    out.clear();
    write_entry(&mut out, &sig, "kern", &EntryOptions::V2).unwrap();
    assert_eq!(allocations() - before, 0);
    assert!(out.contains("int entry(unsigned long long handle, unsigned int sc, remote_arg *pra) {"));
}
