//! The DSP-side (Hexagon, 32-bit) view of the argument array.
//!
//! The kernel ships 64-bit records ([`remote_arg64`](crate::adsprpc::remote_arg64)) to the DSP;
//! the DSP framework presents library entry points with the 32-bit `remote_arg` of a Hexagon
//! build: 8 bytes, `{void *pv; unsigned len}` or `{int fd; unsigned offset}`. Generated DSP C is
//! written against this view (`sizeof(remote_arg) == 8` with `clang --target=hexagon`), and the
//! bench's DSP model builds it from the 64-bit records.
//!
//! Where the translation happens is not in any kernel source read (kernel-abi.md 2.8): this view
//! is what tinygrad's working entries read, not a documented interface.
#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::abi_layout;

/// `struct remote_buf` as compiled for Hexagon (32-bit pointers).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_buf32 {
    /// `void *pv` (a 32-bit DSP address).
    pub pv: u32,
    /// `unsigned len`.
    pub len: u32,
}
abi_layout!(remote_buf32, "remote_buf32", size = 8, align = 4, { pv @ 0, len @ 4 });

/// `struct remote_dma_handle` as compiled for Hexagon.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_dma_handle32 {
    /// The fd the DSP passes to `HAP_mmap`.
    pub fd: i32,
    /// `unsigned offset`.
    pub offset: u32,
}
abi_layout!(remote_dma_handle32, "remote_dma_handle32", size = 8, align = 4, { fd @ 0, offset @ 4 });

/// `union remote_arg` as compiled for Hexagon (8 bytes). Both members cover all 8 bytes, so it is
/// represented by its buffer member; [`remote_arg32::dma`] reinterprets it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_arg32 {
    /// The `buf` member.
    pub buf: remote_buf32,
}
abi_layout!(remote_arg32, "remote_arg32", size = 8, align = 4, { buf @ 0 });

impl remote_arg32 {
    /// The `dma` member.
    pub const fn dma(&self) -> remote_dma_handle32 {
        remote_dma_handle32 { fd: self.buf.pv as i32, offset: self.buf.len }
    }
    /// An entry holding the `dma` member.
    pub const fn from_dma(dma: remote_dma_handle32) -> remote_arg32 {
        remote_arg32 { buf: remote_buf32 { pv: dma.fd as u32, len: dma.offset } }
    }
}
