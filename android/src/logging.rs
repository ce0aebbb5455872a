//! Logging for the CLI: android_logger (tag `hexrpc`) on Android, stderr elsewhere.
//!
//! On Android, warnings and errors also go to stderr: over `adb shell` logcat is not what the
//! person sees, and a failed `--output` write must not be a silent exit 1. (Under init, stderr
//! is /dev/null unless the service asks otherwise, so nothing is lost or doubled there.)
//!
//! The level comes from `-v` / `-q` on the command line, else from `HEXRPC_LOG`
//! (`error`, `warn`, `info`, `debug`, `trace`, `off`), else `warn`.

use log::LevelFilter;

/// Parses a level name as `HEXRPC_LOG` takes it.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" => Some(LevelFilter::Off),
        "error" => Some(LevelFilter::Error),
        "warn" | "warning" => Some(LevelFilter::Warn),
        "info" => Some(LevelFilter::Info),
        "debug" => Some(LevelFilter::Debug),
        "trace" => Some(LevelFilter::Trace),
        _ => None,
    }
}

/// The level from the verbosity count (`-v` adds one, `-q` removes one) and the environment.
pub fn level(verbosity: i32, env: Option<&str>) -> LevelFilter {
    if verbosity == 0 {
        if let Some(l) = env.and_then(parse_level) {
            return l;
        }
    }
    match verbosity {
        i32::MIN..=-2 => LevelFilter::Off,
        -1 => LevelFilter::Error,
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

#[cfg(not(target_os = "android"))]
struct Stderr;

#[cfg(not(target_os = "android"))]
impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("hexrpc: {}: {}", r.level().as_str().to_ascii_lowercase(), r.args());
        }
    }
    fn flush(&self) {}
}

#[cfg(target_os = "android")]
struct Android(android_logger::AndroidLogger);

#[cfg(target_os = "android")]
impl log::Log for Android {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        self.0.log(r);
        if r.level() <= log::Level::Warn {
            eprintln!("hexrpc: {}: {}", r.level().as_str().to_ascii_lowercase(), r.args());
        }
    }
    fn flush(&self) {
        self.0.flush();
    }
}

/// Installs the logger once.
pub fn init(level: LevelFilter) {
    #[cfg(target_os = "android")]
    {
        static LOGGER: std::sync::OnceLock<Android> = std::sync::OnceLock::new();
        let logger = LOGGER.get_or_init(|| {
            Android(android_logger::AndroidLogger::new(android_logger::Config::default().with_tag("hexrpc").with_max_level(level)))
        });
        let _ = log::set_logger(logger);
    }
    #[cfg(not(target_os = "android"))]
    {
        static LOGGER: Stderr = Stderr;
        let _ = log::set_logger(&LOGGER);
    }
    log::set_max_level(level);
}

/// An error for the person running the command: stderr, and the log (logcat on Android).
pub fn error(msg: &str) {
    log::error!("{msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(level(0, None), LevelFilter::Warn);
        assert_eq!(level(0, Some("debug")), LevelFilter::Debug);
        assert_eq!(level(1, Some("error")), LevelFilter::Info, "flags win over the environment");
        assert_eq!(level(-1, None), LevelFilter::Error);
        assert_eq!(level(-5, None), LevelFilter::Off);
        assert_eq!(level(9, None), LevelFilter::Trace);
        assert_eq!(level(0, Some("nonsense")), LevelFilter::Warn);
    }
}
