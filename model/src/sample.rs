//! A small, complete model file made without a compiler (feature `std`): the reference for
//! this crate's tests, the fuzz target's starting point and an example of the parts a file
//! holds. Its library is a bare ELF header and a build record, with no code: it reads as a valid
//! file, and is no use on a DSP.

use std::string::String;
use std::vec::Vec;

use hexrpc_drivers::elf::{EM_HEXAGON, SHT_NOTE};
use hexrpc_runtime::launch::record::{write_record_asm_flags, FLAG_BATCHES, FLAG_PROGRAM};
use hexrpc_runtime::launch::{AbiVersion, Signature};

use crate::dtype::DType;
use crate::format::Direction;
use crate::write::{InitSpec, IoSpec, ModelBuilder, StepSpec};

/// The architecture the sample is for: v65 (the comma three's CDSP).
pub const ARCH: u32 = 0x65;

/// The `.byte` lines of the record writer as bytes (what the assembler makes of them).
fn assembled(asm: &str) -> Vec<u8> {
    asm.lines().filter_map(|l| l.trim().strip_prefix(".byte ")).flat_map(|l| l.split(", ").filter_map(|b| b.parse::<u8>().ok())).collect()
}

/// A minimal ELF32 little-endian shared object for `machine` and `arch` (`e_flags`) with one
/// `SHT_NOTE` section holding `note`, or no section at all.
pub fn elf(machine: u16, arch: u32, note: Option<&[u8]>) -> Vec<u8> {
    elf_with(machine, arch, &[], note)
}

/// [`elf`] with `prefix` placed right after the ELF header (before the note): the bench's
/// library models are found by a tag there.
pub fn elf_with(machine: u16, arch: u32, prefix: &[u8], note: Option<&[u8]>) -> Vec<u8> {
    let mut img = std::vec![0u8; 52];
    img.extend_from_slice(prefix);
    img[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 1, 1, 1]);
    img[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    img[18..20].copy_from_slice(&machine.to_le_bytes());
    img[36..40].copy_from_slice(&arch.to_le_bytes());
    let Some(note) = note else { return img };
    let note_off = img.len();
    img.extend_from_slice(note);
    let shoff = img.len();
    img[32..36].copy_from_slice(&(shoff as u32).to_le_bytes());
    img[46..48].copy_from_slice(&40u16.to_le_bytes());
    img[48..50].copy_from_slice(&2u16.to_le_bytes());
    img.extend_from_slice(&[0u8; 40]);
    let mut sh = [0u8; 40];
    sh[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
    sh[16..20].copy_from_slice(&(note_off as u32).to_le_bytes());
    sh[20..24].copy_from_slice(&(note.len() as u32).to_le_bytes());
    img.extend_from_slice(&sh);
    img
}

/// The build record of a library with `kernels` (name, signature) and entry `flags`, as the
/// note's bytes.
pub fn build_record(kernels: &[(&str, &str)], flags: u32) -> Vec<u8> {
    let sigs: Vec<(&str, Signature)> = kernels.iter().map(|&(n, s)| (n, Signature::parse(s).expect("a sample signature"))).collect();
    let named: Vec<(&str, &Signature)> = sigs.iter().map(|(n, s)| (*n, s)).collect();
    let mut asm = String::new();
    write_record_asm_flags(&mut asm, AbiVersion::V2, &named, flags).expect("a sample record");
    assembled(&asm)
}

/// The sample table's kernels: `add` (out = in + c, bytewise) and `zero` (x = 0).
pub const TABLE: [(&str, &str); 2] = [("add", "buf,buf,u32"), ("zero", "buf")];

/// A v65 kernel-table library with the kernels of [`TABLE`] whose entry runs batches and
/// programs (as every table `hexrpc build-lib --table` makes now).
pub fn table_library() -> Vec<u8> {
    elf(EM_HEXAGON, ARCH, Some(&build_record(&TABLE, FLAG_BATCHES | FLAG_PROGRAM)))
}

/// One launch record in the batch form: `views` as (arena, offset, length), `scalars` as slots.
pub fn record(kernel: u32, views: &[(u32, u32, u32)], scalars: &[u64]) -> Vec<u8> {
    crate::write::encode_record(kernel, views, scalars).expect("a sample record's counts fit")
}

/// The sample: weights in arena 0 (1 KiB of bytes, then 1 KiB of zeros), the input `x` (uint8,
/// 1×16) and the output `y` (float32, 4) in arena 1, one step of two records (`add` on the input
/// and output, `zero` on arena 0's scratch).
pub fn tiny() -> ModelBuilder {
    let mut records = record(0, &[(1, 0, 16), (1, 64, 16)], &[7]);
    records.extend(record(1, &[(0, 2048, 64)], &[]));
    ModelBuilder {
        arch: ARCH,
        source_digest: [0xAB; 32],
        source_name: "tiny.onnx".into(),
        tinygrad_version: "0.14.0".into(),
        hexrpc_version: "0.1.0".into(),
        libraries: std::vec![("tiny_table".into(), table_library())],
        arenas: std::vec![(4096, 64), (8192, 128)],
        init: std::vec![
            InitSpec::Zeros { arena: 0, offset: 1024, len: 1024 },
            InitSpec::Bytes { arena: 0, offset: 0, bytes: (0..1024).map(|i| i as u8).collect() },
        ],
        steps: std::vec![StepSpec { library: 0, launches: 2, records }],
        io: std::vec![
            IoSpec { name: "x".into(), direction: Direction::Input, dtype: DType::U8, shape: std::vec![1, 16], arena: 1, offset: 0 },
            IoSpec { name: "y".into(), direction: Direction::Output, dtype: DType::F32, shape: std::vec![4], arena: 1, offset: 64 },
        ],
    }
}

/// Recomputes every checksum of `bytes` that its own table lets it find (the header's, the
/// table's, each section's that lies within the bytes): a fuzzer's or a test's edits then reach
/// the checks behind the checksums instead of stopping at them.
pub fn fix_checksums(bytes: &mut [u8]) {
    use crate::format::{HEADER_LEN, SECTION_KINDS};
    let table_len = SECTION_KINDS.len() * 24;
    if bytes.len() < HEADER_LEN + table_len {
        return;
    }
    for i in 0..SECTION_KINDS.len() {
        let e = HEADER_LEN + i * 24;
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let (offset, len) = (word(e + 8), word(e + 16));
        let Some(end) = offset.checked_add(len).filter(|&end| end <= bytes.len() as u64) else { continue };
        let crc = crc32fast::hash(&bytes[offset as usize..end as usize]);
        bytes[e + 4..e + 8].copy_from_slice(&crc.to_le_bytes());
    }
    let table = crc32fast::hash(&bytes[HEADER_LEN..HEADER_LEN + table_len]);
    bytes[56..60].copy_from_slice(&table.to_le_bytes());
    let header = crc32fast::hash(&bytes[..60]);
    bytes[60..64].copy_from_slice(&header.to_le_bytes());
}
