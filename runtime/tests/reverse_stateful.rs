//! The stateful model of a reverse session (`stateful/mod.rs`) over random request sequences:
//! the same checks as the cargo-fuzz target `reverse_session`, driven by proptest. The number
//! of sequences is `HEXRPC_STATEFUL_CASES` (default 2,000; CI's fallback when no nightly
//! toolchain can be installed runs it at fuzzing scale).

mod stateful;

use proptest::prelude::any;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

fn cases() -> u32 {
    std::env::var("HEXRPC_STATEFUL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

#[test]
fn request_sequences_never_escape_leak_or_reuse_handles() {
    let tree = stateful::Tree::new("prop");
    let cases = cases();
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let total = std::cell::Cell::new(stateful::Stats::default());
    let start = std::time::Instant::now();
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..1024), |data| {
            let s = stateful::run(&tree, &data).map_err(|v| TestCaseError::fail(v.to_string()))?;
            let mut t = total.get();
            t.steps += s.steps;
            t.opened_files += s.opened_files;
            t.bytes_read += s.bytes_read;
            t.swaps += s.swaps;
            total.set(t);
            Ok(())
        })
        .unwrap();
    let t = total.get();
    eprintln!(
        "{cases} sequences in {:.2?}: {} steps, {} files opened, {} bytes read, {} directory swaps",
        start.elapsed(),
        t.steps,
        t.opened_files,
        t.bytes_read,
        t.swaps
    );
    assert!(t.opened_files > 0 && t.bytes_read > 0 && t.swaps > 0, "the sequences reach the file paths: {t:?}");
}

/// Sequences written out by hand: the checks find a leak or an escape if there is one on the
/// ordinary paths (open, read, module close, swap, session end).
#[test]
fn hand_written_sequences_pass() {
    let tree = stateful::Tree::new("hand");
    // module open apps_std; fopen lib.so; fread 4096; swap d; fopen d/canary; module close.
    let seq = [0u8, 0, 3, 0, 0, 0, 5, 0, 4, 12, 1, 3, 0, 2, 0, 2, 2, 0];
    let s = stateful::run(&tree, &seq).unwrap();
    assert_eq!(s.opened_files, 1);
    assert_eq!(s.bytes_read, 4096);
    assert_eq!(s.swaps, 1);
}
