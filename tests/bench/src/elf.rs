//! Hexagon ELF images: a builder for test images and the check the simulated DSP applies.
//!
//! The DSP model only looks at the ELF header (magic, 32-bit class, little-endian, `e_machine`
//! 164 = `EM_QDSP6`); it does not parse program headers or relocate anything. A real loader does
//! far more, so a header that passes here is not proof that a real DSP would load the image.

pub use hexrpc_drivers::elf::EM_HEXAGON;
use hexrpc_drivers::elf::{self as raw, Elf, Elf32Ehdr};

/// Size of an ELF32 header: shorter images are refused.
pub const ELF32_HEADER_LEN: usize = core::mem::size_of::<Elf32Ehdr>();

/// Why an image is not a Hexagon ELF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// Fewer than [`ELF32_HEADER_LEN`] bytes.
    Short(usize),
    /// The first four bytes are not `\x7fELF`.
    NotElf,
    /// Not a 32-bit little-endian image.
    WrongClass,
    /// `e_machine` is not [`EM_HEXAGON`].
    WrongMachine(u16),
}

impl core::fmt::Display for ElfError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ElfError::Short(n) => write!(f, "image too short for an ELF header ({n} bytes)"),
            ElfError::NotElf => write!(f, "not an ELF image"),
            ElfError::WrongClass => write!(f, "not a 32-bit little-endian ELF"),
            ElfError::WrongMachine(m) => write!(f, "e_machine {m} is not Hexagon ({EM_HEXAGON})"),
        }
    }
}

impl std::error::Error for ElfError {}

/// Checks the ELF header the way the DSP model does.
pub fn check_hexagon_elf(image: &[u8]) -> Result<(), ElfError> {
    let header = Elf::header_of(image).map_err(|e| match e {
        raw::ElfError::NotElf => ElfError::NotElf,
        raw::ElfError::NotElf32Le => ElfError::WrongClass,
        _ => ElfError::Short(image.len()),
    })?;
    match header.e_machine.get() {
        EM_HEXAGON => Ok(()),
        machine => Err(ElfError::WrongMachine(machine)),
    }
}

/// A `len`-byte ELF32 shared object header for `machine`, followed by a deterministic filler.
/// `len` below the header size yields a truncated header (for negative tests).
pub fn elf_image(machine: u16, len: usize) -> Vec<u8> {
    let mut h = [0u8; ELF32_HEADER_LEN];
    h[0..4].copy_from_slice(b"\x7fELF");
    h[4] = raw::ELFCLASS32;
    h[5] = raw::ELFDATA2LSB;
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&raw::ET_DYN.to_le_bytes());
    h[18..20].copy_from_slice(&machine.to_le_bytes());
    h[20..24].copy_from_slice(&1u32.to_le_bytes()); // e_version
    h[40..42].copy_from_slice(&(ELF32_HEADER_LEN as u16).to_le_bytes()); // e_ehsize
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&h[..len.min(ELF32_HEADER_LEN)]);
    let mut x: u32 = 0x9E37_79B9 ^ len as u32;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        out.push(x as u8);
    }
    out
}

/// A `len`-byte Hexagon ELF image (header plus filler), as a DSP shell or a library.
pub fn hexagon_elf(len: usize) -> Vec<u8> {
    elf_image(EM_HEXAGON, len)
}

/// The marker that names, inside a library image, which registered [`LibraryModel`](crate::LibraryModel)
/// (crate::LibraryModel) stands for its code.
pub const MODEL_TAG: &[u8] = b"HXBENCH-MODEL:";

/// A `len`-byte Hexagon library image whose code is the registered model `model`: on a real DSP
/// the code comes from the image itself, so the bench's DSP finds the model from the image it
/// fetched (the tag follows the ELF header), whatever name the host published it under.
/// `len` grows to fit the tag.
pub fn library_image(model: &str, len: usize) -> Vec<u8> {
    let mut img = hexagon_elf(len.max(ELF32_HEADER_LEN + MODEL_TAG.len() + model.len() + 1));
    let at = ELF32_HEADER_LEN;
    img[at..at + MODEL_TAG.len()].copy_from_slice(MODEL_TAG);
    let name_at = at + MODEL_TAG.len();
    img[name_at..name_at + model.len()].copy_from_slice(model.as_bytes());
    img[name_at + model.len()] = 0;
    img
}

/// The model name a [`library_image`] carries, if any.
pub fn model_tag(image: &[u8]) -> Option<&str> {
    let rest = image.get(ELF32_HEADER_LEN..)?.strip_prefix(MODEL_TAG)?;
    let end = rest.iter().take(256).position(|&b| b == 0)?;
    core::str::from_utf8(&rest[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_and_check_agree() {
        assert_eq!(check_hexagon_elf(&hexagon_elf(4096)), Ok(()));
        assert_eq!(hexagon_elf(100).len(), 100);
        assert_eq!(check_hexagon_elf(&hexagon_elf(40)), Err(ElfError::Short(40)));
        assert_eq!(check_hexagon_elf(&elf_image(183, 64)), Err(ElfError::WrongMachine(183)));
        assert_eq!(check_hexagon_elf(&[0u8; 64]), Err(ElfError::NotElf));
        let mut img = hexagon_elf(64);
        img[4] = 2;
        assert_eq!(check_hexagon_elf(&img), Err(ElfError::WrongClass));
        let lib = library_image("scale", 100);
        assert_eq!(check_hexagon_elf(&lib), Ok(()));
        assert_eq!(model_tag(&lib), Some("scale"));
        assert_eq!(model_tag(&hexagon_elf(4096)), None);
    }
}
