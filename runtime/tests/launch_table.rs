//! The packer's bytes and the generator's C text, for both versions, every buffer count 0..=15
//! and a mix of scalar types, checked against the card (entry-abi.md) with offsets written out
//! here by hand, and against each other through the table's decoders. Needs no compiler.

use hexrpc_drivers::adsprpc::FASTRPC_ATTR_NOVA;
use hexrpc_drivers::Fd;
use hexrpc_runtime::launch::{
    write_entry, AbiVersion, BufferRef, EntryOptions, PackedLaunch, ParamKind, Scalar, ScalarType, Signature, V1, V2,
};

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn sample(t: ScalarType, k: usize) -> Scalar {
    match t {
        ScalarType::I8 => Scalar::I8(-1 - k as i8),
        ScalarType::U8 => Scalar::U8(0x80 | k as u8),
        ScalarType::I16 => Scalar::I16(-300 - k as i16),
        ScalarType::U16 => Scalar::U16(0xBEE0 + k as u16),
        ScalarType::I32 => Scalar::I32(-70_000 - k as i32),
        ScalarType::U32 => Scalar::U32(0xC0DE_0000 + k as u32),
        ScalarType::I64 => Scalar::I64(-(3i64 << 33) - k as i64),
        ScalarType::U64 => Scalar::U64(0xFEED_FACE_0000_0000 + k as u64),
        ScalarType::F16 => Scalar::F16(0xC000 + k as u16),
        ScalarType::F32 => Scalar::F32(0.1 + k as f32),
        ScalarType::F64 => Scalar::F64(-1.0e-300 * (k as f64 + 1.0)),
    }
}

/// `n` buffers, then a mix of scalar types (all 11 for n = 15, three otherwise).
fn case(n: usize) -> (Signature, Vec<Scalar>) {
    let types: Vec<ScalarType> =
        if n == 15 { ScalarType::ALL.to_vec() } else { (0..3).map(|k| ScalarType::ALL[(2 * n + 5 * k) % 11]).collect() };
    let mut params = vec![ParamKind::Buffer; n];
    params.extend(types.iter().map(|t| ParamKind::Scalar(*t)));
    (Signature::new(&params).unwrap(), types.iter().enumerate().map(|(k, t)| sample(*t, k)).collect())
}

#[test]
fn packed_bytes_follow_the_card_for_every_buffer_count() {
    let owner = ();
    for version in [AbiVersion::V1, AbiVersion::V2] {
        for n in 0..=15usize {
            let (sig, scalars) = case(n);
            let s = scalars.len();
            // (fd, lease, offset, len); v1 only takes offset 0.
            let bufs: Vec<(i32, u64, u64, u64)> = (0..n)
                .map(|i| {
                    let off = if version == AbiVersion::V2 { 64 * i as u64 } else { 0 };
                    (3 + i as i32, 65536 + i as u64, off, 1000 + 7 * i as u64)
                })
                .collect();
            // Lease ids: 0 (do not cache) for every third buffer, distinct ones otherwise.
            let id = |i: usize| if i.is_multiple_of(3) { 0 } else { 0xA000 + i as u32 };
            let refs: Vec<BufferRef<'_>> = bufs
                .iter()
                .enumerate()
                .map(|(i, &(fd, l, o, n))| BufferRef::borrowing(&owner, Fd(fd), l, o, n).with_lease_id(id(i)))
                .collect();
            let mut p = PackedLaunch::new(version, &sig, &refs, &scalars).unwrap();
            let (pra0, pra1) = (p.pra0().to_vec(), p.pra1().to_vec());
            // The card, by hand.
            let (hdr, rec) = match version {
                AbiVersion::V1 => (0, 4),
                AbiVersion::V2 => (8, 8),
            };
            assert_eq!(pra0.len(), hdr + 8 * (n + s), "{version:?} n={n}");
            assert_eq!(pra1.len(), rec * n);
            if version == AbiVersion::V2 {
                assert_eq!(&pra0[..4], b"HRX2");
                assert_eq!(u32_at(&pra0, 4), n as u32);
            }
            for (i, &(_, lease, off, len)) in bufs.iter().enumerate() {
                assert_eq!(u32_at(&pra0, hdr + 8 * i), len as u32);
                // v2: the slot's second word is the lease id; v1 has no such word.
                let want_id = if version == AbiVersion::V2 { id(i) } else { 0 };
                assert_eq!(u32_at(&pra0, hdr + 8 * i + 4), want_id, "{version:?} n={n} buffer {i}");
                assert_eq!(version.layout().lease_id(&pra0, i), (version == AbiVersion::V2).then_some(want_id));
                assert_eq!(u32_at(&pra1, rec * i), off as u32);
                if version == AbiVersion::V2 {
                    assert_eq!(u32_at(&pra1, rec * i + 4), lease as u32);
                }
            }
            for (j, sc) in scalars.iter().enumerate() {
                let at = hdr + 8 * (n + j);
                assert_eq!(u64::from_le_bytes(pra0[at..at + 8].try_into().unwrap()), sc.bits(), "{version:?} n={n} scalar {j}");
                // And back through the table's decoder.
                assert_eq!(version.layout().scalar(&pra0, n, j, sc.ty()).map(|x| x.bits()), Some(sc.bits()));
            }
            let mut call = p.invoke_args().unwrap();
            let args = call.to_downstream().unwrap();
            assert_eq!(args.scalars().raw(), 0x0202_0100 | n as u32);
            let fds: Vec<i32> = [-1, -1, -1].into_iter().chain(bufs.iter().map(|b| b.0)).collect();
            assert_eq!(args.fds(), &fds[..]);
            let attrs: Vec<u32> = [0, 0, 0].into_iter().chain(std::iter::repeat_n(FASTRPC_ATTR_NOVA, n)).collect();
            assert_eq!(args.attrs(), &attrs[..]);
            assert_eq!(args.pra()[2].buf().len, 8);
        }
    }
}

fn scalar_read(t: ScalarType, at: usize) -> String {
    match t {
        ScalarType::I8 => format!("(signed char)hrx_a0[{at}]"),
        ScalarType::U8 => format!("hrx_a0[{at}]"),
        ScalarType::I16 => format!("(short)hrx_ld_u16(hrx_a0 + {at})"),
        ScalarType::U16 | ScalarType::F16 => format!("hrx_ld_u16(hrx_a0 + {at})"),
        ScalarType::I32 => format!("(int)hrx_ld_u32(hrx_a0 + {at})"),
        ScalarType::U32 => format!("hrx_ld_u32(hrx_a0 + {at})"),
        ScalarType::I64 => format!("(long long)hrx_ld_u64(hrx_a0 + {at})"),
        ScalarType::U64 => format!("hrx_ld_u64(hrx_a0 + {at})"),
        ScalarType::F32 => format!("hrx_f32(hrx_ld_u32(hrx_a0 + {at}))"),
        ScalarType::F64 => format!("hrx_f64(hrx_ld_u64(hrx_a0 + {at}))"),
    }
}

#[test]
fn generated_entry_reads_the_offsets_the_packer_writes() {
    for (version, opts) in [(AbiVersion::V1, EntryOptions::V1), (AbiVersion::V2, EntryOptions::V2)] {
        for n in 0..=15usize {
            let (sig, scalars) = case(n);
            let s = scalars.len();
            let mut c = String::new();
            write_entry(&mut c, &sig, "k", &opts).unwrap();
            let (hdr, rec) = if version == AbiVersion::V1 { (0, 4) } else { (8, 8) };
            let has = |needle: String| assert!(c.contains(&needle), "{version:?} n={n}: missing {needle:?} in\n{c}");
            for i in 0..n {
                has(format!("hrx_len{i} = {}hrx_ld_u32(hrx_a0 + {});", if version == AbiVersion::V1 { "(int)" } else { "" }, hdr + 8 * i));
                has(format!("hrx_off{i} = hrx_ld_u32(hrx_a1 + {});", rec * i));
                has(format!("hrx_fd{i} = pra[{}].dma.fd;", 3 + i));
                has(format!("hrx_ptr{i} = (unsigned char *)hrx_base{i} + hrx_off{i};"));
                if version == AbiVersion::V2 {
                    has(format!("hrx_lease{i} = hrx_ld_u32(hrx_a1 + {});", rec * i + 4));
                    has(format!("HAP_mmap((void *)0, hrx_lease{i}, 3, 0, hrx_fd{i}, 0);"));
                    has(format!("HAP_munmap(hrx_base{i}, hrx_lease{i});"));
                } else {
                    has(format!("HAP_mmap((void *)0, (unsigned int)hrx_len{i}, 3, 0, hrx_fd{i}, 0);"));
                    has(format!("HAP_munmap(hrx_ptr{i}, (unsigned int)hrx_len{i});"));
                }
            }
            for (j, sc) in scalars.iter().enumerate() {
                has(format!("const {} hrx_s{j} = {};", sc.ty().c_type(), scalar_read(sc.ty(), hdr + 8 * (n + j))));
            }
            has("if ((sc >> 24) != 2u) return 0;".into());
            if version == AbiVersion::V2 {
                has(format!("if ((sc & 0xffffffu) != {:#x}u) return 14;", 0x20100 | n));
                has(format!("if (pra[0].buf.len < {}u) return 14;", 8 * (1 + n + s)));
                if n > 0 {
                    has(format!("if (pra[1].buf.len < {}u) return 14;", 8 * n));
                }
                has(format!("hrx_ld_u32(hrx_a0 + 0) != 0x32585248u || hrx_ld_u32(hrx_a0 + 4) != {n}u"));
                has("if (pra[2].buf.len >= 8u) hrx_st_u64((unsigned char *)pra[2].buf.pv, hrx_t1 - hrx_t0);".into());
                // Validation comes before the first map.
                if n > 0 {
                    assert!(c.rfind("return 14;").unwrap() < c.find("HAP_mmap((void *)0").unwrap());
                }
            } else {
                assert!(!c.contains("return 14;"));
                has("  hrx_st_u64((unsigned char *)pra[2].buf.pv, hrx_t1 - hrx_t0);".into());
            }
            let args: Vec<String> = (0..n).map(|i| format!("hrx_ptr{i}")).chain((0..s).map(|j| format!("hrx_s{j}"))).collect();
            has(format!("  k({});", args.join(", ")));
        }
    }
}

#[test]
fn table_limits_match_the_card() {
    assert_eq!((V1.max_buffers, V2.max_buffers), (15, 15));
    assert_eq!(V1.max_view_len, (1 << 31) - 1);
    assert_eq!(V2.max_view_len, (1 << 32) - 1);
    assert_eq!(V2.magic, Some(0x3258_5248));
    assert_eq!(V1.magic, None);
    assert_eq!((V1.handle_attr, V2.handle_attr), (FASTRPC_ATTR_NOVA, FASTRPC_ATTR_NOVA));
    assert_eq!((V2.err_bad_param, V2.map_prot, V2.map_flags), (14, 3, 0));
}

#[test]
fn map_cache_entry_reads_the_lease_ids_the_packer_writes() {
    use hexrpc_runtime::launch::{write_batch_entry, KernelSpec, BATCH, MAP_CACHE_SLOTS, RELEASE_METHOD};
    for n in [1usize, 2, 15] {
        let (sig, _) = case(n);
        let mut c = String::new();
        write_entry(&mut c, &sig, "kern", &EntryOptions::V2_CACHED).unwrap();
        for i in 0..n {
            // Header slot (8) + buffer slot i, second word: by hand.
            assert!(c.contains(&format!("hrx_id{i} = hrx_ld_u32(hrx_a0 + {});", 8 + 8 * i + 4)), "n={n} {i}\n{c}");
            assert!(c.contains(&format!("hrx_acquire(hrx_id{i}, hrx_fd{i}, hrx_lease{i}, &hrx_slot{i})")), "{c}");
            assert!(c.contains(&format!("hrx_put(hrx_slot{i}, hrx_base{i}, hrx_lease{i});")), "{c}");
        }
        assert!(c.contains(&format!("if ((sc >> 24) == {RELEASE_METHOD}u) return hrx_release(sc, pra);")), "{c}");
        assert!(c.contains(&format!("static hrx_cached hrx_cache[{MAP_CACHE_SLOTS}];")), "{c}");
        assert!(c.contains("__atomic_exchange_n(&hrx_cache_lock, 1, __ATOMIC_ACQUIRE)"), "{c}");
        // The checks still come before any map.
        assert!(c.find("return 14;").unwrap() < c.find("hrx_acquire(hrx_id0").unwrap());
        // Without the cache: no id is read, every lease is mapped and unmapped per call.
        let mut plain = String::new();
        write_entry(&mut plain, &sig, "kern", &EntryOptions::V2).unwrap();
        assert!(!plain.contains("hrx_id0") && !plain.contains("hrx_release") && plain.contains("HAP_mmap((void *)0, hrx_lease0"));
    }
    let (sig, _) = case(2);
    let v1_cached = EntryOptions { map_cache: true, ..EntryOptions::V1 };
    assert_eq!(write_entry(&mut String::new(), &sig, "kern", &v1_cached), Err(hexrpc_runtime::launch::EntryError::MapCacheNeedsV2));
    // Batches: the lease entry's second word is the id (no longer required to be 0).
    let k = [KernelSpec { name: "k", signature: sig, returns_status: false }];
    let mut b = String::new();
    write_batch_entry(&mut b, &k, &EntryOptions::V2_CACHED).unwrap();
    assert!(b.contains(&format!("hrx_id[hrx_l] = hrx_ld_u32(hrx_a1 + 8u * hrx_l + {});", BATCH.lease_id_at)), "{b}");
    assert!(b.contains("hrx_base[hrx_l] = hrx_acquire(hrx_id[hrx_l], hrx_fd[hrx_l], hrx_lease[hrx_l], &hrx_slot[hrx_l]);"), "{b}");
    assert!(!b.contains(") != 0u) return 14;"), "{b}");
    let mut plain = String::new();
    write_batch_entry(&mut plain, &k, &EntryOptions::V2).unwrap();
    assert!(plain.contains("hrx_ld_u32(hrx_a1 + 8u * hrx_l + 4) != 0u) return 14;"), "{plain}");
}

#[test]
fn a_batch_sends_lease_ids_only_when_told() {
    use hexrpc_runtime::launch::{Batch, BatchRefusal};
    let owner = ();
    let sigs = [Signature::parse("buf,buf").unwrap()];
    let a = BufferRef::borrowing(&owner, Fd(5), 4096, 0, 64).with_lease_id(11);
    let b = BufferRef::borrowing(&owner, Fd(6), 8192, 64, 64).with_lease_id(12);
    let mut batch = Batch::new(&sigs).unwrap();
    batch.push(0, &[a, b], &[]).unwrap();
    // Off by default: a library without the map cache refuses a non-zero word.
    assert_eq!((u32_at(batch.pra1(), 4), u32_at(batch.pra1(), 12)), (0, 0));
    batch.send_lease_ids(true);
    assert_eq!((u32_at(batch.pra1(), 4), u32_at(batch.pra1(), 12)), (11, 12));
    assert_eq!((u32_at(batch.pra1(), 0), u32_at(batch.pra1(), 8)), (4096, 8192));
    // A lease pushed while on carries its id at once.
    let c = BufferRef::borrowing(&owner, Fd(7), 4096, 0, 64).with_lease_id(13);
    batch.push(0, &[c, a], &[]).unwrap();
    assert_eq!(u32_at(batch.pra1(), 20), 13);
    batch.send_lease_ids(false);
    assert!((0..3).all(|l| u32_at(batch.pra1(), 8 * l + 4) == 0));
    // The same fd with another id is another lease: refused like another length.
    let a_other = BufferRef::borrowing(&owner, Fd(5), 4096, 0, 64).with_lease_id(99);
    assert!(matches!(
        batch.push(0, &[a_other, b], &[]),
        Err(hexrpc_runtime::Error::Batch(BatchRefusal::LeaseMismatch { record: 2, buffer: 0 }))
    ));
}
