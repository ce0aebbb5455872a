//! The handle table: every handle the C API gives out is an (index, generation) pair in one
//! process-wide table, never a pointer to memory, so a freed, closed, forged or wrong-kind handle
//! is found to be dead and reported, never dereferenced. A call takes a shared reference
//! ([`Arc`]) to what it uses and releases the table lock before any system call, so closing a
//! handle while another thread uses it is safe: the object goes when its last user returns.

use std::sync::{Arc, RwLock};

use crate::batch::BatchObj;
use crate::error::Failure;
use crate::model::ModelObj;
use crate::objects::{ArenaObj, KernelObj, LeaseObj, SessionObj};

/// What a handle names.
#[derive(Clone)]
pub enum Obj {
    /// A session.
    Session(Arc<SessionObj>),
    /// A lease (of its own, or a sub-allocation of an arena).
    Lease(Arc<LeaseObj>),
    /// An arena.
    Arena(Arc<ArenaObj>),
    /// A library with its kernel's signature.
    Kernel(Arc<KernelObj>),
    /// A batch of launches of a library's kernel table.
    Batch(Arc<BatchObj>),
    /// A model file opened on a session.
    Model(Arc<ModelObj>),
}

struct Entry<T> {
    generation: u32,
    obj: Option<T>,
}

/// The slots behind the handles: an entry per index, a free list, and a generation per entry
/// that changes whenever its object leaves, so an old handle value never names a new object (until
/// the generation wraps, after `1 << SHIFT` reuses of one index; 0 is skipped).
struct Slots<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
    /// Most entries (every index must fit the upper half of a handle value).
    max: usize,
}

impl<T> Slots<T> {
    const fn new(max: usize) -> Self {
        Slots { entries: Vec::new(), free: Vec::new(), max }
    }

    /// Stores `obj` and returns its handle value, or gives `obj` back if the table is full.
    fn insert(&mut self, obj: T) -> Result<u64, T> {
        if let Some(i) = self.free.pop() {
            let e = &mut self.entries[i as usize];
            e.obj = Some(obj);
            Ok(encode(i, e.generation))
        } else if self.entries.len() >= self.max {
            Err(obj)
        } else {
            let i = self.entries.len() as u32;
            self.entries.push(Entry { generation: 1, obj: Some(obj) });
            Ok(encode(i, 1))
        }
    }

    /// The live object `h` names.
    fn get(&self, h: u64) -> Option<&T> {
        let (i, g) = decode(h)?;
        let e = self.entries.get(i)?;
        if u64::from(e.generation) & GEN_MASK == u64::from(g) {
            e.obj.as_ref()
        } else {
            None
        }
    }

    /// Removes the object `h` names if `is_kind` accepts it.
    fn remove_if(&mut self, h: u64, is_kind: impl Fn(&T) -> bool) -> Option<T> {
        let (i, _) = decode(h)?;
        if !self.get(h).is_some_and(is_kind) {
            return None;
        }
        self.take(i)
    }

    /// Removes every object `pred` accepts.
    fn remove_all(&mut self, pred: impl Fn(&T) -> bool) -> Vec<T> {
        let hit: Vec<usize> = (0..self.entries.len()).filter(|&i| self.entries[i].obj.as_ref().is_some_and(&pred)).collect();
        hit.into_iter().filter_map(|i| self.take(i)).collect()
    }

    fn take(&mut self, i: usize) -> Option<T> {
        let e = self.entries.get_mut(i)?;
        let obj = e.obj.take()?;
        // Never 0 modulo the mask, so a handle value is never a small integer.
        e.generation = e.generation.wrapping_add(1);
        if u64::from(e.generation) & GEN_MASK == 0 {
            e.generation = e.generation.wrapping_add(1);
        }
        self.free.push(i as u32);
        Some(obj)
    }
}

static TABLE: RwLock<Slots<Obj>> = RwLock::new(Slots::new(MAX_ENTRIES));

fn read() -> std::sync::RwLockReadGuard<'static, Slots<Obj>> {
    TABLE.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> std::sync::RwLockWriteGuard<'static, Slots<Obj>> {
    TABLE.write().unwrap_or_else(|p| p.into_inner())
}

/// Bits of a handle's value that hold the generation (half a pointer).
const SHIFT: u32 = usize::BITS / 2;
const GEN_MASK: u64 = (1 << SHIFT) - 1;

/// A handle's value: `(index + 1) << SHIFT | generation` (generation modulo `1 << SHIFT`); never
/// 0, and it fits a pointer on 32- and 64-bit targets.
fn encode(index: u32, generation: u32) -> u64 {
    ((u64::from(index) + 1) << SHIFT) | (u64::from(generation) & GEN_MASK)
}

fn decode(h: u64) -> Option<(usize, u32)> {
    let index = (h >> SHIFT).checked_sub(1)?;
    Some((index as usize, (h & GEN_MASK) as u32))
}

/// Most entries the table holds: every index must fit the upper half of a pointer.
const MAX_ENTRIES: usize = (1usize << (usize::BITS - SHIFT)) - 2;

/// Stores `obj` and returns its handle value.
pub fn insert(obj: Obj) -> Result<u64, Failure> {
    write().insert(obj).map_err(|_| Failure::other("handle", format!("more than {MAX_ENTRIES} live handles")))
}

/// The session named by `h`.
pub fn session(h: u64) -> Result<Arc<SessionObj>, Failure> {
    match read().get(h) {
        Some(Obj::Session(s)) => Ok(s.clone()),
        _ => Err(Failure::handle("session")),
    }
}

/// The lease named by `h`.
pub fn lease(h: u64) -> Result<Arc<LeaseObj>, Failure> {
    match read().get(h) {
        Some(Obj::Lease(l)) => Ok(l.clone()),
        _ => Err(Failure::handle("lease")),
    }
}

/// The arena named by `h`.
pub fn arena(h: u64) -> Result<Arc<ArenaObj>, Failure> {
    match read().get(h) {
        Some(Obj::Arena(a)) => Ok(a.clone()),
        _ => Err(Failure::handle("arena")),
    }
}

/// The batch named by `h`.
pub fn batch(h: u64) -> Result<Arc<BatchObj>, Failure> {
    match read().get(h) {
        Some(Obj::Batch(b)) => Ok(b.clone()),
        _ => Err(Failure::handle("batch")),
    }
}

/// The model named by `h`.
pub fn model(h: u64) -> Result<Arc<ModelObj>, Failure> {
    match read().get(h) {
        Some(Obj::Model(m)) => Ok(m.clone()),
        _ => Err(Failure::handle("model")),
    }
}

/// The library named by `h`.
pub fn kernel(h: u64) -> Result<Arc<KernelObj>, Failure> {
    match read().get(h) {
        Some(Obj::Kernel(k)) => Ok(k.clone()),
        _ => Err(Failure::handle("library")),
    }
}

/// The library named by `h`, and the leases named by `leases` (one lock for all of them). A lease
/// named several times is looked up once: `index[i]` is where view `i`'s lease is in the list.
#[allow(clippy::type_complexity)]
pub fn kernel_and_leases<const N: usize>(
    h: u64,
    leases: impl Iterator<Item = u64>,
) -> Result<(Arc<KernelObj>, heapless::Vec<Arc<LeaseObj>, N>, [u8; N]), Failure> {
    let t = read();
    let k = match t.get(h) {
        Some(Obj::Kernel(k)) => k.clone(),
        _ => return Err(Failure::handle("library")),
    };
    let mut out: heapless::Vec<Arc<LeaseObj>, N> = heapless::Vec::new();
    let mut seen: heapless::Vec<u64, N> = heapless::Vec::new();
    let mut index = [0u8; N];
    for (i, lh) in leases.enumerate() {
        if i >= N {
            return Err(Failure::refused(format!("more than {N} buffers")));
        }
        if let Some(j) = seen.iter().position(|&s| s == lh) {
            index[i] = j as u8;
            continue;
        }
        match t.get(lh) {
            Some(Obj::Lease(l)) => {
                index[i] = out.len() as u8;
                // Capacity: at most one entry per view, and i < N.
                let _ = out.push(l.clone());
                let _ = seen.push(lh);
            }
            _ => {
                return Err(Failure::new(
                    crate::error::hexrpc_status::HEXRPC_ERR_HANDLE,
                    "handle",
                    format!("buffer {i}: not a live lease handle"),
                ))
            }
        }
    }
    Ok((k, out, index))
}

/// Removes the object `h` names if it is of the kind `is_kind` accepts (and, for a session,
/// every lease, arena and library of it), and returns what was removed, to be dropped by the
/// caller outside the lock: batches and libraries first, then leases, arenas, the session.
pub fn remove(h: u64, is_kind: fn(&Obj) -> bool, what: &'static str) -> Result<Vec<Obj>, Failure> {
    let mut t = write();
    let Some(taken) = t.remove_if(h, is_kind) else { return Err(Failure::handle(what)) };
    let mut removed = match &taken {
        Obj::Session(s) => t.remove_all(|o| match o {
            Obj::Lease(l) => Arc::ptr_eq(l.session(), s),
            Obj::Arena(a) => Arc::ptr_eq(a.session(), s),
            Obj::Kernel(k) => Arc::ptr_eq(k.session(), s),
            Obj::Batch(b) => Arc::ptr_eq(b.kernel().session(), s),
            Obj::Model(m) => Arc::ptr_eq(m.session(), s),
            Obj::Session(_) => false,
        }),
        _ => Vec::new(),
    };
    removed.push(taken);
    drop(t);
    removed.sort_by_key(|o| match o {
        Obj::Batch(_) | Obj::Model(_) => 0,
        Obj::Kernel(_) => 1,
        Obj::Lease(_) => 2,
        Obj::Arena(_) => 3,
        Obj::Session(_) => 4,
    });
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two kinds of object, as the C API's handles name sessions, leases and libraries.
    #[derive(Debug, PartialEq)]
    enum Kind {
        A(u32),
        B(String),
    }

    fn is_a(k: &Kind) -> bool {
        matches!(k, Kind::A(_))
    }

    #[test]
    fn handles_name_their_object_until_it_is_removed() {
        let mut t = Slots::new(16);
        let a = t.insert(Kind::A(1)).unwrap();
        let b = t.insert(Kind::B("b".into())).unwrap();
        assert_ne!(a, b);
        assert!(a != 0 && b != 0 && a >> SHIFT != 0, "never a small integer");
        assert_eq!(t.get(a), Some(&Kind::A(1)));
        assert_eq!(t.get(b), Some(&Kind::B("b".into())));
        assert_eq!(t.remove_if(a, is_a), Some(Kind::A(1)));
        assert_eq!(t.get(a), None, "removed");
        assert_eq!(t.remove_if(a, is_a), None, "removed twice");
        // The index is reused under a new generation: the old handle stays dead.
        let c = t.insert(Kind::A(3)).unwrap();
        assert_eq!(decode(c).unwrap().0, decode(a).unwrap().0);
        assert_ne!(c, a);
        assert_eq!(t.get(a), None);
        assert_eq!(t.get(c), Some(&Kind::A(3)));
    }

    #[test]
    fn a_handle_of_the_wrong_kind_is_refused_and_kept() {
        let mut t = Slots::new(16);
        let b = t.insert(Kind::B("kept".into())).unwrap();
        assert_eq!(t.remove_if(b, is_a), None);
        assert_eq!(t.get(b), Some(&Kind::B("kept".into())), "a wrong-kind close removes nothing");
        assert_eq!(t.remove_if(b, |k| !is_a(k)), Some(Kind::B("kept".into())));
    }

    #[test]
    fn forged_and_out_of_range_handles_name_nothing() {
        let mut t = Slots::new(16);
        let a = t.insert(Kind::A(7)).unwrap();
        for forged in [0, 1, GEN_MASK, a + 1, a - 1, a ^ (1 << SHIFT), encode(15, 1), encode(u32::MAX - 1, 1), u64::MAX] {
            assert_eq!(t.get(forged), None, "{forged:#x}");
            assert_eq!(t.remove_if(forged, |_| true), None, "{forged:#x}");
        }
        assert_eq!(t.get(a), Some(&Kind::A(7)));
    }

    #[test]
    fn the_generation_wraps_past_zero() {
        let mut t = Slots::new(4);
        t.insert(Kind::A(0)).unwrap();
        // Close to the wrap: the last generations before it, as after that many reuses. (The
        // handle of generation 1 made above would name the index again after the wrap, which is
        // the documented limit.)
        t.entries[0].generation = (GEN_MASK - 1) as u32;
        let mut old = Vec::new();
        for n in 1..=4 {
            let h = encode(0, t.entries[0].generation);
            assert_eq!(t.remove_if(h, |_| true), Some(Kind::A(n - 1)));
            let h = t.insert(Kind::A(n)).unwrap();
            assert_ne!(h & GEN_MASK, 0, "generation 0 is skipped");
            for &o in &old {
                assert_eq!(t.get(o), None, "an old handle names the new object");
            }
            assert_eq!(t.get(h), Some(&Kind::A(n)));
            old.push(h);
        }
        // After the wrap the generation counts from 1 again.
        assert_eq!(old.iter().map(|h| h & GEN_MASK).collect::<Vec<_>>(), [GEN_MASK, 1, 2, 3]);
    }

    #[test]
    fn a_full_table_gives_the_object_back() {
        let mut t = Slots::new(2);
        let a = t.insert(Kind::A(1)).unwrap();
        t.insert(Kind::A(2)).unwrap();
        assert_eq!(t.insert(Kind::A(3)), Err(Kind::A(3)));
        t.remove_if(a, is_a).unwrap();
        assert!(t.insert(Kind::A(4)).is_ok(), "a freed index is reused");
    }

    #[test]
    fn remove_all_takes_exactly_the_matching_objects() {
        let mut t = Slots::new(8);
        let hs: Vec<u64> =
            (0..6).map(|i| if i % 2 == 0 { t.insert(Kind::A(i)) } else { t.insert(Kind::B(i.to_string())) }.unwrap()).collect();
        let gone = t.remove_all(is_a);
        assert_eq!(gone, [Kind::A(0), Kind::A(2), Kind::A(4)]);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h).is_some(), i % 2 == 1);
        }
    }

    /// Lookups on several threads while others insert and remove, through one lock (the C API's
    /// shape): every handle a thread holds names its own object until that thread removes it.
    #[test]
    fn concurrent_insert_get_remove() {
        let t = RwLock::new(Slots::new(64));
        let rounds = if cfg!(miri) { 8 } else { 2000 };
        std::thread::scope(|s| {
            for id in 0..3u32 {
                let t = &t;
                s.spawn(move || {
                    for n in 0..rounds {
                        let h = t.write().unwrap().insert(Kind::A(id * 100_000 + n)).unwrap();
                        assert_eq!(t.read().unwrap().get(h), Some(&Kind::A(id * 100_000 + n)));
                        assert_eq!(t.write().unwrap().remove_if(h, is_a), Some(Kind::A(id * 100_000 + n)));
                        assert_eq!(t.read().unwrap().get(h), None);
                    }
                });
            }
        });
    }
}
