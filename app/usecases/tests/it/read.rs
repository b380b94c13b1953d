//! Reads: the cache, versions, degraded mode, ranges and the inline limit.

use super::*;

// traces: REQ-071-028, REQ-071-029, REQ-071-032, SR-002.5
#[tokio::test]
async fn the_second_read_is_served_from_cache_and_says_so() {
    let w = world().await;
    let first = w.service.read_resource(read(A)).await.unwrap();
    assert!(!first.cached);
    assert_eq!(first.cached_at, None);
    w.clock.advance(10);
    let second = w.service.read_resource(read(A)).await.unwrap();
    assert!(second.cached);
    assert_eq!(
        second.cached_at,
        Some(w.clock.now() - chrono::Duration::seconds(10))
    );
    assert_eq!(second.content, first.content);
    assert_eq!(
        second.version, first.version,
        "the cached entry knows its version"
    );
    assert_eq!(
        w.docs.reads.load(Ordering::SeqCst),
        1,
        "the upstream was asked once"
    );
}

// traces: REQ-071-030, SR-002.1 — TTL from configuration, with an injected clock.
#[tokio::test]
async fn content_is_refetched_once_the_ttl_has_passed() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(299);
    assert!(w.service.read_resource(read(A)).await.unwrap().cached);
    w.clock.advance(1);
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// An upstream's ttlMs shortens the cache lifetime, never lengthens it.
#[tokio::test]
async fn an_upstream_ttl_hint_shortens_the_cache_lifetime() {
    let w = world_with(FakeSession {
        ttl: Some(Duration::from_secs(10)),
        ..FakeSession::default()
    })
    .await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(9);
    assert!(w.service.read_resource(read(A)).await.unwrap().cached);
    w.clock.advance(1);
    assert!(!w.service.read_resource(read(A)).await.unwrap().cached);

    let long = world_with(FakeSession {
        ttl: Some(Duration::from_secs(86_400)),
        ..FakeSession::default()
    })
    .await;
    long.service.read_resource(read(A)).await.unwrap();
    long.clock.advance(300);
    assert!(
        !long.service.read_resource(read(A)).await.unwrap().cached,
        "capped by the configured 300 s"
    );
}

// traces: CA-1 — content an upstream marks private is never served to another principal.
#[tokio::test]
async fn ca_1_private_content_is_cached_per_principal() {
    let w = world_with(FakeSession {
        private: true,
        ..FakeSession::default()
    })
    .await;
    let alice = ReadRequest {
        principal: Principal::new("alice"),
        ..read(A)
    };
    let bob = ReadRequest {
        principal: Principal::new("bob"),
        ..read(A)
    };
    assert!(!w.service.read_resource(alice.clone()).await.unwrap().cached);
    assert!(w.service.read_resource(alice.clone()).await.unwrap().cached);
    assert!(
        !w.service.read_resource(bob).await.unwrap().cached,
        "bob never gets alice's entry"
    );
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-031, REQ-071-018
#[tokio::test]
async fn use_cache_false_bypasses_and_refreshes() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.docs.set("file:///a.txt", text("changed"));
    let bypass = ReadRequest {
        use_cache: false,
        ..read(A)
    };
    let fresh = w.service.read_resource(bypass).await.unwrap();
    assert!(!fresh.cached);
    assert_eq!(fresh.content.as_deref(), Some("changed"));
    let after = w.service.read_resource(read(A)).await.unwrap();
    assert!(after.cached);
    assert_eq!(
        after.content.as_deref(),
        Some("changed"),
        "the bypass refreshed the cache"
    );
}

// traces: REQ-071-027, SR-002 — a corrupted cache entry is detected and never returned.
#[tokio::test]
async fn a_corrupted_cache_entry_is_dropped_and_refetched() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    let mut entry = w.cache.get(&key_a(), w.clock.now()).await.unwrap();
    entry.content = std::sync::Arc::new(text("tampered"));
    w.cache.put(key_a(), entry).await;
    let result = w.service.read_resource(read(A)).await.unwrap();
    assert!(!result.cached);
    assert_eq!(result.content.as_deref(), Some("héllo wörld"));
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 2);
}

// traces: REQ-071-027 — checksum validation is the caller's to turn off: without it, cached bytes
// are served as they are, unhashed (the opt-out is what makes the default check observable).
#[tokio::test]
async fn validate_checksum_false_serves_cached_bytes_without_rehashing() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    let mut entry = w.cache.get(&key_a(), w.clock.now()).await.unwrap();
    entry.content = std::sync::Arc::new(text("tampered"));
    w.cache.put(key_a(), entry).await;
    let unchecked = w
        .service
        .read_resource(ReadRequest {
            validate_checksum: false,
            ..read(A)
        })
        .await
        .unwrap();
    assert!(unchecked.cached);
    assert_eq!(unchecked.content.as_deref(), Some("tampered"));
    assert_eq!(w.docs.reads.load(Ordering::SeqCst), 1, "no refetch");
    let checked = w.service.read_resource(read(A)).await.unwrap();
    assert_eq!(
        checked.content.as_deref(),
        Some("héllo wörld"),
        "the default check refetches"
    );
}

// traces: REQ-071-027, SR-001.5 — a stored version whose bytes no longer match its checksum is
// refused with E006, never served as that version.
#[tokio::test]
async fn a_damaged_stored_version_is_refused_with_e006() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.versions.damage(&key_a(), 1);
    let v1 = ReadRequest {
        version: Some(VersionSelector::parse("v1").unwrap()),
        ..read(A)
    };
    let err = w.service.read_resource(v1.clone()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::E006);
    assert!(
        err.message().contains("fails its checksum"),
        "{}",
        err.message()
    );
    let unchecked = w
        .service
        .read_resource(ReadRequest {
            validate_checksum: false,
            ..v1
        })
        .await
        .unwrap();
    assert_ne!(
        unchecked.content.as_deref(),
        Some("héllo wörld"),
        "served as stored, unchecked"
    );
}

// traces: REQ-071-024, REQ-071-025, REQ-071-026, SR-001.1, SR-001.2, SR-001.4, SR-001.5
#[tokio::test]
async fn a_change_becomes_the_next_version_and_earlier_versions_stay_readable() {
    let w = world().await;
    let v1 = w.service.read_resource(read(A)).await.unwrap();
    let v1_meta = v1.version.clone().unwrap();
    assert_eq!(v1_meta.version, "v1");
    assert_eq!(
        v1_meta.checksum,
        FakeHasher.sha256("héllo wörld".as_bytes()).checksum()
    );
    assert_eq!(v1_meta.size, 13);

    w.docs.set("file:///a.txt", text("second edition"));
    let v2 = w
        .service
        .read_resource(ReadRequest {
            use_cache: false,
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(v2.version.as_ref().unwrap().version, "v2");
    let latest = w.service.read_resource(read(A)).await.unwrap();
    assert_eq!(
        latest.version.as_ref().unwrap().version,
        "v2",
        "no version asked: the latest"
    );
    assert_eq!(latest.content.as_deref(), Some("second edition"));

    let old = w
        .service
        .read_resource(ReadRequest {
            version: Some(VersionSelector::parse("v1").unwrap()),
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(old.content.as_deref(), Some("héllo wörld"));
    assert_eq!(old.version.as_ref(), Some(&v1_meta));
    let by_etag = w
        .service
        .read_resource(ReadRequest {
            version: Some(VersionSelector::parse(&v1_meta.etag).unwrap()),
            ..read(A)
        })
        .await
        .unwrap();
    assert_eq!(by_etag.content, old.content);

    let history = w
        .service
        .versions(&ResourceUri::parse(A).unwrap())
        .await
        .unwrap();
    assert_eq!(
        history
            .iter()
            .map(|v| v.version.to_string())
            .collect::<Vec<_>>(),
        ["v1", "v2"]
    );

    let unknown = w
        .service
        .read_resource(ReadRequest {
            version: Some(VersionSelector::parse("v9").unwrap()),
            ..read(A)
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::E002);
    // A malformed version never becomes a request: it is refused while parsing (E001).
    let malformed = VersionSelector::parse("latest").unwrap_err();
    assert_eq!(malformed.code(), ErrorCode::E001);
}

// traces: CA-2, SR-001.5 — after resources/updated no read returns the old content.
#[tokio::test]
async fn ca_2_an_update_announcement_invalidates_the_cached_content() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.docs.set("file:///a.txt", text("updated"));
    assert_eq!(
        w.service
            .read_resource(read(A))
            .await
            .unwrap()
            .content
            .as_deref(),
        Some("héllo wörld")
    );
    w.observer()
        .resource_updated(&ServerName::parse("docs").unwrap(), "file:///a.txt")
        .await;
    let after = w.service.read_resource(read(A)).await.unwrap();
    assert!(!after.cached);
    assert_eq!(after.content.as_deref(), Some("updated"));
}

// traces: CA-2 — several sessions of one server losing their subscriptions at once (the server
// restarted under a full pool) make one check, which asks for the watched URIs once; a loss told
// after that check is done is checked again.
#[tokio::test(start_paused = true)]
async fn ca_2_losses_told_together_ask_for_the_watched_uris_once() {
    let w = world().await;
    w.service
        .watch(&ResourceUri::parse(A).unwrap())
        .await
        .unwrap();
    let asked = || w.docs.subscribes.load(Ordering::SeqCst);
    let before = asked();
    assert!(before >= 1, "the watch subscribed nothing");
    let docs = ServerName::parse("docs").unwrap();
    let observer = w.observer();
    futures::future::join_all((0..5).map(|_| observer.unheard(&docs))).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(asked(), before + 1, "five losses, each asking again");
    observer.unheard(&docs).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(asked(), before + 2, "a later loss was not checked");
}

// traces: AV-5 — with the upstream down, expired cached content is served, marked stale.
// (The fake times out rather than refusing, so no retry schedule runs; the binary's test kills a
// real process.)
#[tokio::test]
async fn av_5_a_down_upstream_gets_stale_content_served_with_its_error() {
    let w = world().await;
    w.service.read_resource(read(A)).await.unwrap();
    w.clock.advance(301);
    w.docs.down.store(true, Ordering::SeqCst);
    let stale = w.service.read_resource(read(A)).await.unwrap();
    assert!(stale.cached && stale.stale);
    assert_eq!(stale.content.as_deref(), Some("héllo wörld"));
    let failure = stale.upstream_error.unwrap();
    assert_eq!(failure.error_code, ErrorCode::E009);
    assert!(failure.error_message.contains("timed out"));
    // Nothing cached: the error itself.
    let none = w
        .service
        .read_resource(read("mcp://docs/file_3A///big.bin"))
        .await
        .unwrap_err();
    assert_eq!(none.code(), ErrorCode::E009);
    // Asking for fresh content gets the error, not stale content.
    let fresh = w
        .service
        .read_resource(ReadRequest {
            use_cache: false,
            ..read(A)
        })
        .await
        .unwrap_err();
    assert_eq!(fresh.code(), ErrorCode::E009);
}

// traces: REQ-071-033, REQ-071-034, REQ-071-035, REQ-071-036, IV-3
#[tokio::test]
async fn iv_3_ranges_cut_bytes_and_never_return_broken_text() {
    let w = world().await;
    let ranged = |offset, limit| ReadRequest {
        range: ByteRange::new(offset, Some(limit)).unwrap(),
        ..read(A)
    };
    let head = w.service.read_resource(ranged(0, 5)).await.unwrap();
    assert_eq!(head.content.as_deref(), Some("héll"), "é is two bytes");
    assert_eq!(head.content_range.as_str(), "bytes 0-4/13");
    assert_eq!(head.size, 13);
    assert_eq!(
        head.next_offset, None,
        "the range asked for was returned whole"
    );
    // Bytes 0..2 end inside 'é': the exact bytes come back as bytes, not as repaired text.
    let split = w.service.read_resource(ranged(0, 2)).await.unwrap();
    assert_eq!(split.content, None);
    assert_eq!(split.bytes_content.as_deref(), Some("aMM="));
    let beyond = w.service.read_resource(ranged(13, 1)).await.unwrap_err();
    assert_eq!(beyond.code(), ErrorCode::E007);
}

// Agent-sized results: a read larger than the inline limit returns its first part, cut on a
// character boundary, and says where to continue.
#[tokio::test]
async fn reads_over_the_inline_limit_come_back_in_parts() {
    let w = world().await;
    let capped = |offset: i64| ReadRequest {
        range: ByteRange::new(offset, None).unwrap(),
        inline_limit: Some(2),
        ..read(A)
    };
    let first = w.service.read_resource(capped(0)).await.unwrap();
    assert_eq!(
        first.content.as_deref(),
        Some("h"),
        "the cut moves back before 'é'"
    );
    assert_eq!(first.next_offset, Some(1));
    assert!(first.note.as_deref().unwrap().contains("offset=1"));
    let second = w.service.read_resource(capped(1)).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("é"));
    assert_eq!(second.content_range.as_str(), "bytes 1-2/13");
    let mut text = String::new();
    let mut offset = 0;
    loop {
        let part = w.service.read_resource(capped(offset)).await.unwrap();
        text.push_str(part.content.as_deref().unwrap());
        match part.next_offset {
            Some(next) => offset = next as i64,
            None => break,
        }
    }
    assert_eq!(
        text, "héllo wörld",
        "walking next_offset reassembles the content"
    );
    let blob = ReadRequest {
        inline_limit: Some(1000),
        ..read("mcp://docs/file_3A///big.bin")
    };
    let part = w.service.read_resource(blob).await.unwrap_err();
    assert_eq!(
        part.code(),
        ErrorCode::E008,
        "over max_resource_size (1024 here) is refused whole"
    );
}

#[tokio::test]
async fn bad_targets_get_their_codes() {
    let w = world().await;
    let unknown = w
        .service
        .read_resource(read("mcp://nope/x"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::E003);
    let missing = w
        .service
        .read_resource(read("mcp://docs/file_3A///missing"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), ErrorCode::E002);
    let big = w
        .service
        .read_resource(read("mcp://docs/file_3A///big.bin"))
        .await
        .unwrap_err();
    assert_eq!(big.code(), ErrorCode::E008);
    let q = ListQuery {
        server: Some(ServerSelector::new("nope").unwrap()),
        ..ListQuery::default()
    };
    assert_eq!(
        w.service.list_resources(q).await.unwrap_err().code(),
        ErrorCode::E003
    );
    assert_eq!(
        w.service
            .versions(&ResourceUri::parse("mcp://nope/x").unwrap())
            .await
            .unwrap_err()
            .code(),
        ErrorCode::E003
    );
}
