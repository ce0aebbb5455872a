//! The reverse file service path: a library fetched through a test-written listener loop, loads
//! that must fail (no listener, missing file, wrong machine, no model), and the hostile DSP.

mod common;

use std::time::Duration;

use common::*;
use hexrpc_bench::elf::{elf_image, hexagon_elf};
use hexrpc_bench::{wire, Bench, BenchConfig, DspCallKind, EntryVersion, LibraryModel, ReverseError, ReverseRequest};
use hexrpc_drivers::aee::{self, DSP_AEE_EOFFSET};
use hexrpc_drivers::{Error, Scalars};

fn dsp_code(code: i32) -> i32 {
    DSP_AEE_EOFFSET.wrapping_add(code as u32) as i32
}

fn noop() -> LibraryModel {
    LibraryModel::new(EntryVersion::V2, 1, 0, |_| {})
}

#[test]
fn library_is_fetched_through_the_reverse_file_service() {
    let b = bench();
    let dir = temp_dir("fetch");
    let canary_dir = temp_dir("canary");
    let canary = canary_dir.join("secret");
    std::fs::write(&canary, b"do not serve").unwrap();
    let image = hexagon_elf(40_000);
    std::fs::write(dir.join("scale"), &image).unwrap();
    b.register_library("scale", noop());
    let start = b.snapshot();

    let s = open_session(&b);
    let l = spawn_listener(&b, s.rpc, dir.clone());
    let h = open_lib(&b, s.rpc, "scale").unwrap().unwrap();
    assert!(h > hexrpc_drivers::adsprpc::FASTRPC_STATIC_HANDLE_MAX);
    assert_eq!(b.snapshot().loaded_libraries, 1);
    // A second open in the same process reuses the apps_std handle.
    let h2 = open_lib(&b, s.rpc, "scale").unwrap().unwrap();
    assert_ne!(h, h2);
    assert_eq!(close_lib(&b, s.rpc, h2), Ok(0));
    assert_eq!(close_lib(&b, s.rpc, h2), Ok(dsp_code(aee::AEE_EINVHANDLE)), "closing twice");
    assert_eq!(close_lib(&b, s.rpc, h), Ok(0));

    // Exactly the protocol of reverse-rpc.md 2.3-3.2, in the model's order.
    let key = APPS_STD_KEY;
    let seq: Vec<(u32, u32)> = b.reverse_log().iter().map(|r| (r.handle, r.sc)).collect();
    let one_load = |reads: usize| {
        let mut v = vec![(key, 0x1305_0100), (key, 0x1F02_0100), (key, 0x0401_0200), (key, 0x0901_0000)];
        v.extend(std::iter::repeat_n((key, 0x0401_0200), reads));
        v.push((key, 0x0301_0000));
        v
    };
    let mut want = vec![(0, 0x0002_0200)];
    want.extend(one_load(3)); // 40 000 bytes in 16 KiB pieces
    want.extend(one_load(3));
    assert_eq!(seq, want);
    assert!(b.reverse_log().iter().all(|r| r.result == Some(0)));
    assert_eq!(b.counts().dsp_of(DspCallKind::RemotectlOpen), 2);

    s.close(&b);
    let log = l.join().unwrap();
    assert_eq!(log.exit, Some(Error::Returned(dsp_code(aee::AEE_EBADSTATE))), "exit wakes the listener");
    assert_eq!(log.requests.len(), want.len());
    assert!(!b.was_opened(&canary.to_string_lossy()));
    let lib_path = dir.join("scale").to_string_lossy().into_owned();
    assert!(b.open_log().iter().any(|r| r.path == lib_path && !r.simulated && r.result.is_ok()));
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn load_without_a_listener_fails_after_the_bounded_wait() {
    let b = Bench::with_config(BenchConfig { reverse_timeout: Duration::from_millis(200), ..Default::default() });
    b.register_library("lonely", noop());
    let start = b.snapshot();
    let s = open_session(&b);
    let t0 = std::time::Instant::now();
    let (n_err, msg) = open_lib(&b, s.rpc, "lonely").unwrap().unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(n_err, dsp_code(aee::AEE_EUNABLETOLOAD));
    assert!(msg.contains("no reverse listener"), "{msg}");
    assert_eq!(b.snapshot().pending_reverse, 0, "the unanswered request was withdrawn");
    s.close(&b);
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn loads_that_must_fail() {
    let b = bench();
    let dir = temp_dir("fail");
    std::fs::write(dir.join("arm"), elf_image(183, 4096)).unwrap();
    std::fs::write(dir.join("tiny"), hexagon_elf(20)).unwrap();
    std::fs::write(dir.join("nomodel"), hexagon_elf(4096)).unwrap();
    b.register_library("arm", noop());
    b.register_library("tiny", noop());
    let s = open_session(&b);
    let l = spawn_listener(&b, s.rpc, dir);
    let err = |name: &str| open_lib(&b, s.rpc, name).unwrap().unwrap_err();
    assert_eq!(err("missing").0, dsp_code(aee::AEE_ENOSUCHFILE));
    let (code, msg) = err("arm");
    assert_eq!(code, dsp_code(aee::AEE_EBADELF));
    assert!(msg.contains("e_machine 183"), "{msg}");
    let (code, msg) = err("tiny");
    assert_eq!(code, dsp_code(aee::AEE_EBADELF));
    assert!(msg.contains("too short"), "{msg}");
    assert_eq!(err("nomodel").0, dsp_code(aee::AEE_ENOSUCHSYMBOL));
    b.register_library("nomodel", noop());
    assert_eq!(open_lib_sym(&b, s.rpc, "nomodel", "other").unwrap().unwrap_err().0, dsp_code(aee::AEE_ENOSUCHSYMBOL));
    assert!(open_lib(&b, s.rpc, "nomodel").unwrap().is_ok());
    // A URI for another domain is refused.
    let mut bad = Vec::new();
    let uri = b"file:///nomodel?entry&_dom=adsp\0";
    bad.extend_from_slice(&(uri.len() as u32).to_le_bytes());
    bad.extend_from_slice(&16u32.to_le_bytes());
    let (mut o0, mut o1) = ([0u8; 8], [0u8; 16]);
    {
        let mut a = hexrpc_drivers::adsprpc::InvokeArgs::<'_, 4>::new(0).unwrap();
        a.input(&bad).unwrap().input(uri).unwrap().output(&mut o0).unwrap().output(&mut o1).unwrap();
        assert_eq!(hexrpc_drivers::adsprpc::invoke(&b, s.rpc, 0, &mut a), Ok(()));
    }
    assert_eq!(i32::from_le_bytes(o0[4..8].try_into().unwrap()), dsp_code(aee::AEE_EBADPARM));
    // nameLen that does not match the URI buffer: the skel refuses the call itself.
    bad[0..4].copy_from_slice(&5u32.to_le_bytes());
    {
        let mut a = hexrpc_drivers::adsprpc::InvokeArgs::<'_, 4>::new(0).unwrap();
        a.input(&bad).unwrap().input(uri).unwrap().output(&mut o0).unwrap().output(&mut o1).unwrap();
        assert_eq!(hexrpc_drivers::adsprpc::invoke(&b, s.rpc, 0, &mut a), Err(Error::Returned(aee::AEE_EBADPARM)));
    }
    s.close(&b);
    l.join().unwrap();
}

#[test]
fn hostile_dsp_requests() {
    let b = bench();
    let dir = temp_dir("hostile");
    std::fs::write(dir.join("data"), b"0123456789").unwrap();
    let canary_dir = temp_dir("hostile-canary");
    std::fs::write(canary_dir.join("secret"), b"x").unwrap();
    let start = b.snapshot();
    let s = open_session(&b);
    let l = spawn_listener(&b, s.rpc, dir.clone());
    let t = Duration::from_secs(5);
    let key = APPS_STD_KEY;
    let fopen_sc = Scalars::new(19, 5, 1, 0, 0).unwrap();
    let fopen = |env: &[u8], name: &str| {
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        let mut prim = Vec::new();
        for l in [env.len(), 2, n.len(), 2] {
            prim.extend_from_slice(&(l as u32).to_le_bytes());
        }
        ReverseRequest::packed(key, fopen_sc, &[&prim, env, b";\0", &n, b"r\0"], &[4])
    };

    // A request larger than the listener's buffer: it must fetch the rest with get_in_bufs2.
    let mut env = vec![b'E'; 6000];
    env.push(0);
    let big = fopen(&env, "data");
    assert!(big.payload.len() > LISTENER_CAP);
    let r = b.reverse_call(s.rpc, big, t).unwrap();
    assert_eq!(r.result, 0);
    let file = u32::from_le_bytes(r.outputs(&[4]).unwrap()[0][..4].try_into().unwrap());
    assert!(file >= 100);

    // Path traversal and absolute paths: refused by the listener, nothing opened.
    let trav = format!("../{}/secret", canary_dir.file_name().unwrap().to_string_lossy());
    assert_eq!(b.reverse_call(s.rpc, fopen(b"E\0", &trav), t).unwrap().result, aee::AEE_EBADPARM);
    let abs = canary_dir.join("secret").to_string_lossy().into_owned();
    assert_eq!(b.reverse_call(s.rpc, fopen(b"E\0", &abs), t).unwrap().result, aee::AEE_EBADPARM);

    // Unknown handle and unknown method.
    let mut stranger = fopen(b"E\0", "data");
    stranger.handle = 0xDEAD;
    assert_eq!(b.reverse_call(s.rpc, stranger, t).unwrap().result, aee::AEE_ENOSUCHMOD);
    let odd = Scalars::new(27, 1, 0, 0, 0).unwrap();
    assert_eq!(b.reverse_call(s.rpc, ReverseRequest::packed(key, odd, &[&[0; 8]], &[]), t).unwrap().result, aee::AEE_EUNSUPPORTED);

    // An over-long read and a read past the end.
    let fread = |want: u32| {
        let mut prim = file.to_le_bytes().to_vec();
        prim.extend_from_slice(&want.to_le_bytes());
        ReverseRequest::packed(key, Scalars::new(4, 1, 2, 0, 0).unwrap(), &[&prim], &[8, want])
    };
    assert_eq!(b.reverse_call(s.rpc, fread(64 << 20), t).unwrap().result, aee::AEE_EBADPARM);
    let r = b.reverse_call(s.rpc, fread(64), t).unwrap();
    let outs = r.outputs(&[8, 64]).unwrap();
    assert_eq!(&outs[0][..4], &10i32.to_le_bytes());
    assert_eq!(&outs[1][..10], b"0123456789");
    let outs = b.reverse_call(s.rpc, fread(64), t).unwrap().outputs(&[8, 64]).unwrap();
    assert_eq!(&outs[0], &[0, 0, 0, 0, 1, 0, 0, 0], "endless reads end at EOF");

    // Counts that exceed the payload, a lying bufsLenReq, handles in a reverse call.
    let mut trunc = fopen(b"E\0", "data");
    trunc.payload.truncate(10);
    assert_eq!(b.reverse_call(s.rpc, trunc, t).unwrap().result, aee::AEE_EBADPARM);
    let mut liar = fopen(b"E\0", "data");
    liar.claimed_len = Some(-5);
    assert_eq!(b.reverse_call(s.rpc, liar, t).unwrap().result, aee::AEE_EBADSIZE);
    let with_handles =
        ReverseRequest::raw(key, Scalars::new(3, 1, 0, 1, 0).unwrap().raw(), wire::pack_request(&[&file.to_le_bytes()], &[]));
    assert_eq!(b.reverse_call(s.rpc, with_handles, t).unwrap().result, aee::AEE_EBADPARM);

    // An fd flood: many opens in flight at once, each answered with its own FILE.
    let tickets: Vec<_> = (0..24).map(|_| b.post_reverse(s.rpc, fopen(b"E\0", "data")).unwrap()).collect();
    let mut files: Vec<u32> = tickets
        .into_iter()
        .map(|tk| {
            let r = b.await_reverse(tk, t).unwrap();
            assert_eq!(r.result, 0);
            u32::from_le_bytes(r.outputs(&[4]).unwrap()[0][..4].try_into().unwrap())
        })
        .collect();
    files.push(file);
    files.sort_unstable();
    files.dedup();
    assert_eq!(files.len(), 25);
    for f in files {
        let r = b.reverse_call(s.rpc, ReverseRequest::packed(key, Scalars::new(3, 1, 0, 0, 0).unwrap(), &[&f.to_le_bytes()], &[]), t);
        assert_eq!(r.unwrap().result, 0);
    }

    s.close(&b);
    let log = l.join().unwrap();
    assert_eq!(log.get_in_bufs2, 1);
    assert!(!b.open_log().iter().any(|r| r.path.contains("secret")), "the canary was never opened");
    assert_eq!(b.post_reverse(s_rpc_closed(), fopen(b"E\0", "data")), Err(ReverseError::NoProcess));
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

fn s_rpc_closed() -> hexrpc_drivers::Fd {
    hexrpc_drivers::Fd(-1)
}
