//! [`StructLayout`], [`AbiLayout`] and the [`abi_layout!`](crate::abi_layout) macro every ABI
//! struct is declared with (re-exported by [`layout`](super)).

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
