//! `idem monitor`: reads the device's frames from a serial port, a pty, a file, or
//! standard input (`-`), and shows the live totals of each sink.
//!
//! Garbage and damaged frames on the line are counted and skipped. It exits 0 after the
//! done frame, 1 if the stream ends before it: a file or standard input that ends, or a
//! serial link that hangs up ("the board's link closed at offset N").

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use idem_board::wire::{Decoder, Frame, Totals};
use idem_lab::error::usage;
use serde_json::{Value, json};

/// Decode the device's frames and show each sink's total.
#[derive(Debug, Args)]
pub struct Cmd {
    /// A serial port or pty (/dev/ttyACM0, /dev/pts/3), a file, or `-` for standard input.
    source: PathBuf,
    /// Baud rate of a serial port.
    #[arg(long, default_value_t = 115_200)]
    baud: u32,
    /// Print one JSON object per frame.
    #[arg(long)]
    json: bool,
}

fn totals_json(t: &Totals) -> Value {
    json!({ "naive": t.naive, "offset": t.offset, "atomic": t.atomic })
}

/// One frame as a JSON object with a `type`.
pub fn frame_json(frame: &Frame) -> Value {
    match frame {
        Frame::Boot {
            boots,
            resume,
            resume_atomic,
            totals,
        } => json!({
            "type": "boot", "boots": boots, "resume": resume, "resume_atomic": resume_atomic, "totals": totals_json(totals),
        }),
        Frame::Progress { offset, totals } => {
            json!({ "type": "progress", "offset": offset, "totals": totals_json(totals) })
        }
        Frame::Done {
            boots,
            totals,
            true_total,
        } => json!({
            "type": "done", "boots": boots, "totals": totals_json(totals), "true_total": true_total,
        }),
        Frame::Stats { stack_bytes } => json!({ "type": "stats", "stack_bytes": stack_bytes }),
    }
}

fn frame_text(frame: &Frame) -> String {
    let t = |t: &Totals| {
        format!(
            "naive {:>4}  offset {:>4}  atomic {:>4}",
            t.naive, t.offset, t.atomic
        )
    };
    match frame {
        Frame::Boot {
            boots,
            resume,
            resume_atomic,
            totals,
        } => format!(
            "boot #{boots}: recovered from flash, resume at {resume} (atomic at {resume_atomic})   {}",
            t(totals)
        ),
        Frame::Progress { offset, totals } => format!("offset {offset:>3}   {}", t(totals)),
        Frame::Done {
            boots,
            totals,
            true_total,
        } => {
            format!(
                "done after {boots} boots   {}   (true total {true_total})",
                t(totals)
            )
        }
        Frame::Stats { stack_bytes } => format!("stack high-water mark: {stack_bytes} bytes"),
    }
}

impl Cmd {
    /// The source, and whether it is a serial link (which can hang up) rather than a
    /// file or standard input (which end).
    fn open(&self) -> anyhow::Result<(Box<dyn Read>, bool)> {
        if self.source.as_os_str() == "-" {
            return Ok((Box::new(std::io::stdin()), false));
        }
        let name = self.source.display().to_string();
        let meta = std::fs::metadata(&self.source).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                usage(format!("{name} does not exist"))
            } else {
                anyhow::anyhow!("opening {name}: {e}")
            }
        })?;
        if meta.file_type().is_char_device() {
            let port = serialport::new(name.as_str(), self.baud)
                .timeout(Duration::from_secs(3600))
                .open()
                .map_err(|e| {
                    usage(format!(
                        "{name} is a device but not a serial port ({e}); give the board's serial port, a file of frames, or - for standard input"
                    ))
                })?;
            Ok((port, true))
        } else {
            Ok((
                Box::new(File::open(&self.source).with_context(|| format!("opening {name}"))?),
                false,
            ))
        }
    }

    /// Reads the next bytes of the source: `Some(0)` at the end of a file, `None` for a
    /// read to try again.
    fn read_some(
        &self,
        source: &mut dyn Read,
        buf: &mut [u8],
        link: bool,
        at: u64,
    ) -> anyhow::Result<Option<usize>> {
        match source.read(buf) {
            Ok(0) if link => anyhow::bail!("the board's link closed at offset {at}"),
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Ok(None),
            // Said as a sentence, not passed on as an I/O error: `serialport` reports
            // a hang-up as a broken pipe, which `main` would take for a closed
            // standard output.
            Err(e)
                if link
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe
                            | std::io::ErrorKind::ConnectionReset
                            | std::io::ErrorKind::UnexpectedEof
                    ) =>
            {
                anyhow::bail!("the board's link closed at offset {at}")
            }
            Err(e) => anyhow::bail!(
                "reading {} failed at offset {at}: {e}",
                self.source.display()
            ),
        }
    }

    /// Runs the command.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let (mut source, link) = self.open()?;
        let mut out = std::io::stdout().lock();
        let mut decoder = Decoder::new();
        let mut buf = [0u8; 256];
        // Where the board reads next, as its frames said: its resume, then one past
        // each offset it applied.
        let mut at = 0u64;
        loop {
            let n = match self.read_some(&mut *source, &mut buf, link, at)? {
                Some(0) => break,
                Some(n) => n,
                None => continue,
            };
            for &b in &buf[..n] {
                let Some(Ok(frame)) = decoder.push(b) else {
                    continue;
                };
                match frame {
                    Frame::Boot { resume, .. } => at = resume,
                    Frame::Progress { offset, .. } => at = offset.saturating_add(1),
                    Frame::Done { .. } | Frame::Stats { .. } => {}
                }
                if self.json {
                    writeln!(out, "{}", frame_json(&frame))?;
                } else {
                    writeln!(out, "{}", frame_text(&frame))?;
                }
                out.flush()?;
                if matches!(frame, Frame::Done { .. }) {
                    if decoder.skipped > 0 {
                        eprintln!(
                            "idem: skipped {} damaged or partial frames",
                            decoder.skipped
                        );
                    }
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        eprintln!(
            "idem: the stream ended before the done frame ({} damaged or partial frames skipped)",
            decoder.skipped
        );
        Ok(ExitCode::from(1))
    }
}
