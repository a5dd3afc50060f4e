//! The layout helpers on a flash whose driver is async only: regions and layouts from its
//! own `ERASE_SIZE`, and a journal on its async steps alone.

use embassy_futures::block_on;
use embedded_storage_async::nor_flash::{ErrorType, NorFlash as AsyncNorFlash, ReadNorFlash};
use idem_core::journal::{Journal, Region};
use idem_core::persist::Layout;
use idem_core::testing::flash::{FlashError, MemFlash};

/// An async-only driver of 4 pages of 4 KiB, 8-byte units: no blocking `NorFlash`.
struct AsyncOnly(MemFlash<4, 4096, 8>);

impl ErrorType for AsyncOnly {
    type Error = FlashError;
}

impl ReadNorFlash for AsyncOnly {
    const READ_SIZE: usize = 1;
    async fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        ReadNorFlash::read(&mut self.0, offset, bytes).await
    }
    fn capacity(&self) -> usize {
        4 * 4096
    }
}

impl AsyncNorFlash for AsyncOnly {
    const WRITE_SIZE: usize = 8;
    const ERASE_SIZE: usize = 4096;
    async fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        AsyncNorFlash::erase(&mut self.0, from, to).await
    }
    async fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        AsyncNorFlash::write(&mut self.0, offset, bytes).await
    }
}

#[test]
fn regions_and_layouts_come_from_an_async_flashs_erase_size() {
    let region = Region::of_pages_async::<AsyncOnly>(1, 2);
    assert_eq!(
        region,
        Region {
            start: 4096,
            pages: 2
        }
    );
    assert_eq!(region.end_async::<AsyncOnly>(), 12_288);
    assert_eq!(
        region.next_async::<AsyncOnly>(1),
        Region {
            start: 12_288,
            pages: 1
        }
    );
    let layout = Layout::from_pages_async::<AsyncOnly>(0, 2, 2, 7);
    assert_eq!(
        (layout.positions, layout.sink.start),
        (Region { start: 0, pages: 2 }, 8192)
    );
    let one = Layout::one_region_async::<AsyncOnly>(2, 2, 7);
    assert_eq!(
        (one.positions.pages, one.sink),
        (
            0,
            Region {
                start: 8192,
                pages: 2
            }
        )
    );
    // A journal lives there on the async steps alone.
    let mut flash = AsyncOnly(MemFlash::new());
    let (mut j, _) = block_on(Journal::<u32>::open_async(&mut flash, layout.sink, 9)).unwrap();
    block_on(j.append_async(&mut flash, &41)).unwrap();
    let (_, found) = block_on(Journal::<u32>::open_async(&mut flash, layout.sink, 9)).unwrap();
    assert_eq!(found, Some(41));
    // The sink's first page: its 24-byte header and one 16-byte slot.
    assert_eq!(flash.0.page_bytes_written(), &[0, 0, 40, 0]);
}
