//! Float64 kernels as tinygrad 0.14 renders them for the DSP: a float64 trunc is
//! `__builtin_trunc`, a call to `trunc`, which the DSP's shell does not export; floor, ceil, round,
//! `%` and `//` are built on it. A library carries its own `trunc` (hidden, never imported), so
//! these kernels build, and on the bench's executor (qemu-hexagon) the carried `trunc`, and
//! tinygrad's floor and ceil on top of it, equal Rust's `f64::trunc` / `floor` / `ceil` bit for
//! bit, edge cases included (±0, subnormals, values next to 2^52 and 2^53, ±inf, NaNs); tinygrad's
//! round and `%` equal the same expressions evaluated here on the host.
//!
//! The build tests skip (with a message) without clang-19 / ld.lld-19, the runs without
//! qemu-hexagon too.

mod support;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use hexrpc_bench::Bench;
use hexrpc_bsp::DeviceAccess;
use hexrpc_libbuild::freestanding::CARRIED_HELPERS;
use hexrpc_libbuild::{build_library, BuildError, BuildOptions, BuildReport, DSP_PROVIDED_SYMBOLS};
use hexrpc_runtime::launch::{Scalar, Signature};
use hexrpc_runtime::reverse::FilePolicy;
use hexrpc_runtime::ServedSession;

// ------------------------------------------------------------------------------------------------
// Tools, building and running.

fn compilers() -> bool {
    let ok = ["clang-19", "ld.lld-19"].iter().all(|t| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success()));
    if !ok {
        println!("SKIPPED: clang-19 or ld.lld-19 not found");
    }
    ok
}

fn work_dir(name: &str) -> PathBuf {
    support::work_dir("f64", name)
}

/// tinygrad's flags on top of build-lib's own (bindings/python: `TINYGRAD_CFLAGS`).
fn tinygrad_options(kernel: &str) -> BuildOptions {
    BuildOptions {
        kernel_name: Some(kernel.to_owned()),
        kernel_cflags: ["-Wall", "-Werror", "-fno-stack-protector"].map(OsString::from).to_vec(),
        ..BuildOptions::default()
    }
}

fn try_build(dir: &Path, file: &str, kernel: &str, source: &str, sig: &str) -> Result<BuildReport, BuildError> {
    let src = dir.join(format!("{file}.c"));
    std::fs::write(&src, source).unwrap();
    build_library(&src, &Signature::parse(sig).unwrap(), &dir.join(format!("{file}.so")), &tinygrad_options(kernel))
}

/// Builds and checks that the library carries `trunc` (and no other function), imports only what
/// the DSP provides and neither imports nor exports a carried function.
fn build_carrying_trunc(dir: &Path, file: &str, kernel: &str, source: &str, sig: &str) -> (BuildReport, Vec<u8>) {
    let report = try_build(dir, file, kernel, source, sig).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(report.carried_helpers, ["trunc"], "{file}");
    for i in &report.elf.imports {
        assert!(DSP_PROVIDED_SYMBOLS.contains(&i.as_str()), "{file} imports {i}");
    }
    for h in CARRIED_HELPERS {
        assert!(!report.elf.exports.iter().any(|e| e == h), "{h} exported: {:?}", report.elf.exports);
        assert!(!report.elf.imports.iter().any(|e| e == h), "{h} imported: {:?}", report.elf.imports);
    }
    // Compiled from the carried source, alone: no half helper came with it.
    let work = dir.join(format!("{file}.so.build"));
    assert!(work.join("hrx_libm.o").is_file() && !work.join("hrx_half.o").exists(), "{}", work.display());
    let image = std::fs::read(dir.join(format!("{file}.so"))).unwrap();
    (report, image)
}

fn serve(bench: &Bench) -> ServedSession<Bench> {
    ServedSession::start(bench.clone(), &DeviceAccess::for_bench(), FilePolicy::for_board(bench.board()).unwrap()).unwrap()
}

fn bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

fn doubles(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8).map(|c| f64::from_bits(u64::from_le_bytes(c.try_into().unwrap()))).collect()
}

/// One buffer of a launch: an input's values, or an output's length in doubles.
enum Buf<'a> {
    In(&'a [f64]),
    Out(usize),
}

/// Runs the library's kernel on `buffers` (signature order) and `scalars`; returns the outputs,
/// in order.
fn run(served: &ServedSession<Bench>, image: Vec<u8>, buffers: &[Buf<'_>], scalars: &[Scalar]) -> Vec<Vec<f64>> {
    let k = served.open_recorded_kernel("f64", image).unwrap();
    let mut leases = Vec::new();
    for b in buffers {
        let len = match b {
            Buf::In(data) => 8 * data.len(),
            Buf::Out(n) => 8 * n,
        };
        let mut l = served.session().alloc(len.max(1)).unwrap();
        if let Buf::In(data) = b {
            l.write_at(0, &bytes(data)).unwrap();
        }
        leases.push((l, len.max(1)));
    }
    let views: Vec<_> = leases.iter().map(|(l, n)| l.view(0, *n).unwrap()).collect();
    let refs: Vec<_> = views.iter().collect();
    k.launch(&refs, scalars).expect("launch");
    buffers
        .iter()
        .zip(&views)
        .filter_map(|(b, v)| {
            let Buf::Out(n) = b else { return None };
            let mut out = vec![0u8; 8 * n];
            v.read(&mut out).unwrap();
            Some(doubles(&out))
        })
        .collect()
}

// ------------------------------------------------------------------------------------------------
// The host reference.

/// tinygrad's float64 floor: `((x<t)?(t+-1.0):t)` with `t = __builtin_trunc(x)`.
fn tinygrad_floor(x: f64) -> f64 {
    let t = x.trunc();
    if x < t {
        t + -1.0
    } else {
        t
    }
}

/// tinygrad's float64 round: floor(x + 0.5) or ceil(x - 0.5), chosen by the sign of x and the
/// parity of trunc(x).
fn tinygrad_round(x: f64) -> f64 {
    let lo = x + -0.5;
    let tl = lo.trunc();
    let up = if tl < lo { tl + 1.0 } else { tl };
    let hi = x + 0.5;
    let th = hi.trunc();
    let down = if hi < th { th + -1.0 } else { th };
    let half = x.trunc() * 0.5;
    if (0.0 < x) != (half.trunc() == half) {
        down
    } else {
        up
    }
}

/// tinygrad's float64 `%` (Python's: the result takes the divisor's sign): `x - floor(x/y)*y`.
fn tinygrad_mod(x: f64, y: f64) -> f64 {
    x - tinygrad_floor(x / y) * y
}

/// Bit for bit, except that NaN matches any NaN: the DSP's invalid operations (`inf - inf`,
/// `0/0`) give the default NaN 0x7ff8..., x86's is 0xfff8....
fn same_value(got: f64, want: f64) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else {
        got.to_bits() == want.to_bits()
    }
}

#[test]
fn the_reference_is_rusts_where_it_should_be() {
    for x in [0.3, -0.3, 2.5, -2.5, 1e300, -0.0, 4503599627370495.5, f64::INFINITY] {
        assert_eq!(tinygrad_floor(x).to_bits(), x.floor().to_bits(), "{x}");
        assert_eq!(tinygrad_mod(x, 1.0).to_bits(), (x - x.floor()).to_bits(), "{x}");
    }
    assert_eq!(tinygrad_round(2.5), 2.0);
    assert_eq!(tinygrad_round(3.5), 4.0);
    assert_eq!(tinygrad_round(-2.5), -2.0);
    assert_eq!(tinygrad_mod(-7.0, 3.0), 2.0);
    assert_eq!(tinygrad_mod(7.0, -3.0), -2.0);
    // Rust's trunc, floor and ceil give a NaN back with its sign and payload; a signalling one
    // comes back as it is on x86-64 and quieted (the quiet bit set) where the hardware rounding
    // instruction quiets it (aarch64's FRINTZ/FRINTM/FRINTP).
    const QUIET: u64 = 0x0008_0000_0000_0000;
    for bits in [0x7ff0_0000_0000_0abc, 0xfff4_0000_0000_0001, 0x7ff8_dead_beef_0001] {
        let nan = std::hint::black_box(f64::from_bits(bits));
        for got in [nan.trunc().to_bits(), nan.floor().to_bits(), nan.ceil().to_bits()] {
            assert!(got == bits || got == bits | QUIET, "{bits:#018x} -> {got:#018x}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The cases.

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

fn up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

fn down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

/// Edge cases (both signs): zeros, subnormals, values next to every integer and half-integer
/// near 0, 2^52 and 2^53, every exponent with the lowest, highest and some random mantissas, the
/// largest finite value, infinities, quiet and signalling NaNs with payloads; then random bit
/// patterns and random values of magnitude 2^-8 .. 2^60.
fn cases(rng: &mut Rng) -> Vec<f64> {
    let two52 = 2f64.powi(52);
    let two53 = 2f64.powi(53);
    let mut v: Vec<f64> = vec![
        0.0,
        f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff),
        f64::MIN_POSITIVE,
        0.5,
        up(0.5),
        down(0.5),
        down(1.0),
        1.0,
        up(1.0),
        1.5,
        2.5,
        down(two52),
        two52 - 0.5,
        two52 - 1.0,
        two52 - 1.5,
        two52,
        up(two52),
        two52 + 2.0,
        down(two53),
        two53,
        up(two53),
        2f64.powi(63),
        2f64.powi(64),
        1e300,
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001),
        f64::from_bits(0x7ff4_0000_0000_0000),
        f64::from_bits(0x7fff_ffff_ffff_ffff),
        f64::from_bits(0x7ff8_dead_beef_0001),
    ];
    for k in 0..=64 {
        let k = f64::from(k);
        v.extend([k, up(k), k + 0.5, up(k + 0.5), down(k + 0.5)]);
        if k > 0.0 {
            v.push(down(k));
        }
    }
    for e in 0..=2046u64 {
        let r = rng.next() & 0x000f_ffff_ffff_ffff;
        for m in [0, 1, 0x0008_0000_0000_0000, 0x000f_ffff_ffff_ffff, r, r | 1] {
            v.push(f64::from_bits((e << 52) | m));
        }
    }
    // Every integer and half-integer step from 2^52 - 8 to 2^52 + 8 and around 2^53.
    for base in [two52, two53] {
        let mut x = base - 8.0;
        while x <= base + 8.0 {
            v.push(x);
            x = up(x);
        }
    }
    v.extend((0..20000).map(|_| f64::from_bits(rng.next())));
    v.extend((0..20000).map(|_| {
        let r = rng.next();
        f64::from_bits(((1015 + (r >> 52) % 68) << 52) | (r & 0x000f_ffff_ffff_ffff))
    }));
    let negated: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(negated);
    v
}

/// Divisors for `%`: the `i`-th case is divided by the `i % len`-th.
const DIVISORS: &[f64] = &[1.0, -1.0, 0.5, 3.0, -2.5, 0.1, 7.0, 1e-300, 1e300, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];

// ------------------------------------------------------------------------------------------------
// The kernels.

/// What tinygrad 0.14's `DSPRenderer` (and hexrpc's `HEXRPCRenderer`, which renders the same
/// kernel function) prints for `Tensor(..., dtype=float64).trunc()` of 4 elements.
const RENDERED_TRUNC: &str = r#"typedef double double4 __attribute__((aligned(32),ext_vector_type(4)));
__attribute__((noinline)) void E_4(double* restrict __attribute__((align_value(128))) data0_4, double* restrict __attribute__((align_value(128))) data1_4) {
  double4 val0 = (*((double4*)((data1_4+0))));
  *((double4*)((data0_4+0))) = (double4){__builtin_trunc(val0[0]),__builtin_trunc(val0[1]),__builtin_trunc(val0[2]),__builtin_trunc(val0[3])};
}
"#;

/// ... and for `a % b` of two float64 tensors of 4 elements.
const RENDERED_MOD: &str = r#"typedef double double4 __attribute__((aligned(32),ext_vector_type(4)));
__attribute__((noinline)) void E_4(double* restrict __attribute__((align_value(128))) data0_4, double* restrict __attribute__((align_value(128))) data1_4, double* restrict __attribute__((align_value(128))) data2_4) {
  double4 val0 = (*((double4*)((data1_4+0))));
  double4 val1 = (*((double4*)((data2_4+0))));
  double alu0 = (val0[0]/val1[0]);
  double alu1 = __builtin_trunc(alu0);
  double alu2 = (val0[1]/val1[1]);
  double alu3 = __builtin_trunc(alu2);
  double alu4 = (val0[2]/val1[2]);
  double alu5 = __builtin_trunc(alu4);
  double alu6 = (val0[3]/val1[3]);
  double alu7 = __builtin_trunc(alu6);
  double alu8 = ((alu0<alu1)?(alu1+-1.0):alu1);
  double alu9 = ((alu2<alu3)?(alu3+-1.0):alu3);
  double alu10 = ((alu4<alu5)?(alu5+-1.0):alu5);
  double alu11 = ((alu6<alu7)?(alu7+-1.0):alu7);
  *((double4*)((data0_4+0))) = (double4){(val0[0]-(alu8*val1[0])),(val0[1]-(alu9*val1[1])),(val0[2]-(alu10*val1[2])),(val0[3]-(alu11*val1[3]))};
}
"#;

/// Every rounding tinygrad renders for float64, elementwise over `n` values, each expression as
/// its renderer prints it (floor, ceil, round, `%`), plus `trunc` called through our `math.h`.
const ROUNDING: &str = r#"#include <math.h>
void f64_rounding(const double *restrict x, const double *restrict y, double *restrict t_builtin, double *restrict t_call,
                  double *restrict fl, double *restrict ce, double *restrict ro, double *restrict md, unsigned int n) {
  for (unsigned int i = 0; i < n; i++) {
    double v = x[i];
    double t = __builtin_trunc(v);
    t_builtin[i] = t;
    t_call[i] = trunc(v);
    fl[i] = ((v<t)?(t+-1.0):t);
    ce[i] = ((t<v)?(t+1.0):t);
    double lo = (v+-0.5);
    double tl = __builtin_trunc(lo);
    double hi = (v+0.5);
    double th = __builtin_trunc(hi);
    double half = (__builtin_trunc(v)*0.5);
    double up = ((tl<lo)?(tl+1.0):tl);
    double down = ((hi<th)?(th+-1.0):th);
    ro[i] = (((0.0<v)!=(__builtin_trunc(half)==half))?down:up);
    double q = (v/y[i]);
    double tq = __builtin_trunc(q);
    double fq = ((q<tq)?(tq+-1.0):tq);
    md[i] = (v-(fq*y[i]));
  }
}
"#;

#[test]
fn tinygrad_float64_trunc_and_mod_build_carrying_trunc() {
    if !compilers() {
        return;
    }
    let dir = work_dir("renders");
    let (trunc, trunc_image) = build_carrying_trunc(&dir, "trunc", "E_4", RENDERED_TRUNC, "buf,buf");
    let (modulo, mod_image) = build_carrying_trunc(&dir, "mod", "E_4", RENDERED_MOD, "buf,buf,buf");
    assert!(trunc.without_hvx.is_empty() && modulo.without_hvx.is_empty());
    // `%` also needs the shell's double arithmetic, which stays imported.
    for f in ["__hexagon_divdf3", "__hexagon_muldf3", "__hexagon_subdf3"] {
        assert!(modulo.elf.imports.iter().any(|i| i == f), "{f} in {:?}", modulo.elf.imports);
    }
    // A double libm function that is neither provided nor carried is still refused, by name.
    let floor = "void k(double *o) { o[0] = __builtin_floor(o[0]) + __builtin_trunc(o[1]); }\n";
    match try_build(&dir, "floor", "k", floor, "buf") {
        Err(BuildError::UnresolvedImports(names)) => assert_eq!(names, ["floor"]),
        other => panic!("{other:?}"),
    }
    assert!(!dir.join("floor.so").exists());

    if !support::executor_tools() {
        return;
    }
    let bench = Bench::new();
    let served = serve(&bench);
    let x = [-2.5, -0.0, 4503599627370495.5, f64::from_bits(0x7ff0_0000_0000_0001)];
    // tinygrad's kernels take the output first.
    let out = run(&served, trunc_image, &[Buf::Out(4), Buf::In(&x)], &[]);
    for (x, got) in x.iter().zip(&out[0]) {
        assert_eq!(got.to_bits(), x.trunc().to_bits(), "trunc({x:e})");
    }
    let (a, b) = ([-7.0, 7.5, 1e300, -0.0], [3.0, -2.0, 0.1, 5.0]);
    let out = run(&served, mod_image, &[Buf::Out(4), Buf::In(&a), Buf::In(&b)], &[]);
    assert_eq!(out[0][..2], [2.0, -0.5]);
    for ((a, b), got) in a.iter().zip(&b).zip(&out[0]) {
        assert!(same_value(*got, tinygrad_mod(*a, *b)), "{a:e} % {b:e} = {got:e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn carried_trunc_and_tinygrad_roundings_match_rust_bit_for_bit_on_the_bench() {
    if !support::executor_tools() {
        return;
    }
    let dir = work_dir("rounding");
    let (_, image) = build_carrying_trunc(&dir, "f64_rounding", "f64_rounding", ROUNDING, "buf,buf,buf,buf,buf,buf,buf,buf,u32");
    let bench = Bench::new();
    let served = serve(&bench);
    let xs = cases(&mut Rng(0x9e37_79b9_7f4a_7c15));
    let ys: Vec<f64> = (0..xs.len()).map(|i| DIVISORS[i % DIVISORS.len()]).collect();
    let n = xs.len();
    let mut buffers = vec![Buf::In(&xs), Buf::In(&ys)];
    buffers.extend((0..6).map(|_| Buf::Out(n)));
    let out = run(&served, image, &buffers, &[Scalar::U32(n as u32)]);
    let [t_builtin, t_call, fl, ce, ro, md] = &out[..] else { unreachable!() };
    let two52 = 2f64.powi(52);
    let mut round_differs = 0usize;
    for (i, &x) in xs.iter().enumerate() {
        let b = x.to_bits();
        assert_eq!(t_builtin[i].to_bits(), x.trunc().to_bits(), "__builtin_trunc({x:e}) ({b:#018x}) = {:e}", t_builtin[i]);
        assert_eq!(t_call[i].to_bits(), x.trunc().to_bits(), "trunc({x:e}) ({b:#018x}) = {:e}", t_call[i]);
        assert_eq!(fl[i].to_bits(), x.floor().to_bits(), "floor({x:e}) ({b:#018x}) = {:e}", fl[i]);
        assert_eq!(ce[i].to_bits(), x.ceil().to_bits(), "ceil({x:e}) ({b:#018x}) = {:e}", ce[i]);
        assert!(same_value(ro[i], tinygrad_round(x)), "round({x:e}) ({b:#018x}) = {:e}, want {:e}", ro[i], tinygrad_round(x));
        let y = ys[i];
        assert!(same_value(md[i], tinygrad_mod(x, y)), "{x:e} % {y:e} = {:e}, want {:e}", md[i], tinygrad_mod(x, y));
        // tinygrad's round is round-half-even except for a zero's sign (its results in
        // (-0.5, 0.5) take the opposite sign of x) and odd integers of [2^52, 2^53) (x + 0.5
        // rounds to the even neighbour): a property of its decomposition, not of trunc.
        if x.is_finite() && !(ro[i] == 0.0 || (two52..2.0 * two52).contains(&x.abs())) {
            assert_eq!(ro[i].to_bits(), x.round_ties_even().to_bits(), "round({x:e}) ({b:#018x})");
        } else if x.is_finite() && ro[i].to_bits() != x.round_ties_even().to_bits() {
            round_differs += 1;
        }
    }
    // The cases reach both of those regions.
    assert!(round_differs > 100, "{round_differs}");
    println!(
        "{n} values: trunc, floor, ceil exact; round and % as tinygrad's expressions ({round_differs} rounds differ from round-half-even)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
