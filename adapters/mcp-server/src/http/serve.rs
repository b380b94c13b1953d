//! The accept loop: at most `max_connections` connections are served at once. hyper holds about
//! 24 KiB of buffers for each connection it serves, whatever the connection does, so an unbounded
//! number of clients would grow the process without bound. A connection past the bound is
//! accepted and waits its turn as a bare socket (its request, if sent, waits in the kernel's
//! buffer); while any wait, every connection served is asked to close after its current exchange
//! (HTTP/1 `Connection: close`; an idle keep-alive connection closes at once, and one that has
//! sent nothing yet is served its first request, then closed), so the waiting are served in turn
//! rather than starved by idle keep-alive connections. A client whose idle connection was closed
//! opens another, as HTTP clients do. A connection that sends no complete request head within
//! [`HEADER_READ`] is closed.

use std::{
    collections::VecDeque,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router, extract::ConnectInfo, response::Response, routing::future::RouteFuture, serve::Listener,
};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tower::Service;

use super::tls::Peer;

/// How long a connection has to send a request's head, whether it is new or idle between
/// requests; past it, the connection is closed.
const HEADER_READ: Duration = Duration::from_secs(30);

/// Accepted connections that may wait for a turn; past this many, a new one is closed at once.
const MAX_WAITING: usize = 65_536;

/// Connections the kernel completes and holds for the accept loop (capped by the system's
/// `net.core.somaxconn`). Past it, a client's connection attempt is dropped and retried a second
/// later, so a burst of clients reconnecting at once (say, after their idle connections were
/// closed to make room) needs more than the 1,024 a listener gets by default.
const BACKLOG: u32 = 4096;

/// A listener on `addr` (`SO_REUSEADDR`, as tokio's own bind sets it) with [`BACKLOG`].
///
/// # Errors
/// When the address cannot be bound.
pub(crate) fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `router` on `listener`, at most `max_connections` connections at once, until `stop`:
/// then no new connection is taken, those waiting are closed, and each served is asked to close
/// after its current exchange. Once they have all closed, or `drain` after `stop` (when `ended`
/// is cancelled, ending the sessions and their streams), it returns.
pub(crate) async fn serve<L>(
    mut listener: L,
    router: Router,
    max_connections: usize,
    stop: CancellationToken,
    ended: CancellationToken,
    drain: Duration,
) -> std::io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
{
    let slots = Arc::new(Semaphore::new(max_connections));
    // Bumped each time connections start to wait: every connection served then closes after its
    // current exchange.
    let (crowded, _) = watch::channel(0u64);
    let connections = TaskTracker::new();
    let mut waiting: VecDeque<(L::Io, SocketAddr)> = VecDeque::new();
    // Whether the last connection accepted was closed for want of room to wait (said once).
    let mut refusing = false;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ);
    let served = Served {
        router,
        http: Arc::new(http),
        stop: stop.clone(),
    };
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            permit = slots.clone().acquire_owned(), if !waiting.is_empty() => {
                let Ok(permit) = permit else { break };
                if let Some((io, peer)) = waiting.pop_front() {
                    // Others still waiting: this one closes after its first exchange too.
                    let close_after = !waiting.is_empty();
                    let watch = crowded.subscribe();
                    connections.spawn(served.connection(io, peer, permit, watch, close_after));
                }
            }
            (io, peer) = listener.accept() => {
                match slots.clone().try_acquire_owned() {
                    Ok(permit) if waiting.is_empty() => {
                        let conn = served.connection(io, peer, permit, crowded.subscribe(), false);
                        connections.spawn(conn);
                    }
                    _ if waiting.len() >= MAX_WAITING => {
                        if !refusing {
                            let why = format!("{MAX_WAITING} already wait for a turn");
                            tracing::warn!(%peer, "connections closed unserved: {why}");
                            refusing = true;
                        }
                    }
                    _ => {
                        refusing = false;
                        if waiting.is_empty() {
                            tracing::debug!(max_connections, "connections wait for a turn");
                            crowded.send_modify(|n| *n += 1);
                        }
                        waiting.push_back((io, peer));
                    }
                }
            }
        }
    }
    drop(waiting);
    drop(listener);
    connections.close();
    tokio::select! {
        () = connections.wait() => {}
        () = tokio::time::sleep(drain) => {
            ended.cancel();
            connections.wait().await;
        }
    }
    Ok(())
}

/// What each connection is served with.
struct Served {
    router: Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    stop: CancellationToken,
}

impl Served {
    /// Serves one connection, holding `permit` until it closes; closes it after its current
    /// exchange once `crowded` moves (after its first with `close_after`), or on stop.
    fn connection<I>(
        &self,
        io: I,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        mut crowded: watch::Receiver<u64>,
        close_after: bool,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let started = Arc::new(Started::default());
        let service = Connection {
            router: self.router.clone(),
            peer: Peer(peer),
            started: started.clone(),
        };
        let (http, stop) = (self.http.clone(), self.stop.clone());
        async move {
            let _permit = permit;
            let conn = http.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            // hyper closes a connection asked to shut down before it has read anything, request
            // unread; so a connection is asked only once its first request has begun.
            let turn_over = async {
                if !close_after && crowded.changed().await.is_err() {
                    // The accept loop has ended: `stop` says so too, and closes the connection.
                    std::future::pending::<()>().await;
                }
                started.wait().await;
            };
            tokio::pin!(turn_over);
            let mut asked = stop.is_cancelled();
            if asked {
                conn.as_mut().graceful_shutdown();
            }
            loop {
                tokio::select! {
                    done = conn.as_mut() => {
                        if let Err(e) = done {
                            tracing::trace!(%peer, "connection ended: {e}");
                        }
                        return;
                    }
                    () = &mut turn_over, if !asked => {
                        conn.as_mut().graceful_shutdown();
                        asked = true;
                    }
                    () = stop.cancelled(), if !asked => {
                        conn.as_mut().graceful_shutdown();
                        asked = true;
                    }
                }
            }
        }
    }
}

/// Whether a connection's first request has begun.
#[derive(Default)]
struct Started {
    yes: AtomicBool,
    news: Notify,
}

impl Started {
    fn mark(&self) {
        if !self.yes.swap(true, Ordering::AcqRel) {
            // Kept for a waiter that comes later.
            self.news.notify_one();
        }
    }

    async fn wait(&self) {
        if !self.yes.load(Ordering::Acquire) {
            self.news.notified().await;
        }
    }
}

/// One connection's service: the router, each request carrying the client's address.
#[derive(Clone)]
struct Connection {
    router: Router,
    peer: Peer,
    started: Arc<Started>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Connection {
    type Response = Response;
    type Error = Infallible;
    type Future = RouteFuture<Infallible>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        self.started.mark();
        let mut request = request;
        request.extensions_mut().insert(ConnectInfo(self.peer));
        self.router.clone().call(request)
    }
}
