//! ioctl request numbers, computed the way the kernel's `asm-generic/ioctl.h` does.
//!
//! A request is `dir << 30 | size << 16 | group << 8 | nr` (aarch64 and x86-64 both use the
//! generic encoding). Every request in this crate is declared in one line from (group, number,
//! argument type), so changing a struct's size changes the request number, as it does in C.
//!
//! A declared request is an [`Ioctl<T>`]: the number together with the argument type it was
//! computed from (as rustix's `ReadWriteOpcode<GROUP, NR, T>`). The typed calls of this crate
//! take an `Ioctl<T>` and a `&mut T`, so safe code cannot send a number with an argument of
//! another type or size. [`Ioctl::raw`] gives the number for the seam's
//! [`Syscalls::ioctl`](crate::Syscalls::ioctl) and for tables compared with the kernel headers.

use core::fmt;
use core::marker::PhantomData;

/// No data transfer (`_IOC_NONE`).
pub const IOC_NONE: u32 = 0;
/// Userspace writes, the kernel reads (`_IOC_WRITE`).
pub const IOC_WRITE: u32 = 1;
/// The kernel writes, userspace reads (`_IOC_READ`).
pub const IOC_READ: u32 = 2;

const NRBITS: u32 = 8;
const TYPEBITS: u32 = 8;
const SIZEBITS: u32 = 14;
const NRSHIFT: u32 = 0;
const TYPESHIFT: u32 = NRSHIFT + NRBITS;
const SIZESHIFT: u32 = TYPESHIFT + TYPEBITS;
const DIRSHIFT: u32 = SIZESHIFT + SIZEBITS;

/// `_IOC(dir, type, nr, size)`. Fails the build (in a `const`) if `size` does not fit 14 bits.
pub const fn ioc(dir: u32, group: u8, nr: u8, size: usize) -> u32 {
    assert!(size < (1 << SIZEBITS), "ioctl argument too large for the size field");
    (dir << DIRSHIFT) | ((size as u32) << SIZESHIFT) | ((group as u32) << TYPESHIFT) | ((nr as u32) << NRSHIFT)
}

/// `_IOWR(type, nr, T)`: the argument is copied in and back out.
pub const fn iowr<T>(group: u8, nr: u8) -> u32 {
    ioc(IOC_READ | IOC_WRITE, group, nr, core::mem::size_of::<T>())
}

/// `_IOW(type, nr, T)`: the argument is only copied in.
pub const fn iow<T>(group: u8, nr: u8) -> u32 {
    ioc(IOC_WRITE, group, nr, core::mem::size_of::<T>())
}

/// `_IOR(type, nr, T)`: the argument is only copied out.
pub const fn ior<T>(group: u8, nr: u8) -> u32 {
    ioc(IOC_READ, group, nr, core::mem::size_of::<T>())
}

/// `_IO(type, nr)`: no argument.
pub const fn io(group: u8, nr: u8) -> u32 {
    ioc(IOC_NONE, group, nr, 0)
}

/// An ioctl request number bound to the type of its argument: the number's size field is
/// `size_of::<T>()`, computed at compile time by the constructors. `_IO` requests (no argument)
/// are `Ioctl<()>`.
pub struct Ioctl<T> {
    nr: u32,
    _arg: PhantomData<fn() -> T>,
}

impl<T> Ioctl<T> {
    const fn new(dir: u32, group: u8, nr: u8) -> Self {
        Ioctl { nr: ioc(dir, group, nr, core::mem::size_of::<T>()), _arg: PhantomData }
    }

    /// `_IOWR(group, nr, T)`: the argument is copied in and back out.
    pub const fn iowr(group: u8, nr: u8) -> Self {
        Self::new(IOC_READ | IOC_WRITE, group, nr)
    }

    /// `_IOW(group, nr, T)`: the argument is only copied in.
    pub const fn iow(group: u8, nr: u8) -> Self {
        Self::new(IOC_WRITE, group, nr)
    }

    /// `_IOR(group, nr, T)`: the argument is only copied out.
    pub const fn ior(group: u8, nr: u8) -> Self {
        Self::new(IOC_READ, group, nr)
    }

    /// The request number as the kernel header computes it.
    pub const fn raw(self) -> u32 {
        self.nr
    }
}

impl Ioctl<()> {
    /// `_IO(group, nr)`: no argument.
    pub const fn io(group: u8, nr: u8) -> Self {
        Self::new(IOC_NONE, group, nr)
    }
}

impl<T> Clone for Ioctl<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ioctl<T> {}
impl<T> PartialEq for Ioctl<T> {
    fn eq(&self, other: &Self) -> bool {
        self.nr == other.nr
    }
}
impl<T> Eq for Ioctl<T> {}
impl<T> fmt::Debug for Ioctl<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ioctl({:#010x}: {})", self.nr, core::any::type_name::<T>())
    }
}

/// `_IOC_DIR(request)`.
pub const fn dir(request: u32) -> u32 {
    request >> DIRSHIFT
}
/// `_IOC_TYPE(request)`: the group byte.
pub const fn group(request: u32) -> u8 {
    (request >> TYPESHIFT) as u8
}
/// `_IOC_NR(request)`.
pub const fn nr(request: u32) -> u8 {
    (request >> NRSHIFT) as u8
}
/// `_IOC_SIZE(request)`: the argument size the caller claims.
pub const fn size(request: u32) -> usize {
    ((request >> SIZESHIFT) & ((1 << SIZEBITS) - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let r = ioc(IOC_READ | IOC_WRITE, b'R', 7, 32);
        assert_eq!(r, 0xC020_5207);
        assert_eq!(dir(r), 3);
        assert_eq!(group(r), b'R');
        assert_eq!(nr(r), 7);
        assert_eq!(size(r), 32);
        assert_eq!(io(b'R', 4), 0x0000_5204);
        assert_eq!(iow::<u32>(b'A', 1), 0x4004_4101);
        assert_eq!(ior::<u64>(b'A', 2), 0x8008_4102);
    }

    #[test]
    fn typed_requests_carry_the_argument_size() {
        const RW: Ioctl<[u8; 32]> = Ioctl::iowr(b'R', 7);
        assert_eq!(RW.raw(), 0xC020_5207);
        assert_eq!(Ioctl::<u32>::iow(b'A', 1).raw(), 0x4004_4101);
        assert_eq!(Ioctl::<u64>::ior(b'A', 2).raw(), 0x8008_4102);
        assert_eq!(Ioctl::io(b'R', 4).raw(), 0x0000_5204);
        assert_eq!(size(Ioctl::<[u8; 24]>::iowr(b'M', 0).raw()), 24);
    }
}
