//! `idem`: run, crash and check stream-delivery guarantees from the command line.
//!
//! Every rule comes from `idem-core`; this binary parses arguments, loads event files,
//! and renders reports for a person (text) or a machine (`--json`).

mod cmd;

use idem_host::cleanup;
use idem_lab::error;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Make stream-delivery guarantees visible: replay, duplicates, and the stores that
/// make them harmless.
#[derive(Debug, Parser)]
#[command(name = "idem", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tell the DDIA exercise step by step: a crash, a replay, and which store survives it.
    Demo(cmd::demo::Cmd),
    /// Predict, then observe: a lesson's questions (ddia, payments, guarantees, mqtt), each answered by a run.
    Lesson(cmd::lesson::Cmd),
    /// Run one scenario with one store, optionally with a trace or as JSON.
    Run(cmd::run::Cmd),
    /// Every store against every fault, each cell exact / over / under.
    Matrix(cmd::matrix::Cmd),
    /// Consume a scenario into a flash image; kill it and rerun it to resume.
    Consume(cmd::consume::Cmd),
    /// What a flash image holds: store, scenario, next offset, total.
    Status(cmd::status::Cmd),
    /// Look inside flash images.
    Flash(cmd::flash::Cmd),
    /// Kill `idem consume` processes at random instants until the stream is done.
    Chaos(cmd::chaos::Cmd),
    /// Crash at every point (or at seeded random schedules); a matrix of outcomes.
    Sweep(cmd::sweep::Cmd),
    /// Draw total against step for stores of a scenario, as SVG.
    Plot(cmd::plot::Cmd),
    /// The board as the consumer of a stream the host feeds it (a board, or QEMU).
    Device(cmd::device::Cmd),
    /// Serve the browser playground (built by `bash web/build.sh`) on 127.0.0.1.
    Serve(cmd::serve::Cmd),
    /// Decode a device's frames (serial port, pty, file or stdin) and show its totals.
    Monitor(cmd::monitor::Cmd),
    /// The MQTT receiver on a real broker: QoS 2 exactly once across kills, its session in
    /// a flash image.
    Mqtt(cmd::mqtt::Cmd),
    /// The stores against a real Kafka-protocol broker.
    #[cfg(feature = "kafka")]
    Kafka(cmd::kafka::Cmd),
    /// The stores against a real Kafka-protocol broker (a build with the kafka feature).
    #[cfg(not(feature = "kafka"))]
    #[command(disable_help_flag = true)]
    Kafka {
        /// Whatever followed `kafka`: this build has no such command to give it to.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        rest: Vec<String>,
    },
}

fn main() -> ExitCode {
    cleanup::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(c) => c.run(),
        Command::Lesson(c) => c.run(),
        Command::Run(c) => c.run(),
        Command::Matrix(c) => c.run(),
        Command::Consume(c) => c.run(),
        Command::Status(c) => c.run(),
        Command::Flash(c) => c.run(),
        Command::Chaos(c) => c.run(),
        Command::Sweep(c) => c.run(),
        Command::Plot(c) => c.run(),
        Command::Monitor(c) => c.run(),
        Command::Serve(c) => c.run(),
        Command::Device(c) => c.run(),
        Command::Mqtt(c) => c.run(),
        #[cfg(feature = "kafka")]
        Command::Kafka(c) => c.run(),
        #[cfg(not(feature = "kafka"))]
        Command::Kafka { .. } => Err(error::usage(
            "this idem was built without the kafka feature, which `idem kafka` needs: run it as `cargo run --release --features kafka -- kafka ...` (librdkafka is built from source: a C compiler and make)",
        )),
    };
    match result {
        Ok(code) => code,
        // A closed pipe (`idem run ... | head`) is the reader's choice, not a failure.
        Err(e) if stdout_closed(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem: {e:#}");
            if e.is::<error::Usage>() {
                ExitCode::from(2)
            } else if e.is::<cleanup::Interrupted>() {
                ExitCode::from(cleanup::INTERRUPTED)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Whether `e` is a write to a closed standard output: a broken pipe that reached `main`
/// bare, as `writeln!(out, ..)?` passes it on. Everything else that can break a pipe says
/// what it was doing (a context) or is no I/O error at all: the board's link and the
/// monitor's source turn a hang-up (which `serialport` reports as a broken pipe) into a
/// sentence of their own, so a link that closes is never taken for a reader that left.
fn stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().count() == 1
        && e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
