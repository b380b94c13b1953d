//! Configuration files and environment overrides: defaults, the spec-shaped file, precise errors.

use std::io::Write;

use super::*;
use quarry_domain::Endpoint;

fn no_env(_: &str) -> Option<String> {
    None
}

fn load_text(text: &str) -> Result<Settings, Error> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    Settings::load(Some(f.path()), &no_env)
}

#[test]
fn an_empty_file_gives_the_defaults() {
    let s = load_text("").unwrap();
    assert!(s.servers.is_empty());
    assert!(s.cache_enabled);
    assert_eq!(s.cache_ttl, Duration::from_secs(300));
    assert_eq!(s.cache_max_bytes, 100 * 1024 * 1024);
    assert_eq!(s.max_resource_bytes, 50 * 1024 * 1024);
}

#[test]
fn the_spec_shaped_file_parses() {
    let s = load_text(
        r#"
        [servers.production-mcp]
        endpoint = "https://mcp.example.com/mcp"
        timeout = 30
        retry_attempts = 3
        retry_delay = 1

        [servers.local]
        command = "node"
        args = ["server.js", "stdio"]
        env = { API_BASE = "http://127.0.0.1:1" }

        [cache]
        enabled = true
        ttl_seconds = 60
        max_size_mb = 10
        eviction_policy = "lru"

        [security]
        encrypt_credentials = true
        require_auth_for_protected = true
        max_resource_size_mb = 5

        [logging]
        level = "debug"
        "#,
    )
    .unwrap();
    assert_eq!(s.servers.len(), 2);
    assert!(s.require_auth_for_protected);
    let local = s
        .servers
        .iter()
        .find(|x| x.spec.name.as_str() == "local")
        .unwrap();
    assert!(matches!(&local.spec.endpoint, Endpoint::Stdio { args, .. } if args.len() == 2));
    assert_eq!(s.cache_ttl, Duration::from_secs(60));
    assert_eq!(s.log_level, "debug");
}

#[test]
fn mistakes_are_named_precisely() {
    let cases = [
        (
            "[servers.a]\n",
            "servers.a.endpoint (an http(s) URL) or servers.a.command (a program to run) is needed",
        ),
        (
            "[servers.a]\nendpoint = \"ftp://x\"\n",
            "servers.a.endpoint must be an http",
        ),
        (
            "[servers.a]\nendpoint = \"http://x\"\ncommand = \"y\"\n",
            "are both set",
        ),
        ("[servers.\"a b\"]\ncommand = \"x\"\n", "servers.a b"),
        (
            "[servers.a]\ncommand = \"x\"\ntimeout = 0\n",
            "servers.a.timeout must be more than 0",
        ),
        (
            "[servers.Docs]\ncommand = \"x\"\n[servers.docs]\ncommand = \"y\"\n",
            "differ only by letter case",
        ),
        (
            "[cache]\neviction_policy = \"fifo\"\n",
            "only policy is \"lru\"",
        ),
        ("[cache]\nttl = 5\n", "unknown field `ttl`"),
        ("[cache]\nttl_seconds = \"soon\"\n", "invalid type"),
        (
            "[servers.a]\ncommand = \"x\"\nid = \"short\"\n",
            "servers.a.id",
        ),
    ];
    for (text, want) in cases {
        let err = load_text(text).unwrap_err();
        assert_eq!(err.code(), quarry_domain::ErrorCode::E001);
        assert!(err.message().contains(want), "{text:?}: {}", err.message());
        assert!(
            err.message().contains("config file"),
            "names the file: {}",
            err.message()
        );
    }
}

#[test]
fn environment_overrides_win_and_are_checked() {
    let env = |k: &str| match k {
        "QUARRY_CACHE_TTL_SECONDS" => Some("7".to_owned()),
        "QUARRY_CACHE_ENABLED" => Some("off".to_owned()),
        _ => None,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.toml");
    std::fs::write(&path, "[cache]\nttl_seconds = 60\n").unwrap();
    let s = Settings::load(Some(&path), &env).unwrap();
    assert_eq!(s.cache_ttl, Duration::from_secs(7));
    assert!(!s.cache_enabled);

    let bad = |k: &str| (k == "QUARRY_CACHE_MAX_SIZE_MB").then(|| "lots".to_owned());
    let err = Settings::load(Some(&path), &bad).unwrap_err();
    assert!(
        err.message().contains("QUARRY_CACHE_MAX_SIZE_MB"),
        "{}",
        err.message()
    );
}

#[test]
fn a_missing_explicit_file_is_an_error_not_the_defaults() {
    let err = Settings::load(Some(Path::new("/nonexistent/quarry.toml")), &no_env).unwrap_err();
    assert!(err.message().contains("/nonexistent/quarry.toml"));
}

// traces: REQ-071-042 — credentials are always encrypted: turning it off is refused, naming the
// key; protection is declared on HTTP servers only.
#[test]
fn encryption_cannot_be_turned_off_and_protection_is_for_http_servers() {
    let e = load_text("[security]\nencrypt_credentials = false\n").unwrap_err();
    assert!(
        e.message().contains("security.encrypt_credentials"),
        "{}",
        e.message()
    );
    let e = load_text("[servers.local]\ncommand = \"node\"\nprotected = true\n").unwrap_err();
    assert!(
        e.message()
            .contains("servers.local.protected applies to HTTP servers"),
        "{}",
        e.message()
    );
    let e = load_text(
        "[servers.docs]\nendpoint = \"https://x.example/mcp\"\nprotected = true\nprotected_uris = [\"a\"]\n",
    )
    .unwrap_err();
    assert!(
        e.message().contains("servers.docs.protected_uris"),
        "{}",
        e.message()
    );
}

const OAUTH: &str = "[http.oauth]\nresource = \"https://quarry.example.com/mcp\"\nissuer = \"https://idp.example.com\"\n";

#[test]
fn the_resource_server_section_has_safe_defaults() {
    let s = load_text(&format!(
        "{OAUTH}jwks_url = \"https://idp.example.com/jwks.json\"\n"
    ))
    .unwrap();
    let oauth = s.http.oauth.clone().unwrap();
    assert_eq!(oauth.algorithms, ["RS256", "PS256", "ES256", "EdDSA"]);
    assert_eq!(oauth.agent_claim, "sub");
    assert_eq!(oauth.leeway, Duration::from_secs(30));
    assert!(oauth.required_scopes.is_empty());
    assert!(oauth.introspection.is_none());
    assert!(s.http.authenticates());
    assert_eq!(s.http.request_timeout, Duration::from_secs(300));
}

#[test]
fn resource_server_mistakes_are_named_precisely() {
    let jwks = "jwks_url = \"https://idp.example.com/jwks.json\"\n";
    let cases = [
        (OAUTH.to_owned(), "from jwks_url or jwks_file"),
        (
            format!("{OAUTH}{jwks}jwks_file = \"k.json\"\n"),
            "from jwks_url or jwks_file",
        ),
        (
            format!("{OAUTH}jwks_url = \"http://idp.example.com/jwks.json\"\n"),
            "http.oauth.jwks_url must be an https:// URL",
        ),
        (
            format!("{OAUTH}{jwks}algorithms = [\"HS256\"]\n"),
            "\"HS256\" is not accepted; asymmetric ones only",
        ),
        (
            format!("{OAUTH}{jwks}algorithms = [\"none\"]\n"),
            "\"none\" is not accepted",
        ),
        (
            format!("{OAUTH}{jwks}required_scopes = [\"a b\"]\n"),
            "is not a scope token",
        ),
        (
            format!("{OAUTH}{jwks}introspection_url = \"https://idp.example.com/i\"\n"),
            "go together",
        ),
        (
            format!("{OAUTH}{jwks}leeway_seconds = 3600\n"),
            "http.oauth.leeway_seconds must be at most 300",
        ),
        (
            format!("{OAUTH}{jwks}client_secret = \"x\"\n"),
            "unknown field `client_secret`",
        ),
        (
            "[http]\nrequest_timeout_seconds = 0\n".to_owned(),
            "http.request_timeout_seconds must be between 1 and 3600",
        ),
        (
            "[http]\nmax_requests_in_flight = 0\n".to_owned(),
            "http.max_requests_in_flight must be between 1 and 100000",
        ),
        (
            "[http]\nmax_connections = 0\n".to_owned(),
            "http.max_connections must be between 1 and 100000",
        ),
    ];
    for (text, expected) in cases {
        let e = load_text(&text).unwrap_err();
        assert_eq!(e.code(), quarry_domain::ErrorCode::E001, "{text}");
        assert!(e.message().contains(expected), "{text}: {}", e.message());
    }
}
