//! Human units for the readable reports: sizes in B/KiB/MiB/GiB, durations in ns/µs/ms/s.

use std::time::Duration;

/// `1536` → `1.5 KiB`; exact multiples print without decimals (`4 KiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `Duration` → `850 ns`, `12.3 µs`, `4.5 ms`, `2.00 s`.
pub fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes((1 << 20) + 512), "1.0 MiB");
        assert_eq!(duration(Duration::from_nanos(850)), "850 ns");
        assert_eq!(duration(Duration::from_micros(310)), "310.0 µs");
        assert_eq!(duration(Duration::from_millis(204)), "204.0 ms");
        assert_eq!(duration(Duration::from_secs(2)), "2.00 s");
    }
}
