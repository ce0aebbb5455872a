//! Reading a model file: [`ModelFile::parse`] validates the whole file, every count, index,
//! offset and length against the file's own sizes and this build's capacities, before anything
//! is allocated or sent; afterwards the accessors cannot fail.

use hexrpc_drivers::elf::{string_at, Elf, EM_HEXAGON, SHT_DYNSYM};
use hexrpc_runtime::launch::record::DSP_PROVIDED_SYMBOLS;
use hexrpc_runtime::launch::{AbiVersion, LibraryRecord, Signature, BATCH, MAX_BATCH_LAUNCHES, MAX_BATCH_LEASES, MAX_BATCH_RECORD_BYTES};
use zerocopy::FromBytes;

use crate::dtype::DType;
use crate::error::{ModelError, Part, SymbolName};
use crate::format::*;

/// Most kernel-table libraries in one model.
pub const MAX_LIBRARIES: usize = 16;
/// Most arenas: a call carries at most [`MAX_BATCH_LEASES`] leases, every arena is one, and one
/// more is kept for a run's records (a loader may keep them in a lease of their own, so that a
/// run does not copy them into the kernel).
pub const MAX_ARENAS: usize = MAX_BATCH_LEASES - 1;
/// Most initial-contents ranges.
pub const MAX_INIT_RANGES: usize = 1 << 16;
/// Most steps (batches) in a run.
pub const MAX_STEPS: usize = 1024;
/// Most launch records in a model.
pub const MAX_LAUNCHES: usize = 4096;
/// Most inputs and outputs together.
pub const MAX_IO: usize = 64;
/// Most bytes of a name or version.
pub const MAX_TEXT: usize = 255;
/// The Hexagon architectures (ELF `e_flags`) a file may name: v60 to v79.
pub const KNOWN_ARCHS: [u32; 11] = [0x60, 0x62, 0x65, 0x66, 0x67, 0x68, 0x69, 0x71, 0x73, 0x75, 0x79];
/// The launch ABI version of the records (the batch form, method 3).
pub const ENTRY_ABI: u32 = 2;

/// Host memory a model may ask for, checked before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest arena, in bytes.
    pub max_arena_bytes: u64,
    /// All arenas together, in bytes.
    pub max_total_arena_bytes: u64,
}

impl Limits {
    /// 1 GiB an arena, 2 GiB in all: far above any model the DSP can run in real time, far
    /// below what would exhaust a device's memory by mistake.
    pub const DEFAULT: Limits = Limits { max_arena_bytes: 1 << 30, max_total_arena_bytes: 2 << 30 };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// A validated model file, borrowed from its bytes.
#[derive(Clone, Copy, Debug)]
pub struct ModelFile<'a> {
    header: &'a FileHeader,
    provenance: &'a ProvenanceEntry,
    libraries: &'a [LibraryEntry],
    arenas: &'a [ArenaEntry],
    init: &'a [InitEntry],
    steps: &'a [StepEntry],
    records: &'a [u8],
    io: &'a [IoEntry],
    data: &'a [u8],
}

/// A library of a validated file.
#[derive(Clone, Copy, Debug)]
pub struct Library<'a> {
    /// The name the DSP loads it under.
    pub name: &'a str,
    /// Its image.
    pub image: &'a [u8],
    /// Its build record.
    pub record: LibraryRecord<'a>,
}

/// An arena of a validated file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arena {
    /// Bytes.
    pub size: u64,
    /// Alignment in bytes.
    pub align: u32,
}

/// A range of initial contents of a validated file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitRange<'a> {
    /// The arena.
    pub arena: usize,
    /// Where it starts in the arena.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// Its bytes (`None`: zeros).
    pub bytes: Option<&'a [u8]>,
}

/// A step of a validated file: one batch of records on one library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step<'a> {
    /// The library's index.
    pub library: usize,
    /// Records in it.
    pub launches: usize,
    /// The records, in the launch ABI's batch-record form; every view's lease index is an arena
    /// index.
    pub records: &'a [u8],
}

/// An input or output of a validated file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io<'a> {
    /// Its name.
    pub name: &'a str,
    /// Input or output.
    pub direction: Direction,
    /// Element type.
    pub dtype: DType,
    /// Shape (`rank` entries).
    pub shape: &'a [zerocopy::little_endian::U64],
    /// The arena.
    pub arena: usize,
    /// Where it starts in the arena.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl Io<'_> {
    /// The shape as numbers.
    pub fn dims(&self) -> impl Iterator<Item = u64> + '_ {
        self.shape.iter().map(|d| d.get())
    }
}

/// Where a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Provenance<'a> {
    /// SHA-256 of the source model file (zeros when there was none).
    pub source_digest: &'a [u8; 32],
    /// The source's name.
    pub source_name: &'a str,
    /// tinygrad's version at export.
    pub tinygrad_version: &'a str,
    /// hexrpc's version at export.
    pub hexrpc_version: &'a str,
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// `offset + len` when it fits in `limit`.
fn within(offset: u64, len: u64, limit: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= limit)
}

fn range_of<'a>(data: &'a [u8], r: &DataRange, part: Part, field: &'static str) -> Result<&'a [u8], ModelError> {
    let (offset, len) = (r.offset.get(), r.len.get());
    if !within(offset, len, data.len() as u64) {
        return Err(ModelError::OutOfRange { part, field, offset, len, limit: data.len() as u64 });
    }
    Ok(&data[offset as usize..(offset + len) as usize])
}

/// The bytes of a range [`ModelFile::parse`] has checked.
fn checked_bytes<'a>(data: &'a [u8], r: &DataRange) -> &'a [u8] {
    range_of(data, r, Part::Header, "").expect("a range ModelFile::parse checked")
}

/// The build record of a library image [`ModelFile::parse`] has checked.
fn checked_record(image: &[u8]) -> LibraryRecord<'_> {
    LibraryRecord::find(image).ok().flatten().expect("a build record ModelFile::parse checked")
}

/// The text of a range [`ModelFile::parse`] has checked.
fn checked_text<'a>(data: &'a [u8], r: &DataRange) -> &'a str {
    text_of(data, r, Part::Header, "").expect("a text ModelFile::parse checked")
}

fn text_of<'a>(data: &'a [u8], r: &DataRange, part: Part, field: &'static str) -> Result<&'a str, ModelError> {
    let bytes = range_of(data, r, part, field)?;
    if bytes.len() > MAX_TEXT {
        return Err(ModelError::BadText { part, field });
    }
    core::str::from_utf8(bytes).map_err(|_| ModelError::BadText { part, field })
}

fn table<T: FromBytes + zerocopy::KnownLayout + zerocopy::Immutable + zerocopy::Unaligned>(
    bytes: &[u8],
    kind: SectionKind,
) -> Result<&[T], ModelError> {
    let entry = core::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(entry) {
        return Err(ModelError::TableLength { kind, len: bytes.len() as u64, entry: entry as u32 });
    }
    <[T]>::ref_from_bytes(bytes).map_err(|_| ModelError::TableLength { kind, len: bytes.len() as u64, entry: entry as u32 })
}

fn capacity(what: &'static str, found: usize, least: usize, most: usize) -> Result<(), ModelError> {
    if found < least || found > most {
        return Err(ModelError::Capacity { what, found: found as u64, most: most as u64 });
    }
    Ok(())
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> ModelFile<'a> {
    /// Validates `bytes` as a whole model file. Nothing is allocated; on success every accessor
    /// is infallible.
    pub fn parse(bytes: &'a [u8], limits: &Limits) -> Result<ModelFile<'a>, ModelError> {
        let have = bytes.len() as u64;
        let prefix = bytes.len().min(MAGIC.len());
        if bytes[..prefix] != MAGIC[..prefix] {
            return Err(ModelError::NotAModel);
        }
        let Ok((header, _)) = FileHeader::ref_from_prefix(bytes) else {
            return Err(ModelError::Truncated { part: Part::Header, need: HEADER_LEN as u64, have });
        };
        let computed = crc(&bytes[..60]);
        if computed != header.header_crc.get() {
            return Err(ModelError::Checksum { part: Part::Header, stored: header.header_crc.get(), computed });
        }
        let unsupported = |field, found: u64, supported| ModelError::Unsupported { part: Part::Header, field, found, supported };
        if header.major.get() != FORMAT_MAJOR {
            return Err(unsupported("format major version", header.major.get().into(), "format 1"));
        }
        if header.minor.get() > FORMAT_MINOR {
            return Err(unsupported("format minor version", header.minor.get().into(), "format 1.0"));
        }
        if header.header_len.get() as usize != HEADER_LEN {
            return Err(unsupported("header length", header.header_len.get().into(), "64"));
        }
        if header.flags.get() != 0 {
            return Err(unsupported("flags", header.flags.get().into(), "none (0)"));
        }
        if header.reserved != [0; 12] {
            return Err(unsupported("reserved bytes", 1, "zeros"));
        }
        if header.entry_abi.get() != ENTRY_ABI {
            return Err(unsupported("entry ABI version", header.entry_abi.get().into(), "launch ABI 2 (batches)"));
        }
        if !KNOWN_ARCHS.contains(&header.arch.get()) {
            return Err(unsupported("Hexagon architecture", header.arch.get().into(), "v60 to v79 (0x60 to 0x79)"));
        }
        let file_len = header.file_len.get();
        if file_len != have {
            if file_len > have {
                return Err(ModelError::Truncated { part: Part::Header, need: file_len, have });
            }
            return Err(ModelError::Length { stated: file_len, actual: have });
        }
        let launches = header.launches.get() as usize;
        capacity("launch records", launches, 1, MAX_LAUNCHES)?;

        // The section table.
        let count = header.sections.get() as usize;
        if count != SECTION_KINDS.len() {
            return Err(ModelError::Unsupported {
                part: Part::SectionTable,
                field: "section count",
                found: count as u64,
                supported: "exactly 8 sections",
            });
        }
        let table_end = HEADER_LEN + count * core::mem::size_of::<SectionEntry>();
        let Some(table_bytes) = bytes.get(HEADER_LEN..table_end) else {
            return Err(ModelError::Truncated { part: Part::SectionTable, need: table_end as u64, have });
        };
        let computed = crc(table_bytes);
        if computed != header.table_crc.get() {
            return Err(ModelError::Checksum { part: Part::SectionTable, stored: header.table_crc.get(), computed });
        }
        let entries = <[SectionEntry]>::ref_from_bytes(table_bytes).map_err(|_| ModelError::NotAModel)?;
        // The sections follow the table in kind order, each at the next multiple of 8, the
        // padding zero and nothing after the last: every byte of the file is covered by a
        // checksum or must be zero.
        let mut sections: [&[u8]; 8] = [&[]; 8];
        let mut end = table_end as u64;
        for (i, (e, kind)) in entries.iter().zip(SECTION_KINDS).enumerate() {
            if e.kind.get() != kind as u32 {
                return Err(ModelError::Unsupported {
                    part: Part::SectionTable,
                    field: "section kind",
                    found: e.kind.get().into(),
                    supported: "the kinds 1 to 8, once each, in that order",
                });
            }
            let (offset, len) = (e.offset.get(), e.len.get());
            let part = Part::Section(kind);
            if offset != end.next_multiple_of(SECTION_ALIGN) {
                return Err(ModelError::Unsupported {
                    part,
                    field: "offset",
                    found: offset,
                    supported: "the first multiple of 8 after the previous section",
                });
            }
            if !within(offset, len, have) {
                return Err(ModelError::Truncated { part, need: offset.saturating_add(len), have });
            }
            if bytes[end as usize..offset as usize].iter().any(|&b| b != 0) {
                return Err(ModelError::Unsupported { part, field: "padding before it", found: 1, supported: "zeros" });
            }
            let s = &bytes[offset as usize..(offset + len) as usize];
            let computed = crc(s);
            if computed != e.crc.get() {
                return Err(ModelError::Checksum { part, stored: e.crc.get(), computed });
            }
            sections[i] = s;
            end = offset + len;
        }
        if end != have {
            return Err(ModelError::Length { stated: end, actual: have });
        }
        let [prov, libs, arenas, init, steps, records, io, data] = sections;

        let provenance = table::<ProvenanceEntry>(prov, SectionKind::Provenance)?;
        let [provenance] = provenance else {
            return Err(ModelError::Capacity { what: "provenance entries", found: provenance.len() as u64, most: 1 });
        };
        let file = ModelFile {
            header,
            provenance,
            libraries: table(libs, SectionKind::Libraries)?,
            arenas: table(arenas, SectionKind::Arenas)?,
            init: table(init, SectionKind::Init)?,
            steps: table(steps, SectionKind::Steps)?,
            records,
            io: table(io, SectionKind::Io)?,
            data,
        };
        file.check_provenance()?;
        file.check_arenas(limits)?;
        file.check_libraries()?;
        file.check_init()?;
        file.check_steps()?;
        file.check_io()?;
        Ok(file)
    }

    fn check_provenance(&self) -> Result<(), ModelError> {
        let p = self.provenance;
        text_of(self.data, &p.source_name, Part::Provenance, "source name")?;
        text_of(self.data, &p.tinygrad_version, Part::Provenance, "tinygrad version")?;
        text_of(self.data, &p.hexrpc_version, Part::Provenance, "hexrpc version")?;
        Ok(())
    }

    fn check_arenas(&self, limits: &Limits) -> Result<(), ModelError> {
        capacity("arenas", self.arenas.len(), 1, MAX_ARENAS)?;
        let mut total = 0u64;
        for (i, a) in self.arenas.iter().enumerate() {
            let part = Part::Arena(i);
            let (size, align) = (a.size.get(), a.align.get());
            if size == 0 {
                return Err(ModelError::Unsupported { part, field: "size", found: 0, supported: "a size above 0" });
            }
            if size > limits.max_arena_bytes {
                return Err(ModelError::TooLarge { what: "an arena", bytes: size, limit: limits.max_arena_bytes });
            }
            if !align.is_power_of_two() || align > 4096 {
                return Err(ModelError::Unsupported {
                    part,
                    field: "alignment",
                    found: align.into(),
                    supported: "a power of two up to 4096",
                });
            }
            if a.flags.get() != 0 {
                return Err(ModelError::Unsupported { part, field: "flags", found: a.flags.get().into(), supported: "none (0)" });
            }
            total = total.saturating_add(size);
        }
        if total > limits.max_total_arena_bytes {
            return Err(ModelError::TooLarge { what: "the arenas together", bytes: total, limit: limits.max_total_arena_bytes });
        }
        Ok(())
    }

    fn check_libraries(&self) -> Result<(), ModelError> {
        capacity("libraries", self.libraries.len(), 1, MAX_LIBRARIES)?;
        for (i, l) in self.libraries.iter().enumerate() {
            let part = Part::Library(i);
            text_of(self.data, &l.name, part, "name")?;
            let image = range_of(self.data, &l.image, part, "image")?;
            let elf = Elf::parse(image).map_err(|_| ModelError::NotHexagonElf { library: i, machine: 0 })?;
            if elf.machine() != EM_HEXAGON {
                return Err(ModelError::NotHexagonElf { library: i, machine: elf.machine() });
            }
            let arch = elf.header().e_flags.get() & 0xfff;
            if arch != self.header.arch.get() {
                return Err(ModelError::Unsupported {
                    part,
                    field: "Hexagon architecture (e_flags)",
                    found: arch.into(),
                    supported: "the architecture the file's header names",
                });
            }
            // Every import is one the DSP provides to a loaded library (a weak one is optional).
            for s in elf.section_headers().iter().filter(|s| s.sh_type.get() == SHT_DYNSYM) {
                let bad = ModelError::NotHexagonElf { library: i, machine: 0 };
                let (syms, strtab) = elf.symbols(s).map_err(|_| bad)?;
                for sym in syms.iter().skip(1) {
                    let weak = sym.st_info >> 4 == 2;
                    if sym.st_shndx.get() != 0 || weak {
                        continue;
                    }
                    let name = string_at(strtab, sym.st_name.get()).map_err(|_| bad)?;
                    if !name.is_empty() && !DSP_PROVIDED_SYMBOLS.iter().any(|p| p.as_bytes() == name) {
                        return Err(ModelError::Import { library: i, symbol: SymbolName::new(name) });
                    }
                }
            }
            let record = match LibraryRecord::find(image) {
                Ok(Some(r)) => r,
                Ok(None) => return Err(ModelError::BuildRecord { library: i, error: None }),
                Err(e) => return Err(ModelError::BuildRecord { library: i, error: Some(e) }),
            };
            if !record.batches() || record.abi() != AbiVersion::V2 {
                return Err(ModelError::Unsupported {
                    part,
                    field: "build record",
                    found: u64::from(record.batches()),
                    supported: "a kernel-table library of launch ABI 2 (hexrpc build-lib --table)",
                });
            }
            for (k, kernel) in record.kernels().enumerate() {
                kernel.parse_signature().map_err(|error| ModelError::Signature { library: i, kernel: k, error })?;
            }
        }
        Ok(())
    }

    fn check_init(&self) -> Result<(), ModelError> {
        capacity("initial-contents ranges", self.init.len(), 0, MAX_INIT_RANGES)?;
        let mut last: Option<(u32, u64)> = None; // (arena, end) of the previous range
        for (i, r) in self.init.iter().enumerate() {
            let part = Part::Init(i);
            let arena = r.arena.get();
            let Some(a) = self.arenas.get(arena as usize) else {
                return Err(ModelError::BadIndex { part, field: "arena", index: arena.into(), count: self.arenas.len() as u64 });
            };
            let (offset, len) = (r.offset.get(), r.len.get());
            if !within(offset, len, a.size.get()) {
                return Err(ModelError::OutOfRange { part, field: "range", offset, len, limit: a.size.get() });
            }
            match r.kind.get() {
                k if k == InitKind::Zeros as u32 => {
                    if r.data.get() != 0 {
                        return Err(ModelError::Unsupported {
                            part,
                            field: "data offset of a zero range",
                            found: r.data.get(),
                            supported: "0",
                        });
                    }
                }
                k if k == InitKind::Bytes as u32 => {
                    let data = r.data.get();
                    if !within(data, len, self.data.len() as u64) {
                        return Err(ModelError::OutOfRange { part, field: "bytes", offset: data, len, limit: self.data.len() as u64 });
                    }
                }
                k => return Err(ModelError::Unsupported { part, field: "kind", found: k.into(), supported: "0 (zeros) or 1 (bytes)" }),
            }
            // Sorted by arena, then offset; no two share a byte.
            if let Some((prev_arena, prev_end)) = last {
                if arena < prev_arena || (arena == prev_arena && offset < prev_end) {
                    return Err(ModelError::Overlap { first: Part::Init(i - 1), second: part });
                }
            }
            last = Some((arena, offset + len));
        }
        Ok(())
    }

    fn check_steps(&self) -> Result<(), ModelError> {
        capacity("steps", self.steps.len(), 1, MAX_STEPS)?;
        let mut at = 0u64;
        let mut launches = 0usize;
        for (i, s) in self.steps.iter().enumerate() {
            let part = Part::Step(i);
            let library = s.library.get();
            let Some(lib) = self.libraries.get(library as usize) else {
                return Err(ModelError::BadIndex { part, field: "library", index: library.into(), count: self.libraries.len() as u64 });
            };
            let n = s.launches.get() as usize;
            capacity("records in a step", n, 1, MAX_BATCH_LAUNCHES)?;
            let (offset, len) = (u64::from(s.records_offset.get()), u64::from(s.records_len.get()));
            if offset != at {
                return Err(ModelError::Unsupported {
                    part,
                    field: "records offset",
                    found: offset,
                    supported: "the end of the previous step's records",
                });
            }
            if !within(offset, len, self.records.len() as u64) {
                return Err(ModelError::OutOfRange { part, field: "records", offset, len, limit: self.records.len() as u64 });
            }
            capacity("record bytes in a step", len as usize, 0, MAX_BATCH_RECORD_BYTES)?;
            let record = self.library_record(lib);
            self.check_records(i, record, &self.records[offset as usize..(offset + len) as usize], n)?;
            at = offset + len;
            launches += n;
        }
        if at != self.records.len() as u64 {
            return Err(ModelError::Unsupported {
                part: Part::Section(SectionKind::Records),
                field: "bytes past the last step",
                found: self.records.len() as u64 - at,
                supported: "none",
            });
        }
        if launches != self.header.launches.get() as usize {
            return Err(ModelError::Unsupported {
                part: Part::Header,
                field: "launch count",
                found: self.header.launches.get().into(),
                supported: "the steps' records added up",
            });
        }
        Ok(())
    }

    fn library_record(&self, lib: &LibraryEntry) -> LibraryRecord<'a> {
        checked_record(checked_bytes(self.data, &lib.image))
    }

    /// Walks one step's records: each header, each view within its arena, the counts matching
    /// the kernel's signature, nothing left over.
    fn check_records(&self, step: usize, record: LibraryRecord<'a>, bytes: &[u8], n: usize) -> Result<(), ModelError> {
        let mut at = 0usize;
        for r in 0..n {
            let part = Part::Record { step, record: r };
            let truncated = |need: usize| ModelError::OutOfRange {
                part,
                field: "record",
                offset: at as u64,
                len: need as u64,
                limit: bytes.len() as u64,
            };
            if bytes.len() - at < BATCH.record_header_len {
                return Err(truncated(BATCH.record_header_len));
            }
            let kernel = le32(bytes, at + BATCH.kernel_at);
            let views = le16(bytes, at + BATCH.views_at);
            let scalars = le16(bytes, at + BATCH.scalars_at);
            let len = BATCH.record_len(views.into(), scalars.into());
            if bytes.len() - at < len {
                return Err(truncated(len));
            }
            let count = record.kernels().count();
            let Some(k) = record.kernels().nth(kernel as usize) else {
                return Err(ModelError::BadIndex { part, field: "kernel", index: kernel.into(), count: count as u64 });
            };
            let sig = Signature::parse(k.signature).expect("checked by check_libraries");
            if (usize::from(views), usize::from(scalars)) != (sig.buffers(), sig.scalars()) {
                return Err(ModelError::RecordShape { part, kernel, found: (views, scalars), signature: (sig.buffers(), sig.scalars()) });
            }
            for v in 0..usize::from(views) {
                let e = at + BATCH.view_at(v);
                let lease = le32(bytes, e + BATCH.view_lease_at);
                let (offset, vlen) = (le32(bytes, e + BATCH.view_offset_at), le32(bytes, e + BATCH.view_len_at));
                let Some(arena) = self.arenas.get(lease as usize) else {
                    return Err(ModelError::BadIndex { part, field: "view's arena", index: lease.into(), count: self.arenas.len() as u64 });
                };
                if !within(offset.into(), vlen.into(), arena.size.get()) {
                    return Err(ModelError::OutOfRange {
                        part,
                        field: "view",
                        offset: offset.into(),
                        len: vlen.into(),
                        limit: arena.size.get(),
                    });
                }
            }
            at += len;
        }
        if at != bytes.len() {
            return Err(ModelError::Unsupported {
                part: Part::Step(step),
                field: "bytes past its last record",
                found: (bytes.len() - at) as u64,
                supported: "none",
            });
        }
        Ok(())
    }

    fn check_io(&self) -> Result<(), ModelError> {
        capacity("inputs and outputs", self.io.len(), 1, MAX_IO)?;
        for (i, e) in self.io.iter().enumerate() {
            let part = Part::Io(i);
            let name = text_of(self.data, &e.name, part, "name")?;
            if name.is_empty() {
                return Err(ModelError::BadText { part, field: "name" });
            }
            for (j, earlier) in self.io[..i].iter().enumerate() {
                if text_of(self.data, &earlier.name, Part::Io(j), "name")? == name {
                    return Err(ModelError::DuplicateName { io: i });
                }
            }
            let direction = e.direction.get();
            if direction > Direction::Output as u32 {
                return Err(ModelError::Unsupported {
                    part,
                    field: "direction",
                    found: direction.into(),
                    supported: "0 (input) or 1 (output)",
                });
            }
            let Some(dtype) = DType::from_u32(e.dtype.get()) else {
                return Err(ModelError::Unsupported { part, field: "dtype", found: e.dtype.get().into(), supported: "dtypes 1 to 12" });
            };
            let rank = e.rank.get() as usize;
            if rank > MAX_RANK || e.dims[rank.min(MAX_RANK)..].iter().any(|d| d.get() != 0) {
                return Err(ModelError::Unsupported {
                    part,
                    field: "rank",
                    found: rank as u64,
                    supported: "at most 8 dimensions, unused ones 0",
                });
            }
            let elements = e.dims[..rank].iter().try_fold(1u64, |n, d| n.checked_mul(d.get()));
            let shape_bytes = elements.and_then(|n| n.checked_mul(dtype.size() as u64));
            let len = e.len.get();
            if shape_bytes != Some(len) {
                return Err(ModelError::IoLength { io: i, len, shape_bytes });
            }
            let arena = e.arena.get();
            let Some(a) = self.arenas.get(arena as usize) else {
                return Err(ModelError::BadIndex { part, field: "arena", index: arena.into(), count: self.arenas.len() as u64 });
            };
            let offset = e.offset.get();
            if !within(offset, len, a.size.get()) {
                return Err(ModelError::OutOfRange { part, field: "range", offset, len, limit: a.size.get() });
            }
            let overlaps = |a0: u64, l0: u64, a1: u64, l1: u64| l0 > 0 && l1 > 0 && a0 < a1 + l1 && a1 < a0 + l0;
            // Initial contents (weights, zeroed state) would be overwritten by an input or an
            // output, and the next run would start from something else.
            if let Some(r) = self.init.iter().position(|r| r.arena.get() == arena && overlaps(offset, len, r.offset.get(), r.len.get())) {
                return Err(ModelError::Overlap { first: Part::Init(r), second: part });
            }
            if let Some(j) = self.io[..i].iter().position(|o| o.arena.get() == arena && overlaps(offset, len, o.offset.get(), o.len.get()))
            {
                return Err(ModelError::Overlap { first: Part::Io(j), second: part });
            }
        }
        Ok(())
    }

    /// The format's minor version the file was written in.
    pub fn minor_version(&self) -> u16 {
        self.header.minor.get()
    }

    /// The Hexagon architecture the libraries were built for (`e_flags`, 0x65 for v65).
    pub fn arch(&self) -> u32 {
        self.header.arch.get()
    }

    /// Launch records in the whole model.
    pub fn launches(&self) -> usize {
        self.header.launches.get() as usize
    }

    /// Where the model came from.
    pub fn provenance(&self) -> Provenance<'a> {
        let p = self.provenance;
        let t = |r: &DataRange| checked_text(self.data, r);
        Provenance {
            source_digest: &p.source_digest,
            source_name: t(&p.source_name),
            tinygrad_version: t(&p.tinygrad_version),
            hexrpc_version: t(&p.hexrpc_version),
        }
    }

    /// The kernel-table libraries.
    pub fn libraries(&self) -> impl ExactSizeIterator<Item = Library<'a>> + 'a {
        let (data, libs) = (self.data, self.libraries);
        libs.iter().map(move |l| {
            let image = checked_bytes(data, &l.image);
            Library { name: checked_text(data, &l.name), image, record: checked_record(image) }
        })
    }

    /// The arenas.
    pub fn arenas(&self) -> impl ExactSizeIterator<Item = Arena> + 'a {
        self.arenas.iter().map(|a| Arena { size: a.size.get(), align: a.align.get() })
    }

    /// The initial contents, sorted by arena and offset.
    pub fn init(&self) -> impl ExactSizeIterator<Item = InitRange<'a>> + 'a {
        let data = self.data;
        self.init.iter().map(move |r| InitRange {
            arena: r.arena.get() as usize,
            offset: r.offset.get(),
            len: r.len.get(),
            bytes: (r.kind.get() == InitKind::Bytes as u32).then(|| &data[r.data.get() as usize..(r.data.get() + r.len.get()) as usize]),
        })
    }

    /// The whole records section: every step's records, in step order, with no gap.
    pub fn records(&self) -> &'a [u8] {
        self.records
    }

    /// The steps of a run, in order.
    pub fn steps(&self) -> impl ExactSizeIterator<Item = Step<'a>> + 'a {
        let records = self.records;
        self.steps.iter().map(move |s| {
            let (offset, len) = (s.records_offset.get() as usize, s.records_len.get() as usize);
            Step { library: s.library.get() as usize, launches: s.launches.get() as usize, records: &records[offset..offset + len] }
        })
    }

    /// The inputs and outputs, in the file's order.
    pub fn io(&self) -> impl ExactSizeIterator<Item = Io<'a>> + 'a {
        let data = self.data;
        self.io.iter().map(move |e| Io {
            name: checked_text(data, &e.name),
            direction: if e.direction.get() == Direction::Input as u32 { Direction::Input } else { Direction::Output },
            dtype: DType::from_u32(e.dtype.get()).expect("checked by parse"),
            shape: &e.dims[..e.rank.get() as usize],
            arena: e.arena.get() as usize,
            offset: e.offset.get(),
            len: e.len.get(),
        })
    }
}
