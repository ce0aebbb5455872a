//! Offline replay of recorded or hand-made reverse requests, for security review: the request
//! file format, and the replay behind `hexrpc reverse-replay`.
//!
//! A request file is the 4 bytes `HXRQ`; a u8 length and that many bytes of a module name
//! (empty: use the raw handle that follows); a u32 LE handle (used only when the name is empty;
//! 0 is apps_remotectl); a u32 LE scalars word; then the request payload exactly as next2
//! delivers it. With a module name the module is first opened through the ordinary
//! apps_remotectl open path and the request is sent to the handle that returned. Requests of
//! several files run against one session in the order given ([`ReplaySession`]): a module opened
//! by name stays open for the later files (one per name), so a sequence (open, read, close) can
//! be replayed (FILE handles start at 100, and a FILE handle belongs to the module it was opened
//! through); at the end the modules are closed, which closes their files.

use std::fmt::Write as _;

use hexrpc_drivers::listener::{REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::{Scalars, Syscalls};

use hexrpc_runtime::reverse::wire::{pack_request, reply_output};
use hexrpc_runtime::reverse::{RequestError, ReverseService, REPLY_OVERHEAD};

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

/// The text after the next `"key"` and its colon (whitespace allowed around it), and where the
/// key starts.
fn value_of<'t>(text: &'t str, key: &str) -> Option<(usize, &'t str)> {
    let quoted = format!("\"{key}\"");
    let mut from = 0;
    while let Some(at) = text[from..].find(&quoted) {
        let start = from + at;
        let rest = text[start + quoted.len()..].trim_start();
        if let Some(v) = rest.strip_prefix(':') {
            return Some((start, v.trim_start()));
        }
        from = start + quoted.len();
    }
    None
}

/// The string value right at the start of `v` (our own names: no escapes), and what follows it.
fn string_at(v: &str) -> Option<(&str, &str)> {
    let v = v.strip_prefix('"')?;
    let end = v.find('"')?;
    let s = &v[..end];
    (!s.contains('\\')).then_some((s, &v[end + 1..]))
}

/// The library images a capture's `index.json` lists: (name the DSP opened, file relative to
/// the capture directory). Empty for an index without images; `None` when malformed.
pub fn recorded_images(index: &str) -> Option<Vec<(String, String)>> {
    let Some((_, list)) = value_of(index, "images") else { return Some(Vec::new()) };
    let list = &list[..list.find(']')?];
    let mut out = Vec::new();
    let mut rest = list;
    while let Some((_, v)) = value_of(rest, "name") {
        let (name, after) = string_at(v)?;
        let (_, f) = value_of(after, "file")?;
        let (file, after) = string_at(f)?;
        // Only our own layout: images/NAME, no way out of the capture directory.
        if !file.starts_with("images/") || file.contains("..") || file[7..].contains('/') {
            return None;
        }
        out.push((name.to_string(), file.to_string()));
        rest = after;
    }
    Some(out)
}

/// The statuses a capture's `index.json` (written by `hexrpc capture`) recorded, by request
/// file name; `None` when the text is not such an index.
pub fn recorded_statuses(index: &str) -> Option<Vec<(String, i32)>> {
    let body = index.trim_start().strip_prefix('{')?;
    // The requests only: the images list after them names files too.
    let mut rest = match value_of(body, "images") {
        Some((at, _)) => &body[..at],
        None => body,
    };
    let mut out = Vec::new();
    while let Some((_, v)) = value_of(rest, "file") {
        let v = v.strip_prefix('"')?;
        let end = v.find('"')?;
        let name = v[..end].to_string();
        let after = &v[end + 1..];
        let (st_at, st) = value_of(after, "status")?;
        // The status belongs to this entry: no other entry may start before it.
        if value_of(&after[..st_at], "file").is_some() {
            return None;
        }
        let len = st.find(|c: char| !(c == '-' || c.is_ascii_digit())).unwrap_or(st.len());
        out.push((name, st[..len].parse().ok()?));
        rest = &st[len..];
    }
    Some(out)
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
        ReplayResult { status: None, reply_len: 0, error: Some(format!("{e}")) }
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

/// Several request files replayed against one session: the modules they name are opened once
/// and stay open until the session is dropped (which closes them, and so their files).
pub struct ReplaySession<'s, 'img, S: Syscalls> {
    service: &'s ReverseService<'img, S>,
    modules: Vec<(Vec<u8>, u32)>,
    reply: Vec<u8>,
}

impl<'s, 'img, S: Syscalls> ReplaySession<'s, 'img, S> {
    /// A replay session on `service`.
    pub fn new(service: &'s ReverseService<'img, S>) -> Self {
        let reply = vec![0u8; service.policy().limits().max_reverse_request as usize + REPLY_OVERHEAD];
        ReplaySession { service, modules: Vec::new(), reply }
    }

    /// Replays one request file's bytes through the service, exactly as the listener would
    /// dispatch it (a payload over the service's request limit is refused with `AEE_EBADSIZE`,
    /// as an oversize next2 request would be). Never panics.
    pub fn replay(&mut self, bytes: &[u8]) -> ReplayResult {
        let file = match parse_request_file(bytes) {
            Ok(f) => f,
            Err(e) => return ReplayResult::malformed(e),
        };
        let handle = if file.module.is_empty() {
            file.handle
        } else if let Some(&(_, h)) = self.modules.iter().find(|(n, _)| n.as_slice() == file.module) {
            h
        } else {
            match open_module(self.service, file.module, &mut self.reply) {
                Ok(h) => {
                    self.modules.push((file.module.to_vec(), h));
                    h
                }
                Err(status) => {
                    return ReplayResult {
                        status: Some(status),
                        reply_len: 0,
                        error: Some("opening the module through apps_remotectl failed".into()),
                    }
                }
            }
        };
        let r = self.service.dispatch(handle, file.sc, file.payload, &mut self.reply);
        ReplayResult { status: Some(r.status), reply_len: r.reply_len, error: None }
    }
}

impl<S: Syscalls> Drop for ReplaySession<'_, '_, S> {
    fn drop(&mut self) {
        for (_, h) in core::mem::take(&mut self.modules) {
            close_module(self.service, h, &mut self.reply);
        }
    }
}

/// Replays each file in order against one session (a module opened by one file stays open for
/// the next): `read` fetches a file's bytes (the CLI reads with a size bound and only regular
/// files); a file it cannot read is reported as such and the rest still run.
pub fn replay_files<S: Syscalls, P: AsRef<std::path::Path>>(
    service: &ReverseService<'_, S>,
    files: &[P],
    mut read: impl FnMut(&std::path::Path) -> Result<Vec<u8>, String>,
) -> Vec<(String, ReplayResult)> {
    let mut session = ReplaySession::new(service);
    files
        .iter()
        .map(|p| {
            let name = p.as_ref().to_string_lossy().into_owned();
            let r = match read(p.as_ref()) {
                Ok(bytes) => session.replay(&bytes),
                Err(e) => ReplayResult::malformed(format!("cannot read: {e}")),
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

/// The name of a reverse-RPC status: "ok" for 0, the AEE code's name, else "unknown".
pub fn status_name(s: i32) -> &'static str {
    if s == 0 {
        "ok"
    } else {
        hexrpc_drivers::aee::name(s).unwrap_or("unknown")
    }
}

/// One line per file: `FILE: status S (NAME), reply N bytes[: error]`.
pub fn results_text(results: &[(String, ReplayResult)]) -> String {
    let mut out = String::new();
    for (file, r) in results {
        let _ = match r.status {
            Some(s) => write!(out, "{}: status {} ({}), reply {} bytes", file, s, status_name(s), r.reply_len),
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
    fn capture_indexes_parse() {
        let idx = "{\"requests\": [{\"file\": \"0001-apps_remotectl-m0.hxrq\", \"module\": \"apps_remotectl\", \"handle\": 0, \"sc\": 33685760, \"status\": 0}, \
                   {\"file\": \"0002-apps_std-m3.hxrq\", \"module\": \"apps_std\", \"handle\": 5, \"sc\": 1, \"status\": -43}], \"dropped\": 0}\n";
        assert_eq!(
            recorded_statuses(idx),
            Some(vec![("0001-apps_remotectl-m0.hxrq".to_string(), 0), ("0002-apps_std-m3.hxrq".to_string(), -43)])
        );
        assert_eq!(recorded_statuses("{\"requests\": [], \"dropped\": 0}"), Some(vec![]));
        // As `hexrpc capture` writes it (no space after the colons).
        assert_eq!(
            recorded_statuses("{\"requests\": [{\"file\":\"0001-x.hxrq\",\"module\":\"apps_std\",\"status\":79}], \"dropped\": 0}"),
            Some(vec![("0001-x.hxrq".to_string(), 79)])
        );
        assert_eq!(recorded_statuses("not json"), None);
        // With the images a capture kept: the statuses are the requests'.
        let with_images = "{\"requests\": [{\"file\":\"0001-x.hxrq\",\"status\":0}], \"images\": [{\"name\":\"lib-1.so\",\"file\":\"images/01-lib-1.so\"}], \"dropped\": 0}";
        assert_eq!(recorded_statuses(with_images), Some(vec![("0001-x.hxrq".to_string(), 0)]));
        assert_eq!(recorded_images(with_images), Some(vec![("lib-1.so".to_string(), "images/01-lib-1.so".to_string())]));
        assert_eq!(recorded_images(idx), Some(vec![]));
        assert_eq!(recorded_images("{\"images\": [{\"name\":\"a\",\"file\":\"../etc/passwd\"}]}"), None);
        assert_eq!(recorded_images("{\"images\": [{\"name\":\"a\",\"file\":\"images/x/y\"}]}"), None);
        assert_eq!(recorded_statuses("{\"requests\": [{\"file\": \"a\", \"file\": \"b\", \"status\": 1}]}"), None);
        assert_eq!(recorded_statuses("{\"requests\": [{\"file\": \"a\", \"status\": x}]}"), None);
    }

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

    fn payload(ins: &[&[u8]], outs: &[u32]) -> Vec<u8> {
        let mut buf = vec![0u8; 64 + ins.iter().map(|b| b.len() + 16).sum::<usize>() + outs.len() * 4];
        let n = pack_request(ins, outs, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn fopen_payload(name: &[u8], mode: &[u8]) -> Vec<u8> {
        let z = |s: &[u8]| [s, &[0][..]].concat();
        let (env, delim, name, mode) = (z(b"ADSP_LIBRARY_PATH"), z(b";"), z(name), z(mode));
        let prim = words(&[env.len() as u32, delim.len() as u32, name.len() as u32, mode.len() as u32]);
        payload(&[&prim, &env, &delim, &name, &mode], &[4])
    }

    /// Request files answered through the service's ordinary paths, in one session (the FILE
    /// opened by the first file is read and closed by later ones); truncated or hostile files are
    /// reported, never a panic; the file outside the allowlist is refused.
    #[test]
    fn request_files_replay_through_the_ordinary_paths() {
        use hexrpc_drivers::aee::*;
        use hexrpc_drivers::{Fd, RustixSys};
        use hexrpc_runtime::reverse::FilePolicy;
        const FOPEN_WITH_ENV: u32 = 0x1305_0100;
        const FCLOSE: u32 = 0x0301_0000;
        const FREAD: u32 = 0x0401_0200;

        let root = std::env::temp_dir().join(format!("hexrpc-replay-{}", std::process::id()));
        let (allowed, secret) = (root.join("allowed"), root.join("secret"));
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(allowed.join("lib.so"), vec![5u8; 4096]).unwrap();
        let canary = secret.join("canary");
        std::fs::write(&canary, b"CANARY").unwrap();
        let limits = hexrpc_bsp::Limits { max_reverse_request: 64 << 10, max_reverse_file_bytes: 1 << 20, ..hexrpc_bsp::BENCH.limits };
        let policy = FilePolicy::new(&[allowed.to_str().unwrap()], limits).unwrap();
        let svc = ReverseService::new(RustixSys, Fd(-1), policy);

        let sc = Scalars::from_raw;
        let canary_name = canary.to_str().unwrap().as_bytes();
        let files: Vec<(&str, Vec<u8>)> = vec![
            ("open.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(b"lib.so", b"r")).unwrap()),
            ("read.hxrq", build_request_file("apps_std", 0, sc(FREAD), &payload(&[&words(&[100, 8])], &[8, 8])).unwrap()),
            ("canary.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(canary_name, b"r")).unwrap()),
            ("write.hxrq", build_request_file("apps_std", 0, sc(FOPEN_WITH_ENV), &fopen_payload(b"lib.so", b"w")).unwrap()),
            ("nomod.hxrq", build_request_file("evil_mod", 0, sc(FCLOSE), &[]).unwrap()),
            ("raw.hxrq", build_request_file("", 0x1234, sc(FCLOSE), &payload(&[&words(&[100])], &[])).unwrap()),
            ("huge.hxrq", build_request_file("apps_std", 0, sc(FREAD), &vec![0u8; (64 << 10) + 1]).unwrap()),
            ("close.hxrq", build_request_file("apps_std", 0, sc(FCLOSE), &payload(&[&words(&[100])], &[])).unwrap()),
            ("bad_magic.hxrq", b"NOPE".to_vec()),
        ];
        // Every truncation of a valid file is answered or reported, never a panic.
        for cut in 0..files[0].1.len() {
            let r = ReplaySession::new(&svc).replay(&files[0].1[..cut]);
            assert!(r.status.is_some() || r.error.is_some());
            if let Some(s) = r.status {
                assert_ne!(s, 0, "cut {cut}");
            }
        }
        let mut paths: Vec<std::path::PathBuf> = files.iter().map(|(n, _)| root.join(n)).collect();
        paths.push(root.join("missing.hxrq"));
        let read = |p: &std::path::Path| match files.iter().find(|(n, _)| root.join(n) == p) {
            Some((_, bytes)) => Ok(bytes.clone()),
            None => Err("not found".to_string()),
        };
        let results = replay_files(&svc, &paths, read);
        let statuses: Vec<Option<i32>> = results.iter().map(|(_, r)| r.status).collect();
        assert_eq!(
            statuses,
            vec![
                Some(0),
                Some(0),
                Some(AEE_ENOTALLOWED),
                Some(AEE_EREADONLY),
                Some(AEE_ENOSUCHMOD),
                Some(AEE_ENOSUCHMOD),
                Some(AEE_EBADSIZE),
                Some(0),
                None,
                None
            ]
        );
        assert_eq!(results[0].1.reply_len, 12, "4-byte length, padding, 4-byte FILE");
        assert_eq!(results[1].1.reply_len, 32);
        assert!(results[8].1.error.as_deref().unwrap().contains("magic"));
        assert!(results[9].1.error.as_deref().unwrap().starts_with("cannot read"));
        assert!(!all_answered(&results));
        assert!(all_answered(&results[..8]));
        let json = results_json(&results);
        assert!(json.starts_with("{\"results\": [{\"file\": \""), "{json}");
        assert!(
            json.contains("\"status\": 62, \"reply_len\": 0, \"error\": \"opening the module through apps_remotectl failed\""),
            "{json}"
        );
        assert!(results_text(&results).contains("status 43 (AEE_ENOTALLOWED)"));
        assert_eq!(svc.session_counts().modules, 0, "replay closes the modules it opened");
        assert_eq!(svc.session_counts().files, 0);
        assert_eq!(std::fs::read(&canary).unwrap(), b"CANARY");
        let _ = std::fs::remove_dir_all(&root);
    }
}
