//! The bytes of a library image as a session hands them to its
//! [`ImageRegistry`](crate::ImageRegistry): borrowed for the whole program, or (feature `std`) shared and owned.

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "std")]
use std::{boxed::Box, sync::Arc, vec::Vec};

/// A library image: the ELF bytes the DSP fetches back through the reverse file service.
///
/// The registry keeps the image for as long as the library is open (recovery re-opens it by
/// name, and a file the DSP still holds open keeps reading it), so the bytes are either
/// `'static` or owned here. Cloning shares the bytes; it never copies them.
///
/// * `&'static [u8]` (an `include_bytes!`) converts without a copy.
/// * With `std`: `Vec<u8>`, `Box<[u8]>` and `Arc<[u8]>` move in without a copy;
///   [`LibraryImage::copy_of`] copies a borrowed slice once, when the library is opened.
#[derive(Clone)]
pub enum LibraryImage {
    /// Bytes that live for the whole program.
    Static(&'static [u8]),
    /// Bytes owned by this image and every clone of it (feature `std`).
    #[cfg(feature = "std")]
    Shared(Arc<[u8]>),
}

impl LibraryImage {
    /// The image's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            LibraryImage::Static(b) => b,
            #[cfg(feature = "std")]
            LibraryImage::Shared(b) => b,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// True for an empty image (which no DSP will load).
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// An owned copy of borrowed bytes (one allocation, when the library is opened; never on
    /// the launch path).
    #[cfg(feature = "std")]
    pub fn copy_of(bytes: &[u8]) -> LibraryImage {
        LibraryImage::Shared(Arc::from(bytes))
    }
}

impl From<&'static [u8]> for LibraryImage {
    fn from(b: &'static [u8]) -> Self {
        LibraryImage::Static(b)
    }
}

impl<const N: usize> From<&'static [u8; N]> for LibraryImage {
    fn from(b: &'static [u8; N]) -> Self {
        LibraryImage::Static(b)
    }
}

#[cfg(feature = "std")]
impl From<Arc<[u8]>> for LibraryImage {
    fn from(b: Arc<[u8]>) -> Self {
        LibraryImage::Shared(b)
    }
}

#[cfg(feature = "std")]
impl From<Vec<u8>> for LibraryImage {
    fn from(b: Vec<u8>) -> Self {
        LibraryImage::Shared(Arc::from(b))
    }
}

#[cfg(feature = "std")]
impl From<Box<[u8]>> for LibraryImage {
    fn from(b: Box<[u8]>) -> Self {
        LibraryImage::Shared(Arc::from(b))
    }
}

impl core::fmt::Debug for LibraryImage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let kind = match self {
            LibraryImage::Static(_) => "static",
            #[cfg(feature = "std")]
            LibraryImage::Shared(_) => "shared",
        };
        f.debug_struct("LibraryImage").field("kind", &kind).field("len", &self.len()).finish()
    }
}
