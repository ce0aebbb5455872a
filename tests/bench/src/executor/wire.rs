//! The stream protocol between the bench and the DSP-side runtime (`tests/hexagon/runtime/hrx_dsp.c`).
//!
//! Every word is a little-endian `u32` (Hexagon and the hosts we run on are little-endian).
//!
//! * **Hello** (shell -> bench, once at start): `HELLO_MAGIC, PROTOCOL, arena bytes, max events`.
//! * **Request** (bench -> shell): header `REQ_MAGIC, op, sc, handle, lib, nbufs, nhandles,
//!   data_len, tag`. The **tag** is fresh for every request (a per-shell random key mixed with a
//!   sequence number) and the shell repeats it in the header of every frame it sends while
//!   serving that request: a frame whose tag differs (a library writing a forged header to the
//!   shell's stdout, or an answer left over from an earlier request) is a protocol break, hence a
//!   DSP restart. A library shares the shell's address space, so it could read the tag; the tag
//!   stops blind forgeries and desynchronised streams, not a library that hunts for it.
//!   * [`OP_INVOKE`]: calls library `lib`'s entry; then `nbufs` buffer lengths (in-buffers then
//!     out-buffers, as in `sc`); then `nhandles` records `fd, offset, file size, passed`; then
//!     `data_len` bytes: every buffer's bytes padded to 8. The buffers' memfds themselves travel
//!     with the header as `SCM_RIGHTS` (the shell's stdin is a UNIX socket), one per handle
//!     whose `passed` is 1, in handle order: the confined shell cannot open the bench's
//!     `/proc/<pid>/fd` (Landlock forbids ptrace-class access to a process outside its domain).
//!   * [`OP_LOAD`]: loads a library; `sc` is the length of the symbol to look up (`entry`), the
//!     data is that symbol padded to 4, then the library's bytes (at most [`MAX_IMAGE`]).
//!   * [`OP_CLOSE`]: unloads library `lib`. [`OP_QUIT`] ends the shell.
//! * **Invoke response** (shell -> bench): `RSP_MAGIC, tag, entry's return value, nout, nevents,
//!   live mappings, out_len, nmarks, marks dropped`; `nout` lengths; the out-buffers padded to 8;
//!   `nevents` records of five words `kind, fd, addr, len, arg`; the invoke's execution counts
//!   (three `u64`: packets, instructions, HVX instructions, as qemu-hexagon counts them); `nmarks`
//!   counts of the same form, at each `HAP_perf_get_time_us` the library made, since the invoke
//!   began ([`ExecCounts`]).
//! * **Load / close response**: `LOD_MAGIC, tag, status (0 or an AEE code), library id, text
//!   length`,
//!   then the loader's reason for a refusal (ASCII, at most [`MAX_TEXT`] bytes) padded to 4.
//!
//! The constants are written twice (here and as `#define`s in the C file); a test compares them.

use crate::LedgerEvent;

/// First word of the runtime's greeting.
pub const HELLO_MAGIC: u32 = 0x4948_584D;
/// First word of a request.
pub const REQ_MAGIC: u32 = 0x5152_5848;
/// First word of a response.
pub const RSP_MAGIC: u32 = 0x5352_5848;
/// First word of a load or close answer.
pub const LOD_MAGIC: u32 = 0x4C52_5848;
/// Protocol version in the greeting.
pub const PROTOCOL: u32 = 4;
/// Request: run a library's entry.
pub const OP_INVOKE: u32 = 1;
/// Request: exit.
pub const OP_QUIT: u32 = 2;
/// Request: load a library.
pub const OP_LOAD: u32 = 3;
/// Request: unload a library.
pub const OP_CLOSE: u32 = 4;
/// Most libraries loaded in one shell (one simulated DSP process) at once: as many as a HAL
/// session holds open (`hexrpc_hal::MAX_LIBRARIES`; the bench does not depend on the HAL, so
/// the figure is repeated here, and a whole-stack test opens that many).
pub const MAX_LIBS: usize = 256;
/// Largest library image the shell accepts.
pub const MAX_IMAGE: usize = 16 << 20;
/// Longest refusal text.
pub const MAX_TEXT: usize = 200;
/// Longest symbol name in a load request.
pub const MAX_SYMBOL: usize = 64;
/// Most buffer arguments per invoke.
pub const MAX_BUFS: usize = 16;
/// Most handle arguments per invoke.
pub const MAX_HANDLES: usize = 16;
/// Longest `/proc` path (including the terminating NUL the runtime adds).
pub const MAX_PATH: usize = 64;
/// The runtime's argument arena: most `data_len` per request.
pub const ARENA: usize = 1 << 20;
/// Most HAP events one invoke reports (more are counted in one [`HapEvent::Dropped`]).
pub const MAX_EVENTS: usize = 128;
/// Counter marks one invoke answer carries at most (two per record of a program of 4,096).
pub const MAX_MARKS: usize = 8192;
/// A library's `fopen`, sent by the shell during an invoke.
pub const RVQ_MAGIC: u32 = 0x5156_5248;
/// The bench's answer to it.
pub const RVA_MAGIC: u32 = 0x4156_5248;
/// Longest path a library's `fopen` sends.
pub const MAX_FOPEN: usize = 256;
/// Bytes of a request header.
pub const HEADER: usize = 36;
/// Exit code of the runtime when a message breaks the protocol.
pub const EXIT_PROTOCOL: i32 = 3;

/// The `#define` names and values the C runtime must carry.
pub const C_DEFINES: &[(&str, u32)] = &[
    ("HRX_HELLO_MAGIC", HELLO_MAGIC),
    ("HRX_REQ_MAGIC", REQ_MAGIC),
    ("HRX_RSP_MAGIC", RSP_MAGIC),
    ("HRX_LOD_MAGIC", LOD_MAGIC),
    ("HRX_RVQ_MAGIC", RVQ_MAGIC),
    ("HRX_RVA_MAGIC", RVA_MAGIC),
    ("HRX_MAX_FOPEN", MAX_FOPEN as u32),
    ("HRX_PROTOCOL", PROTOCOL),
    ("HRX_OP_INVOKE", OP_INVOKE),
    ("HRX_OP_QUIT", OP_QUIT),
    ("HRX_OP_LOAD", OP_LOAD),
    ("HRX_OP_CLOSE", OP_CLOSE),
    ("HRX_MAX_LIBS", MAX_LIBS as u32),
    ("HRX_MAX_IMAGE", MAX_IMAGE as u32),
    ("HRX_MAX_TEXT", MAX_TEXT as u32),
    ("HRX_MAX_BUFS", MAX_BUFS as u32),
    ("HRX_MAX_HANDLES", MAX_HANDLES as u32),
    ("HRX_MAX_PATH", MAX_PATH as u32),
    ("HRX_ARENA", ARENA as u32),
    ("HRX_MAX_EVENTS", MAX_EVENTS as u32),
    ("HRX_MAX_MARKS", MAX_MARKS as u32),
    ("HRX_EV_MAP", 1),
    ("HRX_EV_MAP_FAILED", 2),
    ("HRX_EV_UNMAP", 3),
    ("HRX_EV_POWER", 4),
    ("HRX_EV_DROPPED", 5),
    ("HRX_EXIT_PROTOCOL", EXIT_PROTOCOL as u32),
];

/// One handle argument as the runtime needs it to `HAP_mmap` the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleArg {
    /// The fd number the host passed (what `pra[k].dma.fd` holds).
    pub fd: i32,
    /// `pra[k].dma.offset`.
    pub offset: u32,
    /// Size of the buffer behind the fd (maps beyond it are refused).
    pub size: u32,
    /// Whether the buffer's memfd is passed with the request; false if the bench could not
    /// resolve the fd (the runtime's `HAP_mmap` then refuses it).
    pub passed: bool,
}

/// One `HAP_power_set` request as the DSP shell read it (a DCVS v2 request as the generated entry
/// lays it out; the shell keeps the low 16 bits of the type and option and the low 8 of each
/// corner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PowerSetRecord {
    /// Request type (DCVS v2 = 7).
    pub request_type: u32,
    /// `dcvs_enable`.
    pub dcvs_enable: u32,
    /// `dcvs_option`.
    pub dcvs_option: u32,
    /// `set_latency`.
    pub set_latency: u32,
    /// `latency` in microseconds.
    pub latency: u32,
    /// `set_dcvs_params`.
    pub set_dcvs_params: u32,
    /// `dcvs_params.target_corner`.
    pub target_corner: u32,
    /// `dcvs_params.min_corner`.
    pub min_corner: u32,
    /// `dcvs_params.max_corner`.
    pub max_corner: u32,
    /// `set_sleep_disable`.
    pub set_sleep_disable: u32,
    /// `sleep_disable`.
    pub sleep_disable: u32,
}

/// A HAP call the runtime recorded during one invoke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HapEvent {
    /// A map, a failed map or an unmap: recorded in the bench's ledger as it is.
    Ledger(LedgerEvent),
    /// `HAP_power_set` with this request (accepted, no effect).
    Power(PowerSetRecord),
    /// This many events did not fit the runtime's event table.
    Dropped {
        /// How many.
        count: u32,
    },
    /// A record the bench does not know (kind).
    Unknown(u32),
}

fn map_failed_reason(code: u32) -> &'static str {
    match code {
        1 => "fd is not a handle of this invoke",
        2 => "zero length",
        3 => "range beyond the buffer",
        4 => "file offset not page-aligned",
        5 => "live-mapping table full",
        6 => "setting up the guard page failed",
        7 => "opening the buffer failed",
        8 => "mmap2 failed",
        _ => "unknown reason",
    }
}

impl HapEvent {
    fn decode(w: [u32; 5]) -> HapEvent {
        let [kind, fd, addr, len, arg] = w;
        match kind {
            1 => HapEvent::Ledger(LedgerEvent::Map { fd: fd as i32, addr, len, offset: arg }),
            2 => HapEvent::Ledger(LedgerEvent::MapFailed { fd: fd as i32, len, reason: map_failed_reason(arg) }),
            3 => HapEvent::Ledger(LedgerEvent::Unmap { addr, len, matched: arg == 1 }),
            4 => HapEvent::Power(PowerSetRecord {
                request_type: fd & 0xffff,
                dcvs_option: fd >> 16,
                latency: addr,
                target_corner: len & 0xff,
                min_corner: (len >> 8) & 0xff,
                max_corner: (len >> 16) & 0xff,
                sleep_disable: len >> 24,
                dcvs_enable: arg & 0xff,
                set_latency: (arg >> 8) & 0xff,
                set_dcvs_params: (arg >> 16) & 0xff,
                set_sleep_disable: arg >> 24,
            }),
            5 => HapEvent::Dropped { count: arg },
            k => HapEvent::Unknown(k),
        }
    }
}

/// Why a message could not be built or parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Too many buffers or handles, a path too long, or more data than the arena holds.
    TooLarge,
    /// A response that does not follow the protocol.
    Malformed,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WireError::TooLarge => "too many buffers or handles, a path too long, or more data than the arena holds",
            WireError::Malformed => "a response that does not follow the executor protocol",
        })
    }
}

impl std::error::Error for WireError {}

fn pad(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

fn push(out: &mut Vec<u8>, w: u32) {
    out.extend_from_slice(&w.to_le_bytes());
}

/// Encodes one invoke request of library `lib`.
pub fn encode_request(tag: u32, lib: u32, sc: u32, handle: u32, bufs: &[&[u8]], handles: &[HandleArg]) -> Result<Vec<u8>, WireError> {
    if bufs.len() > MAX_BUFS || handles.len() > MAX_HANDLES {
        return Err(WireError::TooLarge);
    }
    let data_len: usize = bufs.iter().map(|b| pad(b.len(), 8)).sum::<usize>();
    if data_len > ARENA {
        return Err(WireError::TooLarge);
    }
    let mut out = Vec::with_capacity(HEADER + 4 * bufs.len() + 16 * handles.len() + data_len);
    for w in [REQ_MAGIC, OP_INVOKE, sc, handle, lib, bufs.len() as u32, handles.len() as u32, data_len as u32, tag] {
        push(&mut out, w);
    }
    for b in bufs {
        push(&mut out, b.len() as u32);
    }
    for h in handles {
        for w in [h.fd as u32, h.offset, h.size, u32::from(h.passed)] {
            push(&mut out, w);
        }
    }
    for b in bufs {
        out.extend_from_slice(b);
        out.resize(out.len() + pad(b.len(), 8) - b.len(), 0);
    }
    Ok(out)
}

/// The quit request.
pub fn encode_quit() -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    for w in [REQ_MAGIC, OP_QUIT, 0, 0, 0, 0, 0, 0, 0] {
        push(&mut out, w);
    }
    out
}

/// A load request: look up `symbol` in `image` once it is loaded.
pub fn encode_load(tag: u32, symbol: &str, image: &[u8]) -> Result<Vec<u8>, WireError> {
    if symbol.is_empty() || symbol.len() > MAX_SYMBOL || image.len() > MAX_IMAGE {
        return Err(WireError::TooLarge);
    }
    let data_len = pad(symbol.len(), 4) + image.len();
    let mut out = Vec::with_capacity(HEADER + data_len);
    for w in [REQ_MAGIC, OP_LOAD, symbol.len() as u32, 0, 0, 0, 0, data_len as u32, tag] {
        push(&mut out, w);
    }
    out.extend_from_slice(symbol.as_bytes());
    out.resize(out.len() + pad(symbol.len(), 4) - symbol.len(), 0);
    out.extend_from_slice(image);
    Ok(out)
}

/// A close request for library `lib`.
pub fn encode_close(tag: u32, lib: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    for w in [REQ_MAGIC, OP_CLOSE, 0, 0, lib, 0, 0, 0, tag] {
        push(&mut out, w);
    }
    out
}

/// The shell's answer to a load or close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadAnswer {
    /// 0, or the AEE code of the refusal.
    pub status: i32,
    /// The library id (load) or the id that was closed.
    pub lib: u32,
    /// The loader's reason for a refusal.
    pub text: String,
}

/// Any message from the shell after its greeting, with the tag its header carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tagged {
    /// The tag of the request the shell says it is serving.
    pub tag: u32,
    /// The message.
    pub message: Message,
}

/// Any message from the shell after its greeting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The answer to an invoke.
    Invoke(Response),
    /// The answer to a load or a close.
    Load(LoadAnswer),
    /// A library's `fopen` (path and mode, without NUL), to be answered with
    /// [`encode_fopen_answer`] before the invoke goes on.
    Fopen {
        /// The path.
        path: Vec<u8>,
        /// The mode.
        mode: Vec<u8>,
    },
}

/// The answer to a [`Message::Fopen`]: 0 when the host's file service opened the file, else its
/// AEE code.
pub fn encode_fopen_answer(status: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    push(&mut out, RVA_MAGIC);
    push(&mut out, status as u32);
    out
}

/// Reads one message (either kind) from the shell, with its tag.
pub fn read_tagged<R: std::io::Read>(r: &mut R) -> Result<Tagged, ReadError> {
    let mut head = [0u8; 8];
    r.read_exact(&mut head).map_err(ReadError::Io)?;
    let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let tag = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let message = match magic {
        RSP_MAGIC => read_response_body(r).map(Message::Invoke),
        LOD_MAGIC => {
            let mut hdr = [0u8; 12];
            r.read_exact(&mut hdr).map_err(ReadError::Io)?;
            let w = |i: usize| u32::from_le_bytes([hdr[4 * i], hdr[4 * i + 1], hdr[4 * i + 2], hdr[4 * i + 3]]);
            let (status, lib, n) = (w(0) as i32, w(1), w(2) as usize);
            if n > MAX_TEXT {
                return Err(ReadError::Wire(WireError::Malformed));
            }
            let mut text = vec![0u8; pad(n, 4)];
            r.read_exact(&mut text).map_err(ReadError::Io)?;
            text.truncate(n);
            Ok(Message::Load(LoadAnswer { status, lib, text: String::from_utf8_lossy(&text).into_owned() }))
        }
        RVQ_MAGIC => {
            let mut hdr = [0u8; 8];
            r.read_exact(&mut hdr).map_err(ReadError::Io)?;
            let (plen, mlen) = (
                u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize,
                u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize,
            );
            if plen >= MAX_FOPEN || mlen > 8 {
                return Err(ReadError::Wire(WireError::Malformed));
            }
            let mut path = vec![0u8; pad(plen, 4)];
            r.read_exact(&mut path).map_err(ReadError::Io)?;
            path.truncate(plen);
            let mut mode = vec![0u8; pad(mlen, 4)];
            r.read_exact(&mut mode).map_err(ReadError::Io)?;
            mode.truncate(mlen);
            Ok(Message::Fopen { path, mode })
        }
        _ => Err(ReadError::Wire(WireError::Malformed)),
    }?;
    Ok(Tagged { tag, message })
}

/// Reads one message (either kind) from the shell, whatever its tag.
pub fn read_message<R: std::io::Read>(r: &mut R) -> Result<Message, ReadError> {
    read_tagged(r).map(|t| t.message)
}

/// What qemu-hexagon executed: packets, instructions, and the instructions that are HVX (its
/// own counters, read by the bench shell; emulated counts, not DSP cycles). Exactly repeatable
/// run to run for the same code on the same inputs' control flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExecCounts {
    /// Packets executed.
    pub packets: u64,
    /// Instructions executed.
    pub instructions: u64,
    /// HVX instructions among them.
    pub hvx: u64,
}

impl ExecCounts {
    /// `self - earlier` per counter (saturating: the counts only grow within an invoke).
    pub fn since(self, earlier: ExecCounts) -> ExecCounts {
        ExecCounts {
            packets: self.packets.saturating_sub(earlier.packets),
            instructions: self.instructions.saturating_sub(earlier.instructions),
            hvx: self.hvx.saturating_sub(earlier.hvx),
        }
    }

    /// The sum of two counts.
    pub fn plus(self, other: ExecCounts) -> ExecCounts {
        ExecCounts {
            packets: self.packets + other.packets,
            instructions: self.instructions + other.instructions,
            hvx: self.hvx + other.hvx,
        }
    }

    /// The share of instructions that are HVX (0 when none ran).
    pub fn hvx_share(&self) -> f64 {
        if self.instructions == 0 {
            0.0
        } else {
            self.hvx as f64 / self.instructions as f64
        }
    }
}

/// A decoded response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// What `entry` returned.
    pub retval: i32,
    /// The out-buffers after the call.
    pub outs: Vec<Vec<u8>>,
    /// HAP events of the call.
    pub events: Vec<HapEvent>,
    /// Mappings still live in the runtime after the call (leaks accumulate here).
    pub live_mappings: u32,
    /// What the invoke executed, entry call to return.
    pub counts: ExecCounts,
    /// The counts at each of the library's timer reads, since the invoke began.
    pub marks: Vec<ExecCounts>,
    /// Timer reads past [`MAX_MARKS`], not marked.
    pub marks_dropped: u32,
}

/// Reads one response with `read_exact` (any `std::io::Read`); limits are checked before
/// allocating.
pub fn read_response<R: std::io::Read>(r: &mut R) -> Result<Response, ReadError> {
    match read_message(r)? {
        Message::Invoke(resp) => Ok(resp),
        Message::Load(_) | Message::Fopen { .. } => Err(ReadError::Wire(WireError::Malformed)),
    }
}

fn read_response_body<R: std::io::Read>(r: &mut R) -> Result<Response, ReadError> {
    let mut hdr = [0u8; 28];
    r.read_exact(&mut hdr).map_err(ReadError::Io)?;
    let w = |i: usize| u32::from_le_bytes([hdr[4 * i], hdr[4 * i + 1], hdr[4 * i + 2], hdr[4 * i + 3]]);
    let (retval, nout, nevents, live, out_len) = (w(0) as i32, w(1) as usize, w(2) as usize, w(3), w(4) as usize);
    let (nmarks, marks_dropped) = (w(5) as usize, w(6));
    if nout > MAX_BUFS || nevents > MAX_EVENTS + 1 || out_len > ARENA || nmarks > MAX_MARKS {
        return Err(ReadError::Wire(WireError::Malformed));
    }
    let mut lens = vec![0u8; 4 * nout];
    r.read_exact(&mut lens).map_err(ReadError::Io)?;
    let lens: Vec<usize> = lens.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize).collect();
    if lens.iter().map(|&l| pad(l, 8)).sum::<usize>() != out_len {
        return Err(ReadError::Wire(WireError::Malformed));
    }
    let mut outs = Vec::with_capacity(nout);
    for l in lens {
        let mut b = vec![0u8; pad(l, 8)];
        r.read_exact(&mut b).map_err(ReadError::Io)?;
        b.truncate(l);
        outs.push(b);
    }
    let mut ev = vec![0u8; 20 * nevents];
    r.read_exact(&mut ev).map_err(ReadError::Io)?;
    let events = ev
        .chunks_exact(20)
        .map(|c| {
            let mut w = [0u32; 5];
            for (i, x) in w.iter_mut().enumerate() {
                *x = u32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]);
            }
            HapEvent::decode(w)
        })
        .collect();
    let mut c = vec![0u8; 24 * (nmarks + 1)];
    r.read_exact(&mut c).map_err(ReadError::Io)?;
    let mut counts = c.chunks_exact(24).map(|c| {
        let q = |i: usize| u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        ExecCounts { packets: q(0), instructions: q(1), hvx: q(2) }
    });
    let total = counts.next().unwrap_or_default();
    Ok(Response { retval, outs, events, live_mappings: live, counts: total, marks: counts.collect(), marks_dropped })
}

/// Why reading a response failed.
#[derive(Debug)]
pub enum ReadError {
    /// The pipe failed or ended (the runtime died).
    Io(std::io::Error),
    /// The bytes do not follow the protocol.
    Wire(WireError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "executor pipe: {e}"),
            ReadError::Wire(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_runtime_carries_the_same_constants() {
        let c = include_str!("../../../hexagon/runtime/hrx_dsp.c");
        for (name, value) in C_DEFINES {
            let line = c.lines().find(|l| l.starts_with(&format!("#define {name} "))).unwrap_or_else(|| panic!("{name} missing"));
            let text = line.split_whitespace().nth(2).unwrap().trim_end_matches('u');
            let parsed =
                if let Some(hex) = text.strip_prefix("0x") { u32::from_str_radix(hex, 16).unwrap() } else { text.parse().unwrap() };
            assert_eq!(parsed, *value, "{name}");
        }
    }

    #[test]
    fn request_layout_and_response_roundtrip() {
        let h = HandleArg { fd: 7, offset: 0, size: 4096, passed: true };
        let m = encode_request(0xA5, 5, 0x0202_0101, 0x30, &[b"abc", b"12345678"], &[h]).unwrap();
        let w = |i: usize| u32::from_le_bytes(m[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!((w(0), w(1), w(2), w(3), w(4), w(5), w(6), w(7)), (REQ_MAGIC, OP_INVOKE, 0x0202_0101, 0x30, 5, 2, 1, 8 + 8));
        assert_eq!(w(8), 0xA5);
        assert_eq!((w(9), w(10)), (3, 8));
        assert_eq!((w(11), w(12), w(13), w(14)), (7, 0, 4096, 1));
        assert_eq!(&m[60..63], b"abc");
        assert_eq!(m.len(), 60 + 16);
        let many = vec![HandleArg { fd: 7, offset: 0, size: 1, passed: false }; MAX_HANDLES + 1];
        assert_eq!(encode_request(1, 1, 0, 0, &[], &many), Err(WireError::TooLarge));
        let l = encode_load(9, "entry", b"\x7fELF").unwrap();
        assert_eq!(l.len(), HEADER + 8 + 4);
        assert_eq!(&l[HEADER..HEADER + 5], b"entry");
        assert_eq!(encode_load(9, "", b""), Err(WireError::TooLarge));
        let mut ans = Vec::new();
        for x in [LOD_MAGIC, 77, 0x42, 0, 5] {
            push(&mut ans, x);
        }
        ans.extend_from_slice(b"nope\0\0\0\0");
        let t = read_tagged(&mut &ans[..]).unwrap();
        assert_eq!(t.tag, 77);
        assert_eq!(t.message, Message::Load(LoadAnswer { status: 0x42, lib: 0, text: "nope\0".into() }));

        let mut rsp = Vec::new();
        for x in [RSP_MAGIC, 3, 0, 1, 2, 1, 8, 2, 0] {
            push(&mut rsp, x);
        }
        push(&mut rsp, 5);
        rsp.extend_from_slice(b"hello\0\0\0");
        for x in [1u32, 7, 0x1000, 4096, 0, 3, 0, 0x1040, 64, 0] {
            push(&mut rsp, x);
        }
        // The invoke's counts, then two marks.
        for q in [1u64 << 33, 900, 12, 5, 6, 0, 100, 150, 10] {
            rsp.extend_from_slice(&q.to_le_bytes());
        }
        let r = read_response(&mut &rsp[..]).unwrap();
        assert_eq!(r.counts, ExecCounts { packets: 1 << 33, instructions: 900, hvx: 12 });
        assert_eq!(
            r.marks,
            vec![ExecCounts { packets: 5, instructions: 6, hvx: 0 }, ExecCounts { packets: 100, instructions: 150, hvx: 10 }]
        );
        assert_eq!(r.marks[1].since(r.marks[0]), ExecCounts { packets: 95, instructions: 144, hvx: 10 });
        // More marks than an answer may carry: malformed, before anything is allocated for them.
        let mut many = rsp.clone();
        many[28..32].copy_from_slice(&(MAX_MARKS as u32 + 1).to_le_bytes());
        assert!(matches!(read_response(&mut &many[..]), Err(ReadError::Wire(WireError::Malformed))));
        assert_eq!(r.outs, vec![b"hello".to_vec()]);
        assert_eq!(
            r.events,
            vec![
                HapEvent::Ledger(LedgerEvent::Map { fd: 7, addr: 0x1000, len: 4096, offset: 0 }),
                HapEvent::Ledger(LedgerEvent::Unmap { addr: 0x1040, len: 64, matched: false })
            ]
        );
        assert_eq!(r.live_mappings, 1);
        rsp[0] ^= 1;
        assert!(matches!(read_response(&mut &rsp[..]), Err(ReadError::Wire(WireError::Malformed))));
    }
}
