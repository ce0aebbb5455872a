use super::consts::FASTRPC_IOCTL_MAGIC;
use super::structs::{
    fastrpc_ioctl_control, fastrpc_ioctl_init, fastrpc_ioctl_init_attrs, fastrpc_ioctl_invoke, fastrpc_ioctl_invoke_attrs,
    fastrpc_ioctl_invoke_crc, fastrpc_ioctl_invoke_fd, fastrpc_ioctl_mmap, fastrpc_ioctl_mmap_64, fastrpc_ioctl_munmap,
    fastrpc_ioctl_munmap_64, fastrpc_ioctl_munmap_fd, fastrpc_ioctl_perf,
};
use crate::ioc::Ioctl;

/// `FASTRPC_IOCTL_INVOKE`.
pub const FASTRPC_IOCTL_INVOKE: Ioctl<fastrpc_ioctl_invoke> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 1);
/// `FASTRPC_IOCTL_MMAP`.
pub const FASTRPC_IOCTL_MMAP: Ioctl<fastrpc_ioctl_mmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 2);
/// `FASTRPC_IOCTL_MUNMAP`.
pub const FASTRPC_IOCTL_MUNMAP: Ioctl<fastrpc_ioctl_munmap> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 3);
/// `FASTRPC_IOCTL_INVOKE_FD`.
pub const FASTRPC_IOCTL_INVOKE_FD: Ioctl<fastrpc_ioctl_invoke_fd> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 4);
/// `FASTRPC_IOCTL_SETMODE` (the argument *value* is the mode).
pub const FASTRPC_IOCTL_SETMODE: Ioctl<u32> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 5);
/// `FASTRPC_IOCTL_INIT`.
pub const FASTRPC_IOCTL_INIT: Ioctl<fastrpc_ioctl_init> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 6);
/// `FASTRPC_IOCTL_INVOKE_ATTRS`.
pub const FASTRPC_IOCTL_INVOKE_ATTRS: Ioctl<fastrpc_ioctl_invoke_attrs> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 7);
/// `FASTRPC_IOCTL_GETINFO`.
pub const FASTRPC_IOCTL_GETINFO: Ioctl<u32> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 8);
/// `FASTRPC_IOCTL_GETPERF`.
pub const FASTRPC_IOCTL_GETPERF: Ioctl<fastrpc_ioctl_perf> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 9);
/// `FASTRPC_IOCTL_INIT_ATTRS`.
pub const FASTRPC_IOCTL_INIT_ATTRS: Ioctl<fastrpc_ioctl_init_attrs> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 10);
/// `FASTRPC_IOCTL_INVOKE_CRC`.
pub const FASTRPC_IOCTL_INVOKE_CRC: Ioctl<fastrpc_ioctl_invoke_crc> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 11);
/// `FASTRPC_IOCTL_CONTROL`.
pub const FASTRPC_IOCTL_CONTROL: Ioctl<fastrpc_ioctl_control> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 12);
/// `FASTRPC_IOCTL_MUNMAP_FD`.
pub const FASTRPC_IOCTL_MUNMAP_FD: Ioctl<fastrpc_ioctl_munmap_fd> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 13);
/// `FASTRPC_IOCTL_MMAP_64`.
pub const FASTRPC_IOCTL_MMAP_64: Ioctl<fastrpc_ioctl_mmap_64> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 14);
/// `FASTRPC_IOCTL_MUNMAP_64`.
pub const FASTRPC_IOCTL_MUNMAP_64: Ioctl<fastrpc_ioctl_munmap_64> = Ioctl::iowr(FASTRPC_IOCTL_MAGIC, 15);
