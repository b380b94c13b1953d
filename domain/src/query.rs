//! List queries: filters, the sort order and pagination (limit 1..1000, offset >= 0).

use std::cmp::Ordering;

use crate::{Error, Resource, ResourceType, ServerId, ServerName, Timestamp};

/// How many resources one page holds: `1..=1000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit(u32);

impl PageLimit {
    /// The largest page (the spec's schema maximum).
    pub const MAX: u32 = 1000;
    /// The page size when a request names none: big enough to be useful, small enough to fit in an
    /// agent's context. `total_count` tells the caller how much more there is.
    pub const DEFAULT: PageLimit = PageLimit(100);

    /// Parses a requested limit.
    ///
    /// # Errors
    /// E001 when outside `1..=1000`.
    pub fn new(limit: i64) -> Result<Self, Error> {
        if (1..=i64::from(Self::MAX)).contains(&limit) {
            Ok(Self(limit as u32))
        } else {
            Err(Error::invalid(format!(
                "limit must be between 1 and {}, got {limit}",
                Self::MAX
            )))
        }
    }

    /// The limit as a number.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Selects servers by name or by id (the spec's "server name or ID").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSelector(String);

impl ServerSelector {
    /// Parses a selector: 1 to 128 characters.
    ///
    /// # Errors
    /// E001 when empty or longer than 128 characters.
    pub fn new(text: &str) -> Result<Self, Error> {
        if text.is_empty() || text.chars().count() > ServerName::MAX_LEN {
            return Err(Error::invalid(format!(
                "server must be 1 to {} characters",
                ServerName::MAX_LEN
            )));
        }
        Ok(Self(text.to_owned()))
    }

    /// True when the selector names this server, by exact name or exact id.
    pub fn selects(&self, name: &ServerName, id: &ServerId) -> bool {
        self.0 == name.as_str() || self.0 == id.as_str()
    }

    /// The selector as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated list request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Only this server.
    pub server: Option<ServerSelector>,
    /// Only this type.
    pub filter_type: Option<ResourceType>,
    /// Page size.
    pub limit: PageLimit,
    /// Resources skipped before the page.
    pub offset: u64,
    /// False bypasses cached listings and refreshes them.
    pub use_cache: bool,
}

impl Default for ListQuery {
    fn default() -> Self {
        Self {
            server: None,
            filter_type: None,
            limit: PageLimit::DEFAULT,
            offset: 0,
            use_cache: true,
        }
    }
}

impl ListQuery {
    /// Parses a request's offset.
    ///
    /// # Errors
    /// E001 when negative.
    pub fn parse_offset(offset: i64) -> Result<u64, Error> {
        u64::try_from(offset)
            .map_err(|_| Error::invalid(format!("offset must be 0 or more, got {offset}")))
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T = Resource> {
    /// The items on this page.
    pub items: Vec<T>,
    /// How many items matched the filters, across all pages.
    pub total_count: u64,
}

/// What listing order and filters need of an item: a [`Resource`], or a lighter stand-in for one
/// so that only the page's resources are ever built in full.
pub trait Listed {
    /// When it last changed, if known.
    fn modified_at(&self) -> Option<Timestamp>;
    /// Its gateway URI, the order's tie-break.
    fn gateway_uri(&self) -> &str;
    /// Its type.
    fn resource_type(&self) -> ResourceType;
}

impl Listed for Resource {
    fn modified_at(&self) -> Option<Timestamp> {
        self.modified_at
    }
    fn gateway_uri(&self) -> &str {
        self.uri.as_str()
    }
    fn resource_type(&self) -> ResourceType {
        self.resource_type
    }
}

/// The listing order: `modified_at` descending (items without it last), then gateway URI
/// ascending, so the order is total and stable across calls and pages.
fn listing_order<T: Listed>(a: &T, b: &T) -> Ordering {
    match (a.modified_at(), b.modified_at()) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
    .then_with(|| a.gateway_uri().cmp(b.gateway_uri()))
}

/// Filters by type, sorts in listing order and cuts the requested page.
pub fn sort_and_page<T: Listed>(mut items: Vec<T>, query: &ListQuery) -> Page<T> {
    if let Some(t) = query.filter_type {
        items.retain(|r| r.resource_type() == t);
    }
    let total_count = items.len() as u64;
    let start = usize::try_from(query.offset)
        .unwrap_or(usize::MAX)
        .min(items.len());
    let end = start
        .saturating_add(query.limit.get() as usize)
        .min(items.len());
    // Only the first `end` items need to be in order: select them, then sort just those.
    if end < items.len() && end > 0 {
        items.select_nth_unstable_by(end - 1, listing_order);
        items.truncate(end);
    } else if end == 0 {
        items.clear();
    }
    items.sort_by(listing_order);
    items.drain(..start.min(items.len()));
    Page { items, total_count }
}

#[cfg(test)]
mod tests;
