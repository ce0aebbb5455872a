//! The model-file reader on hostile input: the fuzzer's bytes as a file, and the same bytes as
//! edits (two bytes of position, one of value) onto the sample model with its checksums made
//! right again, so that mutations reach the checks behind the checksums. Any panic is a crash.

#![no_main]

use std::sync::OnceLock;

use hexrpc_model::{sample, Limits, ModelFile};
use libfuzzer_sys::fuzz_target;

fn walk(m: &ModelFile<'_>) {
    let _ = m.provenance();
    for l in m.libraries() {
        let _ = l.record.kernels().count();
    }
    let _ = (m.arenas().count(), m.init().count(), m.steps().map(|s| s.records.len()).sum::<usize>(), m.io().count());
}

fuzz_target!(|data: &[u8]| {
    static SAMPLE: OnceLock<Vec<u8>> = OnceLock::new();
    if let Ok(m) = ModelFile::parse(data, &Limits::DEFAULT) {
        walk(&m);
    }
    let mut b = SAMPLE.get_or_init(|| sample::tiny().to_bytes()).clone();
    for edit in data.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([edit[0], edit[1]])) % b.len();
        b[at] = edit[2];
    }
    sample::fix_checksums(&mut b);
    if let Ok(m) = ModelFile::parse(&b, &Limits::DEFAULT) {
        walk(&m);
    }
});
