//! The `#[repr(C)]` structs of `adsprpc_shared.h`: the user-side argument entries
//! (`remote_arg`), their kernel-to-DSP wire form (`remote_arg64`) and the argument structs of
//! every request, each with its compile-time layout assertions.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::abi_layout;

/// `struct remote_buf`: a user buffer argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_buf {
    /// `void *pv`: the buffer's address.
    pub pv: u64,
    /// `size_t len`: its length in bytes.
    pub len: u64,
}
abi_layout!(remote_buf, "remote_buf", size = 16, align = 8, { pv @ 0, len @ 8 });

/// `struct remote_dma_handle`: a dma-buf handle argument.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_dma_handle {
    /// The dma-buf fd.
    pub fd: i32,
    /// Offset into the buffer.
    pub offset: u32,
}
abi_layout!(remote_dma_handle, "remote_dma_handle", size = 8, align = 4, { fd @ 0, offset @ 4 });

/// `union remote_arg`: one entry of a call's argument array (16 bytes on LP64).
///
/// The fields are private so that every value has all 16 bytes initialized: build one with
/// [`remote_arg::from_buf`], [`remote_arg::from_dma`] or [`remote_arg::from_h`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
pub union remote_arg {
    buf: remote_buf,
    dma: remote_dma_handle,
    h: u32,
}
abi_layout!(remote_arg, "remote_arg", size = 16, align = 8, { buf @ 0, dma @ 0, h @ 0 });

impl remote_arg {
    /// A buffer entry.
    pub const fn from_buf(buf: remote_buf) -> remote_arg {
        remote_arg { buf }
    }
    /// A dma handle entry; bytes 8..16 are zero.
    pub const fn from_dma(dma: remote_dma_handle) -> remote_arg {
        let pv = (dma.fd as u32 as u64) | ((dma.offset as u64) << 32);
        remote_arg { buf: remote_buf { pv, len: 0 } }
    }
    /// A handle-value entry (`h`); bytes 4..16 are zero.
    pub const fn from_h(h: u32) -> remote_arg {
        remote_arg { buf: remote_buf { pv: h as u64, len: 0 } }
    }
    /// The entry read as a buffer.
    pub const fn buf(&self) -> remote_buf {
        // SAFETY: every constructor writes all 16 bytes through `buf` (and `FromBytes` reads
        // produce initialized bytes), and `remote_buf` is valid for any bytes.
        unsafe { self.buf }
    }
    /// The entry read as a dma handle (its first 8 bytes).
    pub const fn dma(&self) -> remote_dma_handle {
        // SAFETY: the first 8 bytes are always initialized (see `buf`), and any bytes are a
        // valid `remote_dma_handle`.
        unsafe { self.dma }
    }
    /// The entry read as a handle value (its first 4 bytes).
    pub const fn h(&self) -> u32 {
        // SAFETY: the first 4 bytes are always initialized, and any bytes are a valid u32.
        unsafe { self.h }
    }
}

impl Default for remote_arg {
    fn default() -> Self {
        remote_arg::from_buf(remote_buf::default())
    }
}

impl core::fmt::Debug for remote_arg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.buf();
        write!(f, "remote_arg {{ pv: {:#x}, len: {} }}", b.pv, b.len)
    }
}

/// `struct remote_buf64`: a buffer entry of the kernel-to-DSP wire format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_buf64 {
    /// Address as the DSP sees it.
    pub pv: u64,
    /// Length in bytes.
    pub len: u64,
}
abi_layout!(remote_buf64, "remote_buf64", size = 16, align = 8, { pv @ 0, len @ 8 });

/// `struct remote_dma_handle64`: a handle entry of the kernel-to-DSP wire format.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct remote_dma_handle64 {
    /// The dma-buf fd.
    pub fd: i32,
    /// Offset (the low 32 bits of the user entry's `pv`).
    pub offset: u32,
    /// Length (the user entry's `len`, truncated to 32 bits).
    pub len: u32,
}
abi_layout!(remote_dma_handle64, "remote_dma_handle64", size = 12, align = 4, { fd @ 0, offset @ 4, len @ 8 });

/// `union remote_arg64`: one entry of the argument array the kernel ships to the DSP.
///
/// Fields private for the same reason as [`remote_arg`].
#[repr(C)]
#[derive(Clone, Copy, FromBytes, KnownLayout, Immutable)]
pub union remote_arg64 {
    buf: remote_buf64,
    dma: remote_dma_handle64,
    h: u32,
}
abi_layout!(remote_arg64, "remote_arg64", size = 16, align = 8, { buf @ 0, dma @ 0, h @ 0 });

impl remote_arg64 {
    /// A buffer entry.
    pub const fn from_buf(buf: remote_buf64) -> remote_arg64 {
        remote_arg64 { buf }
    }
    /// A dma handle entry; bytes 12..16 are zero.
    pub const fn from_dma(dma: remote_dma_handle64) -> remote_arg64 {
        let pv = (dma.fd as u32 as u64) | ((dma.offset as u64) << 32);
        remote_arg64 { buf: remote_buf64 { pv, len: dma.len as u64 } }
    }
    /// The entry read as a buffer.
    pub const fn buf(&self) -> remote_buf64 {
        // SAFETY: all 16 bytes are initialized by every constructor; any bytes are valid.
        unsafe { self.buf }
    }
    /// The entry read as a dma handle.
    pub const fn dma(&self) -> remote_dma_handle64 {
        // SAFETY: the first 12 bytes are always initialized; any bytes are valid.
        unsafe { self.dma }
    }
}

impl Default for remote_arg64 {
    fn default() -> Self {
        remote_arg64::from_buf(remote_buf64::default())
    }
}

impl core::fmt::Debug for remote_arg64 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.buf();
        write!(f, "remote_arg64 {{ pv: {:#x}, len: {} }}", b.pv, b.len)
    }
}

/// `struct fastrpc_ioctl_invoke`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke {
    /// Remote handle.
    pub handle: u32,
    /// Scalars word.
    pub sc: u32,
    /// `remote_arg *pra`: LENGTH(sc) entries.
    pub pra: u64,
}
abi_layout!(fastrpc_ioctl_invoke, "fastrpc_ioctl_invoke", size = 16, align = 8, { handle @ 0, sc @ 4, pra @ 8 });

/// `struct fastrpc_ioctl_invoke_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_fd {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`: LENGTH(sc) entries (0 and -1 mean "no fd").
    pub fds: u64,
}
abi_layout!(fastrpc_ioctl_invoke_fd, "fastrpc_ioctl_invoke_fd", size = 24, align = 8, { inv @ 0, fds @ 16 });

/// `struct fastrpc_ioctl_invoke_attrs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_attrs {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`.
    pub fds: u64,
    /// `unsigned *attrs`: LENGTH(sc) entries of `FASTRPC_ATTR_*`.
    pub attrs: u64,
}
abi_layout!(fastrpc_ioctl_invoke_attrs, "fastrpc_ioctl_invoke_attrs", size = 32, align = 8, { inv @ 0, fds @ 16, attrs @ 24 });

/// `struct fastrpc_ioctl_invoke_crc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_invoke_crc {
    /// The plain invoke.
    pub inv: fastrpc_ioctl_invoke,
    /// `int *fds`.
    pub fds: u64,
    /// `unsigned *attrs`.
    pub attrs: u64,
    /// `unsigned *crc`: 64 entries written back on success.
    pub crc: u64,
}
abi_layout!(fastrpc_ioctl_invoke_crc, "fastrpc_ioctl_invoke_crc", size = 40, align = 8, { inv @ 0, fds @ 16, attrs @ 24, crc @ 32 });

/// `struct fastrpc_ioctl_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_init {
    /// `FASTRPC_INIT_*`.
    pub flags: u32,
    /// Padding before the 8-byte-aligned `file`.
    pub _pad0: u32,
    /// `uintptr_t file`: address of the shell ELF (in a mapping of `filefd`).
    pub file: u64,
    /// Length of the shell (< 2 MiB).
    pub filelen: u32,
    /// ION fd whose mapping holds `file`.
    pub filefd: i32,
    /// `uintptr_t mem`: must be 0 for CREATE on this kernel.
    pub mem: u64,
    /// Memory length (< 8 MiB; ignored for CREATE).
    pub memlen: u32,
    /// Memory fd (ignored for CREATE).
    pub memfd: i32,
}
abi_layout!(fastrpc_ioctl_init, "fastrpc_ioctl_init", size = 40, align = 8, { flags @ 0, file @ 8, filelen @ 16, filefd @ 20, mem @ 24, memlen @ 32, memfd @ 36 });

/// `struct fastrpc_ioctl_init_attrs`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_init_attrs {
    /// The plain init.
    pub init: fastrpc_ioctl_init,
    /// Process attributes.
    pub attrs: i32,
    /// Signature length.
    pub siglen: u32,
}
abi_layout!(fastrpc_ioctl_init_attrs, "fastrpc_ioctl_init_attrs", size = 48, align = 8, { init @ 0, attrs @ 40, siglen @ 44 });

/// `struct fastrpc_ioctl_mmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_mmap {
    /// ION fd to map (or -1 with `ADSP_MMAP_ADD_PAGES`).
    pub fd: i32,
    /// `ADSP_MMAP_*` flags.
    pub flags: u32,
    /// `uintptr_t vaddrin`: host address of the buffer (0 for kernel-allocated pages).
    pub vaddrin: u64,
    /// `size_t size`.
    pub size: u64,
    /// `uintptr_t vaddrout`: out, the DSP address.
    pub vaddrout: u64,
}
abi_layout!(fastrpc_ioctl_mmap, "fastrpc_ioctl_mmap", size = 32, align = 8, { fd @ 0, flags @ 4, vaddrin @ 8, size @ 16, vaddrout @ 24 });

/// `struct fastrpc_ioctl_mmap_64` (same layout as [`fastrpc_ioctl_mmap`] on LP64).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_mmap_64 {
    /// ION fd.
    pub fd: i32,
    /// `ADSP_MMAP_*` flags.
    pub flags: u32,
    /// `uint64_t vaddrin`.
    pub vaddrin: u64,
    /// `size_t size`.
    pub size: u64,
    /// `uint64_t vaddrout` (out).
    pub vaddrout: u64,
}
abi_layout!(fastrpc_ioctl_mmap_64, "fastrpc_ioctl_mmap_64", size = 32, align = 8, { fd @ 0, flags @ 4, vaddrin @ 8, size @ 16, vaddrout @ 24 });

/// `struct fastrpc_ioctl_munmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap {
    /// `uintptr_t vaddrout`: the DSP address from MMAP.
    pub vaddrout: u64,
    /// `size_t size`.
    pub size: u64,
}
abi_layout!(fastrpc_ioctl_munmap, "fastrpc_ioctl_munmap", size = 16, align = 8, { vaddrout @ 0, size @ 8 });

/// `struct fastrpc_ioctl_munmap_64`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap_64 {
    /// `uint64_t vaddrout`.
    pub vaddrout: u64,
    /// `size_t size`.
    pub size: u64,
}
abi_layout!(fastrpc_ioctl_munmap_64, "fastrpc_ioctl_munmap_64", size = 16, align = 8, { vaddrout @ 0, size @ 8 });

/// `struct fastrpc_ioctl_munmap_fd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_munmap_fd {
    /// The fd whose map is released.
    pub fd: i32,
    /// Unused by this driver.
    pub flags: u32,
    /// `uintptr_t va`.
    pub va: u64,
    /// `ssize_t len`.
    pub len: i64,
}
abi_layout!(fastrpc_ioctl_munmap_fd, "fastrpc_ioctl_munmap_fd", size = 24, align = 8, { fd @ 0, flags @ 4, va @ 8, len @ 16 });

/// `struct fastrpc_ioctl_perf`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_perf {
    /// `uintptr_t data`: 12 x i64 of counters (written if non-zero).
    pub data: u64,
    /// Out: the number of keys.
    pub numkeys: u32,
    /// Padding before the 8-byte-aligned `keys`.
    pub _pad0: u32,
    /// `uintptr_t keys`: the key names, `:`-separated (written if non-zero).
    pub keys: u64,
}
abi_layout!(fastrpc_ioctl_perf, "fastrpc_ioctl_perf", size = 24, align = 8, { data @ 0, numkeys @ 8, keys @ 16 });

/// `struct fastrpc_ctrl_latency`, the largest member of `fastrpc_ioctl_control`'s anonymous
/// union; `fastrpc_ctrl_smmu.sharedcb` and `fastrpc_ctrl_kalloc.kalloc_support` alias `enable`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_latency {
    /// Enable (LATENCY) / `sharedcb` (SMMU) / `kalloc_support` (KALLOC, out).
    pub enable: u32,
    /// Latency in microseconds (LATENCY).
    pub level: u32,
}
abi_layout!(fastrpc_ctrl_latency, "fastrpc_ctrl_latency", size = 8, align = 4, { enable @ 0, level @ 4 });

/// `struct fastrpc_ctrl_smmu`: the SMMU member of `fastrpc_ioctl_control`'s union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_smmu {
    /// Share one context bank between sessions.
    pub sharedcb: u32,
}
abi_layout!(fastrpc_ctrl_smmu, "fastrpc_ctrl_smmu", size = 4, align = 4, { sharedcb @ 0 });

/// `struct fastrpc_ctrl_kalloc`: the KALLOC member of `fastrpc_ioctl_control`'s union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ctrl_kalloc {
    /// Out: whether the kernel allocates memory for the process.
    pub kalloc_support: u32,
}
abi_layout!(fastrpc_ctrl_kalloc, "fastrpc_ctrl_kalloc", size = 4, align = 4, { kalloc_support @ 0 });

/// `struct fastrpc_ioctl_control`.
///
/// The C struct's anonymous union `{ lp, smmu, kalloc }` is stored as its largest member, `lp`;
/// `smmu` ([`fastrpc_ctrl_smmu`]) and `kalloc` ([`fastrpc_ctrl_kalloc`]) are the first 4 bytes
/// of it, and the layout listing names all three at offset 4.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct fastrpc_ioctl_control {
    /// `FASTRPC_CONTROL_*`.
    pub req: u32,
    /// The anonymous union `{ lp, smmu, kalloc }`, as its largest member.
    pub lp: fastrpc_ctrl_latency,
}
abi_layout!(fastrpc_ioctl_control, "fastrpc_ioctl_control", size = 12, align = 4, { req @ 0, lp @ 4, smmu @ 4 = lp, kalloc @ 4 = lp });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_arg_views_share_bytes() {
        let a = remote_arg::from_dma(remote_dma_handle { fd: 7, offset: 0x1000 });
        assert_eq!(a.buf(), remote_buf { pv: 0x0000_1000_0000_0007, len: 0 });
        assert_eq!(a.h(), 7);
        assert_eq!(a.dma(), remote_dma_handle { fd: 7, offset: 0x1000 });
        let w = remote_arg64::from_dma(remote_dma_handle64 { fd: -1, offset: 3, len: 9 });
        assert_eq!(w.dma(), remote_dma_handle64 { fd: -1, offset: 3, len: 9 });
    }
}
