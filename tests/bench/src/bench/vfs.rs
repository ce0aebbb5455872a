//! The virtual file table under `/bench/`: the board's device nodes and shell, the files a test
//! adds, paths made missing or unreadable, the open log; and how an `open` of a virtual path
//! resolves.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use hexrpc_drivers::{Errno, Fd, FileStat, OpenFlags};

use super::Bench;
use crate::account::OpenRecord;
use crate::state::{Access, DeviceKind, FdEntry, FdObj, IonClient, RpcFile, State, VEntry, VNode};
use crate::upstream;

fn errno(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error())
}

fn reservation(name: &str) -> Result<OwnedFd, Errno> {
    rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(errno)
}

pub(super) fn is_virtual(path: &str) -> bool {
    path == "/bench" || path.starts_with("/bench/")
}

impl Bench {
    // ---- virtual files ----

    /// Puts a read-only file at `path` (which must be under `/bench/`; other paths are the real
    /// filesystem). Replaces what was there.
    pub fn add_file(&self, path: &str, bytes: impl Into<Vec<u8>>) {
        self.lock().vfs.insert(path.into(), VEntry { node: VNode::File(Arc::new(bytes.into())), access: Access::Present });
    }

    /// Removes a virtual file or device node.
    pub fn remove_file(&self, path: &str) {
        self.lock().vfs.remove(path);
    }

    fn set_access(&self, path: &str, a: Access) {
        if let Some(e) = self.lock().vfs.get_mut(path) {
            e.access = a;
        }
    }

    /// Makes a virtual path look missing (`ENOENT`) until [`set_present`](Self::set_present).
    pub fn set_missing(&self, path: &str) {
        self.set_access(path, Access::Missing);
    }

    /// Makes a virtual path unreadable (`EACCES` on open; `stat` still works, mode 0).
    pub fn set_unreadable(&self, path: &str) {
        self.set_access(path, Access::Unreadable);
    }

    /// Undoes [`set_missing`](Self::set_missing) / [`set_unreadable`](Self::set_unreadable).
    pub fn set_present(&self, path: &str) {
        self.set_access(path, Access::Present);
    }

    /// Every `open` so far, in order.
    pub fn open_log(&self) -> Vec<OpenRecord> {
        self.lock().open_log.clone()
    }

    /// True if `path` was ever passed to `open` (whatever the result).
    pub fn was_opened(&self, path: &str) -> bool {
        self.lock().open_log.iter().any(|r| r.path == path)
    }

    pub(super) fn vstat(&self, st: &State, path: &str) -> Result<FileStat, Errno> {
        match st.vfs.get(path) {
            Some(VEntry { access: Access::Missing, .. }) => Err(Errno::ENOENT),
            Some(VEntry { node: VNode::Device(DeviceKind::Fastrpc), .. }) if st.dsp_down => Err(Errno::ENOENT),
            Some(e) => {
                let perm = if e.access == Access::Unreadable { 0 } else { 0o444 };
                Ok(match &e.node {
                    VNode::File(d) => FileStat { mode: FileStat::S_IFREG | perm, nlink: 1, size: d.len() as u64, ..Default::default() },
                    VNode::Device(k) => FileStat {
                        mode: FileStat::S_IFCHR | if perm == 0 { 0 } else { 0o666 },
                        nlink: 1,
                        rdev: match k {
                            DeviceKind::Ion => (10 << 8) | 60,
                            DeviceKind::Rpc => 240 << 8,
                            DeviceKind::DmaHeap => 241 << 8,
                            DeviceKind::Fastrpc => (10 << 8) | 61,
                        },
                        ..Default::default()
                    },
                })
            }
            None => {
                let dir = format!("{}/", path.trim_end_matches('/'));
                if st.vfs.iter().any(|(k, e)| k.starts_with(&dir) && e.access != Access::Missing) {
                    Ok(FileStat { mode: FileStat::S_IFDIR | 0o555, nlink: 2, ..Default::default() })
                } else {
                    Err(Errno::ENOENT)
                }
            }
        }
    }

    /// `open` of the FastRPC node of a [`BENCH_LINUX`](hexrpc_bsp::BENCH_LINUX) bench: the real
    /// driver's `fastrpc_device_open` (called without the bench's lock: the driver may call back
    /// into the bench). `None` for every other path and bench.
    #[cfg(feature = "linux")]
    pub(super) fn open_linux(&self, path: &str) -> Option<Result<Fd, Errno>> {
        let kern = self.sh.linux.as_ref()?;
        {
            let st = self.lock();
            if !matches!(st.vfs.get(path).map(|e| &e.node), Some(VNode::Device(DeviceKind::Fastrpc))) {
                return None;
            }
            if let Err(e) = self.vstat(&st, path) {
                return Some(Err(e));
            }
            if st.vfs.get(path).is_some_and(|e| e.access == Access::Unreadable) {
                return Some(Err(Errno::EACCES));
            }
        }
        let node = path.rsplit('/').next().unwrap_or(path);
        let file = match kern.open(node) {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        let mut st = self.lock();
        let id = st.id();
        let epoch = st.epoch;
        // fastrpc_device_open took an SMMU session (the driver's own count refuses the ninth);
        // the bench counts it too, for its snapshot.
        st.rpc_files.insert(id, RpcFile::upstream(epoch, self.sh.cfg.board.channel));
        kern.adopt(id, file);
        if let Some(n) = st.sessions.get_mut(self.sh.cfg.board.channel as usize) {
            *n += 1;
        }
        match reservation("hexrpc-bench-node") {
            Ok(owned) => {
                let n = owned.as_raw_fd();
                st.fds.insert(n, FdEntry { _owned: owned, obj: FdObj::Rpc(id) });
                Some(Ok(Fd(n)))
            }
            Err(e) => {
                st.rpc_files.remove(&id);
                drop(st);
                kern.release(id);
                Some(Err(e))
            }
        }
    }

    #[cfg(not(feature = "linux"))]
    pub(super) fn open_linux(&self, _: &str) -> Option<Result<Fd, Errno>> {
        None
    }

    pub(super) fn open_virtual(&self, st: &mut State, path: &str, flags: OpenFlags) -> Result<Fd, Errno> {
        let stat = self.vstat(st, path)?;
        if st.vfs.get(path).is_some_and(|e| e.access == Access::Unreadable) {
            return Err(Errno::EACCES);
        }
        let obj = match st.vfs.get(path).map(|e| &e.node) {
            Some(VNode::Device(DeviceKind::Ion)) => {
                let id = st.id();
                st.ion_clients.insert(id, IonClient::default());
                FdObj::Ion(id)
            }
            Some(VNode::Device(DeviceKind::Rpc)) => {
                let id = st.id();
                st.rpc_files.insert(id, RpcFile::downstream());
                FdObj::Rpc(id)
            }
            Some(VNode::Device(DeviceKind::DmaHeap)) => FdObj::Heap,
            Some(VNode::Device(DeviceKind::Fastrpc)) => FdObj::Rpc(upstream::open_file(&self.sh, st)?),
            Some(VNode::File(d)) => {
                if flags.read_write {
                    return Err(Errno::EROFS);
                }
                FdObj::File(d.clone())
            }
            None => {
                if flags.read_write || !stat.is_dir() {
                    return Err(Errno::EISDIR);
                }
                FdObj::Dir(path.trim_end_matches('/').to_string())
            }
        };
        let owned = match reservation("hexrpc-bench-node") {
            Ok(o) => o,
            Err(e) => {
                match obj {
                    FdObj::Ion(id) => drop(st.ion_clients.remove(&id)),
                    FdObj::Rpc(id) => st.free_rpc_file(id),
                    _ => {}
                }
                return Err(e);
            }
        };
        let n = owned.as_raw_fd();
        st.fds.insert(n, FdEntry { _owned: owned, obj });
        Ok(Fd(n))
    }

    /// Where `open_at(dir, name)` resolves: a virtual path, a real directory descriptor, or an
    /// error (the virtual file table has no symbolic links, so a virtual walk is a path join).
    pub(super) fn at_target(&self, st: &State, dir: Option<Fd>, name: &str) -> Result<AtTarget, Errno> {
        // As openat: an absolute path ignores the directory.
        match dir {
            _ if name.starts_with('/') && is_virtual(name) => Ok(AtTarget::Virtual(name.to_string())),
            _ if name.starts_with('/') => Ok(AtTarget::Real(None)),
            None => Ok(AtTarget::Real(None)),
            Some(d) => match st.fds.get(&d.0).map(|e| &e.obj) {
                Some(FdObj::Dir(base)) => Ok(AtTarget::Virtual(format!("{base}/{name}"))),
                Some(_) => Err(Errno::ENOTDIR),
                None if st.passthrough.contains(&d.0) => Ok(AtTarget::Real(Some(d))),
                None => Err(Errno::EBADF),
            },
        }
    }
}

/// What [`Bench::at_target`] resolved.
pub(super) enum AtTarget {
    /// A path of the virtual file table.
    Virtual(String),
    /// The real OS, relative to this passed-through directory (or the current directory).
    Real(Option<Fd>),
}

/// The path a real descriptor refers to, for the open log (best effort).
pub(super) fn real_path(fd: Fd) -> String {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.0))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("fd {}", fd.0))
}
