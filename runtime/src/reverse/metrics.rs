//! Counters of the reverse service, atomics readable while the loop runs.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::session::Module;
use super::RequestError;

/// Method slots per module (apps_std ids go up to 36; larger ids share the last slot).
pub const METHOD_SLOTS: usize = 40;

/// apps_std method names by id (reverse-rpc.md 3.4).
pub const APPS_STD_METHODS: [&str; 37] = [
    "fopen",
    "freopen",
    "fflush",
    "fclose",
    "fread",
    "fwrite",
    "fgetpos",
    "fsetpos",
    "ftell",
    "fseek",
    "flen",
    "rewind",
    "feof",
    "ferror",
    "clearerr",
    "print_string",
    "getenv",
    "setenv",
    "unsetenv",
    "fopen_with_env",
    "fgets",
    "get_search_paths_with_env",
    "fileExists",
    "fsync",
    "fremove",
    "fdopen_decrypt",
    "opendir",
    "closedir",
    "readdir",
    "mkdir",
    "rmdir",
    "stat",
    "ftrunc",
    "frename",
    "fopen_fd",
    "fclose_fd",
    "fopen_with_env_fd",
];

/// apps_mem method names by id.
pub const APPS_MEM_METHODS: [&str; 8] =
    ["request_map", "request_unmap", "request_map64", "request_unmap64", "share_map", "share_unmap", "dma_handle_map", "dma_handle_unmap"];

/// apps_remotectl method names by id.
pub const REMOTECTL_METHODS: [&str; 2] = ["open", "close"];

const MODULES: usize = 3;

fn module_index(m: Module) -> usize {
    match m {
        Module::RemoteCtl => 0,
        Module::AppsStd => 1,
        Module::AppsMem => 2,
    }
}

/// The live counters.
pub struct Metrics {
    requests: AtomicU64,
    ok: AtomicU64,
    bytes_served: AtomicU64,
    unknown_handle: AtomicU64,
    transport_errors: AtomicU64,
    methods: [[AtomicU64; METHOD_SLOTS]; MODULES],
    errors: [AtomicU64; RequestError::COUNT],
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All zero.
    pub const fn new() -> Self {
        Metrics {
            requests: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            bytes_served: AtomicU64::new(0),
            unknown_handle: AtomicU64::new(0),
            transport_errors: AtomicU64::new(0),
            methods: [const { [const { AtomicU64::new(0) }; METHOD_SLOTS] }; MODULES],
            errors: [const { AtomicU64::new(0) }; RequestError::COUNT],
        }
    }

    pub(crate) fn request(&self, module: Option<Module>, method: u32) {
        self.requests.fetch_add(1, Relaxed);
        match module {
            Some(m) => {
                let slot = (method as usize).min(METHOD_SLOTS - 1);
                self.methods[module_index(m)][slot].fetch_add(1, Relaxed);
            }
            None => {
                self.unknown_handle.fetch_add(1, Relaxed);
            }
        }
    }

    pub(crate) fn outcome(&self, r: Result<(), RequestError>) {
        match r {
            Ok(()) => self.ok.fetch_add(1, Relaxed),
            Err(e) => self.errors[e.index()].fetch_add(1, Relaxed),
        };
    }

    pub(crate) fn served(&self, bytes: u64) {
        self.bytes_served.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn transport_error(&self) {
        self.transport_errors.fetch_add(1, Relaxed);
    }

    /// A consistent-enough copy of every counter (each read atomically, not all at one instant).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut s = MetricsSnapshot {
            requests: self.requests.load(Relaxed),
            ok: self.ok.load(Relaxed),
            bytes_served: self.bytes_served.load(Relaxed),
            unknown_handle: self.unknown_handle.load(Relaxed),
            transport_errors: self.transport_errors.load(Relaxed),
            methods: [[0; METHOD_SLOTS]; MODULES],
            errors: [0; RequestError::COUNT],
        };
        for (dst, src) in s.methods.iter_mut().zip(&self.methods) {
            for (d, a) in dst.iter_mut().zip(src) {
                *d = a.load(Relaxed);
            }
        }
        for (d, a) in s.errors.iter_mut().zip(&self.errors) {
            *d = a.load(Relaxed);
        }
        s
    }
}

/// A copy of the counters, for the CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Requests dispatched (answered with any status).
    pub requests: u64,
    /// Requests answered with status 0.
    pub ok: u64,
    /// File bytes served by fread.
    pub bytes_served: u64,
    /// Requests to a handle that named no module.
    pub unknown_handle: u64,
    /// Listener transport failures (next2 / get_in_bufs2 errors other than interruptions).
    pub transport_errors: u64,
    methods: [[u64; METHOD_SLOTS]; MODULES],
    errors: [u64; RequestError::COUNT],
}

impl MetricsSnapshot {
    /// Requests of `module`'s method `id`.
    pub fn method_count(&self, module: Module, id: u32) -> u64 {
        self.methods[module_index(module)][(id as usize).min(METHOD_SLOTS - 1)]
    }

    /// Refusals of this kind.
    pub fn error_count(&self, e: RequestError) -> u64 {
        self.errors[e.index()]
    }

    /// Every non-zero method counter as (`"apps_std.fread"`-style module and method names, count).
    pub fn methods(&self) -> impl Iterator<Item = (Module, &'static str, u64)> + '_ {
        [Module::RemoteCtl, Module::AppsStd, Module::AppsMem].into_iter().flat_map(move |m| {
            let names: &'static [&'static str] = match m {
                Module::RemoteCtl => &REMOTECTL_METHODS,
                Module::AppsStd => &APPS_STD_METHODS,
                Module::AppsMem => &APPS_MEM_METHODS,
            };
            self.methods[module_index(m)]
                .iter()
                .enumerate()
                .filter(|&(_, &n)| n != 0)
                .map(move |(i, &n)| (m, names.get(i).copied().unwrap_or("other"), n))
        })
    }

    /// Writes the snapshot as one JSON object:
    /// `{"requests":N,"ok":N,"bytes_served":N,"unknown_handle":N,"transport_errors":N,
    /// "methods":{"apps_std.fread":N,...},"errors":{"bad_parm":N,...}}` (zero counters omitted
    /// from `methods` and `errors`).
    pub fn write_json<W: fmt::Write>(&self, w: &mut W) -> fmt::Result {
        write!(
            w,
            "{{\"requests\":{},\"ok\":{},\"bytes_served\":{},\"unknown_handle\":{},\"transport_errors\":{},\"methods\":{{",
            self.requests, self.ok, self.bytes_served, self.unknown_handle, self.transport_errors
        )?;
        for (i, (m, name, n)) in self.methods().enumerate() {
            write!(w, "{}\"{}.{}\":{}", if i == 0 { "" } else { "," }, m.name(), name, n)?;
        }
        w.write_str("},\"errors\":{")?;
        let mut first = true;
        for e in RequestError::ALL {
            let n = self.error_count(e);
            if n != 0 {
                write!(w, "{}\"{}\":{}", if first { "" } else { "," }, e.name(), n)?;
                first = false;
            }
        }
        w.write_str("}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_json() {
        let m = Metrics::new();
        m.request(Some(Module::AppsStd), 4);
        m.request(Some(Module::AppsStd), 4);
        m.request(Some(Module::AppsMem), 99);
        m.request(None, 0);
        m.outcome(Ok(()));
        m.outcome(Err(RequestError::BadParm));
        m.served(10);
        let s = m.snapshot();
        assert_eq!(s.method_count(Module::AppsStd, 4), 2);
        assert_eq!(s.method_count(Module::AppsMem, 1000), 1);
        assert_eq!(s.error_count(RequestError::BadParm), 1);
        let mut out = heapless::String::<512>::new();
        s.write_json(&mut out).unwrap();
        assert_eq!(
            out.as_str(),
            "{\"requests\":4,\"ok\":1,\"bytes_served\":10,\"unknown_handle\":1,\"transport_errors\":0,\
             \"methods\":{\"apps_std.fread\":2,\"apps_mem.other\":1},\"errors\":{\"bad_parm\":1}}"
        );
    }
}
