//! One server's OAuth tokens under concurrency: renewals are single-flight, whether twenty
//! callers find the token expiring or twenty connections report it refused at once.

use std::{sync::Arc, time::Duration};

use quarry_domain::{Endpoint, OAuthCredential, OAuthGrant, Secret, ServerName, ServerSpec};
use quarry_ports::{AccessTokens, Browser, Challenge};
use quarry_testkit::fakes::{FakeOAuth, ManualClock};
use quarry_usecases::ServerTokens;

struct NoOne;

#[async_trait::async_trait]
impl Browser for NoOne {
    async fn open(&self, _url: &str) -> Result<(), String> {
        Err("no one is here".into())
    }
}

fn holder(oauth: Arc<FakeOAuth>, expires_at: i64) -> Arc<ServerTokens> {
    let spec = ServerSpec::new(
        ServerName::parse("docs").unwrap(),
        Endpoint::Http {
            url: "https://docs.example/mcp".into(),
        },
    );
    let mut credential = OAuthCredential::new(OAuthGrant::AuthorizationCode);
    credential.access_token = Some(Secret::parse("access_token", "access-0".into()).unwrap());
    credential.refresh_token = Some(Secret::parse("refresh_token", "refresh-0".into()).unwrap());
    credential.expires_at = Some(expires_at);
    Arc::new(ServerTokens::interactive(
        spec,
        credential,
        oauth,
        Arc::new(ManualClock::new()),
        Arc::new(NoOne),
    ))
}

/// Runs `f` on twenty tasks at once and returns the tokens they got.
async fn twenty<F, Fut>(tokens: &Arc<ServerTokens>, f: F) -> Vec<String>
where
    F: Fn(Arc<ServerTokens>) -> Fut,
    Fut: std::future::Future<Output = Option<Secret>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        tasks.spawn(f(tokens.clone()));
    }
    let mut got = Vec::new();
    while let Some(token) = tasks.join_next().await {
        got.push(token.unwrap().expect("a token").expose().to_owned());
    }
    got
}

// traces: UC-6 — twenty callers that find the token expired make one token request and all get
// its token; the rotated refresh token is the one used next.
#[tokio::test]
async fn uc_6_twenty_callers_with_an_expired_token_share_one_refresh() {
    let oauth = Arc::new(FakeOAuth::with_refresh_token(
        "refresh-0",
        Duration::from_millis(50),
        Some(1_900_000_000),
    ));
    let tokens = holder(oauth.clone(), 1_000_000_000);
    let got = twenty(&tokens, |t| async move { t.current().await.unwrap() }).await;
    assert_eq!(oauth.token_requests(), 1);
    assert!(got.iter().all(|t| t == "access-1"), "{got:?}");
}

// traces: UC-6 — twenty connections whose token the server refused at once make one token
// request; a refusal of a token already replaced gets the replacement without another.
#[tokio::test]
async fn uc_6_twenty_refusals_of_one_token_share_one_refresh() {
    let oauth = Arc::new(FakeOAuth::with_refresh_token(
        "refresh-0",
        Duration::from_millis(50),
        Some(1_900_000_000),
    ));
    let tokens = holder(oauth.clone(), 1_900_000_000);
    let sent = Secret::parse("access_token", "access-0".into()).unwrap();
    let got = twenty(&tokens, move |t| {
        let sent = sent.clone();
        async move { t.refused(Some(sent), Challenge::default()).await.ok() }
    })
    .await;
    assert_eq!(oauth.token_requests(), 1);
    assert!(got.iter().all(|t| t == "access-1"), "{got:?}");
    // The new token refused in turn: one more renewal, with the rotated refresh token.
    let sent = Secret::parse("access_token", "access-1".into()).unwrap();
    let next = tokens
        .refused(Some(sent), Challenge::default())
        .await
        .unwrap();
    assert_eq!(next.expose(), "access-2");
    assert_eq!(oauth.token_requests(), 2);
}

// traces: UC-13 — a revoked grant: the refusal names `quarry auth login`, and the next request
// fails at once without another token request.
#[tokio::test]
async fn uc_13_a_revoked_grant_fails_fast_naming_the_command() {
    let oauth = Arc::new(FakeOAuth::with_refresh_token(
        "refresh-0",
        Duration::ZERO,
        None,
    ));
    oauth.revoke();
    let tokens = holder(oauth.clone(), 1_000_000_000);
    let error = tokens.current().await.unwrap_err().to_string();
    assert!(error.contains("quarry auth login docs"), "{error}");
    assert_eq!(oauth.token_requests(), 1);
    let again = tokens.current().await.unwrap_err().to_string();
    assert!(again.contains("quarry auth login docs"), "{again}");
    assert_eq!(oauth.token_requests(), 1);
}
