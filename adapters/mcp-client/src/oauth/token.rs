//! The token endpoint: the authorization-code exchange, refresh, and client credentials, with
//! the client authenticated as the server supports (HTTP Basic, form fields, a signed JWT
//! assertion per RFC 7523, or none for a public client).

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use quarry_domain::{OAuthCredential, Secret, ServerSpec, TokenAuthMethod, sanitize_label};
use quarry_ports::{Challenge, OAuthFailure};
use reqwest::{Method, header};
use ring::{
    rand::{SecureRandom, SystemRandom},
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair},
};
use serde_json::{Value, json};

use super::{
    Call,
    discovery::{self, AuthServer},
    text, unavailable, union_scopes,
};

/// Where tokens come from for one credential.
pub(super) struct TokenEndpoint {
    pub(super) url: String,
    pub(super) issuer: String,
    pub(super) methods: Vec<String>,
    pub(super) resource: Option<String>,
}

impl TokenEndpoint {
    pub(super) fn of(server: &AuthServer, resource: String) -> Self {
        Self {
            url: server.token_endpoint.clone(),
            issuer: server.issuer.clone(),
            methods: server.token_auth_methods.clone(),
            resource: Some(resource),
        }
    }
}

/// The token endpoint the credential knows, or discovery's.
async fn endpoint_for(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    challenge: Option<&Challenge>,
) -> Result<(TokenEndpoint, Option<Vec<String>>), OAuthFailure> {
    if let (Some(url), Some(issuer)) = (&credential.token_endpoint, &credential.issuer)
        && credential.token_endpoint_auth_method.is_some()
    {
        // The resource indicator goes with every token request (RFC 8707): the one discovered,
        // else the server's own URL.
        let resource = match &credential.resource {
            Some(r) => r.clone(),
            None => discovery::canonical(&discovery::server_url(spec)?),
        };
        return Ok((
            TokenEndpoint {
                url: url.clone(),
                issuer: issuer.clone(),
                methods: Vec::new(),
                resource: Some(resource),
            },
            None,
        ));
    }
    let challenge = match challenge {
        Some(c) => Some(c.clone()),
        None => discovery::ask_for_challenge(spec).await?,
    };
    let found = discovery::discover(spec, challenge.as_ref()).await?;
    let scopes = found.scopes_supported.clone();
    Ok((
        TokenEndpoint::of(&found.server, found.resource),
        Some(scopes),
    ))
}

/// The method the client authenticates with: configured, else the best the server supports
/// that the client can do (RFC 8414's default is client_secret_basic).
pub(super) fn method_for(credential: &OAuthCredential, supported: &[String]) -> TokenAuthMethod {
    use TokenAuthMethod::{ClientSecretBasic, ClientSecretPost, None, PrivateKeyJwt};
    if let Some(m) = credential.token_endpoint_auth_method {
        return m;
    }
    let usable: Vec<TokenAuthMethod> = [PrivateKeyJwt, ClientSecretBasic, ClientSecretPost, None]
        .into_iter()
        .filter(|m| match m {
            PrivateKeyJwt => credential.private_key.is_some(),
            ClientSecretBasic | ClientSecretPost => credential.client_secret.is_some(),
            None => credential.client_secret.is_none() && credential.private_key.is_none(),
        })
        .collect();
    let offered = |m: &TokenAuthMethod| {
        if supported.is_empty() {
            matches!(m, ClientSecretBasic | PrivateKeyJwt | None)
        } else {
            supported.iter().any(|s| s == m.as_str())
        }
    };
    usable
        .iter()
        .copied()
        .find(offered)
        .or_else(|| usable.first().copied())
        .unwrap_or(None)
}

/// RFC 6749 §2.3.1: the id and secret are form-encoded before Basic encoding.
fn basic(id: &str, secret: &str) -> String {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", enc(id), enc(secret));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// A client assertion (RFC 7523 §2.2) signed with ES256 by `key` (PKCS#8 PEM).
fn assertion(client_id: &str, audience: &str, key: &Secret) -> Result<String, OAuthFailure> {
    let der = pem_body(key.expose())
        .ok_or_else(|| unavailable("the client's private key is not a PEM PRIVATE KEY"))?;
    let rng = SystemRandom::new();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
        .map_err(|_| unavailable("the client's private key is not a P-256 PKCS#8 key (private_key_jwt signs with ES256)"))?;
    let now = chrono::Utc::now().timestamp();
    let header = json!({"alg": "ES256", "typ": "JWT"});
    let claims = json!({
        "iss": client_id, "sub": client_id, "aud": audience,
        "iat": now, "exp": now + 300, "jti": random_token(16)?,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let signature = pair
        .sign(&rng, signing_input.as_bytes())
        .map_err(|_| unavailable("the client assertion cannot be signed"))?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature.as_ref())
    ))
}

/// The DER inside a PEM block.
fn pem_body(pem: &str) -> Option<zeroize::Zeroizing<Vec<u8>>> {
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .ok()
        .map(zeroize::Zeroizing::new)
}

/// `bytes` random bytes, base64url.
pub(super) fn random_token(bytes: usize) -> Result<String, OAuthFailure> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| unavailable("no randomness available"))?;
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

/// POSTs a token request and reads the token response into a copy of `credential`.
pub(super) async fn request(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    endpoint: &TokenEndpoint,
    mut form: Vec<(&'static str, String)>,
) -> Result<OAuthCredential, OAuthFailure> {
    let method = method_for(credential, &endpoint.methods);
    let client_id = credential.client_id.clone().unwrap_or_default();
    let mut headers = vec![(header::ACCEPT, "application/json".to_owned())];
    match method {
        TokenAuthMethod::ClientSecretBasic => {
            let secret = credential
                .client_secret
                .as_ref()
                .ok_or_else(|| unavailable("client_secret_basic needs a client secret"))?;
            headers.push((header::AUTHORIZATION, basic(&client_id, secret.expose())));
        }
        TokenAuthMethod::ClientSecretPost => {
            let secret = credential
                .client_secret
                .as_ref()
                .ok_or_else(|| unavailable("client_secret_post needs a client secret"))?;
            form.push(("client_id", client_id.clone()));
            form.push(("client_secret", secret.expose().to_owned()));
        }
        TokenAuthMethod::PrivateKeyJwt => {
            let key = credential
                .private_key
                .as_ref()
                .ok_or_else(|| unavailable("private_key_jwt needs the client's private key"))?;
            form.push(("client_id", client_id.clone()));
            form.push((
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
            ));
            form.push((
                "client_assertion",
                assertion(&client_id, &endpoint.issuer, key)?,
            ));
        }
        TokenAuthMethod::None => form.push(("client_id", client_id.clone())),
    }
    if let Some(resource) = &endpoint.resource {
        form.push(("resource", resource.clone()));
    }
    let answer = Call {
        spec,
        method: Method::POST,
        url: &endpoint.url,
        headers,
        form: Some(form),
        json: None,
    }
    .send()
    .await;
    let answer = answer?;
    if !answer.status.is_success() {
        let error = text(&answer.body, "error").unwrap_or("no error code");
        let why = format!(
            "the token endpoint answered HTTP {} ({}{})",
            answer.status.as_u16(),
            sanitize_label(error),
            text(&answer.body, "error_description")
                .map(|d| format!(": {}", sanitize_label(d)))
                .unwrap_or_default()
        );
        return Err(match error {
            "invalid_grant" | "consent_required" | "login_required" | "interaction_required" => {
                OAuthFailure::NeedsLogin(why)
            }
            _ => OAuthFailure::Unavailable(why),
        });
    }
    let tokens = &answer.body;
    let access = text(tokens, "access_token")
        .ok_or_else(|| unavailable("the token response has no access_token"))?;
    if !text(tokens, "token_type").is_some_and(|t| t.eq_ignore_ascii_case("bearer")) {
        return Err(unavailable("the token response's token_type is not Bearer"));
    }
    let secret = |field: &str, value: &str| {
        Secret::parse(field, value.to_owned()).map_err(|e| unavailable(e.message()))
    };
    let mut next = credential.clone();
    next.access_token = Some(secret("access_token", access)?);
    if let Some(refresh) = text(tokens, "refresh_token") {
        // A rotated refresh token replaces the old one (the caller persists it before use).
        next.refresh_token = Some(secret("refresh_token", refresh)?);
    }
    next.expires_at = tokens
        .get("expires_in")
        .and_then(Value::as_i64)
        .map(|s| chrono::Utc::now().timestamp().saturating_add(s));
    if let Some(scope) = text(tokens, "scope") {
        next.scope = Some(scope.to_owned());
    }
    next.token_endpoint = Some(endpoint.url.clone());
    next.issuer = Some(endpoint.issuer.clone());
    next.token_endpoint_auth_method = Some(method);
    if endpoint.resource.is_some() {
        next.resource.clone_from(&endpoint.resource);
    }
    Ok(next)
}

/// The refresh-token grant.
pub(super) async fn refresh(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    challenge: Option<&Challenge>,
) -> Result<OAuthCredential, OAuthFailure> {
    let refresh = credential
        .refresh_token
        .as_ref()
        .ok_or_else(|| OAuthFailure::NeedsLogin("there is no refresh token".into()))?;
    let (endpoint, _) = endpoint_for(spec, credential, challenge).await?;
    let form = vec![
        ("grant_type", "refresh_token".to_owned()),
        ("refresh_token", refresh.expose().to_owned()),
    ];
    request(spec, credential, &endpoint, form).await
}

/// The client-credentials grant, asking for the configured scope and what `challenge` adds.
pub(super) async fn client_credentials(
    spec: &ServerSpec,
    credential: &OAuthCredential,
    challenge: Option<&Challenge>,
) -> Result<OAuthCredential, OAuthFailure> {
    let (endpoint, supported) = endpoint_for(spec, credential, challenge).await?;
    let wanted = union_scopes(
        credential.scope.as_deref(),
        challenge.and_then(|c| c.scope.as_deref()),
    )
    .or_else(|| supported.filter(|s| !s.is_empty()).map(|s| s.join(" ")));
    let mut form = vec![("grant_type", "client_credentials".to_owned())];
    if let Some(scope) = &wanted {
        form.push(("scope", scope.clone()));
    }
    let mut next = request(spec, credential, &endpoint, form).await?;
    if next.scope.is_none() {
        next.scope = wanted;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_domain::OAuthGrant;

    fn with_secret() -> OAuthCredential {
        let mut c = OAuthCredential::new(OAuthGrant::AuthorizationCode);
        c.client_id = Some("id".into());
        c.client_secret = Some(Secret::parse("client_secret", "s".into()).unwrap());
        c
    }

    #[test]
    fn the_method_is_one_the_server_offers() {
        let c = with_secret();
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            method_for(&c, &s(&["client_secret_post"])),
            TokenAuthMethod::ClientSecretPost
        );
        assert_eq!(
            method_for(&c, &s(&["client_secret_basic"])),
            TokenAuthMethod::ClientSecretBasic
        );
        assert_eq!(method_for(&c, &[]), TokenAuthMethod::ClientSecretBasic);
        let public = OAuthCredential::new(OAuthGrant::AuthorizationCode);
        assert_eq!(method_for(&public, &s(&["none"])), TokenAuthMethod::None);
    }

    #[test]
    fn basic_credentials_are_form_encoded_first() {
        assert_eq!(
            basic("a:b", "c d"),
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("a%3Ab:c+d")
            )
        );
    }
}
