//! What checking an agent's bearer token costs a request: a JWT seen for the first time against
//! the issuer's key set (held in memory after the first fetch), ES256 and EdDSA; one seen before
//! (remembered); and refusals, which are never remembered.
//!
//! `cargo bench -p quarry-oauth-resource --bench verify`

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use quarry_domain::Secret;
use quarry_oauth_resource::{KeySource, ResourceServer, TokenVerifier};
use quarry_ports::BearerVerifier;
use quarry_testkit::issuer::{TestIssuer, now};

const RESOURCE: &str = "https://quarry.example.com/mcp";

fn verify(c: &mut Criterion) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let issuer = rt.block_on(TestIssuer::start()).unwrap();
    let verifier = TokenVerifier::new(ResourceServer {
        resource: RESOURCE.into(),
        issuer: issuer.issuer.clone(),
        keys: KeySource::Url(issuer.jwks_url.clone()),
        algorithms: vec!["ES256".into(), "EdDSA".into()],
        leeway: Duration::from_secs(30),
        agent_claim: "sub".into(),
        keys_max_age: Duration::from_secs(3600),
        keys_min_refetch: Duration::from_secs(3600),
        introspection: None,
    })
    .unwrap();
    rt.block_on(verifier.preload()).unwrap();
    let claims = issuer.claims("alice", "resources:read", RESOURCE);
    let token = |t: String| Secret::parse("token", t).unwrap();
    let es256 = token(issuer.sign(&claims));
    let eddsa = token(issuer.sign_eddsa(&claims));
    let mut expired_claims = claims.clone();
    expired_claims["exp"] = serde_json::json!(now() - 3600);
    let expired = token(issuer.sign(&expired_claims));
    let foreign = token(issuer.sign(&issuer.claims("alice", "", "https://other.example")));
    let serial = std::sync::atomic::AtomicU64::new(0);
    let fresh = |eddsa: bool| {
        let mut c = claims.clone();
        c["jti"] = serde_json::json!(serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        token(if eddsa {
            issuer.sign_eddsa(&c)
        } else {
            issuer.sign(&c)
        })
    };
    let verifier = &verifier;
    for (name, eddsa) in [
        ("token/es256_first_check", false),
        ("token/eddsa_first_check", true),
    ] {
        c.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                || fresh(eddsa),
                |t| async move { assert!(verifier.verify(&t).await.is_ok()) },
                criterion::BatchSize::SmallInput,
            );
        });
    }
    for (name, t, ok) in [
        ("token/es256_remembered", &es256, true),
        ("token/eddsa_remembered", &eddsa, true),
        ("token/expired_refused", &expired, false),
        ("token/other_audience_refused", &foreign, false),
    ] {
        assert_eq!(rt.block_on(verifier.verify(t)).is_ok(), ok, "{name}");
        c.bench_function(name, |b| b.to_async(&rt).iter(|| verifier.verify(t)));
    }
    assert_eq!(verifier.key_fetches(), 1, "the key set was fetched once");
}

criterion_group!(benches, verify);
criterion_main!(benches);
