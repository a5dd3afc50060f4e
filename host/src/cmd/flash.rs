//! `idem flash inspect`: the pages and records of a flash image, which record wins, and
//! how often each page was erased. Reads only.

use std::fmt::Debug;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem_core::journal::{
    HEADER_SIZE, Inspector, Journal, JournalError, PageState, PageSummary, Region,
};
use idem_core::persist::{Persistence, Position, positions_tag};
use postcard::experimental::max_size::MaxSize;
use serde::de::DeserializeOwned;

use idem_core::persist::sink_tag;
use idem_host::image::{FileFlash, Image, PAGE};
use idem_host::image_consumer;
use idem_lab::select::{self, HostSinks, StoreJob};
use idem_payments::Sum;

/// Look inside flash images.
#[derive(Debug, Args)]
pub struct Cmd {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Pages, records, the winning record and erase counts of an image.
    Inspect {
        /// The flash image.
        file: PathBuf,
    },
}

impl Cmd {
    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let Action::Inspect { file } = self.action;
        let mut image = Image::open(&file, false)?;
        let (_, store) = image_consumer::scenario_of(&image.meta, &image.path)?;
        let mut text = format!(
            "{}: {}\nimage: {} pages of {PAGE} bytes, erased {} times in all\n",
            file.display(),
            image.meta.describe(),
            image.flash.pages(),
            image.flash.erase_counts().iter().sum::<u32>()
        );
        let window = image.meta.window;
        select::with_store(store, window, Inspect(&mut image, &mut text))?;
        std::io::stdout().lock().write_all(text.as_bytes())?;
        Ok(ExitCode::SUCCESS)
    }
}

struct Inspect<'a>(&'a mut Image, &'a mut String);

impl StoreJob for Inspect<'_> {
    type Out = ();
    fn call<S: Sum + HostSinks>(self, _: S) -> anyhow::Result<()> {
        let Inspect(image, text) = self;
        let layout = image_consumer::layout(&image.meta);
        if !S::POSITION_JOURNAL {
            writeln!(
                text,
                "position journal: unused (this store keeps the position in its record)"
            )?;
        } else {
            journal::<Position>(
                image,
                "position journal",
                layout.positions,
                positions_tag(&layout),
                text,
            )?;
        }
        journal::<<S::Persist as Persistence<S>>::Record>(
            image,
            "store journal",
            layout.sink,
            sink_tag::<S>(&layout),
            text,
        )
    }
}

fn journal<T: DeserializeOwned + serde::Serialize + MaxSize + Debug>(
    image: &mut Image,
    title: &str,
    region: Region,
    tag: u32,
    text: &mut String,
) -> anyhow::Result<()> {
    let first = region.start / PAGE as u32;
    // A damaged journal is still shown page by page: that is what inspect is for.
    let (j, newest, damage) = match Journal::<T>::open(&mut image.flash, region, tag) {
        Ok((j, newest)) => (Inspector::from(j), newest, None),
        Err(JournalError::Damaged { address }) => (
            Inspector::<T>::new::<FileFlash>(region, tag),
            None,
            Some(address / PAGE as u32),
        ),
        Err(e) => return Err(idem_host::failure::journal_error(image, e)),
    };
    writeln!(
        text,
        "{title}: pages {first}..={}, records at their encoded size, {} bytes at most ({} of those fill a page)",
        first + region.pages - 1,
        Journal::<T>::LARGEST,
        (PAGE - HEADER_SIZE) / Journal::<T>::LARGEST
    )?;
    for page in 0..region.pages {
        let flash: &mut FileFlash = &mut image.flash;
        let s = j
            .summarize(flash, page)
            .map_err(|e| idem_host::failure::journal_error(image, e))?;
        let erased = image.flash.erase_counts()[(first + page) as usize];
        page_line(text, first + page, &s, erased)?;
    }
    if let Some(page) = damage {
        writeln!(
            text,
            "  DAMAGED: page {page} has a damaged header but holds this journal's newest record; recovery refuses the image"
        )?;
        return Ok(());
    }
    match (j.newest(), j.newest_offset(), newest) {
        (Some(at), Some(offset), Some(record)) => writeln!(
            text,
            "  winner: page {} record {} (byte {offset}), seq {}: {record:?}",
            first + at.page,
            at.slot,
            j.newest_seq().unwrap_or(0)
        )?,
        _ => writeln!(text, "  winner: none (no valid record)")?,
    }
    Ok(())
}

/// One page's line of `inspect`: page `number` (in the image), what it holds, and how
/// often it was erased.
fn page_line(text: &mut String, number: u32, s: &PageSummary, erased: u32) -> std::fmt::Result {
    let state = match s.state {
        PageState::Blank => "blank",
        PageState::Valid => "valid",
        PageState::Unformatted => "unformatted",
        // An inspection handle names no journal to migrate from.
        PageState::Stale => "stale",
    };
    if s.state == PageState::Valid {
        writeln!(
            text,
            "  page {number:>2}  {state:<11}  {:>3} records  {:>3} torn  {:>3} room  newest seq {:<8}  erased {erased}x",
            s.valid,
            s.torn,
            s.blank,
            s.newest_seq.map_or("-".into(), |q| q.to_string()),
        )
    } else if s.valid > 0 {
        writeln!(
            text,
            "  page {number:>2}  {state:<11}  {:>3} records in a page with a damaged header, newest seq {:<8}  erased {erased}x",
            s.valid,
            s.newest_seq.map_or("-".into(), |q| q.to_string()),
        )
    } else {
        writeln!(
            text,
            "  page {number:>2}  {state:<11}  {:>51}erased {erased}x",
            ""
        )
    }
}
