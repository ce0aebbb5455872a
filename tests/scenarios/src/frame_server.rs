//! A frame server on the bench: a second, real process standing in for openpilot's VisionIPC,
//! which allocates a camera buffer from ION (a downstream board) or a dma-buf heap (upstream
//! boards), shares its descriptor over a UNIX socket with `SCM_RIGHTS`, and writes frames into it
//! on request. The client (the test process) imports the descriptor into a session
//! ([`Session::import`](hexrpc_hal::Session::import)).
//!
//! The server is the `bench-frame-server` binary of this crate ([`serve`]); [`FrameServer`] is
//! the client's end. The protocol on the socket: the server connects, sends the buffer's length
//! (8 bytes, little-endian) with its descriptor attached; then it answers each 5-byte command
//! (an opcode and a little-endian `u32`) with one byte, `k`:
//!
//! * `F n`: write frame `n` ([`frame_byte`]) over the whole buffer;
//! * `C 0`: close the server's own descriptor of the buffer (it keeps writing through its
//!   mapping);
//! * `X 0`: exit at once, without answering or releasing anything (a crash mid-stream);
//! * `Q 0`: answer, release everything and exit.
//!
//! Where this is not a device: each process has a bench of its own, so the server's ION or
//! heap is its own simulated kernel; what crosses the socket is the real memfd behind its
//! dma-buf ([`Bench::export_descriptor`](hexrpc_bench::Bench::export_descriptor)), which the
//! client's bench takes in as a dma-buf (`hexrpc_bench` module `foreign`). The buffer's memory is
//! shared between the processes for real, as a dma-buf's is.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use hexrpc_bench::{Bench, BenchConfig};
use hexrpc_bsp::{Allocator, Board, BENCH, BENCH_UPSTREAM};
use hexrpc_drivers::dma_heap::{self, HeapFd};
use hexrpc_drivers::{ion, Fd, Mapping, OpenFlags, Prot, Syscalls};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

/// Byte `i` of frame `n`: every frame differs from the next in every byte, and no frame is a
/// constant.
pub fn frame_byte(n: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(7).wrapping_add(n.wrapping_mul(13)) as u8
}

/// Frame `n`, `len` bytes.
pub fn frame(n: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| frame_byte(n, i)).collect()
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The client's end of a frame server process.
pub struct FrameServer {
    child: Option<Child>,
    stream: UnixStream,
    fd: Option<OwnedFd>,
    len: usize,
    dir: PathBuf,
}

impl FrameServer {
    /// Starts `exe` (the `bench-frame-server` binary) serving a `len`-byte buffer from
    /// `allocator`, and receives its descriptor.
    pub fn spawn(exe: &Path, allocator: Allocator, len: usize) -> std::io::Result<FrameServer> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hexrpc-frames-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("socket");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let which = match allocator {
            Allocator::Ion49 => "ion",
            Allocator::DmaHeap => "heap",
        };
        let spawn = |cmd: &mut Command| cmd.arg(which).arg(&path).arg(len.to_string()).spawn();
        listener.set_nonblocking(true)?;
        let mut child = spawn(&mut Command::new(exe))?;
        let mut emulated = false;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if let Some(status) = child.try_wait()? {
                // An aarch64 test binary run under qemu-user on a machine without binfmt: the
                // kernel cannot exec the aarch64 server (the child exits 127 before it
                // connects); it runs through the same emulator, as cargo's runner runs the test.
                if cfg!(target_arch = "aarch64") && !emulated && status.code() == Some(127) {
                    let qemu = std::env::var_os("PATH")
                        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("qemu-aarch64")).find(|q| q.is_file()))
                        .ok_or_else(|| io_err("the frame server could not be executed and qemu-aarch64 is not on PATH"))?;
                    child = spawn(Command::new(qemu).args(["-L", "/usr/aarch64-linux-gnu"]).arg(exe))?;
                    emulated = true;
                    continue;
                }
                return Err(io_err(format!("the frame server exited ({status}) before it connected")));
            }
            if std::time::Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io_err("the frame server did not connect within 60 s"));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        stream.set_nonblocking(false)?;
        let mut server = FrameServer { child: Some(child), stream, fd: None, len, dir };
        let mut header = [0u8; 8];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(&server.stream, &mut [IoSliceMut::new(&mut header)], &mut cmsg, RecvFlags::CMSG_CLOEXEC)
            .map_err(std::io::Error::from)?;
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = m {
                for fd in fds {
                    server.fd.get_or_insert(fd);
                }
            }
        }
        if got.bytes != 8 || u64::from_le_bytes(header) != len as u64 || server.fd.is_none() {
            return Err(io_err(format!("the frame server sent {} header bytes, length {}", got.bytes, u64::from_le_bytes(header))));
        }
        Ok(server)
    }

    /// The descriptor received from the server: this process's number for the server's buffer,
    /// which the test owns and imports.
    pub fn fd(&self) -> Fd {
        use std::os::fd::AsRawFd;
        Fd(self.fd.as_ref().map_or(-1, |f| f.as_raw_fd()))
    }

    /// Closes the received descriptor (an importer's duplicate keeps the buffer alive).
    pub fn close_received(&mut self) {
        self.fd = None;
    }

    /// The buffer's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a server's buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn command(&mut self, op: u8, arg: u32) -> std::io::Result<()> {
        let mut c = [op, 0, 0, 0, 0];
        c[1..].copy_from_slice(&arg.to_le_bytes());
        self.stream.write_all(&c)?;
        let mut k = [0u8; 1];
        self.stream.read_exact(&mut k)?;
        if k[0] != b'k' {
            return Err(io_err(format!("the frame server answered {:?} to {:?}", k[0], op as char)));
        }
        Ok(())
    }

    /// Has the server write frame `n` into the buffer; returns once it is written.
    pub fn write_frame(&mut self, n: u32) -> std::io::Result<()> {
        self.command(b'F', n)
    }

    /// Has the server close its own descriptor of the buffer (it keeps its mapping).
    pub fn close_server_fd(&mut self) -> std::io::Result<()> {
        self.command(b'C', 0)
    }

    /// Has the server exit at once, mid-stream, and waits for it.
    pub fn kill_mid_stream(mut self) -> std::io::Result<ExitStatus> {
        let c = [b'X', 0, 0, 0, 0];
        self.stream.write_all(&c)?;
        self.child.take().ok_or_else(|| io_err("no child"))?.wait()
    }

    /// Stops the server in order and waits for it.
    pub fn stop(mut self) -> std::io::Result<ExitStatus> {
        self.command(b'Q', 0)?;
        self.child.take().ok_or_else(|| io_err("no child"))?.wait()
    }
}

impl Drop for FrameServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A test that failed before stopping it: the server must not outlive the test.
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server's buffer: its descriptor (until `C`), the ION handle (ION boards) and the mapping.
struct ServedBuffer<'b> {
    map: Mapping<&'b Bench>,
    fd: Option<hexrpc_drivers::OwnedFd>,
}

fn allocate<'b>(bench: &'b Bench, board: &Board, len: usize) -> std::io::Result<ServedBuffer<'b>> {
    let node = bench.open(board.ion_path, OpenFlags::READ_WRITE).map_err(io_err)?;
    let fd = match board.allocator {
        Allocator::Ion49 => {
            let mut data = ion::ion_allocation_data {
                len: len as u64,
                align: board.alloc_align,
                heap_id_mask: board.heap_mask(),
                flags: board.heap_flags,
                handle: 0,
                _pad0: 0,
            };
            ion::alloc(bench, node.raw(), &mut data).map_err(io_err)?;
            let fd = ion::share(bench, node.raw(), data.handle).map_err(io_err)?;
            // The share fd holds the buffer (as on ION 4.9): the handle can go.
            ion::free(bench, node.raw(), data.handle).map_err(io_err)?;
            fd
        }
        Allocator::DmaHeap => dma_heap::alloc(bench, HeapFd::from_raw(node.raw()), len as u64).map_err(io_err)?,
    };
    bench.close(node).map_err(io_err)?;
    let map = Mapping::map_shared(bench, fd.raw(), len, Prot::ReadWrite).map_err(io_err)?;
    Ok(ServedBuffer { map, fd: Some(fd) })
}

/// A frame server binary's `main`: [`serve`] on the process's arguments; an error is printed
/// after `name` and exits with status 1.
pub fn main_of(name: &str) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = serve(&args) {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}

/// The `bench-frame-server` process: `ALLOCATOR SOCKET LEN` (allocator `ion` or `heap`). See the
/// module docs for the protocol.
pub fn serve(args: &[String]) -> std::io::Result<()> {
    let [which, socket, len] = args else {
        return Err(io_err("usage: bench-frame-server ion|heap SOCKET LEN"));
    };
    let board: &'static Board = match which.as_str() {
        "ion" => &BENCH,
        "heap" => &BENCH_UPSTREAM,
        other => return Err(io_err(format!("unknown allocator {other}"))),
    };
    let len: usize = len.parse().map_err(io_err)?;
    let bench = Bench::with_config(BenchConfig::for_board(board));
    let mut buffer = allocate(&bench, board, len)?;
    let mut stream = UnixStream::connect(socket)?;
    {
        let real = bench.export_descriptor(buffer.fd.as_ref().map_or(Fd(-1), |f| f.raw())).map_err(io_err)?;
        let fds = [real.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        if !cmsg.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io_err("no room for the descriptor"));
        }
        let header = (len as u64).to_le_bytes();
        rustix::net::sendmsg(&stream, &[IoSlice::new(&header)], &mut cmsg, SendFlags::empty()).map_err(std::io::Error::from)?;
    }
    let mut frame_buf = vec![0u8; len];
    loop {
        let mut c = [0u8; 5];
        if stream.read_exact(&mut c).is_err() {
            // The client went away: release everything and end.
            break;
        }
        let arg = u32::from_le_bytes([c[1], c[2], c[3], c[4]]);
        match c[0] {
            b'F' => {
                for (i, b) in frame_buf.iter_mut().enumerate() {
                    *b = frame_byte(arg, i);
                }
                buffer.map.write_at(0, &frame_buf).map_err(|_| io_err("frame write out of range"))?;
            }
            b'C' => {
                if let Some(fd) = buffer.fd.take() {
                    bench.close(fd).map_err(io_err)?;
                }
            }
            b'X' => std::process::exit(0),
            b'Q' => {
                stream.write_all(b"k")?;
                break;
            }
            other => return Err(io_err(format!("unknown command {other}"))),
        }
        stream.write_all(b"k")?;
    }
    let ServedBuffer { map, fd } = buffer;
    drop(map);
    if let Some(fd) = fd {
        bench.close(fd).map_err(io_err)?;
    }
    Ok(())
}
