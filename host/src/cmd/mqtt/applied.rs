//! The ids an `mqtt consume` image applied, in a log beside it (`IMAGE.ids`): one JSON
//! line a message applied, `{"n":3,"id":"p2"}`, `n` the image's applied count with it.
//! A line is written (and synced, unless `--sync none`) before the image's record that
//! applies it is synced; at open, lines past the image's count (a record a power cut
//! lost) and a line cut short are dropped, so a kill between the two never changes a
//! verdict. A log that lacks lines the image counts (an image from before the log, a
//! log removed) leaves the grade to totals, at best unproven. It does not decide
//! anything: the receiver's record does.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use anyhow::Context;

use crate::image::SyncBefore;

/// One line of the log.
#[derive(serde::Serialize, serde::Deserialize)]
struct Line {
    n: u32,
    id: Option<String>,
}

/// The log of an image's applied ids.
pub struct AppliedLog {
    file: File,
    path: PathBuf,
    ids: Vec<Option<String>>,
    lacking: u32,
    /// Its syncs, shared with the image, which makes it durable before each of its own
    /// (`None` under `--sync none`).
    before: Option<Arc<SyncBefore>>,
    /// Bytes written since it was opened.
    pub written: u64,
}

impl AppliedLog {
    /// The log's path beside `image`.
    pub fn path_of(image: &Path) -> PathBuf {
        let mut p = image.as_os_str().to_owned();
        p.push(".ids");
        PathBuf::from(p)
    }

    /// Opens the log of `image`, whose record counts `applied` messages; `fresh` when the
    /// image was just made (a log left there is emptied). `sync`: each line is synced.
    pub fn open(image: &Path, applied: u32, fresh: bool, sync: bool) -> anyhow::Result<Self> {
        let path = Self::path_of(image);
        let there = crate::files::regular_or_missing(&path, "a log of applied ids")?.is_some();
        let name = path.display().to_string();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {name}"))?;
        let (ids, kept) = if fresh || !there {
            (Vec::new(), 0)
        } else {
            read(&mut file, applied).with_context(|| format!("reading {name}"))?
        };
        file.set_len(kept)
            .and_then(|()| file.seek(SeekFrom::End(0)).map(drop))
            .with_context(|| format!("writing {name}"))?;
        let lacking = if fresh {
            0
        } else {
            applied.saturating_sub(ids.len() as u32)
        };
        let before = match sync {
            true => Some(SyncBefore::new(file.try_clone()?)),
            false => None,
        };
        Ok(Self {
            file,
            path,
            ids,
            lacking,
            before,
            written: 0,
        })
    }

    /// Adds the message applied as the image's `n`th, with its `id` (durable at the
    /// next [`AppliedLog::sync`]).
    pub fn push(&mut self, n: u32, id: Option<&str>) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(&Line {
            n,
            id: id.map(str::to_owned),
        })?;
        // One write a line: `writeln!` on a file makes two system calls.
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .with_context(|| format!("writing {} (the disk full?)", self.path.display()))?;
        self.written += line.len() as u64;
        if let Some(before) = &self.before {
            before.written();
        }
        self.ids.push(id.map(str::to_owned));
        Ok(())
    }

    /// Makes the lines pushed durable (unless the image is not synced either).
    pub fn sync(&mut self) -> anyhow::Result<()> {
        if let Some(before) = &self.before {
            (before.sync()).with_context(|| format!("syncing {}", self.path.display()))?;
        }
        Ok(())
    }

    /// What the image syncs before each of its own syncs (`None` under `--sync none`).
    pub fn before(&self) -> Option<Arc<SyncBefore>> {
        self.before.clone()
    }

    /// `sync_data` calls made since it was opened, by it or by the image before its own.
    pub fn syncs(&self) -> u64 {
        self.before.as_ref().map_or(0, |b| b.syncs())
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
/// (past the image's count, or cut short) is dropped.
fn read(file: &mut File, applied: u32) -> std::io::Result<(Vec<Option<String>>, u64)> {
    let mut ids = Vec::new();
    let mut kept = 0u64;
    let mut r = BufReader::new(&mut *file);
    let mut line = String::new();
    while ids.len() < applied as usize {
        line.clear();
        if r.read_line(&mut line)? == 0 || !line.ends_with('\n') {
            break;
        }
        match serde_json::from_str::<Line>(&line) {
            Ok(l) if l.n as usize == ids.len() + 1 => ids.push(l.id),
            _ => break,
        }
        kept += line.len() as u64;
    }
    Ok((ids, kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_past_the_images_count_or_cut_short_are_dropped_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("dev.img");
        let mut log = AppliedLog::open(&image, 0, true, true).unwrap();
        for (n, id) in [(1, Some("p0")), (2, None), (3, Some("p2"))] {
            log.push(n, id).unwrap();
        }
        drop(log);
        // A power cut lost the record of the 3rd: the image counts 2.
        let log = AppliedLog::open(&image, 2, false, true).unwrap();
        assert_eq!(log.ids(), Some(&[Some("p0".to_string()), None][..]));
        drop(log);
        let path = AppliedLog::path_of(&image);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"n\":1,\"id\":\"p0\"}\n{\"n\":2,\"id\":null}\n"
        );
        // A line cut short, and an image that counts more than the log holds.
        std::fs::write(&path, "{\"n\":1,\"id\":\"p0\"}\n{\"n\":2,\"i").unwrap();
        let log = AppliedLog::open(&image, 3, false, true).unwrap();
        assert_eq!((log.ids(), log.lacking()), (None, 2));
        // A fresh image empties a log left beside it.
        let log = AppliedLog::open(&image, 0, true, true).unwrap();
        assert_eq!(log.ids(), Some(&[][..]));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
