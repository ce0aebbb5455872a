//! [`STRUCTS`]: the layout of every ABI struct of this crate (re-exported by
//! [`layout`](super)).

use super::{AbiLayout, StructLayout};

/// Every ABI struct of this crate, for `hexrpc abi`.
pub const STRUCTS: &[StructLayout] = {
    use crate::adsprpc::*;
    use crate::apps_std::*;
    use crate::dma_heap::*;
    use crate::dsp::*;
    use crate::ion::*;
    use crate::listener::*;
    use crate::upstream::*;
    &[
        ion_allocation_data::LAYOUT,
        ion_fd_data::LAYOUT,
        ion_handle_data::LAYOUT,
        ion_custom_data::LAYOUT,
        ion_flush_data::LAYOUT,
        remote_buf::LAYOUT,
        remote_dma_handle::LAYOUT,
        remote_arg::LAYOUT,
        remote_buf64::LAYOUT,
        remote_dma_handle64::LAYOUT,
        remote_arg64::LAYOUT,
        fastrpc_ioctl_invoke::LAYOUT,
        fastrpc_ioctl_invoke_fd::LAYOUT,
        fastrpc_ioctl_invoke_attrs::LAYOUT,
        fastrpc_ioctl_invoke_crc::LAYOUT,
        fastrpc_ioctl_init::LAYOUT,
        fastrpc_ioctl_init_attrs::LAYOUT,
        fastrpc_ioctl_mmap::LAYOUT,
        fastrpc_ioctl_mmap_64::LAYOUT,
        fastrpc_ioctl_munmap::LAYOUT,
        fastrpc_ioctl_munmap_64::LAYOUT,
        fastrpc_ioctl_munmap_fd::LAYOUT,
        fastrpc_ioctl_perf::LAYOUT,
        fastrpc_ioctl_control::LAYOUT,
        fastrpc_ctrl_latency::LAYOUT,
        fastrpc_ctrl_smmu::LAYOUT,
        fastrpc_ctrl_kalloc::LAYOUT,
        remote_buf32::LAYOUT,
        remote_dma_handle32::LAYOUT,
        remote_arg32::LAYOUT,
        apps_std_STAT::LAYOUT,
        listener_next2_in::LAYOUT,
        listener_next2_out::LAYOUT,
        listener_get_in_bufs2_in::LAYOUT,
        dma_heap_allocation_data::LAYOUT,
        dma_buf_sync::LAYOUT,
        fastrpc_invoke_args::LAYOUT,
        fastrpc_invoke::LAYOUT,
        fastrpc_init_create::LAYOUT,
        fastrpc_init_create_static::LAYOUT,
        fastrpc_alloc_dma_buf::LAYOUT,
        fastrpc_req_mmap::LAYOUT,
        fastrpc_mem_map::LAYOUT,
        fastrpc_req_munmap::LAYOUT,
        fastrpc_mem_unmap::LAYOUT,
        fastrpc_ioctl_capability::LAYOUT,
    ]
};
