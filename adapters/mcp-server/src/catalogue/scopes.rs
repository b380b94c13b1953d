//! The scopes the catalogue requires, read back from each tool's `_meta`: the one table the HTTP
//! transport's route check and the published catalogue share.

use super::{SCOPE_KEY, catalogue};

/// The scope MCP's own resource methods (`resources/list`, `resources/read`, …) require: the
/// one the read-only tools require.
pub const RESOURCES_SCOPE: &str = "resources:read";

/// The scope each published tool requires, by name, as its `_meta` says.
fn scopes_by_tool() -> &'static std::collections::HashMap<String, String> {
    static SCOPES: std::sync::OnceLock<std::collections::HashMap<String, String>> =
        std::sync::OnceLock::new();
    SCOPES.get_or_init(|| {
        catalogue()
            .into_iter()
            .filter_map(|t| {
                let scope = t.meta.as_ref()?.0.get(SCOPE_KEY)?.as_str()?.to_owned();
                Some((t.name.into_owned(), scope))
            })
            .collect()
    })
}

/// The scope tool `name` requires; None for a tool Quarry does not publish.
#[must_use]
pub fn required_scope(name: &str) -> Option<&'static str> {
    scopes_by_tool().get(name).map(String::as_str)
}

/// Every scope some tool requires, sorted.
#[must_use]
pub fn tool_scopes() -> Vec<&'static str> {
    let mut all: Vec<&str> = scopes_by_tool().values().map(String::as_str).collect();
    all.sort_unstable();
    all.dedup();
    all
}
