//! A session across `fork()`, on every bench kernel (the downstream and upstream models and,
//! where the bench is built with it, Linux's own `fastrpc.c`), through the objects the C and
//! Python bindings share.
//!
//! In the child, every use of the inherited session, its libraries and leases is refused at once
//! with `HEXRPC_ERR_FORKED` (the message says why and what to do), and none of them, nor their
//! release, reaches the kernel: the child's copy of the bench counts no call. A model's binding is
//! neither changed nor run in the child (its records are memory the parent's model shares). A new
//! session opened in the child works. The parent's session and its bound model work after the
//! child ended.

use std::sync::Arc;

use hexrpc::model::ModelObj;
use hexrpc::objects::{LeaseObj, SessionObj, ViewArg};
use hexrpc::{hexrpc_status, Failure};
use hexrpc_bsp::Board;
use hexrpc_runtime::launch::Scalar;

hexrpc_bench::on_both_kernels!(a_session_used_in_a_forked_child_is_refused_and_a_new_one_works);

/// A session on `board`, the bench's `add_u8` open on it and a lease: one launch adds `k` to 16
/// bytes at offset 0 and writes them at offset 2048.
fn open(board: &'static Board) -> (Arc<SessionObj>, hexrpc::objects::KernelObj, hexrpc::objects::LeaseObj) {
    let s = Arc::new(SessionObj::open_bench_on(board).unwrap());
    let image = hexrpc::bench::model_image("add_u8").unwrap();
    let lib = s.open_library("add", image.to_vec(), Some("buf,buf,u32"), None).unwrap();
    let lease = s.alloc(4096).unwrap();
    (s, lib, lease)
}

fn launch(lib: &hexrpc::objects::KernelObj, lease: &hexrpc::objects::LeaseObj, k: u32) -> Result<u8, Failure> {
    let (addr, _) = lease.memory();
    // SAFETY: the lease's 4096 bytes are mapped at `addr` while `lease` lives; no launch runs.
    let mem = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, 4096) };
    mem[..16].fill(40);
    let views = [ViewArg { lease, offset: 0, len: 16 }, ViewArg { lease, offset: 2048, len: 16 }];
    lib.launch(&views, &[Scalar::U32(k)], None)?;
    // SAFETY: as above, after the launch returned.
    Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, 4096) }[2048])
}

/// The sample model's input size in these tests.
const N: usize = 16;

/// The sample model on `s` with its input bound to a lease of `s` holding `N` bytes of 7
/// (outputs: 10 and 15).
fn bound_model(s: &Arc<SessionObj>) -> (ModelObj, Arc<LeaseObj>) {
    let model = ModelObj::open(s, hexrpc::bench::sample_model(N)).unwrap();
    let frame = Arc::new(s.alloc(4096).unwrap());
    let (addr, _) = frame.memory();
    // SAFETY: the lease's 4096 bytes are mapped at `addr` while `frame` lives; no run uses it yet.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, N) }.fill(7);
    model.bind_input(0, frame.clone(), 0).unwrap();
    (model, frame)
}

/// One run of the bound sample model: its outputs' first bytes.
fn run_bound(model: &ModelObj) -> Result<(u8, u8), Failure> {
    let (mut y, mut z) = ([0u8; N], [0u8; N]);
    model.run(&[&[]], &mut [&mut y, &mut z], None)?;
    Ok((y[0], z[0]))
}

/// The child's checks; its exit status is the number of the first that failed (0: none).
fn in_the_child(
    board: &'static Board,
    s: Arc<SessionObj>,
    lib: hexrpc::objects::KernelObj,
    lease: hexrpc::objects::LeaseObj,
    (model, frame): (ModelObj, Arc<LeaseObj>),
) -> i32 {
    let bench = s.bench().expect("a bench session").clone();
    let before = bench.counts();
    let forked = |r: Result<(), Failure>, what: &str| match r {
        Err(f) if f.status == hexrpc_status::HEXRPC_ERR_FORKED && f.cause.contains("fork()") && f.cause.contains("open a new session") => {
            true
        }
        other => {
            eprintln!("child: {what}: {other:?}");
            false
        }
    };
    if !forked(launch(&lib, &lease, 1).map(drop), "launch") {
        return 1;
    }
    if !forked(s.alloc(4096).map(drop), "alloc") || !forked(s.recover(), "recover") {
        return 2;
    }
    let image = hexrpc::bench::model_image("add_u8").unwrap();
    if !forked(s.open_library("add", image.to_vec(), Some("buf,buf,u32"), None).map(drop), "library open") || s.is_healthy() {
        return 3;
    }
    // The bound model: neither unbound, bound again nor run (an unbind would rewrite records
    // the parent's model shares).
    if !forked(model.unbind_input(0).map(drop), "unbind")
        || !forked(model.bind_input(0, frame.clone(), 0), "bind")
        || !forked(run_bound(&model).map(drop), "bound run")
    {
        return 6;
    }
    // Released in the child: nothing is sent, nothing waits for the parent's threads.
    drop((model, frame, lib, lease, s));
    let after = bench.counts();
    if after != before {
        eprintln!("child: the inherited objects reached the kernel:\n{before:?}\n{after:?}");
        return 4;
    }
    // A session of the child's own works.
    let (s2, lib2, lease2) = open(board);
    match launch(&lib2, &lease2, 3) {
        Ok(43) => {}
        other => {
            eprintln!("child: a new session's launch: {other:?}");
            return 5;
        }
    }
    drop((lib2, lease2, s2));
    0
}

fn a_session_used_in_a_forked_child_is_refused_and_a_new_one_works(board: &'static Board) {
    // Not under qemu-user (the aarch64 test run is emulated): qemu 7.2's fork of a guest with
    // other threads aborts in the child when the child starts a thread (an assertion in its
    // plugins/core.c), as drivers/tests/watchdog_fork.rs found for the watchdog.
    if cfg!(not(target_arch = "x86_64")) {
        println!("SKIPPED: fork tests run on x86-64 only (the aarch64 run is under qemu-user, whose forked children abort)");
        return;
    }
    // One at a time: a fork while another test's session is inside a call could copy a lock
    // that thread holds (the documented condition: fork while no other thread is in a call).
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (s, lib, lease) = open(board);
    assert_eq!(launch(&lib, &lease, 2).unwrap(), 42);
    let (model, frame) = bound_model(&s);
    assert_eq!(run_bound(&model).unwrap(), (10, 15));
    // SAFETY: the child runs the checks above (which start threads of its own: the C library
    // allows that after fork) under an alarm, and `_exit`s without running the parent's
    // destructors or unwinding.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: a timer signal for this process only: a hang in the child kills it.
        unsafe { libc::alarm(30) };
        let code = in_the_child(board, s, lib, lease, (model, frame));
        // SAFETY: ends the child at once, as a forked child of a threaded process must.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid, writable int; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child did not exit (a hang ends it with SIGALRM): status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's check {} failed (its stderr says how)", libc::WEXITSTATUS(status));
    // The parent's session is unaffected.
    assert!(s.is_healthy());
    assert_eq!(launch(&lib, &lease, 5).unwrap(), 45);
    assert!(model.is_bound(0));
    assert_eq!(run_bound(&model).unwrap(), (10, 15), "the parent's binding as it was");
    drop((model, frame, lib, lease));
    drop(s);
}
