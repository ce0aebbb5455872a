//! The entry models: the v1 defect for a view with offset > 0 against a clean v2 ledger, and v2
//! validation.

mod common;

use std::time::Duration;

use common::*;
use hexrpc_bench::elf::hexagon_elf;
use hexrpc_bench::{Bench, EntryVersion, LedgerEvent, LibraryModel};
use hexrpc_drivers::{aee, Error};

fn doubling(version: EntryVersion) -> LibraryModel {
    LibraryModel::new(version, 1, 1, |k| {
        let add = k.scalar_u32(0).unwrap_or(0) as u8;
        if let Ok(mut v) = k.read_all(0) {
            v.iter_mut().for_each(|b| *b = b.wrapping_mul(2).wrapping_add(add));
            let _ = k.write(0, 0, &v);
        }
        k.set_simulated_time(Duration::from_micros(1234));
    })
}

/// A session with a listener serving a directory that holds `name`, and the library loaded.
fn loaded(b: &Bench, name: &str, model: LibraryModel) -> (Session, std::thread::JoinHandle<ListenerLog>, u32) {
    let dir = temp_dir(name);
    std::fs::write(dir.join(name), hexagon_elf(6000)).unwrap();
    // A second library in the same directory, for tests that load two.
    std::fs::write(dir.join(format!("{name}-2")), hexagon_elf(5000)).unwrap();
    b.register_library(name, model);
    let s = open_session(b);
    let l = spawn_listener(b, s.rpc, dir);
    let h = open_lib(b, s.rpc, name).expect("transport").expect("library loads");
    (s, l, h)
}

fn scalar(v: u32) -> [u8; 8] {
    let mut s = [0u8; 8];
    s[..4].copy_from_slice(&v.to_le_bytes());
    s
}

#[test]
fn v1_with_offset_zero_is_clean() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h) = loaded(&b, "v1zero", doubling(EntryVersion::V1));
    let mut buf = alloc(&b, s.ion, 4096);
    buf.map.write_at(0, &[3u8; 4096]).unwrap();
    let (r, timer) = call_v1(&b, s.rpc, h, &[(buf.fd, 0, 4096)], &[scalar(1)]);
    assert_eq!(r, Ok(()));
    assert_eq!(timer, 1234);
    let mut out = [0u8; 4096];
    buf.map.read_at(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 7), "kernel ran on the shared memory");
    assert_eq!(b.ledger_mismatches(), 0, "{:?}", b.ledger());
    let ev: Vec<_> = b.ledger().into_iter().map(|e| e.event).collect();
    assert!(matches!(ev[0], LedgerEvent::Map { len: 4096, offset: 0, .. }));
    assert!(matches!(ev.last(), Some(LedgerEvent::Unmap { matched: true, len: 4096, .. })));
    buf.release(&b, s.ion);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start);
}

#[test]
fn v1_defect_with_offset_is_recorded_and_v2_is_clean() {
    let b = bench();
    let start = b.snapshot();
    let (s, l, h1) = loaded(&b, "v1off", doubling(EntryVersion::V1));
    b.register_library("v1off-2", doubling(EntryVersion::V2));
    let mut buf = alloc(&b, s.ion, 8192);
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i % 61) as u8).collect();
    buf.map.write_at(0, &pattern).unwrap();

    // v1: view (offset 100, size 4096) of an 8192-byte allocation.
    let (r, _) = call_v1(&b, s.rpc, h1, &[(buf.fd, 100, 4096)], &[scalar(0)]);
    assert_eq!(r, Ok(()), "v1 does not notice its own defect");
    let ev: Vec<_> = b.ledger().into_iter().map(|e| e.event).collect();
    let base = match ev[0] {
        LedgerEvent::Map { addr, len: 4096, offset: 0, .. } => addr,
        ref other => panic!("first event {other:?}"),
    };
    assert!(ev.contains(&LedgerEvent::ViewOutsideMapping { buffer: 0, view: (base + 100, 4096), mapping: Some((base, 4096)) }));
    assert!(ev
        .iter()
        .any(|e| matches!(e, LedgerEvent::AccessOutsideMapping { buffer: 0, access: (a, 4096), write: false } if *a == base as u64 + 100)));
    assert!(ev.contains(&LedgerEvent::Unmap { addr: base + 100, len: 4096, matched: false }), "{ev:?}");
    assert!(b.ledger_mismatches() >= 3);
    // The refused accesses were not performed: host memory is untouched, and the mapping leaked.
    let mut now = vec![0u8; 8192];
    buf.map.read_at(0, &mut now).unwrap();
    assert_eq!(now, pattern);
    assert_eq!(b.snapshot().hap_mappings, 1, "the mismatched unmap leaves the mapping");

    // v2 on the same view: clean.
    b.clear_ledger();
    let h2 = open_lib(&b, s.rpc, "v1off-2").unwrap().unwrap();
    let (r, timer) = call_v2(&b, s.rpc, h2, &[(buf.fd, 100, 4096, 8192)], &[scalar(0)]);
    assert_eq!(r, Ok(()));
    assert_eq!(timer, 1234);
    assert_eq!(b.ledger_mismatches(), 0, "{:?}", b.ledger());
    let ev: Vec<_> = b.ledger().into_iter().map(|e| e.event).collect();
    let LedgerEvent::Map { addr, len: 8192, .. } = ev[0] else { panic!("{ev:?}") };
    assert!(ev.contains(&LedgerEvent::Unmap { addr, len: 8192, matched: true }));
    buf.map.read_at(0, &mut now).unwrap();
    for (i, (&n, &p)) in now.iter().zip(&pattern).enumerate() {
        let want = if (100..4196).contains(&i) { p.wrapping_mul(2) } else { p };
        assert_eq!(n, want, "byte {i}");
    }
    assert_eq!(b.snapshot().hap_mappings, 1, "only v1's leak is left");

    buf.release(&b, s.ion);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.settle(&start, Duration::from_secs(2)), start, "process exit reclaims the leaked mapping");
}

#[test]
fn v2_refuses_bad_headers_before_mapping() {
    let b = bench();
    let (s, l, h) = loaded(&b, "v2bad", doubling(EntryVersion::V2));
    let buf = alloc(&b, s.ion, 4096);
    // off + len beyond the lease.
    let (r, _) = call_v2(&b, s.rpc, h, &[(buf.fd, 100, 4096, 4096)], &[scalar(0)]);
    assert_eq!(r, Err(Error::Returned(aee::AEE_EBADPARM)));
    // A v1 packing sent to a v2 entry: no magic.
    let (r, _) = call_v1(&b, s.rpc, h, &[(buf.fd, 0, 4096)], &[scalar(0)]);
    assert_eq!(r, Err(Error::Returned(aee::AEE_EBADPARM)));
    let ev: Vec<_> = b.ledger().into_iter().map(|e| e.event).collect();
    assert_eq!(ev, vec![LedgerEvent::Refused { code: aee::AEE_EBADPARM }; 2]);
    // The errors skipped put_args: the handle maps are still held by the driver.
    assert_eq!(b.snapshot().dsp_maps, 1);
    buf.release(&b, s.ion);
    s.close(&b);
    l.join().unwrap();
    assert_eq!(b.snapshot().dsp_maps, 0, "close frees every map");
}

#[test]
fn methods_other_than_2_do_nothing() {
    let b = bench();
    let (s, l, h) = loaded(&b, "m3", doubling(EntryVersion::V2));
    let mut a = hexrpc_drivers::adsprpc::InvokeArgs::<'_, 1>::new(3).unwrap();
    assert_eq!(hexrpc_drivers::adsprpc::invoke(&b, s.rpc, h, &mut a), Ok(()));
    assert!(b.ledger().is_empty());
    s.close(&b);
    l.join().unwrap();
}
