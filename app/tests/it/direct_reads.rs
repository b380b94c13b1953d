//! A 2026-07-28 `resources/read` or `read_mcp_resource` call, and one on a 2025-11-25 session
//! this process holds, is answered without rmcp's per-request machinery (`http/direct.rs`):
//! through the real binary,
//! the same request sent so that rmcp answers it (an `Accept` with a parameter, which the direct
//! path leaves to rmcp's own parser) gets the same answer, the same audit record, and the same
//! time bound. Quarry's log at trace level says which requests the direct path answered, so each
//! test also shows the path was taken.

use std::{net::SocketAddr, time::Duration};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use quarry_testkit::{fixture::HttpFixture, scrape};

use crate::{
    audit::export,
    eras::{MODERN, message, meta},
    http::{INITIALIZE, Served, post, served_env, session_of},
    http_bounds::{session, slow_notes, within_a_second},
    policy::config,
    support::{http_fixture, http_server},
};

/// Quarry's log at trace level for the direct path only.
const TRACED: (&str, &str) = ("QUARRY_LOG", "info,quarry_mcp_server::http::direct=trace");

/// Quarry's log at trace level for the direct path, and what it says of sessions handed to rmcp.
const SESSIONS_TRACED: (&str, &str) = (
    "QUARRY_LOG",
    "info,quarry_mcp_server::http::direct=trace,quarry_mcp_server::http::sessions=debug",
);

/// The body of a 2026-07-28 read of `uri` with id `id`.
fn read_body(uri: &str, id: u32, meta: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
        "params": {"uri": uri, "_meta": meta}})
    .to_string()
}

/// The headers of a 2026-07-28 read of `uri`; with `via_rmcp`, a second Accept line with a
/// weight, which rmcp's parser takes and the direct path does not.
fn read_headers(uri: &str, via_rmcp: bool) -> Vec<String> {
    let mut headers = vec![
        format!("MCP-Protocol-Version: {MODERN}"),
        "Mcp-Method: resources/read".to_owned(),
        format!("Mcp-Name: {uri}"),
    ];
    if via_rmcp {
        headers.push("Accept: text/event-stream;q=1".to_owned());
    }
    headers
}

/// A 2026-07-28 read of `uri` with id `id` (and `host_id` as the host's request id): answered
/// by the direct path, or with `via_rmcp` by rmcp. The status and the answer, `ttlMs` removed
/// (it counts down between two answers).
async fn read(
    addr: SocketAddr,
    uri: &str,
    id: u32,
    host_id: Option<&str>,
    via_rmcp: bool,
) -> (u16, Value) {
    let mut meta = meta();
    if let Some(host_id) = host_id {
        meta["io.quarry/host_request_id"] = json!(host_id);
    }
    let body = read_body(uri, id, meta);
    let headers = read_headers(uri, via_rmcp);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let host = format!("127.0.0.1:{}", addr.port());
    let (status, head, body) = post(addr, &host, &headers, &body).await;
    (status, answered(uri, "application/json", &head, &body))
}

/// The answer to a read of `uri`, sent as `kind` (checked), a read result's `ttlMs` removed (it
/// counts down between two answers; a tool's result has none).
fn answered(uri: &str, kind: &str, head: &str, body: &str) -> Value {
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {kind}")),
        "{uri}: {head}{body}"
    );
    let mut answer = message(body);
    if let Some(result) = answer
        .get_mut("result")
        .and_then(Value::as_object_mut)
        .filter(|r| r.contains_key("contents"))
    {
        assert!(
            result.remove("ttlMs").is_some(),
            "{uri}: no ttlMs in {body}"
        );
    }
    answer
}

/// A gateway for alice (who may read `notes` but not `wiki`, nor `notes`' protected item 2),
/// its log at trace level for the direct path; the upstreams, to keep while it serves.
async fn alices_gateway(dir: &std::path::Path) -> (Served, [HttpFixture; 2]) {
    let notes = http_fixture("notes", 3).await;
    let wiki = http_fixture("wiki", 1).await;
    let config = config(&notes.url, &wiki.url, "alice", "");
    let gw = served_env(dir, &config, "127.0.0.1:0", &[], &[TRACED]).await;
    (gw, [notes, wiki])
}

/// Alice's gateway (see [`alices_gateway`]) with a 2025-11-25 session open: the session's
/// header line too.
async fn alices_session(dir: &std::path::Path) -> (Served, [HttpFixture; 2], String) {
    let (gw, upstreams) = alices_gateway(dir).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    (gw, upstreams, sid)
}

/// The entries of the trail's read records, once there are `at_least` of them (a read that
/// outlived its answer is recorded when it ends), or all there are after ten seconds.
pub(crate) async fn read_records(dir: &std::path::Path, at_least: usize) -> Vec<Value> {
    let waited = std::time::Instant::now();
    loop {
        let records: Vec<Value> = export(dir, &[])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["entry"].clone())
            .filter(|e| e["action"] == "read")
            .collect();
        if records.len() >= at_least || waited.elapsed() > Duration::from_secs(10) {
            return records;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The JSON-RPC ids of `records`, sorted.
fn request_ids(records: &[Value]) -> Vec<&str> {
    let mut ids: Vec<&str> = records
        .iter()
        .map(|r| r["mcp_request_id"].as_str().unwrap_or_default())
        .collect();
    ids.sort_unstable();
    ids
}

/// Sends `request` on a connection of its own, and hangs up once its read reached `notes`.
pub(crate) async fn hang_up_once_upstream(addr: SocketAddr, request: &str, notes: &HttpFixture) {
    let mut hanging_up = tokio::net::TcpStream::connect(addr).await.unwrap();
    hanging_up.write_all(request.as_bytes()).await.unwrap();
    let waited = std::time::Instant::now();
    while notes.server.reads() == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the read never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many 2026-07-28 requests the direct path answered, as the log says.
fn answered_directly(dir: &std::path::Path) -> usize {
    logged(dir, "a 2026-07-28 read answered outside rmcp")
}

/// How many session requests the direct path answered, as the log says.
fn answered_on_sessions(dir: &std::path::Path) -> usize {
    logged(dir, "a session's read answered outside rmcp")
}

fn logged(dir: &std::path::Path, line: &str) -> usize {
    std::fs::read_to_string(dir.join("stderr.log"))
        .unwrap_or_default()
        .matches(line)
        .count()
}

/// A read of `uri` with id `id` (and `host_id` as the host's request id) on the session whose
/// header line is `sid`: answered by the direct path (one JSON body), or with `via_rmcp` by
/// rmcp (an event stream). The status and the answer, `ttlMs` removed.
async fn read_on_session(
    addr: SocketAddr,
    sid: &str,
    uri: &str,
    id: u32,
    host_id: Option<&str>,
    via_rmcp: bool,
) -> (u16, Value) {
    let mut params = json!({"uri": uri});
    if let Some(host_id) = host_id {
        params["_meta"] = json!({"io.quarry/host_request_id": host_id});
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": params})
        .to_string();
    let mut headers = vec![sid, "MCP-Protocol-Version: 2025-11-25"];
    if via_rmcp {
        headers.push("Accept: text/event-stream;q=1");
    }
    let host = format!("127.0.0.1:{}", addr.port());
    let (status, head, body) = post(addr, &host, &headers, &body).await;
    let kind = if via_rmcp {
        "text/event-stream"
    } else {
        "application/json"
    };
    (status, answered(uri, kind, &head, &body))
}

/// Checks that `direct` (request 32, host request `host-op-32`) records what `by_rmcp`
/// (request 31) does, the request's own ids aside.
fn recorded_alike(direct: &Value, by_rmcp: &Value) {
    assert_eq!(direct["mcp_request_id"], "32", "{direct}");
    assert_eq!(direct["host_request_id"], "host-op-32", "{direct}");
    assert_eq!(by_rmcp["mcp_request_id"], "31", "{by_rmcp}");
    for field in [
        "agent",
        "transport",
        "action",
        "input_digest",
        "server",
        "resource_uri",
        "byte_range",
        "decision",
        "cache_status",
        "result",
        "bytes_returned",
    ] {
        assert_eq!(
            direct[field], by_rmcp[field],
            "{field}: {direct} against {by_rmcp}"
        );
    }
    assert!(
        direct["client_address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{direct}"
    );
}

/// What the two paths are asked for in both eras: a text and a blob content, a resource, a
/// missing one, one policy denies, a protected one, an unknown server, not a URI.
const CASES: [&str; 8] = [
    "mcp://notes/fixture_3A//text/hello.txt",
    "mcp://notes/fixture_3A//blob/bytes.bin",
    "mcp://notes/fixture_3A//item/1",
    "mcp://notes/fixture_3A//nothing/here",
    "mcp://wiki/fixture_3A//item/1",
    "mcp://notes/fixture_3A//item/2",
    "mcp://nowhere/fixture_3A//item/1",
    "not a uri",
];

// traces: REQ-071-016, REQ-071-022, TR-9 — what the direct path answers is what rmcp answers:
// text and blob contents with their origin and cache hints, a missing resource (-32602 with
// its URI), a read policy denies (E004), an unknown server; the same statuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_read_is_answered_as_rmcp_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _upstreams) = alices_gateway(dir.path()).await;
    let cases = CASES;
    for (n, uri) in (1..).zip(cases) {
        // rmcp first, so that both find the cache in the same state after the first read.
        let (rmcp_status, by_rmcp) = read(gw.addr, uri, n, None, true).await;
        let before = answered_directly(dir.path());
        let (status, direct) = read(gw.addr, uri, n, None, false).await;
        assert_eq!(
            answered_directly(dir.path()),
            before + 1,
            "{uri}: the direct path answered"
        );
        assert_eq!(status, rmcp_status, "{uri}: {direct} against {by_rmcp}");
        assert_eq!(direct, by_rmcp, "{uri}");
    }
    let text = read(gw.addr, cases[0], 20, None, false).await.1;
    assert_eq!(text["result"]["resultType"], "complete", "{text}");
    assert_eq!(text["result"]["cacheScope"], "private", "{text}");
    assert_eq!(
        text["result"]["contents"][0]["_meta"]["io.quarry/origin"]["server"], "notes",
        "{text}"
    );
    let missing = read(gw.addr, cases[3], 21, None, false).await.1;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert_eq!(missing["error"]["data"]["error_code"], "E002", "{missing}");
    let denied = read(gw.addr, cases[4], 22, None, false).await.1;
    assert_eq!(denied["error"]["data"]["error_code"], "E004", "{denied}");
}

// traces: AU-1, SR-005.1 — a read the direct path answers is recorded like one rmcp answers:
// the same action, agent, resource, decision and cache status, its JSON-RPC id, the host's
// request id, the transport and the client's address.
#[tokio::test(flavor = "multi_thread")]
async fn a_direct_read_is_audited_like_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _upstreams) = alices_gateway(dir.path()).await;
    let uri = "mcp://notes/fixture_3A//item/1";
    read(gw.addr, uri, 1, None, true).await;
    read(gw.addr, uri, 31, Some("host-op-31"), true).await;
    read(gw.addr, uri, 32, Some("host-op-32"), false).await;
    assert_eq!(answered_directly(dir.path()), 1);
    let records: Vec<Value> = export(dir.path(), &[])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["entry"].clone())
        .filter(|e| e["action"] == "read")
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let (by_rmcp, direct) = (&records[1], &records[2]);
    recorded_alike(direct, by_rmcp);
}

// traces: REQ-071-016, REQ-071-022, TR-9, AU-1 — on a 2025-11-25 session, what the direct path
// answers is what rmcp answers in that era (no `resultType`, a missing resource as -32002 with
// its URI, E004 for a read policy denies), as one JSON body, and recorded alike.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_read_is_answered_as_rmcp_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _upstreams, sid) = alices_session(dir.path()).await;
    // A session rmcp never serves (opened outside it, and only read on) answers alike.
    let unseen = session(gw.addr, &format!("127.0.0.1:{}", gw.addr.port())).await;
    let cases = CASES;
    for (n, uri) in (1..).zip(cases) {
        let (rmcp_status, by_rmcp) = read_on_session(gw.addr, &sid, uri, n, None, true).await;
        let before = answered_on_sessions(dir.path());
        let (status, direct) = read_on_session(gw.addr, &sid, uri, n, None, false).await;
        let (unseen_status, unseen) = read_on_session(gw.addr, &unseen, uri, n, None, false).await;
        assert_eq!(
            answered_on_sessions(dir.path()),
            before + 2,
            "{uri}: the direct path answered"
        );
        assert_eq!(status, rmcp_status, "{uri}: {direct} against {by_rmcp}");
        assert_eq!(direct, by_rmcp, "{uri}");
        assert_eq!(
            unseen_status, rmcp_status,
            "{uri}: {unseen} against {by_rmcp}"
        );
        assert_eq!(unseen, by_rmcp, "{uri}");
    }
    assert_eq!(
        logged(dir.path(), "taking over a session"),
        0,
        "only sessions opened here"
    );
    let text = read_on_session(gw.addr, &sid, cases[0], 20, None, false)
        .await
        .1;
    assert!(text["result"].get("resultType").is_none(), "{text}");
    assert_eq!(text["result"]["cacheScope"], "private", "{text}");
    let missing = read_on_session(gw.addr, &sid, cases[3], 21, None, false)
        .await
        .1;
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    assert_eq!(missing["error"]["data"]["uri"], cases[3], "{missing}");
    let denied = read_on_session(gw.addr, &sid, cases[4], 22, None, false)
        .await
        .1;
    assert_eq!(denied["error"]["data"]["error_code"], "E004", "{denied}");

    let uri = cases[2];
    read_on_session(gw.addr, &sid, uri, 31, Some("host-op-31"), true).await;
    read_on_session(gw.addr, &sid, uri, 32, Some("host-op-32"), false).await;
    let records = read_records(dir.path(), 0).await;
    let [.., by_rmcp, direct] = records.as_slice() else {
        panic!("{records:?}")
    };
    recorded_alike(direct, by_rmcp);
}

/// A `read_mcp_resource` call with `arguments` and id `id` (and `host_id` as the host's request
/// id): on the session whose header line is `sid`, or with none in 2026-07-28; answered by the
/// direct path, or with `via_rmcp` by rmcp. The status and the answer.
async fn read_tool(
    addr: SocketAddr,
    sid: Option<&str>,
    arguments: &Value,
    (id, host_id): (u32, Option<&str>),
    via_rmcp: bool,
) -> (u16, Value) {
    let (mut meta, mut headers) = match sid {
        None => (
            meta(),
            vec![
                format!("MCP-Protocol-Version: {MODERN}"),
                "Mcp-Method: tools/call".to_owned(),
                "Mcp-Name: read_mcp_resource".to_owned(),
            ],
        ),
        Some(sid) => (
            json!({}),
            vec![
                sid.to_owned(),
                "MCP-Protocol-Version: 2025-11-25".to_owned(),
            ],
        ),
    };
    if let Some(host_id) = host_id {
        meta["io.quarry/host_request_id"] = json!(host_id);
    }
    if via_rmcp {
        headers.push("Accept: text/event-stream;q=1".to_owned());
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "read_mcp_resource", "arguments": arguments, "_meta": meta}})
    .to_string();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let host = format!("127.0.0.1:{}", addr.port());
    let (status, head, body) = post(addr, &host, &headers, &body).await;
    // rmcp answers a session's request with an event stream, a stateless one with JSON.
    let kind = if via_rmcp && sid.is_some() {
        "text/event-stream"
    } else {
        "application/json"
    };
    (status, answered(&arguments.to_string(), kind, &head, &body))
}

/// What `read_mcp_resource` is called with in both eras: each of [`CASES`] as its URI, a byte
/// range, a read past the cache, one without checking the checksum, an offset past the end,
/// and arguments the tool refuses (a URI that is not text, an unknown argument, none at all).
fn tool_cases() -> Vec<Value> {
    let mut cases: Vec<Value> = CASES
        .iter()
        .map(|uri| json!({"resource_uri": uri}))
        .collect();
    cases.extend([
        json!({"resource_uri": CASES[0], "offset": 2, "limit": 3}),
        json!({"resource_uri": CASES[2], "use_cache": false}),
        json!({"resource_uri": CASES[1], "validate_checksum": false}),
        json!({"resource_uri": CASES[0], "offset": 1_000_000}),
        json!({"resource_uri": 5}),
        json!({"uri": CASES[0]}),
        Value::Null,
    ]);
    cases
}

/// Each of [`tool_cases`] called both ways (on the session `sid`, or with none), and the direct
/// path's answer, which must be rmcp's, checked to be its; then two calls (ids 31, 32) whose
/// audit records must match. `answered_here` counts what the direct path answered.
async fn tool_answered_as_rmcp_answers_it(
    dir: &std::path::Path,
    addr: SocketAddr,
    sid: Option<&str>,
    answered_here: fn(&std::path::Path) -> usize,
) -> Vec<Value> {
    let mut answers = Vec::new();
    for (n, arguments) in (1..).zip(tool_cases()) {
        // A first call fills the cache, so that both paths find it in the same state.
        read_tool(addr, sid, &arguments, (n, None), true).await;
        let (rmcp_status, by_rmcp) = read_tool(addr, sid, &arguments, (n, None), true).await;
        let before = answered_here(dir);
        let (status, direct) = read_tool(addr, sid, &arguments, (n, None), false).await;
        assert_eq!(
            answered_here(dir),
            before + 1,
            "{arguments}: the direct path answered"
        );
        assert_eq!(
            status, rmcp_status,
            "{arguments}: {direct} against {by_rmcp}"
        );
        assert_eq!(direct, by_rmcp, "{arguments}");
        answers.push(direct);
    }
    let item = json!({"resource_uri": CASES[2]});
    read_tool(addr, sid, &item, (31, Some("host-op-31")), true).await;
    read_tool(addr, sid, &item, (32, Some("host-op-32")), false).await;
    let records = read_records(dir, 0).await;
    let [.., by_rmcp, direct] = records.as_slice() else {
        panic!("{records:?}")
    };
    recorded_alike(direct, by_rmcp);
    answers
}

/// Checks the tool's answers to [`tool_cases`]: the text, its range, and the E-codes of what
/// it refused, each with the URI asked for where there was one.
fn tool_answers_say_what_they_should(answers: &[Value]) {
    let result = |n: usize| &answers[n]["result"];
    let text = &result(0)["structuredContent"];
    assert_eq!(text["uri"], CASES[0], "{text}");
    assert!(
        text["content"].as_str().is_some_and(|c| !c.is_empty()),
        "{text}"
    );
    assert_eq!(result(0)["isError"], false, "{}", result(0));
    let code = |n: usize| result(n)["structuredContent"]["error_code"].clone();
    // missing, denied, protected, unknown server, not a URI
    assert_eq!(code(3), "E002", "{}", result(3));
    assert_eq!(result(3)["structuredContent"]["uri"], CASES[3]);
    assert_eq!(code(4), "E004", "{}", result(4));
    assert_eq!(result(4)["isError"], true, "{}", result(4));
    assert_eq!(code(7), "E001", "{}", result(7));
    let range = &result(8)["structuredContent"];
    assert_eq!(range["content"].as_str().map(str::len), Some(3), "{range}");
    for refused in 12..15 {
        assert_eq!(code(refused), "E001", "{}", result(refused));
    }
}

// traces: REQ-071-016, REQ-071-017, REQ-071-022, TR-9, AU-1 — a 2026-07-28 `read_mcp_resource`
// call the direct path answers is what rmcp answers (the same result, error results with
// their E-codes, the same statuses), and recorded alike.
#[tokio::test(flavor = "multi_thread")]
async fn a_stateless_tool_read_is_answered_as_rmcp_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _upstreams) = alices_gateway(dir.path()).await;
    let answers =
        tool_answered_as_rmcp_answers_it(dir.path(), gw.addr, None, answered_directly).await;
    tool_answers_say_what_they_should(&answers);
    assert_eq!(
        answers[0]["result"]["resultType"], "complete",
        "{}",
        answers[0]
    );
}

// traces: REQ-071-016, REQ-071-017, REQ-071-022, TR-9, AU-1 — the same on a 2025-11-25 session:
// the era's result (no `resultType`), as one JSON body, recorded alike.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_tool_read_is_answered_as_rmcp_answers_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _upstreams, sid) = alices_session(dir.path()).await;
    let answers =
        tool_answered_as_rmcp_answers_it(dir.path(), gw.addr, Some(&sid), answered_on_sessions)
            .await;
    tool_answers_say_what_they_should(&answers);
    assert!(
        answers[0]["result"].get("resultType").is_none(),
        "{}",
        answers[0]
    );
}

// traces: TR-4 — a 2025-11-25 session that only reads stays open while it is used, and ends
// once unused for http.session_idle_seconds (10 here), however it was opened:
// - one rmcp served first (its `initialize` sent with a weighted `Accept`, which the direct path
//   leaves to rmcp): rmcp's idle timer counts only what passes through its session worker, so
//   now and then a read goes through it; after 13 s of reads, rmcp's worker for it is the one it
//   started with;
// - one opened outside rmcp: every read is answered outside rmcp, which never holds it;
// - one opened outside rmcp and left unused: forgotten after its idle time with no request on
//   it, so that it no longer counts against http.max_sessions (3 here: a fourth is refused
//   while it lives), and 404 afterwards.
// Then another kind of request on either open session is answered, by rmcp.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_only_reads_stays_open_while_it_reads() {
    let notes = http_fixture("notes", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nsession_idle_seconds = 10\nmax_sessions = 3\n",
        http_server("notes", &notes.url)
    );
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[SESSIONS_TRACED]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let by_rmcp = session_via_rmcp(gw.addr, &host).await;
    let opened_here = session(gw.addr, &host).await;
    let unused = session(gw.addr, &host).await;
    assert_eq!(logged(dir.path(), "a session was opened outside rmcp"), 2);
    let (status, _, body) = post(gw.addr, &host, &[], INITIALIZE).await;
    assert_eq!(status, 503, "a fourth session past the cap: {body}");
    let uri = "mcp://notes/fixture_3A//item/1";
    let started = std::time::Instant::now();
    let mut sent = 0_usize;
    while started.elapsed() < Duration::from_secs(13) {
        for sid in [&by_rmcp, &opened_here] {
            sent += 1;
            let (status, answer) = read_on_session_any(gw.addr, sid, uri, sent).await;
            assert_eq!(status, 200, "read {sent}: {answer}");
            assert!(
                answer["result"]["contents"][0]["text"].is_string(),
                "{answer}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Half the reads were on each session; those on the one opened here were all answered
    // outside rmcp (rmcp was never handed it), some of the others went through rmcp.
    let direct = answered_on_sessions(dir.path());
    assert!(
        direct > sent / 2 && direct < sent,
        "{direct} of {sent} reads answered outside rmcp"
    );
    assert_eq!(
        logged(dir.path(), "a session opened outside rmcp is handed to it"),
        0
    );
    // Had rmcp's worker ended, the session would have been taken over from its record (as a
    // replica takes over another's), its listen stream cut.
    assert_eq!(
        logged(dir.path(), "taking over a session"),
        0,
        "the session idled out in rmcp while it read"
    );
    // Forgotten by the sweep every quarter of the idle time, with no request on it: room again.
    let waited = std::time::Instant::now();
    loop {
        let (status, _, body) = post(gw.addr, &host, &[], INITIALIZE).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "no room 10 s after the unused session idled out: {body}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let unused_header = [unused.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let read = json!({"jsonrpc": "2.0", "id": 998, "method": "resources/read",
        "params": {"uri": uri}})
    .to_string();
    let (status, _, body) = post(gw.addr, &host, &unused_header, &read).await;
    assert_eq!(status, 404, "the unused session idled out: {body}");
    let list = r#"{"jsonrpc":"2.0","id":999,"method":"resources/list","params":{}}"#;
    for sid in [&by_rmcp, &opened_here] {
        let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
        let (status, _, body) = post(gw.addr, &host, &headers, list).await;
        assert_eq!(status, 200, "the session idled out while it read: {body}");
        assert!(message(&body)["result"]["resources"].is_array(), "{body}");
    }
    assert_eq!(
        logged(dir.path(), "a session opened outside rmcp is handed to it"),
        1
    );
    assert_eq!(logged(dir.path(), "taking over a session"), 0);
}

/// A gateway in front of `notes` (one item), its log saying what the direct path answers and
/// which sessions go to rmcp; the upstream, to keep while it serves; the `Host` to send.
async fn sessions_gateway(dir: &std::path::Path) -> (Served, HttpFixture, String) {
    let notes = http_fixture("notes", 1).await;
    let config = http_server("notes", &notes.url);
    let gw = served_env(dir, &config, "127.0.0.1:0", &[], &[SESSIONS_TRACED]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    (gw, notes, host)
}

/// A 2025-11-25 session opened by rmcp (its `initialize` sent with a weighted `Accept`, which
/// the direct path leaves to rmcp) and initialized: its header line.
async fn session_via_rmcp(addr: SocketAddr, host: &str) -> String {
    let weighted = ["Accept: text/event-stream;q=1"];
    let (status, head, body) = post(addr, host, &weighted, INITIALIZE).await;
    assert_eq!(status, 200, "{head}{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "rmcp answered: {head}"
    );
    let header = format!("Mcp-Session-Id: {}", session_of(&head).unwrap());
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(addr, host, &[&header], initialized).await.0, 202);
    header
}

// traces: TR-4 — a 2025-11-25 session opened outside rmcp (`http/direct.rs`) is opened as rmcp
// opens one: the same `initialize` result, as one JSON body, and a session id of 64 hex
// digits; rmcp's way is still taken when asked for (a weighted `Accept`). Its
// `notifications/initialized` is acknowledged with rmcp's 202 and its reads are answered outside
// rmcp; its first other request hands it to rmcp, which answers it, from what this process
// keeps of it (no takeover from the store); a DELETE ends one rmcp never held, 404 afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_opened_outside_rmcp_is_opened_as_rmcp_opens_one() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _notes, host) = sessions_gateway(dir.path()).await;
    let (status, head, body) = post(gw.addr, &host, &[], INITIALIZE).await;
    assert_eq!(status, 200, "{head}{body}");
    let direct = answered("initialize", "application/json", &head, &body);
    assert_eq!(logged(dir.path(), "a session was opened outside rmcp"), 1);
    let sid = session_of(&head).unwrap();
    assert_eq!(sid.len(), 64, "{sid}");
    assert!(sid.bytes().all(|b| b.is_ascii_hexdigit()), "{sid}");
    let weighted = ["Accept: text/event-stream;q=1"];
    let (status, head, body) = post(gw.addr, &host, &weighted, INITIALIZE).await;
    assert_eq!(status, 200, "{head}{body}");
    let by_rmcp = answered("initialize", "text/event-stream", &head, &body);
    assert_eq!(logged(dir.path(), "a session was opened outside rmcp"), 1);
    assert_ne!(session_of(&head).unwrap(), sid);
    assert_eq!(direct, by_rmcp);
    assert_eq!(
        direct["result"]["protocolVersion"], "2025-11-25",
        "{direct}"
    );
    assert_eq!(direct["result"]["serverInfo"]["name"], "quarry", "{direct}");

    let header = format!("Mcp-Session-Id: {sid}");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (status, _, body) = post(gw.addr, &host, &[&header], initialized).await;
    assert_eq!(status, 202, "{body}");
    let uri = "mcp://notes/fixture_3A//item/1";
    let (status, answer) = read_on_session(gw.addr, &header, uri, 2, None, false).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answered_on_sessions(dir.path()), 1);
    let handed = "a session opened outside rmcp is handed to it";
    assert_eq!(logged(dir.path(), handed), 0);
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let headers = [header.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    let (status, _, body) = post(gw.addr, &host, &headers, list).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        message(&body)["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    assert_eq!(logged(dir.path(), handed), 1);
    assert_eq!(logged(dir.path(), "taking over a session"), 0);
    // rmcp holds it now, and its reads are still answered outside rmcp.
    let (status, again) = read_on_session(gw.addr, &header, uri, 4, None, false).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["result"], answer["result"]);
    assert_eq!(answered_on_sessions(dir.path()), 2);

    let other = session(gw.addr, &host).await;
    let other_id = other.trim_start_matches("Mcp-Session-Id: ");
    let delete =
        format!("DELETE /mcp HTTP/1.1\r\nHost: {host}\r\n{other}\r\nConnection: close\r\n\r\n");
    let (status, head, _) = scrape::send(gw.addr, &delete).await;
    assert!(status < 300, "{head}");
    assert_ne!(other_id, sid);
    let read = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read",
        "params": {"uri": uri}})
    .to_string();
    let (status, _, body) = post(
        gw.addr,
        &host,
        &[&other, "MCP-Protocol-Version: 2025-11-25"],
        &read,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(logged(dir.path(), handed), 1, "a DELETE needs no handing");
}

/// A read on a session, answered by whichever path takes it. The status and the answer.
async fn read_on_session_any(addr: SocketAddr, sid: &str, uri: &str, id: usize) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
        "params": {"uri": uri}})
    .to_string();
    let host = format!("127.0.0.1:{}", addr.port());
    let headers = [sid, "MCP-Protocol-Version: 2025-11-25"];
    let (status, _, body) = post(addr, &host, &headers, &body).await;
    (status, message(&body))
}

// traces: TR-8, AU-1 — the direct path is within http.request_timeout_seconds like any
// request: a read the upstream stalls over is ended with E009 at the bound, and the gateway
// serves on. The cut read runs to its end and is recorded as what its client got (E009), and
// until then it still counts against its agent's bound (http.max_requests_per_agent = 1 here).
#[tokio::test(flavor = "multi_thread")]
async fn a_direct_read_past_the_time_bound_gets_e009() {
    past_the_time_bound(false).await;
}

// traces: TR-8, AU-1 — the same down rmcp's path (what the direct path must match).
#[tokio::test(flavor = "multi_thread")]
async fn a_read_past_the_time_bound_through_rmcp_gets_e009_too() {
    past_the_time_bound(true).await;
}

/// A read of the `slow` item (the upstream answers after 4 s) cut at a bound of 1 s; the
/// agent's next read follows: both by the direct path, or with `via_rmcp` both by rmcp.
async fn past_the_time_bound(via_rmcp: bool) {
    let notes = slow_notes(4000).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}max_requests_per_agent = 1\n",
        within_a_second(&notes.url)
    );
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[TRACED]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let uri = "mcp://notes/fixture_3A//slow";
    let body = read_body(uri, 41, meta());
    let headers = read_headers(uri, via_rmcp);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let (status, _, answer) = post(gw.addr, &host, &headers, &body).await;
    let took = started.elapsed();
    assert_eq!(status, 504, "{answer}");
    assert!(answer.contains("E009"), "{answer}");
    assert!(answer.contains("http.request_timeout_seconds"), "{answer}");
    assert!(
        took < Duration::from_millis(3000),
        "cut at the bound: {took:?}"
    );
    assert_eq!(
        answered_directly(dir.path()),
        usize::from(!via_rmcp),
        "which path answered"
    );
    // The cut read goes on until the upstream answers, 4 s after it started, and holds the
    // agent's one place in flight until then.
    let hello = "mcp://notes/fixture_3A//text/hello.txt";
    let again = read_body(hello, 42, meta());
    let hello_headers = read_headers(hello, via_rmcp);
    let hello_headers: Vec<&str> = hello_headers.iter().map(String::as_str).collect();
    let_in_not_before(
        gw.addr,
        &hello_headers,
        &again,
        started,
        Duration::from_millis(3500),
    )
    .await;
    // Recorded as what its client got: cut at the bound, E009, nothing returned.
    let records = read_records(dir.path(), 2).await;
    let cut = records
        .iter()
        .find(|r| r["mcp_request_id"] == "41")
        .unwrap_or_else(|| panic!("the cut read is recorded: {records:?}"));
    assert_eq!(cut["result"], "error", "{cut}");
    assert_eq!(cut["error_code"], "E009", "{cut}");
    assert!(cut["bytes_returned"].is_null(), "{cut}");
    let next = records.iter().find(|r| r["mcp_request_id"] == "42");
    assert_eq!(
        next.map(|r| &r["result"]),
        Some(&json!("ok")),
        "{records:?}"
    );
}

// traces: TR-8, AU-1 — on a session too, a read the direct path answers is cut at
// http.request_timeout_seconds with E009, and is recorded so. Its client gets what rmcp's path
// gives it: the JSON-RPC error for the request, status 200 (rmcp's event stream has begun by
// then), not a 504 that a 2025-11-25 client would take for a failure of the transport.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_read_past_the_time_bound_gets_e009() {
    let direct = session_read_past_the_time_bound(false).await;
    let by_rmcp = session_read_past_the_time_bound(true).await;
    assert_eq!(direct, by_rmcp);
}

/// A read of the `slow` item (the upstream answers after 4 s) on a session, cut at a bound of
/// 1 s: by the direct path, or with `via_rmcp` by rmcp. The JSON-RPC error it got.
async fn session_read_past_the_time_bound(via_rmcp: bool) -> Value {
    let notes = slow_notes(4000).await;
    let dir = tempfile::tempdir().unwrap();
    let gw = served_env(
        dir.path(),
        &within_a_second(&notes.url),
        "127.0.0.1:0",
        &[],
        &[TRACED],
    )
    .await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    let body = r#"{"jsonrpc":"2.0","id":51,"method":"resources/read","params":{"uri":"mcp://notes/fixture_3A//slow"}}"#;
    let mut headers = vec![sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    if via_rmcp {
        headers.push("Accept: text/event-stream;q=1");
    }
    let started = std::time::Instant::now();
    let (status, head, answer) = post(gw.addr, &host, &headers, body).await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{head}{answer}");
    assert!(
        took < Duration::from_millis(3000),
        "cut at the bound: {took:?}"
    );
    assert_eq!(
        answered_on_sessions(dir.path()),
        usize::from(!via_rmcp),
        "which path answered"
    );
    let kind = if via_rmcp {
        "text/event-stream"
    } else {
        "application/json"
    };
    let error = answered("slow", kind, &head, &answer);
    assert_eq!(error["id"], 51, "{error}");
    assert_eq!(error["error"]["code"], -32001, "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("E009") && message.contains("http.request_timeout_seconds"),
        "{error}"
    );
    let records = read_records(dir.path(), 1).await;
    let cut = records
        .iter()
        .find(|r| r["mcp_request_id"] == "51")
        .unwrap_or_else(|| panic!("the cut read is recorded: {records:?}"));
    assert_eq!(cut["error_code"], "E009", "{cut}");
    assert!(cut["bytes_returned"].is_null(), "{cut}");
    error
}

/// Sends the read `body` with `headers` to `addr` every 50 ms from now until it is let in (any
/// status but 429), for at most ten seconds after `since`; checks it was let in no sooner than
/// `not_before` after `since` (until then, the request before it held its agent's one place)
/// and was answered with a text content.
async fn let_in_not_before(
    addr: SocketAddr,
    headers: &[&str],
    body: &str,
    since: std::time::Instant,
    not_before: Duration,
) {
    let host = format!("127.0.0.1:{}", addr.port());
    let (sent, status, answer) = loop {
        let sent = since.elapsed();
        let (status, _, answer) = post(addr, &host, headers, body).await;
        if status != 429 {
            break (sent, status, answer);
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "never let in: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        sent >= not_before,
        "the agent's next read was let in {sent:?} on, while the request before it still ran"
    );
    assert_eq!(status, 200, "{answer}");
    let answer = message(&answer);
    assert!(
        answer["result"]["contents"][0]["text"].is_string(),
        "{answer}"
    );
}

// traces: TR-8, AU-1 — a client that hangs up while the direct path is answering its read
// does not give its place back early: the read runs to its end and counts against its agent
// until then (http.max_requests_per_agent = 1 keeps the agent's next read out, 429, until the
// stalled upstream answers). The upstream read is not cancelled: the next read is answered
// from what it cached, and the hung-up read is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_hanging_up_mid_read_keeps_its_place_until_the_read_ends() {
    hang_up_mid_read(false).await;
}

// traces: TR-8, AU-1 — the same down rmcp's path (what the direct path must match).
#[tokio::test(flavor = "multi_thread")]
async fn a_client_hanging_up_mid_read_through_rmcp_keeps_its_place_too() {
    hang_up_mid_read(true).await;
}

/// A client hangs up while the upstream stalls over its read (3 s); the agent's next read
/// follows: both by the direct path, or with `via_rmcp` both by rmcp.
async fn hang_up_mid_read(via_rmcp: bool) {
    let notes = slow_notes(3000).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nmax_requests_per_agent = 1\n",
        http_server("notes", &notes.url)
    );
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[TRACED]).await;
    let uri = "mcp://notes/fixture_3A//slow";
    let headers = read_headers(uri, via_rmcp);
    let body = read_body(uri, 51, meta());
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{}\r\nContent-Length: {}\r\n\r\n{body}",
        gw.addr.port(),
        headers.join("\r\n"),
        body.len()
    );
    hang_up_once_upstream(gw.addr, &request, &notes).await;
    let reached = std::time::Instant::now();
    let second = read_body(uri, 52, meta());
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let_in_not_before(
        gw.addr,
        &headers,
        &second,
        reached,
        Duration::from_millis(2500),
    )
    .await;
    assert_eq!(
        notes.server.reads(),
        1,
        "the hung-up read's upstream read ran to its end and answered the second from the cache"
    );
    assert_eq!(
        answered_directly(dir.path()),
        if via_rmcp { 0 } else { 2 },
        "which path answered"
    );
    // The hung-up read ran to its end and is recorded (rmcp's handler is not stopped by a
    // hang-up; the direct path finishes a read dropped unfinished in a task of its own).
    let records = read_records(dir.path(), 2).await;
    assert_eq!(request_ids(&records), ["51", "52"], "{records:?}");
    assert!(records.iter().all(|r| r["result"] == "ok"), "{records:?}");
}

// traces: TR-8, AU-1 — a read on a 2025-11-25 session whose client hangs up before the
// answer keeps its agent's place until it ends (http.max_requests_per_agent = 1), and is
// recorded too: on the direct path, and through rmcp.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_hanging_up_mid_read_on_a_session_keeps_its_place_too() {
    hang_up_mid_read_on_a_session(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_hanging_up_mid_read_on_a_session_through_rmcp_keeps_its_place_too() {
    hang_up_mid_read_on_a_session(true).await;
}

async fn hang_up_mid_read_on_a_session(via_rmcp: bool) {
    let notes = slow_notes(2000).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nmax_requests_per_agent = 1\n",
        http_server("notes", &notes.url)
    );
    let gw = served_env(dir.path(), &config, "127.0.0.1:0", &[], &[TRACED]).await;
    let host = format!("127.0.0.1:{}", gw.addr.port());
    let sid = session(gw.addr, &host).await;
    let accept = if via_rmcp {
        "Accept: text/event-stream;q=1\r\n"
    } else {
        ""
    };
    let body = |id: u32, item: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
            "params": {"uri": format!("mcp://notes/fixture_3A//{item}")}})
        .to_string()
    };
    let first = body(61, "slow");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{accept}MCP-Protocol-Version: 2025-11-25\r\n{sid}\r\nContent-Length: {}\r\n\r\n{first}",
        first.len()
    );
    hang_up_once_upstream(gw.addr, &request, &notes).await;
    let reached = std::time::Instant::now();
    let mut headers = vec![sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
    if via_rmcp {
        headers.push("Accept: text/event-stream;q=1");
    }
    let second = body(62, "text/hello.txt");
    let_in_not_before(
        gw.addr,
        &headers,
        &second,
        reached,
        Duration::from_millis(1500),
    )
    .await;
    let records = read_records(dir.path(), 2).await;
    assert_eq!(request_ids(&records), ["61", "62"], "{records:?}");
    assert!(records.iter().all(|r| r["result"] == "ok"), "{records:?}");
    let direct = answered_on_sessions(dir.path());
    assert_eq!(
        direct,
        if via_rmcp { 0 } else { 2 },
        "reads answered outside rmcp"
    );
}

// traces: TR-4 — a session opened outside rmcp is handed to rmcp by its first request of another
// kind; when several come at once (a client's `GET` stream and its first listing, as the SDKs
// send them), every one is answered: none reaches rmcp's session before rmcp has replayed its
// handshake.
#[tokio::test(flavor = "multi_thread")]
async fn requests_that_hand_a_session_over_at_once_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _notes, host) = sessions_gateway(dir.path()).await;
    for round in 0..40 {
        let sid = session(gw.addr, &host).await;
        let headers = [sid.as_str(), "MCP-Protocol-Version: 2025-11-25"];
        let mut sent = tokio::task::JoinSet::new();
        for n in 0..16 {
            let (addr, host, headers) = (gw.addr, host.clone(), headers.map(str::to_owned));
            sent.spawn(async move {
                let list = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/list"}}"#);
                let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
                post(addr, &host, &headers, &list).await
            });
        }
        for (status, _, body) in sent.join_all().await {
            assert_eq!(status, 200, "round {round}: {body}");
            assert!(
                message(&body)["result"]["tools"].is_array(),
                "round {round}: {body}"
            );
        }
    }
    assert_eq!(
        logged(dir.path(), "a session opened outside rmcp is handed to it"),
        40
    );
}
