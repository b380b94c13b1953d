//! The exposition: counts, escaping of hostile label values, bounded series.

use quarry_domain::AuditEntry;
use quarry_ports::{CacheStats, EngineHealth, Gauges, Metrics, ServerGauges};

use crate::{MAX_SERVER_LABELS, PrometheusMetrics};

fn entry(server: &str, code: Option<&str>) -> AuditEntry {
    AuditEntry {
        time: chrono::DateTime::from_timestamp(0, 0).unwrap_or_default(),
        correlation_id: "c-1".into(),
        agent: "alice".into(),
        transport: "stdio".into(),
        action: "read".into(),
        input_digest: String::new(),
        server: Some(server.into()),
        resource_uri: None,
        byte_range: None,
        decision: "allow".into(),
        explanation: None,
        cache_status: code.is_none().then(|| "hit".to_owned()),
        result: if code.is_some() { "error" } else { "ok" }.into(),
        error_code: code.map(str::to_owned),
        latency_us: 1_500,
        bytes_returned: code.is_none().then_some(1024),
        mcp_request_id: None,
        host_request_id: None,
        client_address: None,
        retry_count: 0,
    }
}

fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(start))
}

#[test]
fn requests_errors_cache_and_bytes_are_counted() {
    let m = PrometheusMetrics::new().unwrap();
    m.request(&entry("docs", None));
    m.request(&entry("docs", None));
    m.request(&entry("docs", Some("E002")));
    m.audit_write_failed();
    m.policy_decision("decide", std::time::Duration::from_micros(40), true);
    let text = m.render(&Gauges::default());
    let has = |l: &str| text.lines().any(|x| x == l);
    assert!(
        has(r#"quarry_requests_total{result="ok",server="docs",tool="read"} 2"#),
        "{text}"
    );
    assert!(has(
        r#"quarry_requests_total{result="E002",server="docs",tool="read"} 1"#
    ));
    assert!(has(
        r#"quarry_request_errors_total{code="E002",server="docs",tool="read"} 1"#
    ));
    assert!(has(
        r#"quarry_cache_requests_total{status="hit",tool="read"} 2"#
    ));
    assert!(has(r#"quarry_bytes_returned_total{tool="read"} 2048"#));
    assert!(has("quarry_audit_write_failures_total 1"));
    assert!(has(
        r#"quarry_policy_decision_failures_total{kind="decide"} 1"#
    ));
    assert!(has(
        r#"quarry_request_duration_seconds_count{tool="read"} 3"#
    ));
    // 1.5 ms falls in the 2.5 ms bucket, not the 1 ms one.
    assert!(has(
        r#"quarry_request_duration_seconds_bucket{tool="read",le="0.001"} 0"#
    ));
    assert!(has(
        r#"quarry_request_duration_seconds_bucket{tool="read",le="0.0025"} 3"#
    ));
}

#[test]
fn gauges_are_read_at_scrape_time_and_totals_only_grow() {
    let m = PrometheusMetrics::new().unwrap();
    let mut gauges = Gauges {
        cache: CacheStats {
            entries: 3,
            bytes: 300,
            capacity_bytes: 1000,
            evictions: 5,
            degraded: false,
        },
        servers: vec![ServerGauges {
            server: "docs".into(),
            status: "connected",
            circuit_open: false,
            sessions: 1,
            pool_size: 4,
            in_flight: 2,
            credential_expires_at: Some(1_900_000_000),
        }],
        policy: Some(EngineHealth {
            ready: true,
            detail: None,
            restarts: 1,
            recycled: 0,
        }),
    };
    let text = m.render(&gauges);
    let has = |text: &str, l: &str| text.lines().any(|x| x == l);
    assert!(has(&text, "quarry_cache_evictions_total 5"), "{text}");
    assert!(has(
        &text,
        r#"quarry_upstream_status{server="docs",status="connected"} 1"#
    ));
    assert!(has(&text, r#"quarry_upstream_in_flight{server="docs"} 2"#));
    assert!(has(
        &text,
        r#"quarry_credential_expiry_timestamp_seconds{server="docs"} 1900000000"#
    ));
    assert!(has(&text, "quarry_policy_worker_restarts_total 1"));
    assert!(has(&text, "quarry_policy_ready 1"));

    gauges.cache.evictions = 7;
    gauges.servers[0].status = "error";
    gauges.servers[0].circuit_open = true;
    gauges.policy = Some(EngineHealth {
        ready: false,
        detail: Some("no answer".into()),
        restarts: 2,
        recycled: 0,
    });
    let text = m.render(&gauges);
    assert!(has(&text, "quarry_cache_evictions_total 7"), "{text}");
    assert!(has(
        &text,
        r#"quarry_upstream_status{server="docs",status="error"} 1"#
    ));
    assert!(
        line(
            &text,
            r#"quarry_upstream_status{server="docs",status="connected"}"#
        )
        .is_none(),
        "a status the server left is gone"
    );
    assert!(has(
        &text,
        r#"quarry_upstream_circuit_open{server="docs"} 1"#
    ));
    assert!(has(&text, "quarry_policy_worker_restarts_total 2"));
    assert!(has(&text, "quarry_policy_ready 0"));
}

// traces: SR-005.4
#[test]
fn au_5_hostile_label_values_cannot_forge_a_line() {
    let m = PrometheusMetrics::new().unwrap();
    let hostile = "x\"} 1\nquarry_audit_write_failures_total 999\n\u{1b}[2J\u{202e}";
    m.request(&entry(hostile, Some("E002")));
    let text = m.render(&Gauges::default());
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("quarry_audit_write_failures_total 999")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "quarry_audit_write_failures_total 0")
    );
    // Every sample line is one metric: name, labels, value.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(l.starts_with("quarry_"), "a forged line: {l:?}");
    }
}

#[test]
fn made_up_servers_cannot_grow_the_exposition_without_end() {
    let m = PrometheusMetrics::new().unwrap();
    for n in 0..MAX_SERVER_LABELS * 4 {
        m.request(&entry(&format!("made-up-{n}"), Some("E002")));
    }
    let text = m.render(&Gauges::default());
    let series = text
        .lines()
        .filter(|l| l.starts_with("quarry_requests_total{"))
        .count();
    assert_eq!(
        series,
        MAX_SERVER_LABELS + 1,
        "one per name seen first, then `other`"
    );
    assert!(text.lines().any(|l| l
        == format!(
            r#"quarry_requests_total{{result="E002",server="other",tool="read"}} {}"#,
            MAX_SERVER_LABELS * 3
        )));
}
