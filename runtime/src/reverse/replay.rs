//! Offline replay of recorded or hand-made reverse requests (feature `std`), for security
//! review: `hexrpc reverse-replay`.
//!
//! A request file is the 4 bytes `HXRQ`; a u8 length and that many bytes of a module name
//! (empty: use the raw handle that follows); a u32 LE handle (used only when the name is empty;
//! 0 is apps_remotectl); a u32 LE scalars word; then the request payload exactly as next2
//! delivers it. With a module name the module is first opened through the ordinary
//! apps_remotectl open path, the request is sent to the handle that returned, and the module is
//! closed again. Requests of several files run against one session in the order given, so a
//! sequence (open, read, close) can be replayed; FILE handles start at 100.

extern crate std;

use std::fmt::Write as _;
use std::string::String;
use std::vec;
use std::vec::Vec;

use hexrpc_drivers::listener::{REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::{Scalars, Syscalls};

use super::thread::REPLY_OVERHEAD;
use super::wire::{pack_request, reply_output};
use super::{RequestError, ReverseService};

/// The magic at the start of a request file.
pub const MAGIC: &[u8; 4] = b"HXRQ";

/// A parsed request file, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFile<'a> {
    /// Module name (empty: use [`handle`](Self::handle)).
    pub module: &'a [u8],
    /// Raw reverse handle (used only when `module` is empty).
    pub handle: u32,
    /// Scalars word.
    pub sc: Scalars,
    /// Request payload.
    pub payload: &'a [u8],
}

/// Why a request file could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MalformedFile {
    /// It does not start with `HXRQ`.
    BadMagic,
    /// It ends inside the module name.
    TruncatedName,
    /// It ends inside the handle or the scalars word.
    TruncatedHeader,
}

impl core::fmt::Display for MalformedFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            MalformedFile::BadMagic => "malformed request file: no HXRQ magic",
            MalformedFile::TruncatedName => "malformed request file: truncated module name",
            MalformedFile::TruncatedHeader => "malformed request file: truncated handle or scalars word",
        })
    }
}

impl core::error::Error for MalformedFile {}

/// Parses a request file; never panics.
pub fn parse_request_file(bytes: &[u8]) -> Result<RequestFile<'_>, MalformedFile> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(MalformedFile::BadMagic)?;
    let (&n, rest) = rest.split_first().ok_or(MalformedFile::TruncatedName)?;
    let module = rest.get(..n as usize).ok_or(MalformedFile::TruncatedName)?;
    let rest = &rest[n as usize..];
    let word = |at: usize| -> Result<u32, MalformedFile> {
        let b: [u8; 4] = rest.get(at..at + 4).and_then(|s| s.try_into().ok()).ok_or(MalformedFile::TruncatedHeader)?;
        Ok(u32::from_le_bytes(b))
    };
    let handle = word(0)?;
    let sc = Scalars::from_raw(word(4)?);
    Ok(RequestFile { module, handle, sc, payload: &rest[8..] })
}

/// Builds a request file (the inverse of [`parse_request_file`]); `None` for a module name
/// longer than 255 bytes.
pub fn build_request_file(module: &str, handle: u32, sc: Scalars, payload: &[u8]) -> Option<Vec<u8>> {
    let n = u8::try_from(module.len()).ok()?;
    let mut v = Vec::with_capacity(13 + module.len() + payload.len());
    v.extend_from_slice(MAGIC);
    v.push(n);
    v.extend_from_slice(module.as_bytes());
    v.extend_from_slice(&handle.to_le_bytes());
    v.extend_from_slice(&sc.raw().to_le_bytes());
    v.extend_from_slice(payload);
    Some(v)
}

/// What replaying one file gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayResult {
    /// The status the service answered (0 or an AEE code); `None` if the file was malformed or
    /// unreadable and nothing was sent.
    pub status: Option<i32>,
    /// Bytes of reply (0 on error).
    pub reply_len: usize,
    /// Why the file could not be replayed, or which step failed.
    pub error: Option<String>,
}

impl ReplayResult {
    fn malformed(e: impl core::fmt::Display) -> Self {
        ReplayResult { status: None, reply_len: 0, error: Some(std::format!("{e}")) }
    }
}

fn open_module<S: Syscalls>(service: &ReverseService<'_, S>, name: &[u8], reply: &mut [u8]) -> Result<u32, i32> {
    let name_len = u32::try_from(name.len() + 1).map_err(|_| RequestError::BadSize.aee())?;
    let mut name_z = Vec::with_capacity(name.len() + 1);
    name_z.extend_from_slice(name);
    name_z.push(0);
    let mut prim = [0u8; 8];
    prim[..4].copy_from_slice(&name_len.to_le_bytes());
    let mut payload = vec![0u8; 64 + name_z.len()];
    let n = pack_request(&[&prim, &name_z], &[8, 0], &mut payload).ok_or(RequestError::BadSize.aee())?;
    let r = service.dispatch(0, REMOTECTL_OPEN, &payload[..n], reply);
    if r.status != 0 {
        return Err(r.status);
    }
    let out = reply_output(&reply[..r.reply_len], &[8, 0], 0).ok_or(RequestError::BadParm.aee())?;
    let handle: [u8; 4] = out.get(..4).and_then(|b| b.try_into().ok()).ok_or(RequestError::BadParm.aee())?;
    Ok(u32::from_le_bytes(handle))
}

fn close_module<S: Syscalls>(service: &ReverseService<'_, S>, handle: u32, reply: &mut [u8]) {
    let mut prim = [0u8; 8];
    prim[..4].copy_from_slice(&handle.to_le_bytes());
    let mut payload = [0u8; 32];
    if let Some(n) = pack_request(&[&prim], &[4, 0], &mut payload) {
        service.dispatch(0, REMOTECTL_CLOSE, &payload[..n], reply);
    }
}

/// Replays one request file's bytes through `service`, exactly as the listener would dispatch
/// it (a payload over the service's request limit is refused with `AEE_EBADSIZE`, as an
/// oversize next2 request would be). Never panics.
pub fn replay_request<S: Syscalls>(service: &ReverseService<'_, S>, bytes: &[u8]) -> ReplayResult {
    let file = match parse_request_file(bytes) {
        Ok(f) => f,
        Err(e) => return ReplayResult::malformed(e),
    };
    let mut reply = vec![0u8; service.policy().limits().max_reverse_request as usize + REPLY_OVERHEAD];
    let handle = if file.module.is_empty() {
        file.handle
    } else {
        match open_module(service, file.module, &mut reply) {
            Ok(h) => h,
            Err(status) => {
                return ReplayResult {
                    status: Some(status),
                    reply_len: 0,
                    error: Some("opening the module through apps_remotectl failed".into()),
                }
            }
        }
    };
    let r = service.dispatch(handle, file.sc, file.payload, &mut reply);
    if !file.module.is_empty() {
        close_module(service, handle, &mut reply);
    }
    ReplayResult { status: Some(r.status), reply_len: r.reply_len, error: None }
}

/// Reads and replays each file in order (one session). An unreadable file is reported as such
/// and the rest still run.
pub fn replay_files<S: Syscalls, P: AsRef<std::path::Path>>(service: &ReverseService<'_, S>, files: &[P]) -> Vec<(String, ReplayResult)> {
    files
        .iter()
        .map(|p| {
            let name = p.as_ref().to_string_lossy().into_owned();
            let r = match std::fs::read(p) {
                Ok(bytes) => replay_request(service, &bytes),
                Err(e) => ReplayResult::malformed(std::format!("cannot read: {e}")),
            };
            (name, r)
        })
        .collect()
}

/// True if every request was answered (a status exists for each file): the CLI's exit 0.
pub fn all_answered(results: &[(String, ReplayResult)]) -> bool {
    results.iter().all(|(_, r)| r.status.is_some())
}

/// Appends `s` as a JSON string literal (quotes, backslash, control characters escaped).
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `{"results": [{"file": ..., "status": N|null, "reply_len": N, "error": "..."|null}, ...]}`.
pub fn results_json(results: &[(String, ReplayResult)]) -> String {
    let mut out = String::from("{\"results\": [");
    for (i, (file, r)) in results.iter().enumerate() {
        if i != 0 {
            out.push_str(", ");
        }
        out.push_str("{\"file\": ");
        json_string(&mut out, file);
        out.push_str(", \"status\": ");
        match r.status {
            Some(s) => {
                let _ = write!(out, "{s}");
            }
            None => out.push_str("null"),
        }
        let _ = write!(out, ", \"reply_len\": {}, \"error\": ", r.reply_len);
        match &r.error {
            Some(e) => json_string(&mut out, e),
            None => out.push_str("null"),
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// One line per file: `FILE: status S (NAME), reply N bytes[: error]`.
pub fn results_text(results: &[(String, ReplayResult)]) -> String {
    let mut out = String::new();
    for (file, r) in results {
        let _ = match r.status {
            Some(s) => write!(
                out,
                "{}: status {} ({}), reply {} bytes",
                file,
                s,
                if s == 0 { "ok" } else { hexrpc_drivers::aee::name(s).unwrap_or("unknown") },
                r.reply_len
            ),
            None => write!(out, "{file}: not sent"),
        };
        if let Some(e) = &r.error {
            let _ = write!(out, ": {e}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_files_parse_and_never_panic() {
        let f = build_request_file("apps_std", 7, Scalars::from_raw(0x0301_0000), &[1, 2, 3, 4]).unwrap();
        let p = parse_request_file(&f).unwrap();
        assert_eq!((p.module, p.handle, p.sc.raw(), p.payload), (&b"apps_std"[..], 7, 0x0301_0000, &[1u8, 2, 3, 4][..]));
        for cut in 0..f.len() - 4 {
            let e = parse_request_file(&f[..cut]).unwrap_err();
            let want = match cut {
                0..=3 => MalformedFile::BadMagic,
                4..=12 => MalformedFile::TruncatedName,
                _ => MalformedFile::TruncatedHeader,
            };
            assert_eq!(e, want, "cut {cut}");
        }
        assert_eq!(parse_request_file(b"HXRX"), Err(MalformedFile::BadMagic));
        assert_eq!(parse_request_file(b"HXRQ\xff"), Err(MalformedFile::TruncatedName));
        assert!(build_request_file(&"x".repeat(256), 0, Scalars::from_raw(0), &[]).is_none());
    }

    #[test]
    fn json_is_escaped() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\n\u{1}\u{7f}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\\u007fé\"");
        let results = vec![
            ("x\".bin".into(), ReplayResult { status: Some(0), reply_len: 12, error: None }),
            ("y".into(), ReplayResult { status: None, reply_len: 0, error: Some("bad".into()) }),
        ];
        assert_eq!(
            results_json(&results),
            "{\"results\": [{\"file\": \"x\\\".bin\", \"status\": 0, \"reply_len\": 12, \"error\": null}, \
             {\"file\": \"y\", \"status\": null, \"reply_len\": 0, \"error\": \"bad\"}]}"
        );
        assert!(!all_answered(&results));
        assert_eq!(results_text(&results[..1]), "x\".bin: status 0 (ok), reply 12 bytes\n");
    }
}
