//! One test per gap of tinygrad's listener (reverse-rpc.md §6, 1 to 14): the hostile request
//! gets an error status, the service keeps serving, and the canary outside the allowlist is
//! never opened. Gaps 2 and 11 also have loop-level tests in `reverse_loop.rs`.

#[path = "reverse_support.rs"]
mod support;

use std::sync::atomic::Ordering;

use hexrpc_bsp::Limits;
use hexrpc_drivers::aee::*;
use hexrpc_drivers::listener::{REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::Scalars;
use hexrpc_runtime::reverse::wire::reply_output;
use hexrpc_runtime::reverse::{FilePolicy, RequestError, ReverseService, FILE_HANDLE_BASE};
use support::*;

#[test]
fn gap01_lengths_are_checked_against_received_bytes_and_capacity() {
    let tree = Tree::new("g1");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let (_, file) = fopen(&svc, h, b"lib.so", b"r");
    let good = fopen_payload(b"lib.so", b"r");
    // Every truncation of a valid request is refused, never read past.
    for cut in 0..good.len() {
        assert_eq!(call(&svc, h, FOPEN_WITH_ENV, &good[..cut]).0.status, AEE_EBADPARM, "cut {cut}");
    }
    // An in-length word claiming more than was received.
    let mut bad = good.clone();
    bad[0..4].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    assert_eq!(call(&svc, h, FOPEN_WITH_ENV, &bad).0.status, AEE_EBADPARM);
    // primIn announcing a name length other than the buffer's.
    let (env, delim, name, mode) = (cstr(b"E"), cstr(b";"), cstr(b"lib.so"), cstr(b"r"));
    let prim = words(&[2, 2, 200, 2]);
    assert_eq!(call(&svc, h, FOPEN_WITH_ENV, &payload(&[&prim, &env, &delim, &name, &mode], &[4])).0.status, AEE_EBADPARM);
    // Out lengths the reply buffer cannot hold, or that disagree with primIn.
    assert_eq!(call(&svc, h, FREAD, &payload(&[&words(&[file, 16])], &[u32::MAX, 16])).0.status, AEE_EBADSIZE);
    assert_eq!(call(&svc, h, FREAD, &payload(&[&words(&[file, 16])], &[8, 17])).0.status, AEE_EBADPARM);
    // More in-buffers than the scalars word announces are not read; fewer are refused.
    assert_eq!(call(&svc, h, FREAD, &payload(&[&words(&[file, 16])], &[8, 16])[..4]).0.status, AEE_EBADPARM);
    // A payload over the request limit.
    assert_eq!(call(&svc, h, FREAD, &vec![0u8; (64 << 10) + 1]).0.status, AEE_EBADSIZE);
    assert_eq!(fclose(&svc, h, file), 0);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap02_oversize_requests_are_refused_by_the_dispatcher_path() {
    // The get_in_bufs2 fetch itself is tested at loop level (reverse_loop.rs); here: a payload
    // over the policy's request limit is refused whatever its content.
    let tree = Tree::new("g2");
    let limits = Limits { max_reverse_request: 256, ..Tree::limits() };
    let svc = ReverseService::new(RecordingSys::default(), hexrpc_drivers::Fd(-1), tree.policy_with(limits));
    let h = open_module(&svc, "apps_std");
    let mut big = fopen_payload(b"lib.so", b"r");
    big.resize(257, 0);
    assert_eq!(call(&svc, h, FOPEN_WITH_ENV, &big).0.status, AEE_EBADSIZE);
    big.truncate(256);
    assert_eq!(call(&svc, h, FOPEN_WITH_ENV, &big).0.status, 0, "trailing bytes within the limit are ignored");
    assert_eq!(svc.session_counts().files, 1);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap03_alignment_is_relative_and_zero_length_buffers_take_no_padding() {
    let tree = Tree::new("g3");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    // The same request parsed from an odd address works identically.
    let good = fopen_payload(b"lib.so", b"r");
    let mut shifted = vec![0u8; good.len() + 3];
    shifted[3..].copy_from_slice(&good);
    let mut reply = vec![0u8; REPLY];
    let r = svc.dispatch(h, Scalars::from_raw(FOPEN_WITH_ENV), &shifted[3..], &mut reply);
    assert_eq!(r.status, 0);
    // tinygrad's layout pads after a zero-length buffer: the shifted fields are refused, not
    // misread. remotectl open with an empty name, padded as tinygrad would parse it:
    // [len 8][pad][8 bytes primIn][len 0][pad 4][out 8][out 16] instead of [len 0][out 8][out 16].
    let mut tg = payload(&[&words(&[0, 16])], &[]);
    tg.extend_from_slice(&0u32.to_le_bytes()); // in[1] len 0
    tg.extend_from_slice(&0u32.to_le_bytes()); // tinygrad's padding
    tg.extend_from_slice(&words(&[8, 16]));
    assert_eq!(call(&svc, 0, REMOTECTL_OPEN.raw(), &tg).0.status, AEE_EBADPARM);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap04_dispatch_is_by_handle_and_method_not_by_scalars_alone() {
    let tree = Tree::new("g4");
    let svc = tree.service();
    let std_h = open_module(&svc, "apps_std");
    let mem_h = open_module(&svc, "apps_mem");
    let (_, file) = fopen(&svc, std_h, b"lib.so", b"r");
    // apps_mem request_unmap64 has apps_std fclose's scalars word: on apps_mem it names a map
    // (none), it never closes the file whose handle number matches its low bits.
    let unmap = payload(&[&[(file as u64).to_le_bytes(), 16i64.to_le_bytes()].concat()], &[]);
    assert_eq!(call(&svc, mem_h, UNMAP64, &unmap).0.status, AEE_ENOSUCHMAP);
    assert_eq!(svc.session_counts().files, 1, "the FILE stayed open");
    assert_eq!(svc.sys().ioctls.load(Ordering::SeqCst), 0, "nothing reached the kernel");
    assert_eq!(fread(&svc, std_h, file, 4).0, 0);
    // Unknown handles, and a module handle after its close.
    for h in [1, 2, 3, 7, 100, 0xDEAD_BEEF] {
        assert_eq!(call(&svc, h, FCLOSE, &payload(&[&words(&[file])], &[])).0.status, AEE_ENOSUCHMOD, "{h:#x}");
    }
    let close = payload(&[&words(&[mem_h, 0])], &[4, 0]);
    assert_eq!(call(&svc, 0, REMOTECTL_CLOSE.raw(), &close).0.status, 0);
    assert_eq!(call(&svc, mem_h, UNMAP64, &unmap).0.status, AEE_ENOSUCHMOD);
    assert_eq!(call(&svc, 0, REMOTECTL_CLOSE.raw(), &close).0.status, AEE_EINVHANDLE);
    assert_eq!(fclose(&svc, std_h, file), 0);
    assert_still_serves(&svc, std_h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap05_paths_are_confined_to_the_allowlist() {
    let tree = Tree::new("g5");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let canary = tree.canary.to_str().unwrap().as_bytes().to_vec();
    let via_dotdot = format!("{}/../secret/canary", tree.allowed_str()).into_bytes();
    let prefix_trick = format!("{}x/../secret/canary", tree.allowed_str()).into_bytes();
    let hostile: Vec<(&[u8], i32)> = vec![
        (b"/etc/passwd", AEE_ENOTALLOWED),
        (&canary, AEE_ENOTALLOWED),
        (b"../secret/canary", AEE_ENOTALLOWED),
        (&via_dotdot, AEE_ENOTALLOWED),
        (&prefix_trick, AEE_ENOTALLOWED),
        (b"evil.so", AEE_ENOTALLOWED),
        (b"link/canary", AEE_ENOTALLOWED),
        (b"sub//x.so", AEE_ENOTALLOWED),
        (b"./lib.so", AEE_ENOTALLOWED),
        (b"sub", AEE_ENOTALLOWED),
        (b"missing.so", AEE_ENOSUCHFILE),
        (b"tinylib", AEE_ENOSUCHFILE),
    ];
    for (name, want) in &hostile {
        assert_eq!(fopen(&svc, h, name, b"r").0, *want, "{}", String::from_utf8_lossy(name));
        // stat (extended 31) and fileExists refuse / deny the same names.
        let path = cstr(name);
        let (r, _) = call(&svc, h, STAT, &payload(&[&words(&[31, path.len() as u32]), &path], &[96]));
        assert_eq!(r.status, *want, "stat {}", String::from_utf8_lossy(name));
        let (r, reply) = call(&svc, h, FILE_EXISTS, &payload(&[&words(&[path.len() as u32]), &path], &[4]));
        assert_eq!((r.status, reply_output(&reply, &[4], 0).unwrap()[0]), (0, 0), "fileExists {}", String::from_utf8_lossy(name));
    }
    // Allowed names work, relative and absolute, and stat reports the file.
    assert_eq!(fopen(&svc, h, b"sub/x.so", b"r").0, 0);
    let abs = format!("{}/lib.so", tree.allowed_str());
    let (st, file) = fopen(&svc, h, abs.as_bytes(), b"rb");
    assert_eq!(st, 0);
    let path = cstr(b"lib.so");
    let (r, reply) = call(&svc, h, STAT, &payload(&[&words(&[31, path.len() as u32]), &path], &[96]));
    assert_eq!(r.status, 0);
    let st = reply_output(&reply, &[96], 0).unwrap();
    assert_eq!(u64::from_le_bytes(st[40..48].try_into().unwrap()), 4096);
    assert_eq!(fclose(&svc, h, file), 0);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap06_handles_are_virtual_never_host_fds() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let tree = Tree::new("g6");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let mut own = std::fs::File::open(tree.allowed.join("lib.so")).unwrap();
    let raw = own.as_raw_fd() as u32;
    for fd in [0, 1, 2, raw, raw + 1, FILE_HANDLE_BASE - 1, FILE_HANDLE_BASE, u32::MAX] {
        assert_eq!(fclose(&svc, h, fd), AEE_EBADFD, "fclose {fd}");
        assert_eq!(fread(&svc, h, fd, 4).0, AEE_EBADFD, "fread {fd}");
        assert_eq!(fseek(&svc, h, fd, 0, 0), AEE_EBADFD, "fseek {fd}");
    }
    let mut b = [0u8; 4];
    own.read_exact(&mut b).expect("the test's own fd was not closed by the DSP");
    let (st, file) = fopen(&svc, h, b"lib.so", b"r");
    assert_eq!((st, file), (0, FILE_HANDLE_BASE));
    // The handle table is bounded.
    let limits = Limits { max_reverse_handles: 3, ..Tree::limits() };
    let small = ReverseService::new(RecordingSys::default(), hexrpc_drivers::Fd(-1), tree.policy_with(limits));
    let hs = open_module(&small, "apps_std");
    for i in 0..3 {
        assert_eq!(fopen(&small, hs, b"lib.so", b"r"), (0, FILE_HANDLE_BASE + i));
    }
    assert_eq!(fopen(&small, hs, b"lib.so", b"r").0, AEE_EOUTOFHANDLES);
    assert_eq!(small.sys().opens.load(Ordering::SeqCst), small.sys().closes.load(Ordering::SeqCst) + 3, "the refused open was closed");
    drop(small);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap07_reads_are_bounded_and_replies_never_carry_stale_bytes() {
    let tree = Tree::new("g7");
    let limits = Limits { max_reverse_request: 8192, max_reverse_file_bytes: 4096 + 100, ..Tree::limits() };
    let svc = ReverseService::new(RecordingSys::default(), hexrpc_drivers::Fd(-1), tree.policy_with(limits));
    let h = open_module(&svc, "apps_std");
    let (_, file) = fopen(&svc, h, b"lib.so", b"r");
    assert_eq!(fread(&svc, h, file, 8193).0, AEE_EBADSIZE, "over the per-request cap");
    // Reading past the end: the unwritten part of the data buffer is zero, not 0xAA.
    assert_eq!(fseek(&svc, h, file, 4090, 0), 0);
    let (st, n, eof, data) = fread(&svc, h, file, 64);
    assert_eq!((st, n, eof), (0, 6, 1));
    assert_eq!(&data[..6], &tree.lib[4090..]);
    assert!(data[6..].iter().all(|&b| b == 0), "stale bytes in the reply");
    // The per-file budget: 4096 + 100 bytes in total.
    assert_eq!(fseek(&svc, h, file, 0, 0), 0);
    assert_eq!(fread(&svc, h, file, 4096).1, 4096 - 6 + 6);
    assert_eq!(fseek(&svc, h, file, 0, 0), 0);
    let (st, n, _, _) = fread(&svc, h, file, 4096);
    assert_eq!((st, n), (0, 100 - 6), "clamped to the remaining budget");
    assert_eq!(fseek(&svc, h, file, 0, 0), 0);
    assert_eq!(fread(&svc, h, file, 16).0, AEE_EBADSIZE, "budget used up");
    assert_eq!(svc.metrics().snapshot().error_count(RequestError::FileBudget), 1);
    assert_eq!(svc.metrics().snapshot().bytes_served, 4096 + 100);
    assert_eq!(fclose(&svc, h, file), 0);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap08_seek_offsets_are_signed_and_bounded_for_files_and_images() {
    static IMAGE: [u8; 10] = *b"0123456789";
    let tree = Tree::new("g8");
    let svc = tree.service();
    svc.register_image("tinylib", &IMAGE).unwrap();
    let h = open_module(&svc, "apps_std");
    for (name, len) in [(&b"tinylib"[..], 10i32), (b"lib.so", 4096)] {
        let (_, file) = fopen(&svc, h, name, b"r");
        assert_eq!(fseek(&svc, h, file, -1, 0), AEE_EFSEEK, "SET -1");
        assert_eq!(fseek(&svc, h, file, len + 1, 0), AEE_EFSEEK, "past the end");
        assert_eq!(fseek(&svc, h, file, i32::MIN, 2), AEE_EFSEEK);
        assert_eq!(fseek(&svc, h, file, 0, 3), AEE_EBADPARM, "unknown whence");
        assert_eq!(fseek(&svc, h, file, -4, 2), 0, "END -4");
        let (st, n, eof, _) = fread(&svc, h, file, 8);
        assert_eq!((st, n, eof), (0, 4, 1));
        assert_eq!(fseek(&svc, h, file, -2, 1), 0, "CUR -2");
        let (r, reply) = call(&svc, h, FTELL, &payload(&[&words(&[file])], &[4]));
        assert_eq!(r.status, 0);
        assert_eq!(i32::from_le_bytes(reply_output(&reply, &[4], 0).unwrap().try_into().unwrap()), len - 2);
        let (r, reply) = call(&svc, h, FLEN, &payload(&[&words(&[file])], &[8]));
        assert_eq!((r.status, u64::from_le_bytes(reply_output(&reply, &[8], 0).unwrap().try_into().unwrap())), (0, len as u64));
        assert_eq!(fseek(&svc, h, file, -len, 1), AEE_EFSEEK, "CUR before the start");
        assert_eq!(fseek(&svc, h, file, -3, 1), 0);
        assert_eq!(fclose(&svc, h, file), 0);
    }
    let (_, img) = fopen(&svc, h, b"tinylib", b"r");
    assert_eq!(fread(&svc, h, img, 10).3, IMAGE);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap09_unknown_methods_are_answered_not_fatal() {
    let tree = Tree::new("g9");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    let mem = open_module(&svc, "apps_mem");
    let served = [0u8, 3, 4, 8, 9, 10, 11, 15, 19, 22];
    for m in 0..31u8 {
        if served.contains(&m) {
            continue;
        }
        let sc = Scalars::new(m, 1, 0, 0, 0).unwrap().raw();
        assert_eq!(call(&svc, h, sc, &payload(&[&words(&[100])], &[])).0.status, AEE_EUNSUPPORTED, "apps_std {m}");
    }
    // Extended ids: 32..36 exist but are not served; others are not extended ids at all.
    for id in 32..=36 {
        assert_eq!(call(&svc, h, 0x1F01_0000, &payload(&[&words(&[id, 0])], &[])).0.status, AEE_EUNSUPPORTED, "ext {id}");
    }
    for id in [0, 7, 30, 37, u32::MAX] {
        assert_eq!(call(&svc, h, 0x1F01_0000, &payload(&[&words(&[id, 0])], &[])).0.status, AEE_EBADPARM, "ext {id}");
    }
    assert_eq!(call(&svc, h, 0x1F00_0000, &[]).0.status, AEE_EBADPARM, "extended without primIn");
    for m in [0u8, 1, 4, 5, 6, 7, 8, 31] {
        assert_eq!(call(&svc, mem, Scalars::new(m, 1, 0, 0, 0).unwrap().raw(), &payload(&[&[0u8; 32]], &[])).0.status, AEE_EUNSUPPORTED);
    }
    assert_eq!(call(&svc, 0, Scalars::new(5, 0, 0, 0, 0).unwrap().raw(), &[]).0.status, AEE_EUNSUPPORTED);
    // Served methods with the wrong shape, and sc words with handles.
    assert_eq!(call(&svc, h, 0x0402_0200, &payload(&[&words(&[100, 4]), b"x"], &[8, 4])).0.status, AEE_EBADPARM);
    assert_eq!(call(&svc, h, FCLOSE | 0x11, &payload(&[&words(&[100])], &[])).0.status, AEE_EBADPARM);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap10_statuses_are_aee_codes_with_no_data_on_error() {
    let tree = Tree::new("g10");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    // `call` asserts reply_len == 0 whenever the status is not 0.
    assert_eq!(fopen(&svc, h, b"missing.so", b"r").0, AEE_ENOSUCHFILE);
    let opens = svc.sys().opens.load(Ordering::SeqCst);
    assert_eq!(opens, svc.sys().closes.load(Ordering::SeqCst), "the walk closed its directory");
    for mode in [&b"w"[..], b"r+", b"a", b"wb"] {
        assert_eq!(fopen(&svc, h, b"lib.so", mode).0, AEE_EREADONLY, "{}", String::from_utf8_lossy(mode));
    }
    assert_eq!(fopen(&svc, h, b"lib.so", b"q").0, AEE_EBADPARM);
    assert_eq!(svc.session_counts().files, 0, "refused opens leave nothing open");
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), opens, "a write mode is refused before any open");
    let snap = svc.metrics().snapshot();
    assert_eq!(snap.error_count(RequestError::ReadOnly), 4);
    assert_eq!(snap.error_count(RequestError::NoSuchFile), 1);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap11_handler_errors_never_end_the_session_and_end_releases_everything() {
    // Stop/join and the next2 error policy are in reverse_loop.rs; here: a storm of refused
    // requests leaves the service answering, and dropping it closes every host file.
    let tree = Tree::new("g11");
    let svc = tree.service();
    let h = open_module(&svc, "apps_std");
    for i in 0..1000u32 {
        let junk: Vec<u8> = (0..(i % 64)).map(|k| (k * i) as u8).collect();
        assert_ne!(call(&svc, h, i.wrapping_mul(0x9E37_79B9), &junk).0.status, 0);
    }
    for _ in 0..5 {
        assert_eq!(fopen(&svc, h, b"lib.so", b"r").0, 0);
    }
    assert_still_serves(&svc, h, &tree);
    let rel = svc.end_session();
    assert_eq!(rel.files, 5);
    assert_eq!(svc.sys().opens.load(Ordering::SeqCst), svc.sys().closes.load(Ordering::SeqCst), "nothing leaked");
    assert_eq!(call(&svc, h, FCLOSE, &payload(&[&words(&[100])], &[])).0.status, AEE_ENOSUCHMOD, "module handles ended with the session");
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap12_images_are_locked_and_every_open_has_its_own_offset() {
    let tree = Tree::new("g12");
    let image: &'static [u8] = Box::leak((0..100u8).collect::<Vec<_>>().into_boxed_slice());
    let svc = tree.service();
    svc.register_image("tinylib", image).unwrap();
    let h = open_module(&svc, "apps_std");
    let (_, a) = fopen(&svc, h, b"tinylib", b"r");
    let (_, b) = fopen(&svc, h, b"tinylib", b"r");
    assert_ne!(a, b);
    assert_eq!(fread(&svc, h, a, 10).3, &image[..10]);
    assert_eq!(fread(&svc, h, b, 5).3, &image[..5]);
    assert_eq!(fread(&svc, h, a, 10).3, &image[10..20]);
    // Registration from other threads while the service answers.
    std::thread::scope(|s| {
        for t in 0..4 {
            let svc = &svc;
            s.spawn(move || {
                for i in 0..200 {
                    let name = format!("img{t}_{}", i % 3);
                    let _ = svc.register_image(&name, image);
                    let _ = svc.unregister_image(&name);
                }
            });
        }
        for _ in 0..200 {
            assert_eq!(fread(&svc, h, b, 1).0, 0);
        }
    });
    // Unregistering stops new opens; the open handle keeps reading.
    svc.unregister_image("tinylib").unwrap();
    assert_eq!(fopen(&svc, h, b"tinylib", b"r").0, AEE_ENOSUCHFILE);
    assert_eq!(fread(&svc, h, a, 1).0, 0);
    assert_still_serves(&svc, h, &tree);
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap13_dsp_maps_are_allowlisted_budgeted_tracked_and_released() {
    let tree = Tree::new("g13");
    let limits = Limits { max_dsp_map_bytes: 3 << 20, ..Tree::limits() };
    let svc = ReverseService::new(RecordingSys::default(), hexrpc_drivers::Fd(1000), tree.policy_with(limits));
    let mem = open_module(&svc, "apps_mem");
    let std_h = open_module(&svc, "apps_std");
    let map = |rflags: u32, len: i64| {
        let prim = [0i32.to_le_bytes(), 0u32.to_le_bytes(), rflags.to_le_bytes(), [0; 4]].concat();
        let prim = [prim, 0u64.to_le_bytes().to_vec(), len.to_le_bytes().to_vec()].concat();
        let (r, reply) = call(&svc, mem, MAP64, &payload(&[&prim], &[16]));
        let vadsp = if r.status == 0 { u64::from_le_bytes(reply_output(&reply, &[16], 0).unwrap()[8..16].try_into().unwrap()) } else { 0 };
        (r.status, vadsp)
    };
    let unmap =
        |vadsp: u64, len: i64| call(&svc, mem, UNMAP64, &payload(&[&[vadsp.to_le_bytes(), len.to_le_bytes()].concat()], &[])).0.status;
    assert_eq!(map(0x1, 4096).0, AEE_EUNSUPPORTED, "host-memory flags are not forwarded");
    assert_eq!(map(0xFFFF_FFFF, 4096).0, AEE_EUNSUPPORTED);
    assert_eq!(map(0x1000, -1).0, AEE_EBADPARM);
    assert_eq!(map(0x1000, 0).0, AEE_EBADPARM);
    assert_eq!(map(0x1000, 4 << 20).0, AEE_EBADSIZE, "over the budget");
    assert_eq!(svc.sys().ioctls.load(Ordering::SeqCst), 0, "refusals never reach the kernel");
    let (st, a) = map(0x1000, 2 << 20);
    assert_eq!(st, 0);
    for heap in [0x4, 0x8] {
        let ioctls = svc.sys().ioctls.load(Ordering::SeqCst);
        assert_eq!(map(heap, 4096).0, AEE_EUNSUPPORTED, "heap flag {heap:#x} is refused (kernel-rules.md R12)");
        assert_eq!(svc.sys().ioctls.load(Ordering::SeqCst), ioctls, "and never reaches the kernel");
    }
    assert_eq!(map(0x1000, 2 << 20).0, AEE_EBADSIZE, "budget counts live maps");
    let (st, b) = map(0x1000, 1 << 20);
    assert_eq!(st, 0);
    assert_eq!(unmap(a, 4096), AEE_ENOSUCHMAP, "exact match only");
    assert_eq!(unmap(0x1234, 1 << 20), AEE_ENOSUCHMAP);
    assert_eq!(svc.sys().munmaps.load(Ordering::SeqCst), 0);
    assert_eq!(unmap(a, 2 << 20), 0);
    assert_eq!(svc.session_counts().map_bytes, 1 << 20);
    svc.sys().fail_mmap.store(true, Ordering::SeqCst);
    assert_eq!(map(0x1000, 4096).0, AEE_EMMAP, "kernel refusal is an answer, not a dead loop");
    svc.sys().fail_mmap.store(false, Ordering::SeqCst);
    assert_eq!(svc.sys().live_maps(), 1);
    let _ = b;
    assert_still_serves(&svc, std_h, &tree);
    let rel = svc.end_session();
    assert_eq!(rel.maps, 1);
    assert_eq!(svc.sys().live_maps(), 0, "session end released the DSP map");
    assert_canary_untouched(&svc, &tree);
}

#[test]
fn gap14_greeting_fields_are_written_explicitly() {
    let tree = Tree::new("g14");
    let svc = tree.service();
    let name = cstr(b"apps_std");
    // The caller's reply buffer is full of 0xAA (see `call`): every byte of the reply is ours.
    let (r, reply) = call(&svc, 0, REMOTECTL_OPEN.raw(), &payload(&[&words(&[name.len() as u32, 32]), &name], &[8, 32]));
    assert_eq!(r.status, 0);
    let out = reply_output(&reply, &[8, 32], 0).unwrap();
    let handle = u32::from_le_bytes(out[..4].try_into().unwrap());
    assert!(handle > 20, "an opaque key, not a static handle: {handle:#x}");
    assert_eq!(i32::from_le_bytes(out[4..8].try_into().unwrap()), 0, "dlErr written");
    assert!(reply_output(&reply, &[8, 32], 1).unwrap().iter().all(|&b| b == 0), "dlerror zeroed");
    assert!(!reply.contains(&0xAA), "no byte of the reply is stale");
    // Unknown modules and malformed greetings are refused.
    for (prim, nm) in [(words(&[5, 8]), cstr(b"evil")), (words(&[4, 8]), cstr(b"apps_std")), (words(&[9]), cstr(b"apps_std"))] {
        assert_ne!(call(&svc, 0, REMOTECTL_OPEN.raw(), &payload(&[&prim, &nm], &[8, 8])).0.status, 0);
    }
    assert_eq!(call(&svc, 0, REMOTECTL_OPEN.raw(), &payload(&[&words(&[5, 8]), &cstr(b"evil")], &[8, 8])).0.status, AEE_ENOSUCHMOD);
    assert_eq!(call(&svc, 0, REMOTECTL_OPEN.raw(), &payload(&[&words(&[9, 8]), &cstr(b"apps_std")], &[4, 8])).0.status, AEE_EBADPARM);
    assert_still_serves(&svc, handle, &tree);
    assert_canary_untouched(&svc, &tree);
    let _ = FilePolicy::for_board(&hexrpc_bsp::BENCH).unwrap();
}
