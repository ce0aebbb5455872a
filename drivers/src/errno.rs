use core::fmt;

/// A Linux `errno` value (positive), as the kernel reports a failed system call.
///
/// Any value is representable: codes this crate does not name print as `errno N`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident = $val:literal, $text:literal;)*) => {
        impl Errno {
            $(
                #[doc = $text]
                pub const $name: Errno = Errno($val);
            )*

            /// The symbolic name (`"EINVAL"`), if this crate knows the code.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some(stringify!($name)),)*
                    _ => None,
                }
            }

            /// A short description, if this crate knows the code.
            pub const fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($val => Some($text),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "operation not permitted (adsprpc: also any faulting copy from user memory)";
    ENOENT = 2, "no such file or directory";
    ENOEXEC = 8, "exec format error";
    EINTR = 4, "interrupted system call";
    EIO = 5, "input/output error";
    EBADF = 9, "bad file descriptor";
    EAGAIN = 11, "resource temporarily unavailable";
    ENOMEM = 12, "out of memory";
    EACCES = 13, "permission denied";
    EFAULT = 14, "bad address";
    EBUSY = 16, "device or resource busy";
    EEXIST = 17, "file exists";
    ENODEV = 19, "no such device";
    ENOTDIR = 20, "not a directory";
    EISDIR = 21, "is a directory";
    EINVAL = 22, "invalid argument";
    EMFILE = 24, "too many open files";
    ENOTTY = 25, "inappropriate ioctl for device";
    EFBIG = 27, "file too large";
    ENOSPC = 28, "no space left on device";
    ESPIPE = 29, "illegal seek";
    EROFS = 30, "read-only file system";
    ERANGE = 34, "result out of range";
    ECHRNG = 44, "channel number out of range (fastrpc: an unknown DSP domain)";
    ENAMETOOLONG = 36, "file name too long";
    ENOSYS = 38, "function not implemented (also: an ioctl qemu-user does not know)";
    ELOOP = 40, "too many levels of symbolic links";
    EOVERFLOW = 75, "value too large for defined data type";
    EPIPE = 32, "broken pipe";
    ENOTSUP = 95, "operation not supported";
    ECONNRESET = 104, "connection reset (adsprpc: the DSP restarted)";
    ENOTCONN = 107, "transport endpoint is not connected";
    ETIMEDOUT = 110, "timed out";
    ECONNREFUSED = 111, "connection refused";
    ECANCELED = 125, "operation canceled";
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.name(), self.description()) {
            (Some(n), Some(d)) => write!(f, "{n} ({d})"),
            _ => write!(f, "errno {}", self.0),
        }
    }
}

impl core::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_unknown_codes() {
        assert_eq!(Errno::ENOTTY.name(), Some("ENOTTY"));
        assert_eq!(Errno(25), Errno::ENOTTY);
        assert_eq!(Errno(4242).name(), None);
        extern crate std;
        use std::format;
        assert_eq!(format!("{}", Errno(4242)), "errno 4242");
        assert_eq!(format!("{:?}", Errno::ECONNRESET), "ECONNRESET");
    }
}
