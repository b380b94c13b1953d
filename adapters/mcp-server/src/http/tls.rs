//! HTTPS for the HTTP transport: a certificate and key from PEM files, TLS 1.3 only, ring as the
//! provider. Handshakes run concurrently, each within a time bound, so a client that opens a
//! connection and says nothing holds up no one.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use axum::serve::Listener;
use rustls::{
    ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::sync::CancellationToken;

/// How long a client has to complete its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const QUEUE: usize = 64;

/// The server's TLS configuration from `cert` (a PEM chain) and `key` (a PEM private key).
///
/// # Errors
/// Which file cannot be read or used, and why.
pub(crate) fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not a PEM certificate chain: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let private = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|e| format!("{}: not a PEM private key: {e}", key.display()))?;
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| format!("{} and {}: {e}", cert.display(), key.display()))?;
    Ok(Arc::new(config))
}

/// Connections that completed their handshake.
#[derive(Debug)]
pub(crate) struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp` until `stop`, handshaking each connection in a task of its own.
    pub(crate) fn new(
        tcp: TcpListener,
        config: Arc<ServerConfig>,
        stop: CancellationToken,
    ) -> std::io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(QUEUE);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = tcp.accept() => accepted,
                };
                let Ok((stream, peer)) = accepted else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake refused: {e}"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake not completed in time"),
                    }
                });
            }
        });
        Ok(Self { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // Stopped: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

/// The client's address, over plain TCP or TLS.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// Plain TCP, each connection with `TCP_NODELAY`: an answer goes out in more than one write
/// (headers, then event-stream chunks), and without it the last waits for the client's delayed
/// acknowledgement, about 40 ms a request on Linux.
pub(crate) struct PlainListener(pub(crate) TcpListener);

impl Listener for PlainListener {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = Listener::accept(&mut self.0).await;
        let _ = stream.set_nodelay(true);
        (stream, addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Listener::local_addr(&self.0)
    }
}
