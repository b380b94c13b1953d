//! Who a request is made for.

use std::fmt;

/// The identity a request acts for: from a validated token on HTTP, or from configuration on
/// stdio. Never from tool arguments. Content an upstream marks private is cached per principal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(String);

impl Principal {
    /// The one principal of a local stdio session.
    pub fn local() -> Self {
        Self("local".to_owned())
    }

    /// A principal with this identity.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
