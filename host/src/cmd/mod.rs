//! One module per subcommand; each has a clap `Cmd` with a `run()`.

pub mod demo;
pub mod matrix;
pub mod run;
