//! An image's consumer and journal errors, each as one sentence for a person: what is
//! wrong with the file, and that it was left untouched. Every command that opens an image
//! (`idem consume`, `idem flash`, `idem kafka consume`, the drive loop) says them alike.

use idem_core::consumer::ConsumerError;
use idem_core::journal::{FORMAT_VERSION, JournalError};
use idem_lab::error::usage;
use idem_payments::stores::StoreError;

use crate::image::{FileFlashError, Image};

/// A consumer error on an image, as one sentence.
pub fn consumer_error(
    image: &Image,
    e: ConsumerError<FileFlashError, StoreError>,
) -> anyhow::Error {
    match e {
        ConsumerError::Journal(e) => journal_error(image, e),
        ConsumerError::Store(e) => usage(e.to_string()),
        e @ ConsumerError::Region { .. } => usage(e.to_string()),
        ConsumerError::Disagree(d) => anyhow::anyhow!(
            "{name}: its journals disagree, which no crash can cause: {d}; it was left untouched (`idem flash inspect {name}` shows its pages)",
            name = image.path.display()
        ),
        other => anyhow::anyhow!("{}: {other}", image.path.display()),
    }
}

/// A journal error on an image, as one sentence.
pub fn journal_error(image: &Image, e: JournalError<FileFlashError>) -> anyhow::Error {
    let name = image.path.display();
    match e {
        JournalError::Foreign { page, version, .. } if version != FORMAT_VERSION => usage(format!(
            "{name} was written by an older idem (journal format {version} at page {page}; this one reads format {FORMAT_VERSION}): it was left untouched, start a new image"
        )),
        JournalError::Foreign { page, tag, version } => usage(format!(
            "{name} holds another journal at page {page} (tag {tag:#010x}, format version {version}); it was left untouched"
        )),
        JournalError::Decode => usage(format!(
            "{name} holds a record that does not decode; it was left untouched"
        )),
        JournalError::Damaged { address } => anyhow::anyhow!(
            "{name}: page {} has a damaged header but holds a journal's newest record; it was left untouched (`idem flash inspect {name}` shows its pages)",
            address / crate::image::PAGE as u32
        ),
        JournalError::Flash(FileFlashError::Io(kind)) => {
            anyhow::anyhow!("reading or writing {name}: {kind}")
        }
        other => anyhow::anyhow!("{name}: {other}"),
    }
}
