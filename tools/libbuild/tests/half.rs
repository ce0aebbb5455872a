//! Half-precision kernels and the freestanding headers: libraries built by the library builder
//! carry the binary16 conversion helpers their kernels call (hidden, never imported), and run on
//! the bench's executor (qemu-hexagon) with results equal, bit for bit, to a reference computed
//! here on the host; kernels include `math.h`, `string.h`, `stdint.h` from the build's own
//! include directory and clang's resource headers, never from the host's `/usr/include`.
//!
//! The reference is independent of the helpers' bit manipulation: a half is decoded with f64
//! arithmetic (`m * 2^(e-25)`), and a value is rounded to half by a binary search for its two
//! neighbouring halves and an exact comparison of the distances (ties to the even one).
//!
//! Skips (with a message) when clang-19, ld.lld-19 or qemu-hexagon are missing.

mod support;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use hexrpc_bench::Bench;
use hexrpc_bsp::DeviceAccess;
use hexrpc_libbuild::freestanding::CARRIED_HELPERS;
use hexrpc_libbuild::{build_library, BuildError, BuildOptions, BuildReport, DSP_PROVIDED_SYMBOLS, HEXAGON_CFLAGS};
use hexrpc_runtime::launch::{Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

// ------------------------------------------------------------------------------------------------
// The host reference.

/// The value of half `bits` (exact in f64); NaN for a NaN.
fn half_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (e, m) = (i32::from((bits >> 10) & 0x1f), f64::from(bits & 0x3ff));
    match e {
        0x1f if m == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        0 => sign * m * 2f64.powi(-24),
        _ => sign * (1024.0 + m) * 2f64.powi(e - 25),
    }
}

/// `x` (finite or infinite, not NaN) rounded to half, to nearest, ties to even.
fn half_of(x: f64) -> u16 {
    assert!(!x.is_nan());
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    // 65520 is half-way from the largest half (65504) to 2^16: it and everything above is inf.
    if a >= 65520.0 {
        return sign | 0x7c00;
    }
    // The largest finite half <= a: positive half bits are ordered as their values.
    let (mut lo, mut hi) = (0u16, 0x7bffu16);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if half_value(mid) <= a {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let below = half_value(lo);
    if below == a {
        return sign | lo;
    }
    let above = if lo == 0x7bff { 65536.0 } else { half_value(lo + 1) };
    // Both differences are exact (Sterbenz: the operands are within a factor of two), except
    // below 2^-25 where `a` is closer to 0 however `above - a` rounds.
    let (d_lo, d_hi) = (a - below, above - a);
    let up = d_hi < d_lo || (d_hi == d_lo && lo & 1 == 1);
    sign | if up { lo + 1 } else { lo }
}

/// The quiet NaN a conversion to half gives for a NaN of `payload` (the top bits of the
/// source's mantissa, already shifted to the half's 10 bits): sign kept, quiet bit set.
fn half_nan(sign: bool, payload: u16) -> u16 {
    (if sign { 0x8000 } else { 0 }) | 0x7e00 | (payload & 0x3ff)
}

fn f32_to_half_ref(x: f32) -> u16 {
    if x.is_nan() {
        return half_nan(x.is_sign_negative(), (x.to_bits() >> 13) as u16);
    }
    half_of(f64::from(x))
}

fn f64_to_half_ref(x: f64) -> u16 {
    if x.is_nan() {
        return half_nan(x.is_sign_negative(), (x.to_bits() >> 42) as u16);
    }
    half_of(x)
}

fn half_to_f32_ref(h: u16) -> u32 {
    if half_value(h).is_nan() {
        return (u32::from(h & 0x8000) << 16) | 0x7fc0_0000 | (u32::from(h & 0x3ff) << 13);
    }
    (half_value(h) as f32).to_bits()
}

fn half_to_f64_ref(h: u16) -> u64 {
    if half_value(h).is_nan() {
        return (u64::from(h & 0x8000) << 48) | 0x7ff8_0000_0000_0000 | (u64::from(h & 0x3ff) << 42);
    }
    half_value(h).to_bits()
}

#[test]
fn the_reference_rounds_the_known_cases() {
    assert_eq!(half_of(0.0), 0);
    assert_eq!(half_of(-0.0), 0x8000);
    assert_eq!(half_of(1.0), 0x3c00);
    assert_eq!(half_of(65504.0), 0x7bff);
    assert_eq!(half_of(65519.99), 0x7bff);
    assert_eq!(half_of(65520.0), 0x7c00);
    assert_eq!(half_of(2f64.powi(-24)), 1);
    assert_eq!(half_of(2f64.powi(-25)), 0, "the tie between 0 and the smallest subnormal goes to 0");
    assert_eq!(half_of(1.5 * 2f64.powi(-24)), 2, "1.5 units: the tie goes to the even 2");
    assert_eq!(half_of(2.5 * 2f64.powi(-24)), 2);
    assert_eq!(half_of(1023.5 * 2f64.powi(-24)), 0x400, "the largest subnormal rounds up into the normals");
    assert_eq!(half_of(1.0 + 2f64.powi(-11)), 0x3c00);
    assert_eq!(half_of(1.0 + 3.0 * 2f64.powi(-11)), 0x3c02);
    assert_eq!(half_of(-(1.0 + 2f64.powi(-11) + 2f64.powi(-40))), 0xbc01);
    assert_eq!(half_to_f32_ref(0x7e00), 0x7fc0_0000);
    assert_eq!(half_to_f32_ref(0x7c01), 0x7fc0_2000, "a signalling NaN becomes quiet");
    for h in 0..=0xffffu16 {
        if !half_value(h).is_nan() {
            assert_eq!(half_of(half_value(h)), h, "{h:#06x} round-trips");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Building and running.

fn work_dir(name: &str) -> PathBuf {
    support::work_dir("half", name)
}

fn build(dir: &Path, name: &str, source: &str, sig: &str) -> (BuildReport, Vec<u8>) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(format!("{name}.so"));
    // tinygrad's flags on top of build-lib's own.
    let opts = BuildOptions { kernel_cflags: ["-Wall", "-Werror"].map(OsString::from).to_vec(), ..BuildOptions::default() };
    let report = build_library(&src, &Signature::parse(sig).unwrap(), &out, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    // The helpers are inside, hidden: neither exported nor imported.
    for h in CARRIED_HELPERS {
        assert!(!report.elf.exports.iter().any(|e| e == h), "{h} exported: {:?}", report.elf.exports);
        assert!(!report.elf.imports.iter().any(|e| e == h), "{h} imported: {:?}", report.elf.imports);
    }
    let image = std::fs::read(&out).unwrap();
    (report, image)
}

fn serve(bench: &Bench) -> ServedSession<Bench> {
    ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

fn bytes16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes64(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().unwrap())
}

/// Runs `kernel` (opened from its build record) over `inputs` (bytes) with outputs of the given
/// byte lengths and `scalars`; returns the outputs. Buffers are in signature order: inputs, then
/// outputs.
fn run(served: &ServedSession<Bench>, image: Vec<u8>, inputs: &[Vec<u8>], outputs: &[usize], scalars: &[Scalar]) -> Vec<Vec<u8>> {
    let k = served.open_recorded_kernel("half", image).unwrap();
    let mut leases = Vec::new();
    for data in inputs {
        let mut l = served.session().alloc(data.len().max(1)).unwrap();
        l.write_at(0, data).unwrap();
        leases.push(l);
    }
    for &len in outputs {
        leases.push(served.session().alloc(len.max(1)).unwrap());
    }
    let lens: Vec<usize> = inputs.iter().map(Vec::len).chain(outputs.iter().copied()).collect();
    let views: Vec<_> = leases.iter().zip(&lens).map(|(l, &n)| l.view(0, n.max(1)).unwrap()).collect();
    let refs: Vec<_> = views.iter().collect();
    k.launch(&refs, scalars).expect("launch");
    views[inputs.len()..]
        .iter()
        .zip(outputs)
        .map(|(v, &n)| {
            let mut out = vec![0u8; n];
            v.read(&mut out).unwrap();
            out
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// The kernels.

/// clang-19 for hexagonv65 has no `_Float16` ("not supported on this target"; it starts at v68);
/// `__fp16` is the storage type tinygrad renders for half: arithmetic in float, a conversion on
/// every load and store.
const CASTS: &str = r#"#include <stdint.h>
#include <math.h>
/* A carried helper called directly: clang widens a half to double through float. */
double __extendhfdf2(uint32_t h);

void half_casts(const __fp16 *h, const uint16_t *hbits, const float *f, const double *d, float *h2f, double *h2d,
                double *h2d_direct, int32_t *h2i, __fp16 *f2h, __fp16 *d2h, uint32_t nh, uint32_t nf, uint32_t nd) {
  for (uint32_t i = 0; i < nh; i++) {
    float x = h[i];
    h2f[i] = x;
    h2d[i] = h[i];
    h2d_direct[i] = __extendhfdf2(hbits[i]);
    h2i[i] = isfinite(x) ? (int32_t)h[i] : 0;
  }
  for (uint32_t i = 0; i < nf; i++) f2h[i] = f[i];
  for (uint32_t i = 0; i < nd; i++) d2h[i] = d[i];
}
"#;

const ADD: &str = r#"#include <stdint.h>
void half_add(const __fp16 *restrict a, const __fp16 *restrict b, __fp16 *restrict o, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) o[i] = a[i] + b[i];
}
"#;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Values to convert to half: the edge cases, every tie between neighbouring halves with its
/// neighbours in the source format, and random bit patterns.
fn f32_cases(rng: &mut Rng) -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        f32::from_bits(1),
        f32::MIN_POSITIVE,
        2f32.powi(-25),
        f32::from_bits(2f32.powi(-25).to_bits() + 1),
        1.5 * 2f32.powi(-24),
        2.5 * 2f32.powi(-24),
        1023.5 * 2f32.powi(-24),
        2f32.powi(-14),
        1.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        2048.0 + 1.0,
        2048.0 + 3.0,
        65504.0,
        65519.996,
        65520.0,
        65536.0,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0x7fa0_2000),
        f32::from_bits(0xffc0_0000),
    ];
    for b in 0..0x7bffu16 {
        let mid = ((half_value(b) + half_value(b + 1)) / 2.0) as f32;
        v.extend([mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits().saturating_sub(1))]);
    }
    v.extend((0..20000).map(|_| f32::from_bits(rng.next() as u32)));
    // Mostly in half's range: random sign, exponent within 2^-26..2^17.
    v.extend((0..20000).map(|_| {
        let r = rng.next();
        f32::from_bits(((r as u32) & 0x8000_0000) | ((100 + (r >> 32) as u32 % 45) << 23) | ((r >> 8) as u32 & 0x7f_ffff))
    }));
    let negated: Vec<f32> = v.iter().map(|x| -x).collect();
    v.extend(negated);
    v
}

fn f64_cases(rng: &mut Rng) -> Vec<f64> {
    let mut v: Vec<f64> = vec![
        0.0,
        -0.0,
        f64::from_bits(1),
        2f64.powi(-25),
        f64::from_bits(2f64.powi(-25).to_bits() + 1),
        1023.5 * 2f64.powi(-24),
        65504.0,
        65520.0,
        f64::from_bits(65520f64.to_bits() - 1),
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
    ];
    for b in (0..0x7bffu16).step_by(3) {
        let mid = (half_value(b) + half_value(b + 1)) / 2.0;
        // Just above a tie by less than half a float ulp: rounding through float would land on
        // the tie and go to even; the correct result is up.
        v.extend([mid, f64::from_bits(mid.to_bits() + 1), f64::from_bits(mid.to_bits() - 1), mid * (1.0 + 2f64.powi(-40))]);
    }
    v.extend((0..10000).map(|_| f64::from_bits(rng.next())));
    let negated: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(negated);
    v
}

#[test]
fn half_casts_run_on_the_bench_and_match_the_reference_bit_for_bit() {
    if !support::executor_tools() {
        return;
    }
    let dir = work_dir("casts");
    let (report, image) = build(&dir, "half_casts", CASTS, "buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32");
    assert_eq!(report.carried_helpers, ["__extendhfsf2", "__extendhfdf2", "__truncsfhf2", "__truncdfhf2"]);
    let bench = Bench::new();
    let served = serve(&bench);

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let halves: Vec<u16> = (0..=0xffffu16).collect();
    let fs = f32_cases(&mut rng);
    let ds = f64_cases(&mut rng);
    let (nh, nf, nd) = (halves.len(), fs.len(), ds.len());
    let hb = bytes16(&halves);
    let out = run(
        &served,
        image,
        &[
            hb.clone(),
            hb,
            bytes32(&fs.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
            bytes64(&ds.iter().map(|x| x.to_bits()).collect::<Vec<_>>()),
        ],
        &[4 * nh, 8 * nh, 8 * nh, 4 * nh, 2 * nf, 2 * nd],
        &[Scalar::U32(nh as u32), Scalar::U32(nf as u32), Scalar::U32(nd as u32)],
    );

    for (h, got) in halves.iter().zip(words::<4>(&out[0])) {
        assert_eq!(u32::from_le_bytes(got), half_to_f32_ref(*h), "half {h:#06x} -> float");
    }
    for (h, got) in halves.iter().zip(words::<8>(&out[1])) {
        let got = u64::from_le_bytes(got);
        if half_value(*h).is_nan() {
            // Widened by the processor's float -> double conversion, which gives its default NaN.
            assert!(f64::from_bits(got).is_nan(), "half {h:#06x} -> double (through float) = {got:#018x}");
        } else {
            assert_eq!(got, half_to_f64_ref(*h), "half {h:#06x} -> double (through float)");
        }
    }
    for (h, got) in halves.iter().zip(words::<8>(&out[2])) {
        assert_eq!(u64::from_le_bytes(got), half_to_f64_ref(*h), "__extendhfdf2({h:#06x})");
    }
    for (h, got) in halves.iter().zip(words::<4>(&out[3])) {
        let v = half_value(*h);
        let want = if v.is_finite() { v.trunc() as i32 } else { 0 };
        assert_eq!(i32::from_le_bytes(got), want, "half {h:#06x} -> int");
    }
    for (x, got) in fs.iter().zip(words::<2>(&out[4])) {
        assert_eq!(u16::from_le_bytes(got), f32_to_half_ref(*x), "float {x:e} ({:#010x}) -> half", x.to_bits());
    }
    for (x, got) in ds.iter().zip(words::<2>(&out[5])) {
        assert_eq!(u16::from_le_bytes(got), f64_to_half_ref(*x), "double {x:e} ({:#018x}) -> half", x.to_bits());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn half_elementwise_add_runs_on_the_bench() {
    if !support::executor_tools() {
        return;
    }
    let dir = work_dir("add");
    let (report, image) = build(&dir, "half_add", ADD, "buf,buf,buf,u32");
    let mut carried = report.carried_helpers.clone();
    carried.sort_unstable();
    assert_eq!(carried, ["__extendhfsf2", "__truncsfhf2"], "only the helpers the kernel calls");
    let mut imports = report.elf.imports.clone();
    imports.sort();
    assert_eq!(imports, ["HAP_mmap", "HAP_munmap", "HAP_perf_get_time_us", "HAP_power_set"], "HAP_power_set: the clock vote");
    let bench = Bench::new();
    let served = serve(&bench);

    let edge: &[(u16, u16)] = &[
        (0x0000, 0x8000), // 0 + -0 = 0
        (0x8000, 0x8000), // -0 + -0 = -0 (+0 on the bench)
        (0x7bff, 0x7bff), // overflow: inf
        (0x7bff, 0x5000), // 65504 + 32 = 65536: inf
        (0x7bff, 0x4c00), // 65504 + 16 = 65520: the tie goes to inf
        (0x7bff, 0x4bfe), // 65504 + 15.97: 65504
        (0x7c00, 0xfc00), // inf - inf = NaN
        (0x7c00, 0x3c00),
        (0x0001, 0x0001), // subnormals
        (0x03ff, 0x0001), // largest subnormal + smallest: the smallest normal
        (0x6800, 0x3c00), // 2048 + 1: tie, to even 2048
        (0x6800, 0x4200), // 2048 + 3: tie, to even 2052
        (0x3c00, 0x0001), // 1 + 2^-24: rounds back to 1
        (0x7e00, 0x3c00), // NaN
    ];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut a, mut b): (Vec<u16>, Vec<u16>) = edge.iter().copied().unzip();
    for _ in 0..50000 {
        let r = rng.next();
        // Mostly finite: exponent field 0..=30.
        let pick = |x: u64| (x as u16 & 0x83ff) | (((x >> 16) % 31) as u16) << 10;
        a.push(pick(r));
        b.push(pick(r >> 32));
    }
    let n = a.len();
    let out = run(&served, image, &[bytes16(&a), bytes16(&b)], &[2 * n], &[Scalar::U32(n as u32)]);
    for ((x, y), got) in a.iter().zip(&b).zip(words::<2>(&out[0])) {
        let got = u16::from_le_bytes(got);
        let sum = half_value(*x) + half_value(*y);
        if sum.is_nan() {
            assert!(half_value(got).is_nan(), "{x:#06x} + {y:#06x} = {got:#06x}, want a NaN");
        } else if sum == 0.0 {
            // The bench's float addition (qemu-hexagon's sfadd) gives +0 for -0 + -0, where IEEE
            // says -0: a zero sum is compared without its sign.
            assert_eq!(got & 0x7fff, 0, "{x:#06x} + {y:#06x} = {got:#06x}, want a zero");
        } else {
            // The sum of two halves is exact in f64; float addition and one rounding to half give
            // the correctly rounded half sum (24 >= 2 * 11 + 2 bits: double rounding is harmless).
            assert_eq!(got, half_of(sum), "{x:#06x} + {y:#06x} = {sum:e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------------
// Headers.

const HEADERS_KERNEL: &str = r#"#include <math.h>
#include <string.h>
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <float.h>
#include <limits.h>
void with_headers(float *o, const float *x, double *d, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    float v = x[i];
    o[i] = sqrtf(fabsf(v)) + floorf(v) + ceilf(v) + truncf(v) + roundf(v) + fmaxf(v, 1.0f) + fminf(v, 2.0f) + expf(v)
           + exp2f(v) + logf(fabsf(v) + 1.0f) + log2f(fabsf(v) + 1.0f) + sinf(v) + cosf(v) + copysignf(v, -1.0f)
           + (isnan(v) ? 1.0f : 0.0f) + (isinf(v) ? 1.0f : 0.0f) + (signbit(v) ? 1.0f : 0.0f) + (float)M_PI
           + FLT_EPSILON + (isfinite(v) ? 0.0f : INFINITY);
    d[i] = fabs(d[i]) + copysign(d[i], -1.0) + (d[i] > (double)INT32_MAX ? HUGE_VAL : 0.0);
  }
  bool same = memcmp(o, x, sizeof(float)) == 0;
  if (same) memset(o, 0, sizeof(float));
  memmove(o + 1, o, sizeof(float));
  memcpy(d, o, sizeof(float) * (size_t)(n > 1 ? 1 : 0));
}
"#;

#[test]
fn kernels_see_our_headers_and_never_the_hosts() {
    let clang = "clang-19";
    if !["clang-19", "ld.lld-19"].iter().all(|t| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success())) {
        println!("SKIPPED: clang-19 or ld.lld-19 not found");
        return;
    }
    let dir = work_dir("headers");
    let (report, _) = build(&dir, "with_headers", HEADERS_KERNEL, "buf,buf,buf,u32");
    assert!(report.carried_helpers.is_empty(), "{:?}", report.carried_helpers);
    for i in &report.elf.imports {
        assert!(DSP_PROVIDED_SYMBOLS.contains(&i.as_str()), "{i}");
    }
    for f in ["sqrtf", "expf", "sinf", "memcmp", "memset"] {
        assert!(report.elf.imports.iter().any(|i| i == f), "{f} in {:?}", report.elf.imports);
    }
    for f in ["fabs", "copysignf", "copysign"] {
        assert!(!report.elf.imports.iter().any(|i| i == f), "{f} is resolved at compile time: {:?}", report.elf.imports);
    }

    // The kernel's translation unit, preprocessed with the build's flags: every header comes from
    // the build's include directory or clang's resource directory.
    let work = dir.join("with_headers.so.build");
    let include = work.join("include");
    assert!(include.join("math.h").is_file() && include.join("string.h").is_file());
    let mut args: Vec<OsString> = HEXAGON_CFLAGS.iter().map(OsString::from).collect();
    args.extend(["-isystem".into(), include.clone().into_os_string(), "-E".into(), work.join("kernel0.c").into_os_string()]);
    let out = Command::new(clang).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let resource = String::from_utf8_lossy(&Command::new(clang).arg("-print-resource-dir").output().unwrap().stdout).trim().to_string();
    let mut files: Vec<&str> =
        text.lines().filter(|l| l.starts_with("# ")).filter_map(|l| l.split('"').nth(1)).filter(|f| f.starts_with('/')).collect();
    files.sort_unstable();
    files.dedup();
    assert!(!text.contains("/usr/include") && !text.contains("/usr/local/include"), "host headers in:\n{files:#?}");
    for f in &files {
        let ours = Path::new(f).starts_with(&include) || Path::new(f).starts_with(&resource) || Path::new(f).starts_with(&dir);
        assert!(ours, "{f} is neither ours nor clang's ({resource})");
    }
    for h in ["math.h", "string.h"] {
        assert!(files.iter().any(|f| Path::new(f) == include.join(h)), "{h} from {include:?}: {files:#?}");
    }
    for h in ["stdint.h", "stddef.h", "stdbool.h", "float.h"] {
        assert!(files.iter().any(|f| Path::new(f) == Path::new(&resource).join("include").join(h)), "{h} from clang: {files:#?}");
    }

    // A host header is not found (it is there on the host, but never searched).
    let stdio = "#include <stdio.h>\nvoid k(float *o) { o[0] = 0; }\n";
    std::fs::write(dir.join("k.c"), stdio).unwrap();
    let e = build_library(&dir.join("k.c"), &Signature::parse("buf").unwrap(), &dir.join("k.so"), &BuildOptions::default()).unwrap_err();
    match e {
        BuildError::ToolFailed { stderr, .. } => assert!(stderr.contains("'stdio.h' file not found"), "{stderr}"),
        other => panic!("{other:?}"),
    }
    // Double-precision libm is not declared, and what the DSP does not provide is still refused
    // by name.
    let undeclared = "#include <math.h>\nvoid k(double *o) { o[0] = sqrt(o[0]); }\n";
    std::fs::write(dir.join("k.c"), undeclared).unwrap();
    match build_library(&dir.join("k.c"), &Signature::parse("buf").unwrap(), &dir.join("k.so"), &BuildOptions::default()) {
        Err(BuildError::ToolFailed { stderr, .. }) => assert!(stderr.contains("sqrt"), "{stderr}"),
        other => panic!("{other:?}"),
    }
    let builtin = "#include <math.h>\nvoid k(double *o) { o[0] = __builtin_sqrt(o[0]); }\n";
    std::fs::write(dir.join("k.c"), builtin).unwrap();
    match build_library(&dir.join("k.c"), &Signature::parse("buf").unwrap(), &dir.join("k.so"), &BuildOptions::default()) {
        Err(e @ BuildError::UnresolvedImports(_)) => {
            assert!(e.to_string().contains("sqrt"), "{e}");
            let BuildError::UnresolvedImports(names) = e else { unreachable!() };
            assert_eq!(names, ["sqrt"]);
        }
        other => panic!("{other:?}"),
    }
    // _Float16 needs hexagonv68 in clang-19: refused by the compiler, naming the type.
    let float16 = "void k(_Float16 *o) { o[0] = o[0] + o[0]; }\n";
    std::fs::write(dir.join("k.c"), float16).unwrap();
    match build_library(&dir.join("k.c"), &Signature::parse("buf").unwrap(), &dir.join("k.so"), &BuildOptions::default()) {
        Err(BuildError::ToolFailed { stderr, .. }) => assert!(stderr.contains("_Float16 is not supported on this target"), "{stderr}"),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------------------------------------
// A clang-19 defect: `(__fp16)` of a 16-bit integer copies its bits.

#[test]
fn short_to_half_is_refused_and_through_int_is_exact() {
    if !support::executor_tools() {
        return;
    }
    let dir = work_dir("short");
    let sig = Signature::parse("buf,buf,u32").unwrap();
    for (name, body) in [
        ("direct", "o[i] = (__fp16)s[i];"),
        ("implicit", "o[i] = s[i];"),
        ("aliased", "i16 t = s[i];\n    o[i] = (half)t;"),
        ("from_unsigned", "o[i] = (unsigned short)s[i];"),
    ] {
        let src = format!(
            "typedef short i16;\ntypedef __fp16 half;\nvoid {name}(const short *s, __fp16 *o, unsigned int n) {{\n  for (unsigned int i = 0; i < n; i++) {{\n    {body}\n  }}\n}}\n"
        );
        let path = dir.join(format!("{name}.c"));
        std::fs::write(&path, src).unwrap();
        match build_library(&path, &sig, &dir.join(format!("{name}.so")), &BuildOptions::default()) {
            Err(e @ BuildError::ShortToHalf { .. }) => {
                let BuildError::ShortToHalf { ref lines, .. } = e else { unreachable!() };
                let want = if name == "aliased" { 6 } else { 5 };
                assert_eq!(lines, &[want], "{name}: {e}");
                assert!(e.to_string().contains("(__fp16)(int)x") && e.to_string().contains(&format!("line {want}")), "{e}");
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(!dir.join(format!("{name}.so")).exists());
    }
    // Through int (or any wider type), the conversion is a conversion: every short, exactly
    // rounded.
    let src =
        "void via_int(const short *s, __fp16 *o, unsigned int n) {\n  for (unsigned int i = 0; i < n; i++) o[i] = (__fp16)(int)s[i];\n}\n";
    let (_, image) = build(&dir, "via_int", src, "buf,buf,u32");
    let bench = Bench::new();
    let served = serve(&bench);
    let shorts: Vec<u16> = (0..=0xffffu16).collect();
    let out = run(&served, image, &[bytes16(&shorts)], &[2 * shorts.len()], &[Scalar::U32(shorts.len() as u32)]);
    for (s, got) in shorts.iter().zip(words::<2>(&out[0])) {
        let v = f64::from(*s as i16);
        assert_eq!(u16::from_le_bytes(got), half_of(v), "(__fp16)(int){v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
