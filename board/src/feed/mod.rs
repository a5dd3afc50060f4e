//! The board as a consumer of a stream that lives on the host: the two-way protocol, and
//! both of its ends without I/O ([`Device`] and [`Host`]), so the firmware, `idem device`
//! and the link model in the tests run the same code.
//!
//! Frames are as the demo's ([`crate::wire`]): postcard, CRC-32, COBS, a `0x00` delimiter.
//!
//! **The device pulls.** A real nRF51 has a 6-byte receive FIFO, no DMA on its UART, and
//! the CPU stalls while the NVMC writes or erases (a page erase takes about 22 ms, some
//! 250 byte times at 115200 baud), and the micro:bit's USB bridge wires no flow control:
//! bytes that arrive while the device writes flash are lost. So the device asks for the
//! next batch ([`FromDevice::Pull`]) only when it is ready to receive it whole without
//! touching flash, and a batch fits its receive buffer. The host sends events only in
//! answer to a pull (and a batch again when asked again). The device asks again after
//! a silence ([`Device::on_silence`]): a lost pull or a lost batch costs one timeout.
//!
//! **The device's flash is the truth.** It announces where it resumes (read from its own
//! journals) at boot and on configuration; the host feeds from there. A frame that does
//! not decode is counted and dropped; a batch that does not start where the device reads
//! next is counted and dropped; nothing is applied twice by the protocol itself, and
//! what a replay does to a total is the store's business, as everywhere in idem.
//!
//! **The host grades only what it delivered.** [`Host`] checks every position the device
//! reports against the offsets it sent: a device that claims more (an offset applied or
//! durable that this host never delivered, a resume past the stream's end, a done before
//! the end or with another length) or less (a resume below a position it acknowledged
//! durable while its flash holds this stream: a lost checkpoint) is a [`HostError`]
//! naming the claim. A done is gradable only when this host delivered every offset of
//! the stream and the device acknowledged them all durable ([`Heard::Done`]); a device
//! that already held a prefix when this host first heard it (a restarted host or bridge)
//! ends unverified.
//!
//! **The device has its own id key.** It draws an [`IdKey`] at the first boot of its
//! storage (the firmware from the nRF51's RNG), keeps it in its feed record beside its
//! boot counter, and announces it in its boot frame; the host keys each event's message
//! id from the event's id bytes under it ([`Source::event`]), so a producer that does not
//! know the key cannot choose two ids the device's message-id store takes for one.
//!
//! Both ends speak [`VERSION`]; different versions refuse each other in one sentence.
//!
//! Its parts: the messages both ends exchange and how they go on the wire (`protocol`),
//! the device's end with its storage (`device`), and the host's end with the claims it
//! refuses (`host`). Everything public is here, at `idem_board::feed`.
//!
//! [`IdKey`]: idem_core::log::IdKey

mod device;
mod host;
mod protocol;

pub use device::{Device, FeedError, FeedLayout, FeedRecord, Reply};
pub use host::{Claim, Heard, Host, HostError, Source, Span};
pub use protocol::{
    DOMAIN, DeviceKey, DeviceReader, FROM_DEVICE_ENCODED, FROM_DEVICE_MAX, Failure, FromDevice,
    HostReader, Refusal, StoreId, StreamConfig, TO_DEVICE_ENCODED, TO_DEVICE_MAX, ToDevice,
    WireEvent, encode,
};

/// The protocol's version: a host and a device of different versions refuse each other.
/// Version 2: the boot frame carries the device's [`IdKey`]. Version 3: the link also
/// carries the modem's frames ([`crate::modem`]: the board pulls a broker's bytes).
///
/// [`IdKey`]: idem_core::log::IdKey
pub const VERSION: u16 = 3;

/// Events in one batch: a full batch is at most [`TO_DEVICE_MAX`] bytes on the wire.
pub const BATCH: usize = 8;

/// The message-id store's window on the device, and the producers the producer-seq
/// store remembers there: the registry's capacities ([`idem_payments::registry`]).
pub use idem_payments::registry::{PRODUCERS, WINDOW};

/// Pages the feed's storage takes: its record (2), the consumer position (4) and the
/// store (4).
pub const FEED_PAGES: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::log::IdKey;
    use idem_sim::flash::MemFlash;

    pub(super) const LAYOUT: FeedLayout = FeedLayout {
        start: 0,
        page: 1024,
    };

    pub(super) const KEY: IdKey = IdKey([7; 16]);

    pub(super) fn key() -> Option<IdKey> {
        Some(KEY)
    }

    pub(super) fn config(store: StoreId) -> StreamConfig {
        StreamConfig {
            stream: 7,
            store,
            checkpoint_every: 10,
            crash_after: None,
        }
    }

    #[test]
    fn another_version_is_refused_both_ways() {
        let mut flash = MemFlash::<10, 1024>::new();
        let (mut d, _) = Device::boot(&mut flash, LAYOUT, 1, 4096, key).unwrap();
        let r = d
            .handle(&mut flash, &ToDevice::Hello { version: 4 })
            .unwrap();
        let refusal = FromDevice::Refused(Refusal::Version { device: 3, host: 4 });
        assert_eq!(&r.send[..], &[refusal]);
        let mut host = Host::new(config(StoreId::Offset));
        let log = idem_payments::GeneratedLog {
            events: 3,
            amount: 1,
        };
        let boot = FromDevice::Boot {
            version: 4,
            boots: 1,
            stream: None,
            resume: 0,
            total: 0,
            key: DeviceKey(KEY),
        };
        let e = host.on_message(&boot, &log).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the device speaks idem's feed protocol version 4 and this host version 3: flash the firmware that matches this idem"
        );
    }
}
