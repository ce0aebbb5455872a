//! The reverse service's descriptor walk on the bench's file table (moved here from the
//! simulator's tests: the simulator does not depend on the runtime).

use hexrpc_bench::Bench;
use hexrpc_drivers::{OpenAt, Syscalls};
use hexrpc_runtime::reverse::RequestError::{NoSuchFile, NotAllowed};
use hexrpc_runtime::reverse::{FilePolicy, ReverseService};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-runtime-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// The reverse service's descriptor walk on the bench: virtual `/bench/` files through the
/// simulated directories, real files through the passed-through ones; the open log names the
/// resolved paths, and nothing outside the allowed directory is opened.
#[test]
fn the_service_walks_bench_and_real_directories_by_descriptor() {
    let b = Bench::new();
    b.add_file("/bench/dsp/cdsp/sub/lib.so", b"VIRTUAL".to_vec());
    b.add_file("/bench/dsp/secret", b"CANARY".to_vec());
    let real = temp_dir("walk");
    std::fs::create_dir_all(real.join("d")).unwrap();
    std::fs::write(real.join("d/real.so"), b"REAL").unwrap();
    std::os::unix::fs::symlink("/bench/dsp", real.join("up")).unwrap();
    let policy = FilePolicy::new(&["/bench/dsp/cdsp", real.to_str().unwrap()], b.board().limits).unwrap();
    let svc = ReverseService::new(b.clone(), hexrpc_drivers::Fd(-1), policy);
    let start = b.snapshot();
    let read = |name: &[u8]| -> Result<Vec<u8>, hexrpc_runtime::reverse::RequestError> {
        let (fd, st) = svc.policy().open_host(svc.sys(), name)?;
        let mut buf = vec![0u8; st.size as usize];
        let n = svc.sys().pread(fd.raw(), &mut buf, 0).unwrap();
        svc.sys().close(fd).unwrap();
        buf.truncate(n);
        Ok(buf)
    };
    assert_eq!(read(b"sub/lib.so").unwrap(), b"VIRTUAL");
    assert_eq!(read(b"d/real.so").unwrap(), b"REAL");
    assert_eq!(read(b"/bench/dsp/cdsp/sub/lib.so").unwrap(), b"VIRTUAL");
    assert_eq!(read(b"up/secret"), Err(NotAllowed), "a link out of the real directory is not followed");
    assert_eq!(read(b"sub"), Err(NotAllowed), "a directory is not a file");
    assert_eq!(read(b"sub/lib.so/x"), Err(NoSuchFile));
    assert_eq!(read(b"missing"), Err(NoSuchFile));
    let log = b.open_log();
    assert!(log.iter().any(|r| r.simulated && r.path == "/bench/dsp/cdsp/sub/lib.so" && r.result.is_ok()));
    assert!(log.iter().any(|r| !r.simulated && r.path.ends_with("/d/real.so") && r.result.is_ok()));
    assert!(!b.was_opened("/bench/dsp/secret"));
    // A virtual directory descriptor refuses to be read and walks only below itself.
    let dir = b.open_at(None, c"/bench/dsp/cdsp", OpenAt::Dir { follow: true }).unwrap();
    let sub = b.open_at(Some(dir.raw()), c"sub", OpenAt::Dir { follow: false }).unwrap();
    assert!(b.fstat(sub.raw()).unwrap().is_dir());
    b.close(sub).unwrap();
    assert_eq!(b.open_at(Some(dir.raw()), c"sub/lib.so", OpenAt::Dir { follow: false }), Err(hexrpc_drivers::Errno::ENOTDIR));
    assert!(b.stat_at(dir.raw(), c"sub").unwrap().is_dir());
    b.close(dir).unwrap();
    assert_eq!(b.snapshot(), start, "every descriptor of the walks was closed");
    std::fs::remove_dir_all(&real).unwrap();
}
