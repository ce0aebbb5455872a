//! `hexrpc abi`: the request numbers, struct layouts and constants it prints are the kernel
//! headers' for aarch64, as JSON and as text.

use crate::common::hexrpc;

/// The values of the kernel headers for aarch64 (docs/kernel-abi.md 1.1 and 2.2,
/// reverse-rpc.md 0), typed in here independently of the drivers crate.
const HEADER_IOCTLS: &[(&str, u64)] = &[
    ("ION_IOC_ALLOC", 0xC0204900),
    ("ION_IOC_FREE", 0xC0044901),
    ("ION_IOC_MAP", 0xC0084902),
    ("ION_IOC_SHARE", 0xC0084904),
    ("ION_IOC_IMPORT", 0xC0084905),
    ("ION_IOC_CUSTOM", 0xC0104906),
    ("ION_IOC_SYNC", 0xC0084907),
    ("ION_IOC_CLEAN_CACHES", 0xC0184D00),
    ("ION_IOC_INV_CACHES", 0xC0184D01),
    ("ION_IOC_CLEAN_INV_CACHES", 0xC0184D02),
    ("FASTRPC_IOCTL_INVOKE", 0xC0105201),
    ("FASTRPC_IOCTL_MMAP", 0xC0205202),
    ("FASTRPC_IOCTL_MUNMAP", 0xC0105203),
    ("FASTRPC_IOCTL_INVOKE_FD", 0xC0185204),
    ("FASTRPC_IOCTL_SETMODE", 0xC0045205),
    ("FASTRPC_IOCTL_INIT", 0xC0285206),
    ("FASTRPC_IOCTL_INVOKE_ATTRS", 0xC0205207),
    ("FASTRPC_IOCTL_GETINFO", 0xC0045208),
    ("FASTRPC_IOCTL_GETPERF", 0xC0185209),
    ("FASTRPC_IOCTL_INIT_ATTRS", 0xC030520A),
    ("FASTRPC_IOCTL_INVOKE_CRC", 0xC028520B),
    ("FASTRPC_IOCTL_CONTROL", 0xC00C520C),
    ("FASTRPC_IOCTL_MUNMAP_FD", 0xC018520D),
    ("FASTRPC_IOCTL_MMAP_64", 0xC020520E),
    ("FASTRPC_IOCTL_MUNMAP_64", 0xC010520F),
    ("DMA_HEAP_IOCTL_ALLOC", 0xC0184800),
    ("DMA_BUF_IOCTL_SYNC", 0x40086200),
    ("upstream:FASTRPC_IOCTL_ALLOC_DMA_BUFF", 0xC0105201),
    ("upstream:FASTRPC_IOCTL_FREE_DMA_BUFF", 0xC0045202),
    ("upstream:FASTRPC_IOCTL_INVOKE", 0xC0105203),
    ("upstream:FASTRPC_IOCTL_INIT_ATTACH", 0x00005204),
    ("upstream:FASTRPC_IOCTL_INIT_CREATE", 0xC0185205),
    ("upstream:FASTRPC_IOCTL_MMAP", 0xC0205206),
    ("upstream:FASTRPC_IOCTL_MUNMAP", 0xC0105207),
    ("upstream:FASTRPC_IOCTL_INIT_ATTACH_SNS", 0x00005208),
    ("upstream:FASTRPC_IOCTL_INIT_CREATE_STATIC", 0xC0105209),
    ("upstream:FASTRPC_IOCTL_MEM_MAP", 0xC040520A),
    ("upstream:FASTRPC_IOCTL_MEM_UNMAP", 0xC030520B),
    ("upstream:FASTRPC_IOCTL_GET_DSP_INFO", 0xC01C520D),
];

/// (struct, size, [(field, offset)]) from the same spec sections.
/// (field, offset) pairs of one struct.
type Fields = &'static [(&'static str, u64)];

const HEADER_STRUCTS: &[(&str, u64, Fields)] = &[
    ("ion_allocation_data", 32, &[("len", 0), ("align", 8), ("heap_id_mask", 16), ("flags", 20), ("handle", 24)]),
    ("ion_fd_data", 8, &[("handle", 0), ("fd", 4)]),
    ("ion_handle_data", 4, &[("handle", 0)]),
    ("ion_custom_data", 16, &[("cmd", 0), ("arg", 8)]),
    ("ion_flush_data", 24, &[("handle", 0), ("fd", 4), ("vaddr", 8), ("offset", 16), ("length", 20)]),
    ("remote_buf", 16, &[("pv", 0), ("len", 8)]),
    ("remote_dma_handle", 8, &[("fd", 0), ("offset", 4)]),
    ("remote_arg", 16, &[("buf", 0), ("dma", 0), ("h", 0)]),
    ("remote_buf64", 16, &[("pv", 0), ("len", 8)]),
    ("remote_dma_handle64", 12, &[("fd", 0), ("offset", 4), ("len", 8)]),
    ("fastrpc_ioctl_invoke", 16, &[("handle", 0), ("sc", 4), ("pra", 8)]),
    ("fastrpc_ioctl_invoke_fd", 24, &[("inv", 0), ("fds", 16)]),
    ("fastrpc_ioctl_invoke_attrs", 32, &[("inv", 0), ("fds", 16), ("attrs", 24)]),
    ("fastrpc_ioctl_invoke_crc", 40, &[("inv", 0), ("fds", 16), ("attrs", 24), ("crc", 32)]),
    ("fastrpc_ioctl_init", 40, &[("flags", 0), ("file", 8), ("filelen", 16), ("filefd", 20), ("mem", 24), ("memlen", 32), ("memfd", 36)]),
    ("fastrpc_ioctl_init_attrs", 48, &[("init", 0), ("attrs", 40), ("siglen", 44)]),
    ("fastrpc_ioctl_mmap", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    ("fastrpc_ioctl_mmap_64", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    ("fastrpc_ioctl_munmap", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_ioctl_munmap_64", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_ioctl_munmap_fd", 24, &[("fd", 0), ("flags", 4), ("va", 8), ("len", 16)]),
    ("fastrpc_ioctl_perf", 24, &[("data", 0), ("numkeys", 8), ("keys", 16)]),
    ("fastrpc_ioctl_control", 12, &[("req", 0), ("lp", 4), ("smmu", 4), ("kalloc", 4)]),
    ("dma_heap_allocation_data", 24, &[("len", 0), ("fd", 8), ("fd_flags", 12), ("heap_flags", 16)]),
    ("dma_buf_sync", 8, &[("flags", 0)]),
    ("fastrpc_invoke_args", 24, &[("ptr", 0), ("length", 8), ("fd", 16), ("attr", 20)]),
    ("fastrpc_invoke", 16, &[("handle", 0), ("sc", 4), ("args", 8)]),
    ("fastrpc_init_create", 24, &[("filelen", 0), ("filefd", 4), ("attrs", 8), ("siglen", 12), ("file", 16)]),
    ("fastrpc_init_create_static", 16, &[("namelen", 0), ("memlen", 4), ("name", 8)]),
    ("fastrpc_alloc_dma_buf", 16, &[("fd", 0), ("flags", 4), ("size", 8)]),
    ("fastrpc_req_mmap", 32, &[("fd", 0), ("flags", 4), ("vaddrin", 8), ("size", 16), ("vaddrout", 24)]),
    (
        "fastrpc_mem_map",
        64,
        &[
            ("version", 0),
            ("fd", 4),
            ("offset", 8),
            ("flags", 12),
            ("vaddrin", 16),
            ("length", 24),
            ("vaddrout", 32),
            ("attrs", 40),
            ("reserved", 44),
        ],
    ),
    ("fastrpc_req_munmap", 16, &[("vaddrout", 0), ("size", 8)]),
    ("fastrpc_mem_unmap", 48, &[("vesion", 0), ("fd", 4), ("vaddr", 8), ("length", 16), ("reserved", 24)]),
    ("fastrpc_ioctl_capability", 28, &[("domain", 0), ("attribute_id", 4), ("capability", 8), ("reserved", 12)]),
    ("remote_arg32", 8, &[("buf", 0)]),
    (
        "apps_std_STAT",
        96,
        &[
            ("tsz", 0),
            ("dev", 8),
            ("ino", 16),
            ("mode", 24),
            ("nlink", 28),
            ("rdev", 32),
            ("size", 40),
            ("atime", 48),
            ("atimensec", 56),
            ("mtime", 64),
            ("mtimensec", 72),
            ("ctime", 80),
            ("ctimensec", 88),
        ],
    ),
];

const HEADER_CONSTANTS: &[(&str, u64)] = &[
    ("ION_SYSTEM_HEAP_ID", 25),
    ("ION_FLAG_CACHED", 1),
    ("FASTRPC_ATTR_NOVA", 1),
    ("CDSP_DOMAIN_ID", 3),
    ("FASTRPC_INIT_CREATE", 1),
    ("FASTRPC_CONTROL_KALLOC", 3),
    ("FASTRPC_STATIC_HANDLE_LISTENER", 3),
    ("ADSP_MMAP_ADD_PAGES", 0x1000),
    ("INIT_FILELEN_MAX", 2 * 1024 * 1024),
    ("upstream:FASTRPC_MODE_UNSIGNED_MODULE", 8),
    ("upstream:FASTRPC_MAP_FD", 2),
    ("upstream:FASTRPC_MAP_FD_NOMAP", 16),
    ("upstream:FASTRPC_ATTR_SECUREMAP", 1),
    ("DMA_BUF_SYNC_END", 4),
];

#[test]
fn abi_json_matches_the_kernel_headers() {
    let out = hexrpc(&["abi", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("abi --json is JSON");
    let ioctls = v["ioctls"].as_object().expect("ioctls object");
    assert_eq!(ioctls.len(), HEADER_IOCTLS.len(), "every ioctl and nothing else");
    for (name, nr) in HEADER_IOCTLS {
        assert_eq!(ioctls.get(*name).and_then(|x| x.as_u64()), Some(*nr), "{name}");
    }
    let structs = v["structs"].as_object().expect("structs object");
    for (name, size, fields) in HEADER_STRUCTS {
        let s = &structs.get(*name).unwrap_or_else(|| panic!("struct {name} missing"));
        assert_eq!(s["size"].as_u64(), Some(*size), "{name} size");
        for (f, off) in *fields {
            assert_eq!(s["fields"][*f].as_u64(), Some(*off), "{name}.{f}");
        }
    }
    for (name, val) in HEADER_CONSTANTS {
        assert_eq!(v["constants"][*name].as_u64(), Some(*val), "{name}");
    }
}

#[test]
fn abi_text_names_every_request() {
    let out = hexrpc(&["abi"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for (name, _) in HEADER_IOCTLS {
        assert!(text.contains(name), "{name} missing from the table");
    }
}
