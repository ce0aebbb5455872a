//! `hexrpc capture`: records the reverse-RPC requests of a session as request files (`HXRQ`,
//! the format `hexrpc reverse-replay` reads), so a failure seen in the field can be replayed on a
//! desk. A tap on the reverse file service sees every request after it was answered; the files
//! and an `index.json` (file, module, handle, scalars, status) are written when the session
//! has ended.

use std::sync::Mutex;

use crate::replay::build_request_file;
use hexrpc_drivers::Scalars;
use hexrpc_runtime::reverse::{Module, RequestTap};

/// Most requests kept (later ones are counted, not kept).
pub const MAX_RECORDS: usize = 10_000;
/// Most library image bytes kept (images beyond are named in the log, not kept).
pub const MAX_IMAGE_BYTES: usize = 128 << 20;

/// One recorded request.
#[derive(Debug)]
pub struct Record {
    /// The request file's bytes.
    pub bytes: Vec<u8>,
    /// Module name (`apps_remotectl` for handle 0, `unknown` for a handle naming no module).
    pub module: &'static str,
    /// The raw handle.
    pub handle: u32,
    /// The scalars word.
    pub sc: u32,
    /// The status the service answered.
    pub status: i32,
}

/// The tap.
#[derive(Debug, Default)]
pub struct Recorder {
    records: Mutex<Vec<Record>>,
    dropped: std::sync::atomic::AtomicU64,
    /// The library images the DSP opened, by the name it opened (once each).
    images: Mutex<Vec<(String, Vec<u8>)>>,
}

impl RequestTap for Recorder {
    fn request(&self, module: Option<Module>, handle: u32, sc: Scalars, payload: &[u8], status: i32) {
        // Module requests are recorded by name (replay opens the module itself, so the file does
        // not depend on this session's handle numbers); handle 0 and unknown handles raw.
        let (name, file_module) = match module {
            Some(Module::RemoteCtl) => ("apps_remotectl", ""),
            Some(m) => (m.name(), m.name()),
            None => ("unknown", ""),
        };
        let Some(bytes) = build_request_file(file_module, handle, sc, payload) else { return };
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if records.len() >= MAX_RECORDS {
            self.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        records.push(Record { bytes, module: name, handle, sc: sc.raw(), status });
    }

    fn image_opened(&self, name: &[u8], image: &[u8]) {
        let name = String::from_utf8_lossy(name).into_owned();
        let mut images = self.images.lock().unwrap_or_else(|p| p.into_inner());
        if images.iter().any(|(n, _)| *n == name) {
            return;
        }
        let kept: usize = images.iter().map(|(_, b)| b.len()).sum();
        if kept + image.len() > MAX_IMAGE_BYTES {
            log::warn!("capture: library image {name:?} not kept ({} bytes beyond the {MAX_IMAGE_BYTES}-byte limit)", image.len());
            return;
        }
        images.push((name, image.to_vec()));
    }
}

/// The file name a captured image is written under: its name with anything but `[A-Za-z0-9._-]`
/// replaced, never starting with a dot, prefixed by its index (unique).
fn image_file(i: usize, name: &str) -> String {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    format!("images/{:02}-{}", i + 1, safe.trim_start_matches('.'))
}

impl Recorder {
    /// Writes every record into `dir` (created if missing; an existing directory must be empty,
    /// and a symbolic link is refused: see [`crate::io::make_empty_dir`]) and returns how many
    /// were written.
    pub fn write(&self, dir: &std::path::Path) -> Result<(usize, u64), String> {
        let dir = crate::io::make_empty_dir(dir).map_err(|e| format!("{} {e}", crate::io::escape(&dir.to_string_lossy())))?;
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut index = String::from("{\"requests\": [");
        for (i, r) in records.iter().enumerate() {
            let method = Scalars::from_raw(r.sc).method();
            let name = format!("{:04}-{}-m{method}.hxrq", i + 1, r.module);
            crate::io::write_atomic(&dir.join(&name), &r.bytes).map_err(|e| format!("{name}: {e}"))?;
            if i > 0 {
                index.push_str(", ");
            }
            let mut o = crate::json::Object::new(&mut index);
            o.str("file", &name).str("module", r.module).num("handle", u64::from(r.handle)).num("sc", u64::from(r.sc));
            o.raw("status", |s| s.push_str(&r.status.to_string()));
            o.end();
        }
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        index.push_str("], \"images\": [");
        let images = self.images.lock().unwrap_or_else(|p| p.into_inner());
        if !images.is_empty() {
            std::fs::create_dir(dir.join("images")).map_err(|e| format!("images/: {e}"))?;
        }
        for (i, (name, bytes)) in images.iter().enumerate() {
            let file = image_file(i, name);
            crate::io::write_atomic(&dir.join(&file), bytes).map_err(|e| format!("{file}: {e}"))?;
            if i > 0 {
                index.push_str(", ");
            }
            let mut o = crate::json::Object::new(&mut index);
            o.str("name", name).str("file", &file);
            o.end();
        }
        index.push_str(&format!("], \"dropped\": {dropped}}}\n"));
        crate::io::write_atomic(&dir.join("index.json"), index.as_bytes()).map_err(|e| format!("index.json: {e}"))?;
        Ok((records.len(), dropped))
    }
}
