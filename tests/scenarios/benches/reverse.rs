//! Throughput of the reverse file service: a 4 MiB in-memory library image streamed through
//! apps_std fread requests of 64 KiB via the dispatcher, against a memcpy of the same bytes in
//! the same pattern (64 KiB chunks into one reused buffer, as the freads land in one reply
//! buffer). `cargo bench -p hexrpc-scenarios --bench reverse`.
//!
//! The image is served from memory, so the seam is never called: a seam that refuses every call
//! is enough (and proves no file is touched).

use hexrpc_bench::measure::NullSys;
use hexrpc_scenarios::throughput::{stream_throughput, StreamBench};

const IMAGE: usize = 4 << 20;
const CHUNK: u32 = 64 << 10;

fn main() {
    match stream_throughput(NullSys::new(), IMAGE, CHUNK, 20) {
        Ok(t) => println!(
            "reverse_stream_mib_s {:.0} memcpy_mib_s {:.0} ratio {:.2} (4 MiB image, 64 KiB freads, best of 20)",
            t.reverse_stream_mib_s,
            t.memcpy_mib_s,
            t.ratio()
        ),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
    divan::main();
}

/// One full 4 MiB stream through the dispatcher (per iteration).
#[divan::bench(sample_count = 30)]
fn reverse_stream_4mib(bencher: divan::Bencher) {
    let image = vec![7u8; IMAGE];
    let mut stream = StreamBench::new(NullSys::new(), &image, CHUNK).expect("bench setup");
    bencher.counter(divan::counter::BytesCount::new(IMAGE)).bench_local(|| stream.stream(false).expect("stream"));
}

/// A copy of the same 4 MiB in 64 KiB chunks into one reused 64 KiB buffer.
#[divan::bench(sample_count = 30)]
fn memcpy_4mib_in_64kib_chunks(bencher: divan::Bencher) {
    let src = vec![7u8; IMAGE];
    let mut dst = vec![0u8; CHUNK as usize];
    bencher.counter(divan::counter::BytesCount::new(IMAGE)).bench_local(|| {
        for part in divan::black_box(&src).chunks(dst.len()) {
            dst[..part.len()].copy_from_slice(part);
            divan::black_box(&mut dst);
        }
    });
}
