//! The one error catalogue (E001..E013) used by tool results, CLI exit codes, logs and audit.
//!
//! A code never changes meaning; new meanings get new codes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A Quarry error code. The meaning of each is fixed in the design brief.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// Invalid input (URI, range, schema bounds, credential format).
    E001,
    /// Resource or version not found.
    E002,
    /// Server unreachable, not registered, or circuit open.
    E003,
    /// Access denied by policy.
    E004,
    /// Upstream authentication failed; credentials missing or expired.
    E005,
    /// Checksum mismatch.
    E006,
    /// Range not satisfiable.
    E007,
    /// Resource larger than the configured limit.
    E008,
    /// Upstream timed out.
    E009,
    /// Idempotency conflict.
    E010,
    /// Audit or policy engine unavailable (fail closed).
    E011,
    /// Internal error: details only in logs, never to the caller.
    E012,
    /// The upstream answered the request with an error of its own (its code and message are in
    /// the message); the server is up and the gateway is fine.
    E013,
}

impl ErrorCode {
    /// Every code, in order.
    pub const ALL: [ErrorCode; 13] = [
        Self::E001,
        Self::E002,
        Self::E003,
        Self::E004,
        Self::E005,
        Self::E006,
        Self::E007,
        Self::E008,
        Self::E009,
        Self::E010,
        Self::E011,
        Self::E012,
        Self::E013,
    ];

    /// The code as written on the wire, e.g. `"E001"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::E001 => "E001",
            Self::E002 => "E002",
            Self::E003 => "E003",
            Self::E004 => "E004",
            Self::E005 => "E005",
            Self::E006 => "E006",
            Self::E007 => "E007",
            Self::E008 => "E008",
            Self::E009 => "E009",
            Self::E010 => "E010",
            Self::E011 => "E011",
            Self::E012 => "E012",
            Self::E013 => "E013",
        }
    }

    /// One line saying what the code means.
    pub fn meaning(self) -> &'static str {
        match self {
            Self::E001 => "invalid input",
            Self::E002 => "resource or version not found",
            Self::E003 => "server unreachable or not registered",
            Self::E004 => "access denied by policy",
            Self::E005 => "upstream authentication failed",
            Self::E006 => "checksum mismatch",
            Self::E007 => "range not satisfiable",
            Self::E008 => "resource larger than the configured limit",
            Self::E009 => "upstream timed out",
            Self::E010 => "idempotency conflict",
            Self::E011 => "audit or policy engine unavailable",
            Self::E012 => "internal error",
            Self::E013 => "the upstream answered with an error",
        }
    }

    /// The CLI exit code for this error: 10 + the code's number, so scripts can tell them apart
    /// (1 and 2 stay with the shell's and clap's usual meanings).
    pub fn exit_code(self) -> i32 {
        let n: i32 = self.as_str()[1..].parse().unwrap_or(12);
        10 + n
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error a caller may see: a code and a message safe to show (no secrets, no internals).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    code: ErrorCode,
    message: String,
}

impl Error {
    /// An error with the given code and caller-safe message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// E001.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::E001, message)
    }

    /// E012 with a fixed message: the detail belongs in the logs, not with the caller.
    pub fn internal() -> Self {
        Self::new(ErrorCode::E012, "internal error; see the gateway's logs")
    }

    /// The error's code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The caller-safe message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct_and_clear_of_shell_conventions() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let exit = code.exit_code();
            assert!((11..=23).contains(&exit), "{code} -> {exit}");
            assert!(seen.insert(exit));
        }
    }

    #[test]
    fn display_leads_with_the_code() {
        let e = Error::invalid("limit must be between 1 and 1000");
        assert_eq!(e.to_string(), "E001: limit must be between 1 and 1000");
        assert_eq!(Error::internal().code(), ErrorCode::E012);
    }
}
