//! A model file written by the builder reads back whole; every kind of bad file (truncated at
//! any byte, any byte changed, each count, index, offset and length out of bounds, libraries
//! that are not what they claim, versions this build does not know, sizes past the host limits)
//! is refused with the error that names it, and never panics.

use hexrpc_drivers::elf::EM_HEXAGON;
use hexrpc_model::format::{FileHeader, HEADER_LEN};
use hexrpc_model::sample::{self, build_record, elf, record, table_library};
use hexrpc_model::*;
use hexrpc_runtime::launch::BATCH;
use zerocopy::little_endian::{U16, U32};
use zerocopy::FromBytes;

const V65: u32 = sample::ARCH;

fn model() -> ModelBuilder {
    sample::tiny()
}

fn parse(bytes: &[u8]) -> Result<ModelFile<'_>, ModelError> {
    ModelFile::parse(bytes, &Limits::DEFAULT)
}

/// Rewrites the header through `edit` and fixes its checksum (a file built for another hexrpc).
fn with_header(mut bytes: Vec<u8>, edit: impl FnOnce(&mut FileHeader)) -> Vec<u8> {
    edit(FileHeader::mut_from_prefix(&mut bytes).unwrap().0);
    sample::fix_checksums(&mut bytes);
    bytes
}

#[test]
fn a_written_model_reads_back_whole() {
    let bytes = model().to_bytes();
    let m = parse(&bytes).expect("the builder's file is valid");
    assert_eq!((m.arch(), m.launches(), m.minor_version()), (V65, 2, FORMAT_MINOR));
    let p = m.provenance();
    assert_eq!((p.source_name, p.tinygrad_version, p.hexrpc_version, p.source_digest), ("tiny.onnx", "0.14.0", "0.1.0", &[0xAB; 32]));
    let libs: Vec<_> = m.libraries().collect();
    assert_eq!(libs.len(), 1);
    assert_eq!(libs[0].name, "tiny_table");
    assert_eq!(libs[0].image, &table_library()[..]);
    assert_eq!(libs[0].record.kernels().map(|k| k.name).collect::<Vec<_>>(), ["add", "zero"]);
    assert_eq!(m.arenas().collect::<Vec<_>>(), [Arena { size: 4096, align: 64 }, Arena { size: 8192, align: 128 }]);
    let init: Vec<_> = m.init().collect();
    assert_eq!(init.len(), 2);
    assert_eq!((init[0].arena, init[0].offset, init[0].len), (0, 0, 1024));
    assert_eq!(init[0].bytes.unwrap()[..4], [0, 1, 2, 3]);
    assert_eq!((init[1].offset, init[1].len, init[1].bytes), (1024, 1024, None));
    let steps: Vec<_> = m.steps().collect();
    assert_eq!((steps.len(), steps[0].library, steps[0].launches), (1, 0, 2));
    assert_eq!(steps[0].records.len(), BATCH.record_len(2, 1) + BATCH.record_len(1, 0));
    let io: Vec<_> = m.io().collect();
    assert_eq!(
        (io[0].name, io[0].direction, io[0].dtype, io[0].dims().collect::<Vec<_>>()),
        ("x", Direction::Input, DType::U8, vec![1, 16])
    );
    assert_eq!((io[1].name, io[1].arena, io[1].offset, io[1].len), ("y", 1, 64, 16));
    // The same parts give the same bytes.
    assert_eq!(model().to_bytes(), bytes);
}

#[test]
fn a_file_cut_at_any_byte_is_refused() {
    let bytes = model().to_bytes();
    for n in 0..bytes.len() {
        let e = parse(&bytes[..n]).expect_err("a cut file");
        let cut = matches!(e, ModelError::Truncated { .. }) || (n >= HEADER_LEN && matches!(e, ModelError::Checksum { .. }));
        assert!(cut, "cut at {n}: {e}");
    }
    // Appended bytes too.
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(parse(&longer).unwrap_err(), ModelError::Length { stated: bytes.len() as u64, actual: bytes.len() as u64 + 1 });
}

#[test]
fn any_changed_byte_is_refused() {
    let bytes = model().to_bytes();
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x20;
        assert!(parse(&b).is_err(), "byte {i} changed and the file still parsed");
    }
}

#[test]
fn a_bad_checksum_in_each_section_names_the_section() {
    let bytes = model().to_bytes();
    let table = &bytes[HEADER_LEN..HEADER_LEN + 8 * 24];
    for (i, kind) in format::SECTION_KINDS.iter().enumerate() {
        let e = &table[i * 24..(i + 1) * 24];
        let (offset, len) = (u64::from_le_bytes(e[8..16].try_into().unwrap()), u64::from_le_bytes(e[16..24].try_into().unwrap()));
        assert!(len > 0, "{kind:?} is empty in the test model");
        let mut b = bytes.clone();
        b[(offset + len / 2) as usize] ^= 1;
        match parse(&b).unwrap_err() {
            ModelError::Checksum { part: Part::Section(k), .. } => assert_eq!(k, *kind),
            e => panic!("{kind:?}: {e}"),
        }
    }
    let mut b = bytes.clone();
    b[HEADER_LEN + 3] ^= 1;
    assert!(matches!(parse(&b).unwrap_err(), ModelError::Checksum { part: Part::SectionTable, .. }));
    let mut b = bytes;
    b[20] ^= 1;
    assert!(matches!(parse(&b).unwrap_err(), ModelError::Checksum { part: Part::Header, .. }));
}

#[test]
fn versions_abis_and_architectures_this_build_does_not_know_are_named() {
    let bytes = model().to_bytes();
    assert_eq!(parse(b"PK\x03\x04 a zip file").unwrap_err(), ModelError::NotAModel);
    let unsupported = |b: Vec<u8>| match parse(&b).unwrap_err() {
        ModelError::Unsupported { field, found, supported, .. } => (field, found, supported),
        e => panic!("{e}"),
    };
    let (field, found, _) = unsupported(with_header(bytes.clone(), |h| h.major = U16::new(2)));
    assert_eq!((field, found), ("format major version", 2));
    assert_eq!(unsupported(with_header(bytes.clone(), |h| h.minor = U16::new(FORMAT_MINOR + 1))).0, "format minor version");
    assert_eq!(unsupported(with_header(bytes.clone(), |h| h.entry_abi = U32::new(1))).1, 1);
    assert_eq!(unsupported(with_header(bytes.clone(), |h| h.arch = U32::new(0x99))).0, "Hexagon architecture");
    assert_eq!(unsupported(with_header(bytes.clone(), |h| h.flags = U32::new(4))).0, "flags");
    // A file for v66 whose library was built for v65.
    let (field, found, _) = unsupported(with_header(bytes.clone(), |h| h.arch = U32::new(0x66)));
    assert_eq!((field, found), ("Hexagon architecture (e_flags)", 0x65));
    let msg = parse(&with_header(bytes, |h| h.major = U16::new(2))).unwrap_err().to_string();
    assert!(msg.contains("format major version is 2") && msg.contains("supports format 1"), "{msg}");
}

#[test]
fn libraries_that_are_not_hexagon_tables_are_refused() {
    let with_library = |image: Vec<u8>| {
        let mut m = model();
        m.libraries[0].1 = image;
        m.to_bytes()
    };
    assert_eq!(parse(&with_library(b"not an elf at all".to_vec())).unwrap_err(), ModelError::NotHexagonElf { library: 0, machine: 0 });
    let x86 = with_library(elf(62, V65, None));
    assert_eq!(parse(&x86).unwrap_err(), ModelError::NotHexagonElf { library: 0, machine: 62 });
    let bare = with_library(elf(EM_HEXAGON, V65, None));
    assert_eq!(parse(&bare).unwrap_err(), ModelError::BuildRecord { library: 0, error: None });
    // A single-kernel (non-table) build.
    let single = with_library(elf(EM_HEXAGON, V65, Some(&build_record(&[("k", "buf")], 0))));
    assert!(matches!(parse(&single).unwrap_err(), ModelError::Unsupported { part: Part::Library(0), field: "build record", .. }));
}

#[test]
fn records_are_checked_against_their_kernels_and_arenas() {
    let with_records = |records: Vec<u8>, launches: u32| {
        let mut m = model();
        m.steps = vec![StepSpec { library: 0, launches, records }];
        m.to_bytes()
    };
    let at = Part::Record { step: 0, record: 0 };
    // A kernel index past the table.
    let e = parse(&with_records(record(2, &[(0, 0, 16)], &[]), 1)).unwrap_err();
    assert_eq!(e, ModelError::BadIndex { part: at, field: "kernel", index: 2, count: 2 });
    // The wrong number of views for the kernel.
    let e = parse(&with_records(record(1, &[(0, 0, 16), (0, 16, 16)], &[]), 1)).unwrap_err();
    assert_eq!(e, ModelError::RecordShape { part: at, kernel: 1, found: (2, 0), signature: (1, 0) });
    // A view past its arena, a view's arena past the table.
    let e = parse(&with_records(record(1, &[(0, 4000, 97)], &[]), 1)).unwrap_err();
    assert_eq!(e, ModelError::OutOfRange { part: at, field: "view", offset: 4000, len: 97, limit: 4096 });
    let e = parse(&with_records(record(1, &[(2, 0, 1)], &[]), 1)).unwrap_err();
    assert_eq!(e, ModelError::BadIndex { part: at, field: "view's arena", index: 2, count: 2 });
    // A view ending in u32 overflow.
    let e = parse(&with_records(record(1, &[(0, u32::MAX, 2)], &[]), 1)).unwrap_err();
    assert!(matches!(e, ModelError::OutOfRange { .. }), "{e}");
    // A record cut short, and a record count that disagrees with the bytes.
    let mut cut = record(0, &[(1, 0, 16), (1, 64, 16)], &[7]);
    cut.truncate(cut.len() - 4);
    assert!(matches!(parse(&with_records(cut, 1)).unwrap_err(), ModelError::OutOfRange { field: "record", .. }));
    let two = [record(1, &[(0, 0, 8)], &[]), record(1, &[(0, 8, 8)], &[])].concat();
    assert!(matches!(parse(&with_records(two.clone(), 1)).unwrap_err(), ModelError::Unsupported { part: Part::Step(0), .. }));
    assert!(matches!(parse(&with_records(two, 3)).unwrap_err(), ModelError::OutOfRange { field: "record", .. }));
    // A step on a library that does not exist.
    let mut m = model();
    m.steps[0].library = 1;
    assert_eq!(parse(&m.to_bytes()).unwrap_err(), ModelError::BadIndex { part: Part::Step(0), field: "library", index: 1, count: 1 });
}

#[test]
fn counts_past_this_builds_capacities_are_refused() {
    let mut m = model();
    m.arenas = vec![(4096, 64); MAX_ARENAS + 1];
    assert_eq!(
        parse(&m.to_bytes()).unwrap_err(),
        ModelError::Capacity { what: "arenas", found: MAX_ARENAS as u64 + 1, most: MAX_ARENAS as u64 }
    );
    let mut m = model();
    m.libraries = vec![("t".into(), table_library()); MAX_LIBRARIES + 1];
    assert!(matches!(parse(&m.to_bytes()).unwrap_err(), ModelError::Capacity { what: "libraries", .. }));
    // 257 records in one step: past a batch.
    let mut m = model();
    let one = record(1, &[(0, 2048, 8)], &[]);
    m.steps = vec![StepSpec { library: 0, launches: 257, records: one.repeat(257) }];
    assert!(matches!(parse(&m.to_bytes()).unwrap_err(), ModelError::Capacity { what: "records in a step", found: 257, .. }));
    // 4,097 records in all (17 steps of 241).
    let mut m = model();
    m.steps = (0..17).map(|_| StepSpec { library: 0, launches: 241, records: one.repeat(241) }).collect();
    assert_eq!(parse(&m.to_bytes()).unwrap_err(), ModelError::Capacity { what: "launch records", found: 4097, most: 4096 });
    let mut m = model();
    m.steps.clear();
    assert!(parse(&m.to_bytes()).is_err());
}

#[test]
fn sizes_that_would_exhaust_host_memory_are_refused_before_anything_is_allocated() {
    let mut m = model();
    m.arenas[1].0 = 1 << 40;
    assert_eq!(parse(&m.to_bytes()).unwrap_err(), ModelError::TooLarge { what: "an arena", bytes: 1 << 40, limit: 1 << 30 });
    let mut m = model();
    m.arenas = vec![(1 << 30, 64); 3];
    m.io[1].arena = 0;
    assert!(matches!(parse(&m.to_bytes()).unwrap_err(), ModelError::TooLarge { what: "the arenas together", .. }));
    // A tighter limit for a small device.
    let bytes = model().to_bytes();
    let small = Limits { max_arena_bytes: 4096, max_total_arena_bytes: 1 << 20 };
    assert_eq!(ModelFile::parse(&bytes, &small).unwrap_err(), ModelError::TooLarge { what: "an arena", bytes: 8192, limit: 4096 });
}

#[test]
fn initial_contents_must_lie_in_their_arenas_and_not_overlap() {
    let with_init = |init: Vec<InitSpec>| {
        let mut m = model();
        m.init = init;
        m.to_bytes()
    };
    let e = parse(&with_init(vec![InitSpec::Zeros { arena: 0, offset: 4000, len: 97 }])).unwrap_err();
    assert_eq!(e, ModelError::OutOfRange { part: Part::Init(0), field: "range", offset: 4000, len: 97, limit: 4096 });
    let e = parse(&with_init(vec![InitSpec::Zeros { arena: 5, offset: 0, len: 1 }])).unwrap_err();
    assert!(matches!(e, ModelError::BadIndex { field: "arena", index: 5, .. }), "{e}");
    let overlapping = vec![InitSpec::Zeros { arena: 0, offset: 0, len: 100 }, InitSpec::Bytes { arena: 0, offset: 99, bytes: vec![1; 8] }];
    assert_eq!(parse(&with_init(overlapping)).unwrap_err(), ModelError::Overlap { first: Part::Init(0), second: Part::Init(1) });
    // Adjacent ranges and ranges of different arenas are fine.
    let fine = vec![InitSpec::Zeros { arena: 0, offset: 0, len: 100 }, InitSpec::Zeros { arena: 0, offset: 100, len: 1 }];
    parse(&with_init(fine)).unwrap();
}

#[test]
fn inputs_and_outputs_are_checked() {
    let with_io = |edit: &dyn Fn(&mut Vec<IoSpec>)| {
        let mut m = model();
        edit(&mut m.io);
        m.to_bytes()
    };
    // Over a weight range.
    let e = parse(&with_io(&|io| io[0].arena = 0)).unwrap_err();
    assert_eq!(e, ModelError::Overlap { first: Part::Init(0), second: Part::Io(0) });
    // Over another input or output.
    let e = parse(&with_io(&|io| io[1].offset = 8)).unwrap_err();
    assert_eq!(e, ModelError::Overlap { first: Part::Io(0), second: Part::Io(1) });
    // Past its arena.
    let e = parse(&with_io(&|io| io[1].offset = 8190)).unwrap_err();
    assert_eq!(e, ModelError::OutOfRange { part: Part::Io(1), field: "range", offset: 8190, len: 16, limit: 8192 });
    // Two of one name; no name.
    assert_eq!(parse(&with_io(&|io| io[1].name = "x".into())).unwrap_err(), ModelError::DuplicateName { io: 1 });
    assert!(matches!(parse(&with_io(&|io| io[1].name.clear())).unwrap_err(), ModelError::BadText { field: "name", .. }));
    // Nine dimensions; a shape whose byte count overflows.
    assert!(matches!(parse(&with_io(&|io| io[1].shape = vec![1; 9])).unwrap_err(), ModelError::Unsupported { field: "rank", .. }));
    let e = parse(&with_io(&|io| io[1].shape = vec![1 << 32, 1 << 32])).unwrap_err();
    assert_eq!(e, ModelError::IoLength { io: 1, len: 0, shape_bytes: None });
    // No input or output at all.
    assert!(matches!(parse(&with_io(&|io| io.clear())).unwrap_err(), ModelError::Capacity { what: "inputs and outputs", .. }));
}

#[test]
fn every_error_says_what_it_is_about() {
    let bytes = model().to_bytes();
    let mut b = bytes.clone();
    let n = b.len();
    b[n - 3] ^= 1;
    let msg = parse(&b).unwrap_err().to_string();
    assert!(msg.contains("data section") && msg.contains("CRC-32"), "{msg}");
    let msg = parse(&bytes[..100]).unwrap_err().to_string();
    assert!(msg.contains("cut short") && msg.contains(&format!("{}", bytes.len())), "{msg}");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn cases() -> u32 {
        std::env::var("HEXRPC_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    }

    proptest! {
        // HEXRPC_PROP_CASES raises the count (CI's fuzz step does when cargo-fuzz is missing).
        #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

        /// Arbitrary edits of a valid file (several bytes set anywhere, then cut anywhere)
        /// never panic the reader.
        #[test]
        fn edited_files_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
                                    cut in any::<prop::sample::Index>()) {
            let mut b = model().to_bytes();
            for (i, v) in edits {
                let at = i.index(b.len());
                b[at] = v;
            }
            let n = cut.index(b.len() + 1);
            let _ = parse(&b[..n]);
        }

        /// The same with the checksums made right again, so the edits reach the checks behind
        /// them: still never a panic, and a file that parses is one the accessors can walk.
        #[test]
        fn edited_files_with_good_checksums_never_panic(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
            let mut b = model().to_bytes();
            for (i, v) in edits {
                let at = i.index(b.len());
                b[at] = v;
            }
            sample::fix_checksums(&mut b);
            if let Ok(m) = parse(&b) {
                let _ = (m.provenance(), m.libraries().count(), m.arenas().count(), m.init().count(), m.steps().count(), m.io().count());
            }
        }

        /// Random bytes behind a valid header prefix never panic the reader.
        #[test]
        fn random_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut b = model().to_bytes()[..HEADER_LEN].to_vec();
            b.extend(tail);
            let _ = parse(&b);
        }
    }
}
