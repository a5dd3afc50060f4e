//! One module per subcommand; each has a clap `Cmd` with a `run()`.

pub mod chaos;
pub mod consume;
pub mod demo;
pub mod device;
pub mod flash;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod lesson;
pub mod matrix;
pub mod monitor;
pub mod mqtt;
pub mod plot;
pub mod run;
pub mod serve;
pub mod status;
pub mod sweep;
