//! Confinement and handle lifetimes of the reverse file service: a racing
//! swap of an intermediate directory for a symbolic link never leads a lookup outside the
//! allowlist; stale FILE handles are refused; module keys never come back into validity;
//! closing a module closes its files.

#[path = "reverse_support.rs"]
mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hexrpc_drivers::aee::*;
use hexrpc_drivers::listener::REMOTECTL_CLOSE;
use support::*;

/// apps_remotectl close of module `key`: the status.
fn close_module<S: hexrpc_drivers::Syscalls>(svc: &hexrpc_runtime::reverse::ReverseService<'_, S>, key: u32) -> i32 {
    call(svc, 0, REMOTECTL_CLOSE.raw(), &payload(&[&words(&[key, 16])], &[4, 16])).0.status
}

/// Swaps `dir` between a real directory and a symbolic link to the secret directory as fast as
/// it can until `stop`: atomically (`renameat2(RENAME_EXCHANGE)`) where the file system has it,
/// else by four renames a round (then "missing" is a state too).
fn swapper(dir: &Path, stop: &AtomicBool) -> usize {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let parent = dir.parent().unwrap();
    let real = parent.join("d.real");
    let link = parent.join("d.link");
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) && renameat_with(CWD, dir, CWD, &link, RenameFlags::EXCHANGE).is_ok() {
        rounds += 1;
    }
    while !stop.load(Ordering::Relaxed) {
        std::fs::rename(dir, &real).unwrap();
        std::fs::rename(&link, dir).unwrap();
        std::fs::rename(dir, &link).unwrap();
        std::fs::rename(&real, dir).unwrap();
        rounds += 1;
    }
    rounds
}

#[test]
fn intermediate_directory_swapped_for_a_symlink_never_escapes() {
    const OPENS: usize = 20_000;
    let tree = Tree::new("race");
    let d = tree.allowed.join("d");
    std::fs::create_dir(&d).unwrap();
    // Same name inside (allowed) and outside (the canary's directory).
    std::fs::write(d.join("canary"), b"INSIDE").unwrap();
    std::os::unix::fs::symlink("../secret", tree.allowed.join("d.link")).unwrap();
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (d, stop) = (d.clone(), stop.clone());
        std::thread::spawn(move || swapper(&d, &stop))
    };
    let (mut inside, mut outside, mut refused) = (0usize, 0usize, 0usize);
    for _ in 0..OPENS {
        let (st, file) = fopen(&svc, h, b"d/canary", b"r");
        if st != 0 {
            assert!([AEE_ENOTALLOWED, AEE_ENOSUCHFILE].contains(&st), "status {st:#x}");
            refused += 1;
            continue;
        }
        let (st, n, _, data) = fread(&svc, h, file, 16);
        assert_eq!(st, 0);
        match &data[..n as usize] {
            b"INSIDE" => inside += 1,
            b"CANARY" => outside += 1,
            other => panic!("read {other:?}"),
        }
        assert_eq!(fclose(&svc, h, file), 0);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = t.join().unwrap();
    println!("{OPENS} opens racing {rounds} swap rounds: {inside} read inside, {refused} refused, {outside} read outside");
    assert_eq!(outside, 0, "reads outside the allowlist");
    assert!(!svc.sys().opened.lock().unwrap().contains(&tree.canary_id), "the canary was opened");
    assert!(rounds > 0 && inside > 0 && refused > 0, "the race ran both ways: {rounds} rounds, {inside} in, {refused} refused");
    assert!(svc.sys().paths.lock().unwrap().iter().all(|p| !p.contains("secret")), "no lookup below the secret directory");
    svc.end_session();
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), svc.sys().closes.load(Ordering::SeqCst), "every descriptor closed");
}

#[test]
fn final_component_swapped_for_a_symlink_never_escapes() {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    const OPENS: usize = 5_000;
    let tree = Tree::new("race-last");
    let f = tree.allowed.join("f.so");
    let link = tree.allowed.join("f.link");
    std::fs::write(&f, b"INSIDE").unwrap();
    std::os::unix::fs::symlink("../secret/canary", &link).unwrap();
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let stop = Arc::new(AtomicBool::new(false));
    let t = {
        let (f, link, stop) = (f.clone(), link.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rounds = 0usize;
            while !stop.load(Ordering::Relaxed) && renameat_with(CWD, &f, CWD, &link, RenameFlags::EXCHANGE).is_ok() {
                rounds += 1;
            }
            // Without an atomic exchange: three renames a round ("missing" is a state too).
            let tmp = f.with_extension("tmp");
            while !stop.load(Ordering::Relaxed) {
                std::fs::rename(&f, &tmp).unwrap();
                std::fs::rename(&link, &f).unwrap();
                std::fs::rename(&tmp, &link).unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    let (mut inside, mut refused) = (0usize, 0usize);
    for _ in 0..OPENS {
        let (st, file) = fopen(&svc, h, b"f.so", b"r");
        if st != 0 {
            assert!([AEE_ENOTALLOWED, AEE_ENOSUCHFILE].contains(&st), "status {st:#x}");
            refused += 1;
            continue;
        }
        let (st, n, _, data) = fread(&svc, h, file, 16);
        assert_eq!((st, &data[..n as usize]), (0, &b"INSIDE"[..]), "only the allowed file is ever read");
        inside += 1;
        assert_eq!(fclose(&svc, h, file), 0);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = t.join().unwrap();
    println!("{OPENS} opens racing {rounds} swaps of the file itself: {inside} read inside, {refused} refused");
    assert!(!svc.sys().opened.lock().unwrap().contains(&tree.canary_id), "the canary was opened");
    svc.end_session();
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), svc.sys().closes.load(Ordering::SeqCst));
}

#[test]
fn a_stale_file_handle_is_refused_and_never_reads_another_file() {
    let tree = Tree::new("stale");
    std::fs::write(tree.allowed.join("other.so"), b"OTHER FILE").unwrap();
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let (st, old) = fopen(&svc, h, b"lib.so", b"r");
    assert_eq!(st, 0);
    assert_eq!(fclose(&svc, h, old), 0);
    let (st, new) = fopen(&svc, h, b"other.so", b"r");
    assert_eq!(st, 0);
    assert_ne!(new, old, "the slot is reused under a new generation");
    assert_eq!(fread(&svc, h, old, 16).0, AEE_EBADFD, "the stale handle reads nothing");
    assert_eq!(fseek(&svc, h, old, 0, 0), AEE_EBADFD);
    assert_eq!(fclose(&svc, h, old), AEE_EBADFD, "and cannot close the new file");
    let (st, n, _, data) = fread(&svc, h, new, 16);
    assert_eq!((st, &data[..n as usize]), (0, &b"OTHER FILE"[..]));
    // A FILE handle belongs to the module it was opened through.
    let h2 = open_module(&svc, "apps_std");
    assert_eq!(fread(&svc, h2, new, 4).0, AEE_EBADFD);
    assert_eq!(fclose(&svc, h, new), 0);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn closing_a_module_closes_its_files() {
    let tree = Tree::new("modclose");
    let svc = tree.service();
    let a = open_module(&svc, "apps_std");
    let b = open_module(&svc, "apps_std");
    let (_, fa1) = fopen(&svc, a, b"lib.so", b"r");
    let (_, fa2) = fopen(&svc, a, b"sub/x.so", b"r");
    let (st, fb) = fopen(&svc, b, b"lib.so", b"r");
    assert_eq!(st, 0);
    assert_eq!(svc.session_counts().files, 3);
    let sys = svc.sys();
    let before = sys.closes.load(Ordering::SeqCst);
    assert_eq!(close_module(&svc, a), 0);
    assert_eq!(svc.session_counts().files, 1, "module a's two files were closed");
    assert_eq!(sys.closes.load(Ordering::SeqCst), before + 2, "their descriptors too");
    assert_eq!(fread(&svc, a, fa1, 4).0, AEE_ENOSUCHMOD);
    assert_eq!(fread(&svc, b, fa2, 4).0, AEE_EBADFD);
    assert_eq!(fread(&svc, b, fb, 4).0, 0, "module b's file is untouched");
    assert_eq!(close_module(&svc, b), 0);
    assert_eq!(svc.session_counts(), Default::default());
    assert_eq!(sys.opens.load(Ordering::SeqCst), sys.closes.load(Ordering::SeqCst), "nothing leaked");
}

#[test]
fn module_keys_never_wrap_into_validity() {
    // More open/close pairs than a 16-bit generation has values.
    const PAIRS: usize = 70_000;
    let tree = Tree::new("modkeys");
    let svc = tree.service();
    let first = open_module(&svc, "apps_std");
    assert_eq!(close_module(&svc, first), 0);
    let mut keys = std::collections::HashSet::new();
    keys.insert(first);
    for i in 0..PAIRS {
        let k = open_module(&svc, "apps_std");
        assert!(keys.insert(k), "key {k:#x} handed out twice (pair {i})");
        assert_eq!(close_module(&svc, k), 0);
        if i % 10_000 == 0 {
            assert_eq!(fopen(&svc, first, b"lib.so", b"r").0, AEE_ENOSUCHMOD, "the first key is still dead");
        }
    }
    assert_eq!(fopen(&svc, first, b"lib.so", b"r").0, AEE_ENOSUCHMOD);
    assert_eq!(close_module(&svc, first), AEE_EINVHANDLE, "closing a dead key is refused");
}

/// [`RecordingSys`] whose `pread` and MMAP ioctl wait at a gate while it is closed.
#[derive(Default)]
struct GateSys {
    inner: RecordingSys,
    closed: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
    waiting: std::sync::atomic::AtomicUsize,
}

impl GateSys {
    fn set(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.cv.notify_all();
    }
    fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut c = self.closed.lock().unwrap();
        while *c {
            c = self.cv.wait(c).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
    fn until_waiting(&self) {
        let t = std::time::Instant::now();
        while self.waiting.load(Ordering::SeqCst) == 0 {
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "nothing reached the gate");
            std::thread::yield_now();
        }
    }
}

use std::ffi::c_void;

use hexrpc_drivers::adsprpc::FASTRPC_IOCTL_MMAP;
use hexrpc_drivers::{Errno, Fd, Syscalls};

// SAFETY: forwards every call to `RecordingSys` (after waiting, for pread and MMAP).
unsafe impl hexrpc_drivers::SeamHooks for GateSys {
    type Inner = RecordingSys;
    fn inner(&self) -> &RecordingSys {
        &self.inner
    }
    fn pread(&self, fd: Fd, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
        self.wait();
        Syscalls::pread(&self.inner, fd, buf, offset)
    }
    unsafe fn ioctl(&self, fd: Fd, request: u32, arg: *mut c_void) -> Result<i32, Errno> {
        if request == FASTRPC_IOCTL_MMAP {
            self.wait();
        }
        // SAFETY: the caller's guarantee for `arg` is passed on unchanged.
        unsafe { Syscalls::ioctl(&self.inner, fd, request, arg) }
    }
}

/// Runs `f` on another thread and waits up to 10 s for it: true if it finished.
fn finishes_while_blocked(f: impl FnOnce() + Send + 'static) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok()
}

#[test]
fn no_lock_is_held_across_a_file_read_or_a_map_ioctl() {
    use hexrpc_runtime::reverse::ReverseService;
    let tree = Tree::new("nolock");
    // The simulated kernel ignores the channel number; a non-negative one makes the session end
    // release its maps (fd -1 means the channel is gone, and its maps with it).
    let svc: Arc<ReverseService<'static, GateSys>> = Arc::new(ReverseService::new(GateSys::default(), Fd(900), tree.policy()));
    let h = open_module(&*svc, "apps_std");
    let mem = open_module(&*svc, "apps_mem");
    let (st, file) = fopen(&*svc, h, b"lib.so", b"r");
    assert_eq!(st, 0);
    // A read waits inside pread.
    svc.sys().set(true);
    let reader = {
        let svc = svc.clone();
        std::thread::spawn(move || fread(&*svc, h, file, 64))
    };
    svc.sys().until_waiting();
    let other = svc.clone();
    let served = finishes_while_blocked(move || {
        // Another request of the session, a close of the very file being read, a new open.
        assert_eq!(fclose(&*other, h, file), 0, "closing a file in use is answered at once");
        assert_eq!(fread(&*other, h, file, 4).0, AEE_EBADFD, "its handle is gone at once");
        let (st, f2) = fopen(&*other, h, b"sub/x.so", b"r");
        assert_eq!(st, 0);
        assert_ne!(f2, file);
        assert_eq!(fclose(&*other, h, f2), 0);
        other.session_counts();
    });
    assert!(served, "the session was locked during a file read");
    let open_now = svc.session_counts().files;
    assert_eq!(open_now, 1, "the file being read stays open until its read ends");
    svc.sys().set(false);
    let (st, n, _, data) = reader.join().unwrap();
    assert_eq!((st, n), (0, 64), "the read in flight completes");
    assert_eq!(&data[..], &tree.lib[..64]);
    assert_eq!(svc.session_counts().files, 0, "and its reader closed it");
    let sys = &svc.sys().inner;
    assert_eq!(sys.opens.load(Ordering::SeqCst), sys.closes.load(Ordering::SeqCst));
    // An MMAP ioctl waits in the kernel.
    svc.sys().set(true);
    let mapper = {
        let svc = svc.clone();
        std::thread::spawn(move || {
            let prim = [0i32.to_le_bytes(), 0u32.to_le_bytes(), 0x1000u32.to_le_bytes(), [0; 4]].concat();
            let prim = [prim, 0u64.to_le_bytes().to_vec(), 4096i64.to_le_bytes().to_vec()].concat();
            call(&*svc, mem, MAP64, &payload(&[&prim], &[16])).0.status
        })
    };
    svc.sys().until_waiting();
    let other = svc.clone();
    assert!(
        finishes_while_blocked(move || {
            let (st, f) = fopen(&*other, h, b"lib.so", b"r");
            assert_eq!(st, 0);
            assert_eq!(fclose(&*other, h, f), 0);
        }),
        "the session was locked during an MMAP ioctl"
    );
    svc.sys().set(false);
    assert_eq!(mapper.join().unwrap(), 0);
    assert_eq!(svc.session_counts().maps, 1);
    assert_eq!(svc.end_session().maps, 1);
    assert_eq!(svc.sys().inner.live_maps(), 0);
}
