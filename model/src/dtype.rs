//! Element types of a model's inputs and outputs.

/// An element type, numbered as the file stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// One byte, 0 or 1.
    Bool = 1,
    /// `uint8_t`.
    U8 = 2,
    /// `int8_t`.
    I8 = 3,
    /// `uint16_t`.
    U16 = 4,
    /// `int16_t`.
    I16 = 5,
    /// `uint32_t`.
    U32 = 6,
    /// `int32_t`.
    I32 = 7,
    /// `uint64_t`.
    U64 = 8,
    /// `int64_t`.
    I64 = 9,
    /// IEEE 754 binary16.
    F16 = 10,
    /// IEEE 754 binary32.
    F32 = 11,
    /// IEEE 754 binary64.
    F64 = 12,
}

/// Every dtype, in number order.
pub const DTYPES: [DType; 12] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::U16,
    DType::I16,
    DType::U32,
    DType::I32,
    DType::U64,
    DType::I64,
    DType::F16,
    DType::F32,
    DType::F64,
];

impl DType {
    /// The dtype numbered `n`.
    pub fn from_u32(n: u32) -> Option<DType> {
        DTYPES.iter().copied().find(|d| *d as u32 == n)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// Its name as numpy spells it (`uint8`, `float32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::U32 => "uint32",
            DType::I32 => "int32",
            DType::U64 => "uint64",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// The dtype numpy calls `name`.
    pub fn from_name(name: &str) -> Option<DType> {
        DTYPES.iter().copied().find(|d| d.name() == name)
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
