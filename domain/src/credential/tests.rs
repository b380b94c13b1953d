//! Credential types: parsing, redaction, headers, the sealed form.

use serde_json::json;

use super::*;
use crate::ErrorCode;

const CANARY: &str = "sk-canary-7f3a9c1e";

fn parse(auth_type: &str, credentials: Value) -> Result<UpstreamAuth, Error> {
    UpstreamAuth::parse(auth_type, credentials.as_object().unwrap())
}

// traces: UC-10 — Debug and Display of every credential type print a redaction, never the
// secret.
#[test]
fn uc_10_credentials_print_as_a_redaction() {
    for auth in [
        parse("api_key", json!({"key": CANARY})).unwrap(),
        parse("bearer_token", json!({"token": CANARY})).unwrap(),
        parse(
            "oauth2",
            json!({"client_id": "c", "client_secret": CANARY, "access_token": CANARY, "refresh_token": CANARY}),
        )
        .unwrap(),
    ] {
        let printed = format!("{auth:?} {:?}", auth.headers());
        assert!(!printed.contains(CANARY), "{printed}");
        assert!(printed.contains(REDACTED), "{printed}");
        for (_, value) in auth.headers() {
            assert_eq!(value.to_string(), REDACTED);
        }
    }
}

// traces: UC-11, REQ-071-041 — each type's required fields are checked before anything is
// stored, and the error names the field without echoing the value.
#[test]
fn uc_11_credentials_are_validated_before_storage() {
    let bad = [
        ("api_key", json!({})),
        ("api_key", json!({"key": ""})),
        ("api_key", json!({"key": 7})),
        (
            "api_key",
            json!({"key": format!("{CANARY}\r\nX-Injected: 1")}),
        ),
        ("api_key", json!({"key": "x".repeat(MAX_SECRET_LEN + 1)})),
        ("api_key", json!({"key": CANARY, "header": "Bad Header"})),
        (
            "api_key",
            json!({"key": CANARY, "header": "Mcp-Session-Id"}),
        ),
        ("api_key", json!({"key": CANARY, "header": "h".repeat(65)})),
        ("api_key", json!({"key": CANARY, "tokn": "typo"})),
        ("bearer_token", json!({"key": CANARY})),
        ("bearer_token", json!({"token": format!("{CANARY} two")})),
        ("kerberos", json!({"token": CANARY})),
        // OAuth 2: a machine client needs an id and a secret or key; URLs are https (http only
        // to this machine); a key is PEM; fields are bounded and known.
        (
            "oauth2",
            json!({"grant_type": "client_credentials", "client_secret": CANARY}),
        ),
        (
            "oauth2",
            json!({"grant_type": "client_credentials", "client_id": "c"}),
        ),
        (
            "oauth2",
            json!({"grant_type": "implicit", "client_id": "c"}),
        ),
        (
            "oauth2",
            json!({"token_endpoint": "http://as.example/token", "refresh_token": CANARY}),
        ),
        (
            "oauth2",
            json!({"issuer": "ftp://as.example", "refresh_token": CANARY}),
        ),
        (
            "oauth2",
            json!({"client_metadata_url": "http://127.0.0.1/client.json"}),
        ),
        (
            "oauth2",
            json!({"token_endpoint_auth_method": "private_key_jwt", "client_secret": CANARY}),
        ),
        ("oauth2", json!({"private_key": CANARY})),
        ("oauth2", json!({"scope": "s".repeat(2049)})),
        ("oauth2", json!({"refresh_token": format!("{CANARY}\n")})),
        ("oauth2", json!({"expires_at": "tomorrow"})),
        ("oauth2", json!({"client_secrett": CANARY})),
    ];
    for (auth_type, credentials) in bad {
        let e = parse(auth_type, credentials.clone()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::E001, "{auth_type} {credentials}");
        assert!(!e.message().contains(CANARY), "{}", e.message());
    }
}

// traces: REQ-071-038, UC-11 — an OAuth 2 credential round-trips through the vault's plaintext;
// http endpoints are accepted for this machine only; its tokens go in no static header (the
// connection asks the token holder for the current one).
#[test]
fn an_oauth_credential_round_trips_and_sends_no_static_header() {
    let auth = parse(
        "oauth2",
        json!({
            "grant_type": "client_credentials",
            "client_id": "machine",
            "client_secret": CANARY,
            "scope": "files:read",
            "token_endpoint": "http://127.0.0.1:9/token",
            "issuer": "https://as.example",
            "access_token": "at-1",
            "expires_at": 1_800_000_000,
        }),
    )
    .unwrap();
    assert!(auth.headers().is_empty());
    let back = UpstreamAuth::from_plaintext(AuthType::OAuth2, &auth.to_plaintext()).unwrap();
    assert_eq!(back, auth);
    let UpstreamAuth::OAuth2(oauth) = back else {
        panic!("not OAuth")
    };
    assert!(oauth.renews_alone());
    assert!(!oauth.needs_renewal(1_800_000_000 - 61, 60));
    assert!(oauth.needs_renewal(1_800_000_000 - 60, 60));
}

// traces: REQ-071-037, REQ-071-040 — an API key goes in its header (X-API-Key unless named),
// a bearer token in Authorization.
#[test]
fn each_type_goes_in_its_header() {
    let headers = |auth: UpstreamAuth| -> Vec<(String, String)> {
        auth.headers()
            .into_iter()
            .map(|(k, v)| (k, v.expose().to_owned()))
            .collect()
    };
    assert_eq!(
        headers(parse("api_key", json!({"key": CANARY})).unwrap()),
        [("X-API-Key".to_owned(), CANARY.to_owned())]
    );
    assert_eq!(
        headers(parse("api_key", json!({"key": CANARY, "header": "X-Team-Key"})).unwrap()),
        [("X-Team-Key".to_owned(), CANARY.to_owned())]
    );
    assert_eq!(
        headers(parse("bearer_token", json!({"token": CANARY})).unwrap()),
        [("Authorization".to_owned(), format!("Bearer {CANARY}"))]
    );
}

#[test]
fn plaintext_round_trips_and_a_wrong_type_is_refused() {
    for auth in [
        parse("api_key", json!({"key": CANARY, "header": "X-K"})).unwrap(),
        parse("bearer_token", json!({"token": CANARY})).unwrap(),
    ] {
        let plain = auth.to_plaintext();
        assert_eq!(
            UpstreamAuth::from_plaintext(auth.auth_type(), &plain).unwrap(),
            auth
        );
    }
    let key = parse("api_key", json!({"key": CANARY})).unwrap();
    assert!(UpstreamAuth::from_plaintext(AuthType::BearerToken, &key.to_plaintext()).is_err());
    assert!(UpstreamAuth::from_plaintext(AuthType::ApiKey, b"not json").is_err());
}
