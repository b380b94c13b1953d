//! Quarry as an OAuth 2.1 resource server: the token verifier `[http.oauth]` describes.

use std::sync::Arc;

use quarry_domain::{Error, Secret};
use quarry_mcp_server::ResourceServerOptions;
use quarry_oauth_resource::{Introspection, KeySource, ResourceServer, TokenVerifier};

use crate::config::{JwksSource, OAuthSettings};

/// The verifier and metadata for `oauth`, its key set loaded (a file that cannot be read is
/// E001; an issuer that does not answer yet is a warning, and its tokens are refused until it
/// does).
///
/// # Errors
/// E001 when the configuration cannot work or the introspection secret's variable is unset.
pub(super) async fn resource_server(
    oauth: &OAuthSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ResourceServerOptions, Error> {
    let introspection = match &oauth.introspection {
        Some(i) => {
            let secret = env(&i.secret_env).ok_or_else(|| {
                Error::invalid(format!(
                    "http.oauth.introspection_client_secret_env names {}, which is not set",
                    i.secret_env
                ))
            })?;
            Some(Introspection {
                url: i.url.clone(),
                client_id: i.client_id.clone(),
                client_secret: Secret::parse(&i.secret_env, secret)?,
            })
        }
        None => None,
    };
    let verifier = TokenVerifier::new(ResourceServer {
        resource: oauth.resource.clone(),
        issuer: oauth.issuer.clone(),
        keys: match &oauth.jwks {
            JwksSource::Url(url) => KeySource::Url(url.clone()),
            JwksSource::File(path) => KeySource::File(path.clone()),
        },
        algorithms: oauth.algorithms.clone(),
        leeway: oauth.leeway,
        agent_claim: oauth.agent_claim.clone(),
        keys_max_age: oauth.jwks_max_age,
        keys_min_refetch: oauth.jwks_min_refetch,
        introspection,
    })
    .map_err(|e| Error::invalid(format!("http.oauth: {e}")))?;
    match (verifier.preload().await, &oauth.jwks) {
        (Ok(n), _) => tracing::info!(keys = n, issuer = %oauth.issuer, "token signing keys loaded"),
        (Err(why), JwksSource::File(_)) => {
            return Err(Error::invalid(format!("http.oauth.jwks_file: {why}")));
        }
        (Err(why), JwksSource::Url(_)) => tracing::warn!(
            "http.oauth: {why}; bearer tokens are refused until the key set can be fetched"
        ),
    }
    Ok(ResourceServerOptions {
        verifier: Arc::new(verifier),
        resource: oauth.resource.clone(),
        authorization_servers: vec![oauth.issuer.clone()],
        required_scopes: oauth.required_scopes.clone(),
    })
}
