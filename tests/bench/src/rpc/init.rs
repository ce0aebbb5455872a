//! INIT / INIT_ATTRS: the channel open (or join) every INIT starts with, the user PD's creation
//! and its DSP process.

use std::time::Instant;

use hexrpc_drivers::adsprpc::*;
use hexrpc_drivers::{aee, Errno};

use super::message::{as_result, eperm, kernel_message, Guard};
use crate::account::{CallKind, DspCallKind};
use crate::elf;
use crate::state::{DspProcess, Shared, State};
use crate::user;

/// What the simulated DSP answers to a create/attach for an identity that already has a live
/// process (Qualcomm: "considered a bad request"; the real code is not known).
pub(crate) const IDENTITY_IN_USE: i32 = aee::AEE_EBADSTATE;

/// `fastrpc_channel_open`, the first step of every INIT (`fastrpc_init_process`); a reading of
/// the source, not the driver run. Under the driver's global `smd_mutex` (a channel open
/// waiting here holds it, and a close's session free waits for it): no session (`fl->sctx`) is
/// -1; while the subsystem is down after a restart `ENOTCONN`; then the file's restart counter
/// is refreshed (a stale file is revived) and `fl->refcount` set, whatever follows. An open
/// channel is joined by `kref_get_unless_zero` (a file that INITs twice takes two references
/// and its close puts one back: the channel can then never close). A closed one is opened
/// (`fastrpc_glink_register`, `fastrpc_glink_open`): the glink link must be up and the port
/// DISCONNECTED, and the driver then always waits for the port's `GLINK_CONNECTED` up to
/// `RPC_TIMEOUT` ([`BenchConfig::port_connect_timeout`](crate::BenchConfig::port_connect_timeout)):
/// a failed open costs the whole wait and is -1; a connect that never comes leaves the port
/// CONNECTING for good ([`ChannelReopen`](crate::ChannelReopen)); right after the last close
/// the port is DISCONNECTING ([`BenchConfig::close_ack_delay`](crate::BenchConfig::close_ack_delay))
/// and an open fails the same way, after the same wait. A working open `kref_init`s
/// the channel. Only the board's channel has a DSP behind it (any other is -1, a bench choice).
fn channel_open<'a>(sh: &'a Shared, st: Guard<'a>, file: u64) -> (Guard<'a>, Result<(), Errno>) {
    let mut st = st;
    while st.smd_busy {
        st = sh.wait(st);
    }
    let (epoch, down) = (st.epoch, st.dsp_down);
    let Some(f) = st.rpc_files.get_mut(&file) else { return (st, Err(Errno::EBADF)) };
    if !f.session || f.cid != Some(sh.cfg.board.channel) {
        return (st, eperm());
    }
    if down {
        return (st, Err(Errno::ENOTCONN));
    }
    f.session_epoch = Some(epoch);
    f.holds_ref = true;
    f.channel_epoch = Some(epoch);
    // kref_get_unless_zero (4.9's atomic arithmetic: any non-zero value is incremented).
    let got = st.chan_kref != 0;
    if got {
        st.chan_kref += 1;
        if st.channel_open == Some(epoch) {
            return (st, Ok(()));
        }
    }
    let link_up = st.link_up_at.is_none_or(|t| Instant::now() >= t);
    // After the last close the port is DISCONNECTING until glink acknowledges the close:
    // glink_open refuses it (and changes nothing), the wait below still runs.
    let disconnected = st.channel_closed_at.is_none_or(|t| Instant::now() >= t + sh.cfg.close_ack_delay);
    let port_opened = link_up && !st.port_stuck && disconnected;
    if port_opened && !st.stuck_pending {
        st.chan_kref = 1;
        st.channel_open = Some(epoch);
        return (st, Ok(()));
    }
    // No early exit: the wait for the port's completion runs whether glink_open failed or not.
    st.smd_busy = true;
    let end = Instant::now() + sh.cfg.port_connect_timeout;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        st = sh.wait_for(st, end - now);
    }
    st.smd_busy = false;
    if port_opened {
        // glink_open set CONNECTING and nothing ever resets it.
        st.stuck_pending = false;
        st.port_stuck = true;
    }
    st.counts.channel_open_failures += 1;
    sh.cv.notify_all();
    (st, eperm())
}

/// INIT / INIT_ATTRS (`fastrpc_init_process`); a reading of the source, not the driver run. The
/// kernel never refuses a second INIT on a file: each one opens or joins the channel again
/// ([`channel_open`], a channel reference its close never puts back) and sends its message; the
/// DSP refuses a create for an identity with a live process (`AEE_EBADSTATE` on the bench).
/// CREATE allocates the process's init memory, `ALIGN(max(3 MiB, 4 * filelen), 1 MiB)`, before
/// the message and stores it over `fl->init_mem`: a second CREATE leaks the first for good
/// ([`Snapshot::init_buffers`](crate::Snapshot::init_buffers)); `init.mem` non-zero is `EINVAL`.
/// ATTACH / ATTACH_SENSORS send their message and create no process. A restart during the
/// message makes it +104 (the invoke's tail).
pub(super) unsafe fn init<'a>(sh: &'a Shared, st: Guard<'a>, file: u64, kind: CallKind, a: u64) -> (Guard<'a>, Result<i32, Errno>) {
    let mut st = st;
    // SAFETY: passed on from the caller.
    let init: Option<fastrpc_ioctl_init> = unsafe {
        if kind == CallKind::RpcInit {
            user::read_struct(a)
        } else {
            user::read_struct::<fastrpc_ioctl_init_attrs>(a).map(|i| i.init)
        }
    };
    let Some(init) = init else { return (st, eperm()) };
    if init.filelen >= INIT_FILELEN_MAX || init.memlen >= INIT_MEMLEN_MAX {
        return (st, eperm());
    }
    let (st2, opened) = channel_open(sh, st, file);
    st = st2;
    if let Err(e) = opened {
        return (st, Err(e));
    }
    let epoch = st.epoch;
    let shell = match init.flags {
        FASTRPC_INIT_CREATE => {
            let image = if init.filelen == 0 {
                Vec::new()
            } else {
                if !user::range_ok(init.file, init.filelen as u64) {
                    return (st, eperm());
                }
                let Some(buf) = st.dmabuf(init.filefd) else { return (st, eperm()) };
                let end = init.file + init.filelen as u64;
                let covered =
                    st.host_maps.iter().any(|(&ad, m)| m.buf == Some(buf) && init.file >= ad as u64 && end <= ad as u64 + m.len as u64);
                if !covered {
                    return (st, eperm());
                }
                // SAFETY: the range lies inside a live shared mapping made through this bench
                // (checked above under the lock that `munmap` also takes).
                match unsafe { user::copy_from_user(init.file, init.filelen as usize) } {
                    Some(b) => b,
                    None => return (st, eperm()),
                }
            };
            if init.mem != 0 {
                return (st, Err(Errno::EINVAL));
            }
            let memlen = u64::from(init.filelen.saturating_mul(4)).max(3 << 20).next_multiple_of(1 << 20);
            // `fastrpc_buf_alloc` maps the init memory into the file's context bank.
            if !st.iova_room(file, memlen, sh.cfg.session_iova) {
                return (st, Err(Errno::ENOMEM));
            }
            let s = &mut *st;
            if let Some(f) = s.rpc_files.get_mut(&file) {
                if f.init_mem.replace(memlen).is_some() {
                    s.init_leaked += 1;
                }
            }
            Some(image)
        }
        FASTRPC_INIT_ATTACH | FASTRPC_INIT_ATTACH_SENSORS => None,
        FASTRPC_INIT_CREATE_STATIC => {
            if init.filelen == 0 {
                return (st, Ok(0));
            }
            None
        }
        _ => return (st, Err(Errno::ENOTTY)),
    };
    let (st2, replaced) = kernel_message(sh, st, DspCallKind::CreateProcess);
    st = st2;
    if let Some(v) = replaced {
        return (st, as_result(v));
    }
    if st.epoch != epoch {
        return (st, Ok(Errno::ECONNRESET.0));
    }
    // The DSP keys processes by the identity in the message (tgid, with the session bit after
    // SETMODE(SESSION)): a second create for a live identity is a bad request.
    let identity = st.rpc_files.get(&file).map_or(0, |f| f.tgid);
    if st.process_of_identity(identity).is_some() {
        return (st, Ok(IDENTITY_IN_USE));
    }
    if let Some(image) = &shell {
        if elf::check_hexagon_elf(image).is_err() {
            return (st, Ok(aee::AEE_EBADELF));
        }
    }
    if matches!(init.flags, FASTRPC_INIT_ATTACH | FASTRPC_INIT_ATTACH_SENSORS) {
        return (st, Ok(0));
    }
    let pid = new_process(&mut st, file);
    if let Some(f) = st.rpc_files.get_mut(&file) {
        f.proc_id = Some(pid);
    }
    (st, Ok(0))
}

/// A fresh DSP process for FastRPC file `file`; returns its id.
pub(crate) fn new_process(st: &mut State, file: u64) -> u64 {
    let identity = st.rpc_files.get(&file).map_or(0, |f| f.tgid);
    let pid = st.id();
    st.procs.insert(
        pid,
        DspProcess {
            file,
            identity,
            alive: true,
            listener_init: false,
            apps_std: None,
            libs: Default::default(),
            hap: Vec::new(),
            lease_maps: Vec::new(),
            queue: Default::default(),
            inflight: Default::default(),
            next_dva: 0x2000_0000,
            next_lib: 0x0001_0000,
            shell: None,
        },
    );
    pid
}
