//! The driver map list as the bench shows it ([`Bench::driver_maps`](crate::Bench::driver_maps)):
//! plain values, shared by the facade and the kernels that fill them (the models' own map
//! lists and Linux's `fl->maps`).

/// A simulated buffer (an ION buffer or a dma-buf), as
/// [`Bench::buffer_of`](crate::Bench::buffer_of) and [`DriverMap::buffer`] name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u64);

/// What kind of driver map an entry of [`Bench::driver_maps`](crate::Bench::driver_maps) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverMapKind {
    /// A handle argument's map (va 0), made by INVOKE (and, upstream, INIT_CREATE's shell and
    /// MEM_MAP).
    Handle,
    /// An MMAP of an fd (downstream).
    Mmap,
    /// MMAP with ADD_PAGES (kernel memory, no fd).
    AddPages,
    /// An in/out buffer argument passed with a buffer fd that the downstream driver mapped
    /// instead of copying (`get_args`): it lives for the call, or longer with
    /// `FASTRPC_ATTR_KEEP_MAP`.
    Buffer,
}

/// One map in a FastRPC file's driver map list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverMap {
    /// What made it.
    pub kind: DriverMapKind,
    /// The fd NUMBER it is keyed by (-1 for ADD_PAGES).
    pub fd: i32,
    /// References: one per call (or MMAP) that found or made it and has not given it back.
    pub refs: u32,
    /// The buffer it pins (`None` for ADD_PAGES).
    pub buffer: Option<BufferId>,
    /// Its length in bytes (downstream `map->len`, what MUNMAP_FD and MUNMAP match: 0 for a
    /// handle map).
    pub len: u64,
    /// The length the DSP was told (downstream `map->size`): the whole dma-buf for a map of an
    /// fd, whatever length the caller named.
    pub dsp_size: u64,
}
