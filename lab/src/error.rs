//! The host's usage error: what the user asked for cannot be done, said in one sentence
//! (exit status 2).

/// An error in what the user asked for: reported in one sentence, exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// Shorthand for a usage error.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    Usage(message.into()).into()
}
