//! The handle table: every handle the C API gives out is an (index, generation) pair in one
//! process-wide table, never a pointer to memory, so a freed, closed, forged or wrong-kind handle
//! is found to be dead and reported, never dereferenced. A call takes a shared reference
//! ([`Arc`]) to what it uses and releases the table lock before any system call, so closing a
//! handle while another thread uses it is safe: the object goes when its last user returns.

use std::sync::{Arc, RwLock};

use crate::error::Failure;
use crate::objects::{KernelObj, LeaseObj, SessionObj};

/// What a handle names.
#[derive(Clone)]
pub enum Obj {
    /// A session.
    Session(Arc<SessionObj>),
    /// A lease.
    Lease(Arc<LeaseObj>),
    /// A library with its kernel's signature.
    Kernel(Arc<KernelObj>),
}

struct Entry {
    generation: u32,
    obj: Option<Obj>,
}

#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    free: Vec<u32>,
}

static TABLE: RwLock<Table> = RwLock::new(Table { entries: Vec::new(), free: Vec::new() });

fn read() -> std::sync::RwLockReadGuard<'static, Table> {
    TABLE.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> std::sync::RwLockWriteGuard<'static, Table> {
    TABLE.write().unwrap_or_else(|p| p.into_inner())
}

/// A handle's value: `(index + 1) << 32 | generation`; never 0.
fn encode(index: u32, generation: u32) -> u64 {
    ((u64::from(index) + 1) << 32) | u64::from(generation)
}

fn decode(h: u64) -> Option<(usize, u32)> {
    let index = (h >> 32).checked_sub(1)?;
    Some((index as usize, h as u32))
}

/// Stores `obj` and returns its handle value.
pub fn insert(obj: Obj) -> u64 {
    let mut t = write();
    if let Some(i) = t.free.pop() {
        let e = &mut t.entries[i as usize];
        e.obj = Some(obj);
        encode(i, e.generation)
    } else {
        let i = t.entries.len() as u32;
        t.entries.push(Entry { generation: 1, obj: Some(obj) });
        encode(i, 1)
    }
}

fn lookup(t: &Table, h: u64) -> Option<&Obj> {
    let (i, g) = decode(h)?;
    let e = t.entries.get(i)?;
    if e.generation == g {
        e.obj.as_ref()
    } else {
        None
    }
}

/// The session named by `h`.
pub fn session(h: u64) -> Result<Arc<SessionObj>, Failure> {
    match lookup(&read(), h) {
        Some(Obj::Session(s)) => Ok(s.clone()),
        _ => Err(Failure::handle("session")),
    }
}

/// The lease named by `h`.
pub fn lease(h: u64) -> Result<Arc<LeaseObj>, Failure> {
    match lookup(&read(), h) {
        Some(Obj::Lease(l)) => Ok(l.clone()),
        _ => Err(Failure::handle("lease")),
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
    let k = match lookup(&t, h) {
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
        match lookup(&t, lh) {
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
/// every lease and library of it), and returns what was removed, to be dropped by the caller
/// outside the lock: libraries first, then leases, then the session.
pub fn remove(h: u64, is_kind: fn(&Obj) -> bool, what: &'static str) -> Result<Vec<Obj>, Failure> {
    let mut t = write();
    let Some((i, g)) = decode(h) else { return Err(Failure::handle(what)) };
    let ok = t.entries.get(i).is_some_and(|e| e.generation == g && e.obj.as_ref().is_some_and(is_kind));
    if !ok {
        return Err(Failure::handle(what));
    }
    let mut removed = Vec::new();
    let Some(taken) = take(&mut t, i) else { return Err(Failure::handle(what)) };
    if let Obj::Session(s) = &taken {
        let children: Vec<usize> = t
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| match &e.obj {
                Some(Obj::Lease(l)) => Arc::ptr_eq(l.session(), s),
                Some(Obj::Kernel(k)) => Arc::ptr_eq(k.session(), s),
                _ => false,
            })
            .map(|(j, _)| j)
            .collect();
        removed.extend(children.into_iter().filter_map(|j| take(&mut t, j)));
    }
    removed.push(taken);
    drop(t);
    removed.sort_by_key(|o| match o {
        Obj::Kernel(_) => 0,
        Obj::Lease(_) => 1,
        Obj::Session(_) => 2,
    });
    Ok(removed)
}

fn take(t: &mut Table, i: usize) -> Option<Obj> {
    let e = t.entries.get_mut(i)?;
    let obj = e.obj.take()?;
    e.generation = e.generation.wrapping_add(1).max(1);
    t.free.push(i as u32);
    Some(obj)
}
