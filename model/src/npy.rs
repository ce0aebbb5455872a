//! numpy's `.npy` files (feature `std`): what a user hands a model run as an input and gets
//! back as an output. Versions 1.0, 2.0 and 3.0 of the format are read; the dtypes a model file
//! has ([`DType`]) are taken in either byte order (big-endian ones are swapped to the model's
//! little-endian), everything else is refused with a message that says what was found and what
//! is taken. Files are written as version 1.0, little-endian, C order.

use std::string::{String, ToString};
use std::vec::Vec;

use crate::dtype::{DType, DTYPES};

/// The first six bytes of a `.npy` file.
pub const NPY_MAGIC: &[u8; 6] = b"\x93NUMPY";

/// An array read from a `.npy` file: little-endian elements in C order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyArray {
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a scalar).
    pub shape: Vec<u64>,
    /// The elements' bytes, little-endian, C order.
    pub data: Vec<u8>,
}

/// Why a `.npy` file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NpyError {
    /// The file does not start with `\x93NUMPY`.
    NotNpy,
    /// A format version this reader does not know.
    Version(u8, u8),
    /// The file ends before its header or its data does.
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes there.
        have: u64,
    },
    /// The header is not the dictionary numpy writes (what is wrong, in words).
    Header(String),
    /// An element type a model file does not have.
    Dtype(String),
    /// Fortran (column-major) order.
    FortranOrder,
    /// The data's length is not the shape's element count times the element size.
    Length {
        /// Bytes of data after the header.
        have: u64,
        /// Bytes the shape and dtype make (`None`: the count overflows).
        want: Option<u64>,
    },
}

impl core::fmt::Display for NpyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NpyError::NotNpy => f.write_str("not a .npy file (it does not start with \\x93NUMPY)"),
            NpyError::Version(a, b) => write!(f, ".npy format version {a}.{b}: this reader takes 1.0, 2.0 and 3.0"),
            NpyError::Truncated { need, have } => write!(f, "the .npy file is cut short: {need} bytes needed, {have} there"),
            NpyError::Header(what) => write!(f, "the .npy header cannot be read: {what}"),
            NpyError::Dtype(descr) => write!(
                f,
                "dtype '{descr}' is not one a model takes (bool, uint8, int8, uint16, int16, uint32, int32, uint64, int64, \
                 float16, float32, float64)"
            ),
            NpyError::FortranOrder => {
                f.write_str("the array is in Fortran order: save it in C order (numpy.ascontiguousarray) and try again")
            }
            NpyError::Length { have, want: Some(want) } => {
                write!(f, "the .npy data has {have} bytes, its shape and dtype make {want}")
            }
            NpyError::Length { have, want: None } => write!(f, "the .npy shape's byte count overflows ({have} bytes of data)"),
        }
    }
}

impl std::error::Error for NpyError {}

/// numpy's type code of `dtype` without its byte order (`f4`, `u1`, `b1`, ...).
fn code(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "b1",
        DType::U8 => "u1",
        DType::I8 => "i1",
        DType::U16 => "u2",
        DType::I16 => "i2",
        DType::U32 => "u4",
        DType::I32 => "i4",
        DType::U64 => "u8",
        DType::I64 => "i8",
        DType::F16 => "f2",
        DType::F32 => "f4",
        DType::F64 => "f8",
    }
}

/// The dtype and whether it is big-endian, from a `descr` string.
fn parse_descr(descr: &str) -> Result<(DType, bool), NpyError> {
    let refused = || NpyError::Dtype(descr.to_string());
    let (order, rest) = match descr.as_bytes().first() {
        Some(b'<' | b'|' | b'=') => (false, &descr[1..]),
        Some(b'>') => (true, &descr[1..]),
        _ => (false, descr),
    };
    let dtype = DTYPES.iter().copied().find(|&d| code(d) == rest).ok_or_else(refused)?;
    // One-byte types have no byte order; '>' on them is harmless.
    Ok((dtype, order && dtype.size() > 1))
}

/// The value of `key` in numpy's header dictionary: the text after `'key':` up to the matching
/// end (a quoted string, a parenthesised tuple, or a word).
fn value<'h>(header: &'h str, key: &str) -> Result<&'h str, NpyError> {
    let missing = || NpyError::Header(std::format!("no '{key}' in the header"));
    let at = header.find(&std::format!("'{key}'")).ok_or_else(missing)?;
    let rest = header[at + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix(':').ok_or_else(missing)?.trim_start();
    let end = match rest.as_bytes().first() {
        Some(b'\'') => rest[1..].find('\'').map(|i| i + 2),
        Some(b'(') => rest.find(')').map(|i| i + 1),
        Some(_) => rest.find([',', '}']),
        None => None,
    };
    let end = end.ok_or_else(|| NpyError::Header(std::format!("'{key}' has no end")))?;
    Ok(&rest[..end])
}

/// Reads a `.npy` file.
pub fn read_npy(bytes: &[u8]) -> Result<NpyArray, NpyError> {
    let have = bytes.len() as u64;
    if bytes.len() < 8 {
        return if NPY_MAGIC.starts_with(bytes) || bytes.starts_with(NPY_MAGIC) {
            Err(NpyError::Truncated { need: 10, have })
        } else {
            Err(NpyError::NotNpy)
        };
    }
    if &bytes[..6] != NPY_MAGIC {
        return Err(NpyError::NotNpy);
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, utf8) = match (major, minor) {
        (1, 0) => (2, false),
        (2, 0) => (4, false),
        (3, 0) => (4, true),
        _ => return Err(NpyError::Version(major, minor)),
    };
    let start = 8 + len_bytes;
    if bytes.len() < start {
        return Err(NpyError::Truncated { need: start as u64, have });
    }
    let header_len = if len_bytes == 2 {
        u64::from(u16::from_le_bytes([bytes[8], bytes[9]]))
    } else {
        u64::from(u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]))
    };
    let data_at = start as u64 + header_len;
    if have < data_at {
        return Err(NpyError::Truncated { need: data_at, have });
    }
    let raw = &bytes[start..data_at as usize];
    let header = if utf8 { core::str::from_utf8(raw).ok() } else { raw.is_ascii().then(|| core::str::from_utf8(raw).ok()).flatten() };
    let header = header.ok_or_else(|| NpyError::Header("not text".into()))?.trim();
    if !header.starts_with('{') || !header.ends_with('}') {
        return Err(NpyError::Header("not a dictionary".into()));
    }
    let descr = value(header, "descr")?;
    let descr = descr.strip_prefix('\'').and_then(|d| d.strip_suffix('\'')).ok_or_else(|| NpyError::Dtype(descr.to_string()))?;
    let (dtype, big_endian) = parse_descr(descr)?;
    match value(header, "fortran_order")? {
        "False" => {}
        "True" => return Err(NpyError::FortranOrder),
        other => return Err(NpyError::Header(std::format!("fortran_order is {other}"))),
    }
    let shape_text = value(header, "shape")?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| NpyError::Header(std::format!("shape {shape_text} is not a tuple")))?;
    let mut shape = Vec::new();
    for dim in inner.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let dim = dim.strip_suffix('L').unwrap_or(dim);
        shape.push(dim.parse::<u64>().map_err(|_| NpyError::Header(std::format!("shape {shape_text} has '{dim}'")))?);
    }
    let want = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).and_then(|n| n.checked_mul(dtype.size() as u64));
    let data = &bytes[data_at as usize..];
    if want != Some(data.len() as u64) {
        return Err(NpyError::Length { have: data.len() as u64, want });
    }
    let mut data = data.to_vec();
    if big_endian {
        for element in data.chunks_exact_mut(dtype.size()) {
            element.reverse();
        }
    }
    Ok(NpyArray { dtype, shape, data })
}

/// Writes `data` (little-endian elements of `dtype` in C order, `shape`) as a `.npy` file,
/// version 1.0 (version 2.0 if the header would not fit 1.0's 65,535 bytes).
pub fn write_npy(dtype: DType, shape: &[u64], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let tuple = match dims.len() {
        1 => std::format!("({},)", dims[0]),
        _ => std::format!("({})", dims.join(", ")),
    };
    let order = if dtype.size() == 1 { '|' } else { '<' };
    let mut header = std::format!("{{'descr': '{order}{}', 'fortran_order': False, 'shape': {tuple}, }}", code(dtype));
    // The header (with its length field and the magic) ends on a multiple of 64, with '\n'; its
    // length, padding included, must fit version 1.0's u16.
    let v1 = header.len() + 64 <= usize::from(u16::MAX);
    let prefix = if v1 { 10 } else { 12 };
    while (prefix + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = Vec::with_capacity(prefix + header.len() + data.len());
    out.extend_from_slice(NPY_MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}
