//! AEE error codes, the DSP framework's error numbering (Qualcomm `AEEStdErr.h`).
//!
//! Host-side code uses the bare numbers (`AEE_EOFFSET` = 0 on the host); code running on the DSP
//! adds [`DSP_AEE_EOFFSET`] (0x80000400). Both forms reach the host: the reverse file service
//! answers with the bare numbers, and DSP-originated results may carry the offset. [`name`] and
//! [`strip_offset`] accept both. Codes 39, 46 and 104 are the same number on both sides.
//!
//! Note that 104 is both `AEE_ECONNRESET` and (bare) `AEE_ENORPCMEMORY`; the downstream driver
//! overwrites a call's result with 104 after a DSP restart, so as an ioctl result 104 means
//! "restart".

/// Offset DSP-side code adds to every AEE code except 39, 46, 104 and 516.
pub const DSP_AEE_EOFFSET: u32 = 0x8000_0400;

macro_rules! aee {
    ($($name:ident = $val:literal, $text:literal;)*) => {
        $(
            #[doc = $text]
            pub const $name: i32 = $val;
        )*

        /// The symbolic name of an AEE code (bare or DSP-offset form).
        pub const fn name(code: i32) -> Option<&'static str> {
            match strip_offset(code) {
                $($val => Some(stringify!($name)),)*
                _ => None,
            }
        }

        /// The description of an AEE code (bare or DSP-offset form).
        pub const fn description(code: i32) -> Option<&'static str> {
            match strip_offset(code) {
                $($val => Some($text),)*
                _ => None,
            }
        }
    };
}

aee! {
    AEE_EFAILED = 0x01, "general failure";
    AEE_ENOMEMORY = 0x02, "out of memory on the DSP";
    AEE_EUNABLETOLOAD = 0x06, "unable to load the object";
    AEE_EBADSTATE = 0x0D, "process or thread is not in the expected state";
    AEE_EBADPARM = 0x0E, "invalid parameter";
    AEE_EBADITEM = 0x10, "value out of range";
    AEE_EINVALIDFORMAT = 0x11, "invalid format";
    AEE_EUNSUPPORTED = 0x14, "not supported";
    AEE_EPRIVLEVEL = 0x15, "insufficient privileges";
    AEE_ERESOURCENOTFOUND = 0x16, "resource not found";
    AEE_EBUFFERTOOSMALL = 0x26, "destination buffer too small";
    AEE_ENOSUCH = 39, "no such name (driver: SMMU faults were recorded for this session)";
    AEE_ENOTALLOWED = 0x2B, "operation not allowed";
    AEE_EINVHANDLE = 0x2C, "invalid handle";
    AEE_EOUTOFHANDLES = 0x2D, "out of handles";
    AEE_EINTERRUPTED = 46, "the wait was interrupted; return to the host and retry";
    AEE_ENOMORE = 0x2F, "no more items";
    AEE_ECPUEXCEPTION = 0x30, "a CPU exception occurred on the DSP";
    AEE_EREADONLY = 0x31, "read-only object";
    AEE_ENOSUCHMOD = 0x3E, "no such module";
    AEE_ENOSUCHSYMBOL = 0x42, "no such symbol";
    AEE_ENOSUCHFILE = 0x45, "no such file";
    AEE_ENOSUCHHANDLE = 0x46, "no such handle";
    AEE_ENOSUCHMAP = 0x48, "no mapping for this address on the DSP";
    AEE_EBADOFFSET = 0x4C, "bad buffer/page/heap offset";
    AEE_EBADSIZE = 0x4D, "bad buffer/page/heap size";
    AEE_EBADPERMS = 0x4E, "bad file/map/memory permissions";
    AEE_EBADFD = 0x4F, "bad file descriptor";
    AEE_EBADELF = 0x52, "bad ELF file";
    AEE_EFOPEN = 0x57, "file open failed";
    AEE_EEOF = 0x5B, "end of file";
    AEE_EFREAD = 0x5C, "file read failed";
    AEE_EFSEEK = 0x61, "file seek failed";
    AEE_EMMAP = 0x65, "mmap failed";
    AEE_ECONNRESET = 104, "connection reset: the DSP restarted (bare AEE_ENORPCMEMORY has the same number)";
    AEE_EWOULDBLOCK = 516, "operation would block";
}

/// Removes [`DSP_AEE_EOFFSET`] from a DSP-side code; other values are returned unchanged.
pub const fn strip_offset(code: i32) -> i32 {
    let u = code as u32;
    if u > DSP_AEE_EOFFSET && u < DSP_AEE_EOFFSET + 0x400 {
        (u - DSP_AEE_EOFFSET) as i32
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_decode() {
        assert_eq!(name(AEE_EBADPARM), Some("AEE_EBADPARM"));
        assert_eq!(name((DSP_AEE_EOFFSET + 0x0D) as i32), Some("AEE_EBADSTATE"));
        assert_eq!(strip_offset(0x8000_040D_u32 as i32), 0x0D);
        assert_eq!(name(104), Some("AEE_ECONNRESET"));
        assert_eq!(name(12345), None);
        assert_eq!(AEE_EUNSUPPORTED, 0x14);
        assert_eq!(AEE_ENOSUCHMOD, 0x3E);
        assert_eq!(AEE_EBADSIZE, 0x4D);
    }
}
