//! The bench with executor: real generated entries and kernels, built for Hexagon with
//! clang-19 / ld.lld-19, run under qemu-hexagon against the bench's buffers, through the whole
//! stack (HAL session, runtime packer, runtime reverse service).
//!
//! Every test prints `SKIPPED: <reason>` and returns when the tools are missing or cannot run
//! from this process (an aarch64 test binary under qemu-aarch64).

use std::time::{Duration, Instant};

use hexrpc_bench::executor::reference::{self as r, f32_bytes, f32s_of, Rng};
use hexrpc_bench::executor::{self, Flavour, Toolchain};
use hexrpc_bench::{Bench, BenchConfig, LedgerEvent, RestartReason};
use hexrpc_bsp::Board;
use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;
use hexrpc_hal::{BufferView, Call, Cause};
use hexrpc_runtime::launch::{AbiVersion, BufferRef, EntryOptions, PackError, PackedLaunch, Scalar, Signature};
use hexrpc_scenarios::suite::build_image;
use hexrpc_scenarios::{stack, ModelError, ModelOptions, Stack};

hexrpc_bench::on_both_kernels!(
    kernel_suite_matches_the_reference_in_both_builds,
    expf_stays_within_its_stated_bound,
    model_runs_through_the_stack_with_numerics_and_latency,
    v2_handles_offset_views_where_v1_shows_the_seed_defect,
    executor_faults_become_dsp_errors_and_recover,
    hap_power_set_is_accepted_and_recorded,
    abandoned_shells_end_with_their_process,
    steady_state_launches_map_no_lease_with_the_map_cache
);

fn tools() -> Option<Toolchain> {
    hexrpc_scenarios::suite::tools_or_skip()
}

/// How an output is compared.
enum Rule {
    Exact(Vec<u8>),
    /// f32 outputs within n*eps*scale.
    Acc {
        want: Vec<f32>,
        scale: Vec<f32>,
        terms: usize,
    },
    /// f32 outputs within `max` ulp of `want`.
    Ulp {
        want: Vec<f32>,
        max: u32,
    },
    /// f32 outputs within relative `max` of an f64 reference.
    Rel {
        want: Vec<f64>,
        max: f64,
    },
}

struct Case {
    kernel: &'static str,
    sig: &'static str,
    inputs: Vec<Vec<u8>>,
    outputs: Vec<(usize, Rule)>,
    scalars: Vec<Scalar>,
    /// Offsets of the views inside the lease are odd for byte kernels (unaligned vectors),
    /// multiples of 4 (but not of 8 or 128) for word kernels.
    byte_kernel: bool,
}

fn check(case: &str, got: &[u8], rule: &Rule) -> Result<u32, String> {
    match rule {
        Rule::Exact(want) => {
            if got != &want[..] {
                let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!("{case}: byte {i}: {:?} vs {:?}", got.get(i), want.get(i)));
            }
            Ok(0)
        }
        Rule::Acc { want, scale, terms } => {
            let g = f32s_of(got);
            let mut worst = 0;
            for (i, ((g, w), s)) in g.iter().zip(want).zip(scale).enumerate() {
                let bound = r::acc_bound(*s, *terms);
                if (g - w).abs() > bound || g.is_nan() {
                    return Err(format!("{case}: element {i}: {g} vs {w} beyond {bound}"));
                }
                worst = worst.max(r::ulp_diff(*g, *w));
            }
            Ok(worst)
        }
        Rule::Ulp { want, max } => {
            let g = f32s_of(got);
            let mut worst = 0;
            for (i, (g, w)) in g.iter().zip(want).enumerate() {
                let d = r::ulp_diff(*g, *w);
                if d > *max {
                    return Err(format!("{case}: element {i}: {g} vs {w}: {d} ulp > {max}"));
                }
                worst = worst.max(d);
            }
            Ok(worst)
        }
        Rule::Rel { want, max } => {
            let g = f32s_of(got);
            let mut worst = 0;
            for (i, (g, w)) in g.iter().zip(want).enumerate() {
                let rel = ((*g as f64 - w) / w).abs();
                if rel.is_nan() || rel > *max {
                    return Err(format!("{case}: element {i}: {g} vs {w}: relative {rel:e} > {max:e}"));
                }
                worst = worst.max(r::ulp_diff(*g, *w as f32));
            }
            Ok(worst)
        }
    }
}

/// Runs one case on `stack`: one lease, every buffer a view at a non-zero offset.
fn run_case(tc: &Toolchain, stack: &Stack, case: &Case, flavour: Flavour) -> Result<u32, String> {
    let name = format!("{} ({flavour:?})", case.kernel);
    let image = build_image(tc, case.kernel, case.sig, EntryOptions::V2, flavour).map_err(|e| format!("{name}: {e}"))?;
    let lib = stack.open(case.kernel, image).map_err(|e| format!("{name}: open: {e}"))?;
    let lens: Vec<usize> = case.inputs.iter().map(|b| b.len()).chain(case.outputs.iter().map(|o| o.0)).collect();
    let stride = lens.iter().max().copied().unwrap_or(0).div_ceil(64) * 64 + 64;
    let skew = if case.byte_kernel { 3 } else { 4 };
    let offsets: Vec<usize> = (0..lens.len()).map(|i| skew + 16 * i + stride * i).collect();
    let mut lease = stack.session().alloc(offsets.last().unwrap() + stride).map_err(|e| format!("{name}: {e}"))?;
    lease.fill(0, lease.len(), 0xA5).map_err(|e| e.to_string())?;
    for (i, data) in case.inputs.iter().enumerate() {
        lease.write_at(offsets[i], data).map_err(|e| e.to_string())?;
    }
    let views: Vec<BufferView<'_>> =
        offsets.iter().zip(&lens).map(|(&o, &l)| lease.view(o, l)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let sig = Signature::parse(case.sig).map_err(|e| format!("{e:?}"))?;
    let refs: Vec<&BufferView<'_>> = views.iter().collect();
    stack::launch(&lib, &sig, &refs, &case.scalars).map_err(|e| format!("{name}: launch: {e}"))?;
    let mut worst = 0;
    for (j, (len, rule)) in case.outputs.iter().enumerate() {
        let mut got = vec![0u8; *len];
        views[case.inputs.len() + j].read(&mut got).map_err(|e| e.to_string())?;
        worst = worst.max(check(&name, &got, rule)?);
    }
    // The bytes around every view are untouched (0xA5 guard bytes in the lease).
    let mut all = vec![0u8; lease.len()];
    lease.read_at(0, &mut all).map_err(|e| e.to_string())?;
    for (i, (&o, &l)) in offsets.iter().zip(&lens).enumerate() {
        let before = &all[o.saturating_sub(8)..o];
        let after = &all[o + l..(o + l + 8).min(all.len())];
        if before.iter().chain(after).any(|&b| b != 0xA5) {
            return Err(format!("{name}: bytes around view {i} were written"));
        }
    }
    Ok(worst)
}

fn suite() -> Vec<Case> {
    let mut g = Rng(0x1234_5678);
    let n = 1000usize;
    let (fa, fb) = (g.f32s(n, 10.0), g.f32s(n, 10.0));
    let (ba, bb) = (g.bytes(n), g.bytes(n));
    let (ia, ib): (Vec<i8>, Vec<i8>) = (ba.iter().map(|&x| x as i8).collect(), bb.iter().map(|&x| x as i8).collect());
    let i8b = |v: Vec<i8>| v.into_iter().map(|x| x as u8).collect::<Vec<u8>>();
    let u = |x: usize| Scalar::U32(x as u32);
    let f = f32_bytes;
    let ew = |kernel, inputs: Vec<Vec<u8>>, out: Vec<u8>, byte| Case {
        kernel,
        sig: if inputs.len() == 2 { "buf,buf,buf,u32" } else { "buf,buf,u32" },
        outputs: vec![(out.len(), Rule::Exact(out))],
        inputs,
        scalars: vec![u(n)],
        byte_kernel: byte,
    };
    let (m, k, nn) = (7usize, 13usize, 9usize);
    let (ma, mb) = (g.f32s(m * k, 2.0), g.f32s(k * nn, 2.0));
    let (c, h, w, filt) = (2usize, 9usize, 11usize, 3usize);
    let (ci, cw, cb) = (g.f32s(c * h * w, 1.0), g.f32s(filt * c * 9, 1.0), g.f32s(filt, 0.5));
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
    let (rows, cols) = (3usize, 37usize);
    let sm = g.f32s(rows * cols, 8.0);
    let mut cases = vec![
        ew("add_f32", vec![f(&fa), f(&fb)], f(&r::add_f32(&fa, &fb)), false),
        ew("mul_f32", vec![f(&fa), f(&fb)], f(&r::mul_f32(&fa, &fb)), false),
        ew("relu_f32", vec![f(&fa)], f(&r::relu_f32(&fa)), false),
        ew("add_i8", vec![i8b(ia.clone()), i8b(ib.clone())], i8b(r::add_i8(&ia, &ib)), true),
        ew("mul_i8", vec![i8b(ia.clone()), i8b(ib.clone())], i8b(r::mul_i8(&ia, &ib)), true),
        ew("relu_i8", vec![i8b(ia.clone())], i8b(r::relu_i8(&ia)), true),
        ew("relu_i8_hvx", vec![i8b(ia.clone())], i8b(r::relu_i8(&ia)), true),
        ew("add_u8", vec![ba.clone(), bb.clone()], r::add_u8(&ba, &bb), true),
        ew("add_u8_hvx", vec![ba.clone(), bb.clone()], r::add_u8(&ba, &bb), true),
        ew("mul_u8", vec![ba.clone(), bb.clone()], r::mul_u8(&ba, &bb), true),
        Case {
            kernel: "relu_u8",
            sig: "buf,buf,u32,u8",
            inputs: vec![ba.clone()],
            outputs: vec![(n, Rule::Exact(r::relu_u8(&ba, 128)))],
            scalars: vec![u(n), Scalar::U8(128)],
            byte_kernel: true,
        },
        Case {
            kernel: "relu_u8_hvx",
            sig: "buf,buf,u32,u8",
            inputs: vec![ba.clone()],
            outputs: vec![(n, Rule::Exact(r::relu_u8(&ba, 77)))],
            scalars: vec![u(n), Scalar::U8(77)],
            byte_kernel: true,
        },
        Case {
            kernel: "sum_f32",
            sig: "buf,buf,u32",
            inputs: vec![f(&fa)],
            outputs: vec![(4, Rule::Acc { want: vec![r::sum_f32(&fa)], scale: vec![r::sum_f32(&abs(&fa))], terms: n })],
            scalars: vec![u(n)],
            byte_kernel: false,
        },
        Case {
            kernel: "max_f32",
            sig: "buf,buf,u32",
            inputs: vec![f(&fa)],
            outputs: vec![(4, Rule::Exact(f(&[r::max_f32(&fa)])))],
            scalars: vec![u(n)],
            byte_kernel: false,
        },
        Case {
            kernel: "sum_u8",
            sig: "buf,buf,u32",
            inputs: vec![ba.clone()],
            outputs: vec![(4, Rule::Exact(r::sum_u8(&ba).to_le_bytes().to_vec()))],
            scalars: vec![u(n)],
            byte_kernel: true,
        },
        Case {
            kernel: "matmul_f32",
            sig: "buf,buf,buf,u32,u32,u32",
            inputs: vec![f(&ma), f(&mb)],
            outputs: vec![(
                4 * m * nn,
                Rule::Acc { want: r::matmul_f32(&ma, &mb, m, k, nn), scale: r::matmul_f32(&abs(&ma), &abs(&mb), m, k, nn), terms: k },
            )],
            scalars: vec![u(m), u(k), u(nn)],
            byte_kernel: false,
        },
        Case {
            kernel: "conv2d_f32",
            sig: "buf,buf,buf,buf,u32,u32,u32,u32",
            inputs: vec![f(&ci), f(&cw), f(&cb)],
            outputs: vec![(
                4 * filt * (h - 2) * (w - 2),
                Rule::Acc {
                    want: r::conv2d_f32(&ci, &cw, &cb, c, h, w, filt),
                    scale: r::conv2d_f32(&abs(&ci), &abs(&cw), &abs(&cb), c, h, w, filt),
                    terms: c * 9 + 1,
                },
            )],
            scalars: vec![u(c), u(h), u(w), u(filt)],
            byte_kernel: false,
        },
        Case {
            kernel: "softmax_f32",
            sig: "buf,buf,u32,u32",
            inputs: vec![f(&sm)],
            outputs: vec![(4 * rows * cols, Rule::Rel { want: r::softmax_f64(&sm, rows, cols), max: r::SOFTMAX_MAX_REL as f64 })],
            scalars: vec![u(rows), u(cols)],
            byte_kernel: false,
        },
    ];
    // maxpool and dense (the model's other nodes) on their own.
    let pin = g.f32s(2 * 6 * 8, 3.0);
    cases.push(Case {
        kernel: "maxpool2_f32",
        sig: "buf,buf,u32,u32,u32",
        inputs: vec![f(&pin)],
        outputs: vec![(4 * 2 * 3 * 4, Rule::Exact(f(&r::maxpool2_f32(&pin, 2, 6, 8))))],
        scalars: vec![u(2), u(6), u(8)],
        byte_kernel: false,
    });
    let (dx, dw, db) = (g.f32s(33, 1.0), g.f32s(5 * 33, 1.0), g.f32s(5, 1.0));
    cases.push(Case {
        kernel: "dense_f32",
        sig: "buf,buf,buf,buf,u32,u32",
        inputs: vec![f(&dx), f(&dw), f(&db)],
        outputs: vec![(
            20,
            Rule::Acc { want: r::dense_f32(&dx, &dw, &db, 33, 5), scale: r::dense_f32(&abs(&dx), &abs(&dw), &abs(&db), 33, 5), terms: 34 },
        )],
        scalars: vec![u(33), u(5)],
        byte_kernel: false,
    });
    cases
}

fn kernel_suite_matches_the_reference_in_both_builds(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let mut failures = Vec::new();
    for case in suite() {
        for flavour in [Flavour::Scalar, Flavour::Hvx] {
            match run_case(&tc, &stack, &case, flavour) {
                Ok(ulp) => println!("{:>14} {flavour:?}: ok (max {ulp} ulp)", case.kernel),
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(bench.ledger_mismatches(), 0, "{:?}", bench.ledger());
    // Every v2 map was unmapped with its own address and length.
    let ledger = bench.ledger();
    let maps = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count();
    let unmaps = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Unmap { matched: true, .. })).count();
    assert!(maps > 0);
    assert_eq!(maps, unmaps);
}

#[test]
fn hvx_builds_contain_vector_code() {
    let Some(tc) = tools() else { return };
    let Some(objdump) =
        ["llvm-objdump-19", "llvm-objdump"].into_iter().find(|t| std::process::Command::new(t).arg("--version").output().is_ok())
    else {
        println!("SKIPPED: llvm-objdump-19 not found");
        return;
    };
    for (kernel, sig, flavour, must) in [
        ("add_u8_hvx", "buf,buf,buf,u32", Flavour::Scalar, true),
        ("add_i8", "buf,buf,buf,u32", Flavour::Hvx, true),
        ("add_i8", "buf,buf,buf,u32", Flavour::Scalar, false),
    ] {
        let image = build_image(&tc, kernel, sig, EntryOptions::V2, flavour).expect("build");
        let dir = executor::build::cache_dir(&tc).unwrap();
        let elf = dir.join(format!("inspect-{}-{kernel}-{flavour:?}.so", std::process::id()));
        std::fs::write(&elf, image).unwrap();
        let out = std::process::Command::new(objdump)
            .args(["-d", "--no-show-raw-insn", "--mattr=+hvxv65,+hvx-length128b"])
            .arg(&elf)
            .output()
            .expect("objdump");
        let text = String::from_utf8_lossy(&out.stdout);
        let body: String = text.split(&format!("<{kernel}>:")).nth(1).unwrap_or("").split("\n\n").next().unwrap_or("").to_string();
        let vector = body.lines().any(|l| l.contains("vmem") || l.contains("vmemu") || (l.contains(" v") && l.contains(".b")));
        assert!(!body.is_empty(), "{kernel} not found in {}", elf.display());
        assert_eq!(vector, must, "{kernel} {flavour:?}: vector instructions present = {vector}\n{body}");
        let _ = std::fs::remove_file(&elf);
    }
}

fn expf_stays_within_its_stated_bound(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench).expect("stack");
    let n = 4096usize;
    // A sweep over the normal-result range plus random points.
    let mut g = Rng(99);
    let xs: Vec<f32> = (0..n).map(|i| if i % 2 == 0 { -87.0 + 175.0 * i as f32 / n as f32 } else { g.f32(87.0) }).collect();
    let want: Vec<f32> = xs.iter().map(|&x| (x as f64).exp() as f32).collect();
    let case = Case {
        kernel: "exp_f32",
        sig: "buf,buf,u32",
        inputs: vec![f32_bytes(&xs)],
        outputs: vec![(4 * n, Rule::Ulp { want, max: r::EXPF_MAX_ULP })],
        scalars: vec![Scalar::U32(n as u32)],
        byte_kernel: false,
    };
    let worst = run_case(&tc, &stack, &case, Flavour::Scalar).expect("expf");
    println!("hrx_expf: max {worst} ulp over {n} points (stated bound {} ulp)", r::EXPF_MAX_ULP);
    // Special values.
    let special = [f32::NAN, 100.0, -200.0, 0.0, 88.7, -87.5];
    let case = Case {
        kernel: "exp_f32",
        sig: "buf,buf,u32",
        inputs: vec![f32_bytes(&special)],
        outputs: vec![(
            24,
            Rule::Ulp {
                want: vec![f32::NAN, f32::INFINITY, 0.0, 1.0, (88.7f32 as f64).exp() as f32, (-87.5f64).exp() as f32],
                max: r::EXPF_MAX_ULP,
            },
        )],
        scalars: vec![Scalar::U32(6)],
        byte_kernel: false,
    };
    run_case(&tc, &stack, &case, Flavour::Scalar).expect("expf special values");
}

fn model_runs_through_the_stack_with_numerics_and_latency(board: &'static Board) {
    if tools().is_none() {
        return;
    }
    let report = hexrpc_scenarios::run_model(&ModelOptions { board, ..ModelOptions::default() }).expect("model");
    assert_eq!(report.runs, 1000);
    assert_eq!(report.simulated.count, 1000);
    assert_eq!(report.host_wall.count, 1000);
    assert_eq!(report.nodes.len(), 5);
    assert!(report.simulated.p50 > Duration::ZERO && report.simulated.p50 <= report.simulated.p90);
    assert!(report.simulated.p90 <= report.simulated.p99 && report.simulated.p99 <= report.simulated.max);
    let total: f32 = report.output.iter().sum();
    assert!((total - 1.0).abs() < 1e-5, "{:?}", report.output);
    // The same network as one batch per run: one crossing, one map per distinct lease, the same
    // per-node numerics (checked inside), cheaper on the cost model.
    let b = &report.batch;
    assert_eq!((b.runs, b.launches_per_run, b.nodes.len()), (1000, 5, 5));
    assert_eq!(b.crossings_per_run, 1.0);
    assert_eq!(b.distinct_leases, 2, "weights and activations");
    assert_eq!(b.maps_per_run, 2.0);
    assert!(b.simulated.p50 < report.simulated.p50, "{} vs {}", b.simulated, report.simulated);
    println!("numerics: {}", report.numerics_line());
    println!("latency: {}", report.latency_line());
    println!("batch numerics: {}", report.batch_numerics_line());
    println!("batch latency: {}", report.batch_latency_line());
    for n in &report.nodes {
        println!("  {:>8}: {} elements, {}, max {} ulp, max rel {:e}", n.name, n.elements, n.rule, n.max_ulp, n.max_rel);
    }
}

/// tinygrad's v1 packing, by hand (the runtime's packer refuses v1 with an offset): slot i =
/// size_i as i32, then scalar slots; pra 1 = u32 offsets; pra 2 = 8-byte timer; handles NOVA.
fn v1_args(sizes: &[u32], offsets: &[u32], scalars: &[u32]) -> (Vec<u8>, Vec<u8>) {
    let mut pra0 = Vec::new();
    for s in sizes.iter().chain(scalars) {
        pra0.extend_from_slice(&(*s as u64).to_le_bytes());
    }
    let pra1 = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
    (pra0, pra1)
}

fn v2_handles_offset_views_where_v1_shows_the_seed_defect(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let (off, len) = (64usize, 256usize);

    // v2: correct bytes, exact unmaps, nothing live afterwards.
    let v2 = stack.open("bump_v2", build_image(&tc, "bump_u8", "buf,u32", EntryOptions::V2, Flavour::Scalar).unwrap()).unwrap();
    let mut lease = stack.session().alloc(8192).unwrap();
    lease.fill(0, 8192, 10).unwrap();
    let view = lease.view(off, len).unwrap();
    stack::launch(&v2, &sig, &[&view], &[Scalar::U32(len as u32)]).expect("v2 launch");
    let mut all = vec![0u8; 8192];
    lease.read_at(0, &mut all).unwrap();
    assert!(all[off..off + len].iter().all(|&b| b == 11) && all[..off].iter().chain(&all[off + len..]).all(|&b| b == 10));
    assert_eq!(bench.ledger_mismatches(), 0);
    let e2 = executor::executors(&bench).into_iter().find(|e| e.library.starts_with("bump_v2")).unwrap();
    assert_eq!(e2.stats.live_mappings, 0);

    // The host packer refuses v1 with a non-zero offset before anything is sent.
    let refused = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::of(&view)], &[Scalar::U32(len as u32)]);
    assert!(matches!(refused, Err(PackError::V1NonZeroOffset { buffer: 0, offset: 64 })), "{refused:?}");

    // v1, packed by hand as tinygrad does: the entry maps `len` bytes at file offset 0, hands the
    // kernel base + off (inside the same page here, so the bytes happen to be right), then
    // HAP_munmap(base + off, len): the runtime's table refuses it and the mapping leaks.
    let v1 = stack.open("bump_v1", build_image(&tc, "bump_u8", "buf,u32", EntryOptions::V1, Flavour::Scalar).unwrap()).unwrap();
    bench.clear_ledger();
    let (pra0, pra1) = v1_args(&[len as u32], &[off as u32], &[len as u32]);
    let mut timer = [0u8; 8];
    let mut args = Call::<8>::new(2).unwrap();
    args.input(&pra0).unwrap();
    args.input(&pra1).unwrap();
    args.output(&mut timer).unwrap();
    args.out_handle_sized(view.fd(), FASTRPC_ATTR_NOVA, view.lease_len() as u64).unwrap();
    v1.invoke(&mut args).expect("v1 returns 0: the defect is silent to the host");
    lease.read_at(0, &mut all).unwrap();
    assert!(all[off..off + len].iter().all(|&b| b == 12));
    let ledger = bench.ledger();
    let unmap = ledger.iter().find_map(|e| match e.event {
        LedgerEvent::Unmap { addr, len, matched } => Some((addr, len, matched)),
        _ => None,
    });
    let map = ledger.iter().find_map(|e| match e.event {
        LedgerEvent::Map { addr, len, .. } => Some((addr, len)),
        _ => None,
    });
    let (maddr, mlen) = map.expect("v1 mapped");
    assert_eq!(mlen, len as u32, "v1 maps the view length, not the lease");
    assert_eq!(unmap, Some((maddr + off as u32, len as u32, false)), "HAP_munmap(base + off) must be refused: {ledger:?}");
    assert_eq!(bench.ledger_mismatches(), 1);
    let e1 = executor::executors(&bench).into_iter().find(|e| e.library.starts_with("bump_v1")).unwrap();
    assert_eq!(e1.stats.live_mappings, 1, "the real mapping leaked");

    // v1 with a view past the mapping's (64 KiB, qemu's page) rounding: the kernel runs off the
    // end of its mapping into the runtime's guard; the DSP process dies and the host sees a DSP
    // restart (on a device it would scribble over whatever is mapped there).
    const BIG: usize = 1 << 16;
    let mut big = stack.session().alloc(3 * BIG).unwrap();
    big.fill(0, 3 * BIG, 10).unwrap();
    let far = big.view(BIG, BIG).unwrap();
    let (pra0, pra1) = v1_args(&[BIG as u32], &[BIG as u32], &[BIG as u32]);
    let mut args = Call::<8>::new(2).unwrap();
    args.input(&pra0).unwrap();
    args.input(&pra1).unwrap();
    args.output(&mut timer).unwrap();
    args.out_handle_sized(far.fd(), FASTRPC_ATTR_NOVA, far.lease_len() as u64).unwrap();
    let err = v1.invoke(&mut args).expect_err("v1 past its mapping must fault");
    assert_eq!(err.cause, Cause::DspRestart, "{err}");
    let mut all = vec![0u8; 3 * BIG];
    big.read_at(0, &mut all).unwrap();
    assert!(all[BIG..].iter().all(|&b| b == 10), "the faulting v1 call changed nothing in its view");
    // v2 with the same view after recovery: correct, and only the view changes.
    stack.session().recover().expect("recover");
    stack::launch(&v2, &sig, &[&far], &[Scalar::U32(BIG as u32)]).expect("v2 after recovery");
    big.read_at(0, &mut all).unwrap();
    assert!(all[BIG..2 * BIG].iter().all(|&b| b == 11) && all[..BIG].iter().chain(&all[2 * BIG..]).all(|&b| b == 10));
}

fn executor_faults_become_dsp_errors_and_recover(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::with_config(BenchConfig { executor_timeout: Duration::from_millis(1500), ..BenchConfig::for_board(board) });
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let spin = stack.open("spin", build_image(&tc, "spin_u32", "buf,u32", EntryOptions::V2, Flavour::Scalar).unwrap()).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(8, 4).unwrap();
    let read = |v: &BufferView<'_>| {
        let mut b = [0u8; 4];
        v.read(&mut b).unwrap();
        u32::from_le_bytes(b)
    };

    // A normal call.
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(1000)]).expect("spin 1000");
    assert_eq!(read(&out), 1000);

    // Killed mid-launch: the call in flight returns a DSP restart.
    let pid = executor::executors(&bench).iter().find(|e| e.library.starts_with("spin")).unwrap().os_pid;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    });
    let t0 = Instant::now();
    let err = stack::launch(&spin, &sig, &[&out], &[Scalar::U32(0)]).expect_err("killed");
    killer.join().unwrap();
    assert!(matches!(err, ModelError::Hal(ref e) if e.cause == Cause::DspRestart), "{err}");
    // Ended by the kill, not by the call limit: the restart's own reason says which.
    let reason = bench.last_restart().expect("a restart reason");
    assert!(matches!(reason, RestartReason::Fault { .. }), "ended by the kill, not the call limit: {reason:?} after {:?}", t0.elapsed());
    assert!(!stack.session().is_healthy());
    // Recovery re-opens the library (fetched again through the reverse service: a new executor).
    stack.session().recover().expect("recover");
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(777)]).expect("rerun");
    assert_eq!(read(&out), 777);
    let now = executor::executors(&bench);
    assert!(now.iter().any(|e| e.os_pid != pid && e.alive), "{now:?}");

    // A hang: bounded by the executor timeout, then a DSP restart.
    let t0 = Instant::now();
    let err = stack::launch(&spin, &sig, &[&out], &[Scalar::U32(0)]).expect_err("hang");
    let took = t0.elapsed();
    assert!(matches!(err, ModelError::Hal(ref e) if e.cause == Cause::DspRestart), "{err}");
    assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(5), "{took:?}");
    stack.session().recover().expect("recover after hang");
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(5)]).expect("rerun after hang");
    assert_eq!(read(&out), 5);

    // A non-zero return of the entry is the AEE code (here v2's validation: bad magic), and the
    // session stays healthy.
    let mut pra0 = vec![0u8; 24];
    pra0[4] = 1;
    let pra1 = [0u8; 8];
    let mut timer = [0u8; 8];
    let mut args = Call::<8>::new(2).unwrap();
    args.input(&pra0).unwrap();
    args.input(&pra1).unwrap();
    args.output(&mut timer).unwrap();
    args.out_handle_sized(out.fd(), FASTRPC_ATTR_NOVA, out.lease_len() as u64).unwrap();
    let err = spin.invoke(&mut args).expect_err("bad magic");
    assert_eq!(err.cause, Cause::Dsp(14), "{err}");
    assert!(stack.session().is_healthy());
}

fn hap_power_set_is_accepted_and_recorded(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    // tinygrad's entry: v1 with its power request first.
    let lib = stack.open("relu_tg", build_image(&tc, "relu_f32", "buf,buf,u32", EntryOptions::TINYGRAD, Flavour::Scalar).unwrap()).unwrap();
    let lease = stack.session().alloc(8192).unwrap();
    let xs: Vec<f32> = (0..64).map(|i| i as f32 - 32.0).collect();
    let mut input = stack.session().alloc(4096).unwrap();
    input.write_at(0, &f32_bytes(&xs)).unwrap();
    let (a, o) = (input.view(0, 256).unwrap(), lease.view(0, 256).unwrap());
    let sig = Signature::parse("buf,buf,u32").unwrap();
    let mut packed = PackedLaunch::new(AbiVersion::V1, &sig, &[BufferRef::of(&a), BufferRef::of(&o)], &[Scalar::U32(64)]).unwrap();
    lib.invoke(&mut packed.invoke_args().unwrap()).expect("v1 offset-0 launch");
    let mut b = vec![0u8; 256];
    o.read(&mut b).unwrap();
    assert_eq!(f32s_of(&b), r::relu_f32(&xs));
    let e = executor::executors(&bench).into_iter().find(|e| e.library.starts_with("relu_tg")).unwrap();
    let p = e.stats.power_requests.iter().map(|p| (p.request_type, p.dcvs_enable, p.latency, p.target_corner)).collect::<Vec<_>>();
    assert_eq!(p, vec![(7, 0, 100, 6)], "tinygrad's request, every field read back");
    assert_eq!(bench.ledger_mismatches(), 0, "v1 with offset-0 views keeps the contract");
}

/// Whether host process `pid` still runs (a zombie has ended).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Waits up to `within` for `pid` to end.
fn ends_within(pid: u32, within: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !running(pid)
}

/// The work directories of process `pid`'s shells that exist now.
fn work_dirs_of(pid: u32) -> Vec<String> {
    let mine = format!("hexrpc-exec-{pid}");
    std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n == &mine || n.starts_with(&format!("{mine}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// A launch abandoned at its deadline does not leave its shell running: recovery, closing the
/// session and dropping the bench end every shell at once (long before the executor timeout,
/// which would otherwise keep the hung call and its qemu-hexagon alive), and no work directory
/// is left behind.
fn abandoned_shells_end_with_their_process(board: &'static Board) {
    let Some(tc) = tools() else { return };
    let bench = Bench::with_config(BenchConfig { executor_timeout: Duration::from_secs(120), ..BenchConfig::for_board(board) });
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,u32").unwrap();
    let spin = stack.open("spin", build_image(&tc, "spin_u32", "buf,u32", EntryOptions::V2, Flavour::Scalar).unwrap()).unwrap();
    let lease = stack.session().alloc(4096).unwrap();
    let out = lease.view(8, 4).unwrap();
    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(10)]).expect("spin 10");
    let first = executor::executors(&bench).iter().find(|e| e.library.starts_with("spin")).unwrap().os_pid;
    assert!(running(first));

    // Abandoned at its deadline: the kernel spins forever.
    let bufs = [BufferRef::of(&out)];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(0)]).unwrap();
    let err = spin.invoke_with_deadline(&mut packed.invoke_args().unwrap(), Duration::from_millis(300)).expect_err("deadline");
    assert!(!stack.session().is_healthy(), "{err}");
    stack.session().recover().expect("recover");
    assert!(ends_within(first, Duration::from_secs(5)), "the abandoned launch's shell {first} still runs after recover()");

    stack::launch(&spin, &sig, &[&out], &[Scalar::U32(3)]).expect("after recovery");
    let second = executor::executors(&bench).iter().find(|e| e.library.starts_with("spin") && e.alive).unwrap().os_pid;
    assert_ne!(second, first);
    // Abandon again, then close everything without recovering.
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &bufs, &[Scalar::U32(0)]).unwrap();
    spin.invoke_with_deadline(&mut packed.invoke_args().unwrap(), Duration::from_millis(300)).expect_err("deadline");
    drop(lease);
    drop(spin);
    drop(stack);
    drop(bench);
    assert!(ends_within(second, Duration::from_secs(5)), "shell {second} still runs after the session closed");
    // Shells of tests running in parallel may be starting: their directories live for
    // milliseconds only.
    let me = std::process::id();
    let t0 = Instant::now();
    while !work_dirs_of(me).is_empty() && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(work_dirs_of(me).is_empty(), "left behind: {:?}", work_dirs_of(me));
}

/// A shell dies with the process that started it, even when that process ends without any
/// cleanup (its parent-death signal), and leaves no work directory behind. The test runs itself
/// as a child process that starts a shell and exits at once.
#[test]
fn shells_die_with_their_host_process() {
    const ROLE: &str = "HEXRPC_TEST_SHELL_HOST";
    let Some(tc) = tools() else { return };
    let shell = executor::build_shell(&tc).unwrap();
    if std::env::var_os(ROLE).is_some() {
        // Started from a short-lived thread: the shell must survive the thread, not the process.
        let qemu = tc.qemu.to_string_lossy().into_owned();
        let p = std::thread::spawn(move || executor::ExecProcess::spawn(&qemu, &shell, Duration::from_secs(30)).expect("spawn"))
            .join()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        println!("SHELL {} {} {}", p.pid(), running(p.pid()), std::process::id());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        std::mem::forget(p);
        std::process::exit(0);
    }
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["shells_die_with_their_host_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, "1")
        .output()
        .expect("run the test binary as the shell's host");
    let text = String::from_utf8_lossy(&child.stdout);
    let line = text.lines().find_map(|l| l.split_once("SHELL ").map(|(_, rest)| rest)).unwrap_or_else(|| panic!("child said: {text}"));
    let words: Vec<&str> = line.split(' ').collect();
    let (pid, alive, host): (u32, &str, u32) = (words[0].parse().unwrap(), words[1], words[2].parse().unwrap());
    assert_eq!(alive, "true", "the shell must outlive the thread that started it");
    assert!(ends_within(pid, Duration::from_secs(5)), "shell {pid} outlived its host process");
    assert!(work_dirs_of(host).is_empty(), "the host process left its work directory: {:?}", work_dirs_of(host));
}

/// HAP events of the ledger: (maps, matched unmaps).
fn hap_counts(bench: &Bench) -> (usize, usize) {
    let ledger = bench.ledger();
    let m = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Map { .. })).count();
    let u = ledger.iter().filter(|e| matches!(e.event, LedgerEvent::Unmap { matched: true, .. })).count();
    (m, u)
}

/// Live mappings in the shell that runs library `name`.
fn live_in(bench: &Bench, name: &str) -> u32 {
    executor::executors(bench).into_iter().find(|e| e.library.starts_with(name)).map_or(u32::MAX, |e| e.stats.live_mappings)
}

/// The map cache with the executor (the real generated entry under qemu-hexagon): launches on
/// the same leases make no `HAP_mmap` in steady state, where the same kernel without the cache
/// maps and unmaps each lease on every launch; dropping a lease releases its mapping in the
/// shell before its number is given up, and a new lease under that number is mapped afresh and
/// read with its own bytes.
fn steady_state_launches_map_no_lease_with_the_map_cache(board: &'static Board) {
    let Some(tc) = tools() else { return };
    const LAUNCHES: usize = 5;
    let bench = Bench::for_board(board);
    let stack = Stack::start(bench.clone()).expect("stack");
    let sig = Signature::parse("buf,buf,u32").unwrap();
    let (n, in_off, out_off) = (64usize, 256usize, 512usize);
    for cached in [false, true] {
        let opts = if cached { EntryOptions::V2_CACHED } else { EntryOptions::V2 };
        let name = if cached { "relu_cached" } else { "relu_plain" };
        let image = build_image(&tc, "relu_f32", "buf,buf,u32", opts, Flavour::Scalar).unwrap();
        let lib = stack.open_with(name, image, cached).unwrap();
        assert_eq!(lib.map_cache(), cached);
        let mut input = stack.session().alloc(8192).unwrap();
        let output = stack.session().alloc(8192).unwrap();
        let run = |input: &mut hexrpc_hal::Lease<'_, Bench>, round: usize| {
            let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 32.0) * (round + 1) as f32).collect();
            input.write_at(in_off, &f32_bytes(&xs)).unwrap();
            let (a, o) = (input.view(in_off, 4 * n).unwrap(), output.view(out_off, 4 * n).unwrap());
            stack::launch(&lib, &sig, &[&a, &o], &[Scalar::U32(n as u32)]).expect("launch");
            let mut got = vec![0u8; 4 * n];
            o.read(&mut got).unwrap();
            assert_eq!(f32s_of(&got), r::relu_f32(&xs), "cached={cached} round {round}");
        };
        run(&mut input, 0);
        bench.clear_ledger();
        for round in 1..=LAUNCHES {
            run(&mut input, round);
        }
        let per_launch = if cached { 0 } else { 2 };
        assert_eq!(hap_counts(&bench), (per_launch * LAUNCHES, per_launch * LAUNCHES), "cached={cached}: {:?}", bench.ledger());
        assert_eq!(live_in(&bench, name), if cached { 2 } else { 0 }, "cached={cached}");
        // Dropping a lease releases its mapping (cached) before its number is given up.
        let fd = input.fd();
        bench.clear_ledger();
        drop(input);
        assert_eq!(hap_counts(&bench), (0, usize::from(cached)), "cached={cached}: {:?}", bench.ledger());
        assert_eq!(live_in(&bench, name), u32::from(cached), "cached={cached}");
        // A new lease (downstream: under the same number) is mapped afresh, with its bytes.
        // (Other tests of this binary allocate beside it: a few tries for the number.)
        let mut spare = Vec::new();
        let mut again = stack.session().alloc(8192).unwrap();
        while again.fd() != fd && spare.len() < 16 {
            spare.push(again);
            again = stack.session().alloc(8192).unwrap();
        }
        drop(spare);
        run(&mut again, 7);
        assert!(
            bench.ledger().iter().any(|e| matches!(e.event, LedgerEvent::Map { fd, .. } if fd == again.fd().0)),
            "cached={cached}: {:?}",
            bench.ledger()
        );
        drop(again);
        drop(output);
        assert_eq!(live_in(&bench, name), 0, "cached={cached}: every mapping released with its lease");
        assert_eq!(bench.ledger_mismatches(), 0, "cached={cached}: {:?}", bench.ledger());
    }
}
