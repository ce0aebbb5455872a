//! Kernel signatures: which parameters a kernel takes, buffers first, then scalars.
//!
//! # Grammar (as accepted by [`Signature::parse`])
//!
//! ```text
//! signature := "" | param ( "," param )*
//! param     := ws* kind ws*            (ws = space or tab)
//! kind      := "buf"
//!            | "i8" | "u8" | "i16" | "u16" | "i32" | "u32" | "i64" | "u64"
//!            | "f16" | "f32" | "f64"
//! ```
//!
//! Every `buf` must come before every scalar (tinygrad numbers pra 0 slots, pra 1 entries and
//! handles by *parameter* index, which is only right while buffers come first); at most
//! [`MAX_BUFFERS`] buffers and [`Signature::MAX_PARAMS`] parameters. Example: `"buf,buf,buf,i32,f32"`.

use core::fmt;

use super::abi::MAX_BUFFERS;
use super::scalar::ScalarType;

/// One kernel parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ParamKind {
    /// A buffer view: the kernel receives a pointer.
    Buffer,
    /// A scalar value.
    Scalar(ScalarType),
}

impl fmt::Display for ParamKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamKind::Buffer => f.write_str("buf"),
            ParamKind::Scalar(t) => f.write_str(t.name()),
        }
    }
}

/// Why a signature was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SignatureError {
    /// Parameter `index` is a buffer that follows a scalar (buffers must come first).
    BufferAfterScalar {
        /// Index of the offending buffer parameter.
        index: usize,
    },
    /// More than [`MAX_BUFFERS`] buffers.
    TooManyBuffers,
    /// More than [`Signature::MAX_PARAMS`] parameters.
    TooManyParams,
    /// Parameter `index` is empty (`"buf,,i32"`, a trailing comma).
    EmptyParam {
        /// Index of the empty parameter.
        index: usize,
    },
    /// Parameter `index` names no known kind.
    UnknownKind {
        /// Index of the unknown parameter.
        index: usize,
    },
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::BufferAfterScalar { index } => {
                write!(f, "parameter {index} is a buffer after a scalar: buffers must come first")
            }
            SignatureError::TooManyBuffers => write!(f, "more than {MAX_BUFFERS} buffers"),
            SignatureError::TooManyParams => write!(f, "more than {} parameters", Signature::MAX_PARAMS),
            SignatureError::EmptyParam { index } => write!(f, "parameter {index} is empty"),
            SignatureError::UnknownKind { index } => {
                write!(f, "parameter {index} is not one of buf, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64")
            }
        }
    }
}

impl core::error::Error for SignatureError {}

/// A kernel signature: up to [`MAX_BUFFERS`] buffers followed by scalars, in fixed capacity.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    params: [ParamKind; Signature::MAX_PARAMS],
    len: u8,
    buffers: u8,
}

impl Signature {
    /// Most parameters a signature can hold.
    pub const MAX_PARAMS: usize = 64;

    /// The signature of these parameters.
    pub fn new(params: &[ParamKind]) -> Result<Signature, SignatureError> {
        let mut sig = Signature { params: [ParamKind::Buffer; Signature::MAX_PARAMS], len: 0, buffers: 0 };
        for &p in params {
            sig.push(p)?;
        }
        Ok(sig)
    }

    fn push(&mut self, p: ParamKind) -> Result<(), SignatureError> {
        let index = self.len as usize;
        if index >= Signature::MAX_PARAMS {
            return Err(SignatureError::TooManyParams);
        }
        if p == ParamKind::Buffer {
            if index != self.buffers as usize {
                return Err(SignatureError::BufferAfterScalar { index });
            }
            if self.buffers as usize >= MAX_BUFFERS {
                return Err(SignatureError::TooManyBuffers);
            }
            self.buffers += 1;
        }
        self.params[index] = p;
        self.len += 1;
        Ok(())
    }

    /// Parses the text form (see the module docs for the grammar).
    pub fn parse(text: &str) -> Result<Signature, SignatureError> {
        let mut sig = Signature::new(&[])?;
        if text.trim_matches([' ', '\t']).is_empty() {
            return Ok(sig);
        }
        for (index, part) in text.split(',').enumerate() {
            let word = part.trim_matches([' ', '\t']);
            let kind = match word {
                "" => return Err(SignatureError::EmptyParam { index }),
                "buf" => ParamKind::Buffer,
                other => ParamKind::Scalar(ScalarType::from_name(other).ok_or(SignatureError::UnknownKind { index })?),
            };
            sig.push(kind)?;
        }
        Ok(sig)
    }

    /// All parameters, in order.
    pub fn params(&self) -> &[ParamKind] {
        &self.params[..self.len as usize]
    }
    /// Number of buffer parameters (they come first).
    pub fn buffers(&self) -> usize {
        self.buffers as usize
    }
    /// Number of scalar parameters.
    pub fn scalars(&self) -> usize {
        self.len as usize - self.buffers as usize
    }
    /// The type of scalar parameter `j` (counting scalars only).
    pub fn scalar_type(&self, j: usize) -> Option<ScalarType> {
        match self.params().get(self.buffers() + j) {
            Some(ParamKind::Scalar(t)) => Some(*t),
            _ => None,
        }
    }
    /// The scalar parameters' types, in order.
    pub fn scalar_types(&self) -> impl Iterator<Item = ScalarType> + '_ {
        // Buffers come first (`push` refuses a buffer after a scalar): only the tail is scanned.
        self.params()[self.buffers()..].iter().filter_map(|p| match p {
            ParamKind::Scalar(t) => Some(*t),
            ParamKind::Buffer => None,
        })
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.params().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature(\"{self}\")")
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn parses_and_prints() {
        let s = Signature::parse(" buf, buf,buf ,i32,\tf32").unwrap();
        assert_eq!((s.buffers(), s.scalars()), (3, 2));
        assert_eq!(s.scalar_type(0), Some(ScalarType::I32));
        assert_eq!(s.scalar_type(1), Some(ScalarType::F32));
        assert_eq!(s.scalar_type(2), None);
        assert_eq!(s.to_string(), "buf,buf,buf,i32,f32");
        assert_eq!(Signature::parse("").unwrap().params(), &[]);
        assert_eq!(Signature::parse("  ").unwrap().params(), &[]);
        for t in ScalarType::ALL {
            assert_eq!(Signature::parse(t.name()).unwrap().params(), &[ParamKind::Scalar(t)]);
        }
    }

    #[test]
    fn refuses_with_typed_errors() {
        assert_eq!(Signature::parse("buf,i32,buf"), Err(SignatureError::BufferAfterScalar { index: 2 }));
        assert_eq!(Signature::parse("buf,,i32"), Err(SignatureError::EmptyParam { index: 1 }));
        assert_eq!(Signature::parse("buf,"), Err(SignatureError::EmptyParam { index: 1 }));
        assert_eq!(Signature::parse("buf,int"), Err(SignatureError::UnknownKind { index: 1 }));
        assert_eq!(Signature::parse("BUF"), Err(SignatureError::UnknownKind { index: 0 }));
        let sixteen = [ParamKind::Buffer; 16];
        assert_eq!(Signature::new(&sixteen[..15]).unwrap().buffers(), 15);
        assert_eq!(Signature::new(&sixteen), Err(SignatureError::TooManyBuffers));
        let many = [ParamKind::Scalar(ScalarType::U8); Signature::MAX_PARAMS + 1];
        assert_eq!(Signature::new(&many[..Signature::MAX_PARAMS]).unwrap().scalars(), Signature::MAX_PARAMS);
        assert_eq!(Signature::new(&many), Err(SignatureError::TooManyParams));
    }
}
