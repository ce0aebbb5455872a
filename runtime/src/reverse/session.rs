//! Per-session state of the reverse service, all fixed capacity: the virtual FILE handles, the
//! reverse module handles handed out by apps_remotectl open, and the DSP maps made for apps_mem.

use hexrpc_drivers::Fd;

use super::policy::{ImageBytes, MAX_FILES};
use super::RequestError;

/// The first virtual FILE handle (quic's `APPS_FD_BASE`); handles are never raw host fds.
pub const FILE_HANDLE_BASE: u32 = 100;
/// Most reverse modules open at once.
pub const MAX_MODULES: usize = 8;
/// Most apps_mem maps alive at once.
pub const MAX_MAPS: usize = 32;
/// Reverse module handles are `MODULE_KEY_BASE | generation << 8 | slot`: never 0..=20 (the
/// static handles), and a stale key (closed module, earlier generation) is refused.
pub const MODULE_KEY_BASE: u32 = 0x4D00_0000;

/// Where an open file's bytes come from.
#[derive(Clone, Debug)]
pub(crate) enum Source<'img> {
    /// A host file, owned by the table until closed.
    Host { fd: Fd, size: u64 },
    /// A registered library image.
    Image(ImageBytes<'img>),
}

impl Source<'_> {
    pub(crate) fn size(&self) -> u64 {
        match self {
            Source::Host { size, .. } => *size,
            Source::Image(b) => b.len() as u64,
        }
    }
}

/// One open file: its source, its own offset and how many bytes it has served.
#[derive(Clone, Debug)]
pub(crate) struct OpenFile<'img> {
    pub(crate) src: Source<'img>,
    pub(crate) offset: u64,
    pub(crate) served: u64,
}

/// The bounded table of virtual FILE handles.
pub(crate) struct FileTable<'img> {
    slots: [Option<OpenFile<'img>>; MAX_FILES],
    limit: usize,
}

impl<'img> FileTable<'img> {
    pub(crate) const fn new(limit: usize) -> Self {
        FileTable { slots: [const { None }; MAX_FILES], limit: if limit < MAX_FILES { limit } else { MAX_FILES } }
    }

    /// Takes the first free slot; [`RequestError::OutOfHandles`] when `limit` are open.
    pub(crate) fn insert(&mut self, src: Source<'img>) -> Result<u32, RequestError> {
        let i = self.slots.iter().take(self.limit).position(Option::is_none).ok_or(RequestError::OutOfHandles)?;
        self.slots[i] = Some(OpenFile { src, offset: 0, served: 0 });
        Ok(FILE_HANDLE_BASE + i as u32)
    }

    fn index(&self, handle: u32) -> Result<usize, RequestError> {
        let i = handle.checked_sub(FILE_HANDLE_BASE).ok_or(RequestError::BadFile)? as usize;
        if i < self.limit && self.slots[i].is_some() {
            Ok(i)
        } else {
            Err(RequestError::BadFile)
        }
    }

    pub(crate) fn get_mut(&mut self, handle: u32) -> Result<&mut OpenFile<'img>, RequestError> {
        let i = self.index(handle)?;
        self.slots[i].as_mut().ok_or(RequestError::BadFile)
    }

    pub(crate) fn remove(&mut self, handle: u32) -> Result<OpenFile<'img>, RequestError> {
        let i = self.index(handle)?;
        self.slots[i].take().ok_or(RequestError::BadFile)
    }

    /// Takes every open file out (for closing at session end).
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = OpenFile<'img>> + '_ {
        self.slots.iter_mut().filter_map(Option::take)
    }

    pub(crate) fn open_count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

/// The reverse modules apps_remotectl can open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Module {
    /// Handle 0: open/close of the other modules.
    RemoteCtl,
    /// The file interface.
    AppsStd,
    /// DSP memory requests.
    AppsMem,
}

impl Module {
    /// The module called `name` (without NUL), if it is one the service offers.
    pub fn by_name(name: &[u8]) -> Option<Module> {
        match name {
            b"apps_std" => Some(Module::AppsStd),
            b"apps_mem" => Some(Module::AppsMem),
            _ => None,
        }
    }

    /// The module's name.
    pub const fn name(self) -> &'static str {
        match self {
            Module::RemoteCtl => "apps_remotectl",
            Module::AppsStd => "apps_std",
            Module::AppsMem => "apps_mem",
        }
    }
}

/// Open reverse modules with generation-checked opaque keys.
pub(crate) struct ModuleTable {
    slots: [Option<(Module, u16)>; MAX_MODULES],
    generation: u16,
}

impl ModuleTable {
    pub(crate) const fn new() -> Self {
        ModuleTable { slots: [None; MAX_MODULES], generation: 0 }
    }

    pub(crate) fn open(&mut self, m: Module) -> Result<u32, RequestError> {
        let i = self.slots.iter().position(Option::is_none).ok_or(RequestError::OutOfHandles)?;
        self.generation = self.generation.wrapping_add(1).max(1);
        self.slots[i] = Some((m, self.generation));
        Ok(MODULE_KEY_BASE | (self.generation as u32) << 8 | i as u32)
    }

    fn slot(&self, key: u32) -> Option<usize> {
        if key & 0xFF00_0000 != MODULE_KEY_BASE {
            return None;
        }
        let i = (key & 0xFF) as usize;
        let g = ((key >> 8) & 0xFFFF) as u16;
        match self.slots.get(i)? {
            Some((_, gen)) if *gen == g => Some(i),
            _ => None,
        }
    }

    pub(crate) fn lookup(&self, key: u32) -> Option<Module> {
        let i = self.slot(key)?;
        self.slots[i].map(|(m, _)| m)
    }

    pub(crate) fn close(&mut self, key: u32) -> Result<(), RequestError> {
        let i = self.slot(key).ok_or(RequestError::InvalidHandle)?;
        self.slots[i] = None;
        Ok(())
    }

    pub(crate) fn clear(&mut self) {
        self.slots = [None; MAX_MODULES];
    }

    pub(crate) fn open_count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

/// DSP maps made through apps_mem, charged against the map budget.
pub(crate) struct MapTable {
    maps: heapless::Vec<(u64, u64), MAX_MAPS>,
    used: u64,
}

impl MapTable {
    pub(crate) const fn new() -> Self {
        MapTable { maps: heapless::Vec::new(), used: 0 }
    }

    /// Checks that `len` more bytes fit `budget` and a slot is free.
    pub(crate) fn admit(&self, len: u64, budget: u64) -> Result<(), RequestError> {
        if self.maps.is_full() {
            return Err(RequestError::OutOfHandles);
        }
        match self.used.checked_add(len) {
            Some(total) if total <= budget => Ok(()),
            _ => Err(RequestError::BadSize),
        }
    }

    /// Records a map (call [`admit`](Self::admit) first).
    pub(crate) fn record(&mut self, vadsp: u64, len: u64) {
        if self.maps.push((vadsp, len)).is_ok() {
            self.used = self.used.saturating_add(len);
        }
    }

    /// The index of the map exactly (vadsp, len); address 0 is never matched.
    pub(crate) fn find(&self, vadsp: u64, len: u64) -> Option<usize> {
        if vadsp == 0 {
            return None;
        }
        self.maps.iter().position(|&m| m == (vadsp, len))
    }

    pub(crate) fn remove(&mut self, i: usize) {
        if i < self.maps.len() {
            let (_, len) = self.maps.swap_remove(i);
            self.used = self.used.saturating_sub(len);
        }
    }

    /// Takes every recorded map out.
    pub(crate) fn take_all(&mut self) -> heapless::Vec<(u64, u64), MAX_MAPS> {
        self.used = 0;
        core::mem::take(&mut self.maps)
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    pub(crate) fn len(&self) -> usize {
        self.maps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_handles_are_virtual_bounded_and_reused() {
        static IMG: [u8; 4] = [0; 4];
        let mut t = FileTable::new(2);
        let a = t.insert(Source::Image((&IMG).into())).unwrap();
        let b = t.insert(Source::Image((&IMG).into())).unwrap();
        assert_eq!((a, b), (100, 101));
        assert_eq!(t.insert(Source::Image((&IMG).into())).err(), Some(RequestError::OutOfHandles));
        for bad in [0, 3, 99, 102, 163, u32::MAX] {
            assert_eq!(t.get_mut(bad).err(), Some(RequestError::BadFile), "{bad}");
        }
        t.get_mut(a).unwrap().offset = 3;
        assert_eq!(t.get_mut(b).unwrap().offset, 0, "offsets are per handle");
        t.remove(a).unwrap();
        assert_eq!(t.remove(a).err(), Some(RequestError::BadFile));
        assert_eq!(t.insert(Source::Image((&IMG).into())).unwrap(), 100);
        assert_eq!(t.take_all().count(), 2);
        assert_eq!(t.open_count(), 0);
        assert_eq!(FileTable::new(1000).limit, MAX_FILES);
    }

    #[test]
    fn module_keys_are_generation_checked() {
        let mut m = ModuleTable::new();
        let k = m.open(Module::AppsStd).unwrap();
        assert!(k > 20 && k & 0xFF00_0000 == MODULE_KEY_BASE);
        assert_eq!(m.lookup(k), Some(Module::AppsStd));
        m.close(k).unwrap();
        assert_eq!(m.lookup(k), None);
        let k2 = m.open(Module::AppsMem).unwrap();
        assert_ne!(k, k2, "same slot, new generation");
        assert_eq!(m.lookup(k), None);
        assert_eq!(m.close(k), Err(RequestError::InvalidHandle));
        for h in [0, 3, 100, k2 ^ 0x100, k2 | 0xFF] {
            assert_eq!(m.lookup(h), None, "{h:#x}");
        }
        for _ in 1..MAX_MODULES {
            m.open(Module::AppsStd).unwrap();
        }
        assert_eq!(m.open(Module::AppsStd), Err(RequestError::OutOfHandles));
        m.clear();
        assert_eq!(m.open_count(), 0);
    }

    #[test]
    fn maps_are_budgeted() {
        let mut t = MapTable::new();
        assert_eq!(t.admit(10, 8), Err(RequestError::BadSize));
        t.admit(8, 8).unwrap();
        t.record(0x1000, 8);
        assert_eq!(t.admit(1, 8), Err(RequestError::BadSize));
        assert_eq!(t.admit(u64::MAX, u64::MAX), Err(RequestError::BadSize));
        assert_eq!(t.find(0x1000, 4), None);
        let i = t.find(0x1000, 8).unwrap();
        t.remove(i);
        assert_eq!(t.used(), 0);
        t.record(0, 4);
        assert_eq!(t.find(0, 4), None, "address 0 never matches");
        assert_eq!(t.take_all().len(), 1);
        assert_eq!(t.len(), 0);
    }
}
