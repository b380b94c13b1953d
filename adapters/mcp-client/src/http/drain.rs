//! A POST's event-stream body that is read to its end after it is dropped, so its connection goes
//! back to the pool.
//!
//! rmcp stops reading a POST's events once it has the request's answer and drops the stream. A
//! server ends that stream right after the answer (the specification's SHOULD), but the end
//! usually arrives a moment after the answer's event; an HTTP/1.1 body dropped before its end
//! closes its connection. Every request over HTTP then paid a new TCP connection (and, over
//! HTTPS, a TLS handshake): 650 connections for 600 reads in the stampede bench. Dropped early,
//! the body is read on in a task of its own for at most [`GRACE`] and [`MOST`] bytes; a server
//! that keeps the stream open or keeps writing past either loses the connection as before.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::{Stream, StreamExt, stream::BoxStream};

/// How long a dropped body is read on, waiting for its end.
pub(super) const GRACE: Duration = Duration::from_secs(1);
/// How many more bytes a dropped body may bring before it is given up.
const MOST: usize = 64 * 1024;

/// `body`, read to its end in the background when dropped before it (see the module).
pub(super) struct DrainOnDrop<E: 'static> {
    body: Option<BoxStream<'static, Result<Bytes, E>>>,
}

impl<E: Send + 'static> DrainOnDrop<E> {
    pub(super) fn new(body: impl Stream<Item = Result<Bytes, E>> + Send + 'static) -> Self {
        Self {
            body: Some(body.boxed()),
        }
    }
}

impl<E> Stream for DrainOnDrop<E> {
    type Item = Result<Bytes, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let next = body.poll_next_unpin(cx);
        if let Poll::Ready(None | Some(Err(_))) = next {
            // Ended (or broken): nothing is left to read for the connection's sake.
            self.body = None;
        }
        next
    }
}

impl<E> Drop for DrainOnDrop<E> {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        // Outside a runtime (a test's last drop) there is no pool worth keeping the connection
        // for.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let read_on = async {
                let mut read = 0usize;
                while let Some(Ok(chunk)) = body.next().await {
                    read = read.saturating_add(chunk.len());
                    if read > MOST {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(GRACE, read_on).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    /// A body of `chunks`, then pending forever if `open`; counts the chunks read.
    fn body(
        chunks: usize,
        open: bool,
        read: Arc<AtomicUsize>,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
        let items = futures::stream::iter((0..chunks).map(move |_| {
            read.fetch_add(1, Ordering::SeqCst);
            Ok(Bytes::from_static(&[b'x'; 1024]))
        }));
        let rest = if open {
            futures::stream::pending().boxed()
        } else {
            futures::stream::empty().boxed()
        };
        items.chain(rest)
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_is_read_to_its_end() {
        let read = Arc::new(AtomicUsize::new(0));
        let mut stream = DrainOnDrop::new(body(5, false, read.clone()));
        assert!(stream.next().await.is_some());
        drop(stream);
        tokio::time::timeout(Duration::from_secs(5), async {
            while read.load(Ordering::SeqCst) < 5 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the rest of the body is read");
    }

    #[tokio::test]
    async fn a_body_that_never_ends_is_given_up_after_the_grace() {
        let read = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(());
        let witness = held.clone();
        let never_ends = body(1, true, read).map(move |chunk| {
            let _ = &witness;
            chunk
        });
        drop(DrainOnDrop::new(never_ends));
        tokio::time::sleep(GRACE / 2).await;
        assert_eq!(
            Arc::strong_count(&held),
            2,
            "the body is read on during the grace"
        );
        tokio::time::timeout(GRACE, async {
            while Arc::strong_count(&held) > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the body is dropped once the grace is over");
    }

    #[tokio::test]
    async fn a_body_that_keeps_writing_is_given_up_after_its_bound() {
        let read = Arc::new(AtomicUsize::new(0));
        drop(DrainOnDrop::new(body(1_000, true, read.clone())));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let chunks = read.load(Ordering::SeqCst);
        assert!(
            (MOST / 1024..=MOST / 1024 + 1).contains(&chunks),
            "read {chunks} chunks of 1 KiB"
        );
    }
}
