//! Confinement and handle lifetimes of the reverse file service (issue 12, item 2): a racing
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
    drop(svc.end_session());
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), svc.sys().closes.load(Ordering::SeqCst), "every descriptor closed");
}
