//! What every command shares: usage errors exit 2, help is complete, and flags and exit codes
//! agree across commands.

use crate::common::{hexrpc, hexrpc_env, stderr_of};

#[test]
fn usage_errors_exit_2() {
    for args in [&["frobnicate"][..], &[], &["abi", "--nope"], &["help", "nope"]] {
        let out = hexrpc(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn help_is_complete() {
    for args in [&["--help"][..], &["help"], &["help", "selftest"], &["selftest", "--help"], &["abi", "-h"]] {
        let out = hexrpc(args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("USAGE:") && text.contains("EXIT STATUS"), "{args:?}: {text}");
    }
}

/// Flags and exit codes agree across commands: --bench with --device is a usage error (not
/// "the last wins"), a --library that cannot be read exits 2 everywhere (never a silent fall-back
/// to the bench's model), and an HEXRPC_LOG that is not a level is said.
#[test]
fn flags_and_exit_codes_are_consistent() {
    for cmd in [vec!["selftest", "--bench", "--device"], vec!["probe", "--device", "--bench"], vec!["run", "x.so", "--bench", "--device"]] {
        let o = hexrpc(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains("--bench and --device exclude each other"), "{cmd:?}: {}", stderr_of(&o));
    }
    for cmd in [
        vec!["selftest", "--bench", "--library", "/nonexistent/lib.so"],
        vec!["probe", "--bench", "--library", "/nonexistent/lib.so"],
        vec!["report", "--library", "/nonexistent/lib.so", "-o", "-"],
    ] {
        let o = hexrpc(&cmd);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr_of(&o));
        assert!(stderr_of(&o).contains("/nonexistent/lib.so"), "{cmd:?}: {}", stderr_of(&o));
    }
    let o = hexrpc_env(&["abi"], "HEXRPC_LOG", "verbose");
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr_of(&o).contains("HEXRPC_LOG=\"verbose\" is not a level"), "{}", stderr_of(&o));
    let o = hexrpc_env(&["abi"], "HEXRPC_LOG", "debug");
    assert!(!stderr_of(&o).contains("is not a level"), "{}", stderr_of(&o));
}
