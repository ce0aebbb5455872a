//! Scalar kernel parameters: their types ([`ScalarType`], the dtypes a signature names) and typed
//! scalar arguments ([`Scalar`]) with their slot encoding.

use core::fmt;

/// The type of a scalar kernel parameter (the dtypes a tinygrad kernel signature uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ScalarType {
    /// `signed char`.
    I8,
    /// `unsigned char`.
    U8,
    /// `short`.
    I16,
    /// `unsigned short`.
    U16,
    /// `int`.
    I32,
    /// `unsigned int`.
    U32,
    /// `long long`.
    I64,
    /// `unsigned long long`.
    U64,
    /// IEEE binary16, carried and handed to the kernel as its bits (`unsigned short`).
    F16,
    /// `float`.
    F32,
    /// `double`.
    F64,
}

impl ScalarType {
    /// Every scalar type, in declaration order.
    pub const ALL: [ScalarType; 11] = [
        ScalarType::I8,
        ScalarType::U8,
        ScalarType::I16,
        ScalarType::U16,
        ScalarType::I32,
        ScalarType::U32,
        ScalarType::I64,
        ScalarType::U64,
        ScalarType::F16,
        ScalarType::F32,
        ScalarType::F64,
    ];

    /// Size of the value in bytes (its slot is always 8).
    pub const fn size(self) -> usize {
        match self {
            ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 | ScalarType::F16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    /// The name in a signature string.
    pub const fn name(self) -> &'static str {
        match self {
            ScalarType::I8 => "i8",
            ScalarType::U8 => "u8",
            ScalarType::I16 => "i16",
            ScalarType::U16 => "u16",
            ScalarType::I32 => "i32",
            ScalarType::U32 => "u32",
            ScalarType::I64 => "i64",
            ScalarType::U64 => "u64",
            ScalarType::F16 => "f16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }

    /// The C type the generated entry hands to the kernel (same on Hexagon and the host:
    /// `int` is 32 bits and `long long` 64 bits on both).
    pub const fn c_type(self) -> &'static str {
        match self {
            ScalarType::I8 => "signed char",
            ScalarType::U8 => "unsigned char",
            ScalarType::I16 => "short",
            ScalarType::U16 | ScalarType::F16 => "unsigned short",
            ScalarType::I32 => "int",
            ScalarType::U32 => "unsigned int",
            ScalarType::I64 => "long long",
            ScalarType::U64 => "unsigned long long",
            ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    /// True for `f32` and `f64` (decoded from bits in the entry).
    pub const fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// True for the signed integer types.
    pub const fn is_signed_int(self) -> bool {
        matches!(self, ScalarType::I8 | ScalarType::I16 | ScalarType::I32 | ScalarType::I64)
    }

    /// Parses a signature name (`"i32"`).
    pub fn from_name(s: &str) -> Option<ScalarType> {
        ScalarType::ALL.into_iter().find(|t| t.name() == s)
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scalar kernel argument. Its slot in pra 0 holds the value's little-endian bytes at offset 0
/// and zeros after them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Scalar {
    /// `i8`.
    I8(i8),
    /// `u8`.
    U8(u8),
    /// `i16`.
    I16(i16),
    /// `u16`.
    U16(u16),
    /// `i32`.
    I32(i32),
    /// `u32`.
    U32(u32),
    /// `i64`.
    I64(i64),
    /// `u64`.
    U64(u64),
    /// IEEE binary16, as its bits.
    F16(u16),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
}

impl Scalar {
    /// The scalar's type.
    pub const fn ty(&self) -> ScalarType {
        match self {
            Scalar::I8(_) => ScalarType::I8,
            Scalar::U8(_) => ScalarType::U8,
            Scalar::I16(_) => ScalarType::I16,
            Scalar::U16(_) => ScalarType::U16,
            Scalar::I32(_) => ScalarType::I32,
            Scalar::U32(_) => ScalarType::U32,
            Scalar::I64(_) => ScalarType::I64,
            Scalar::U64(_) => ScalarType::U64,
            Scalar::F16(_) => ScalarType::F16,
            Scalar::F32(_) => ScalarType::F32,
            Scalar::F64(_) => ScalarType::F64,
        }
    }

    /// The raw bits, zero-extended to 64 (what the slot holds, read as a little-endian u64).
    pub const fn bits(&self) -> u64 {
        match *self {
            Scalar::I8(v) => v as u8 as u64,
            Scalar::U8(v) => v as u64,
            Scalar::I16(v) => v as u16 as u64,
            Scalar::U16(v) | Scalar::F16(v) => v as u64,
            Scalar::I32(v) => v as u32 as u64,
            Scalar::U32(v) => v as u64,
            Scalar::I64(v) => v as u64,
            Scalar::U64(v) => v,
            Scalar::F32(v) => v.to_bits() as u64,
            Scalar::F64(v) => v.to_bits(),
        }
    }

    /// The 8-byte slot image.
    pub const fn to_le_bytes(&self) -> [u8; 8] {
        self.bits().to_le_bytes()
    }

    /// Decodes a slot image as type `ty` (bytes past the type's width are ignored).
    pub const fn from_le_bytes(ty: ScalarType, slot: [u8; 8]) -> Scalar {
        let w = u64::from_le_bytes(slot);
        match ty {
            ScalarType::I8 => Scalar::I8(w as u8 as i8),
            ScalarType::U8 => Scalar::U8(w as u8),
            ScalarType::I16 => Scalar::I16(w as u16 as i16),
            ScalarType::U16 => Scalar::U16(w as u16),
            ScalarType::I32 => Scalar::I32(w as u32 as i32),
            ScalarType::U32 => Scalar::U32(w as u32),
            ScalarType::I64 => Scalar::I64(w as i64),
            ScalarType::U64 => Scalar::U64(w),
            ScalarType::F16 => Scalar::F16(w as u16),
            ScalarType::F32 => Scalar::F32(f32::from_bits(w as u32)),
            ScalarType::F64 => Scalar::F64(f64::from_bits(w)),
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::I8(v) => write!(f, "{v}i8"),
            Scalar::U8(v) => write!(f, "{v}u8"),
            Scalar::I16(v) => write!(f, "{v}i16"),
            Scalar::U16(v) => write!(f, "{v}u16"),
            Scalar::I32(v) => write!(f, "{v}i32"),
            Scalar::U32(v) => write!(f, "{v}u32"),
            Scalar::I64(v) => write!(f, "{v}i64"),
            Scalar::U64(v) => write!(f, "{v}u64"),
            Scalar::F16(v) => write!(f, "{v:#06x}f16"),
            Scalar::F32(v) => write!(f, "{v}f32"),
            Scalar::F64(v) => write!(f, "{v}f64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_images_round_trip() {
        let all = [
            Scalar::I8(-2),
            Scalar::U8(250),
            Scalar::I16(-300),
            Scalar::U16(65000),
            Scalar::I32(-7),
            Scalar::U32(0xdead_beef),
            Scalar::I64(-1),
            Scalar::U64(u64::MAX - 1),
            Scalar::F16(0x3c00),
            Scalar::F32(1.5),
            Scalar::F64(-0.25),
        ];
        for s in all {
            let b = s.to_le_bytes();
            assert!(b[s.ty().size()..].iter().all(|&x| x == 0), "{s}: bytes past the width must be zero");
            assert_eq!(Scalar::from_le_bytes(s.ty(), b), s);
        }
        assert_eq!(Scalar::I8(-2).to_le_bytes(), [0xfe, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Scalar::F32(1.0).bits(), 0x3f80_0000);
    }
}
