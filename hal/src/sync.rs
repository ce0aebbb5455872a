//! Locks and waits of the session. With `std` they block (futex-based `std::sync`: a thread that
//! waits sleeps, and a waiting writer holds new readers back); without `std` (one core, no
//! threads to wait for) they are spin locks and a wait is a spin.

#[cfg(feature = "std")]
mod imp {
    extern crate std;
    use core::time::Duration;
    use std::sync::{PoisonError, RwLockReadGuard, RwLockWriteGuard};

    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);
    pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) const fn new(v: T) -> Self {
            Mutex(std::sync::Mutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }
    }

    pub(crate) struct RwLock<T>(std::sync::RwLock<T>);
    pub(crate) type ReadGuard<'a, T> = RwLockReadGuard<'a, T>;

    impl<T> RwLock<T> {
        pub(crate) const fn new(v: T) -> Self {
            RwLock(std::sync::RwLock::new(v))
        }
        pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }
        pub(crate) fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
            match self.0.try_read() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// A condition variable for one [`Mutex`].
    pub(crate) struct Condvar(std::sync::Condvar);

    impl Condvar {
        pub(crate) const fn new() -> Self {
            Condvar(std::sync::Condvar::new())
        }
        pub(crate) fn wait_timeout<'a, T>(&self, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
            match self.0.wait_timeout(g, d) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            }
        }
        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    /// Sleeps the calling thread.
    pub(crate) fn sleep(d: Duration) {
        std::thread::sleep(d);
    }

    /// A monotonic clock in milliseconds.
    pub(crate) struct Clock(std::time::Instant);

    impl Clock {
        pub(crate) fn start() -> Self {
            Clock(std::time::Instant::now())
        }
        pub(crate) fn elapsed(&self) -> Duration {
            self.0.elapsed()
        }
    }
}

#[cfg(not(feature = "std"))]
mod imp {
    use core::time::Duration;

    pub(crate) struct Mutex<T>(spin::Mutex<T>);
    pub(crate) type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) const fn new(v: T) -> Self {
            Mutex(spin::Mutex::new(v))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut()
        }
    }

    pub(crate) struct RwLock<T>(spin::RwLock<T>);
    pub(crate) type ReadGuard<'a, T> = spin::RwLockReadGuard<'a, T>;

    impl<T> RwLock<T> {
        pub(crate) const fn new(v: T) -> Self {
            RwLock(spin::RwLock::new(v))
        }
        pub(crate) fn read(&self) -> spin::RwLockReadGuard<'_, T> {
            self.0.read()
        }
        pub(crate) fn try_read(&self) -> Option<spin::RwLockReadGuard<'_, T>> {
            self.0.try_read()
        }
        pub(crate) fn write(&self) -> spin::RwLockWriteGuard<'_, T> {
            self.0.write()
        }
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut()
        }
    }

    /// Without threads to wait for, a timed wait is one spin: callers re-check in a loop.
    pub(crate) struct Condvar;

    impl Condvar {
        pub(crate) const fn new() -> Self {
            Condvar
        }
        pub(crate) fn wait_timeout<'a, T>(&self, g: MutexGuard<'a, T>, _d: Duration) -> MutexGuard<'a, T> {
            core::hint::spin_loop();
            g
        }
        pub(crate) fn notify_all(&self) {}
    }

    /// No clock without std: a sleep is a no-op.
    pub(crate) fn sleep(_d: Duration) {}

    /// Without a clock, time never passes (policies bound attempts instead).
    pub(crate) struct Clock;

    impl Clock {
        pub(crate) fn start() -> Self {
            Clock
        }
        pub(crate) fn elapsed(&self) -> Duration {
            Duration::ZERO
        }
    }
}

pub(crate) use imp::*;
