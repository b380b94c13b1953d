//! The gateway URI bijection: canonical-only decoding, every encoding inside the spec's pattern.

use proptest::prelude::*;

use super::*;
use crate::ErrorCode;

fn server(name: &str) -> ServerName {
    ServerName::parse(name).unwrap()
}

fn matches_spec_pattern(uri: &str) -> bool {
    // ^mcp://[a-zA-Z0-9_-]+/[a-zA-Z0-9_/.-]+$
    let Some(rest) = uri.strip_prefix("mcp://") else {
        return false;
    };
    let Some((name, path)) = rest.split_once('/') else {
        return false;
    };
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !path.is_empty()
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b'.' | b'-'))
}

#[test]
fn the_design_briefs_example() {
    let uri = ResourceUri::new(server("everything"), "test://static/resource/1").unwrap();
    assert_eq!(uri.as_str(), "mcp://everything/test_3A//static/resource/1");
    let back = ResourceUri::parse(uri.as_str()).unwrap();
    assert_eq!(back.upstream(), "test://static/resource/1");
    assert_eq!(back.server().as_str(), "everything");
}

#[test]
fn underscore_is_always_escaped() {
    let uri = ResourceUri::new(server("s"), "a_b").unwrap();
    assert_eq!(uri.as_str(), "mcp://s/a_5Fb");
}

#[test]
fn non_canonical_forms_are_refused() {
    for bad in [
        "mcp://s/a_5fb",   // lowercase hex
        "mcp://s/a_2Db",   // '-' escaped although kept
        "mcp://s/a_",      // dangling escape
        "mcp://s/a_4",     // short escape
        "mcp://s/a%2e%2e", // percent-encoding is not ours
        "mcp://s/a_00",    // NUL
        "mcp://s/_C3",     // not UTF-8 once decoded
        "mcp://s/",        // empty path
        "mcp://s",         // no path
        "mcp:///x",        // empty server
        "http://s/x",      // other scheme
        "mcp://s s/x",     // server outside the pattern
        "mcp://s/a b",     // space
    ] {
        let err = ResourceUri::parse(bad).unwrap_err();
        assert_eq!(err.code(), ErrorCode::E001, "{bad}");
    }
}

#[test]
fn huge_uris_are_refused_without_decoding() {
    let huge = format!("mcp://s/{}", "a".repeat(64 * 1024));
    let err = ResourceUri::parse(&huge).unwrap_err();
    assert_eq!(err.code(), ErrorCode::E001);
    assert!(err.message().len() < 200);
}

#[test]
fn templates_keep_their_expressions() {
    let t = template_to_gateway(&server("everything"), "test://static/resource/{id}");
    assert_eq!(t, "mcp://everything/test_3A//static/resource/{id}");
    let expanded = t.replace("{id}", "42");
    let uri = ResourceUri::parse(&expanded).unwrap();
    assert_eq!(uri.upstream(), "test://static/resource/42");
}

fn server_name() -> impl Strategy<Value = ServerName> {
    "[A-Za-z0-9_-]{1,20}".prop_map(|s| ServerName::parse(&s).unwrap())
}

proptest! {
    // traces: design "Gateway URIs" — decode(encode(x)) == x and every encoding matches the pattern.
    #[test]
    fn encoding_is_a_bijection_onto_the_pattern(name in server_name(), upstream in "\\PC{1,80}|[\\x00-\\x7F]{1,40}") {
        prop_assume!(!upstream.contains('\0') && !has_dot_segment(&upstream));
        let uri = ResourceUri::new(name.clone(), &upstream).unwrap();
        prop_assert!(matches_spec_pattern(uri.as_str()), "{}", uri);
        let back = ResourceUri::parse(uri.as_str()).unwrap();
        prop_assert_eq!(back.upstream(), upstream.as_str());
        prop_assert_eq!(back.server(), &name);
        prop_assert_eq!(back, uri);
    }

    // Every string that parses is the encoding of what it decodes to: there are no aliases.
    #[test]
    fn every_accepted_uri_is_canonical(path in "[A-Za-z0-9_/.-]{1,40}") {
        let text = format!("mcp://s/{path}");
        if let Ok(uri) = ResourceUri::parse(&text) {
            let again = ResourceUri::new(uri.server().clone(), uri.upstream()).unwrap();
            prop_assert_eq!(again.as_str(), text.as_str());
        }
    }

    #[test]
    fn parsing_never_panics(text in "\\PC{0,200}") {
        let _ = ResourceUri::parse(&text);
    }
}

// traces: IV-2 — a `.` or `..` segment is refused both ways: never parsed from an agent, never
// listed from an upstream (it could not be read back).
#[test]
fn dot_segments_are_refused_both_ways() {
    for bad in [
        "mcp://s/file_3A///etc/../passwd",
        "mcp://s/a/../b",
        "mcp://s/..",
        "mcp://s/./a",
        "mcp://s/fixture_3A//x/..",
    ] {
        let e = ResourceUri::parse(bad).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::E001, "{bad}");
        assert!(e.message().contains("'..' segment"), "{}", e.message());
    }
    for bad in ["../etc/passwd", "file:///a/./b", "x/.."] {
        assert!(ResourceUri::new(server("s"), bad).is_err(), "{bad}");
    }
    for fine in ["a...b/...", "file:///a/.hidden", "v1.2/x..y"] {
        let uri = ResourceUri::new(server("s"), fine).unwrap();
        assert_eq!(ResourceUri::parse(uri.as_str()).unwrap(), uri);
    }
}

#[test]
fn an_upstream_uri_too_long_to_read_back_gets_no_gateway_uri() {
    assert!(ResourceUri::new(server("s"), &"a".repeat(16 * 1024)).is_err());
    assert!(ResourceUri::new(server("s"), &"a".repeat(1000)).is_ok());
}
