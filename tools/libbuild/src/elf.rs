//! The ELF32 little-endian reader the build step checks its output with: header, sections,
//! program headers and dynamic symbols, bounds-checked (the bytes are not trusted).

use core::fmt;

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, KnownLayout};

/// Why bytes could not be parsed as an ELF32 little-endian file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// Shorter than a header or a table it points to.
    Truncated,
    /// No `\x7fELF` magic.
    NotElf,
    /// Not ELFCLASS32 / ELFDATA2LSB.
    NotElf32Le,
    /// A section or symbol table entry size is not the ELF32 one.
    BadEntrySize,
    /// A name points outside its string table.
    BadName,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElfError::Truncated => "truncated",
            ElfError::NotElf => "no ELF magic",
            ElfError::NotElf32Le => "not 32-bit little-endian",
            ElfError::BadEntrySize => "unexpected table entry size",
            ElfError::BadName => "a name lies outside its string table",
        })
    }
}

impl core::error::Error for ElfError {}

/// One section of a parsed library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    /// Name.
    pub name: String,
    /// `sh_addr`.
    pub addr: u64,
    /// `sh_size`.
    pub size: u64,
    /// `sh_addralign`.
    pub align: u64,
    /// `SHF_ALLOC`.
    pub alloc: bool,
}

/// One program header of a parsed library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// `p_type` (1 = `PT_LOAD`).
    pub kind: u32,
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags`.
    pub flags: u32,
    /// `p_align`.
    pub align: u64,
}

/// What the build step reads back from a library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfSummary {
    /// `e_machine`.
    pub machine: u16,
    /// `e_type`.
    pub elf_type: u16,
    /// Every section.
    pub sections: Vec<SectionInfo>,
    /// Every program header.
    pub segments: Vec<SegmentInfo>,
    /// Defined global symbols of `.dynsym`.
    pub exports: Vec<String>,
    /// Undefined symbols of `.dynsym` (resolved by the DSP loader: `HAP_*`, libc).
    pub imports: Vec<String>,
    /// Undefined *weak* symbols of `.dynsym`: optional imports, 0 when the DSP does not provide
    /// them (the library tests for that), so they are never refused. The device test library
    /// declares the DSP C library's `fopen`/`fclose` so.
    pub weak_imports: Vec<String>,
}

#[repr(C)]
#[derive(FromBytes, KnownLayout, Immutable)]
struct Elf32Ehdr {
    e_ident: [u8; 16],
    e_type: U16,
    e_machine: U16,
    e_version: U32,
    e_entry: U32,
    e_phoff: U32,
    e_shoff: U32,
    e_flags: U32,
    e_ehsize: U16,
    e_phentsize: U16,
    e_phnum: U16,
    e_shentsize: U16,
    e_shnum: U16,
    e_shstrndx: U16,
}

#[repr(C)]
#[derive(FromBytes, KnownLayout, Immutable)]
struct Elf32Shdr {
    sh_name: U32,
    sh_type: U32,
    sh_flags: U32,
    sh_addr: U32,
    sh_offset: U32,
    sh_size: U32,
    sh_link: U32,
    sh_info: U32,
    sh_addralign: U32,
    sh_entsize: U32,
}

#[repr(C)]
#[derive(FromBytes, KnownLayout, Immutable)]
struct Elf32Phdr {
    p_type: U32,
    p_offset: U32,
    p_vaddr: U32,
    p_paddr: U32,
    p_filesz: U32,
    p_memsz: U32,
    p_flags: U32,
    p_align: U32,
}

#[repr(C)]
#[derive(FromBytes, KnownLayout, Immutable)]
struct Elf32Sym {
    st_name: U32,
    st_value: U32,
    st_size: U32,
    st_info: u8,
    st_other: u8,
    st_shndx: U16,
}

const _: () = {
    assert!(core::mem::size_of::<Elf32Ehdr>() == 52);
    assert!(core::mem::size_of::<Elf32Shdr>() == 40);
    assert!(core::mem::size_of::<Elf32Phdr>() == 32);
    assert!(core::mem::size_of::<Elf32Sym>() == 16);
};

const SHF_ALLOC: u32 = 2;
const SHT_DYNSYM: u32 = 11;

fn table<T: FromBytes + KnownLayout + Immutable>(bytes: &[u8], off: u32, count: u16, entsize: u16) -> Result<Vec<&T>, ElfError> {
    if count > 0 && entsize as usize != core::mem::size_of::<T>() {
        return Err(ElfError::BadEntrySize);
    }
    (0..count as usize)
        .map(|i| {
            let start = (off as usize).checked_add(i * core::mem::size_of::<T>()).ok_or(ElfError::Truncated)?;
            let b = bytes.get(start..).ok_or(ElfError::Truncated)?;
            T::ref_from_prefix(b).map(|(t, _)| t).map_err(|_| ElfError::Truncated)
        })
        .collect()
}

fn section_bytes<'b>(bytes: &'b [u8], s: &Elf32Shdr) -> Result<&'b [u8], ElfError> {
    let start = s.sh_offset.get() as usize;
    let end = start.checked_add(s.sh_size.get() as usize).ok_or(ElfError::Truncated)?;
    bytes.get(start..end).ok_or(ElfError::Truncated)
}

fn c_name(strtab: &[u8], at: u32) -> Result<String, ElfError> {
    let rest = strtab.get(at as usize..).ok_or(ElfError::BadName)?;
    let end = rest.iter().position(|&b| b == 0).ok_or(ElfError::BadName)?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Parses an ELF32 little-endian file's header, sections, program headers and dynamic symbols
/// (bounds-checked; the bytes are not trusted).
pub fn parse_elf(bytes: &[u8]) -> Result<ElfSummary, ElfError> {
    let (h, _) = Elf32Ehdr::ref_from_prefix(bytes).map_err(|_| ElfError::Truncated)?;
    if h.e_ident[..4] != *b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if h.e_ident[4] != 1 || h.e_ident[5] != 1 {
        return Err(ElfError::NotElf32Le);
    }
    let shdrs: Vec<&Elf32Shdr> = table(bytes, h.e_shoff.get(), h.e_shnum.get(), h.e_shentsize.get())?;
    let phdrs: Vec<&Elf32Phdr> = table(bytes, h.e_phoff.get(), h.e_phnum.get(), h.e_phentsize.get())?;
    let shstr = match shdrs.get(h.e_shstrndx.get() as usize) {
        Some(s) => section_bytes(bytes, s)?,
        None => &[],
    };
    let mut sections = Vec::new();
    let (mut exports, mut imports, mut weak_imports) = (Vec::new(), Vec::new(), Vec::new());
    for s in &shdrs {
        sections.push(SectionInfo {
            name: if shstr.is_empty() { String::new() } else { c_name(shstr, s.sh_name.get())? },
            addr: s.sh_addr.get().into(),
            size: s.sh_size.get().into(),
            align: s.sh_addralign.get().into(),
            alloc: s.sh_flags.get() & SHF_ALLOC != 0,
        });
        if s.sh_type.get() == SHT_DYNSYM {
            let strtab = section_bytes(bytes, shdrs.get(s.sh_link.get() as usize).ok_or(ElfError::Truncated)?)?;
            let count = u16::try_from(s.sh_size.get() / 16).map_err(|_| ElfError::Truncated)?;
            let syms: Vec<&Elf32Sym> = table(bytes, s.sh_offset.get(), count, s.sh_entsize.get() as u16)?;
            for sym in syms.iter().skip(1) {
                let name = c_name(strtab, sym.st_name.get())?;
                let bind = sym.st_info >> 4;
                if sym.st_shndx.get() == 0 && bind == 2 {
                    weak_imports.push(name);
                } else if sym.st_shndx.get() == 0 {
                    imports.push(name);
                } else if bind == 1 || bind == 2 {
                    exports.push(name);
                }
            }
        }
    }
    let segments = phdrs
        .iter()
        .map(|p| SegmentInfo {
            kind: p.p_type.get(),
            offset: p.p_offset.get().into(),
            vaddr: p.p_vaddr.get().into(),
            memsz: p.p_memsz.get().into(),
            flags: p.p_flags.get(),
            align: p.p_align.get().into(),
        })
        .collect();
    Ok(ElfSummary { machine: h.e_machine.get(), elf_type: h.e_type.get(), sections, segments, exports, imports, weak_imports })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_refuses_garbage() {
        assert_eq!(parse_elf(b"\x7fELF"), Err(ElfError::Truncated));
        assert_eq!(parse_elf(&[0u8; 64]), Err(ElfError::NotElf));
        let mut h = [0u8; 52];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = 1;
        assert_eq!(parse_elf(&h), Err(ElfError::NotElf32Le));
        h[4] = 1;
        // 1 section header at offset 52 but the file ends at 52.
        h[32] = 52;
        h[46] = 40;
        h[48] = 1;
        assert_eq!(parse_elf(&h), Err(ElfError::Truncated));
        h[46] = 39;
        assert_eq!(parse_elf(&h), Err(ElfError::BadEntrySize));
    }
}
