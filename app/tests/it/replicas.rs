//! Several replicas sharing one truth: two `quarry serve --http` processes on one PostgreSQL
//! schema and one Redis prefix (each test its own, removed at the end). What one replica is told
//! or fetches, the other uses: credentials, idempotency records, cached content and its
//! invalidation, one audit chain.

use std::{path::Path, time::Duration};

use quarry_cache_redis::RedisLink;
use quarry_store_postgres::{PostgresStore, PostgresTarget};
use quarry_testkit::services;
use rmcp::model::SubscribeRequestParams;
use serde_json::{Value, json};

use crate::{
    auth::KEY,
    http::{Served, agent, served_env},
    support::{Client, call, call_error, http_server},
};

/// A vault key both replicas are given (base64 of 32 bytes).
const VAULT_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// One deployment's shared state: a schema and a key prefix of its own, removed when dropped.
pub(crate) struct Shared {
    pub(crate) schema: String,
    pub(crate) prefix: String,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            schema: services::unique_name("quarry_it"),
            prefix: format!("{}:", services::unique_name("quarry_it")),
        }
    }

    /// The configuration's `[store]` and `[cache]` sections for this deployment, and `rest`.
    pub(crate) fn config(&self, rest: &str) -> String {
        format!(
            "[store]\nbackend = \"postgres\"\nurl = {:?}\nschema = {:?}\n\n[cache]\nbackend = \"redis\"\nredis_url = {:?}\nredis_prefix = {:?}\n\n{rest}",
            services::postgres_url(),
            self.schema,
            services::redis_url(),
            self.prefix
        )
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let target = PostgresTarget {
            url: services::postgres_url(),
            schema: self.schema.clone(),
        };
        let prefix = self.prefix.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let _ = PostgresStore::drop_schema(&target).await;
                if let Ok(link) = RedisLink::open(&services::redis_url(), &prefix) {
                    let _ = link.clear().await;
                }
            });
        })
        .join()
        .unwrap();
    }
}

/// A replica serving HTTP in `dir` with `config`, given the shared vault key.
pub(crate) async fn replica(dir: &Path, config: &str) -> Served {
    std::fs::create_dir_all(dir).unwrap();
    served_env(
        dir,
        config,
        "127.0.0.1:0",
        &[],
        &[
            ("QUARRY_VAULT_KEY", VAULT_KEY),
            ("QUARRY_LOGGING_LEVEL", "debug"),
        ],
    )
    .await
}

const NOTE: &str = "mcp://notes/fixture_3A//text/hello.txt";
const COUNTER: &str = "mcp://notes/fixture_3A//counter";

async fn read(agent: &Client, uri: &str) -> Value {
    call(agent, "read_mcp_resource", json!({"resource_uri": uri})).await
}

// traces: REQ-071-036 — two replicas on one PostgreSQL and one Redis: a credential configured
// through A is used by B; an idempotency key used on A replays on B; what B cached, A serves, and
// an update A hears drops it for B within a measured bound; both write one audit chain, which
// `quarry audit verify` passes.
#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_credentials_idempotency_cache_and_audit() {
    let shared = Shared::new();
    let notes = crate::auth::demanding(&format!("X-API-Key={KEY}")).await;
    let config = shared.config(
        &(http_server("notes", &notes.url) + "[registry]\nallow_tool_registration = true\n"),
    );
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        replica(&dir.path().join("a"), &config).await,
        replica(&dir.path().join("b"), &config).await,
    );
    let (on_a, on_b) = (agent(a.addr, None).await, agent(b.addr, None).await);
    let (code, message) =
        call_error(&on_b, "read_mcp_resource", json!({"resource_uri": NOTE})).await;
    assert_eq!(code, "E005", "no credential yet: {message}");

    // A credential configured through A is used by B.
    let configure = json!({"server": "notes", "auth_type": "api_key",
        "credentials": {"key": KEY}, "idempotency_key": "configure-notes"});
    let first = call(&on_a, "mcp_auth_configure", configure.clone()).await;
    assert_eq!(first["connection_status"], "connected", "{first}");
    let note = read(&on_b, NOTE).await;
    assert_eq!(note["content"], "Hello from notes!\n", "{note}");

    // The idempotency key used on A replays on B.
    let replayed = call(&on_b, "mcp_auth_configure", configure).await;
    assert_eq!(replayed, first, "replayed from A's record");

    // What B fetched and cached, A serves from the shared cache.
    let fetched = read(&on_b, COUNTER).await;
    assert_eq!(fetched["cached"], false, "{fetched}");
    let reads_before = notes.server.reads();
    let hit = read(&on_a, COUNTER).await;
    assert_eq!(hit["cached"], true, "{hit}");
    assert_eq!(hit["content"], fetched["content"]);
    assert_eq!(
        notes.server.reads(),
        reads_before,
        "no upstream read for A's hit"
    );

    // An update A hears (A's agent subscribed, in a 2025-11-25 session) drops the entry for B.
    #[allow(deprecated)]
    on_a.peer()
        .subscribe(SubscribeRequestParams::new(COUNTER))
        .await
        .unwrap();
    // The upstream subscription is made before subscribe answers.
    let changed = notes.server.bump().await;
    let started = std::time::Instant::now();
    let fresh = loop {
        let now = read(&on_b, COUNTER).await;
        if now["content"] != fetched["content"] {
            break now;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "B still serves the old content 5 s after the update: {now}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    eprintln!(
        "invalidation across replicas took {:?} (counter {changed})",
        started.elapsed()
    );
    assert_eq!(
        fresh["content"],
        quarry_testkit::fixture::counter_text(changed)
    );

    // Both replicas wrote to one chain, and it verifies.
    drop((on_a, on_b));
    let out = std::process::Command::new(crate::support::QUARRY)
        .args(["audit", "verify", "--json", "--config"])
        .arg(dir.path().join("a/quarry.toml"))
        // Verifying never opens the vault: no key needed.
        .env_remove("QUARRY_VAULT_KEY")
        .output()
        .unwrap();
    let verified: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{verified} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        verified["records"].as_u64().unwrap_or(0) >= 6,
        "records from both replicas: {verified}"
    );
}

// traces: REQ-071-036 — a replica on PostgreSQL is not left to make a vault key of its own (the
// others could not open what it seals): serving without the shared key is refused, E001.
#[test]
fn a_replica_without_the_shared_vault_key_refuses_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(crate::support::QUARRY)
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_VAULT_KEY")
        .env("QUARRY_STORE_BACKEND", "postgres")
        .env("QUARRY_STORE_URL", services::postgres_url())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(
        stderr.contains("E001") && stderr.contains("QUARRY_VAULT_KEY"),
        "{stderr}"
    );
}
