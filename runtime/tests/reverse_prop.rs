//! Property tests: at least 100,000 random and mutated request payloads through the parser and
//! the dispatcher, with no panic, no out-of-bounds access (any would panic in safe Rust) and no
//! data on error; and the parser/packer round trip. `HEXRPC_PROP_CASES` raises the payload
//! count (CI's fallback when no nightly toolchain can be installed runs it at fuzzing scale).

use std::time::Instant;

use hexrpc_bench::measure::NullSys;
use hexrpc_drivers::listener::{REMOTECTL_CLOSE, REMOTECTL_OPEN};
use hexrpc_drivers::{Fd, Scalars};
use hexrpc_runtime::reverse::wire::{pack_request, Request};
use hexrpc_runtime::reverse::{FilePolicy, ReverseService};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn pack(ins: &[&[u8]], outs: &[u32]) -> Vec<u8> {
    let mut b = vec![0u8; 1024];
    let n = pack_request(ins, outs, &mut b).unwrap();
    b.truncate(n);
    b
}

/// Valid requests of every served shape (the starting inputs that get mutated).
fn templates() -> Vec<(u8, u32, Vec<u8>)> {
    // (handle selector: 0 remotectl, 1 apps_std, 2 apps_mem), sc, payload
    vec![
        (0, REMOTECTL_OPEN.raw(), pack(&[&words(&[9, 8]), b"apps_std\0"], &[8, 8])),
        (0, REMOTECTL_CLOSE.raw(), pack(&[&words(&[0x4D00_0101, 4])], &[4, 4])),
        (1, 0x1305_0100, pack(&[&words(&[4, 2, 8, 2]), b"ENV\0", b";\0", b"tinylib\0", b"r\0"], &[4])),
        (1, 0x0003_0100, pack(&[&words(&[8, 3]), b"tinylib\0", b"rb\0"], &[4])),
        (1, 0x0401_0200, pack(&[&words(&[100, 64])], &[8, 64])),
        (1, 0x0901_0000, pack(&[&words(&[100, (-3i32) as u32, 2])], &[])),
        (1, 0x0801_0100, pack(&[&words(&[100])], &[4])),
        (1, 0x0A01_0100, pack(&[&words(&[100])], &[8])),
        (1, 0x0301_0000, pack(&[&words(&[101])], &[])),
        (1, 0x1F02_0100, pack(&[&words(&[31, 8]), b"tinylib\0"], &[96])),
        (1, 0x1602_0100, pack(&[&words(&[8]), b"tinylib\0"], &[1])),
        (1, 0x0F02_0000, pack(&[&words(&[3]), b"hi\0"], &[])),
        (2, 0x0201_0100, pack(&[&[0u8; 32]], &[16])),
        (2, 0x0301_0000, pack(&[&[0u8; 16]], &[])),
    ]
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    Word(usize, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Mutation::Extend),
        (any::<usize>(), prop_oneof![Just(0u32), Just(u32::MAX), Just(0x8000_0000), 0u32..300, any::<u32>()])
            .prop_map(|(i, w)| Mutation::Word(i, w)),
    ]
}

fn apply(p: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Flip(i, b) if !p.is_empty() => {
            let i = i % p.len();
            p[i] ^= b;
        }
        Mutation::Truncate(n) => {
            let n = n % (p.len() + 1);
            p.truncate(n);
        }
        Mutation::Extend(extra) => p.extend_from_slice(extra),
        Mutation::Word(i, w) if p.len() >= 4 => {
            let i = (i % (p.len() / 4)) * 4;
            p[i..i + 4].copy_from_slice(&w.to_le_bytes());
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Case {
    Random { handle: u32, sc: u32, payload: Vec<u8> },
    Mutated { template: usize, handle_sel: u8, attr: u8, sc_noise: Option<u32>, muts: Vec<Mutation> },
}

fn case() -> impl Strategy<Value = Case> {
    let n = templates().len();
    prop_oneof![
        1 => (prop_oneof![Just(0u32), any::<u32>()], any::<u32>(), proptest::collection::vec(any::<u8>(), 0..256))
            .prop_map(|(handle, sc, payload)| Case::Random { handle, sc, payload }),
        3 => (0..n, 0u8..4, 0u8..8, proptest::option::weighted(0.2, any::<u32>()), proptest::collection::vec(mutation(), 0..4))
            .prop_map(|(template, handle_sel, attr, sc_noise, muts)| Case::Mutated { template, handle_sel, attr, sc_noise, muts }),
    ]
}

#[test]
fn hundred_thousand_hostile_payloads_never_panic() {
    static IMAGE: [u8; 300] = [0x5A; 300];
    let limits = hexrpc_bsp::Limits { max_reverse_request: 4096, max_reverse_handles: 8, ..hexrpc_bsp::BENCH.limits };
    let svc = ReverseService::new(NullSys::new(), Fd(-1), FilePolicy::new(&["/nonexistent/hexrpc"], limits).unwrap());
    svc.register_image("tinylib", &IMAGE).unwrap();
    let mut reply = vec![0u8; 4096 + 64];
    let open = |svc: &ReverseService<'_, NullSys>, reply: &mut [u8], name: &[u8]| {
        let p = pack(&[&words(&[name.len() as u32, 0]), name], &[8, 0]);
        let r = svc.dispatch(0, REMOTECTL_OPEN, &p, reply);
        assert_eq!(r.status, 0);
        u32::from_le_bytes(reply[8..12].try_into().unwrap())
    };
    let handles = std::cell::Cell::new((open(&svc, &mut reply, b"apps_std\0"), open(&svc, &mut reply, b"apps_mem\0")));
    let templates = templates();
    let cases = std::env::var("HEXRPC_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000u32).max(100_000);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let start = Instant::now();
    let count = std::cell::Cell::new(0u64);
    let reply = std::cell::RefCell::new(reply);
    runner
        .run(&case(), |c| {
            let (handle, sc, payload) = match c {
                Case::Random { handle, sc, payload } => (handle, sc, payload),
                Case::Mutated { template, handle_sel, attr, sc_noise, muts } => {
                    let (sel, sc, mut p) = templates[template].clone();
                    for m in &muts {
                        apply(&mut p, m);
                    }
                    let sel = if handle_sel == 3 { sel } else { handle_sel };
                    let (std_h, mem_h) = handles.get();
                    let handle = [0, std_h, mem_h][sel as usize];
                    let sc = (sc | (attr as u32) << 29) ^ sc_noise.unwrap_or(0);
                    (handle, sc, p)
                }
            };
            count.set(count.get() + 1);
            let mut reply = reply.borrow_mut();
            let _ = Request::parse(Scalars::from_raw(sc), &payload);
            let r = svc.dispatch(handle, Scalars::from_raw(sc), &payload, &mut reply[..]);
            prop_assert!(r.reply_len <= reply.len());
            if r.status != 0 {
                prop_assert_eq!(r.reply_len, 0);
                prop_assert!(hexrpc_drivers::aee::name(r.status).is_some(), "unnamed status {:#x}", r.status);
            }
            // Keep the session from filling up so the file paths stay exercised (modules are
            // reopened: a session end forgets them).
            let counts = svc.session_counts();
            if counts.files >= 6 || counts.modules >= 6 {
                svc.end_session();
                handles.set((open(&svc, &mut reply, b"apps_std\0"), open(&svc, &mut reply, b"apps_mem\0")));
            }
            Ok(())
        })
        .unwrap();
    let snap = svc.metrics().snapshot();
    eprintln!(
        "{} payloads in {:.2?}: {} requests, {} ok, {} bytes served",
        count.get(),
        start.elapsed(),
        snap.requests,
        snap.ok,
        snap.bytes_served
    );
    assert!(count.get() >= cases as u64);
    assert!(snap.ok > 1000, "mutations must also reach the handlers: {snap:?}");
}

proptest! {
    #![proptest_config(Config { cases: 2_000, failure_persistence: None, ..Config::default() })]

    /// What the DSP packs, the parser finds again, buffer for buffer.
    #[test]
    fn packed_requests_parse_back(ins in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
                                  outs in proptest::collection::vec(any::<u32>(), 0..8),
                                  shift in 0usize..8) {
        let refs: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
        let mut buf = vec![0u8; 1024 + shift];
        let n = pack_request(&refs, &outs, &mut buf[shift..]).unwrap();
        let sc = Scalars::new(0, ins.len() as u8, outs.len() as u8, 0, 0).unwrap();
        let req = Request::parse(sc, &buf[shift..shift + n]).unwrap();
        for (i, data) in ins.iter().enumerate() {
            prop_assert_eq!(req.input(i).unwrap(), data.as_slice());
        }
        prop_assert_eq!(req.out_lens(), outs.as_slice());
        prop_assert_eq!(req.consumed(), n);
    }
}
