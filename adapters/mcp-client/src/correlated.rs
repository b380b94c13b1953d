//! Dropping responses that answer no request of ours, before the handshake as after it.
//!
//! rmcp ignores a stray response once a session runs, but during `initialize` one stray id makes
//! the whole handshake fail, so a server that sends one (a leftover from a previous client, a
//! buggy proxy) could never be used. [`Correlated`] sits between the transport and rmcp: it
//! remembers the ids of the requests sent and passes on only responses and errors that carry one
//! of them (or none: an error for a request the server could not read).
//!
//! It also keeps one malformed entry from emptying a listing: rmcp parses a `resources/list`
//! page whole, and a page with one bad entry (a negative size, a `null` name) does not parse as
//! a listing at all. Such a page is repaired here, its bad entries left out and counted in
//! [`Skipped`], which the session reports with the listing.
//!
//! And it sees the transport end by itself (the server's process exited, its connection
//! dropped): the session's subscriptions went with it ([`Coverage`]).

use std::{
    future::Future,
    sync::{Arc, Mutex},
};

use rmcp::{
    RoleClient,
    model::{
        CustomResult, JsonRpcMessage, ListResourcesResult, NumberOrString, RequestId, Resource,
        ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use serde_json::Value;

use crate::coverage::Coverage;

/// How many request ids are remembered at most; the oldest are forgotten first (requests that
/// timed out and will never be answered).
const MAX_PENDING: usize = 4096;

/// Listing entries left out of repaired pages since the counter was last taken.
#[derive(Debug, Default)]
pub(crate) struct Skipped {
    count: u64,
    first_reason: Option<String>,
}

impl Skipped {
    /// The count and first reason so far, starting again from zero.
    pub(crate) fn take(&mut self) -> (u64, Option<String>) {
        let taken = (self.count, self.first_reason.take());
        self.count = 0;
        taken
    }
}

/// A transport that drops uncorrelated responses and repairs listing pages.
#[derive(Debug)]
pub(crate) struct Correlated<T> {
    inner: T,
    pending: Arc<Mutex<Vec<RequestId>>>,
    skipped: Arc<Mutex<Skipped>>,
    coverage: Arc<Coverage>,
}

impl<T> Correlated<T> {
    /// `inner`, for a session whose subscriptions `coverage` holds.
    pub(crate) fn new(inner: T, coverage: Arc<Coverage>) -> Self {
        Self {
            inner,
            pending: Arc::new(Mutex::new(Vec::new())),
            skipped: Arc::new(Mutex::new(Skipped::default())),
            coverage,
        }
    }

    /// The count of entries this transport leaves out of listing pages.
    pub(crate) fn skipped(&self) -> Arc<Mutex<Skipped>> {
        self.skipped.clone()
    }
}

/// A page that did not parse as a listing, repaired: each entry that parses as a resource is
/// kept, the others are counted. `None` when the value is no listing page.
fn repair_listing(value: &Value) -> Option<(ListResourcesResult, u64, Option<String>)> {
    let entries = value.get("resources")?.as_array()?;
    let mut kept = Vec::with_capacity(entries.len());
    let (mut skipped, mut reason) = (0u64, None);
    for entry in entries {
        match serde_json::from_value::<Resource>(entry.clone()) {
            Ok(_) => kept.push(entry.clone()),
            Err(e) => {
                skipped += 1;
                reason.get_or_insert_with(|| quarry_domain::sanitize_label(&e.to_string()));
            }
        }
    }
    let mut page = value.clone();
    page["resources"] = Value::Array(kept);
    let page = serde_json::from_value::<ListResourcesResult>(page).ok()?;
    Some((page, skipped, reason))
}

/// Whether a response id answers request `sent` (rmcp's own rule: equal, or the number written
/// as a string).
fn answers(sent: &RequestId, got: &RequestId) -> bool {
    sent == got
        || matches!((sent, got), (NumberOrString::Number(n), NumberOrString::String(s))
            if s.parse::<i64>().ok() == Some(*n))
}

impl<T> Correlated<T> {
    /// True (and forgotten) when `id` answers a request in flight.
    fn settle(&self, id: &RequestId) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match pending.iter().position(|sent| answers(sent, id)) {
            Some(at) => {
                pending.swap_remove(at);
                true
            }
            None => false,
        }
    }
}

impl<T> Correlated<T> {
    /// `message`, with a listing page that did not parse repaired.
    fn repaired(&self, message: RxJsonRpcMessage<RoleClient>) -> RxJsonRpcMessage<RoleClient> {
        let JsonRpcMessage::Response(mut response) = message else {
            return message;
        };
        if let ServerResult::CustomResult(CustomResult(value)) = &response.result
            && let Some((page, skipped, reason)) = repair_listing(value)
        {
            tracing::warn!(
                skipped,
                reason = reason.as_deref().unwrap_or(""),
                "left malformed entries out of a listing page"
            );
            let mut total = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
            total.count += skipped;
            if total.first_reason.is_none() {
                total.first_reason = reason;
            }
            response.result = ServerResult::ListResourcesResult(page);
        }
        JsonRpcMessage::Response(response)
    }
}

impl<T> Transport<RoleClient> for Correlated<T>
where
    T: Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            if pending.len() >= MAX_PENDING {
                pending.remove(0);
            }
            pending.push(request.id.clone());
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let Some(message) = self.inner.receive().await else {
                self.coverage
                    .lost("the connection to the server ended")
                    .await;
                return None;
            };
            let stray = match &message {
                JsonRpcMessage::Response(r) => !self.settle(&r.id),
                JsonRpcMessage::Error(e) => e.id.as_ref().is_some_and(|id| !self.settle(id)),
                _ => false,
            };
            if stray {
                tracing::debug!("dropped a response whose id matches no request in flight");
                continue;
            }
            return Some(self.repaired(message));
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // traces: RC-7 — a page with malformed entries keeps its good ones.
    #[test]
    fn rc_7_a_page_with_malformed_entries_keeps_the_good_ones() {
        let page = serde_json::json!({
            "resources": [
                {"uri": "a", "name": "a"},
                {"uri": "b", "name": null},
                {"uri": "c", "name": "c", "size": -1},
                {"uri": "d", "name": "d", "mimeType": 7},
                {"uri": "e", "name": "e", "size": 1.5},
                {"uri": "f", "name": "f", "annotations": "loud"},
                {"uri": "g", "name": "g", "size": 3}
            ],
            "nextCursor": "next"
        });
        let (repaired, skipped, reason) = repair_listing(&page).unwrap();
        let uris: Vec<&str> = repaired.resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, ["a", "g"]);
        assert_eq!(skipped, 5);
        assert!(reason.is_some());
        assert_eq!(
            repaired.next_cursor.as_deref(),
            Some("next"),
            "the cursor survives"
        );
        assert!(repair_listing(&serde_json::json!({"contents": []})).is_none());
    }

    /// A transport whose server has gone: there is nothing more to receive.
    struct Gone;

    impl Transport<RoleClient> for Gone {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            None
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    // traces: CA-2 — a transport that ends by itself (the server's process exited, its
    // connection dropped) took the session's subscriptions with it: the observer is told, and
    // the URIs are asked for again.
    #[tokio::test]
    async fn a_transport_that_ends_by_itself_loses_the_sessions_subscriptions() {
        let (told, coverage) = crate::coverage::tests::counted();
        assert!(coverage.claim("fixture://counter"));
        let mut transport = Correlated::new(Gone, coverage.clone());
        assert!(transport.receive().await.is_none());
        assert_eq!(told.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(coverage.claim("fixture://counter"), "asked for again");
    }

    #[test]
    fn ids_answer_as_rmcp_matches_them() {
        let n = NumberOrString::Number(7);
        assert!(answers(&n, &NumberOrString::Number(7)));
        assert!(answers(&n, &NumberOrString::String("7".into())));
        assert!(!answers(&n, &NumberOrString::Number(8)));
        assert!(!answers(&NumberOrString::String("a".into()), &n));
    }
}
