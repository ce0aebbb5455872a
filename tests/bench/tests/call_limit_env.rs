//! `HEXRPC_BENCH_CALL_LIMIT_MS` through the process environment: `BenchConfig::from_env` and
//! `with_env` take it, refuse what cannot be used with a clear error, and `Default` never reads
//! it. One test, so nothing else in this binary runs while it changes the environment.

use std::time::Duration;

use hexrpc_bench::{BenchConfig, BenchEnvError, CALL_LIMIT_ENV};

#[test]
fn the_environment_sets_the_per_call_limit_or_is_refused() {
    assert_eq!(CALL_LIMIT_ENV, "HEXRPC_BENCH_CALL_LIMIT_MS");
    std::env::remove_var(CALL_LIMIT_ENV);
    assert_eq!(BenchConfig::from_env().expect("unset").executor_timeout, Duration::from_secs(10));

    std::env::set_var(CALL_LIMIT_ENV, "120000");
    assert_eq!(BenchConfig::from_env().expect("120000").executor_timeout, Duration::from_secs(120));
    // The field's default is not the environment's business.
    assert_eq!(BenchConfig::default().executor_timeout, Duration::from_secs(10));
    let upstream = BenchConfig::for_board(&hexrpc_bsp::BENCH_UPSTREAM).with_env().expect("with_env");
    assert_eq!((upstream.board.name, upstream.executor_timeout), (hexrpc_bsp::BENCH_UPSTREAM.name, Duration::from_secs(120)));

    for bad in ["0", "-1", "2.5", "10s", "", "99999999999"] {
        std::env::set_var(CALL_LIMIT_ENV, bad);
        let e = BenchConfig::from_env().expect_err(bad);
        assert!(matches!(e, BenchEnvError::CallLimit { ref value, .. } if value == bad), "{e:?}");
        let text = e.to_string();
        assert!(text.starts_with(&format!("HEXRPC_BENCH_CALL_LIMIT_MS={bad:?} cannot be used: ")), "{text}");
        assert!(text.contains("milliseconds, a whole number from 1 to 86400000"), "{text}");
    }
    std::env::remove_var(CALL_LIMIT_ENV);
}
