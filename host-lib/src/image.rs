//! Flash images on disk: a raw NOR flash in a file, with the same strict rules as the
//! core's in-memory flash, behind a small header that says what the image holds.
//!
//! Layout of an image file:
//!
//! ```text
//! 0..512     header: "IDEMFLSH", format version, page size, page count, the run it
//!            belongs to (JSON: scenario, store, events, checkpoint interval, window,
//!            pages, and for `mqtt consume` the session: protocol, broker, client
//!            id, topic filter, QoS and where the identifiers are kept), the image's
//!            message-id key (16 bytes at 344), a CRC-32C of all that (at 380), one
//!            erase counter per page (from 384), and a word of marks (at 508) that
//!            runs set and none clears: where an MQTT session's promise broke
//! 512..      the flash: page count x page size bytes, as a chip would hold them
//!            (pages of 1 KiB, a micro:bit's; of 64 KiB for `mqtt consume`)
//! then       for `mqtt consume`, the log of the ids its receiver applied: lines of
//!            text, zeros after the last, in steps of 64 KiB written ahead (`IdsArea`)
//! ```
//!
//! The header is written once, through a temporary file (created exclusively under an
//! unpredictable name, `files::temporary_beside`) linked into place, so a run killed
//! while creating an image leaves no half-written one. A missing file is created
//! erased, with a key drawn from the operating system; a file of the wrong size, with a
//! bad header, or made for another run is refused and left untouched, and so is a path
//! that is not a regular file (checked before it is opened: a named pipe never blocks).
//! An open image is locked (`flock`): one process writes it, or any number read it.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use idem_core::log::IdKey;
use idem_lab::error::usage;
use idem_payments::registry::StoreKind;

mod flash;
mod header;
mod ids;
mod pages;
pub use flash::{FileFlash, FileFlashError};
use header::{Header, create};
pub use pages::Pages;

/// Bytes of the header before the flash.
pub const HEADER: u64 = 512;
const MAGIC: &[u8; 8] = b"IDEMFLSH";
/// Version 5: an `mqtt consume` image's flash in pages of 64 KiB, and its log of applied
/// ids in the image file itself, after the flash, so that one sync makes a group's ids
/// and records durable (version 4 kept the log in a file of its own, synced apart, and
/// the flash in 1 KiB pages). Version 4: an MQTT session's identity in fields of its own (version 3 joined client
/// id and topic in one string, which two sessions could share, without the broker or
/// the QoS), and the word of marks. Version 3 added the image's own message-id key;
/// version 2 a header checksum and journal records that carry what the recovery
/// cross-check needs (images of version 1 hold records this idem does not read). An
/// older image is refused, never migrated: a version 3 MQTT image does not say which
/// broker or QoS it was made for, nor whether a run on it saw the promise break.
const VERSION: u32 = 5;
/// CRC-32C of the header's bytes before it (the erase counters after it change).
const HEADER_CRC_AT: usize = 380;
const META_AT: usize = 24;
const META_MAX: usize = 320;
/// The image's [`IdKey`], after the longest description.
const KEY_AT: usize = META_AT + META_MAX;
const COUNTERS_AT: u64 = 384;
/// The word of marks: bits that runs set and none clears, outside the checksum.
pub(crate) const MARKS_AT: u64 = HEADER - 4;
/// The default page size: a micro:bit v1 (nRF51) flash page.
pub const PAGE: usize = 1024;
/// The page of an `mqtt consume` image: its receiver's journal enters a page (a sync
/// before its erase and one after its header) once every 64 KiB, about every 500 records
/// of the naive store, where a group of up to 20 records takes one sync. A chip's page
/// is what it is; a file's is a choice.
pub const MQTT_PAGE: usize = 64 * 1024;
/// The step in which an image's log of applied ids is written ahead (zeros), so that
/// the sync of a group's lines almost never has a file size to make durable too.
pub const IDS_STEP: u64 = 64 * 1024;
/// Pages in a scenario's image: the consumer's position journal (4) and the store's
/// journal (4).
pub const PAGES: u32 = 8;
/// The most pages an image holds (one erase counter each in the header).
pub const MAX_PAGES: u32 = ((MARKS_AT - COUNTERS_AT) / 4) as u32;

fn default_pages() -> u32 {
    PAGES
}

/// What run an image belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The scenario's name.
    pub scenario: String,
    /// The store's name.
    pub store: String,
    /// Events in the log.
    pub events: u64,
    /// The checkpoint interval.
    pub checkpoint_every: u64,
    /// The message-id window.
    pub window: usize,
    /// Pages of flash in the image.
    #[serde(default = "default_pages")]
    pub pages: u32,
    /// The MQTT session an `mqtt consume` image belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mqtt: Option<MqttSession>,
}

/// The MQTT session an `mqtt consume` image is bound to, each part a field of its own:
/// an image is resumed only by the same session, since the identifiers it holds are
/// that session's packet identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MqttSession {
    /// The protocol: `3.1.1`.
    pub protocol: String,
    /// The broker's address, as given to `--broker`.
    pub broker: String,
    /// The client identifier, under which the broker keeps the session.
    pub client_id: String,
    /// The topic filter subscribed to.
    pub filter: String,
    /// The QoS subscribed at.
    pub qos: u8,
    /// Where the QoS 2 identifiers are kept: `flash` or `ram`.
    pub identifiers: String,
}

impl Meta {
    /// One line for messages: `the offset store of ddia (100 events, checkpoint every 10)`.
    pub fn describe(&self) -> String {
        if let Some(m) = &self.mqtt {
            return format!(
                "the {} store of the MQTT session of client {} on {} at {}",
                self.store, m.client_id, m.filter, m.broker
            );
        }
        let window = if StoreKind::from_name(&self.store) == Some(StoreKind::MessageId) {
            format!(", window {}", self.window)
        } else {
            String::new()
        };
        format!(
            "the {} store of {} ({} events, checkpoint every {}{window})",
            self.store, self.scenario, self.events, self.checkpoint_every
        )
    }

    /// Pages of flash the run needs: a scenario's image is laid out as the simulated
    /// device is (8 pages: the position journal, then the store's), a `kafka consume`
    /// image has what it recorded (5 pages a partition), and so does an `mqtt consume`
    /// image (its receiver's journal). The one rule for an image's
    /// size, applied when it is created and when it is opened; `None` when that is not
    /// 2 to [`MAX_PAGES`].
    pub fn pages_needed(&self) -> Option<u32> {
        let pages = if self.scenario.starts_with("kafka:") || self.mqtt.is_some() {
            self.pages
        } else {
            PAGES
        };
        (2..=MAX_PAGES).contains(&pages).then_some(pages)
    }

    /// The size of the image's pages: [`MQTT_PAGE`] for an `mqtt consume` image, else
    /// [`PAGE`].
    pub fn page(&self) -> usize {
        if self.mqtt.is_some() { MQTT_PAGE } else { PAGE }
    }

    /// Whether the image keeps a log of applied ids after its flash (`mqtt consume`).
    pub fn has_ids(&self) -> bool {
        self.mqtt.is_some()
    }

    /// The fields in which `self` (an image's) and `run` (a run's) differ, in words:
    /// `pages 10 in the image, 15 in this run`.
    pub fn differences(&self, run: &Self) -> String {
        let mut out = Vec::new();
        let mut field = |name: &str, image: String, run: String| {
            if image != run {
                out.push(format!("{name} {image} in the image, {run} in this run"));
            }
        };
        field("scenario", self.scenario.clone(), run.scenario.clone());
        field("store", self.store.clone(), run.store.clone());
        field("events", self.events.to_string(), run.events.to_string());
        field(
            "checkpoint interval",
            self.checkpoint_every.to_string(),
            run.checkpoint_every.to_string(),
        );
        field("window", self.window.to_string(), run.window.to_string());
        field("pages", self.pages.to_string(), run.pages.to_string());
        let session = |m: &Option<MqttSession>| {
            m.as_ref().map_or([const { String::new() }; 6], |m| {
                [
                    m.protocol.clone(),
                    m.broker.clone(),
                    m.client_id.clone(),
                    m.filter.clone(),
                    m.qos.to_string(),
                    m.identifiers.clone(),
                ]
            })
        };
        let names = [
            "protocol",
            "broker",
            "client id",
            "topic filter",
            "QoS",
            "identifiers in",
        ];
        for ((name, image), run) in names
            .iter()
            .zip(session(&self.mqtt))
            .zip(session(&run.mqtt))
        {
            field(name, image, run);
        }
        out.join(", ")
    }

    /// Refuses a run whose description does not fit an image's header (an MQTT
    /// session's broker, client id and filter share its 320 bytes).
    pub fn fits(&self) -> anyhow::Result<()> {
        let len = serde_json::to_vec(self)?.len();
        if len > META_MAX {
            return Err(usage(format!(
                "{} takes {len} bytes to describe, past the {META_MAX} an image's header holds: shorten the client id or the topic filter",
                self.describe()
            )));
        }
        Ok(())
    }

    /// A 32-bit tag for the journals' page headers, derived from everything in `self`.
    pub fn tag(&self) -> u32 {
        let text = serde_json::to_string(self).unwrap_or_default();
        let id = idem_core::log::MessageId::keyed(&IdKey::PUBLIC, text.as_bytes()).0;
        (id ^ (id >> 32)) as u32
    }
}

/// The bytes of a journal region of an image's flash.
pub fn bytes(r: idem_core::journal::Region) -> std::ops::Range<u32> {
    r.start..r.start + r.pages * PAGE as u32
}

/// `--sync`: when the image's writes reach the disk. A write lands in the page cache at
/// once; a host power cut or kernel crash keeps any subset of the unsynced ones, in any
/// order, one possibly torn. The modes and their rules are the simulator's
/// ([`idem_sim::sync`]), which `sim/tests/page_cache.rs` checks against that model.
pub use idem_sim::sync::SyncMode;

/// An image opened from disk: its flash and what it belongs to.
#[derive(Debug)]
pub struct Image {
    /// The flash.
    pub flash: FileFlash,
    /// The run it belongs to.
    pub meta: Meta,
    /// Where it is.
    pub path: PathBuf,
    /// The image's own message-id key.
    key: IdKey,
}

impl Image {
    /// The key under which this image hashes message ids from outside (Kafka record
    /// keys, ids in event files) with [`idem_core::log::MessageId::keyed`]: drawn from
    /// the operating system when the image was created and kept in its header, so every
    /// rerun on the image uses the same one. Secret: a producer who does not know it
    /// cannot choose two ids that collide. (Only `kafka consume` reads ids from outside
    /// into an image so far; the scenarios' ids are idem's own, under the public key.)
    pub fn id_key(&self) -> IdKey {
        self.key
    }

    /// Opens the image at `path` (for writing too when `writable`), refusing anything
    /// that is not a complete image of this format, and a path that is not a regular
    /// file (before opening it).
    pub fn open(path: &Path, writable: bool) -> anyhow::Result<Self> {
        let name = path.display();
        let file = crate::files::open_regular(path, writable, "a flash image")?;
        lock(&file, path, writable)?;
        let len = file.metadata()?.len();
        let header = Header::read(&file, len, path)?;
        let meta = header.meta(path)?;
        let (pages, page) = (header.word(16), meta.page());
        let expected = HEADER + u64::from(pages) * page as u64;
        // The log of ids after the flash: at least its first step (a kill while it grows
        // may leave part of a later one, zeros written ahead).
        let (fits, log) = match meta.has_ids() {
            true => (
                len >= expected + IDS_STEP,
                format!(", and its log of ids at least {IDS_STEP} bytes"),
            ),
            false => (len == expected, String::new()),
        };
        if !fits {
            let what = if len < expected + (if meta.has_ids() { IDS_STEP } else { 0 }) {
                "truncated"
            } else {
                "too long"
            };
            return Err(usage(format!(
                "{name} is {what}: {len} bytes where an image of {pages} pages of {page} bytes is {expected}{log}; it was left untouched"
            )));
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&header.0[KEY_AT..KEY_AT + 16]);
        let erases = (0..pages)
            .map(|p| header.word(COUNTERS_AT as usize + 4 * p as usize))
            .collect();
        let marks = header.word(MARKS_AT as usize);
        Ok(Self {
            flash: FileFlash::new(file, (pages, page), erases, marks, len)
                .map_err(|e| anyhow::anyhow!("reading {name}: {e}"))?,
            meta,
            path: path.to_owned(),
            key: IdKey(key),
        })
    }

    /// Opens the image at `path` for `meta`'s run, creating an erased one when the file
    /// does not exist. An image made for another run is refused, naming what differs.
    pub fn open_or_create(path: &Path, meta: &Meta) -> anyhow::Result<Self> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path, meta)?,
            Ok(m) if m.file_type().is_symlink() && !path.exists() => {
                return Err(usage(format!(
                    "{} is a symbolic link to a file that does not exist; it was left untouched",
                    path.display()
                )));
            }
            _ => {}
        }
        let image = Self::open(path, true)?;
        if let (Some(_), Some(_)) = (&image.meta.mqtt, &meta.mqtt)
            && image.meta != *meta
        {
            if image.meta.mqtt == meta.mqtt && image.meta.pages != meta.pages {
                // The session's own image, laid out by an idem whose journal had
                // another geometry.
                return Err(usage(format!(
                    "{} was laid out by another version of idem ({} pages of {} bytes, where this one lays out {}); it was left untouched: start a new image",
                    path.display(),
                    image.meta.pages,
                    image.meta.page(),
                    meta.pages
                )));
            }
            return Err(usage(format!(
                "{} belongs to another MQTT session: {}; it was left untouched",
                path.display(),
                image.meta.differences(meta)
            )));
        }
        if image.meta != *meta {
            return Err(usage(format!(
                "{} holds {}, not {}: {}; it was left untouched",
                path.display(),
                image.meta.describe(),
                meta.describe(),
                image.meta.differences(meta)
            )));
        }
        Ok(image)
    }
}

/// Takes the image's advisory lock for this process (shared to read, exclusive to
/// write), held until the file is closed, so two idem processes never write one image.
fn lock(file: &File, path: &Path, writable: bool) -> anyhow::Result<()> {
    let taken = if writable {
        file.try_lock()
    } else {
        file.try_lock_shared()
    };
    match taken {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(anyhow::anyhow!(
            "{} is in use by another idem process; it was left untouched",
            path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow::anyhow!("locking {}: {e}", path.display()))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use embedded_storage::nor_flash::{NorFlash, ReadNorFlash};

    fn meta() -> Meta {
        Meta {
            scenario: "ddia".into(),
            store: "offset".into(),
            events: 100,
            checkpoint_every: 10,
            window: idem_payments::registry::WINDOW,
            pages: PAGES,
            mqtt: None,
        }
    }

    #[test]
    fn a_new_image_is_erased_and_strict() {
        let dir = std::env::temp_dir().join(format!("idem-image-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.bin");
        let _ = std::fs::remove_file(&path);
        let mut image = Image::open_or_create(&path, &meta()).unwrap();
        let f = &mut image.flash;
        let mut buf = [0u8; 8];
        f.read(1020, &mut buf).unwrap();
        assert_eq!(buf, [0xFF; 8]);
        f.write(1024, &[1, 2, 3, 4]).unwrap();
        assert_eq!(
            f.write(1024, &[0; 4]),
            Err(FileFlashError::WordWrittenTwice { address: 1024 })
        );
        assert_eq!(f.write(2, &[0; 4]), Err(FileFlashError::NotAligned));
        f.erase(1024, 2048).unwrap();
        f.write(1024, &[0; 4]).unwrap();
        assert_eq!(f.erase_counts()[1], 1);
        drop(image);
        assert_eq!(
            Image::open(&path, false).unwrap().flash.erase_counts()[1],
            1,
            "erase counts persist"
        );
        // An erase counter saturates instead of wrapping to 0.
        let mut bytes = std::fs::read(&path).unwrap();
        let at = COUNTERS_AT as usize + 4;
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let mut image = Image::open(&path, true).unwrap();
        image.flash.erase(1024, 2048).unwrap();
        assert_eq!(image.flash.erase_counts()[1], u32::MAX);
        drop(image);
        let other = Meta {
            store: "naive".into(),
            ..meta()
        };
        let e = Image::open_or_create(&path, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds the offset store of ddia"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A `kafka consume` image of 2 partitions (10 pages) opened for 3 (15): the one
    /// field that differs is named, since the two descriptions read alike.
    #[test]
    fn a_difference_the_description_does_not_show_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.bin");
        let kafka = |pages| Meta {
            scenario: "kafka:t".into(),
            events: 0,
            window: idem_payments::registry::WINDOW,
            pages,
            ..meta()
        };
        drop(Image::open_or_create(&path, &kafka(10)).unwrap());
        let e = Image::open_or_create(&path, &kafka(15))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{} holds the offset store of kafka:t (0 events, checkpoint every 10), not the offset store of kafka:t (0 events, checkpoint every 10): pages 10 in the image, 15 in this run; it was left untouched",
                path.display()
            )
        );
    }

    /// An `mqtt consume` image of `pages` pages, client `t` on `pay`.
    pub(crate) fn mqtt_meta(pages: u32) -> Meta {
        Meta {
            scenario: "mqtt".into(),
            store: "naive".into(),
            events: 0,
            checkpoint_every: 0,
            window: 32,
            pages,
            mqtt: Some(MqttSession {
                protocol: "3.1.1".into(),
                broker: "127.0.0.1:1883".into(),
                client_id: "t".into(),
                filter: "pay".into(),
                qos: 2,
                identifiers: "flash".into(),
            }),
        }
    }

    /// An MQTT image is its flash and at least the first 64 KiB of its log of ids: part
    /// of a later step (a kill while the log grew) is read, a log cut into its first
    /// step is refused.
    #[test]
    fn an_mqtt_image_holds_at_least_the_first_step_of_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.img");
        drop(Image::open_or_create(&path, &mqtt_meta(3)).unwrap());
        let len = HEADER + 3 * MQTT_PAGE as u64 + IDS_STEP;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len + 100).unwrap();
        Image::open(&path, true).unwrap();
        file.set_len(len - 1).unwrap();
        let e = Image::open(&path, true).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{} is truncated: {} bytes where an image of 3 pages of 65536 bytes is {}, and its log of ids at least 65536 bytes; it was left untouched",
                path.display(),
                len - 1,
                len - IDS_STEP
            )
        );
    }

    /// Each image draws its own key when it is created and keeps it in its header.
    #[test]
    fn an_image_keeps_its_own_id_key() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
        let key_a = Image::open_or_create(&a, &meta()).unwrap().id_key();
        let key_b = Image::open_or_create(&b, &meta()).unwrap().id_key();
        assert_ne!(key_a, key_b);
        assert_ne!(key_a, IdKey::PUBLIC);
        assert_eq!(Image::open(&a, false).unwrap().id_key(), key_a, "kept");
        let bytes = std::fs::read(&a).unwrap();
        assert_eq!(bytes[KEY_AT..KEY_AT + 16], key_a.0, "in the header");
    }
}
