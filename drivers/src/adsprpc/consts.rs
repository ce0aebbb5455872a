//! The plain constants of `adsprpc_shared.h` (the ioctl group, channel ids, attribute, mode,
//! init, control and mmap flags, static handles, limits), and their table for `hexrpc abi`.

/// The group byte of every FastRPC ioctl.
pub const FASTRPC_IOCTL_MAGIC: u8 = b'R';

/// `DEVICE_NAME`: the node under /dev.
pub const DEVICE_NAME: &str = "adsprpc-smd";
/// `ADSP_DOMAIN_ID`: channel id of the audio DSP.
pub const ADSP_DOMAIN_ID: u32 = 0;
/// `MDSP_DOMAIN_ID`: channel id of the modem DSP.
pub const MDSP_DOMAIN_ID: u32 = 1;
/// `SDSP_DOMAIN_ID`: channel id of the sensors DSP.
pub const SDSP_DOMAIN_ID: u32 = 2;
/// `CDSP_DOMAIN_ID`: channel id of the compute DSP.
pub const CDSP_DOMAIN_ID: u32 = 3;
/// `NUM_CHANNELS`.
pub const NUM_CHANNELS: u32 = 4;
/// Bit 0 of the GETINFO answer: the session has an SMMU.
pub const FASTRPC_INFO_SMMU: u32 = 1;

/// `FASTRPC_ATTR_NOVA`: buffer with no virtual mapping in userspace (downstream value; upstream
/// uses 256).
pub const FASTRPC_ATTR_NOVA: u32 = 0x1;
/// `FASTRPC_ATTR_NON_COHERENT`.
pub const FASTRPC_ATTR_NON_COHERENT: u32 = 0x2;
/// `FASTRPC_ATTR_COHERENT`.
pub const FASTRPC_ATTR_COHERENT: u32 = 0x4;
/// `FASTRPC_ATTR_KEEP_MAP`.
pub const FASTRPC_ATTR_KEEP_MAP: u32 = 0x8;
/// `FASTRPC_ATTR_NOMAP`.
pub const FASTRPC_ATTR_NOMAP: u32 = 16;

/// `FASTRPC_MODE_PARALLEL`.
pub const FASTRPC_MODE_PARALLEL: u32 = 0;
/// `FASTRPC_MODE_SERIAL` (the default after open).
pub const FASTRPC_MODE_SERIAL: u32 = 1;
/// `FASTRPC_MODE_PROFILE`.
pub const FASTRPC_MODE_PROFILE: u32 = 2;
/// `FASTRPC_MODE_SESSION`.
pub const FASTRPC_MODE_SESSION: u32 = 4;

/// `FASTRPC_INIT_ATTACH`.
pub const FASTRPC_INIT_ATTACH: u32 = 0;
/// `FASTRPC_INIT_CREATE`: create a user process from the shell ELF.
pub const FASTRPC_INIT_CREATE: u32 = 1;
/// `FASTRPC_INIT_CREATE_STATIC`.
pub const FASTRPC_INIT_CREATE_STATIC: u32 = 2;
/// `FASTRPC_INIT_ATTACH_SENSORS`.
pub const FASTRPC_INIT_ATTACH_SENSORS: u32 = 3;

/// `FASTRPC_CONTROL_LATENCY`.
pub const FASTRPC_CONTROL_LATENCY: u32 = 1;
/// `FASTRPC_CONTROL_SMMU`.
pub const FASTRPC_CONTROL_SMMU: u32 = 2;
/// `FASTRPC_CONTROL_KALLOC`.
pub const FASTRPC_CONTROL_KALLOC: u32 = 3;

/// `ADSP_MMAP_HEAP_ADDR`.
pub const ADSP_MMAP_HEAP_ADDR: u32 = 4;
/// `ADSP_MMAP_REMOTE_HEAP_ADDR`.
pub const ADSP_MMAP_REMOTE_HEAP_ADDR: u32 = 8;
/// `ADSP_MMAP_ADD_PAGES`: the kernel allocates the pages itself.
pub const ADSP_MMAP_ADD_PAGES: u32 = 0x1000;

/// Static handle of remotectl (library open/close by URI).
pub const REMOTECTL_HANDLE: u32 = 0;
/// `FASTRPC_STATIC_HANDLE_LISTENER`: the reverse-RPC listener (adsp_listener).
pub const FASTRPC_STATIC_HANDLE_LISTENER: u32 = 3;
/// Static handle of adsp_current_process1 (method 2 = exit).
pub const CURRENT_PROCESS_HANDLE: u32 = 4;
/// `FASTRPC_STATIC_HANDLE_MAX`: library handles are above this.
pub const FASTRPC_STATIC_HANDLE_MAX: u32 = 20;
/// `M_FDLIST`.
pub const M_FDLIST: usize = 16;
/// `M_CRCLIST`.
pub const M_CRCLIST: usize = 64;
/// `INIT_FILELEN_MAX`: the shell must be shorter.
pub const INIT_FILELEN_MAX: u32 = 2 * 1024 * 1024;
/// `INIT_MEMLEN_MAX`.
pub const INIT_MEMLEN_MAX: u32 = 8 * 1024 * 1024;
/// `FASTRPC_ENOSUCH`: returned (positive) when the session recorded SMMU faults.
pub const FASTRPC_ENOSUCH: i32 = 39;
/// Number of 64-bit counters GETPERF writes.
pub const PERF_KEYS: usize = 12;

/// Constants of this module, by kernel name, for `hexrpc abi`.
pub const CONSTANTS: &[(&str, u64)] = &[
    ("CDSP_DOMAIN_ID", CDSP_DOMAIN_ID as u64),
    ("FASTRPC_INFO_SMMU", FASTRPC_INFO_SMMU as u64),
    ("FASTRPC_ATTR_NOVA", FASTRPC_ATTR_NOVA as u64),
    ("FASTRPC_ATTR_NON_COHERENT", FASTRPC_ATTR_NON_COHERENT as u64),
    ("FASTRPC_ATTR_COHERENT", FASTRPC_ATTR_COHERENT as u64),
    ("FASTRPC_ATTR_KEEP_MAP", FASTRPC_ATTR_KEEP_MAP as u64),
    ("FASTRPC_ATTR_NOMAP", FASTRPC_ATTR_NOMAP as u64),
    ("FASTRPC_MODE_PARALLEL", FASTRPC_MODE_PARALLEL as u64),
    ("FASTRPC_MODE_SERIAL", FASTRPC_MODE_SERIAL as u64),
    ("FASTRPC_MODE_PROFILE", FASTRPC_MODE_PROFILE as u64),
    ("FASTRPC_MODE_SESSION", FASTRPC_MODE_SESSION as u64),
    ("FASTRPC_INIT_ATTACH", FASTRPC_INIT_ATTACH as u64),
    ("FASTRPC_INIT_CREATE", FASTRPC_INIT_CREATE as u64),
    ("FASTRPC_INIT_CREATE_STATIC", FASTRPC_INIT_CREATE_STATIC as u64),
    ("FASTRPC_INIT_ATTACH_SENSORS", FASTRPC_INIT_ATTACH_SENSORS as u64),
    ("FASTRPC_CONTROL_LATENCY", FASTRPC_CONTROL_LATENCY as u64),
    ("FASTRPC_CONTROL_SMMU", FASTRPC_CONTROL_SMMU as u64),
    ("FASTRPC_CONTROL_KALLOC", FASTRPC_CONTROL_KALLOC as u64),
    ("ADSP_MMAP_HEAP_ADDR", ADSP_MMAP_HEAP_ADDR as u64),
    ("ADSP_MMAP_REMOTE_HEAP_ADDR", ADSP_MMAP_REMOTE_HEAP_ADDR as u64),
    ("ADSP_MMAP_ADD_PAGES", ADSP_MMAP_ADD_PAGES as u64),
    ("FASTRPC_STATIC_HANDLE_LISTENER", FASTRPC_STATIC_HANDLE_LISTENER as u64),
    ("FASTRPC_STATIC_HANDLE_MAX", FASTRPC_STATIC_HANDLE_MAX as u64),
    ("M_FDLIST", M_FDLIST as u64),
    ("M_CRCLIST", M_CRCLIST as u64),
    ("INIT_FILELEN_MAX", INIT_FILELEN_MAX as u64),
    ("INIT_MEMLEN_MAX", INIT_MEMLEN_MAX as u64),
    ("FASTRPC_ENOSUCH", FASTRPC_ENOSUCH as u64),
];
