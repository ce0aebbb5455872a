//! Per-session state of the reverse service, all fixed capacity: the virtual FILE handles, the
//! reverse module handles handed out by apps_remotectl open, and the DSP maps made for apps_mem.
//!
//! # Handles carry generations
//!
//! A FILE handle is `FILE_HANDLE_BASE + generation * MAX_FILES + slot` and a module key is
//! `MODULE_KEY_BASE | generation << MODULE_SLOT_BITS | slot`, each slot with its own generation
//! that advances when the slot is freed. A stale handle (closed, or from before a slot was
//! reused) names the right slot with the wrong generation and is refused; it never reaches the
//! file or module now in the slot. A slot whose generation cannot advance any more is retired
//! for the rest of the service's life instead of wrapping, so no handle ever becomes valid a
//! second time: the table shrinks (after about 33 million reuses of each FILE slot, or 2
//! million of each module slot) and then answers "out of handles".
//!
//! # No lock across I/O
//!
//! The service keeps these tables under a spin lock that is never held across a system call:
//! a request takes what it needs under the lock (`FileTable::begin` marks the file in use, so
//! a concurrent close only marks it closing), does its file I/O or ioctl without the lock, and
//! re-takes it to apply the result (`FileTable::finish`). A file closed while in use is
//! closed by its last user. Two requests racing on one FILE handle (the DSP serves one request
//! at a time per session, so only a hostile caller of `dispatch` does this) each read from the
//! offset they saw, and the last to finish sets the offset; neither can reach another file.

use hexrpc_drivers::{Fd, OwnedFd};

use super::policy::MAX_FILES;
use super::RequestError;

/// The first virtual FILE handle (quic's `APPS_FD_BASE`); handles are never raw host fds.
pub const FILE_HANDLE_BASE: u32 = 100;
/// Most reverse modules open at once.
pub const MAX_MODULES: usize = 8;
/// Most apps_mem maps alive at once.
pub const MAX_MAPS: usize = 32;
/// Reverse module keys are `MODULE_KEY_BASE | generation << MODULE_SLOT_BITS | slot`: never
/// 0..=20 (the static handles), and a stale key (closed module, earlier generation) is refused.
pub const MODULE_KEY_BASE: u32 = 0x4D00_0000;
/// Low bits of a module key that name the slot.
pub const MODULE_SLOT_BITS: u32 = 3;
/// Highest module generation (the key's bits between the slot and [`MODULE_KEY_BASE`]).
const MODULE_GEN_MAX: u32 = (1 << (24 - MODULE_SLOT_BITS)) - 1;
/// Highest FILE generation: handles stay at most `i32::MAX` (the DSP keeps them in an `int`).
const FILE_GEN_MAX: u32 = (i32::MAX as u32 - FILE_HANDLE_BASE) / MAX_FILES as u32 - 1;

const _: () = assert!(MAX_MODULES <= 1 << MODULE_SLOT_BITS);
const _: () = assert!(FILE_HANDLE_BASE as u64 + (FILE_GEN_MAX as u64 + 1) * MAX_FILES as u64 <= i32::MAX as u64);

/// Where an open file's bytes come from. Not `Copy`: the table owns a host descriptor, and
/// only [`FileTable`] hands it back out (to be closed).
#[derive(Debug)]
pub(crate) enum Source<'img> {
    /// A host file, owned by the table until closed.
    Host { fd: OwnedFd, size: u64 },
    /// A registered library image.
    Image(&'img [u8]),
}

impl<'img> Source<'img> {
    pub(crate) fn size(&self) -> u64 {
        match *self {
            Source::Host { size, .. } => size,
            Source::Image(b) => b.len() as u64,
        }
    }

    /// What a read outside the lock needs: the descriptor number (kept open by the table while
    /// the file is in use) or the image bytes.
    pub(crate) fn view(&self) -> SourceView<'img> {
        match self {
            Source::Host { fd, size } => SourceView::Host { fd: fd.raw(), size: *size },
            Source::Image(b) => SourceView::Image(b),
        }
    }
}

/// A [`Source`] as a read sees it, without ownership (see [`Source::view`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum SourceView<'img> {
    /// A host file's descriptor, open while the file is marked in use.
    Host { fd: Fd, size: u64 },
    /// A registered library image.
    Image(&'img [u8]),
}

impl SourceView<'_> {
    pub(crate) fn size(&self) -> u64 {
        match *self {
            SourceView::Host { size, .. } => size,
            SourceView::Image(b) => b.len() as u64,
        }
    }
}

/// One open file: its source, its own offset and how many bytes it has served, the module key
/// it was opened through, and how many requests are using it outside the lock.
#[derive(Debug)]
pub(crate) struct OpenFile<'img> {
    pub(crate) src: Source<'img>,
    pub(crate) offset: u64,
    pub(crate) served: u64,
    owner: u32,
    users: u32,
    closing: bool,
}

#[derive(Debug)]
enum FileState<'img> {
    Free,
    Open(OpenFile<'img>),
    /// The generation is spent: never used again.
    Retired,
}

#[derive(Debug)]
struct FileSlot<'img> {
    generation: u32,
    state: FileState<'img>,
}

/// A file taken for use outside the lock by [`FileTable::begin`]; give it back with
/// [`FileTable::finish`].
#[derive(Debug)]
pub(crate) struct InUse<'img> {
    slot: usize,
    /// Its source, offset and bytes served when taken.
    pub(crate) src: SourceView<'img>,
    pub(crate) offset: u64,
    pub(crate) served: u64,
}

/// Files to close after the lock is released.
pub(crate) type ToClose<'img> = heapless::Vec<Source<'img>, MAX_FILES>;

/// The bounded table of virtual FILE handles.
pub(crate) struct FileTable<'img> {
    slots: [FileSlot<'img>; MAX_FILES],
    limit: usize,
}

impl<'img> FileTable<'img> {
    pub(crate) const fn new(limit: usize) -> Self {
        FileTable {
            slots: [const { FileSlot { generation: 0, state: FileState::Free } }; MAX_FILES],
            limit: if limit < MAX_FILES { limit } else { MAX_FILES },
        }
    }

    /// Takes the first free slot for a file opened through module `owner`;
    /// [`RequestError::OutOfHandles`] (and `src` back, to be closed) when `limit` are open (or
    /// retired).
    pub(crate) fn insert(&mut self, src: Source<'img>, owner: u32) -> Result<u32, (RequestError, Source<'img>)> {
        let Some(i) = self.slots.iter().take(self.limit).position(|s| matches!(s.state, FileState::Free)) else {
            return Err((RequestError::OutOfHandles, src));
        };
        let slot = &mut self.slots[i];
        slot.state = FileState::Open(OpenFile { src, offset: 0, served: 0, owner, users: 0, closing: false });
        Ok(FILE_HANDLE_BASE + slot.generation * MAX_FILES as u32 + i as u32)
    }

    /// The slot of a live handle opened through `owner`.
    fn index(&self, handle: u32, owner: u32) -> Result<usize, RequestError> {
        let n = handle.checked_sub(FILE_HANDLE_BASE).ok_or(RequestError::BadFile)?;
        let (i, generation) = ((n % MAX_FILES as u32) as usize, n / MAX_FILES as u32);
        match self.slots.get(i) {
            Some(FileSlot { generation: g, state: FileState::Open(f) })
                if i < self.limit && *g == generation && !f.closing && f.owner == owner =>
            {
                Ok(i)
            }
            _ => Err(RequestError::BadFile),
        }
    }

    fn open_mut(&mut self, i: usize) -> Result<&mut OpenFile<'img>, RequestError> {
        match &mut self.slots[i].state {
            FileState::Open(f) => Ok(f),
            _ => Err(RequestError::BadFile),
        }
    }

    /// The open file `handle` for a request that needs no I/O (done under the lock).
    pub(crate) fn get_mut(&mut self, handle: u32, owner: u32) -> Result<&mut OpenFile<'img>, RequestError> {
        let i = self.index(handle, owner)?;
        self.open_mut(i)
    }

    /// Marks `handle` in use and returns a copy to do I/O with outside the lock.
    pub(crate) fn begin(&mut self, handle: u32, owner: u32) -> Result<InUse<'img>, RequestError> {
        let i = self.index(handle, owner)?;
        let f = self.open_mut(i)?;
        f.users = f.users.checked_add(1).ok_or(RequestError::OutOfHandles)?;
        Ok(InUse { slot: i, src: f.src.view(), offset: f.offset, served: f.served })
    }

    /// Ends a use: applies `update` unless the file was closed meanwhile; returns the source to
    /// close if this was the last user of a closed file.
    pub(crate) fn finish(&mut self, used: InUse<'img>, update: impl FnOnce(&mut OpenFile<'img>)) -> Option<Source<'img>> {
        let f = self.open_mut(used.slot).ok()?;
        f.users = f.users.saturating_sub(1);
        if !f.closing {
            update(f);
            return None;
        }
        if f.users == 0 {
            return self.free(used.slot);
        }
        None
    }

    /// Frees slot `i` (advancing or retiring its generation) and returns its source.
    fn free(&mut self, i: usize) -> Option<Source<'img>> {
        let slot = &mut self.slots[i];
        if !matches!(slot.state, FileState::Open(_)) {
            return None;
        }
        let next = if slot.generation >= FILE_GEN_MAX {
            FileState::Retired
        } else {
            slot.generation += 1;
            FileState::Free
        };
        match core::mem::replace(&mut slot.state, next) {
            FileState::Open(f) => Some(f.src),
            _ => None,
        }
    }

    /// Closes one slot: freed at once, or marked closing while in use (its last user frees it).
    fn close_slot(&mut self, i: usize) -> Option<Source<'img>> {
        match &mut self.slots[i].state {
            FileState::Open(f) if f.users > 0 => {
                f.closing = true;
                None
            }
            FileState::Open(_) => self.free(i),
            _ => None,
        }
    }

    /// Closes `handle`: its handle is invalid from now on. Returns the source to close now
    /// (`None` if a request is still using it: that request closes it).
    pub(crate) fn remove(&mut self, handle: u32, owner: u32) -> Result<Option<Source<'img>>, RequestError> {
        let i = self.index(handle, owner)?;
        Ok(self.close_slot(i))
    }

    /// Closes every file opened through module `owner` (module close).
    pub(crate) fn remove_owned_by(&mut self, owner: u32) -> ToClose<'img> {
        let mut out = ToClose::new();
        for i in 0..MAX_FILES {
            if matches!(&self.slots[i].state, FileState::Open(f) if f.owner == owner && !f.closing) {
                if let Some(src) = self.close_slot(i) {
                    // At most MAX_FILES slots, so this always fits.
                    let _ = out.push(src);
                }
            }
        }
        out
    }

    /// Closes every open file (session end).
    pub(crate) fn take_all(&mut self) -> ToClose<'img> {
        let mut out = ToClose::new();
        for i in 0..MAX_FILES {
            if matches!(&self.slots[i].state, FileState::Open(f) if !f.closing) {
                if let Some(src) = self.close_slot(i) {
                    let _ = out.push(src);
                }
            }
        }
        out
    }

    /// Open files (closing ones still in use included: their descriptors are still open).
    pub(crate) fn open_count(&self) -> usize {
        self.slots.iter().filter(|s| matches!(s.state, FileState::Open(_))).count()
    }

    #[cfg(test)]
    fn set_generation(&mut self, slot: usize, generation: u32) {
        self.slots[slot].generation = generation;
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

#[derive(Clone, Copy, Debug)]
struct ModuleSlot {
    /// The generation the next key of this slot carries (from 1); past [`MODULE_GEN_MAX`] the
    /// slot is retired.
    generation: u32,
    open: Option<Module>,
}

/// Open reverse modules with generation-checked opaque keys.
pub(crate) struct ModuleTable {
    slots: [ModuleSlot; MAX_MODULES],
}

impl ModuleTable {
    pub(crate) const fn new() -> Self {
        ModuleTable { slots: [ModuleSlot { generation: 1, open: None }; MAX_MODULES] }
    }

    pub(crate) fn open(&mut self, m: Module) -> Result<u32, RequestError> {
        let i = self.slots.iter().position(|s| s.open.is_none() && s.generation <= MODULE_GEN_MAX).ok_or(RequestError::OutOfHandles)?;
        let slot = &mut self.slots[i];
        slot.open = Some(m);
        Ok(MODULE_KEY_BASE | slot.generation << MODULE_SLOT_BITS | i as u32)
    }

    fn slot(&self, key: u32) -> Option<usize> {
        if key & 0xFF00_0000 != MODULE_KEY_BASE {
            return None;
        }
        let i = (key & ((1 << MODULE_SLOT_BITS) - 1)) as usize;
        let g = (key & 0x00FF_FFFF) >> MODULE_SLOT_BITS;
        match self.slots.get(i)? {
            ModuleSlot { generation, open: Some(_) } if *generation == g => Some(i),
            _ => None,
        }
    }

    pub(crate) fn lookup(&self, key: u32) -> Option<Module> {
        self.slots[self.slot(key)?].open
    }

    /// Closes module `key`; its key is never valid again.
    pub(crate) fn close(&mut self, key: u32) -> Result<(), RequestError> {
        let i = self.slot(key).ok_or(RequestError::InvalidHandle)?;
        let slot = &mut self.slots[i];
        slot.open = None;
        // Past MODULE_GEN_MAX the slot is never opened again (retired).
        slot.generation += 1;
        Ok(())
    }

    /// Closes every module (session end); their keys are never valid again.
    pub(crate) fn clear(&mut self) {
        for slot in &mut self.slots {
            if slot.open.take().is_some() {
                slot.generation += 1;
            }
        }
    }

    pub(crate) fn open_count(&self) -> usize {
        self.slots.iter().filter(|s| s.open.is_some()).count()
    }

    #[cfg(test)]
    fn set_generation(&mut self, slot: usize, generation: u32) {
        self.slots[slot].generation = generation;
    }
}

/// A map budget and slot held for an MMAP ioctl in flight ([`MapTable::reserve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    len: u64,
    epoch: u64,
}

/// DSP maps made through apps_mem, charged against the map budget. A map request reserves its
/// bytes and slot under the lock, makes the ioctl without it, then commits the address; an
/// [`take_all`](Self::take_all) in between (session end) starts a new epoch, and the late
/// commit is refused so that its caller releases the map itself.
pub(crate) struct MapTable {
    maps: heapless::Vec<(u64, u64), MAX_MAPS>,
    used: u64,
    reserved: u64,
    pending: usize,
    epoch: u64,
}

impl MapTable {
    pub(crate) const fn new() -> Self {
        MapTable { maps: heapless::Vec::new(), used: 0, reserved: 0, pending: 0, epoch: 0 }
    }

    /// Reserves `len` bytes of `budget` and a slot for a map about to be made.
    pub(crate) fn reserve(&mut self, len: u64, budget: u64) -> Result<Reservation, RequestError> {
        if self.maps.len() + self.pending >= MAX_MAPS {
            return Err(RequestError::OutOfHandles);
        }
        match self.used.checked_add(self.reserved).and_then(|u| u.checked_add(len)) {
            Some(total) if total <= budget => {
                self.reserved += len;
                self.pending += 1;
                Ok(Reservation { len, epoch: self.epoch })
            }
            _ => Err(RequestError::BadSize),
        }
    }

    /// Records the map made for `res` at `vadsp` (0: the kernel did not report the address; it
    /// stays charged, as the memory exists until the session's fd is closed). False if the
    /// session ended since the reservation: the map is not recorded.
    pub(crate) fn commit(&mut self, res: Reservation, vadsp: u64) -> bool {
        if res.epoch != self.epoch {
            return false;
        }
        self.reserved = self.reserved.saturating_sub(res.len);
        self.pending = self.pending.saturating_sub(1);
        // `reserve` kept a slot free for this map.
        if self.maps.push((vadsp, res.len)).is_ok() {
            self.used = self.used.saturating_add(res.len);
        }
        true
    }

    /// Gives a reservation back (the map was not made).
    pub(crate) fn cancel(&mut self, res: Reservation) {
        if res.epoch == self.epoch {
            self.reserved = self.reserved.saturating_sub(res.len);
            self.pending = self.pending.saturating_sub(1);
        }
    }

    /// Takes the map exactly (vadsp, len) out of the books for an unmap; address 0 is never
    /// matched. Put it back with [`restore`](Self::restore) if the unmap fails.
    pub(crate) fn take(&mut self, vadsp: u64, len: u64) -> Option<Reservation> {
        if vadsp == 0 {
            return None;
        }
        let i = self.maps.iter().position(|&m| m == (vadsp, len))?;
        self.maps.swap_remove(i);
        self.used = self.used.saturating_sub(len);
        Some(Reservation { len, epoch: self.epoch })
    }

    /// Puts back a map whose unmap failed (unless the session ended meanwhile).
    pub(crate) fn restore(&mut self, taken: Reservation, vadsp: u64) {
        if taken.epoch == self.epoch && self.maps.push((vadsp, taken.len)).is_ok() {
            self.used = self.used.saturating_add(taken.len);
        }
    }

    /// Takes every recorded map out and starts a new epoch (in-flight maps are not recorded).
    pub(crate) fn take_all(&mut self) -> heapless::Vec<(u64, u64), MAX_MAPS> {
        self.used = 0;
        self.reserved = 0;
        self.pending = 0;
        self.epoch += 1;
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

    static IMG: [u8; 4] = [0; 4];
    const OWNER: u32 = MODULE_KEY_BASE | 1 << MODULE_SLOT_BITS;

    #[test]
    fn file_handles_are_virtual_bounded_and_generation_checked() {
        let mut t = FileTable::new(2);
        let a = t.insert(Source::Image(&IMG), OWNER).unwrap();
        let b = t.insert(Source::Image(&IMG), OWNER).unwrap();
        assert_eq!((a, b), (100, 101));
        assert_eq!(t.insert(Source::Image(&IMG), OWNER).err().map(|e| e.0), Some(RequestError::OutOfHandles));
        for bad in [0, 3, 99, 102, 163, 164, u32::MAX] {
            assert_eq!(t.get_mut(bad, OWNER).err(), Some(RequestError::BadFile), "{bad}");
        }
        assert_eq!(t.get_mut(a, OWNER + 1).err(), Some(RequestError::BadFile), "only through the module that opened it");
        t.get_mut(a, OWNER).unwrap().offset = 3;
        assert_eq!(t.get_mut(b, OWNER).unwrap().offset, 0, "offsets are per handle");
        assert!(t.remove(a, OWNER).unwrap().is_some());
        assert_eq!(t.remove(a, OWNER).err(), Some(RequestError::BadFile));
        let a2 = t.insert(Source::Image(&IMG), OWNER).unwrap();
        assert_eq!(a2, 100 + MAX_FILES as u32, "same slot, next generation");
        assert_eq!(t.get_mut(a, OWNER).err(), Some(RequestError::BadFile), "the stale handle is refused");
        assert_eq!(t.take_all().len(), 2);
        assert_eq!(t.open_count(), 0);
        assert_eq!(FileTable::new(1000).limit, MAX_FILES);
    }

    #[test]
    fn a_file_closed_in_use_is_closed_by_its_last_user() {
        let mut t = FileTable::new(4);
        let a = t.insert(Source::Image(&IMG), OWNER).unwrap();
        let used = t.begin(a, OWNER).unwrap();
        assert_eq!(t.remove(a, OWNER).unwrap().map(|s| s.size()), None, "in use: not closed yet");
        assert_eq!(t.get_mut(a, OWNER).err(), Some(RequestError::BadFile), "but the handle is gone");
        assert_eq!(t.insert(Source::Image(&IMG), OWNER).unwrap(), 101, "and its slot is not reused");
        assert_eq!(t.open_count(), 2);
        let closed = t.finish(used, |f| f.offset = 99);
        assert!(closed.is_some(), "the last user closes it");
        assert_eq!(t.insert(Source::Image(&IMG), OWNER).unwrap(), 100 + MAX_FILES as u32);
        // A use that finishes normally applies its update.
        let b = t.begin(101, OWNER).unwrap();
        assert!(t.finish(b, |f| f.offset = 2).is_none());
        assert_eq!(t.get_mut(101, OWNER).unwrap().offset, 2);
        // Session end while in use: the user closes it.
        let c = t.begin(101, OWNER).unwrap();
        assert_eq!(t.take_all().len(), 1, "the idle file is closed at once");
        assert!(t.finish(c, |_| ()).is_some());
        assert_eq!(t.open_count(), 0);
    }

    #[test]
    fn module_close_takes_its_files_only() {
        let mut t = FileTable::new(8);
        let mine = [t.insert(Source::Image(&IMG), OWNER).unwrap(), t.insert(Source::Image(&IMG), OWNER).unwrap()];
        let other = t.insert(Source::Image(&IMG), OWNER + 8).unwrap();
        assert_eq!(t.remove_owned_by(OWNER).len(), 2);
        for h in mine {
            assert_eq!(t.get_mut(h, OWNER).err(), Some(RequestError::BadFile));
        }
        assert!(t.get_mut(other, OWNER + 8).is_ok());
    }

    #[test]
    fn spent_file_generations_retire_the_slot() {
        let mut t = FileTable::new(1);
        t.set_generation(0, FILE_GEN_MAX);
        let last = t.insert(Source::Image(&IMG), OWNER).unwrap();
        assert_eq!(last, FILE_HANDLE_BASE + FILE_GEN_MAX * MAX_FILES as u32);
        assert!(last <= i32::MAX as u32);
        t.remove(last, OWNER).unwrap();
        assert_eq!(t.insert(Source::Image(&IMG), OWNER).err().map(|e| e.0), Some(RequestError::OutOfHandles), "retired, not wrapped");
        assert_eq!(t.get_mut(FILE_HANDLE_BASE, OWNER).err(), Some(RequestError::BadFile));
    }

    #[test]
    fn module_keys_are_generation_checked_and_never_wrap() {
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
        for h in [0, 3, 100, k2 ^ 1 << MODULE_SLOT_BITS, k2 | 0x7] {
            assert_eq!(m.lookup(h), None, "{h:#x}");
        }
        for _ in 1..MAX_MODULES {
            m.open(Module::AppsStd).unwrap();
        }
        assert_eq!(m.open(Module::AppsStd), Err(RequestError::OutOfHandles));
        m.clear();
        assert_eq!(m.open_count(), 0);
        assert_eq!(m.lookup(k2), None, "keys of a cleared table stay invalid");
        // Every slot at its last generation: one more open each, then retired for good.
        let mut m = ModuleTable::new();
        for i in 0..MAX_MODULES {
            m.set_generation(i, MODULE_GEN_MAX);
        }
        for _ in 0..MAX_MODULES {
            let k = m.open(Module::AppsStd).unwrap();
            m.close(k).unwrap();
            assert_eq!(m.lookup(k), None);
        }
        assert_eq!(m.open(Module::AppsStd), Err(RequestError::OutOfHandles), "retired, not wrapped");
    }

    #[test]
    fn maps_are_budgeted_and_reserved_across_the_ioctl() {
        let mut t = MapTable::new();
        assert_eq!(t.reserve(10, 8), Err(RequestError::BadSize));
        let r = t.reserve(8, 8).unwrap();
        assert_eq!(t.reserve(1, 8), Err(RequestError::BadSize), "the reservation counts");
        assert!(t.commit(r, 0x1000));
        assert_eq!(t.reserve(1, 8), Err(RequestError::BadSize));
        assert_eq!(t.reserve(u64::MAX, u64::MAX), Err(RequestError::BadSize));
        assert_eq!(t.take(0x1000, 4), None);
        let taken = t.take(0x1000, 8).unwrap();
        assert_eq!(t.used(), 0);
        t.restore(taken, 0x1000);
        assert_eq!((t.len(), t.used()), (1, 8), "a failed unmap puts the map back");
        let r = t.reserve(0, 8).unwrap();
        t.cancel(r);
        let r = t.reserve(0, 8).unwrap();
        assert!(t.commit(r, 0));
        assert_eq!(t.take(0, 0), None, "address 0 never matches");
        let late = t.reserve(0, 8).unwrap();
        assert_eq!(t.take_all().len(), 2);
        assert!(!t.commit(late, 0x2000), "a map made across a session end is not recorded");
        assert_eq!(t.len(), 0);
        for _ in 0..MAX_MAPS {
            t.reserve(0, 8).unwrap();
        }
        assert_eq!(t.reserve(0, 8), Err(RequestError::OutOfHandles));
    }
}
