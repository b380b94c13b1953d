//! TLS for tests: a throwaway PKI made with rcgen (a CA, a server certificate for 127.0.0.1 and
//! localhost, client certificates from that CA and from another), and a TLS listener for the
//! fixture's HTTPS mode.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use rustls::{
    RootCertStore, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::WebPkiClientVerifier,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

/// A certificate and its private key, as PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

/// A test PKI: a CA, a server certificate it signed, a client certificate it signed, and a client
/// certificate from another CA (which the server does not trust).
#[derive(Debug, Clone)]
pub struct TestPki {
    /// The CA's certificate (what clients and servers trust).
    pub ca: String,
    /// The server's certificate, for `127.0.0.1` and `localhost`.
    pub server: Pem,
    /// A client certificate signed by the CA.
    pub client: Pem,
    /// A client certificate signed by another CA.
    pub stranger: Pem,
}

fn ca() -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a CA key")).expect("a CA")
}

fn leaf(names: &[&str], ip: bool, issuer: &CertifiedIssuer<'_, KeyPair>) -> Pem {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("leaf parameters");
    if ip {
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    }
    let key = KeyPair::generate().expect("a leaf key");
    let cert = params.signed_by(&key, issuer).expect("a leaf certificate");
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

impl TestPki {
    /// A new PKI.
    ///
    /// # Panics
    /// When rcgen cannot make a key or certificate.
    pub fn new() -> Self {
        let ca = ca();
        let other = self::ca();
        Self {
            ca: ca.pem(),
            server: leaf(&["localhost"], true, &ca),
            client: leaf(&["quarry-client"], false, &ca),
            stranger: leaf(&["stranger"], false, &other),
        }
    }
}

impl Default for TestPki {
    fn default() -> Self {
        Self::new()
    }
}

/// How an HTTPS fixture speaks TLS.
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The PKI whose server certificate it presents.
    pub pki: TestPki,
    /// Demand a client certificate signed by the PKI's CA.
    pub require_client_cert: bool,
    /// Offer TLS 1.2 only (an old server).
    pub tls12_only: bool,
}

impl ServerTls {
    pub(crate) fn config(&self) -> anyhow::Result<Arc<ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = if self.tls12_only {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13, &rustls::version::TLS12]
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)?;
        let certs = CertificateDer::pem_slice_iter(self.pki.server.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.pki.server.key.as_bytes())?;
        let config = if self.require_client_cert {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(self.pki.ca.as_bytes()) {
                roots.add(ca?)?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(certs, key)?
        } else {
            builder.with_no_client_auth().with_single_cert(certs, key)?
        };
        Ok(Arc::new(config))
    }
}

/// Accepts TCP connections and completes a TLS handshake on each; a failed handshake is dropped
/// and the next connection taken.
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl TlsListener {
    pub(crate) fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> Self {
        Self {
            tcp,
            acceptor: TlsAcceptor::from(config),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
