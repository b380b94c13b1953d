//! The URIs agents subscribed to at one upstream: remembered, and asked of every new session
//! (a new session knows nothing of what the old ones were subscribed to).

use quarry_ports::UpstreamSession;

use super::{Upstream, lock};

/// The most distinct URIs of one server agents may subscribe to.
pub(crate) const MAX_WATCHED: usize = 10_000;

impl Upstream {
    /// Remembers that agents want changes to `uri` announced; false when the server already
    /// has [`MAX_WATCHED`] such URIs.
    pub(crate) fn watched(&self, uri: &str) -> bool {
        let mut watched = lock(&self.watched);
        watched.contains(uri) || (watched.len() < MAX_WATCHED && watched.insert(uri.to_owned()))
    }

    /// Subscribes a new session to every watched URI.
    pub(super) async fn resubscribe(&self, session: &dyn UpstreamSession) {
        let watched: Vec<String> = lock(&self.watched).iter().cloned().collect();
        for uri in watched {
            if let Err(e) = session.subscribe(&uri).await {
                tracing::debug!(server = %self.name(), "subscribing a new session failed: {e}");
            }
        }
    }
}
