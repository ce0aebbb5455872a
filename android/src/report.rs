//! `hexrpc report`: one file to attach to a bug. A tar archive holding the probe's JSON, the
//! selftest's JSON, the kernel version, the kernel log lines about the DSP drivers and the
//! versions of everything involved.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;

/// Kernel log lines with a word that is one of these, or starts with one of them followed by `_`
/// or a digit (`ion_alloc`, `adsprpc0`), case-insensitive, are kept; and SELinux denials (`avc:`).
pub const DMESG_KEYWORDS: &[&str] = &[
    "adsprpc",
    "fastrpc",
    "ion",
    "msm_ion",
    "cdsp",
    "adsp",
    "subsys-restart",
    "subsys-pil-tz",
    "smmu",
    "arm-smmu",
    "qdsp",
    "hexagon",
    "remoteproc",
    "hexrpc",
];

/// Whether a kernel log message is about the DSP stack.
pub fn relevant(msg: &str) -> bool {
    let lower = msg.to_ascii_lowercase();
    if lower.contains("avc:") {
        return true;
    }
    lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).any(|word| {
        DMESG_KEYWORDS.iter().any(|k| {
            word == *k || word.strip_prefix(k).is_some_and(|rest| rest.starts_with('_') || rest.starts_with(|c: char| c.is_ascii_digit()))
        })
    })
}
/// Most kernel log lines kept (the newest).
pub const MAX_DMESG_LINES: usize = 1000;

/// The relevant kernel log lines from /dev/kmsg (read without blocking), or why there are none.
pub fn dmesg_lines() -> String {
    let flags = (rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32;
    let mut kmsg = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open("/dev/kmsg") {
        Ok(f) => f,
        Err(e) => {
            return format!("# /dev/kmsg unreadable: {e}\n# run as root, or attach the output of: dmesg | grep -i -e adsprpc -e fastrpc -e ion -e cdsp -e smmu\n")
        }
    };
    let mut kept = std::collections::VecDeque::new();
    let mut buf = vec![0u8; 8192];
    // One record per read; the end of the buffer is EAGAIN. Records overwritten while reading
    // give EPIPE once; the read goes on. Bounded by a record count in case the log never ends.
    for _ in 0..200_000 {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                let msg = rec.split_once(';').map(|(_, m)| m).unwrap_or(&rec).trim_end().to_string();
                if relevant(&msg) {
                    if kept.len() == MAX_DMESG_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(crate::io::escape(&msg));
                }
            }
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(_) => break,
        }
    }
    let mut out = format!("# kernel log lines naming {} or avc: (newest {MAX_DMESG_LINES})\n", DMESG_KEYWORDS.join(", "));
    for l in kept {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn file_or(path: &str, limit: u64) -> String {
    match crate::io::read_text(std::path::Path::new(path), limit) {
        Ok(t) => t,
        Err(e) => format!("# {path}: {e}\n"),
    }
}

/// The versions: hexrpc, the kernel, the OS, the board's model.
pub fn versions() -> String {
    let mut out = format!("hexrpc {} ({} {})\n", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH, std::env::consts::OS);
    out.push_str(&format!(
        "device-tree model: {}\n",
        crate::probe::device_tree_model().map(|m| m.trim_end_matches(['\0', '\n']).to_string()).unwrap_or_else(|| "unreadable".into())
    ));
    for p in ["/VERSION", "/system/build.prop"] {
        if std::path::Path::new(p).exists() {
            let text = file_or(p, 1 << 20);
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| p != "/system/build.prop" || l.starts_with("ro.build.") || l.starts_with("ro.product."))
                .take(40)
                .collect();
            out.push_str(&format!("{p}:\n  {}\n", lines.join("\n  ")));
        }
    }
    out.push_str("/etc/os-release:\n");
    out.push_str(&file_or("/etc/os-release", 64 * 1024));
    out
}

/// A ustar archive of `(name, bytes)` members, owned by root, mode 0644, at `mtime`.
pub fn tar(members: &[(&str, Vec<u8>)], mtime: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        let mut h = [0u8; 512];
        let octal = |field: &mut [u8], v: u64| {
            let s = format!("{:0width$o}", v, width = field.len() - 1);
            field[..s.len()].copy_from_slice(s.as_bytes());
        };
        let n = name.as_bytes();
        h[..n.len().min(100)].copy_from_slice(&n[..n.len().min(100)]);
        octal(&mut h[100..108], 0o644);
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], data.len() as u64);
        octal(&mut h[136..148], mtime);
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[265..269].copy_from_slice(b"root");
        h[297..301].copy_from_slice(b"root");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_log_filter() {
        assert!(relevant("adsprpc: fastrpc_mmap_create: ERROR: adsp address 0"));
        assert!(relevant("ion_alloc: heap 25 failed"));
        assert!(relevant("audit: avc:  denied  { ioctl } for comm=\"hexrpc\""));
        assert!(relevant("subsys-restart: __subsystem_restart_dev(): Restart sequence requested for cdsp"));
        assert!(!relevant("Linux version 6.1 (builder) #1 SMP"));
        assert!(!relevant("audit: initializing netlink subsys (disabled)"));
        assert!(!relevant("x86/PAT: Configuration [0-7]: WB  WC"));
        assert!(!relevant("NX (Execute Disable) protection: active"));
    }

    #[test]
    fn tar_is_read_by_tar() {
        let t = tar(&[("a.txt", b"hello\n".to_vec()), ("dir-less/b.json", vec![b'x'; 700])], 1_700_000_000);
        assert_eq!(t.len() % 512, 0);
        let dir = std::env::temp_dir().join(format!("hexrpc-tar-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.tar");
        std::fs::write(&f, &t).unwrap();
        let list = std::process::Command::new("tar").arg("-tvf").arg(&f).output().unwrap();
        assert!(list.status.success(), "{list:?}");
        let text = String::from_utf8(list.stdout).unwrap();
        assert!(text.contains("a.txt") && text.contains("dir-less/b.json") && text.contains("700"), "{text}");
        let x = std::process::Command::new("tar").arg("-xOf").arg(&f).arg("a.txt").output().unwrap();
        assert_eq!(x.stdout, b"hello\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
