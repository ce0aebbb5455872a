//! Why a model file was refused. Every refusal names what was wrong: the field, the value the
//! file has and what this build accepts.

use core::fmt;

use hexrpc_runtime::launch::{RecordError, SignatureError};

use crate::format::SectionKind;

/// A part of the file an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The header.
    Header,
    /// The section table.
    SectionTable,
    /// A section.
    Section(SectionKind),
    /// Library `i`.
    Library(usize),
    /// Arena `i`.
    Arena(usize),
    /// Initial-contents range `i`.
    Init(usize),
    /// Step `i`.
    Step(usize),
    /// Record `record` of step `step`.
    Record {
        /// The step.
        step: usize,
        /// The record within it.
        record: usize,
    },
    /// Input or output `i`.
    Io(usize),
    /// The provenance.
    Provenance,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Header => f.write_str("the header"),
            Part::SectionTable => f.write_str("the section table"),
            Part::Section(k) => write!(f, "the {} section", k.name()),
            Part::Library(i) => write!(f, "library {i}"),
            Part::Arena(i) => write!(f, "arena {i}"),
            Part::Init(i) => write!(f, "initial-contents range {i}"),
            Part::Step(i) => write!(f, "step {i}"),
            Part::Record { step, record } => write!(f, "record {record} of step {step}"),
            Part::Io(i) => write!(f, "input/output {i}"),
            Part::Provenance => f.write_str("the provenance"),
        }
    }
}

/// A symbol's name as a refusal carries it (no allocation): its first 63 bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SymbolName {
    bytes: [u8; 63],
    len: u8,
}

impl SymbolName {
    /// The first 63 bytes of `name`.
    pub fn new(name: &[u8]) -> SymbolName {
        let mut bytes = [0u8; 63];
        let len = name.len().min(63);
        bytes[..len].copy_from_slice(&name[..len]);
        SymbolName { bytes, len: len as u8 }
    }

    /// The bytes kept.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Display for SymbolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.as_bytes().utf8_chunks() {
            f.write_str(chunk.valid())?;
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for SymbolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Why a model file was refused. Nothing reached the DSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelError {
    /// The bytes end before `part` does: `need` bytes from the start of the file, `have` there.
    Truncated {
        /// What was cut short.
        part: Part,
        /// Bytes the file needs.
        need: u64,
        /// Bytes it has.
        have: u64,
    },
    /// The first eight bytes are not `HXMODEL\0`: not a model file.
    NotAModel,
    /// The header states a file length other than the bytes given (longer bytes: something was
    /// appended).
    Length {
        /// The length the header states.
        stated: u64,
        /// The bytes given.
        actual: u64,
    },
    /// A field holds a value this build does not support.
    Unsupported {
        /// Where.
        part: Part,
        /// The field's name.
        field: &'static str,
        /// The file's value.
        found: u64,
        /// What this build supports, in words.
        supported: &'static str,
    },
    /// A checksum does not match: the file was corrupted or edited.
    Checksum {
        /// What the checksum covers.
        part: Part,
        /// The checksum the file stores.
        stored: u32,
        /// The checksum of the bytes as they are.
        computed: u32,
    },
    /// A count is past this build's capacity.
    Capacity {
        /// What was counted.
        what: &'static str,
        /// The file's count.
        found: u64,
        /// The most this build takes.
        most: u64,
    },
    /// A range (`offset`, `len`) reaches past what contains it (`limit` bytes).
    OutOfRange {
        /// Where.
        part: Part,
        /// Which range.
        field: &'static str,
        /// Its start.
        offset: u64,
        /// Its length.
        len: u64,
        /// The size of what should contain it.
        limit: u64,
    },
    /// An index points past its table.
    BadIndex {
        /// Where.
        part: Part,
        /// The field's name.
        field: &'static str,
        /// The file's index.
        index: u64,
        /// How many entries the table has.
        count: u64,
    },
    /// Two things that must not share bytes do.
    Overlap {
        /// One of them.
        first: Part,
        /// The other.
        second: Part,
    },
    /// A table section's length is not a whole number of entries.
    TableLength {
        /// The section.
        kind: SectionKind,
        /// Its length.
        len: u64,
        /// The size of one entry.
        entry: u32,
    },
    /// A name or version is not UTF-8, or longer than its limit.
    BadText {
        /// Where.
        part: Part,
        /// The field's name.
        field: &'static str,
    },
    /// Library `library` imports `symbol`, which the DSP does not provide to a loaded library
    /// (`DSP_PROVIDED_SYMBOLS`): it would fail to load on the device.
    Import {
        /// The library.
        library: usize,
        /// The symbol.
        symbol: SymbolName,
    },
    /// A library image is not a Hexagon ELF shared object.
    NotHexagonElf {
        /// The library.
        library: usize,
        /// Its `e_machine` (0 when the image is not an ELF32 file at all).
        machine: u16,
    },
    /// A library has no build record, or a malformed one.
    BuildRecord {
        /// The library.
        library: usize,
        /// What the record reader said (`None`: the image has no record).
        error: Option<RecordError>,
    },
    /// A kernel's signature in a library's build record does not parse.
    Signature {
        /// The library.
        library: usize,
        /// The kernel's index.
        kernel: usize,
        /// Why.
        error: SignatureError,
    },
    /// A record's view or scalar count differs from its kernel's signature.
    RecordShape {
        /// Where.
        part: Part,
        /// The kernel's index.
        kernel: u32,
        /// Views and scalars in the record.
        found: (u16, u16),
        /// Buffers and scalars in the signature.
        signature: (usize, usize),
    },
    /// An input or output's length is not its shape's element count times its dtype's size.
    IoLength {
        /// Which.
        io: usize,
        /// Its stored length.
        len: u64,
        /// What its shape and dtype make (`None`: the product overflows).
        shape_bytes: Option<u64>,
    },
    /// Two inputs or outputs have the same name.
    DuplicateName {
        /// The later of the two.
        io: usize,
    },
    /// The arenas would take more host memory than the limit allows.
    TooLarge {
        /// What.
        what: &'static str,
        /// The file's figure in bytes.
        bytes: u64,
        /// The limit ([`Limits`](crate::Limits)).
        limit: u64,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ModelError::Truncated { part, need, have } => {
                write!(f, "the file is cut short: {part} needs {need} bytes, the file has {have}")
            }
            ModelError::NotAModel => f.write_str("not a hexrpc model file (its first bytes are not HXMODEL)"),
            ModelError::Length { stated, actual } => {
                write!(f, "the header says the file has {stated} bytes, it has {actual} (bytes were appended or the file was cut)")
            }
            ModelError::Unsupported { part, field, found, supported } => {
                write!(f, "{part}: {field} is {found} ({found:#x}); this build supports {supported}")
            }
            ModelError::Checksum { part, stored, computed } => write!(
                f,
                "{part} is corrupted: its CRC-32 is {computed:#010x}, the file says {stored:#010x} (the file was damaged or edited)"
            ),
            ModelError::Capacity { what, found, most } => write!(f, "{found} {what}: this build takes at most {most}"),
            ModelError::OutOfRange { part, field, offset, len, limit } => {
                write!(f, "{part}: {field} [{offset}, +{len}) reaches past the {limit} bytes it must lie in")
            }
            ModelError::BadIndex { part, field, index, count } => {
                write!(f, "{part}: {field} {index} is past the table's {count} entries")
            }
            ModelError::Overlap { first, second } => write!(f, "{first} and {second} share bytes"),
            ModelError::TableLength { kind, len, entry } => {
                write!(f, "the {} section's {len} bytes are not a whole number of {entry}-byte entries", kind.name())
            }
            ModelError::BadText { part, field } => write!(f, "{part}: {field} is not UTF-8 text of at most 255 bytes"),
            ModelError::Import { library, symbol } => write!(
                f,
                "library {library} imports {symbol}, which the DSP does not provide (a library from `hexrpc build-lib` imports only what it does)"
            ),
            ModelError::NotHexagonElf { library, machine: 0 } => {
                write!(f, "library {library} is not an ELF32 little-endian image")
            }
            ModelError::NotHexagonElf { library, machine } => {
                write!(f, "library {library} is an ELF for machine {machine}, not Hexagon (164)")
            }
            ModelError::BuildRecord { library, error: None } => {
                write!(f, "library {library} has no hexrpc build record (build it with `hexrpc build-lib --table`)")
            }
            ModelError::BuildRecord { library, error: Some(e) } => {
                write!(f, "library {library}'s build record cannot be read: {e}")
            }
            ModelError::Signature { library, kernel, error } => {
                write!(f, "library {library}, kernel {kernel}: its signature does not parse: {error}")
            }
            ModelError::RecordShape { part, kernel, found, signature } => write!(
                f,
                "{part}: kernel {kernel} takes {} buffers and {} scalars, the record has {} views and {} scalars",
                signature.0, signature.1, found.0, found.1
            ),
            ModelError::IoLength { io, len, shape_bytes: Some(want) } => {
                write!(f, "input/output {io}: its length is {len} bytes, its shape and dtype make {want}")
            }
            ModelError::IoLength { io, len, shape_bytes: None } => {
                write!(f, "input/output {io}: its shape's byte count overflows (stored length {len})")
            }
            ModelError::DuplicateName { io } => write!(f, "input/output {io} has the name of an earlier one"),
            ModelError::TooLarge { what, bytes, limit } => {
                write!(f, "{what} would take {bytes} bytes of host memory; the limit is {limit}")
            }
        }
    }
}

impl core::error::Error for ModelError {}
