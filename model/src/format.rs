//! The on-disk layout of a model file (`docs/model-format.md` is its description in prose):
//! every structure little-endian and byte-aligned, read in place with `zerocopy`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"HXMODEL\0";
/// The format's major version this build reads and writes: a file of another major version is
/// refused.
pub const FORMAT_MAJOR: u16 = 1;
/// The newest minor version this build knows. A newer minor version only adds what an older
/// reader may ignore (none is defined yet); this build reads minor versions up to its own.
pub const FORMAT_MINOR: u16 = 0;
/// Every section starts at a multiple of this.
pub const SECTION_ALIGN: u64 = 8;

/// The header: the first [`HEADER_LEN`] bytes of the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`FORMAT_MAJOR`].
    pub major: U16,
    /// At most [`FORMAT_MINOR`].
    pub minor: U16,
    /// [`HEADER_LEN`].
    pub header_len: U32,
    /// The whole file's length in bytes.
    pub file_len: U64,
    /// Entries in the section table, which follows the header.
    pub sections: U32,
    /// Zero: no flag is defined.
    pub flags: U32,
    /// The launch ABI version of the libraries' entries and of the records (2).
    pub entry_abi: U32,
    /// The Hexagon architecture the libraries were built for, as ELF's `e_flags` names it
    /// (0x65 for v65).
    pub arch: U32,
    /// Launch records in the whole file.
    pub launches: U32,
    /// Zero.
    pub reserved: [u8; 12],
    /// CRC-32 of the section table.
    pub table_crc: U32,
    /// CRC-32 of the header's first 60 bytes (everything before this field).
    pub header_crc: U32,
}

/// Length of [`FileHeader`].
pub const HEADER_LEN: usize = 64;

/// One entry of the section table.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct SectionEntry {
    /// [`SectionKind`] as its number.
    pub kind: U32,
    /// CRC-32 of the section's bytes.
    pub crc: U32,
    /// Where the section starts in the file (a multiple of [`SECTION_ALIGN`]).
    pub offset: U64,
    /// Its length in bytes.
    pub len: U64,
}

/// A byte range of the data section.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct DataRange {
    /// Offset from the start of the data section.
    pub offset: U64,
    /// Length in bytes.
    pub len: U64,
}

/// The provenance section: where the model came from and what made the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct ProvenanceEntry {
    /// SHA-256 of the source model file (zeros when it was not a file, e.g. a captured jit).
    pub source_digest: [u8; 32],
    /// The source's name (UTF-8).
    pub source_name: DataRange,
    /// tinygrad's version at export (UTF-8).
    pub tinygrad_version: DataRange,
    /// hexrpc's version at export (UTF-8).
    pub hexrpc_version: DataRange,
}

/// A kernel-table library: its name and its image (a Hexagon ELF shared object with its build
/// record).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct LibraryEntry {
    /// The name the DSP loads it under (UTF-8).
    pub name: DataRange,
    /// The image.
    pub image: DataRange,
}

/// An arena: one buffer the model's views live in.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct ArenaEntry {
    /// Its size in bytes.
    pub size: U64,
    /// Its alignment in bytes (a power of two).
    pub align: U32,
    /// Zero: no flag is defined.
    pub flags: U32,
}

/// What an initial-contents range holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitKind {
    /// Zeros (stored as the range alone).
    Zeros = 0,
    /// Bytes from the data section.
    Bytes = 1,
}

/// A range of an arena's initial contents (the weights).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct InitEntry {
    /// The arena's index.
    pub arena: U32,
    /// [`InitKind`] as its number.
    pub kind: U32,
    /// Where the range starts in the arena.
    pub offset: U64,
    /// Its length.
    pub len: U64,
    /// For [`InitKind::Bytes`], the offset of its bytes in the data section (zero otherwise).
    pub data: U64,
}

/// One step of a run: a batch of launch records on one library.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct StepEntry {
    /// The library's index.
    pub library: U32,
    /// Records in the step.
    pub launches: U32,
    /// Where its records start in the records section.
    pub records_offset: U32,
    /// Their length in bytes.
    pub records_len: U32,
}

/// Whether an I/O entry is an input or an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Written by the caller before a run.
    Input = 0,
    /// Read by the caller after a run.
    Output = 1,
}

/// Most dimensions of an input or output.
pub const MAX_RANK: usize = 8;

/// An input or an output of the model.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
pub struct IoEntry {
    /// Its name (UTF-8).
    pub name: DataRange,
    /// [`Direction`] as its number.
    pub direction: U32,
    /// [`DType`](crate::DType) as its number.
    pub dtype: U32,
    /// Dimensions used in `dims` (0 for a scalar).
    pub rank: U32,
    /// The arena it lives in.
    pub arena: U32,
    /// Its shape; entries past `rank` are zero.
    pub dims: [U64; MAX_RANK],
    /// Where it starts in the arena.
    pub offset: U64,
    /// Its length in bytes (the shape's element count times the dtype's size).
    pub len: U64,
}

/// The kinds of section. Every kind appears exactly once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    /// [`ProvenanceEntry`], once.
    Provenance = 1,
    /// [`LibraryEntry`] per library.
    Libraries = 2,
    /// [`ArenaEntry`] per arena.
    Arenas = 3,
    /// [`InitEntry`] per range of initial contents (may be empty).
    Init = 4,
    /// [`StepEntry`] per step.
    Steps = 5,
    /// The launch records, in the launch ABI's batch-record form.
    Records = 6,
    /// [`IoEntry`] per input or output.
    Io = 7,
    /// Bytes the other sections point into: names, versions, images, weights.
    Data = 8,
}

/// Every kind, in the order a writer lays them out.
pub const SECTION_KINDS: [SectionKind; 8] = [
    SectionKind::Provenance,
    SectionKind::Libraries,
    SectionKind::Arenas,
    SectionKind::Init,
    SectionKind::Steps,
    SectionKind::Records,
    SectionKind::Io,
    SectionKind::Data,
];

impl SectionKind {
    /// The kind numbered `n`.
    pub fn from_u32(n: u32) -> Option<SectionKind> {
        SECTION_KINDS.iter().copied().find(|k| *k as u32 == n)
    }

    /// Its name, as errors and `hexrpc model info` print it.
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Provenance => "provenance",
            SectionKind::Libraries => "libraries",
            SectionKind::Arenas => "arenas",
            SectionKind::Init => "init",
            SectionKind::Steps => "steps",
            SectionKind::Records => "records",
            SectionKind::Io => "io",
            SectionKind::Data => "data",
        }
    }

    /// The size of one entry of a table section (`None` for the records and the data).
    pub fn entry_size(self) -> Option<usize> {
        Some(match self {
            SectionKind::Provenance => core::mem::size_of::<ProvenanceEntry>(),
            SectionKind::Libraries => core::mem::size_of::<LibraryEntry>(),
            SectionKind::Arenas => core::mem::size_of::<ArenaEntry>(),
            SectionKind::Init => core::mem::size_of::<InitEntry>(),
            SectionKind::Steps => core::mem::size_of::<StepEntry>(),
            SectionKind::Io => core::mem::size_of::<IoEntry>(),
            SectionKind::Records | SectionKind::Data => return None,
        })
    }
}

// The layout is the format: a change of any size is a new format version.
const _: () = {
    assert!(core::mem::size_of::<FileHeader>() == HEADER_LEN);
    assert!(core::mem::size_of::<SectionEntry>() == 24);
    assert!(core::mem::size_of::<DataRange>() == 16);
    assert!(core::mem::size_of::<ProvenanceEntry>() == 80);
    assert!(core::mem::size_of::<LibraryEntry>() == 32);
    assert!(core::mem::size_of::<ArenaEntry>() == 16);
    assert!(core::mem::size_of::<InitEntry>() == 32);
    assert!(core::mem::size_of::<StepEntry>() == 16);
    assert!(core::mem::size_of::<IoEntry>() == 112);
    assert!(core::mem::offset_of!(FileHeader, table_crc) == 56 && core::mem::offset_of!(FileHeader, header_crc) == 60);
    assert!(core::mem::offset_of!(IoEntry, dims) == 32 && core::mem::offset_of!(IoEntry, offset) == 96);
};
