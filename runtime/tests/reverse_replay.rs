//! Offline replay of request files: each is answered as if the DSP had sent it; truncated or
//! hostile files are reported, never a panic; the canary outside the allowlist stays untouched.

#[path = "reverse_support.rs"]
mod support;

use hexrpc_drivers::aee::*;
use hexrpc_drivers::Scalars;
use hexrpc_runtime::reverse::replay::{all_answered, build_request_file, replay_files, replay_request, results_json, results_text};
use support::*;

#[test]
fn request_files_replay_through_the_ordinary_paths() {
    let tree = Tree::new("replay");
    let svc = tree.service();
    let canary = tree.canary.to_str().unwrap().as_bytes().to_vec();
    let sc = |raw| Scalars::from_raw(raw);
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("open.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(b"lib.so", b"r")).unwrap()),
        ("read.hxrq", build_request_file("apps_std", 0, sc(FREAD), &payload(&[&words(&[100, 8])], &[8, 8])).unwrap()),
        ("canary.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(&canary, b"r")).unwrap()),
        ("write.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(b"lib.so", b"w")).unwrap()),
        ("nomod.hxrq", build_request_file("evil_mod", 0, sc(FCLOSE), &[]).unwrap()),
        ("raw.hxrq", build_request_file("", 0x1234, sc(FCLOSE), &payload(&[&words(&[100])], &[])).unwrap()),
        ("huge.hxrq", build_request_file("apps_std", 0, sc(FREAD), &vec![0u8; (64 << 10) + 1]).unwrap()),
        ("close.hxrq", build_request_file("apps_std", 0, sc(FCLOSE), &payload(&[&words(&[100])], &[])).unwrap()),
        ("bad_magic.hxrq", b"NOPE".to_vec()),
    ];
    let mut paths = Vec::new();
    for (name, bytes) in &files {
        let p = tree.root.join(name);
        std::fs::write(&p, bytes).unwrap();
        paths.push(p);
    }
    // Every truncation of a valid file is answered or reported, never a panic.
    for cut in 0..files[0].1.len() {
        let r = replay_request(&svc, &files[0].1[..cut]);
        assert!(r.status.is_some() || r.error.is_some());
        if let Some(s) = r.status {
            assert_ne!(s, 0, "cut {cut}");
        }
    }
    paths.push(tree.root.join("missing.hxrq"));
    let results = replay_files(&svc, &paths);
    let statuses: Vec<Option<i32>> = results.iter().map(|(_, r)| r.status).collect();
    assert_eq!(
        statuses,
        vec![
            Some(0),
            Some(0),
            Some(AEE_ENOTALLOWED),
            Some(AEE_EREADONLY),
            Some(AEE_ENOSUCHMOD),
            Some(AEE_ENOSUCHMOD),
            Some(AEE_EBADSIZE),
            Some(0),
            None,
            None
        ]
    );
    assert_eq!(results[0].1.reply_len, 12, "4-byte length, padding, 4-byte FILE");
    assert_eq!(results[1].1.reply_len, 32);
    assert!(results[8].1.error.as_deref().unwrap().contains("magic"));
    assert!(!all_answered(&results));
    assert!(all_answered(&results[..8]));
    let json = results_json(&results);
    assert!(json.starts_with("{\"results\": [{\"file\": \""), "{json}");
    assert!(json.contains("\"status\": 62, \"reply_len\": 0, \"error\": \"opening the module through apps_remotectl failed\""), "{json}");
    assert!(results_text(&results).contains("status 43 (AEE_ENOTALLOWED)"));
    assert_eq!(svc.session_counts().modules, 0, "replay closes the modules it opened");
    assert_eq!(svc.session_counts().files, 0);
    assert_canary_untouched(&svc, &tree);
}
