//! Layout descriptions of the ABI structs, checked at compile time and listed at run time.
//!
//! Every ABI struct is declared with [`abi_layout!`](crate::abi_layout), which asserts its size,
//! alignment and every field offset against the numbers from the kernel header (a wrong layout
//! fails the build), and registers a [`StructLayout`] so that `hexrpc abi` can print what this
//! build believes, for an engineer to compare with the device's headers.

/// One ABI struct as this build lays it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StructLayout {
    /// The C name (`fastrpc_ioctl_invoke_attrs`).
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `alignof`.
    pub align: usize,
    /// `(field, offsetof)` for every named field of the C header, in declaration order
    /// (padding fields are not listed; the size covers them).
    pub fields: &'static [(&'static str, usize)],
}

/// A type whose layout is described and asserted by [`abi_layout!`](crate::abi_layout).
pub trait AbiLayout {
    /// The layout of this type.
    const LAYOUT: StructLayout;
}

/// Declares the expected layout of an ABI struct: fails the build if size, alignment or any
/// listed field offset differs, and implements [`AbiLayout`] for it.
///
/// A member of an anonymous C union that Rust stores in one field is listed as
/// `member @ offset = field`: its offset is asserted against that field's, and the listing names
/// it, so every member of the union is listed, not only the one Rust declares.
#[macro_export]
macro_rules! abi_layout {
    ($ty:ty, $cname:literal, size = $size:literal, align = $align:literal, { $($field:ident @ $off:literal $(= $store:ident)?),* $(,)? }) => {
        $crate::__private::static_assertions::const_assert_eq!(::core::mem::size_of::<$ty>(), $size);
        $crate::__private::static_assertions::const_assert_eq!(::core::mem::align_of::<$ty>(), $align);
        $( $crate::__private::static_assertions::const_assert_eq!($crate::__abi_offset!($ty, $field $(, $store)?), $off); )*
        impl $crate::layout::AbiLayout for $ty {
            const LAYOUT: $crate::layout::StructLayout = $crate::layout::StructLayout {
                name: $cname,
                size: ::core::mem::size_of::<$ty>(),
                align: ::core::mem::align_of::<$ty>(),
                fields: &[$((stringify!($field), $crate::__abi_offset!($ty, $field $(, $store)?))),*],
            };
        }
    };
}

/// The offset of a listed member: the field itself, or the field that stores it.
#[doc(hidden)]
#[macro_export]
macro_rules! __abi_offset {
    ($ty:ty, $field:ident) => {
        ::core::mem::offset_of!($ty, $field)
    };
    ($ty:ty, $member:ident, $store:ident) => {
        ::core::mem::offset_of!($ty, $store)
    };
}

/// Every ABI struct of this crate, for `hexrpc abi`.
pub const STRUCTS: &[StructLayout] = {
    use crate::adsprpc::*;
    use crate::apps_std::*;
    use crate::dma_heap::*;
    use crate::dsp::*;
    use crate::ion::*;
    use crate::listener::*;
    use crate::upstream::*;
    &[
        ion_allocation_data::LAYOUT,
        ion_fd_data::LAYOUT,
        ion_handle_data::LAYOUT,
        ion_custom_data::LAYOUT,
        ion_flush_data::LAYOUT,
        remote_buf::LAYOUT,
        remote_dma_handle::LAYOUT,
        remote_arg::LAYOUT,
        remote_buf64::LAYOUT,
        remote_dma_handle64::LAYOUT,
        remote_arg64::LAYOUT,
        fastrpc_ioctl_invoke::LAYOUT,
        fastrpc_ioctl_invoke_fd::LAYOUT,
        fastrpc_ioctl_invoke_attrs::LAYOUT,
        fastrpc_ioctl_invoke_crc::LAYOUT,
        fastrpc_ioctl_init::LAYOUT,
        fastrpc_ioctl_init_attrs::LAYOUT,
        fastrpc_ioctl_mmap::LAYOUT,
        fastrpc_ioctl_mmap_64::LAYOUT,
        fastrpc_ioctl_munmap::LAYOUT,
        fastrpc_ioctl_munmap_64::LAYOUT,
        fastrpc_ioctl_munmap_fd::LAYOUT,
        fastrpc_ioctl_perf::LAYOUT,
        fastrpc_ioctl_control::LAYOUT,
        fastrpc_ctrl_latency::LAYOUT,
        fastrpc_ctrl_smmu::LAYOUT,
        fastrpc_ctrl_kalloc::LAYOUT,
        remote_buf32::LAYOUT,
        remote_dma_handle32::LAYOUT,
        remote_arg32::LAYOUT,
        apps_std_STAT::LAYOUT,
        listener_next2_in::LAYOUT,
        listener_next2_out::LAYOUT,
        listener_get_in_bufs2_in::LAYOUT,
        dma_heap_allocation_data::LAYOUT,
        dma_buf_sync::LAYOUT,
        fastrpc_invoke_args::LAYOUT,
        fastrpc_invoke::LAYOUT,
        fastrpc_init_create::LAYOUT,
        fastrpc_init_create_static::LAYOUT,
        fastrpc_alloc_dma_buf::LAYOUT,
        fastrpc_req_mmap::LAYOUT,
        fastrpc_mem_map::LAYOUT,
        fastrpc_req_munmap::LAYOUT,
        fastrpc_mem_unmap::LAYOUT,
        fastrpc_ioctl_capability::LAYOUT,
    ]
};
