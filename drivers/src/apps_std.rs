//! The `apps_std` and `apps_mem` reverse interfaces: what the DSP asks the host for.
//!
//! Origin: quic/fastrpc `inc/apps_std.h`, `src/apps_std_skel.c`, `src/apps_mem_skel.c` (method
//! numbering and the layout of `apps_std_STAT`). Method 31 of apps_std is an escape: the real
//! method id is the first u32 of the first input buffer (see [`APPS_STD_EXTENDED`]).
#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::abi_layout;

/// `struct apps_std_STAT` (96 bytes), the reply of apps_std `stat`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct apps_std_STAT {
    /// Unused by quic (always 0).
    pub tsz: u64,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_mode`.
    pub mode: u32,
    /// `st_nlink`.
    pub nlink: u32,
    /// `st_rdev`.
    pub rdev: u64,
    /// `st_size`.
    pub size: u64,
    /// Access time, seconds.
    pub atime: i64,
    /// Access time, nanoseconds.
    pub atimensec: i64,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtimensec: i64,
    /// Change time, seconds.
    pub ctime: i64,
    /// Change time, nanoseconds.
    pub ctimensec: i64,
}
abi_layout!(apps_std_STAT, "apps_std_STAT", size = 96, align = 8, {
    tsz @ 0, dev @ 8, ino @ 16, mode @ 24, nlink @ 28, rdev @ 32, size @ 40,
    atime @ 48, atimensec @ 56, mtime @ 64, mtimensec @ 72, ctime @ 80, ctimensec @ 88
});

/// apps_std method ids (the 5-bit method field, or the extended id behind method 31).
pub mod method {
    /// `fopen(name, mode) -> FILE`.
    pub const FOPEN: u32 = 0;
    /// `freopen`.
    pub const FREOPEN: u32 = 1;
    /// `fflush`.
    pub const FFLUSH: u32 = 2;
    /// `fclose(FILE)`.
    pub const FCLOSE: u32 = 3;
    /// `fread(FILE, bufLen) -> (bytesRead, bEOF), data`.
    pub const FREAD: u32 = 4;
    /// `fwrite`.
    pub const FWRITE: u32 = 5;
    /// `fgetpos`.
    pub const FGETPOS: u32 = 6;
    /// `fsetpos`.
    pub const FSETPOS: u32 = 7;
    /// `ftell(FILE) -> pos`.
    pub const FTELL: u32 = 8;
    /// `fseek(FILE, offset, whence)`.
    pub const FSEEK: u32 = 9;
    /// `flen(FILE) -> u64`.
    pub const FLEN: u32 = 10;
    /// `rewind`.
    pub const REWIND: u32 = 11;
    /// `feof`.
    pub const FEOF: u32 = 12;
    /// `ferror`.
    pub const FERROR: u32 = 13;
    /// `clearerr`.
    pub const CLEARERR: u32 = 14;
    /// `print_string`.
    pub const PRINT_STRING: u32 = 15;
    /// `getenv`.
    pub const GETENV: u32 = 16;
    /// `setenv`.
    pub const SETENV: u32 = 17;
    /// `unsetenv`.
    pub const UNSETENV: u32 = 18;
    /// `fopen_with_env(env, delim, name, mode) -> FILE`.
    pub const FOPEN_WITH_ENV: u32 = 19;
    /// `fgets`.
    pub const FGETS: u32 = 20;
    /// `get_search_paths_with_env`.
    pub const GET_SEARCH_PATHS_WITH_ENV: u32 = 21;
    /// `fileExists(path) -> bool`.
    pub const FILE_EXISTS: u32 = 22;
    /// `fsync`.
    pub const FSYNC: u32 = 23;
    /// `fremove`.
    pub const FREMOVE: u32 = 24;
    /// `fdopen_decrypt`.
    pub const FDOPEN_DECRYPT: u32 = 25;
    /// `opendir`.
    pub const OPENDIR: u32 = 26;
    /// `closedir`.
    pub const CLOSEDIR: u32 = 27;
    /// `readdir`.
    pub const READDIR: u32 = 28;
    /// `mkdir`.
    pub const MKDIR: u32 = 29;
    /// `rmdir`.
    pub const RMDIR: u32 = 30;
    /// `stat(path) -> apps_std_STAT` (extended).
    pub const STAT: u32 = 31;
    /// `ftrunc` (extended).
    pub const FTRUNC: u32 = 32;
    /// `frename` (extended).
    pub const FRENAME: u32 = 33;
    /// `fopen_fd` (extended).
    pub const FOPEN_FD: u32 = 34;
    /// `fclose_fd` (extended).
    pub const FCLOSE_FD: u32 = 35;
    /// `fopen_with_env_fd` (extended).
    pub const FOPEN_WITH_ENV_FD: u32 = 36;
}

/// The method index that means "the real id is the first u32 of the first input buffer".
pub const APPS_STD_EXTENDED: u8 = 31;

/// apps_std `SEEK_SET` (equal to libc's).
pub const APPS_STD_SEEK_SET: u32 = 0;
/// apps_std `SEEK_CUR`.
pub const APPS_STD_SEEK_CUR: u32 = 1;
/// apps_std `SEEK_END`.
pub const APPS_STD_SEEK_END: u32 = 2;

/// apps_mem method ids.
pub mod mem_method {
    /// `request_map`.
    pub const REQUEST_MAP: u32 = 0;
    /// `request_unmap`.
    pub const REQUEST_UNMAP: u32 = 1;
    /// `request_map64(heapid, ion_flags, rflags, vin, len) -> (vapps, vadsp)`.
    pub const REQUEST_MAP64: u32 = 2;
    /// `request_unmap64(vadsp, len)`.
    pub const REQUEST_UNMAP64: u32 = 3;
    /// `share_map`.
    pub const SHARE_MAP: u32 = 4;
    /// `share_unmap`.
    pub const SHARE_UNMAP: u32 = 5;
    /// `dma_handle_map`.
    pub const DMA_HANDLE_MAP: u32 = 6;
    /// `dma_handle_unmap`.
    pub const DMA_HANDLE_UNMAP: u32 = 7;
}
