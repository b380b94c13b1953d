//! Where a version's content sits in its row: last, so that no other column is reached through
//! its overflow pages; and a file written before it moved (migration 0011) keeps every version.

use std::path::Path;

use quarry_domain::{Retention, VersionSelector};
use quarry_ports::VersionStore;
use quarry_testkit::contract::versions::{at, digest_of, key};
use sqlx::{Connection, SqliteConnection};

use crate::{SqliteStore, micros};

/// The columns of the versions table, in the order SQLite stores them.
fn columns(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM pragma_table_info('resource_versions') ORDER BY cid")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn the_content_is_stored_after_every_other_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    SqliteStore::open(&path, Retention::default())
        .await
        .unwrap()
        .close()
        .await;
    let columns = columns(&path);
    assert_eq!(
        columns.last().map(String::as_str),
        Some("content"),
        "{columns:?}"
    );
    assert_eq!(columns.len(), 10, "{columns:?}");
}

/// A file migrated up to 0010 (content before `created_at` and `seen_seq`), holding two
/// resources' versions, one of them with its content dropped by retention, is opened by the
/// current store: every version, content and sighting order is still there.
#[tokio::test]
async fn a_file_from_before_the_content_moved_keeps_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    crate::tests::migrated_up_to(&path, 10).await;
    let url = format!("sqlite://{}", path.display());
    let mut conn = SqliteConnection::connect(&url).await.unwrap();
    let (a, b) = (key("file:///a"), key("file:///b"));
    let big = "x".repeat(100_000);
    // (key, number, content, first seen, sighting)
    let rows: [(&_, i64, Option<&str>, i64, i64); 3] = [
        (&a, 1, None, 0, 1),
        (&a, 2, Some(big.as_str()), 5, 3),
        (&b, 1, Some("bee"), 2, 2),
    ];
    for (k, number, content, seen, seq) in rows {
        let body = content.unwrap_or("dropped");
        sqlx::query(
            "INSERT INTO resource_versions
             (server, uri, number, digest, size, mime_type, is_text, content, created_at, seen_seq)
             VALUES (?, ?, ?, ?, ?, 'text/plain', 1, ?, ?, ?)",
        )
        .bind(k.server.as_str())
        .bind(&k.upstream_uri)
        .bind(number)
        .bind(&digest_of(body).bytes()[..])
        .bind(body.len() as i64)
        .bind(content.map(str::as_bytes))
        .bind(micros(at(seen)))
        .bind(seq)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();
    assert_ne!(columns(&path).last().map(String::as_str), Some("content"));

    let store = SqliteStore::open(&path, Retention::default())
        .await
        .unwrap();
    assert_eq!(columns(&path).last().map(String::as_str), Some("content"));
    let history = store.history(&a).await.unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[0].created_at, at(0));
    assert_eq!(history[1].created_at, at(5));
    assert_eq!(history[1].size, 100_000);
    assert_eq!(history[1].checksum, digest_of(&big).checksum());
    let v1 = VersionSelector::parse("v1").unwrap();
    let v2 = VersionSelector::parse("v2").unwrap();
    let (_, dropped) = store.find(&a, &v1).await.unwrap().unwrap();
    assert!(dropped.is_none(), "a dropped content came back");
    let (_, kept) = store.find(&a, &v2).await.unwrap().unwrap();
    assert_eq!(kept.unwrap().bytes(), big.as_bytes());
    let (_, bee) = store.find(&b, &v1).await.unwrap().unwrap();
    assert_eq!(bee.unwrap().bytes(), b"bee");
    let asked = [a.upstream_uri.clone(), b.upstream_uri.clone()];
    let mut summaries = store.summaries(&a.server, &asked).await.unwrap();
    summaries.sort_by(|x, y| x.upstream_uri.cmp(&y.upstream_uri));
    let seen: Vec<_> = summaries
        .iter()
        .map(|s| (s.upstream_uri.as_str(), s.latest.get(), s.first_seen))
        .collect();
    assert_eq!(
        seen,
        [("file:///a", 2, at(0)), ("file:///b", 1, at(2))],
        "the latest versions and first sightings"
    );
    // The digests survived: seeing a's v2 again is no new version.
    let again = store
        .record(
            &a,
            digest_of(&big),
            &quarry_testkit::contract::versions::text(&big),
            at(9),
        )
        .await
        .unwrap();
    assert!(!again.is_new);
    assert_eq!(again.version.version, "v2");
    store.close().await;
}
