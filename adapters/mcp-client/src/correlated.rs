//! Dropping responses that answer no request of ours, before the handshake as after it.
//!
//! rmcp ignores a stray response once a session runs, but during `initialize` one stray id makes
//! the whole handshake fail, so a server that sends one (a leftover from a previous client, a
//! buggy proxy) could never be used. [`Correlated`] sits between the transport and rmcp: it
//! remembers the ids of the requests sent and passes on only responses and errors that carry one
//! of them (or none: an error for a request the server could not read).

use std::{
    future::Future,
    sync::{Arc, Mutex},
};

use rmcp::{
    RoleClient,
    model::{JsonRpcMessage, NumberOrString, RequestId},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};

/// How many request ids are remembered at most; the oldest are forgotten first (requests that
/// timed out and will never be answered).
const MAX_PENDING: usize = 4096;

/// A transport that drops uncorrelated responses.
#[derive(Debug)]
pub(crate) struct Correlated<T> {
    inner: T,
    pending: Arc<Mutex<Vec<RequestId>>>,
}

impl<T> Correlated<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            pending: Arc::new(Mutex::new(Vec::new())),
        }
    }
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
            let message = self.inner.receive().await?;
            let stray = match &message {
                JsonRpcMessage::Response(r) => !self.settle(&r.id),
                JsonRpcMessage::Error(e) => e.id.as_ref().is_some_and(|id| !self.settle(id)),
                _ => false,
            };
            if stray {
                tracing::debug!("dropped a response whose id matches no request in flight");
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_answer_as_rmcp_matches_them() {
        let n = NumberOrString::Number(7);
        assert!(answers(&n, &NumberOrString::Number(7)));
        assert!(answers(&n, &NumberOrString::String("7".into())));
        assert!(!answers(&n, &NumberOrString::Number(8)));
        assert!(!answers(&NumberOrString::String("a".into()), &n));
    }
}
