//! What the server said of the client's credentials: a 401 or 403, or a TLS alert about its
//! certificate (E005), told apart from TLS failures of another kind (a version the server does
//! not speak, a certificate not trusted).

use std::sync::Arc;

use quarry_domain::sanitize_label;
use rmcp::transport::streamable_http_client::StreamableHttpError;

/// The last time the server refused the client's credentials (HTTP 401 or 403, or a TLS alert
/// about its certificate), and why; and the last TLS failure of another kind.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusals(Arc<std::sync::Mutex<(Option<String>, Option<String>)>>);

impl Refusals {
    pub(crate) fn last(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    pub(crate) fn tls(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    pub(super) fn note(&self, why: String) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(why);
    }

    pub(super) fn note_tls(&self, why: String) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(why);
    }
}

/// What a TLS failure in `error`'s chain of causes says, if there is one: (about the client
/// certificate, the description).
pub(super) fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<(bool, String)> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        let text = format!("{e:?}");
        // Alerts the server sends when it does not accept the client's certificate (rustls
        // answers a certificate from a CA it does not trust with decrypt_error).
        let about_the_client = [
            "CertificateRequired",
            "BadCertificate",
            "UnknownCA",
            "CertificateUnknown",
            "CertificateExpired",
            "CertificateRevoked",
            "UnsupportedCertificate",
            "AccessDenied",
            "DecryptError",
        ]
        .iter()
        .any(|alert| text.contains(&format!("AlertReceived({alert})")));
        if about_the_client {
            return Some((
                true,
                "the server refused the client certificate (TLS handshake)".into(),
            ));
        }
        if text.contains("PeerIncompatible") || text.contains("ProtocolVersion") {
            return Some((
                false,
                "the server does not speak TLS 1.3; allow TLS 1.2 for it with tls_min_version = \"1.2\"".into(),
            ));
        }
        if text.contains("InvalidCertificate") {
            return Some((
                false,
                format!(
                    "the server's certificate is not trusted: {}",
                    sanitize_label(&e.to_string())
                ),
            ));
        }
        cause = e.source();
    }
    None
}

/// Why `error` is the server refusing the client's credentials, if it is.
pub(super) fn refusal<E: std::error::Error + Send + Sync + 'static>(
    error: &StreamableHttpError<E>,
) -> Option<String> {
    if let StreamableHttpError::Client(e) = error
        && let Some((true, why)) = tls_failure(e)
    {
        return Some(why);
    }
    match error {
        StreamableHttpError::AuthRequired(_) => Some("HTTP 401, authentication required".into()),
        StreamableHttpError::InsufficientScope(_) => {
            Some("HTTP 403, the credential lacks a scope the server requires".into())
        }
        StreamableHttpError::UnexpectedServerResponse(why)
            if why.starts_with("HTTP 401") || why.starts_with("HTTP 403") =>
        {
            Some(why.chars().take(8).collect::<String>() + ", the server refused the credential")
        }
        _ => None,
    }
}
