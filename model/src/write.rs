//! Writing a model file (feature `std`): [`ModelBuilder`] collects the parts and lays them out
//! as `docs/model-format.md` describes, checksums included. What it writes,
//! [`ModelFile::parse`](crate::ModelFile::parse) reads back; the builder checks nothing beyond
//! what it needs to lay the file out, so a test can write a file that the reader refuses.

use std::string::String;
use std::vec::Vec;

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

use hexrpc_runtime::launch::BATCH;

use crate::dtype::DType;
use crate::format::*;

/// An input or output to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoSpec {
    /// Its name.
    pub name: String,
    /// Input or output.
    pub direction: Direction,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<u64>,
    /// The arena.
    pub arena: u32,
    /// Where it starts in the arena.
    pub offset: u64,
}

/// Initial contents to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitSpec {
    /// `len` zero bytes at `offset` of `arena`.
    Zeros {
        /// The arena.
        arena: u32,
        /// Where.
        offset: u64,
        /// How many.
        len: u64,
    },
    /// `bytes` at `offset` of `arena`.
    Bytes {
        /// The arena.
        arena: u32,
        /// Where.
        offset: u64,
        /// The contents.
        bytes: Vec<u8>,
    },
}

/// A step to write: records in the batch form (view lease indexes are arena indexes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSpec {
    /// The library's index.
    pub library: u32,
    /// Records in `records`.
    pub launches: u32,
    /// The records' bytes.
    pub records: Vec<u8>,
}

/// Everything a model file holds, to be laid out by [`ModelBuilder::to_bytes`].
#[derive(Clone, Debug, Default)]
pub struct ModelBuilder {
    /// The Hexagon architecture (`e_flags`) the libraries were built for.
    pub arch: u32,
    /// SHA-256 of the source model file.
    pub source_digest: [u8; 32],
    /// The source's name.
    pub source_name: String,
    /// tinygrad's version.
    pub tinygrad_version: String,
    /// hexrpc's version.
    pub hexrpc_version: String,
    /// Libraries: name and image.
    pub libraries: Vec<(String, Vec<u8>)>,
    /// Arenas: size and alignment.
    pub arenas: Vec<(u64, u32)>,
    /// Initial contents, in any order (written sorted by arena and offset).
    pub init: Vec<InitSpec>,
    /// Steps, in run order.
    pub steps: Vec<StepSpec>,
    /// Inputs and outputs.
    pub io: Vec<IoSpec>,
}

/// One launch record in the launch ABI's batch form ([`BATCH`]): kernel `kernel` of the step's
/// library, `views` as (arena, offset, length), `scalars` as 8-byte slots. `None` when a count
/// does not fit the record's 16-bit fields.
pub fn encode_record(kernel: u32, views: &[(u32, u32, u32)], scalars: &[u64]) -> Option<Vec<u8>> {
    let nviews = u16::try_from(views.len()).ok()?;
    let nscalars = u16::try_from(scalars.len()).ok()?;
    let mut r = std::vec![0u8; BATCH.record_len(views.len(), scalars.len())];
    r[BATCH.kernel_at..][..4].copy_from_slice(&kernel.to_le_bytes());
    r[BATCH.views_at..][..2].copy_from_slice(&nviews.to_le_bytes());
    r[BATCH.scalars_at..][..2].copy_from_slice(&nscalars.to_le_bytes());
    for (v, &(arena, offset, len)) in views.iter().enumerate() {
        let e = BATCH.view_at(v);
        r[e + BATCH.view_lease_at..][..4].copy_from_slice(&arena.to_le_bytes());
        r[e + BATCH.view_offset_at..][..4].copy_from_slice(&offset.to_le_bytes());
        r[e + BATCH.view_len_at..][..4].copy_from_slice(&len.to_le_bytes());
    }
    for (j, s) in scalars.iter().enumerate() {
        r[BATCH.scalar_at(views.len(), j)..][..8].copy_from_slice(&s.to_le_bytes());
    }
    Some(r)
}

/// Runs of zero bytes at least this long are written as zero ranges, not bytes.
pub const ZERO_RUN: usize = 64;

impl InitSpec {
    /// `bytes` at `offset` of `arena` as initial contents: every run of [`ZERO_RUN`] or more
    /// zero bytes becomes a zero range (no bytes in the file), the rest byte ranges.
    pub fn split(arena: u32, offset: u64, bytes: &[u8]) -> Vec<InitSpec> {
        let mut out = Vec::new();
        let at = |i: usize| offset + i as u64;
        let (mut pending, mut i) = (0, 0);
        while i < bytes.len() {
            if bytes[i] != 0 {
                i += 1;
                continue;
            }
            let zeros = bytes[i..].iter().take_while(|&&b| b == 0).count();
            if zeros >= ZERO_RUN || zeros == bytes.len() {
                if pending < i {
                    out.push(InitSpec::Bytes { arena, offset: at(pending), bytes: bytes[pending..i].to_vec() });
                }
                out.push(InitSpec::Zeros { arena, offset: at(i), len: zeros as u64 });
                pending = i + zeros;
            }
            i += zeros;
        }
        if pending < bytes.len() {
            out.push(InitSpec::Bytes { arena, offset: at(pending), bytes: bytes[pending..].to_vec() });
        }
        out
    }
}

fn range(offset: usize, len: usize) -> DataRange {
    DataRange { offset: U64::new(offset as u64), len: U64::new(len as u64) }
}

/// Appends `bytes` to `data` and returns their range there.
fn put(data: &mut Vec<u8>, bytes: &[u8]) -> DataRange {
    let r = range(data.len(), bytes.len());
    data.extend_from_slice(bytes);
    r
}

impl ModelBuilder {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut data = Vec::new();
        let provenance = ProvenanceEntry {
            source_digest: self.source_digest,
            source_name: put(&mut data, self.source_name.as_bytes()),
            tinygrad_version: put(&mut data, self.tinygrad_version.as_bytes()),
            hexrpc_version: put(&mut data, self.hexrpc_version.as_bytes()),
        };
        let mut libraries = Vec::new();
        for (name, image) in &self.libraries {
            let name = put(&mut data, name.as_bytes());
            // Images start 8-aligned in the data, as a mapped file would want them.
            data.resize(data.len().next_multiple_of(8), 0);
            libraries.push(LibraryEntry { name, image: put(&mut data, image) });
        }
        let arenas: Vec<ArenaEntry> = self
            .arenas
            .iter()
            .map(|&(size, align)| ArenaEntry { size: U64::new(size), align: U32::new(align), flags: U32::new(0) })
            .collect();
        let mut init: Vec<&InitSpec> = self.init.iter().collect();
        let key = |s: &InitSpec| match *s {
            InitSpec::Zeros { arena, offset, .. } | InitSpec::Bytes { arena, offset, .. } => (arena, offset),
        };
        init.sort_by_key(|s| key(s));
        let init: Vec<InitEntry> = init
            .into_iter()
            .map(|s| match s {
                InitSpec::Zeros { arena, offset, len } => InitEntry {
                    arena: U32::new(*arena),
                    kind: U32::new(InitKind::Zeros as u32),
                    offset: U64::new(*offset),
                    len: U64::new(*len),
                    data: U64::new(0),
                },
                InitSpec::Bytes { arena, offset, bytes } => {
                    data.resize(data.len().next_multiple_of(8), 0);
                    let r = put(&mut data, bytes);
                    InitEntry {
                        arena: U32::new(*arena),
                        kind: U32::new(InitKind::Bytes as u32),
                        offset: U64::new(*offset),
                        len: U64::new(bytes.len() as u64),
                        data: r.offset,
                    }
                }
            })
            .collect();
        let mut records = Vec::new();
        let mut steps = Vec::new();
        for s in &self.steps {
            steps.push(StepEntry {
                library: U32::new(s.library),
                launches: U32::new(s.launches),
                records_offset: U32::new(records.len() as u32),
                records_len: U32::new(s.records.len() as u32),
            });
            records.extend_from_slice(&s.records);
        }
        let io: Vec<IoEntry> = self
            .io
            .iter()
            .map(|e| {
                let mut dims = [U64::new(0); MAX_RANK];
                for (d, &v) in dims.iter_mut().zip(&e.shape) {
                    *d = U64::new(v);
                }
                let elements = e.shape.iter().fold(1u64, |n, &d| n.wrapping_mul(d));
                IoEntry {
                    name: put(&mut data, e.name.as_bytes()),
                    direction: U32::new(e.direction as u32),
                    dtype: U32::new(e.dtype as u32),
                    rank: U32::new(e.shape.len() as u32),
                    arena: U32::new(e.arena),
                    dims,
                    offset: U64::new(e.offset),
                    len: U64::new(elements.wrapping_mul(e.dtype.size() as u64)),
                }
            })
            .collect();
        let launches: u32 = self.steps.iter().map(|s| s.launches).sum();
        let sections: [(SectionKind, &[u8]); 8] = [
            (SectionKind::Provenance, provenance.as_bytes()),
            (SectionKind::Libraries, libraries.as_bytes()),
            (SectionKind::Arenas, arenas.as_bytes()),
            (SectionKind::Init, init.as_bytes()),
            (SectionKind::Steps, steps.as_bytes()),
            (SectionKind::Records, &records),
            (SectionKind::Io, io.as_bytes()),
            (SectionKind::Data, &data),
        ];
        let mut at = (HEADER_LEN + sections.len() * core::mem::size_of::<SectionEntry>()) as u64;
        let mut table = Vec::new();
        for (kind, bytes) in &sections {
            at = at.next_multiple_of(SECTION_ALIGN);
            table.push(SectionEntry {
                kind: U32::new(*kind as u32),
                crc: U32::new(crc32fast::hash(bytes)),
                offset: U64::new(at),
                len: U64::new(bytes.len() as u64),
            });
            at += bytes.len() as u64;
        }
        let mut header = FileHeader {
            magic: MAGIC,
            major: U16::new(FORMAT_MAJOR),
            minor: U16::new(FORMAT_MINOR),
            header_len: U32::new(HEADER_LEN as u32),
            file_len: U64::new(at),
            sections: U32::new(sections.len() as u32),
            flags: U32::new(0),
            entry_abi: U32::new(crate::parse::ENTRY_ABI),
            arch: U32::new(self.arch),
            launches: U32::new(launches),
            reserved: [0; 12],
            table_crc: U32::new(crc32fast::hash(table.as_bytes())),
            header_crc: U32::new(0),
        };
        header.header_crc = U32::new(crc32fast::hash(&header.as_bytes()[..60]));
        let mut out = Vec::with_capacity(at as usize);
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(table.as_bytes());
        for ((_, bytes), e) in sections.iter().zip(&table) {
            out.resize(e.offset.get() as usize, 0);
            out.extend_from_slice(bytes);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges [`InitSpec::split`] makes put the same bytes back, cover the slice exactly, and
    /// hold no run of [`ZERO_RUN`] zeros as bytes.
    #[test]
    fn split_weights_keep_every_byte_and_store_long_zero_runs_as_ranges() {
        let mut w = std::vec![0u8; 100];
        w.extend((1..=200).map(|i| (i % 7) as u8)); // short zero runs inside bytes
        w.extend(std::vec![0u8; 63]);
        w.push(9);
        w.extend(std::vec![0u8; 500]);
        for bytes in [w.as_slice(), &[0u8; 10], &[5u8; 3], &[], &[0, 0, 1]] {
            let specs = InitSpec::split(2, 1000, bytes);
            let mut back = std::vec![0xEEu8; bytes.len()];
            let mut covered = 0;
            for s in &specs {
                match s {
                    InitSpec::Zeros { arena, offset, len } => {
                        assert_eq!(*arena, 2);
                        assert!(*len as usize >= ZERO_RUN || *len as usize == bytes.len(), "{specs:?}");
                        back[*offset as usize - 1000..][..*len as usize].fill(0);
                        covered += *len as usize;
                    }
                    InitSpec::Bytes { offset, bytes: b, .. } => {
                        assert!(!b.windows(ZERO_RUN).any(|r| r.iter().all(|&x| x == 0)), "{specs:?}");
                        back[*offset as usize - 1000..][..b.len()].copy_from_slice(b);
                        covered += b.len();
                    }
                }
            }
            assert_eq!(back, bytes);
            assert_eq!(covered, bytes.len(), "ranges overlap or leave gaps: {specs:?}");
        }
        let specs = InitSpec::split(0, 0, &w);
        assert_eq!(specs.iter().filter(|s| matches!(s, InitSpec::Zeros { .. })).count(), 2, "{specs:?}");
    }
}
