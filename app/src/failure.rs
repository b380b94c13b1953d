//! How a command fails: a catalogue error (exit 10 + its number), or I/O on our own output.

use quarry_domain::Error;

/// A command's failure.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// An error from the catalogue.
    #[error("{0}")]
    Quarry(#[from] Error),
    /// Writing our output failed (a closed pipe, say).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Failure {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Quarry(e) => e.code().exit_code(),
            Self::Io(_) => 1,
        }
    }
}
