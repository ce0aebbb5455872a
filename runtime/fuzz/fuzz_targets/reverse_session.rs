//! Fuzz target: request sequences against a reverse session over a real temporary file tree,
//! with the checks of the stateful model (`runtime/tests/stateful/mod.rs`, shared with the
//! property test `reverse_stateful`): the canary outside the allowlist is never opened or read,
//! no descriptor is forged, closed twice or leaked, no handle or module key is handed out twice
//! or accepted once dead, and every DSP map is released at session end. A broken property
//! panics with its description.
#![no_main]

#[path = "../../tests/stateful/mod.rs"]
mod stateful;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn tree() -> &'static stateful::Tree {
    static T: OnceLock<stateful::Tree> = OnceLock::new();
    T.get_or_init(|| stateful::Tree::new("fuzz"))
}

fuzz_target!(|data: &[u8]| {
    if let Err(v) = stateful::run(tree(), data) {
        panic!("reverse session property broken: {v}");
    }
});
