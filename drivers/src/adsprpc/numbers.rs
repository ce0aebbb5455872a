//! Every request as a raw number, computed from its typed declaration in [`ioctl`], and the table
//! of them by kernel name, for code that decodes requests.

use super::ioctl;

/// `FASTRPC_IOCTL_INVOKE` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE: u32 = ioctl::FASTRPC_IOCTL_INVOKE.raw();
/// `FASTRPC_IOCTL_MMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MMAP: u32 = ioctl::FASTRPC_IOCTL_MMAP.raw();
/// `FASTRPC_IOCTL_MUNMAP` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP: u32 = ioctl::FASTRPC_IOCTL_MUNMAP.raw();
/// `FASTRPC_IOCTL_INVOKE_FD` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_FD`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_FD: u32 = ioctl::FASTRPC_IOCTL_INVOKE_FD.raw();
/// `FASTRPC_IOCTL_SETMODE` as a raw number ([`ioctl::FASTRPC_IOCTL_SETMODE`]), for code that decodes requests.
pub const FASTRPC_IOCTL_SETMODE: u32 = ioctl::FASTRPC_IOCTL_SETMODE.raw();
/// `FASTRPC_IOCTL_INIT` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT: u32 = ioctl::FASTRPC_IOCTL_INIT.raw();
/// `FASTRPC_IOCTL_INVOKE_ATTRS` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_ATTRS`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_ATTRS: u32 = ioctl::FASTRPC_IOCTL_INVOKE_ATTRS.raw();
/// `FASTRPC_IOCTL_GETINFO` as a raw number ([`ioctl::FASTRPC_IOCTL_GETINFO`]), for code that decodes requests.
pub const FASTRPC_IOCTL_GETINFO: u32 = ioctl::FASTRPC_IOCTL_GETINFO.raw();
/// `FASTRPC_IOCTL_GETPERF` as a raw number ([`ioctl::FASTRPC_IOCTL_GETPERF`]), for code that decodes requests.
pub const FASTRPC_IOCTL_GETPERF: u32 = ioctl::FASTRPC_IOCTL_GETPERF.raw();
/// `FASTRPC_IOCTL_INIT_ATTRS` as a raw number ([`ioctl::FASTRPC_IOCTL_INIT_ATTRS`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INIT_ATTRS: u32 = ioctl::FASTRPC_IOCTL_INIT_ATTRS.raw();
/// `FASTRPC_IOCTL_INVOKE_CRC` as a raw number ([`ioctl::FASTRPC_IOCTL_INVOKE_CRC`]), for code that decodes requests.
pub const FASTRPC_IOCTL_INVOKE_CRC: u32 = ioctl::FASTRPC_IOCTL_INVOKE_CRC.raw();
/// `FASTRPC_IOCTL_CONTROL` as a raw number ([`ioctl::FASTRPC_IOCTL_CONTROL`]), for code that decodes requests.
pub const FASTRPC_IOCTL_CONTROL: u32 = ioctl::FASTRPC_IOCTL_CONTROL.raw();
/// `FASTRPC_IOCTL_MUNMAP_FD` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP_FD`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP_FD: u32 = ioctl::FASTRPC_IOCTL_MUNMAP_FD.raw();
/// `FASTRPC_IOCTL_MMAP_64` as a raw number ([`ioctl::FASTRPC_IOCTL_MMAP_64`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MMAP_64: u32 = ioctl::FASTRPC_IOCTL_MMAP_64.raw();
/// `FASTRPC_IOCTL_MUNMAP_64` as a raw number ([`ioctl::FASTRPC_IOCTL_MUNMAP_64`]), for code that decodes requests.
pub const FASTRPC_IOCTL_MUNMAP_64: u32 = ioctl::FASTRPC_IOCTL_MUNMAP_64.raw();

/// Every FastRPC request number, by kernel name.
pub const IOCTLS: &[(&str, u32)] = &[
    ("FASTRPC_IOCTL_INVOKE", FASTRPC_IOCTL_INVOKE),
    ("FASTRPC_IOCTL_MMAP", FASTRPC_IOCTL_MMAP),
    ("FASTRPC_IOCTL_MUNMAP", FASTRPC_IOCTL_MUNMAP),
    ("FASTRPC_IOCTL_INVOKE_FD", FASTRPC_IOCTL_INVOKE_FD),
    ("FASTRPC_IOCTL_SETMODE", FASTRPC_IOCTL_SETMODE),
    ("FASTRPC_IOCTL_INIT", FASTRPC_IOCTL_INIT),
    ("FASTRPC_IOCTL_INVOKE_ATTRS", FASTRPC_IOCTL_INVOKE_ATTRS),
    ("FASTRPC_IOCTL_GETINFO", FASTRPC_IOCTL_GETINFO),
    ("FASTRPC_IOCTL_GETPERF", FASTRPC_IOCTL_GETPERF),
    ("FASTRPC_IOCTL_INIT_ATTRS", FASTRPC_IOCTL_INIT_ATTRS),
    ("FASTRPC_IOCTL_INVOKE_CRC", FASTRPC_IOCTL_INVOKE_CRC),
    ("FASTRPC_IOCTL_CONTROL", FASTRPC_IOCTL_CONTROL),
    ("FASTRPC_IOCTL_MUNMAP_FD", FASTRPC_IOCTL_MUNMAP_FD),
    ("FASTRPC_IOCTL_MMAP_64", FASTRPC_IOCTL_MMAP_64),
    ("FASTRPC_IOCTL_MUNMAP_64", FASTRPC_IOCTL_MUNMAP_64),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers of the kernel header for aarch64 (kernel-abi.md 2.2).
    #[test]
    fn request_numbers_match_the_headers() {
        let expected: &[(&str, u32)] = &[
            ("FASTRPC_IOCTL_INVOKE", 0xC010_5201),
            ("FASTRPC_IOCTL_MMAP", 0xC020_5202),
            ("FASTRPC_IOCTL_MUNMAP", 0xC010_5203),
            ("FASTRPC_IOCTL_INVOKE_FD", 0xC018_5204),
            ("FASTRPC_IOCTL_SETMODE", 0xC004_5205),
            ("FASTRPC_IOCTL_INIT", 0xC028_5206),
            ("FASTRPC_IOCTL_INVOKE_ATTRS", 0xC020_5207),
            ("FASTRPC_IOCTL_GETINFO", 0xC004_5208),
            ("FASTRPC_IOCTL_GETPERF", 0xC018_5209),
            ("FASTRPC_IOCTL_INIT_ATTRS", 0xC030_520A),
            ("FASTRPC_IOCTL_INVOKE_CRC", 0xC028_520B),
            ("FASTRPC_IOCTL_CONTROL", 0xC00C_520C),
            ("FASTRPC_IOCTL_MUNMAP_FD", 0xC018_520D),
            ("FASTRPC_IOCTL_MMAP_64", 0xC020_520E),
            ("FASTRPC_IOCTL_MUNMAP_64", 0xC010_520F),
        ];
        assert_eq!(IOCTLS, expected);
    }
}
