//! What the build step reads back from its output (header, sections, program headers and
//! dynamic symbols), through the one checked ELF32 reader, `hexrpc_drivers::elf`.

pub use hexrpc_drivers::elf::ElfError;
use hexrpc_drivers::elf::{Elf, SHF_ALLOC, SHT_DYNSYM};

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

fn c_name(strtab: &[u8], at: u32) -> Result<String, ElfError> {
    hexrpc_drivers::elf::string_at(strtab, at).map(|n| String::from_utf8_lossy(n).into_owned())
}

/// Parses an ELF32 little-endian file's header, sections, program headers and dynamic symbols
/// with the checked reader of `hexrpc_drivers::elf` (the bytes are not trusted), into what the
/// build step checks.
pub fn parse_elf(bytes: &[u8]) -> Result<ElfSummary, ElfError> {
    let elf = Elf::parse(bytes)?;
    let mut sections = Vec::new();
    let (mut exports, mut imports, mut weak_imports) = (Vec::new(), Vec::new(), Vec::new());
    for s in elf.section_headers() {
        sections.push(SectionInfo {
            name: String::from_utf8_lossy(elf.section_name(s)?).into_owned(),
            addr: s.sh_addr.get().into(),
            size: s.sh_size.get().into(),
            align: s.sh_addralign.get().into(),
            alloc: s.sh_flags.get() & SHF_ALLOC != 0,
        });
        if s.sh_type.get() == SHT_DYNSYM {
            let (syms, strtab) = elf.symbols(s)?;
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
    let segments = elf
        .program_headers()
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
    Ok(ElfSummary { machine: elf.machine(), elf_type: elf.elf_type(), sections, segments, exports, imports, weak_imports })
}

/// `SHT_SYMTAB`: the static symbol table of a relocatable object.
const SHT_SYMTAB: u32 = 2;

/// The undefined global (and weak) symbols of a relocatable object's `.symtab`: what the object
/// needs from the rest of the link.
pub fn object_undefined(bytes: &[u8]) -> Result<Vec<String>, ElfError> {
    let elf = Elf::parse(bytes)?;
    let mut out = Vec::new();
    for s in elf.section_headers().iter().filter(|s| s.sh_type.get() == SHT_SYMTAB) {
        let (syms, strtab) = elf.symbols(s)?;
        for sym in syms.iter().skip(1).filter(|sym| sym.st_shndx.get() == 0 && sym.st_info >> 4 != 0) {
            out.push(c_name(strtab, sym.st_name.get())?);
        }
    }
    Ok(out)
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
        assert_eq!(parse_elf(&h), Err(ElfError::OutOfBounds));
        h[46] = 39;
        assert_eq!(parse_elf(&h), Err(ElfError::BadEntrySize));
    }
}
