//! The build record: what a library was built for (its kernels' names and signatures and the
//! launch ABI version), written into the `.so` by `build` as an ELF note and read back here, so
//! a launcher (`hexrpc run`, the HAL's callers) can check a launch against the library before
//! sending anything.
//!
//! # Format
//!
//! One ELF note in a non-allocated section `.note.hexrpc` (the loader never maps it):
//!
//! ```text
//! namesz = 7, descsz, type = NOTE_TYPE ("HXR1"), name "hexrpc\0" padded to 8, desc:
//!   u32 format (2 or 3), u32 ABI version (1 or 2), u32 kernel count (>= 1),
//!   u32 entry flags (bit 0, FLAG_BATCHES: the entry runs batches over the kernel table;
//!   bit 1, FLAG_MAP_CACHE: the entry keeps lease mappings across calls and answers the
//!   release method; bit 2, FLAG_PROGRAM; bit 3, FLAG_POWER; other bits zero),
//!   format 3 only: u32 kernels compiled without HVX (1..=kernel count),
//!   per kernel: u16 name length, u16 signature length, name bytes, signature bytes,
//!   padded with zeros to a multiple of 4
//! ```
//!
//! The writer uses format 3 only when some kernel was compiled without HVX (clang-19 could not
//! select HVX instructions for it, and the build compiled it as scalar code): every other
//! library gets format 2, byte for byte as before, so a reader that knows only format 2 still
//! reads it. A format-2 record counts no kernel without HVX.
//!
//! Format 1 (older builds) has no flags word; the reader takes it as a table library exactly
//! when it lists more than one kernel (a single-kernel build listed one), so a one-kernel table
//! built then reads as a single entry: rebuild it.
//!
//! All integers little-endian (Hexagon is). Names are C identifiers, signatures use the grammar
//! of [`Signature::parse`](super::Signature::parse). A library may carry several kernels (the
//! build step writes one today).
//!
//! The reader takes the image's bytes as they are (from a file or the DSP's image registry) and
//! trusts nothing: every offset is bounds-checked, and a malformed record is an error, never a
//! panic. It borrows from the image and does not allocate.

use core::fmt;

use hexrpc_drivers::elf::Elf;

use super::abi::AbiVersion;
use super::signature::{Signature, SignatureError};

/// The note's name (without the terminating NUL).
pub const NOTE_NAME: &str = "hexrpc";
/// The note's type: `"HXR1"` read as a little-endian `u32`.
pub const NOTE_TYPE: u32 = u32::from_le_bytes(*b"HXR1");
/// The section the build step puts the note in.
pub const NOTE_SECTION: &str = ".note.hexrpc";
/// The newest record format: this module reads formats 1 to `FORMAT`, and writes format 3 for a
/// library with a kernel compiled without HVX, format 2 for every other (see the module docs).
pub const FORMAT: u32 = 3;
/// The entry-flags bit of a library whose entry runs batches over its kernel table (launch ABI
/// method 3; `hexrpc build-lib --table`).
pub const FLAG_BATCHES: u32 = 1;
/// The entry-flags bit of a library whose entry keeps lease mappings across calls, keyed by the
/// lease id the host sends, and answers the release method (launch ABI method 4; see
/// [`abi`](super::abi)). Only such a library is sent non-zero lease ids in a batch, and the
/// host releases its cached ids before a lease's fd is given up and flushes it before it is
/// closed. A reader older than this bit refuses the record (`UnknownFlags`): rebuild with it.
pub const FLAG_MAP_CACHE: u32 = 2;
/// The entry-flags bit of a table library whose entry also runs programs (launch ABI method 5,
/// [`PROGRAM`](super::abi::PROGRAM): a batch whose records stay in a lease, up to
/// [`MAX_PROGRAM_LAUNCHES`](super::abi::MAX_PROGRAM_LAUNCHES) of them in one call). Set with
/// [`FLAG_BATCHES`] by every table this build generates; a table without it (built before it)
/// runs a model as batches of at most 256 records, one call each.
pub const FLAG_PROGRAM: u32 = 4;
/// The entry-flags bit of a library whose entry answers the power method (launch ABI method 6,
/// [`POWER_METHOD`](super::abi::POWER_METHOD)): the host sends it the session's DSP clock vote
/// ([`PowerVote`](super::PowerVote)) after each open. A library without it gets no vote.
pub const FLAG_POWER: u32 = 8;
/// The symbols a library may import: what the DSP provides to a loaded library (the HAP
/// functions the generated entry calls, `fopen`/`fclose` (answered by the host's reverse file
/// service, as a DSP's C library does), the C library functions and compiler runtime helpers
/// clang emits for Hexagon under `-nostdlib`, and the libm subset kernels call). This is the
/// export list of the bench's DSP shell; a real `fastrpc_shell` exports more, so the list is
/// conservative: a library that passes here loads on the bench and on a device. Helpers not on
/// this list that a library needs are carried in it instead
/// (`hexrpc-libbuild`'s `freestanding::CARRIED_HELPERS`: the half conversions and the double
/// `trunc`); our `math.h` and `string.h` declare only names from it
/// and from that list. A model file's reader (`hexrpc-model`) refuses a library that imports
/// anything else (a weak import is optional and allowed).
pub const DSP_PROVIDED_SYMBOLS: &[&str] = &[
    "HAP_mmap",
    "HAP_munmap",
    "HAP_perf_get_time_us",
    "HAP_power_set",
    "memcpy",
    "memset",
    "memmove",
    "memcmp",
    "fopen",
    "fclose",
    "__hexagon_divsi3",
    "__hexagon_udivsi3",
    "__hexagon_modsi3",
    "__hexagon_umodsi3",
    "__hexagon_divdi3",
    "__hexagon_udivdi3",
    "__hexagon_moddi3",
    "__hexagon_umoddi3",
    "__hexagon_memcpy_likely_aligned_min32bytes_mult8bytes",
    "__hexagon_sqrtf",
    "__hexagon_adddf3",
    "__hexagon_subdf3",
    "__hexagon_muldf3",
    "__hexagon_divdf3",
    "sqrtf",
    "fabsf",
    "floorf",
    "ceilf",
    "truncf",
    "roundf",
    "fmaxf",
    "fminf",
    "expf",
    "exp2f",
    "logf",
    "log2f",
    "sinf",
    "cosf",
];

/// Every entry-flags bit this build knows.
pub const KNOWN_FLAGS: u32 = FLAG_BATCHES | FLAG_MAP_CACHE | FLAG_PROGRAM | FLAG_POWER;
/// Most kernels one record describes: a kernel table's capacity
/// ([`MAX_BATCH_KERNELS`](super::MAX_BATCH_KERNELS)), so every table the entry generator takes
/// can be recorded and read back.
pub const MAX_KERNELS: usize = super::abi::MAX_BATCH_KERNELS;

/// Why a record could not be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RecordError {
    /// The image is not an ELF32 little-endian file, or its section table lies outside it.
    NotElf32,
    /// A note or the record inside it is cut short or its lengths do not add up.
    Truncated,
    /// A record of a format this build does not know.
    UnknownFormat(u32),
    /// An ABI version other than 1 or 2.
    UnknownAbi(u32),
    /// A record with no kernel, or more than [`MAX_KERNELS`].
    KernelCount(u32),
    /// A name or signature that is not UTF-8.
    NotUtf8,
    /// Entry flags this build does not know.
    UnknownFlags(u32),
    /// Entry flags that contradict each other (programs without batches).
    InconsistentFlags(u32),
    /// A count of kernels compiled without HVX that is zero in a format-3 record (which is
    /// written only when some kernel lost HVX) or larger than the kernel count.
    WithoutHvxCount {
        /// The count of kernels without HVX.
        without_hvx: u32,
        /// The record's kernel count.
        kernels: u32,
    },
    /// More than one hexrpc note.
    Duplicate,
    /// The writer's sink failed, or a name or signature is longer than 65535 bytes.
    Write,
    /// The record read back from a built library is not the one written.
    Mismatch,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::NotElf32 => f.write_str("not an ELF32 little-endian file with a valid section table"),
            RecordError::Truncated => f.write_str("the hexrpc build record is truncated"),
            RecordError::UnknownFormat(v) => write!(f, "the hexrpc build record has format {v}, this build reads 1 to {FORMAT}"),
            RecordError::UnknownAbi(v) => write!(f, "the hexrpc build record names ABI version {v} (known: 1, 2)"),
            RecordError::KernelCount(n) => write!(f, "the hexrpc build record lists {n} kernels (1..={MAX_KERNELS} allowed)"),
            RecordError::NotUtf8 => f.write_str("a name or signature in the hexrpc build record is not UTF-8"),
            RecordError::UnknownFlags(v) => write!(f, "the hexrpc build record has entry flags {v:#x} this build does not know"),
            RecordError::InconsistentFlags(v) => {
                write!(f, "the hexrpc build record has entry flags {v:#x}: programs (bit 2) need batches (bit 0)")
            }
            RecordError::WithoutHvxCount { without_hvx, kernels } => write!(
                f,
                "the hexrpc build record counts {without_hvx} kernels compiled without HVX of {kernels} (format 3 needs 1..={kernels})"
            ),
            RecordError::Duplicate => f.write_str("the library carries more than one hexrpc build record"),
            RecordError::Write => f.write_str("the build record could not be written"),
            RecordError::Mismatch => f.write_str("the build record read back from the library differs from the one written"),
        }
    }
}

impl core::error::Error for RecordError {}

/// One kernel of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedKernel<'a> {
    /// The kernel's C function name.
    pub name: &'a str,
    /// Its signature text (`"buf,buf,u32"`).
    pub signature: &'a str,
}

impl RecordedKernel<'_> {
    /// Parses the signature text.
    pub fn parse_signature(&self) -> Result<Signature, SignatureError> {
        Signature::parse(self.signature)
    }
}

/// A library's build record, borrowed from the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LibraryRecord<'a> {
    abi: AbiVersion,
    count: u32,
    batches: bool,
    map_cache: bool,
    programs: bool,
    power: bool,
    without_hvx: u32,
    kernels: &'a [u8],
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at.checked_add(4)?).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at.checked_add(2)?).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

impl<'a> LibraryRecord<'a> {
    /// Finds the record in an ELF image: `Ok(None)` when the image is a valid ELF32 file without
    /// one (a library built by someone else, e.g. tinygrad), an error when the image or the
    /// record is malformed.
    pub fn find(image: &'a [u8]) -> Result<Option<LibraryRecord<'a>>, RecordError> {
        let elf = Elf::parse(image).map_err(|_| RecordError::NotElf32)?;
        let mut found = None;
        for note in elf.section_notes() {
            // A note section outside the image, or a note outside its section.
            let note = note.map_err(|_| RecordError::Truncated)?;
            if note.kind == NOTE_TYPE && note.name == NOTE_NAME.as_bytes() {
                if found.is_some() {
                    return Err(RecordError::Duplicate);
                }
                found = Some(Self::parse(note.desc)?);
            }
        }
        Ok(found)
    }

    /// Parses a record's note descriptor.
    pub fn parse(desc: &'a [u8]) -> Result<LibraryRecord<'a>, RecordError> {
        let format = le32(desc, 0).ok_or(RecordError::Truncated)?;
        if !(1..=FORMAT).contains(&format) {
            return Err(RecordError::UnknownFormat(format));
        }
        let abi = match le32(desc, 4).ok_or(RecordError::Truncated)? {
            1 => AbiVersion::V1,
            2 => AbiVersion::V2,
            v => return Err(RecordError::UnknownAbi(v)),
        };
        let count = le32(desc, 8).ok_or(RecordError::Truncated)?;
        if count == 0 || count as usize > MAX_KERNELS {
            return Err(RecordError::KernelCount(count));
        }
        let (flags, header) = if format == 1 {
            (if count > 1 { FLAG_BATCHES } else { 0 }, 12)
        } else {
            match le32(desc, 12).ok_or(RecordError::Truncated)? {
                v if v & !KNOWN_FLAGS == 0 => (v, 16),
                v => return Err(RecordError::UnknownFlags(v)),
            }
        };
        let (batches, map_cache, programs) = (flags & FLAG_BATCHES != 0, flags & FLAG_MAP_CACHE != 0, flags & FLAG_PROGRAM != 0);
        if programs && !batches {
            return Err(RecordError::InconsistentFlags(flags));
        }
        let power = flags & FLAG_POWER != 0;
        let (without_hvx, header) = if format == 3 {
            match le32(desc, header).ok_or(RecordError::Truncated)? {
                n if n >= 1 && n <= count => (n, header + 4),
                n => return Err(RecordError::WithoutHvxCount { without_hvx: n, kernels: count }),
            }
        } else {
            (0, header)
        };
        let record = LibraryRecord { abi, count, batches, map_cache, programs, power, without_hvx, kernels: &desc[header..] };
        // Validate every entry now, so the accessors cannot fail later.
        let mut at = 0usize;
        for _ in 0..count {
            let (_, next) = record.entry(at)?;
            at = next;
        }
        if desc[header + at..].iter().any(|&b| b != 0) || desc.len() - header - at >= 4 {
            return Err(RecordError::Truncated);
        }
        Ok(record)
    }

    fn entry(&self, at: usize) -> Result<(RecordedKernel<'a>, usize), RecordError> {
        let b = self.kernels;
        let nlen = le16(b, at).ok_or(RecordError::Truncated)? as usize;
        let slen = le16(b, at + 2).ok_or(RecordError::Truncated)? as usize;
        let name = b.get(at + 4..at + 4 + nlen).ok_or(RecordError::Truncated)?;
        let sig = b.get(at + 4 + nlen..at + 4 + nlen + slen).ok_or(RecordError::Truncated)?;
        let name = core::str::from_utf8(name).map_err(|_| RecordError::NotUtf8)?;
        let signature = core::str::from_utf8(sig).map_err(|_| RecordError::NotUtf8)?;
        Ok((RecordedKernel { name, signature }, at + 4 + nlen + slen))
    }

    /// The launch ABI version the library's entry was generated for.
    pub fn abi(&self) -> AbiVersion {
        self.abi
    }

    /// True if the library's entry runs batches over its kernel table ([`kernels`](Self::kernels),
    /// in table order): a library from `hexrpc build-lib --table`. A batch on any other library
    /// is refused before anything is sent.
    pub fn batches(&self) -> bool {
        self.batches
    }

    /// True if the library's entry also runs programs ([`FLAG_PROGRAM`]): a whole run's records
    /// kept in a lease, one call.
    pub fn programs(&self) -> bool {
        self.programs
    }

    /// True if the library's entry keeps lease mappings across calls ([`FLAG_MAP_CACHE`]): the
    /// host opens it with the map cache (lease ids sent, released on lease drop, flushed before
    /// close).
    pub fn map_cache(&self) -> bool {
        self.map_cache
    }

    /// True if the library's entry answers the power method ([`FLAG_POWER`]): the host sends it
    /// the session's DSP clock vote after each open.
    pub fn power(&self) -> bool {
        self.power
    }

    /// How many of the kernels were compiled without HVX code generation: clang-19's Hexagon
    /// backend could not select HVX instructions for them, so `hexrpc build-lib` compiled them as
    /// scalar code (the same results, not vectorised). 0 for a record of format 1 or 2.
    pub fn kernels_without_hvx(&self) -> u32 {
        self.without_hvx
    }

    /// The first (today: the only) kernel.
    pub fn kernel(&self) -> RecordedKernel<'a> {
        self.kernels().next().unwrap_or(RecordedKernel { name: "", signature: "" })
    }

    /// The first kernel's signature text.
    pub fn signature(&self) -> &'a str {
        self.kernel().signature
    }

    /// True if the library was built for exactly this launch: the first kernel's signature is
    /// `sig` and the entry's ABI is `abi` (what a launcher checks before packing anything).
    pub fn matches(&self, sig: &Signature, abi: AbiVersion) -> bool {
        self.abi == abi && self.kernel().parse_signature().is_ok_and(|s| s == *sig)
    }

    /// Every kernel, in the order the build listed them.
    pub fn kernels(&self) -> impl Iterator<Item = RecordedKernel<'a>> + 'a {
        let this = *self;
        let mut at = 0usize;
        (0..this.count).map_while(move |_| {
            let (k, next) = this.entry(at).ok()?;
            at = next;
            Some(k)
        })
    }
}

/// Writes the record as assembler source for the target (a `.section` directive and `.byte`
/// lines), which the build step assembles into the library; no heap. `batches`: the entry runs
/// batches over `kernels` as its kernel table ([`FLAG_BATCHES`]). No other flag is set (see
/// [`write_record_asm_flags`]).
pub fn write_record_asm<W: fmt::Write + ?Sized>(
    out: &mut W,
    abi: AbiVersion,
    kernels: &[(&str, &Signature)],
    batches: bool,
) -> Result<(), RecordError> {
    write_record_asm_flags(out, abi, kernels, if batches { FLAG_BATCHES } else { 0 })
}

/// [`write_record_asm`] with the entry flags given as bits ([`FLAG_BATCHES`],
/// [`FLAG_MAP_CACHE`], [`FLAG_PROGRAM`], [`FLAG_POWER`]); an unknown bit is refused
/// (`UnknownFlags`), and programs without batches (`InconsistentFlags`). Every kernel was
/// compiled with HVX (format 2).
pub fn write_record_asm_flags<W: fmt::Write + ?Sized>(
    out: &mut W,
    abi: AbiVersion,
    kernels: &[(&str, &Signature)],
    flags: u32,
) -> Result<(), RecordError> {
    write_record_asm_hvx(out, abi, kernels, flags, 0)
}

/// [`write_record_asm_flags`] for a build in which `without_hvx` of the kernels were compiled
/// without HVX code generation ([`LibraryRecord::kernels_without_hvx`]): format 3 when it is
/// not zero, format 2 (the same bytes as [`write_record_asm_flags`]) when it is. More than the
/// kernel count is refused (`WithoutHvxCount`).
pub fn write_record_asm_hvx<W: fmt::Write + ?Sized>(
    out: &mut W,
    abi: AbiVersion,
    kernels: &[(&str, &Signature)],
    flags: u32,
    without_hvx: u32,
) -> Result<(), RecordError> {
    if flags & !KNOWN_FLAGS != 0 {
        return Err(RecordError::UnknownFlags(flags));
    }
    if flags & FLAG_PROGRAM != 0 && flags & FLAG_BATCHES == 0 {
        return Err(RecordError::InconsistentFlags(flags));
    }
    if kernels.is_empty() || kernels.len() > MAX_KERNELS {
        return Err(RecordError::KernelCount(kernels.len() as u32));
    }
    if without_hvx as usize > kernels.len() {
        return Err(RecordError::WithoutHvxCount { without_hvx, kernels: kernels.len() as u32 });
    }
    let format: u32 = if without_hvx == 0 { 2 } else { 3 };
    struct Sig<'s>(&'s Signature);
    impl fmt::Display for Sig<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)
        }
    }
    // The signature's text length, counted without allocating.
    struct Count(usize);
    impl fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut desc_len = if format == 3 { 20usize } else { 16 };
    for (name, sig) in kernels {
        let mut c = Count(0);
        fmt::Write::write_fmt(&mut c, format_args!("{}", Sig(sig))).map_err(|_| RecordError::Write)?;
        if name.len() > u16::MAX as usize || c.0 > u16::MAX as usize {
            return Err(RecordError::Write);
        }
        desc_len += 4 + name.len() + c.0;
    }
    let padded = pad4(desc_len);
    let abi_word: u32 = match abi {
        AbiVersion::V1 => 1,
        AbiVersion::V2 => 2,
    };
    // Byte emitter: `.byte` lines of up to 16 values.
    struct Bytes<'w, W: fmt::Write + ?Sized> {
        out: &'w mut W,
        col: usize,
    }
    impl<W: fmt::Write + ?Sized> Bytes<'_, W> {
        fn byte(&mut self, b: u8) -> fmt::Result {
            if self.col == 0 {
                self.out.write_str("  .byte ")?;
            } else {
                self.out.write_str(", ")?;
            }
            write!(self.out, "{b}")?;
            self.col += 1;
            if self.col == 16 {
                self.out.write_str("\n")?;
                self.col = 0;
            }
            Ok(())
        }
        fn all(&mut self, bs: &[u8]) -> fmt::Result {
            bs.iter().try_for_each(|&b| self.byte(b))
        }
        fn finish(&mut self) -> fmt::Result {
            if self.col != 0 {
                self.out.write_str("\n")?;
                self.col = 0;
            }
            Ok(())
        }
    }
    impl<W: fmt::Write + ?Sized> fmt::Write for Bytes<'_, W> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.all(s.as_bytes())
        }
    }
    let w = |out: &mut W| -> fmt::Result {
        writeln!(out, "/* hexrpc build record (runtime::launch::record, format {format}); generated, do not edit. */")?;
        writeln!(out, "  .section {NOTE_SECTION},\"\",@note")?;
        writeln!(out, "  .p2align 2")?;
        let mut b = Bytes { out, col: 0 };
        b.all(&7u32.to_le_bytes())?;
        b.all(&(padded as u32).to_le_bytes())?;
        b.all(&NOTE_TYPE.to_le_bytes())?;
        b.all(b"hexrpc\0\0")?;
        b.all(&format.to_le_bytes())?;
        b.all(&abi_word.to_le_bytes())?;
        b.all(&(kernels.len() as u32).to_le_bytes())?;
        b.all(&flags.to_le_bytes())?;
        if format == 3 {
            b.all(&without_hvx.to_le_bytes())?;
        }
        for (name, sig) in kernels {
            let mut c = Count(0);
            fmt::Write::write_fmt(&mut c, format_args!("{}", Sig(sig)))?;
            b.all(&(name.len() as u16).to_le_bytes())?;
            b.all(&(c.0 as u16).to_le_bytes())?;
            b.all(name.as_bytes())?;
            fmt::Write::write_fmt(&mut b, format_args!("{}", Sig(sig)))?;
        }
        for _ in desc_len..padded {
            b.byte(0)?;
        }
        b.finish()
    };
    w(out).map_err(|_| RecordError::Write)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;
    use std::vec::Vec;

    use super::*;

    /// Assembles the `.byte` lines back into bytes (what the assembler does).
    fn bytes_of(asm: &str) -> Vec<u8> {
        asm.lines()
            .filter_map(|l| l.trim().strip_prefix(".byte "))
            .flat_map(|l| l.split(", ").map(|b| b.parse::<u8>().unwrap()).collect::<Vec<_>>())
            .collect()
    }

    /// A minimal ELF32 image with one SHT_NOTE section holding `note`.
    fn image_with(note: &[u8]) -> Vec<u8> {
        let mut img = std::vec![0u8; 52];
        img[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 1, 1]);
        let note_off = img.len();
        img.extend_from_slice(note);
        let shoff = img.len();
        img[32..36].copy_from_slice(&(shoff as u32).to_le_bytes());
        img[46..48].copy_from_slice(&40u16.to_le_bytes());
        img[48..50].copy_from_slice(&2u16.to_le_bytes());
        img.extend_from_slice(&[0u8; 40]);
        let mut sh = [0u8; 40];
        sh[4..8].copy_from_slice(&hexrpc_drivers::elf::SHT_NOTE.to_le_bytes());
        sh[16..20].copy_from_slice(&(note_off as u32).to_le_bytes());
        sh[20..24].copy_from_slice(&(note.len() as u32).to_le_bytes());
        img.extend_from_slice(&sh);
        img
    }

    #[test]
    fn written_record_reads_back() {
        let sig = Signature::parse("buf,buf,u32,f32").unwrap();
        let sig2 = Signature::parse("buf").unwrap();
        let mut asm = String::new();
        write_record_asm(&mut asm, AbiVersion::V2, &[("add_f32", &sig), ("zero", &sig2)], true).unwrap();
        assert!(asm.contains(".section .note.hexrpc,\"\",@note"), "{asm}");
        let img = image_with(&bytes_of(&asm));
        let rec = LibraryRecord::find(&img).unwrap().expect("found");
        assert_eq!(rec.abi(), AbiVersion::V2);
        assert!(rec.batches());
        assert_eq!(rec.kernel(), RecordedKernel { name: "add_f32", signature: "buf,buf,u32,f32" });
        assert_eq!(rec.signature(), "buf,buf,u32,f32");
        let all: Vec<_> = rec.kernels().collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].parse_signature().unwrap(), sig2);
        assert!(rec.matches(&sig, AbiVersion::V2));
        assert!(!rec.matches(&sig, AbiVersion::V1) && !rec.matches(&sig2, AbiVersion::V2));
        let mut asm1 = String::new();
        write_record_asm(&mut asm1, AbiVersion::V1, &[("k", &sig2)], false).unwrap();
        let img1 = image_with(&bytes_of(&asm1));
        let rec1 = LibraryRecord::find(&img1).unwrap().unwrap();
        assert_eq!(rec1.abi(), AbiVersion::V1);
        assert!(!rec1.batches());
        // A one-kernel table says so (its count alone could not).
        let mut asm_t = String::new();
        write_record_asm(&mut asm_t, AbiVersion::V2, &[("k", &sig2)], true).unwrap();
        let img_t = image_with(&bytes_of(&asm_t));
        assert!(LibraryRecord::find(&img_t).unwrap().unwrap().batches());
        assert_eq!(write_record_asm(&mut String::new(), AbiVersion::V2, &[], false), Err(RecordError::KernelCount(0)));
        assert!(!rec.map_cache() && !rec1.map_cache());
        // The map-cache bit, alone and with the table bit; an unknown bit is refused.
        for flags in [FLAG_MAP_CACHE, FLAG_MAP_CACHE | FLAG_BATCHES] {
            let mut asm_c = String::new();
            write_record_asm_flags(&mut asm_c, AbiVersion::V2, &[("k", &sig2)], flags).unwrap();
            let img_c = image_with(&bytes_of(&asm_c));
            let rec_c = LibraryRecord::find(&img_c).unwrap().unwrap();
            assert!(rec_c.map_cache());
            assert_eq!(rec_c.batches(), flags & FLAG_BATCHES != 0);
            assert!(!rec_c.programs());
        }
        for flags in [FLAG_BATCHES | FLAG_PROGRAM, FLAG_BATCHES | FLAG_PROGRAM | FLAG_MAP_CACHE] {
            let mut asm = String::new();
            write_record_asm_flags(&mut asm, AbiVersion::V2, &[("k", &sig2)], flags).unwrap();
            let img = image_with(&bytes_of(&asm));
            let rec = LibraryRecord::find(&img).unwrap().unwrap();
            assert!(rec.batches() && rec.programs());
            assert_eq!(rec.map_cache(), flags & FLAG_MAP_CACHE != 0);
        }
        let mut asm = String::new();
        write_record_asm_flags(&mut asm, AbiVersion::V2, &[("k", &sig2)], FLAG_POWER).unwrap();
        let img = image_with(&bytes_of(&asm));
        let rec = LibraryRecord::find(&img).unwrap().unwrap();
        assert!(rec.power() && !rec.batches() && !rec.map_cache());
        assert_eq!(write_record_asm_flags(&mut String::new(), AbiVersion::V2, &[("k", &sig2)], 16), Err(RecordError::UnknownFlags(16)));
        assert_eq!(
            write_record_asm_flags(&mut String::new(), AbiVersion::V2, &[("k", &sig2)], FLAG_PROGRAM),
            Err(RecordError::InconsistentFlags(FLAG_PROGRAM))
        );
    }

    #[test]
    fn kernels_without_hvx_are_counted_in_format_3_and_only_then() {
        let (a, b) = (Signature::parse("buf,u32").unwrap(), Signature::parse("buf").unwrap());
        let table = [("a", &a), ("b", &b)];
        let flags = FLAG_BATCHES | FLAG_PROGRAM | FLAG_MAP_CACHE | FLAG_POWER;
        // None lost: format 2, the very bytes of `write_record_asm_flags`, counting 0.
        let (mut two, mut zero) = (String::new(), String::new());
        write_record_asm_flags(&mut two, AbiVersion::V2, &table, flags).unwrap();
        write_record_asm_hvx(&mut zero, AbiVersion::V2, &table, flags, 0).unwrap();
        assert_eq!(two, zero);
        let note2 = bytes_of(&two);
        assert_eq!(le32(&note2, 20), Some(2), "format word");
        assert_eq!(LibraryRecord::find(&image_with(&note2)).unwrap().unwrap().kernels_without_hvx(), 0);
        // One or both lost: format 3, one word more, everything else as before.
        for n in [1u32, 2] {
            let mut asm = String::new();
            write_record_asm_hvx(&mut asm, AbiVersion::V2, &table, flags, n).unwrap();
            assert!(asm.contains("format 3"), "{asm}");
            let note = bytes_of(&asm);
            assert_eq!((le32(&note, 20), le32(&note, 36)), (Some(3), Some(n)), "format word, count word");
            let img = image_with(&note);
            let rec = LibraryRecord::find(&img).unwrap().unwrap();
            assert_eq!(rec.kernels_without_hvx(), n);
            assert!(rec.batches() && rec.programs() && rec.map_cache() && rec.power() && rec.abi() == AbiVersion::V2);
            let names: Vec<_> = rec.kernels().map(|k| (k.name, k.signature)).collect();
            assert_eq!(names, [("a", "buf,u32"), ("b", "buf")]);
        }
        assert_eq!(
            write_record_asm_hvx(&mut String::new(), AbiVersion::V2, &table, flags, 3),
            Err(RecordError::WithoutHvxCount { without_hvx: 3, kernels: 2 })
        );
        // The reader refuses a format-3 count of 0 (never written) or above the kernel count, and
        // never panics on a cut or corrupted format-3 record.
        let mut asm = String::new();
        write_record_asm_hvx(&mut asm, AbiVersion::V1, &[("k", &b)], 0, 1).unwrap();
        let note = bytes_of(&asm);
        assert_eq!(LibraryRecord::find(&image_with(&note)).unwrap().unwrap().kernels_without_hvx(), 1);
        for (count, err) in [(0u32, 0u32), (2, 2)] {
            let mut bad = note.clone();
            bad[36..40].copy_from_slice(&count.to_le_bytes());
            assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::WithoutHvxCount { without_hvx: err, kernels: 1 }));
        }
        for cut in 0..note.len() {
            let _ = LibraryRecord::find(&image_with(&note[..cut]));
        }
        for i in 0..note.len() {
            for v in [0u8, 1, 3, 0xff] {
                let mut bad = note.clone();
                bad[i] = v;
                let _ = LibraryRecord::find(&image_with(&bad));
            }
        }
        // A format-2 record relabelled 3 has its first kernel's lengths (name 1, signature 7)
        // where the count is: refused.
        let mut relabelled = note2.clone();
        relabelled[20] = 3;
        assert_eq!(
            LibraryRecord::find(&image_with(&relabelled)),
            Err(RecordError::WithoutHvxCount { without_hvx: 1 | 7 << 16, kernels: 2 })
        );
        let mut four = note2;
        four[20] = 4;
        assert_eq!(LibraryRecord::find(&image_with(&four)), Err(RecordError::UnknownFormat(4)));
    }

    #[test]
    fn a_full_kernel_table_is_recorded_and_one_more_is_refused() {
        assert_eq!(MAX_KERNELS, crate::launch::MAX_BATCH_KERNELS);
        let sig = Signature::parse("buf,buf,u32").unwrap();
        let names: Vec<String> = (0..=MAX_KERNELS).map(|i| std::format!("k{i}")).collect();
        let table: Vec<(&str, &Signature)> = names.iter().map(|n| (n.as_str(), &sig)).collect();
        let mut asm = String::new();
        write_record_asm(&mut asm, AbiVersion::V2, &table[..MAX_KERNELS], true).unwrap();
        let note = bytes_of(&asm);
        let img = image_with(&note);
        let rec = LibraryRecord::find(&img).unwrap().unwrap();
        assert_eq!(rec.kernels().count(), MAX_KERNELS);
        assert_eq!(rec.kernels().last().map(|k| k.name), Some(names[MAX_KERNELS - 1].as_str()));
        let over = MAX_KERNELS as u32 + 1;
        assert_eq!(write_record_asm(&mut String::new(), AbiVersion::V2, &table, true), Err(RecordError::KernelCount(over)));
        // A record that claims one kernel more than the table's capacity is refused on reading
        // (the count word is at desc offset 8; the desc follows the 12-byte header and the name).
        let mut bad = note.clone();
        bad[20 + 8..20 + 12].copy_from_slice(&over.to_le_bytes());
        assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::KernelCount(over)));
    }

    #[test]
    fn reader_refuses_malformed_records_without_panicking() {
        let sig = Signature::parse("buf,u32").unwrap();
        let mut asm = String::new();
        write_record_asm(&mut asm, AbiVersion::V2, &[("bump_u8", &sig)], false).unwrap();
        let note = bytes_of(&asm);
        // No notes at all: Ok(None). Not ELF: an error.
        assert_eq!(LibraryRecord::find(&image_with(&[])), Ok(None));
        assert_eq!(LibraryRecord::find(b"\x7fELF"), Err(RecordError::NotElf32));
        // Every truncation of the note, and every single-byte corruption, is an error or a
        // record, never a panic.
        for cut in 0..note.len() {
            let _ = LibraryRecord::find(&image_with(&note[..cut]));
        }
        for i in 0..note.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut bad = note.clone();
                bad[i] = v;
                let _ = LibraryRecord::find(&image_with(&bad));
            }
        }
        let mut bad = note.clone();
        bad[20] = 9; // format word
        assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::UnknownFormat(9)));
        let mut bad = note.clone();
        bad[24] = 3; // ABI word
        assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::UnknownAbi(3)));
        let mut bad = note.clone();
        bad[32] = 6; // entry flags word: programs without batches
        assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::InconsistentFlags(6)));
        let mut bad = note.clone();
        bad[32] = 16; // entry flags word: a bit nobody defined
        assert_eq!(LibraryRecord::find(&image_with(&bad)), Err(RecordError::UnknownFlags(16)));
        // Format 1 (no flags word): a table exactly when it lists more than one kernel.
        let v1 = |kernels: &[(&str, &str)]| {
            let mut desc = std::vec::Vec::new();
            desc.extend_from_slice(&1u32.to_le_bytes());
            desc.extend_from_slice(&2u32.to_le_bytes());
            desc.extend_from_slice(&(kernels.len() as u32).to_le_bytes());
            for (n, sg) in kernels {
                desc.extend_from_slice(&(n.len() as u16).to_le_bytes());
                desc.extend_from_slice(&(sg.len() as u16).to_le_bytes());
                desc.extend_from_slice(n.as_bytes());
                desc.extend_from_slice(sg.as_bytes());
            }
            while !desc.len().is_multiple_of(4) {
                desc.push(0);
            }
            let mut n = std::vec::Vec::new();
            n.extend_from_slice(&7u32.to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&NOTE_TYPE.to_le_bytes());
            n.extend_from_slice(b"hexrpc\0\0");
            n.extend_from_slice(&desc);
            n
        };
        let img_one = image_with(&v1(&[("a", "buf")]));
        let one = LibraryRecord::find(&img_one).unwrap().unwrap();
        assert!(!one.batches() && one.signature() == "buf");
        let img_two = image_with(&v1(&[("a", "buf"), ("b", "buf,u32")]));
        let two_k = LibraryRecord::find(&img_two).unwrap().unwrap();
        assert!(two_k.batches() && two_k.kernels().count() == 2);
        let mut two = note.clone();
        two.extend_from_slice(&note);
        assert_eq!(LibraryRecord::find(&image_with(&two)), Err(RecordError::Duplicate));
    }
}
