//! The generated entry, compiled by the host `cc` (`-Wall -Werror`) against the HAP shim in
//! `runtime/c/`, run on argument arrays built from the packer's output: for every buffer count
//! 0..=15 and a mix of scalar types, in both versions, it must map, hand over and unmap exactly
//! what the *inputs* describe (expectations are computed from the buffers and scalars given to
//! the packer, not from the ABI table). Also: v2 validation, unwinding, the timer rule, v1's
//! defect, the power request. Batches: a library with a kernel table runs 1..=MAX_BATCH_LAUNCHES
//! records over shared leases, maps each lease once, runs a full table of MAX_BATCH_KERNELS
//! kernels, runs a batch at each capacity and refuses one past it, refuses every hostile field
//! before mapping anything, stops at a failing kernel and still unmaps everything.
//!
//! Skips (with a message) when no host C compiler is found (`HEXRPC_HOST_CC`, default `cc`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use hexrpc_drivers::Fd;
use hexrpc_runtime::launch::{
    write_batch_entry, write_entry, AbiVersion, Batch, BufferRef, EntryOptions, KernelSpec, PackError, PackedLaunch, ParamKind, Scalar,
    ScalarType, Signature, BATCH, MAX_BATCH_KERNELS, MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES, MAX_BATCH_RECORD_BYTES, V1,
};

const HANDLE: u64 = 0x1234;

fn host_cc() -> Option<String> {
    let cc = std::env::var("HEXRPC_HOST_CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => Some(cc),
        _ => {
            eprintln!("SKIPPED: no host C compiler `{cc}` (set HEXRPC_HOST_CC); the generated entry was not run on the host");
            None
        }
    }
}

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
}

fn work_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hexrpc-launch-cc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cc_run(cc: &str, args: &[&std::ffi::OsStr]) {
    let out = Command::new(cc).args(args).output().unwrap();
    assert!(out.status.success(), "{cc} {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// The shim and harness objects, compiled once per test binary.
fn support(cc: &str) -> &'static (PathBuf, PathBuf) {
    static OBJS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    OBJS.get_or_init(|| {
        let d = work_dir("support");
        let (shim, harness) = (d.join("shim.o"), d.join("harness.o"));
        for (src, obj) in [("launch_shim.c", &shim), ("launch_harness.c", &harness)] {
            let src = c_dir().join(src);
            cc_run(cc, &["-Wall".as_ref(), "-Werror".as_ref(), "-c".as_ref(), src.as_os_str(), "-o".as_ref(), obj.as_os_str()]);
        }
        (shim, harness)
    })
}

/// A kernel that reports every argument it receives to the shim.
fn kernel_source(sig: &Signature) -> String {
    let mut s = String::from("#include \"launch_shim.h\"\nvoid kern(");
    for (i, p) in sig.params().iter().enumerate() {
        let sep = if i > 0 { ", " } else { "" };
        match p {
            ParamKind::Buffer => write!(s, "{sep}void *p{i}").unwrap(),
            ParamKind::Scalar(t) => write!(s, "{sep}{} p{i}", t.c_type()).unwrap(),
        }
    }
    if sig.params().is_empty() {
        s.push_str("void");
    }
    s.push_str(") {\n");
    let n = sig.buffers();
    for i in 0..n {
        writeln!(s, "  hrx_test_buf({i}u, p{i});").unwrap();
    }
    for (j, t) in sig.scalar_types().enumerate() {
        let p = n + j;
        match t {
            ScalarType::F32 => writeln!(s, "  {{ union {{ float f; unsigned int u; }} c; c.f = p{p}; hrx_test_bits({j}u, c.u); }}"),
            ScalarType::F64 => writeln!(s, "  {{ union {{ double f; unsigned long long u; }} c; c.f = p{p}; hrx_test_bits({j}u, c.u); }}"),
            t if t.is_signed_int() => writeln!(s, "  hrx_test_int({j}u, (long long)p{p});"),
            _ => writeln!(s, "  hrx_test_uint({j}u, (unsigned long long)p{p});"),
        }
        .unwrap();
    }
    s.push_str("}\n");
    s
}

/// Generates the entry, compiles it with `-Wall -Werror`, links the harness.
fn build_harness(cc: &str, name: &str, sig: &Signature, opts: &EntryOptions) -> PathBuf {
    let (shim, harness) = support(cc);
    let d = work_dir(name);
    let mut entry = String::new();
    write_entry(&mut entry, sig, "kern", opts).unwrap();
    std::fs::write(d.join("entry.c"), entry).unwrap();
    std::fs::write(d.join("kernel.c"), kernel_source(sig)).unwrap();
    let inc = c_dir();
    let (entry_c, entry_o, kernel_c, kernel_o, exe) =
        (d.join("entry.c"), d.join("entry.o"), d.join("kernel.c"), d.join("kernel.o"), d.join("harness"));
    cc_run(cc, &["-Wall".as_ref(), "-Werror".as_ref(), "-c".as_ref(), entry_c.as_os_str(), "-o".as_ref(), entry_o.as_os_str()]);
    cc_run(
        cc,
        &[
            "-Wall".as_ref(),
            "-Werror".as_ref(),
            "-I".as_ref(),
            inc.as_os_str(),
            "-c".as_ref(),
            kernel_c.as_os_str(),
            "-o".as_ref(),
            kernel_o.as_os_str(),
        ],
    );
    cc_run(cc, &["-o".as_ref(), exe.as_os_str(), entry_o.as_os_str(), kernel_o.as_os_str(), shim.as_os_str(), harness.as_os_str()]);
    exe
}

fn run(exe: &Path, input: &str) -> String {
    let mut child = Command::new(exe).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "harness failed: {}\ninput:\n{input}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The DSP's view of a launch: what the bench's DSP model (and the real framework) presents to
/// the entry, built from the packer's `InvokeArgs`.
#[derive(Clone, Debug)]
struct DspView {
    sc: u32,
    pra0: Vec<u8>,
    pra1: Vec<u8>,
    pra2_len: usize,
    /// (fd, dma.offset) per handle.
    handles: Vec<(i32, u32)>,
    /// (fd, size) the shim may map.
    files: Vec<(i32, u64)>,
    fail_map: Option<usize>,
}

impl DspView {
    fn of(packed: &mut PackedLaunch<'_>, leases: &[(i32, u64)]) -> DspView {
        let (p0, p1) = (packed.pra0().as_ptr() as u64, packed.pra1().as_ptr() as u64);
        let (pra0, pra1) = (packed.pra0().to_vec(), packed.pra1().to_vec());
        let mut call = packed.invoke_args().unwrap();
        let args = call.to_downstream().unwrap();
        let pra = args.pra();
        // The argument array points at the packed bytes themselves, not at copies.
        assert_eq!((pra[0].buf().pv, pra[0].buf().len), (p0, pra0.len() as u64));
        assert_eq!((pra[1].buf().pv, pra[1].buf().len), (p1, pra1.len() as u64));
        assert_eq!(&args.fds()[..3], &[-1, -1, -1]);
        assert!(args.attrs()[3..].iter().all(|&a| a == hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA));
        let handles = (3..pra.len()).map(|k| (args.fds()[k], pra[k].buf().pv as u32)).collect();
        DspView {
            sc: args.scalars().raw(),
            pra0,
            pra1,
            pra2_len: pra[2].buf().len as usize,
            handles,
            files: leases.to_vec(),
            fail_map: None,
        }
    }

    fn input(&self) -> String {
        let pad = |x: usize| x.div_ceil(8) * 8;
        let (a0, a1) = (0, pad(self.pra0.len()));
        let a2 = a1 + pad(self.pra1.len());
        let mut arena = vec![0u8; a2 + self.pra2_len];
        arena[a0..a0 + self.pra0.len()].copy_from_slice(&self.pra0);
        arena[a1..a1 + self.pra1.len()].copy_from_slice(&self.pra1);
        let hex: String = arena.iter().map(|b| format!("{b:02x}")).collect();
        let mut s = format!("sc {} handle {HANDLE} arena {} {}\n", self.sc, arena.len(), if hex.is_empty() { "-" } else { &hex });
        writeln!(s, "nargs {}", 3 + self.handles.len()).unwrap();
        writeln!(s, "buf {a0} {}\nbuf {a1} {}\nbuf {a2} {}", self.pra0.len(), self.pra1.len(), self.pra2_len).unwrap();
        for (fd, off) in &self.handles {
            writeln!(s, "dma {fd} {off}").unwrap();
        }
        for (fd, size) in &self.files {
            writeln!(s, "file {fd} {size}").unwrap();
        }
        if let Some(k) = self.fail_map {
            writeln!(s, "failmap {k}").unwrap();
        }
        s.push_str("end\n");
        s
    }
}

fn sample(t: ScalarType, k: usize) -> Scalar {
    let k8 = k as u8;
    match t {
        ScalarType::I8 => Scalar::I8(-3i8 - k8 as i8),
        ScalarType::U8 => Scalar::U8(200u8.wrapping_add(k8)),
        ScalarType::I16 => Scalar::I16(-1000 - k as i16),
        ScalarType::U16 => Scalar::U16(60000 + k as u16),
        ScalarType::I32 => Scalar::I32(-123_456 * (k as i32 + 1)),
        ScalarType::U32 => Scalar::U32(0xF000_0000 + k as u32),
        ScalarType::I64 => Scalar::I64(-(1i64 << 40) - k as i64),
        ScalarType::U64 => Scalar::U64(u64::MAX - k as u64),
        ScalarType::F16 => Scalar::F16(0x3c00 + k as u16),
        ScalarType::F32 => Scalar::F32(-1.5 - k as f32 * 0.25),
        ScalarType::F64 => Scalar::F64(2.0e100 / (k as f64 + 1.0)),
    }
}

fn expect_scalar(out: &mut String, j: usize, s: &Scalar) {
    match *s {
        Scalar::I8(v) => writeln!(out, "kint {j} {v}"),
        Scalar::I16(v) => writeln!(out, "kint {j} {v}"),
        Scalar::I32(v) => writeln!(out, "kint {j} {v}"),
        Scalar::I64(v) => writeln!(out, "kint {j} {v}"),
        Scalar::U8(v) => writeln!(out, "kuint {j} {v}"),
        Scalar::U16(v) | Scalar::F16(v) => writeln!(out, "kuint {j} {v}"),
        Scalar::U32(v) => writeln!(out, "kuint {j} {v}"),
        Scalar::U64(v) => writeln!(out, "kuint {j} {v}"),
        Scalar::F32(v) => writeln!(out, "kbits {j} {:#x}", v.to_bits()),
        Scalar::F64(v) => writeln!(out, "kbits {j} {:#x}", v.to_bits()),
    }
    .unwrap();
}

/// A signature of `n` buffers and a rotating mix of three scalar types.
fn mixed_signature(n: usize) -> (Signature, Vec<Scalar>) {
    let types: Vec<ScalarType> = (0..3).map(|k| ScalarType::ALL[(n + 4 * k) % ScalarType::ALL.len()]).collect();
    let mut params = vec![ParamKind::Buffer; n];
    params.extend(types.iter().map(|t| ParamKind::Scalar(*t)));
    let scalars = types.iter().enumerate().map(|(k, t)| sample(*t, n + k)).collect();
    (Signature::new(&params).unwrap(), scalars)
}

const TIMER_37: &str = "2500000000000000";

#[test]
fn v2_entry_maps_hands_over_and_unmaps_exact_leases_for_0_to_15_buffers() {
    let Some(cc) = host_cc() else { return };
    let owner = ();
    let mut cases: Vec<(Signature, Vec<Scalar>)> = (0..=15).map(mixed_signature).collect();
    // And every scalar type at once.
    let mut all = vec![ParamKind::Buffer; 2];
    all.extend(ScalarType::ALL.map(ParamKind::Scalar));
    cases.push((Signature::new(&all).unwrap(), ScalarType::ALL.iter().enumerate().map(|(k, t)| sample(*t, k)).collect()));
    for (case, (sig, scalars)) in cases.iter().enumerate() {
        let n = sig.buffers();
        // Leases of 1-3 pages; odd buffers are views at a non-zero offset.
        let bufs: Vec<(i32, u64, u64, u64)> = (0..n)
            .map(|i| {
                let lease = 4096 * (1 + i as u64 % 3) + 8 * i as u64;
                let off = if i % 2 == 1 { 16 * i as u64 + 8 } else { 0 };
                (20 + i as i32, lease, off, lease - off - i as u64)
            })
            .collect();
        let refs: Vec<BufferRef<'_>> =
            bufs.iter().map(|&(fd, lease, off, len)| BufferRef::borrowing(&owner, Fd(fd), lease, off, len)).collect();
        let mut packed = PackedLaunch::new(AbiVersion::V2, sig, &refs, scalars).unwrap();
        let leases: Vec<(i32, u64)> = bufs.iter().map(|b| (b.0, b.1)).collect();
        let view = DspView::of(&mut packed, &leases);
        let exe = build_harness(&cc, &format!("v2-{case}"), sig, &EntryOptions::V2);
        let got = run(&exe, &view.input());

        let mut want = String::new();
        for (i, (fd, lease, _, _)) in bufs.iter().enumerate() {
            writeln!(want, "map #{i} fd={fd} len={lease} prot=3 flags=0 off=0").unwrap();
        }
        for (i, (_, lease, off, _)) in bufs.iter().enumerate() {
            writeln!(want, "kbuf {i} map=#{i} at={off} room={}", lease - off).unwrap();
        }
        for (j, s) in scalars.iter().enumerate() {
            expect_scalar(&mut want, j, s);
        }
        for (i, (_, lease, _, _)) in bufs.iter().enumerate().rev() {
            writeln!(want, "unmap #{i} len={lease}").unwrap();
        }
        writeln!(want, "rc 0\npra2 {TIMER_37}\nlive 0").unwrap();
        assert_eq!(got, want, "signature {sig}");
    }
}

#[test]
fn v1_entry_matches_tinygrads_contract_for_0_to_15_buffers() {
    let Some(cc) = host_cc() else { return };
    let owner = ();
    for n in 0..=15 {
        let (sig, scalars) = mixed_signature(n);
        // Offset 0 (all v1 can do); leases longer than the views: v1 maps the view length only.
        let bufs: Vec<(i32, u64, u64)> = (0..n).map(|i| (40 + i as i32, 8192 + 64 * i as u64, 100 + 300 * i as u64)).collect();
        let refs: Vec<BufferRef<'_>> = bufs.iter().map(|&(fd, lease, len)| BufferRef::borrowing(&owner, Fd(fd), lease, 0, len)).collect();
        let mut packed = PackedLaunch::new(AbiVersion::V1, &sig, &refs, &scalars).unwrap();
        let leases: Vec<(i32, u64)> = bufs.iter().map(|b| (b.0, b.1)).collect();
        let view = DspView::of(&mut packed, &leases);
        let exe = build_harness(&cc, &format!("v1-{n}"), &sig, &EntryOptions::V1);
        let got = run(&exe, &view.input());

        let mut want = String::new();
        for (i, (fd, _, len)) in bufs.iter().enumerate() {
            writeln!(want, "map #{i} fd={fd} len={len} prot=3 flags=0 off=0").unwrap();
        }
        for (i, (_, _, len)) in bufs.iter().enumerate() {
            writeln!(want, "kbuf {i} map=#{i} at=0 room={len}").unwrap();
        }
        for (j, s) in scalars.iter().enumerate() {
            expect_scalar(&mut want, j, s);
        }
        for (i, (_, _, len)) in bufs.iter().enumerate() {
            writeln!(want, "unmap #{i} len={len}").unwrap();
        }
        writeln!(want, "rc 0\npra2 {TIMER_37}\nlive 0").unwrap();
        assert_eq!(got, want, "signature {sig}");
    }
}

fn three_buffer_view(owner: &()) -> (Signature, DspView) {
    let sig = Signature::parse("buf,buf,buf,i32").unwrap();
    let refs = [
        BufferRef::borrowing(owner, Fd(5), 4096, 0, 4096),
        BufferRef::borrowing(owner, Fd(6), 8192, 4096, 1000),
        BufferRef::borrowing(owner, Fd(7), 4096, 24, 8),
    ];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &sig, &refs, &[Scalar::I32(9)]).unwrap();
    let view = DspView::of(&mut packed, &[(5, 4096), (6, 8192), (7, 4096)]);
    (sig, view)
}

#[test]
fn v2_entry_validates_everything_before_mapping() {
    let Some(cc) = host_cc() else { return };
    let (sig, good) = three_buffer_view(&());
    let exe = build_harness(&cc, "v2-validate", &sig, &EntryOptions::V2);
    assert!(run(&exe, &good.input()).ends_with(&format!("rc 0\npra2 {TIMER_37}\nlive 0\n")));

    let refused = "rc 14\npra2 0000000000000000\nlive 0\n";
    let put = |v: &mut Vec<u8>, at: usize, x: u32| v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    let mut cases: Vec<(&str, DspView)> = Vec::new();
    let mut v = good.clone();
    v.pra0[1] ^= 1;
    cases.push(("magic", v));
    let mut v = good.clone();
    put(&mut v.pra0, 4, 2);
    cases.push(("header N", v));
    let mut v = good.clone();
    put(&mut v.pra1, 12, 5095); // buffer 1: off 4096 + len 1000 > lease 5095
    cases.push(("view past lease", v));
    let mut v = good.clone();
    put(&mut v.pra1, 16, 0x10); // buffer 2: off 0x10, len 0xFFFFFFF8, lease 0x20 (off + len wraps to 8)
    put(&mut v.pra1, 20, 0x20);
    put(&mut v.pra0, 24, 0xFFFF_FFF8);
    cases.push(("wrapping off + len", v));
    let mut v = good.clone();
    put(&mut v.pra1, 0, 4097); // buffer 0: off beyond lease
    cases.push(("offset past lease", v));
    let mut v = good.clone();
    v.pra0.pop();
    cases.push(("short pra0", v));
    let mut v = good.clone();
    v.pra1.pop();
    cases.push(("short pra1", v));
    let mut v = good.clone();
    v.sc = (v.sc & !0xf) | 2; // says 2 handles: pra[5] must not be read
    v.handles.pop();
    cases.push(("handle count", v));
    let mut v = good.clone();
    v.sc += 1 << 16; // 3 input buffers
    cases.push(("in count", v));
    for (what, v) in &cases {
        assert_eq!(run(&exe, &v.input()), refused, "{what}");
    }

    // Another method, or attribute bits set: answered 0 without doing anything (tinygrad's rule).
    for sc in [good.sc + (1 << 24), good.sc | (1 << 29)] {
        let v = DspView { sc, ..good.clone() };
        assert_eq!(run(&exe, &v.input()), "rc 0\npra2 0000000000000000\nlive 0\n", "sc {sc:#x}");
    }
}

#[test]
fn v2_entry_unwinds_partial_mappings_in_reverse() {
    let Some(cc) = host_cc() else { return };
    let (sig, good) = three_buffer_view(&());
    let exe = build_harness(&cc, "v2-unwind", &sig, &EntryOptions::V2);
    let v = DspView { fail_map: Some(2), ..good.clone() };
    assert_eq!(
        run(&exe, &v.input()),
        "map #0 fd=5 len=4096 prot=3 flags=0 off=0\nmap #1 fd=6 len=8192 prot=3 flags=0 off=0\nmapfail fd=7 len=4096\n\
         unmap #1 len=8192\nunmap #0 len=4096\nrc 101\npra2 0000000000000000\nlive 0\n"
    );
    let v = DspView { fail_map: Some(0), ..good.clone() };
    assert_eq!(run(&exe, &v.input()), "mapfail fd=5 len=4096\nrc 101\npra2 0000000000000000\nlive 0\n");
    // An fd the DSP cannot map at all fails the same way.
    let v = DspView { files: vec![(5, 4096), (6, 8192)], ..good };
    assert!(run(&exe, &v.input())
        .ends_with("mapfail fd=7 len=4096\nunmap #1 len=8192\nunmap #0 len=4096\nrc 101\npra2 0000000000000000\nlive 0\n"));
}

#[test]
fn v2_entry_writes_the_timer_only_into_8_bytes() {
    let Some(cc) = host_cc() else { return };
    let (sig, good) = three_buffer_view(&());
    let exe = build_harness(&cc, "v2-timer", &sig, &EntryOptions::V2);
    let v = DspView { pra2_len: 4, ..good };
    assert!(run(&exe, &v.input()).ends_with("rc 0\npra2 00000000\nlive 0\n"));
}

#[test]
fn v1_defect_is_reproduced_and_the_packer_refuses_the_launch() {
    let Some(cc) = host_cc() else { return };
    let owner = ();
    let sig = Signature::parse("buf").unwrap();
    let (size, off) = (1000u32, 200u32);
    let view = [BufferRef::borrowing(&owner, Fd(9), 4096, off as u64, size as u64)];
    assert_eq!(PackedLaunch::new(AbiVersion::V1, &sig, &view, &[]).unwrap_err(), PackError::V1NonZeroOffset { buffer: 0, offset: 200 });
    // What tinygrad's host would send for that view (v1 table, by hand).
    let mut pra0 = vec![0u8; V1.pra0_len(1, 0)];
    pra0[V1.buffer_len_offset(0)..][..4].copy_from_slice(&size.to_le_bytes());
    let mut pra1 = vec![0u8; V1.pra1_len(1)];
    pra1[V1.view_offset_offset(0)..][..4].copy_from_slice(&off.to_le_bytes());
    let v = DspView {
        sc: V1.scalars(1).unwrap().raw(),
        pra0,
        pra1,
        pra2_len: 8,
        handles: vec![(9, 0)],
        files: vec![(9, 4096)],
        fail_map: None,
    };
    let exe = build_harness(&cc, "v1-defect", &sig, &EntryOptions::V1);
    // Maps [0, 1000), hands the kernel base + 200 with only 800 bytes of room (200 short), then
    // unmaps (base + 200, 1000): not a mapping, so the real one leaks.
    assert_eq!(
        run(&exe, &v.input()),
        format!("map #0 fd=9 len=1000 prot=3 flags=0 off=0\nkbuf 0 map=#0 at=200 room=800\nunmap-bad map=#0 at=200 len=1000\nrc 0\npra2 {TIMER_37}\nlive 1\n")
    );
}

#[test]
fn power_request_is_made_before_the_method_check() {
    let Some(cc) = host_cc() else { return };
    let owner = ();
    let sig = Signature::parse("buf,f16").unwrap();
    let refs = [BufferRef::borrowing(&owner, Fd(3), 64, 0, 64)];
    let mut packed = PackedLaunch::new(AbiVersion::V1, &sig, &refs, &[Scalar::F16(0x3c00)]).unwrap();
    let good = DspView::of(&mut packed, &[(3, 64)]);
    let exe = build_harness(&cc, "v1-power", &sig, &EntryOptions::TINYGRAD);
    assert_eq!(
        run(&exe, &good.input()),
        format!(
            "power ctx={HANDLE} type=7\nmap #0 fd=3 len=64 prot=3 flags=0 off=0\nkbuf 0 map=#0 at=0 room=64\nkuint 0 15360\nunmap #0 len=64\nrc 0\npra2 {TIMER_37}\nlive 0\n"
        )
    );
    let v = DspView { sc: good.sc + (1 << 24), ..good };
    assert_eq!(run(&exe, &v.input()), format!("power ctx={HANDLE} type=7\nrc 0\npra2 0000000000000000\nlive 0\n"));
}

// ---------------------------------------------------------------------------------------------
// Batches.

/// Kernels of a batch library: each reports its index, then its arguments; a status kernel
/// returns its first scalar.
fn table_source(kernels: &[KernelSpec<'_>]) -> String {
    let mut s = String::from("#include \"launch_shim.h\"\n");
    for (k, spec) in kernels.iter().enumerate() {
        let one = kernel_source(&spec.signature);
        let body = one.split_once("void kern(").unwrap().1;
        let (params, rest) = body.split_once(") {\n").unwrap();
        write!(s, "{} {}({params}) {{\n  hrx_test_kernel({k}u);\n", if spec.returns_status { "int" } else { "void" }, spec.name).unwrap();
        let rest = rest.trim_end().trim_end_matches('}');
        s.push_str(rest);
        if spec.returns_status {
            let first = spec.signature.buffers();
            writeln!(s, "  return p{first};").unwrap();
        }
        s.push_str("}\n");
    }
    s
}

fn build_batch_harness(cc: &str, name: &str, kernels: &[KernelSpec<'_>]) -> PathBuf {
    let (shim, harness) = support(cc);
    let d = work_dir(name);
    let mut entry = String::new();
    write_batch_entry(&mut entry, kernels, &EntryOptions::V2).unwrap();
    std::fs::write(d.join("entry.c"), entry).unwrap();
    std::fs::write(d.join("kernel.c"), table_source(kernels)).unwrap();
    let inc = c_dir();
    let (entry_c, entry_o, kernel_c, kernel_o, exe) =
        (d.join("entry.c"), d.join("entry.o"), d.join("kernel.c"), d.join("kernel.o"), d.join("harness"));
    cc_run(cc, &["-Wall".as_ref(), "-Werror".as_ref(), "-c".as_ref(), entry_c.as_os_str(), "-o".as_ref(), entry_o.as_os_str()]);
    let i = inc.as_os_str();
    cc_run(
        cc,
        &["-Wall".as_ref(), "-Werror".as_ref(), "-I".as_ref(), i, "-c".as_ref(), kernel_c.as_os_str(), "-o".as_ref(), kernel_o.as_os_str()],
    );
    cc_run(cc, &["-o".as_ref(), exe.as_os_str(), entry_o.as_os_str(), kernel_o.as_os_str(), shim.as_os_str(), harness.as_os_str()]);
    exe
}

impl DspView {
    fn of_batch(batch: &mut Batch<'_>, leases: &[(i32, u64)]) -> DspView {
        let (pra0, pra1) = (batch.pra0().to_vec(), batch.pra1().to_vec());
        let mut call = batch.invoke_args().unwrap();
        let args = call.to_downstream().unwrap();
        let pra = args.pra();
        assert_eq!((pra[0].buf().len, pra[1].buf().len), (pra0.len() as u64, pra1.len() as u64));
        assert_eq!(&args.fds()[..3], &[-1, -1, -1]);
        let handles = (3..pra.len()).map(|k| (args.fds()[k], pra[k].buf().pv as u32)).collect();
        DspView {
            sc: args.scalars().raw(),
            pra0,
            pra1,
            pra2_len: pra[2].buf().len as usize,
            handles,
            files: leases.to_vec(),
            fail_map: None,
        }
    }
}

/// One launch of a batch as the test describes it: kernel, views (lease index, offset, length)
/// and scalars.
struct Launch {
    kernel: usize,
    views: Vec<(usize, u64, u64)>,
    scalars: Vec<Scalar>,
}

fn status_hex(done: u32, failed: u32, code: i32, micros: u64) -> String {
    let mut b = Vec::new();
    b.extend_from_slice(b"HRXB");
    b.extend_from_slice(&done.to_le_bytes());
    b.extend_from_slice(&failed.to_le_bytes());
    b.extend_from_slice(&code.to_le_bytes());
    b.extend_from_slice(&micros.to_le_bytes());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Packs `launches` over `leases` (fd, length) with the runtime's `Batch`, runs the harness and
/// returns what it printed together with what the inputs say it must print (maps in lease
/// order, each record's kernel with its pointers and scalars, unmaps in reverse, the status).
/// `stop` is the (record, code) of the kernel expected to fail.
fn run_batch(
    exe: &Path,
    kernels: &[KernelSpec<'_>],
    leases: &[(i32, u64)],
    launches: &[Launch],
    stop: Option<(usize, i32)>,
) -> (String, String) {
    let view = batch_view(kernels, leases, launches);
    let got = run(exe, &view.input());
    let mut want = String::new();
    for (l, (fd, len)) in leases.iter().enumerate() {
        writeln!(want, "map #{l} fd={fd} len={len} prot=3 flags=0 off=0").unwrap();
    }
    let ran = stop.map_or(launches.len(), |(r, _)| r + 1);
    for l in &launches[..ran] {
        writeln!(want, "kernel {}", l.kernel).unwrap();
        for (i, &(li, off, _)) in l.views.iter().enumerate() {
            writeln!(want, "kbuf {i} map=#{li} at={off} room={}", leases[li].1 - off).unwrap();
        }
        for (j, sc) in l.scalars.iter().enumerate() {
            expect_scalar(&mut want, j, sc);
        }
    }
    for (l, (_, len)) in leases.iter().enumerate().rev() {
        writeln!(want, "unmap #{l} len={len}").unwrap();
    }
    let (done, failed, code) = match stop {
        Some((r, c)) => (r as u32, r as u32, c),
        None => (launches.len() as u32, u32::MAX, 0),
    };
    writeln!(want, "rc 0\npra2 {}\nlive 0", status_hex(done, failed, code, 37 * ran as u64)).unwrap();
    (got, want)
}

/// Packs `launches` over `leases` (fd, length) with the runtime's `Batch`: what the entry is
/// handed.
fn batch_view(kernels: &[KernelSpec<'_>], leases: &[(i32, u64)], launches: &[Launch]) -> DspView {
    let owner = ();
    let sigs: Vec<Signature> = kernels.iter().map(|k| k.signature).collect();
    let mut batch = Batch::new(&sigs).unwrap();
    for l in launches {
        let refs: Vec<BufferRef<'_>> =
            l.views.iter().map(|&(li, off, len)| BufferRef::borrowing(&owner, Fd(leases[li].0), leases[li].1, off, len)).collect();
        batch.push(l.kernel, &refs, &l.scalars).unwrap();
    }
    // Leases are numbered in first-use order; the test lists them in that order.
    assert_eq!(batch.fds(), leases.iter().map(|l| Fd(l.0)).collect::<Vec<_>>(), "lease order");
    DspView::of_batch(&mut batch, leases)
}

fn four_kernels() -> Vec<KernelSpec<'static>> {
    vec![
        KernelSpec { name: "k_add", signature: Signature::parse("buf,buf,buf,u32").unwrap(), returns_status: false },
        KernelSpec { name: "k_scale", signature: Signature::parse("buf,f32,i16").unwrap(), returns_status: false },
        KernelSpec { name: "k_check", signature: Signature::parse("buf,buf,i32").unwrap(), returns_status: true },
        KernelSpec { name: "k_none", signature: Signature::parse("").unwrap(), returns_status: false },
    ]
}

/// Launch `r` of a test batch over 3 leases: views at non-zero offsets, leases shared.
fn sample_launch(kernels: &[KernelSpec<'_>], r: usize) -> Launch {
    let kernel = r % kernels.len();
    let views = (0..kernels[kernel].signature.buffers()).map(|i| ((r + i) % 3, 64 * ((r + i) % 60) as u64 + 8, 24 + i as u64)).collect();
    let scalars = kernels[kernel]
        .signature
        .scalar_types()
        .enumerate()
        .map(|(j, t)| if kernels[kernel].returns_status { Scalar::I32(0) } else { sample(t, r + j) })
        .collect();
    Launch { kernel, views, scalars }
}

const LEASES3: [(i32, u64); 3] = [(30, 8192), (31, 4096 + 64), (32, 3 * 4096)];

#[test]
fn batch_entry_runs_1_to_the_capacity_of_records_over_shared_leases_mapping_each_once() {
    let Some(cc) = host_cc() else { return };
    let kernels = four_kernels();
    let exe = build_batch_harness(&cc, "batch-1-max", &kernels);
    for k in 1..=MAX_BATCH_LAUNCHES {
        let launches: Vec<Launch> = (0..k).map(|r| sample_launch(&kernels, r)).collect();
        // First-use order of the leases.
        let mut order: Vec<usize> = Vec::new();
        for l in &launches {
            for v in &l.views {
                if !order.contains(&v.0) {
                    order.push(v.0);
                }
            }
        }
        let leases: Vec<(i32, u64)> = order.iter().map(|&i| LEASES3[i]).collect();
        let launches: Vec<Launch> = launches
            .into_iter()
            .map(|l| Launch {
                views: l.views.iter().map(|&(li, o, n)| (order.iter().position(|&x| x == li).unwrap(), o, n)).collect(),
                ..l
            })
            .collect();
        let (got, want) = run_batch(&exe, &kernels, &leases, &launches, None);
        assert_eq!(got, want, "{k} records");
    }
}

#[test]
fn batch_entry_with_a_full_kernel_table_and_15_leases() {
    let Some(cc) = host_cc() else { return };
    let names: Vec<String> = (0..MAX_BATCH_KERNELS).map(|i| format!("k{i}")).collect();
    let kernels: Vec<KernelSpec<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| KernelSpec { name: n, signature: mixed_signature(i % 16).0, returns_status: false })
        .collect();
    let exe = build_batch_harness(&cc, "batch-table", &kernels);
    let leases: Vec<(i32, u64)> = (0..MAX_BATCH_LEASES).map(|l| (50 + l as i32, 4096 + 128 * l as u64)).collect();
    // Record r runs kernel MAX_BATCH_KERNELS - 1 - r: every table entry once, the widest kernels
    // use all 15 leases. Records are packed in lease first-use order: the first record is the
    // last kernel (15 buffers).
    let launches: Vec<Launch> = (0..MAX_BATCH_KERNELS)
        .map(|r| {
            let kernel = MAX_BATCH_KERNELS - 1 - r;
            let (sig, scalars) = mixed_signature(kernel % 16);
            let views = (0..sig.buffers()).map(|i| (i, 16 * i as u64 + 8 * (r % 2) as u64, 100)).collect();
            Launch { kernel, views, scalars }
        })
        .collect();
    assert_eq!(launches[0].views.len(), 15);
    let (got, want) = run_batch(&exe, &kernels, &leases, &launches, None);
    assert_eq!(got, want);
}

/// 14 buffers and 10 scalars: a 256-byte record (MAX_BATCH_LAUNCHES of them are the record
/// bytes exactly); WIDER has one scalar more (264 bytes).
const WIDE: &str = "buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32";
const WIDER: &str = "buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,buf,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32,u32";

#[test]
fn batch_entry_runs_a_batch_at_each_capacity_and_refuses_one_past_it() {
    let Some(cc) = host_cc() else { return };
    let mut kernels = four_kernels();
    kernels.push(KernelSpec { name: "k_wide", signature: Signature::parse(WIDE).unwrap(), returns_status: false });
    kernels.push(KernelSpec { name: "k_wider", signature: Signature::parse(WIDER).unwrap(), returns_status: false });
    let (wide, wider) = (kernels.len() - 2, kernels.len() - 1);
    let exe = build_batch_harness(&cc, "batch-capacity", &kernels);
    let put = |v: &mut Vec<u8>, at: usize, x: u32| v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    let refused = |v: &DspView| format!("rc 14\npra2 {}\nlive 0\n", "00".repeat(v.pra2_len));

    // K: MAX_BATCH_LAUNCHES records of the kernel without parameters run; one more is refused
    // (a valid record, the counts matching: only K is past its capacity).
    let none: Vec<Launch> = (0..MAX_BATCH_LAUNCHES).map(|_| Launch { kernel: 3, views: vec![], scalars: vec![] }).collect();
    let (got, want) = run_batch(&exe, &kernels, &[], &none, None);
    assert_eq!(got, want, "K = MAX_BATCH_LAUNCHES");
    let mut more = batch_view(&kernels, &[], &none);
    let one = BATCH.record_len(0, 0);
    let tail = more.pra0[more.pra0.len() - one..].to_vec();
    more.pra0.extend_from_slice(&tail);
    put(&mut more.pra0, BATCH.count_at, MAX_BATCH_LAUNCHES as u32 + 1);
    put(&mut more.pra0, BATCH.bytes_at, ((MAX_BATCH_LAUNCHES + 1) * one) as u32);
    assert_eq!(run(&exe, &more.input()), refused(&more), "K = MAX_BATCH_LAUNCHES + 1");

    // R: MAX_BATCH_LAUNCHES records of 256 bytes fill the record bytes exactly and run (every
    // view and scalar handed over); with the last one 8 bytes wider (K unchanged) the batch is
    // refused before anything is mapped.
    assert_eq!(MAX_BATCH_LAUNCHES * BATCH.record_len(14, 10), MAX_BATCH_RECORD_BYTES);
    let leases: Vec<(i32, u64)> = (0..14).map(|l| (60 + l, 4096)).collect();
    let launch = |kernel: usize, r: usize| Launch {
        kernel,
        views: (0..14).map(|i| (i, 8 * ((r + i) % 16) as u64, 64)).collect(),
        scalars: (0..kernels[kernel].signature.scalars()).map(|j| Scalar::U32((1000 * r + j) as u32)).collect(),
    };
    let full: Vec<Launch> = (0..MAX_BATCH_LAUNCHES).map(|r| launch(wide, r)).collect();
    let (got, want) = run_batch(&exe, &kernels, &leases, &full, None);
    assert_eq!(got, want, "R = MAX_BATCH_RECORD_BYTES");
    let view = batch_view(&kernels, &leases, &full);
    assert_eq!(view.pra0.len(), BATCH.header_len + MAX_BATCH_RECORD_BYTES);
    let last = batch_view(&kernels, &leases, &[launch(wider, MAX_BATCH_LAUNCHES - 1)]);
    let mut over = view.clone();
    over.pra0.truncate(view.pra0.len() - BATCH.record_len(14, 10));
    over.pra0.extend_from_slice(&last.pra0[BATCH.header_len..]);
    put(&mut over.pra0, BATCH.bytes_at, (MAX_BATCH_RECORD_BYTES + 8) as u32);
    assert_eq!(over.pra0.len(), BATCH.header_len + MAX_BATCH_RECORD_BYTES + 8);
    assert_eq!(run(&exe, &over.input()), refused(&over), "R = MAX_BATCH_RECORD_BYTES + 8");
}

#[test]
fn batch_entry_stops_at_a_failing_kernel_and_unmaps_everything() {
    let Some(cc) = host_cc() else { return };
    let kernels = four_kernels();
    let exe = build_batch_harness(&cc, "batch-fail", &kernels);
    let leases = [LEASES3[0], LEASES3[1]];
    let check = |code| Launch { kernel: 2, views: vec![(1, 4096, 64), (0, 8, 8)], scalars: vec![Scalar::I32(code)] };
    let add = Launch { kernel: 0, views: vec![(0, 0, 64), (1, 64, 64), (0, 4096, 4096)], scalars: vec![Scalar::U32(1)] };
    let add2 = Launch { kernel: 0, views: vec![(0, 0, 64), (1, 64, 64), (0, 4096, 4096)], scalars: vec![Scalar::U32(2)] };
    let (got, want) = run_batch(&exe, &kernels, &leases, &[add, check(0), check(-7), add2], Some((2, -7)));
    assert_eq!(got, want);
    assert!(got.contains("kernel 2\n") && !got.contains("kuint 0 2\n"), "the record after the failure did not run:\n{got}");
}

/// A valid batch of three records whose fields the hostile cases change.
fn hostile_base(kernels: &[KernelSpec<'_>]) -> DspView {
    let owner = ();
    let sigs: Vec<Signature> = kernels.iter().map(|k| k.signature).collect();
    let mut batch = Batch::new(&sigs).unwrap();
    let a = |off, len| BufferRef::borrowing(&owner, Fd(30), 8192, off, len);
    let b = |off, len| BufferRef::borrowing(&owner, Fd(31), 4160, off, len);
    batch.push(0, &[a(0, 64), b(64, 64), a(4096, 64)], &[Scalar::U32(1)]).unwrap(); // record at 16, 52 bytes
    batch.push(1, &[b(0, 16)], &[Scalar::F32(2.0), Scalar::I16(-1)]).unwrap(); // record at 68, 36 bytes
    batch.push(0, &[b(8, 8), a(16, 16), a(32, 32)], &[Scalar::U32(3)]).unwrap(); // record at 104, 52 bytes
    assert_eq!(batch.record_bytes(), 140);
    DspView::of_batch(&mut batch, &[(30, 8192), (31, 4160)])
}

#[test]
fn batch_entry_refuses_every_hostile_field_before_mapping_anything() {
    let Some(cc) = host_cc() else { return };
    let kernels = four_kernels();
    let exe = build_batch_harness(&cc, "batch-hostile", &kernels);
    let good = hostile_base(&kernels);
    assert!(run(&exe, &good.input()).ends_with(&format!("rc 0\npra2 {}\nlive 0\n", status_hex(3, u32::MAX, 0, 3 * 37))));
    let put = |v: &mut Vec<u8>, at: usize, x: u32| v[at..at + 4].copy_from_slice(&x.to_le_bytes());
    let put16 = |v: &mut Vec<u8>, at: usize, x: u16| v[at..at + 2].copy_from_slice(&x.to_le_bytes());
    let last = 104; // the last record: earlier records are valid, so nothing may be mapped before all are checked
    let mut cases: Vec<(&str, DspView)> = Vec::new();
    let mut case = |what, f: &dyn Fn(&mut DspView)| {
        let mut v = good.clone();
        f(&mut v);
        cases.push((what, v));
    };
    case("magic", &|v| v.pra0[0] ^= 1);
    case("K = 0", &|v| put(&mut v.pra0, 4, 0));
    // (K and R past the capacities with the records to match: the capacity test below.)
    case("K past the capacity", &|v| put(&mut v.pra0, 4, MAX_BATCH_LAUNCHES as u32 + 1));
    case("K beyond the records", &|v| put(&mut v.pra0, 4, 4));
    case("K short of R", &|v| put(&mut v.pra0, 4, 2));
    case("L differs from sc", &|v| put(&mut v.pra0, 8, 1));
    case("R beyond pra0", &|v| put(&mut v.pra0, 12, 141));
    case("R past the capacity", &|v| put(&mut v.pra0, 12, MAX_BATCH_RECORD_BYTES as u32 + 1));
    case("R huge", &|v| put(&mut v.pra0, 12, u32::MAX));
    case("kernel index", &|v| put(&mut v.pra0, last, 4));
    case("kernel index huge", &|v| put(&mut v.pra0, last, u32::MAX));
    case("view count", &|v| put16(&mut v.pra0, last + 4, 2));
    case("scalar count", &|v| put16(&mut v.pra0, last + 6, 0));
    case("lease index", &|v| put(&mut v.pra0, last + 8 + 24, 2));
    case("lease index huge", &|v| put(&mut v.pra0, last + 8, u32::MAX));
    case("offset past lease", &|v| put(&mut v.pra0, last + 8 + 4, 4161));
    case("view past lease", &|v| put(&mut v.pra0, last + 8 + 8, 4160 - 7));
    case("wrapping off + len", &|v| {
        put(&mut v.pra0, last + 8 + 12 + 4, 0x10);
        put(&mut v.pra0, last + 8 + 12 + 8, 0xFFFF_FFF8);
    });
    case("lease length 0", &|v| put(&mut v.pra1, 8, 0));
    case("lease reserved word", &|v| put(&mut v.pra1, 4, 1));
    case("short pra0", &|v| {
        v.pra0.pop();
    });
    case("short pra1", &|v| {
        v.pra1.pop();
    });
    case("short status", &|v| v.pra2_len = 23);
    case("sc in-handles", &|v| v.sc |= 1 << 4);
    case("sc in-buffers", &|v| v.sc += 1 << 16);
    case("sc handle count", &|v| {
        v.sc = (v.sc & !0xf) | 1;
        v.handles.pop();
    });
    case("trailing record bytes", &|v| {
        v.pra0.extend_from_slice(&[0; 8]);
        put(&mut v.pra0, 12, 148);
    });
    for (what, v) in &cases {
        assert_eq!(run(&exe, &v.input()), format!("rc 14\npra2 {}\nlive 0\n", "00".repeat(v.pra2_len)), "{what}");
    }
    assert_eq!(good.pra2_len, BATCH.status_len);
    // A lease whose fd cannot be mapped: the first map is undone, nothing runs.
    let v = DspView { fail_map: Some(1), ..good.clone() };
    assert_eq!(
        run(&exe, &v.input()),
        format!(
            "map #0 fd=30 len=8192 prot=3 flags=0 off=0\nmapfail fd=31 len=4160\nunmap #0 len=8192\nrc 101\npra2 {}\nlive 0\n",
            "00".repeat(24)
        )
    );
}

#[test]
fn batch_library_still_answers_single_v2_launches_of_kernel_0() {
    let Some(cc) = host_cc() else { return };
    let kernels = four_kernels();
    let exe = build_batch_harness(&cc, "batch-single", &kernels);
    let owner = ();
    let refs = [
        BufferRef::borrowing(&owner, Fd(5), 4096, 0, 4096),
        BufferRef::borrowing(&owner, Fd(6), 8192, 4096, 1000),
        BufferRef::borrowing(&owner, Fd(7), 4096, 24, 8),
    ];
    let mut packed = PackedLaunch::new(AbiVersion::V2, &kernels[0].signature, &refs, &[Scalar::U32(9)]).unwrap();
    let view = DspView::of(&mut packed, &[(5, 4096), (6, 8192), (7, 4096)]);
    assert_eq!(
        run(&exe, &view.input()),
        format!(
            "map #0 fd=5 len=4096 prot=3 flags=0 off=0\nmap #1 fd=6 len=8192 prot=3 flags=0 off=0\nmap #2 fd=7 len=4096 prot=3 flags=0 off=0\n\
             kernel 0\nkbuf 0 map=#0 at=0 room=4096\nkbuf 1 map=#1 at=4096 room=4096\nkbuf 2 map=#2 at=24 room=4072\nkuint 0 9\n\
             unmap #2 len=4096\nunmap #1 len=8192\nunmap #0 len=4096\nrc 0\npra2 {TIMER_37}\nlive 0\n"
        )
    );
    // The single-kernel entry text is unchanged by the batch generator (same single path).
    let mut single = String::new();
    write_entry(&mut single, &kernels[0].signature, "k_add", &EntryOptions::V2).unwrap();
    let mut both = String::new();
    write_batch_entry(&mut both, &kernels, &EntryOptions::V2).unwrap();
    let body = |t: &str| {
        t[t.find("int entry(unsigned long long handle, unsigned int sc, remote_arg *pra) {").unwrap()..]
            .replace("  if ((sc >> 24) == 3u) return hrx_batch(sc, pra); /* a batch over the kernel table */\n", "")
            .replace("  if ((sc >> 24) == 5u) return hrx_program(sc, pra); /* a program: records kept in a lease */\n", "")
    };
    assert_eq!(body(&single), body(&both));
    // A v2-only library answers a batch with 0 and leaves the status untouched.
    let exe1 = build_harness(&cc, "batch-on-v2", &kernels[0].signature, &EntryOptions::V2);
    let good = hostile_base(&kernels);
    assert_eq!(run(&exe1, &good.input()), format!("rc 0\npra2 {}\nlive 0\n", "00".repeat(24)));
}
