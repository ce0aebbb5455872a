//! ELF32 little-endian images, as the Hexagon DSP loads them: the on-disk structs (field names as
//! in `<elf.h>`, the System V gABI), [`EM_HEXAGON`], and a checked reader.
//!
//! Every image is untrusted input (a shell or library read from disk, or handed over by a
//! caller). [`Elf::parse`] checks the identification bytes and that both header tables lie
//! inside the image with the entry size of this ABI; every later access (a segment's or a
//! section's bytes, a string, a note) is bounds-checked with checked arithmetic and returns an
//! [`ElfError`], never panics. The structs are read in place with zerocopy: their fields are
//! little-endian byte arrays ([`U16`], [`U32`]) with alignment 1, so any offset is valid.
//!
//! Extended numbering (`e_phnum == PN_XNUM`, or section counts kept in section 0 because there
//! are 65280 or more) is refused: no Hexagon image needs it.

use core::fmt;

use zerocopy::little_endian::{I32, U16, U32};
use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::abi_layout;

/// `EM_HEXAGON` (also called `EM_QDSP6`): the Hexagon machine number.
pub const EM_HEXAGON: u16 = 164;

/// `ELFCLASS32` (`e_ident[EI_CLASS]`).
pub const ELFCLASS32: u8 = 1;
/// `ELFDATA2LSB` (`e_ident[EI_DATA]`): little-endian.
pub const ELFDATA2LSB: u8 = 1;
/// `e_ident[EI_DATA]`: big-endian.
pub const ELFDATA2MSB: u8 = 2;
/// `ET_EXEC`: an executable.
pub const ET_EXEC: u16 = 2;
/// `ET_DYN`: a shared object.
pub const ET_DYN: u16 = 3;
/// `PN_XNUM`: `e_phnum` value meaning "the count is in section 0" (refused here).
pub const PN_XNUM: u16 = 0xffff;

/// `PT_LOAD`: a loadable segment.
pub const PT_LOAD: u32 = 1;
/// `PT_DYNAMIC`: the dynamic section.
pub const PT_DYNAMIC: u32 = 2;
/// `PT_NOTE`: notes.
pub const PT_NOTE: u32 = 4;

/// `SHT_NULL`.
pub const SHT_NULL: u32 = 0;
/// `SHT_STRTAB`: a string table.
pub const SHT_STRTAB: u32 = 3;
/// `SHT_DYNAMIC`.
pub const SHT_DYNAMIC: u32 = 6;
/// `SHT_NOTE`: notes.
pub const SHT_NOTE: u32 = 7;
/// `SHT_NOBITS`: occupies no file space (`.bss`).
pub const SHT_NOBITS: u32 = 8;
/// `SHT_DYNSYM`: the dynamic symbol table.
pub const SHT_DYNSYM: u32 = 11;
/// `SHF_ALLOC`: the section occupies memory at run time.
pub const SHF_ALLOC: u32 = 2;

/// `Elf32_Ehdr`: the file header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Ehdr {
    /// `e_ident`: magic, class, data encoding, version, OS ABI, padding.
    pub e_ident: [u8; 16],
    /// `e_type` (`ET_*`).
    pub e_type: U16,
    /// `e_machine` (`EM_*`).
    pub e_machine: U16,
    /// `e_version`.
    pub e_version: U32,
    /// `e_entry`.
    pub e_entry: U32,
    /// `e_phoff`: file offset of the program header table.
    pub e_phoff: U32,
    /// `e_shoff`: file offset of the section header table.
    pub e_shoff: U32,
    /// `e_flags` (the Hexagon architecture version).
    pub e_flags: U32,
    /// `e_ehsize`.
    pub e_ehsize: U16,
    /// `e_phentsize`.
    pub e_phentsize: U16,
    /// `e_phnum`.
    pub e_phnum: U16,
    /// `e_shentsize`.
    pub e_shentsize: U16,
    /// `e_shnum`.
    pub e_shnum: U16,
    /// `e_shstrndx`: index of the section-name string table.
    pub e_shstrndx: U16,
}
abi_layout!(Elf32Ehdr, "Elf32_Ehdr", size = 52, align = 1, {
    e_ident @ 0, e_type @ 16, e_machine @ 18, e_version @ 20, e_entry @ 24, e_phoff @ 28, e_shoff @ 32,
    e_flags @ 36, e_ehsize @ 40, e_phentsize @ 42, e_phnum @ 44, e_shentsize @ 46, e_shnum @ 48, e_shstrndx @ 50,
});

/// `Elf32_Phdr`: a program header (segment).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Phdr {
    /// `p_type` (`PT_*`).
    pub p_type: U32,
    /// `p_offset`: file offset of the segment's bytes.
    pub p_offset: U32,
    /// `p_vaddr`.
    pub p_vaddr: U32,
    /// `p_paddr`.
    pub p_paddr: U32,
    /// `p_filesz`: bytes in the file.
    pub p_filesz: U32,
    /// `p_memsz`: bytes in memory.
    pub p_memsz: U32,
    /// `p_flags` (`PF_X` 1, `PF_W` 2, `PF_R` 4).
    pub p_flags: U32,
    /// `p_align`.
    pub p_align: U32,
}
abi_layout!(Elf32Phdr, "Elf32_Phdr", size = 32, align = 1, {
    p_type @ 0, p_offset @ 4, p_vaddr @ 8, p_paddr @ 12, p_filesz @ 16, p_memsz @ 20, p_flags @ 24, p_align @ 28,
});

/// `Elf32_Shdr`: a section header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Shdr {
    /// `sh_name`: offset in the section-name string table.
    pub sh_name: U32,
    /// `sh_type` (`SHT_*`).
    pub sh_type: U32,
    /// `sh_flags` (`SHF_*`).
    pub sh_flags: U32,
    /// `sh_addr`.
    pub sh_addr: U32,
    /// `sh_offset`: file offset of the section's bytes.
    pub sh_offset: U32,
    /// `sh_size`.
    pub sh_size: U32,
    /// `sh_link`.
    pub sh_link: U32,
    /// `sh_info`.
    pub sh_info: U32,
    /// `sh_addralign`.
    pub sh_addralign: U32,
    /// `sh_entsize`.
    pub sh_entsize: U32,
}
abi_layout!(Elf32Shdr, "Elf32_Shdr", size = 40, align = 1, {
    sh_name @ 0, sh_type @ 4, sh_flags @ 8, sh_addr @ 12, sh_offset @ 16, sh_size @ 20, sh_link @ 24,
    sh_info @ 28, sh_addralign @ 32, sh_entsize @ 36,
});

/// `Elf32_Sym`: a symbol table entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Sym {
    /// `st_name`: offset in the linked string table.
    pub st_name: U32,
    /// `st_value`.
    pub st_value: U32,
    /// `st_size`.
    pub st_size: U32,
    /// `st_info`: binding (high nibble) and type (low nibble).
    pub st_info: u8,
    /// `st_other`: visibility.
    pub st_other: u8,
    /// `st_shndx`: the defining section, 0 (`SHN_UNDEF`) for an import.
    pub st_shndx: U16,
}
abi_layout!(Elf32Sym, "Elf32_Sym", size = 16, align = 1, {
    st_name @ 0, st_value @ 4, st_size @ 8, st_info @ 12, st_other @ 13, st_shndx @ 14,
});

/// `Elf32_Dyn`: an entry of the dynamic section (`d_un` as its `d_val` member).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Dyn {
    /// `d_tag` (`DT_*`).
    pub d_tag: I32,
    /// `d_un.d_val` / `d_un.d_ptr`.
    pub d_val: U32,
}
abi_layout!(Elf32Dyn, "Elf32_Dyn", size = 8, align = 1, { d_tag @ 0, d_val @ 4 });

/// `Elf32_Nhdr`: the header of a note; name and descriptor follow, each padded to 4 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, KnownLayout, Immutable)]
pub struct Elf32Nhdr {
    /// `n_namesz`: name length including its NUL.
    pub n_namesz: U32,
    /// `n_descsz`: descriptor length.
    pub n_descsz: U32,
    /// `n_type`.
    pub n_type: U32,
}
abi_layout!(Elf32Nhdr, "Elf32_Nhdr", size = 12, align = 1, { n_namesz @ 0, n_descsz @ 4, n_type @ 8 });

/// Why an image, or a part of it, cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ElfError {
    /// Shorter than the 52-byte file header.
    Truncated,
    /// No `\x7fELF` magic.
    NotElf,
    /// Not `ELFCLASS32` / `ELFDATA2LSB`.
    NotElf32Le,
    /// A header table's entry size is not this ABI's (32 for program headers, 40 for sections).
    BadEntrySize,
    /// Extended numbering (`PN_XNUM`, or section counts in section 0), which this reader refuses.
    ExtendedNumbering,
    /// A table, segment, section or string reaches outside the image (or its end overflows).
    OutOfBounds,
    /// A string does not end with a NUL inside its table.
    BadString,
    /// A note's name or descriptor reaches outside its note area.
    BadNote,
    /// An index names no section.
    NoSuchSection,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElfError::Truncated => "shorter than an ELF32 header",
            ElfError::NotElf => "not an ELF file",
            ElfError::NotElf32Le => "not a 32-bit little-endian ELF file",
            ElfError::BadEntrySize => "header table entry size is not the ELF32 one",
            ElfError::ExtendedNumbering => "extended section or segment numbering is not supported",
            ElfError::OutOfBounds => "a table, segment or section reaches outside the file",
            ElfError::BadString => "a string is not NUL-terminated inside its table",
            ElfError::BadNote => "a note reaches outside its note area",
            ElfError::NoSuchSection => "no such section",
        })
    }
}

impl core::error::Error for ElfError {}

/// `e_machine` of an ELF file of either class, in the file's byte order: its offset (18) is the
/// same in ELF32 and ELF64. For a caller that only asks which machine a file is for (such as a
/// host tool, an ELF64 file); everything else about an image goes through [`Elf`].
pub fn machine_of(bytes: &[u8]) -> Result<u16, ElfError> {
    let b = bytes.get(..20).ok_or(ElfError::Truncated)?;
    if b[..4] != *b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    Ok(match b[5] {
        ELFDATA2MSB => u16::from_be_bytes([b[18], b[19]]),
        _ => u16::from_le_bytes([b[18], b[19]]),
    })
}

/// `bytes[off .. off + len]`, or [`ElfError::OutOfBounds`].
fn range(bytes: &[u8], off: usize, len: usize) -> Result<&[u8], ElfError> {
    let end = off.checked_add(len).ok_or(ElfError::OutOfBounds)?;
    bytes.get(off..end).ok_or(ElfError::OutOfBounds)
}

/// The `count` entries of `T` at `off`, after checking the declared entry size.
fn table<T: FromBytes + KnownLayout + Immutable>(bytes: &[u8], off: u32, count: u16, entsize: u16) -> Result<&[T], ElfError> {
    if count == 0 {
        return Ok(&[]);
    }
    if usize::from(entsize) != core::mem::size_of::<T>() {
        return Err(ElfError::BadEntrySize);
    }
    let len = usize::from(count).checked_mul(core::mem::size_of::<T>()).ok_or(ElfError::OutOfBounds)?;
    let b = range(bytes, off as usize, len)?;
    <[T]>::ref_from_bytes(b).map_err(|_| ElfError::OutOfBounds)
}

/// A checked view of an ELF32 little-endian image.
#[derive(Clone, Copy, Debug)]
pub struct Elf<'a> {
    bytes: &'a [u8],
    header: &'a Elf32Ehdr,
    phdrs: &'a [Elf32Phdr],
    shdrs: &'a [Elf32Shdr],
}

impl<'a> Elf<'a> {
    /// Checks the identification and that both header tables lie inside `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ElfError> {
        let header = Self::header_of(bytes)?;
        if header.e_phnum.get() == PN_XNUM || (header.e_shnum.get() == 0 && header.e_shoff.get() != 0) {
            return Err(ElfError::ExtendedNumbering);
        }
        let phdrs = table(bytes, header.e_phoff.get(), header.e_phnum.get(), header.e_phentsize.get())?;
        let shdrs = table(bytes, header.e_shoff.get(), header.e_shnum.get(), header.e_shentsize.get())?;
        Ok(Elf { bytes, header, phdrs, shdrs })
    }

    /// Only the file header, checked for magic, class and data encoding (for a caller that has
    /// read just the first bytes of a file, such as a machine check).
    pub fn header_of(bytes: &[u8]) -> Result<&Elf32Ehdr, ElfError> {
        let (header, _) = Elf32Ehdr::ref_from_prefix(bytes).map_err(|_| ElfError::Truncated)?;
        if header.e_ident[..4] != *b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        if header.e_ident[4] != ELFCLASS32 || header.e_ident[5] != ELFDATA2LSB {
            return Err(ElfError::NotElf32Le);
        }
        Ok(header)
    }

    /// The whole image.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The file header.
    pub fn header(&self) -> &'a Elf32Ehdr {
        self.header
    }

    /// `e_machine`.
    pub fn machine(&self) -> u16 {
        self.header.e_machine.get()
    }

    /// `e_type`.
    pub fn elf_type(&self) -> u16 {
        self.header.e_type.get()
    }

    /// The program headers (segments).
    pub fn program_headers(&self) -> &'a [Elf32Phdr] {
        self.phdrs
    }

    /// The section headers.
    pub fn section_headers(&self) -> &'a [Elf32Shdr] {
        self.shdrs
    }

    /// Section `index`.
    pub fn section(&self, index: u32) -> Result<&'a Elf32Shdr, ElfError> {
        usize::try_from(index).ok().and_then(|i| self.shdrs.get(i)).ok_or(ElfError::NoSuchSection)
    }

    /// The file bytes of a segment (`p_filesz` bytes at `p_offset`).
    pub fn segment_bytes(&self, p: &Elf32Phdr) -> Result<&'a [u8], ElfError> {
        range(self.bytes, p.p_offset.get() as usize, p.p_filesz.get() as usize)
    }

    /// The file bytes of a section (empty for `SHT_NOBITS`).
    pub fn section_bytes(&self, s: &Elf32Shdr) -> Result<&'a [u8], ElfError> {
        if s.sh_type.get() == SHT_NOBITS {
            return Ok(&[]);
        }
        range(self.bytes, s.sh_offset.get() as usize, s.sh_size.get() as usize)
    }

    /// A section's name from the section-name string table (empty when the image has none).
    pub fn section_name(&self, s: &Elf32Shdr) -> Result<&'a [u8], ElfError> {
        let index = self.header.e_shstrndx.get();
        if index == 0 {
            return Ok(&[]);
        }
        let names = self.section_bytes(self.section(index.into())?)?;
        string_at(names, s.sh_name.get())
    }

    /// The entries of a symbol table section (`SHT_DYNSYM` / `SHT_SYMTAB`), with its string
    /// table (the section `sh_link` names).
    pub fn symbols(&self, s: &Elf32Shdr) -> Result<(&'a [Elf32Sym], &'a [u8]), ElfError> {
        let b = self.section_bytes(s)?;
        if s.sh_entsize.get() as usize != core::mem::size_of::<Elf32Sym>() || b.len() % core::mem::size_of::<Elf32Sym>() != 0 {
            return Err(ElfError::BadEntrySize);
        }
        let syms = <[Elf32Sym]>::ref_from_bytes(b).map_err(|_| ElfError::OutOfBounds)?;
        let strtab = self.section_bytes(self.section(s.sh_link.get())?)?;
        Ok((syms, strtab))
    }

    /// The entries of a `PT_DYNAMIC` segment (a trailing partial entry is ignored).
    pub fn dynamic(&self, p: &Elf32Phdr) -> Result<&'a [Elf32Dyn], ElfError> {
        let b = self.segment_bytes(p)?;
        let whole = b.len() - b.len() % core::mem::size_of::<Elf32Dyn>();
        <[Elf32Dyn]>::ref_from_bytes(&b[..whole]).map_err(|_| ElfError::OutOfBounds)
    }

    /// The notes of every `SHT_NOTE` section, in order: each item is a note or the error that
    /// ended its section's notes.
    pub fn section_notes(&self) -> impl Iterator<Item = Result<Note<'a>, ElfError>> + 'a {
        let elf = *self;
        self.shdrs.iter().filter(|s| s.sh_type.get() == SHT_NOTE).flat_map(move |s| {
            let (notes, err) = match elf.section_bytes(s) {
                Ok(b) => (Notes::new(b), None),
                Err(e) => (Notes::new(&[]), Some(Err(e))),
            };
            err.into_iter().chain(notes)
        })
    }
}

/// The NUL-terminated string at `at` in a string table, without its NUL.
pub fn string_at(table: &[u8], at: u32) -> Result<&[u8], ElfError> {
    let rest = table.get(at as usize..).ok_or(ElfError::OutOfBounds)?;
    let end = rest.iter().position(|&b| b == 0).ok_or(ElfError::BadString)?;
    Ok(&rest[..end])
}

/// One note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Note<'a> {
    /// `n_type`.
    pub kind: u32,
    /// The name without its terminating NUL (if it had one).
    pub name: &'a [u8],
    /// The descriptor.
    pub desc: &'a [u8],
}

/// The notes of a note area (an `SHT_NOTE` section or a `PT_NOTE` segment). Yields an error
/// once, then nothing, when a note reaches outside the area; bytes too few for a note header at
/// the end are ignored (padding).
#[derive(Clone, Debug)]
pub struct Notes<'a> {
    rest: &'a [u8],
}

impl<'a> Notes<'a> {
    /// The notes in `area`.
    pub fn new(area: &'a [u8]) -> Self {
        Notes { rest: area }
    }
}

/// `n` rounded up to a multiple of 4, or `None` on overflow.
fn pad4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

impl<'a> Iterator for Notes<'a> {
    type Item = Result<Note<'a>, ElfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (h, body) = Elf32Nhdr::ref_from_prefix(self.rest).ok()?;
        let one = (|| {
            let namesz = h.n_namesz.get() as usize;
            let descsz = h.n_descsz.get() as usize;
            let desc_at = pad4(namesz).ok_or(ElfError::BadNote)?;
            let name = body.get(..namesz).ok_or(ElfError::BadNote)?;
            let desc_end = desc_at.checked_add(descsz).ok_or(ElfError::BadNote)?;
            let desc = body.get(desc_at..desc_end).ok_or(ElfError::BadNote)?;
            // The padding after the last descriptor may be missing.
            let next = pad4(desc_end).map_or(body.len(), |n| n.min(body.len()));
            Ok((Note { kind: h.n_type.get(), name: name.strip_suffix(&[0]).unwrap_or(name), desc }, &body[next..]))
        })();
        match one {
            Ok((note, rest)) => {
                self.rest = rest;
                Some(Ok(note))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for Notes<'_> {}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// A little builder: header, then `phdrs` at 52, then `shdrs`, then `tail` bytes.
    fn image(phdrs: &[[u32; 8]], shdrs: &[[u32; 10]], tail: &[u8], shstrndx: u16) -> Vec<u8> {
        let mut v = Vec::new();
        let phoff = 52u32;
        let shoff = phoff + 32 * phdrs.len() as u32;
        v.extend_from_slice(b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0");
        v.extend_from_slice(&ET_DYN.to_le_bytes());
        v.extend_from_slice(&EM_HEXAGON.to_le_bytes());
        for w in [1u32, 0, if phdrs.is_empty() { 0 } else { phoff }, if shdrs.is_empty() { 0 } else { shoff }, 0x73] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        for h in [52u16, 32, phdrs.len() as u16, 40, shdrs.len() as u16, shstrndx] {
            v.extend_from_slice(&h.to_le_bytes());
        }
        assert_eq!(v.len(), 52);
        for p in phdrs.iter().flatten().chain(shdrs.iter().flatten()) {
            v.extend_from_slice(&p.to_le_bytes());
        }
        v.extend_from_slice(tail);
        v
    }

    fn note(kind: u32, name: &[u8], desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [name.len() as u32, desc.len() as u32, kind] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(name);
        v.resize(v.len().next_multiple_of(4), 0);
        v.extend_from_slice(desc);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    #[test]
    fn reads_headers_segments_sections_and_notes() {
        // One PT_LOAD over the notes; sections: null, .shstrtab, .note.
        let names = b"\0.shstrtab\0.note\0";
        let mut notes = note(7, b"hexrpc\0", &[1, 2, 3, 4, 5]);
        notes.extend(note(9, b"", b""));
        let data_at = 52 + 32 + 3 * 40;
        let notes_at = data_at + names.len() as u32;
        let mut tail = names.to_vec();
        tail.extend_from_slice(&notes);
        let img = image(
            &[[PT_LOAD, notes_at, 0x1000, 0x1000, notes.len() as u32, 0x2000, 5, 0x1000]],
            &[
                [0; 10],
                [1, SHT_STRTAB, 0, 0, data_at, names.len() as u32, 0, 0, 1, 0],
                [11, SHT_NOTE, SHF_ALLOC, 0, notes_at, notes.len() as u32, 0, 0, 4, 0],
            ],
            &tail,
            1,
        );
        let elf = Elf::parse(&img).unwrap();
        assert_eq!(elf.machine(), EM_HEXAGON);
        assert_eq!(elf.elf_type(), ET_DYN);
        assert_eq!(elf.program_headers().len(), 1);
        assert_eq!(elf.segment_bytes(&elf.program_headers()[0]).unwrap(), &notes[..]);
        let s = elf.section_headers();
        assert_eq!(s.len(), 3);
        assert_eq!(elf.section_name(&s[2]).unwrap(), b".note");
        assert_eq!(elf.section_name(&s[1]).unwrap(), b".shstrtab");
        let got: Vec<_> = elf.section_notes().collect();
        assert_eq!(got, [Ok(Note { kind: 7, name: b"hexrpc", desc: &[1, 2, 3, 4, 5] }), Ok(Note { kind: 9, name: b"", desc: b"" })]);
        assert_eq!(Elf::header_of(&img[..52]).unwrap().e_machine.get(), EM_HEXAGON);
        assert_eq!(machine_of(&img[..20]), Ok(EM_HEXAGON));
        assert_eq!(machine_of(&img[..19]), Err(ElfError::Truncated));
        let mut elf64_be = img[..20].to_vec();
        elf64_be[4] = 2;
        elf64_be[5] = ELFDATA2MSB;
        elf64_be[18..20].copy_from_slice(&62u16.to_be_bytes());
        assert_eq!(machine_of(&elf64_be), Ok(62));
        assert_eq!(machine_of(&[0; 20]), Err(ElfError::NotElf));
    }

    #[test]
    fn refuses_bad_identification() {
        assert_eq!(Elf::parse(b"\x7fELF").unwrap_err(), ElfError::Truncated);
        let mut img = image(&[], &[], &[], 0);
        assert!(Elf::parse(&img).is_ok());
        assert_eq!(Elf::parse(&img[..51]).unwrap_err(), ElfError::Truncated);
        img[4] = 2; // ELFCLASS64
        assert_eq!(Elf::parse(&img).unwrap_err(), ElfError::NotElf32Le);
        img[4] = 1;
        img[5] = 2; // big-endian
        assert_eq!(Elf::parse(&img).unwrap_err(), ElfError::NotElf32Le);
        img[0] = 0;
        assert_eq!(Elf::parse(&img).unwrap_err(), ElfError::NotElf);
    }

    #[test]
    fn refuses_tables_outside_the_image() {
        let img = image(&[[PT_LOAD, 0, 0, 0, 52, 52, 4, 4]], &[[0; 10]], &[], 0);
        assert!(Elf::parse(&img).is_ok());
        // Truncated inside the section table, and inside the program header table.
        assert_eq!(Elf::parse(&img[..img.len() - 1]).unwrap_err(), ElfError::OutOfBounds);
        assert_eq!(Elf::parse(&img[..60]).unwrap_err(), ElfError::OutOfBounds);
        // e_phoff near u32::MAX: the end does not wrap around.
        let mut far = img.clone();
        far[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Elf::parse(&far).unwrap_err(), ElfError::OutOfBounds);
        // Wrong entry size.
        let mut bad = img.clone();
        bad[42..44].copy_from_slice(&33u16.to_le_bytes());
        assert_eq!(Elf::parse(&bad).unwrap_err(), ElfError::BadEntrySize);
        // Extended numbering.
        let mut x = img.clone();
        x[44..46].copy_from_slice(&PN_XNUM.to_le_bytes());
        assert_eq!(Elf::parse(&x).unwrap_err(), ElfError::ExtendedNumbering);
        let mut x = img;
        x[48..50].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(Elf::parse(&x).unwrap_err(), ElfError::ExtendedNumbering);
    }

    #[test]
    fn segments_sections_and_strings_are_bounds_checked() {
        let img = image(
            &[[PT_LOAD, u32::MAX, 0, 0, 2, 2, 4, 4], [PT_DYNAMIC, 0, 0, 0, 17, 17, 4, 4]],
            &[
                [0; 10],
                [0, SHT_STRTAB, 0, 0, 100, u32::MAX, 0, 0, 1, 0],
                [0, SHT_NOBITS, 0, 0, u32::MAX, u32::MAX, 0, 0, 1, 0],
                [0, SHT_DYNSYM, 0, 0, 0, 32, 9, 0, 4, 16],
            ],
            &[],
            1,
        );
        let elf = Elf::parse(&img).unwrap();
        let (p, s) = (elf.program_headers(), elf.section_headers());
        assert_eq!(elf.segment_bytes(&p[0]).unwrap_err(), ElfError::OutOfBounds);
        assert_eq!(elf.dynamic(&p[1]).unwrap().len(), 2);
        assert_eq!(elf.section_bytes(&s[1]).unwrap_err(), ElfError::OutOfBounds);
        assert_eq!(elf.section_bytes(&s[2]).unwrap(), b"");
        assert_eq!(elf.section_name(&s[3]).unwrap_err(), ElfError::OutOfBounds);
        assert_eq!(elf.symbols(&s[3]).unwrap_err(), ElfError::NoSuchSection);
        assert_eq!(elf.section(u32::MAX).unwrap_err(), ElfError::NoSuchSection);
        assert_eq!(string_at(b"ab\0cd", 0), Ok(&b"ab"[..]));
        assert_eq!(string_at(b"ab\0cd", 3), Err(ElfError::BadString));
        assert_eq!(string_at(b"ab\0cd", 6), Err(ElfError::OutOfBounds));
        assert_eq!(string_at(b"ab\0cd", u32::MAX), Err(ElfError::OutOfBounds));
    }

    #[test]
    fn hostile_notes_end_with_an_error() {
        // Name and descriptor sizes that overflow when padded or added.
        for (namesz, descsz) in [(u32::MAX, 0), (0, u32::MAX), (u32::MAX - 2, 4), (8, 1)] {
            let mut n = Vec::new();
            for w in [namesz, descsz, 1] {
                n.extend_from_slice(&w.to_le_bytes());
            }
            n.extend_from_slice(b"abcd");
            let mut it = Notes::new(&n);
            assert_eq!(it.next(), Some(Err(ElfError::BadNote)), "{namesz} {descsz}");
            assert_eq!(it.next(), None);
        }
        // A descriptor cut short, and a trailing fragment shorter than a header (ignored).
        let full = note(3, b"ab\0", &[9; 6]);
        assert_eq!(Notes::new(&full[..full.len() - 4]).next(), Some(Err(ElfError::BadNote)));
        let mut padded = full.clone();
        padded.extend_from_slice(&[0; 11]);
        assert_eq!(Notes::new(&padded).count(), 1);
        // The final descriptor's padding may be missing.
        assert_eq!(Notes::new(&full[..full.len() - 2]).collect::<Vec<_>>(), [Ok(Note { kind: 3, name: b"ab", desc: &[9; 6] })]);
        // Every prefix of a valid area reads without panicking.
        let mut two = note(1, b"x\0", b"abcdefgh");
        two.extend(note(2, b"yz\0", b"q"));
        for cut in 0..=two.len() {
            let _ = Notes::new(&two[..cut]).count();
        }
    }

    #[test]
    fn every_prefix_of_an_image_is_handled() {
        let names = b"\0.s\0";
        let tail: Vec<u8> = names.iter().copied().chain(note(1, b"n\0", b"d")).collect();
        let at = 52 + 32 + 2 * 40;
        let img = image(&[[PT_NOTE, at + 4, 0, 0, 20, 20, 4, 4]], &[[0; 10], [1, SHT_STRTAB, 0, 0, at, 4, 0, 0, 1, 0]], &tail, 1);
        for cut in 0..=img.len() {
            if let Ok(elf) = Elf::parse(&img[..cut]) {
                for p in elf.program_headers() {
                    if let Ok(b) = elf.segment_bytes(p) {
                        let _ = Notes::new(b).count();
                    }
                }
                for s in elf.section_headers() {
                    let _ = elf.section_name(s);
                }
                let _ = elf.section_notes().count();
            }
        }
        let elf = Elf::parse(&img).unwrap();
        let seg = elf.segment_bytes(&elf.program_headers()[0]).unwrap();
        assert_eq!(Notes::new(seg).collect::<Vec<_>>(), [Ok(Note { kind: 1, name: b"n", desc: b"d" })]);
    }
}
