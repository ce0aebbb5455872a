//! How the runtime plugs into the HAL: a HAL [`BufferView`] is a [`LaunchBuffer`], and the
//! reverse service is the [`ImageRegistry`] a session publishes library images in.

use hexrpc_drivers::{Fd, Syscalls};
use hexrpc_hal::{BufferView, ImageRegistry, LibraryImage};

use crate::reverse::ImageBytes;

use crate::launch::LaunchBuffer;
use crate::reverse::ReverseService;

impl LaunchBuffer for BufferView<'_> {
    fn share_fd(&self) -> Fd {
        self.fd()
    }
    fn lease_len(&self) -> u64 {
        BufferView::lease_len(self) as u64
    }
    fn view_offset(&self) -> u64 {
        self.offset() as u64
    }
    fn view_len(&self) -> u64 {
        self.len() as u64
    }
    fn lease_id(&self) -> u32 {
        BufferView::lease_id(self)
    }
}

impl<S: Syscalls + Sync> ImageRegistry for ReverseService<'_, S> {
    fn publish(&self, name: &str, image: LibraryImage) -> bool {
        let bytes = match image {
            LibraryImage::Static(b) => ImageBytes::Borrowed(b),
            #[cfg(feature = "std")]
            LibraryImage::Shared(b) => ImageBytes::Shared(b),
        };
        match self.register_image(name, bytes) {
            Ok(()) => true,
            Err(e) => {
                log::warn!("publishing library image {name}: {e:?}");
                false
            }
        }
    }

    fn withdraw(&self, name: &str) {
        if let Err(e) = self.unregister_image(name) {
            log::warn!("withdrawing library image {name}: {e:?}");
        }
    }
}
