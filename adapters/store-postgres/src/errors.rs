//! sqlx errors and unreadable rows become [`StoreError`] here, once.

use quarry_ports::StoreError;

/// What a failure means for the store's callers.
pub(crate) trait Classify {
    fn classify(self) -> StoreError;
}

impl Classify for sqlx::Error {
    fn classify(self) -> StoreError {
        match &self {
            sqlx::Error::RowNotFound => StoreError::NotFound(self.to_string()),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(db.message().to_owned())
            }
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::Decode(_)
            | sqlx::Error::TypeNotFound { .. } => StoreError::Corrupt(self.to_string()),
            _ => StoreError::Unavailable(self.to_string()),
        }
    }
}

impl Classify for std::num::TryFromIntError {
    fn classify(self) -> StoreError {
        corrupt(format!("a stored number is out of range: {self}"))
    }
}

impl Classify for serde_json::Error {
    fn classify(self) -> StoreError {
        corrupt(format!("a stored JSON value does not parse: {self}"))
    }
}

/// The store error for `e`.
pub(crate) fn failed(e: impl Classify) -> StoreError {
    e.classify()
}

/// Stored data that cannot be read back.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}
