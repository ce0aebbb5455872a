//! Streaming throughput of the reverse file service against a plain memcpy, for `hexrpc bench`
//! (`reverse_stream_mib_s`, `memcpy_mib_s`) and `cargo bench -p hexrpc-scenarios --bench reverse`.
//! A measurement harness: it lives beside the simulator, never in a crate a device service links.

use std::hint::black_box;
use std::time::Instant;

use hexrpc_bsp::Limits;
use hexrpc_drivers::listener::REMOTECTL_OPEN;
use hexrpc_drivers::{Fd, Scalars, Syscalls};

use hexrpc_runtime::reverse::wire::{pack_request, reply_output};
use hexrpc_runtime::reverse::{FilePolicy, ReverseService, REPLY_OVERHEAD};

/// Both figures of one run, in MiB/s (best round of each).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamThroughput {
    /// A library image streamed through apps_std fread requests via the dispatcher
    /// (request parsing, policy, handle table, reply packing included; no kernel crossing).
    pub reverse_stream_mib_s: f64,
    /// A plain copy of the same bytes in the same pattern: chunk by chunk, each chunk into one
    /// reused buffer of the chunk's size (as each fread lands in the one reply buffer).
    pub memcpy_mib_s: f64,
}

impl StreamThroughput {
    /// `reverse_stream_mib_s / memcpy_mib_s`.
    pub fn ratio(&self) -> f64 {
        self.reverse_stream_mib_s / self.memcpy_mib_s
    }
}

/// Why the throughput run failed (a request was refused: a bug, not a measurement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThroughputError {
    /// Which step.
    pub step: &'static str,
    /// The status it got.
    pub status: i32,
}

impl core::fmt::Display for ThroughputError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "throughput run: {} answered status {:#x}", self.step, self.status)
    }
}

impl std::error::Error for ThroughputError {}

fn mib_s(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / secs.max(1e-9)
}

/// A service with one registered image open through apps_std, ready to stream it with fread
/// requests of a fixed size through the dispatcher.
pub struct StreamBench<'img, S: Syscalls> {
    service: ReverseService<'img, S>,
    image: &'img [u8],
    std_handle: u32,
    chunk: u32,
    reply: Vec<u8>,
    seek: ([u8; 32], usize),
    read: ([u8; 32], usize),
}

impl<'img, S: Syscalls> StreamBench<'img, S> {
    /// Registers `image`, opens apps_std and the image through the ordinary request path.
    pub fn new(sys: S, image: &'img [u8], chunk: u32) -> Result<Self, ThroughputError> {
        let limits = Limits {
            max_shell_len: 0,
            max_alloc_len: 0,
            max_reverse_request: chunk.max(4096),
            max_reverse_file_bytes: u64::MAX,
            max_reverse_handles: 4,
            max_dsp_map_bytes: 0,
            kept_numbers: 0,
            munmap_fd_drain: 0,
            calls_in_flight: 0,
            lease_iova: 0,
            perf_records: 0,
        };
        let policy = FilePolicy::new(&[], limits).map_err(|_| ThroughputError { step: "policy", status: -1 })?;
        let service = ReverseService::new(sys, Fd(-1), policy);
        service.register_image("bench_image", image).map_err(|_| ThroughputError { step: "register", status: -1 })?;
        let mut reply = vec![0u8; chunk as usize + REPLY_OVERHEAD];
        let mut payload = [0u8; 256];
        let check = |step: &'static str, status: i32| if status == 0 { Ok(()) } else { Err(ThroughputError { step, status }) };

        // apps_remotectl open "apps_std".
        let mut prim = [0u8; 8];
        prim[..4].copy_from_slice(&9u32.to_le_bytes());
        let n = pack_request(&[&prim, b"apps_std\0"], &[8, 0], &mut payload).unwrap_or(0);
        let r = service.dispatch(0, REMOTECTL_OPEN, &payload[..n], &mut reply);
        check("module open", r.status)?;
        let out = reply_output(&reply[..r.reply_len], &[8, 0], 0).unwrap_or(&[0; 4]);
        let std_handle = u32::from_le_bytes([out[0], out[1], out[2], out[3]]);

        // fopen_with_env("ADSP_LIBRARY_PATH", ";", "bench_image", "r").
        let mut prim = [0u8; 16];
        for (i, len) in [18u32, 2, 12, 2].into_iter().enumerate() {
            prim[i * 4..i * 4 + 4].copy_from_slice(&len.to_le_bytes());
        }
        let n = pack_request(&[&prim, b"ADSP_LIBRARY_PATH\0", b";\0", b"bench_image\0", b"r\0"], &[4], &mut payload).unwrap_or(0);
        let r = service.dispatch(std_handle, Scalars::from_raw(0x1305_0100), &payload[..n], &mut reply);
        check("fopen_with_env", r.status)?;
        let out = reply_output(&reply[..r.reply_len], &[4], 0).unwrap_or(&[0; 4]);
        let file = [out[0], out[1], out[2], out[3]];

        let mut seek_in = [0u8; 12];
        seek_in[..4].copy_from_slice(&file);
        let mut seek = ([0u8; 32], 0);
        seek.1 = pack_request(&[&seek_in], &[], &mut seek.0).unwrap_or(0);
        let mut read_in = [0u8; 8];
        read_in[..4].copy_from_slice(&file);
        read_in[4..].copy_from_slice(&chunk.to_le_bytes());
        let mut read = ([0u8; 32], 0);
        read.1 = pack_request(&[&read_in], &[8, chunk], &mut read.0).unwrap_or(0);
        Ok(StreamBench { service, image, std_handle, chunk, reply, seek, read })
    }

    /// Seeks to 0 and reads the whole image with fread requests; returns the bytes served. With
    /// `verify`, each chunk is compared with the image.
    pub fn stream(&mut self, verify: bool) -> Result<usize, ThroughputError> {
        let r = self.service.dispatch(self.std_handle, Scalars::from_raw(0x0901_0000), &self.seek.0[..self.seek.1], &mut self.reply);
        if r.status != 0 {
            return Err(ThroughputError { step: "fseek", status: r.status });
        }
        let mut total = 0usize;
        loop {
            let r = self.service.dispatch(self.std_handle, Scalars::from_raw(0x0401_0200), &self.read.0[..self.read.1], &mut self.reply);
            if r.status != 0 {
                return Err(ThroughputError { step: "fread", status: r.status });
            }
            let got = u32::from_le_bytes([self.reply[8], self.reply[9], self.reply[10], self.reply[11]]) as usize;
            if verify {
                let data = reply_output(&self.reply[..r.reply_len], &[8, self.chunk], 1).unwrap_or(&[]);
                if data.get(..got) != self.image.get(total..total + got) {
                    return Err(ThroughputError { step: "fread data check", status: -1 });
                }
            }
            black_box(&self.reply);
            total += got;
            if got < self.chunk as usize {
                return Ok(total);
            }
        }
    }
}

/// Streams an `image_len`-byte in-memory library image through fread requests of `chunk` bytes
/// `rounds` times and copies the same bytes as often with `copy_from_slice` in the same pattern
/// (chunk by chunk, each into one reused `chunk`-byte buffer, as the freads land in one reply
/// buffer), interleaved; returns the best round of each. The first round's bytes are checked
/// against the image.
pub fn stream_throughput<S: Syscalls>(sys: S, image_len: usize, chunk: u32, rounds: u32) -> Result<StreamThroughput, ThroughputError> {
    let image: Vec<u8> = (0..image_len).map(|i| (i * 31 + 7) as u8).collect();
    let mut bench = StreamBench::new(sys, &image, chunk)?;
    bench.stream(true)?;
    let mut dest = vec![0u8; (chunk as usize).max(1)];
    let (mut best_reverse, mut best_copy) = (0f64, 0f64);
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        let total = bench.stream(false)?;
        best_reverse = best_reverse.max(mib_s(total, start.elapsed().as_secs_f64()));

        let start = Instant::now();
        for part in black_box(&image).chunks(dest.len()) {
            dest[..part.len()].copy_from_slice(part);
            black_box(&mut dest);
        }
        best_copy = best_copy.max(mib_s(image_len, start.elapsed().as_secs_f64()));
    }
    Ok(StreamThroughput { reverse_stream_mib_s: best_reverse, memcpy_mib_s: best_copy })
}
