//! The ids an `mqtt consume` image applied, in a log in the image file itself, after its
//! flash (`crate::image::FileFlash::ids_push`): one JSON line a message applied,
//! `{"n":3,"id":"p2"}`, `n` the image's applied count with it. A line reaches the file
//! before the record that applies it, and the image's one sync a group makes both
//! durable before any acknowledgement of the group goes out. At open, lines past the
//! image's count (a record a kill or a power cut lost) and a line cut short are dropped
//! (zeroed, durably), so a kill between a line and its record never changes a verdict.
//! A log that lacks lines the image counts (a power cut inside a group's sync that kept
//! a record and not its line) leaves the grade to totals, at best unproven. It does not
//! decide anything: the receiver's record does.

use anyhow::Context;

use crate::image::FileFlash;

/// One line of the log.
#[derive(serde::Serialize, serde::Deserialize)]
struct Line {
    n: u32,
    id: Option<String>,
}

/// The log of an image's applied ids.
pub struct AppliedLog {
    /// The image's name, for messages.
    name: String,
    ids: Vec<Option<String>>,
    lacking: u32,
}

impl AppliedLog {
    /// Opens the log of the image `name`, whose flash is `flash` and whose record counts
    /// `applied` messages.
    pub fn open(flash: &mut FileFlash, name: &str, applied: u32) -> anyhow::Result<Self> {
        let bytes = (flash.ids_read())
            .with_context(|| format!("{name} holds no log of applied ids"))?
            .with_context(|| format!("reading {name}"))?;
        let (ids, kept) = read(&bytes, applied);
        (flash.ids_keep(&bytes, kept)).map_err(|e| anyhow::anyhow!("writing {name}: {e}"))?;
        let lacking = applied.saturating_sub(ids.len() as u32);
        Ok(Self {
            name: name.to_owned(),
            ids,
            lacking,
        })
    }

    /// Adds the message applied as the image's `n`th, with its `id`: in the file before
    /// the record that applies it, durable with the image's next sync.
    pub fn push(&mut self, flash: &mut FileFlash, n: u32, id: Option<&str>) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(&Line {
            n,
            id: id.map(str::to_owned),
        })?;
        line.push('\n');
        (flash.ids_push(line.as_bytes()))
            .with_context(|| format!("writing {} (the disk full?)", self.name))?;
        self.ids.push(id.map(str::to_owned));
        Ok(())
    }

    /// Each applied message's id, in order; `None` when the log lacks some the image
    /// counts.
    pub fn ids(&self) -> Option<&[Option<String>]> {
        (self.lacking == 0).then_some(&self.ids[..])
    }

    /// Applied messages the image counts and the log lacks.
    pub fn lacking(&self) -> u32 {
        self.lacking
    }

    /// Marks the log as out of step with the image's count (it stops grading).
    pub fn out_of_step(&mut self, lacking: u32) {
        self.lacking = self.lacking.max(lacking);
    }
}

/// The log's lines numbered 1, 2, ... up to `applied`, and the bytes they take; the rest
/// (past the image's count, cut short, or zeros) is not the log's.
fn read(bytes: &[u8], applied: u32) -> (Vec<Option<String>>, u64) {
    let mut ids = Vec::new();
    let mut kept = 0;
    let mut rest = bytes;
    while ids.len() < applied as usize {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        match serde_json::from_slice::<Line>(&rest[..end]) {
            Ok(l) if l.n as usize == ids.len() + 1 => ids.push(l.id),
            _ => break,
        }
        kept += end as u64 + 1;
        rest = &rest[end + 1..];
    }
    (ids, kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::tests::mqtt_meta;
    use crate::image::{HEADER, Image, MQTT_PAGE};
    use std::path::Path;

    /// The log's text in the image file, up to its first zero.
    fn text(path: &Path) -> String {
        let bytes = std::fs::read(path).unwrap();
        let area = &bytes[HEADER as usize + 3 * MQTT_PAGE..];
        let end = area.iter().position(|&b| b == 0).unwrap();
        String::from_utf8(area[..end].to_vec()).unwrap()
    }

    #[test]
    fn lines_past_the_images_count_or_cut_short_are_dropped_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.img");
        let mut image = Image::open_or_create(&path, &mqtt_meta(3)).unwrap();
        let mut log = AppliedLog::open(&mut image.flash, "dev.img", 0).unwrap();
        for (n, id) in [(1, Some("p0")), (2, None), (3, Some("p2"))] {
            log.push(&mut image.flash, n, id).unwrap();
        }
        drop(image);
        assert_eq!(text(&path).lines().count(), 3);
        // A kill lost the record of the 3rd: the image counts 2, and the 3rd line is
        // zeroed, so no later line can be read in its place.
        let mut image = Image::open(&path, true).unwrap();
        let log = AppliedLog::open(&mut image.flash, "dev.img", 2).unwrap();
        assert_eq!(log.ids(), Some(&[Some("p0".to_string()), None][..]));
        drop(image);
        assert_eq!(
            text(&path),
            "{\"n\":1,\"id\":\"p0\"}\n{\"n\":2,\"id\":null}\n"
        );
        // A line cut short, and an image that counts more than the log holds.
        let mut bytes = std::fs::read(&path).unwrap();
        // The 2nd line (18 bytes after the 1st's 18) cut after `{"n":2`.
        let at = HEADER as usize + 3 * MQTT_PAGE + 18;
        assert_eq!(&bytes[at..at + 6], b"{\"n\":2");
        bytes[at + 6..at + 18].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        let mut image = Image::open(&path, true).unwrap();
        let log = AppliedLog::open(&mut image.flash, "dev.img", 3).unwrap();
        assert_eq!((log.ids(), log.lacking()), (None, 2));
        drop(image);
        assert_eq!(text(&path), "{\"n\":1,\"id\":\"p0\"}\n");
    }
}
