//! The version history in the SQLite file: each distinct content of a resource numbered in
//! order, its sightings ordered store-wide, retention dropping old contents' bytes. A content
//! seen again while it is the latest is answered from one read; anything else is written in
//! an `IMMEDIATE` transaction under the process's write turn, together with the other
//! contents queued for it meanwhile (`versions/together.rs`).

use async_trait::async_trait;
use quarry_domain::{
    Body, Content, Digest, ResourceVersion, Retention, ServerName, Timestamp, VersionNumber,
    VersionSelector,
};
use quarry_ports::{Recorded, ResourceKey, StoreError, VersionStore, VersionSummary};
use sqlx::{Row, SqliteConnection};

use crate::{SqliteStore, corrupt, failed, from_micros, micros};

mod here;
#[cfg(test)]
mod layout;
#[cfg(test)]
mod tests;
mod together;

pub(crate) use together::Queue;

/// A fetched content to record as a version of its resource.
#[derive(Debug)]
pub(crate) struct Sighting {
    key: ResourceKey,
    digest: Digest,
    content: Content,
    now: Timestamp,
}

/// Contents up to this size are recorded on the caller's thread (`versions/here.rs`): a few
/// pages of the write-ahead log. A larger one is written by a pooled connection on its own
/// thread, so that no runtime thread is held while its pages are copied.
const RECORDED_HERE_MAX: u64 = 64 * 1024;

fn number_of(n: i64) -> Result<VersionNumber, StoreError> {
    u32::try_from(n)
        .ok()
        .and_then(|n| VersionNumber::new(n).ok())
        .ok_or_else(|| corrupt(format!("a stored version number is {n}")))
}

fn version_of(row: &sqlx::sqlite::SqliteRow) -> Result<(ResourceVersion, Digest), StoreError> {
    version_from(
        row.try_get("number").map_err(failed)?,
        row.try_get("digest").map_err(failed)?,
        row.try_get("size").map_err(failed)?,
        row.try_get("created_at").map_err(failed)?,
    )
}

/// A version's columns: `number`, `digest`, `size`, `created_at`.
fn version_from(
    number: i64,
    digest: Vec<u8>,
    size: i64,
    created: i64,
) -> Result<(ResourceVersion, Digest), StoreError> {
    let digest: [u8; 32] = digest
        .try_into()
        .map_err(|_| corrupt("a stored digest is not 32 bytes"))?;
    let digest = Digest::new(digest);
    Ok((
        ResourceVersion {
            version: number_of(number)?,
            etag: digest.etag(),
            created_at: from_micros(created),
            size: u64::try_from(size).map_err(failed)?,
            checksum: digest.checksum(),
        },
        digest,
    ))
}

fn content_of(row: &sqlx::sqlite::SqliteRow) -> Result<Option<Content>, StoreError> {
    let bytes: Option<Vec<u8>> = row.try_get("content").map_err(failed)?;
    let Some(bytes) = bytes else { return Ok(None) };
    let mime_type: Option<String> = row.try_get("mime_type").map_err(failed)?;
    let is_text: bool = row.try_get("is_text").map_err(failed)?;
    let body = if is_text {
        Body::Text(String::from_utf8(bytes).map_err(|_| corrupt("stored text is not UTF-8"))?)
    } else {
        Body::Blob(bytes)
    };
    Ok(Some(Content { mime_type, body }))
}

/// What a write needs, in one statement: the next sighting number, the resource's newest
/// version number, and the version with this digest if there is one (`?1` server, `?2` URI,
/// `?3` digest).
const LOOKUP: &str = "SELECT (SELECT COALESCE(MAX(seen_seq), 0) + 1 FROM resource_versions) AS seq,
        (SELECT COALESCE(MAX(number), 0) FROM resource_versions
         WHERE server = ?1 AND uri = ?2) AS newest,
        v.number, v.digest, v.size, v.created_at
 FROM (SELECT 1) LEFT JOIN resource_versions v
      ON v.server = ?1 AND v.uri = ?2 AND v.digest = ?3";

/// A content seen again becomes the latest, its bytes back if retention had dropped them
/// (`?1` sighting, `?2` content, `?3` server, `?4` URI, `?5` number).
const SEEN_AGAIN: &str =
    "UPDATE resource_versions SET seen_seq = ?1, content = COALESCE(content, ?2)
 WHERE server = ?3 AND uri = ?4 AND number = ?5";

/// A new version. The content (`?8`) is stored last in the row whatever the order here
/// (migration 0011), so that no other column is reached through its overflow pages.
const INSERT: &str = "INSERT INTO resource_versions
 (server, uri, number, digest, size, mime_type, is_text, content, created_at, seen_seq)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// A resource's latest version (`?1` server, `?2` URI), and whether it still holds its content.
/// One index seek (`resource_versions_latest`); `length` of a blob is read from the record's
/// header, where `content IS NOT NULL` as a value would load the whole content to test it.
pub(crate) const LATEST: &str = "SELECT number, digest, size, created_at,
        length(content) IS NOT NULL AS kept
 FROM resource_versions WHERE server = ?1 AND uri = ?2
 ORDER BY seen_seq DESC LIMIT 1";

/// The latest version and first sighting of each asked URI that has versions (`?1` server,
/// `?2` the URIs as a JSON array): for each, one seek of the latest-version index for the
/// latest and one for the first sighting. Materialised, so that the outer `WHERE` does not
/// evaluate the latest a second time (SQLite would otherwise flatten the subquery and repeat
/// it); and asked only when the server has versions at all (one seek), so that a listing of a
/// server never read costs no look-up per URI.
pub(crate) const SUMMARIES: &str = "WITH asked_for AS MATERIALIZED (
   SELECT asked.value AS uri,
          (SELECT number FROM resource_versions l WHERE l.server = ?1 AND l.uri = asked.value
            ORDER BY l.seen_seq DESC LIMIT 1) AS latest,
          (SELECT MIN(created_at) FROM resource_versions f
            WHERE f.server = ?1 AND f.uri = asked.value) AS first_seen
   FROM json_each(?2) asked
   WHERE EXISTS (SELECT 1 FROM resource_versions v WHERE v.server = ?1))
 SELECT uri, latest, first_seen FROM asked_for WHERE latest IS NOT NULL";

/// The versions of a resource that still hold their content, newest sighting first.
const KEPT: &str = "SELECT number, size FROM resource_versions
 WHERE server = ?1 AND uri = ?2 AND content IS NOT NULL ORDER BY seen_seq DESC";

/// Retention dropping one version's content (`?1` server, `?2` URI, `?3` number).
const DROP_CONTENT: &str =
    "UPDATE resource_versions SET content = NULL WHERE server = ?1 AND uri = ?2 AND number = ?3";

/// Whether a resource whose newest version was `newest` before this record has more than one
/// now, so that retention has something to weigh.
fn retention_applies(newest: i64, is_new: bool) -> bool {
    newest > 1 || (is_new && newest == 1)
}

/// The numbers of the versions whose content retention drops, of those that still hold it
/// (`(number, size)`, newest sighting first): the latest is always kept (a read must be able
/// to name what it returned), then as many as the count and the bytes allow.
fn dropped(kept: &[(i64, i64)], retention: Retention) -> Vec<i64> {
    let mut kept_bytes: u64 = 0;
    let mut dropped = Vec::new();
    for (i, &(number, size)) in kept.iter().enumerate() {
        let size = u64::try_from(size).unwrap_or(u64::MAX);
        let keep = i == 0 || (i < retention.count as usize && kept_bytes + size <= retention.bytes);
        if keep {
            kept_bytes += size;
        } else {
            dropped.push(number);
        }
    }
    dropped
}

/// A new version's description.
fn new_version(
    number: i64,
    digest: Digest,
    content: &Content,
    now: Timestamp,
) -> Result<ResourceVersion, StoreError> {
    Ok(ResourceVersion {
        version: number_of(number)?,
        etag: digest.etag(),
        created_at: from_micros(micros(now)),
        size: content.len(),
        checksum: digest.checksum(),
    })
}

impl SqliteStore {
    async fn record_in(
        &self,
        conn: &mut SqliteConnection,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError> {
        let server = key.server.as_str();
        let uri = key.upstream_uri.as_str();
        let found = sqlx::query(LOOKUP)
            .bind(server)
            .bind(uri)
            .bind(&digest.bytes()[..])
            .fetch_one(&mut *conn)
            .await
            .map_err(failed)?;
        let seq: i64 = found.try_get("seq").map_err(failed)?;
        let newest: i64 = found.try_get("newest").map_err(failed)?;
        let seen: Option<i64> = found.try_get("number").map_err(failed)?;
        let (version, is_new) = if let Some(number) = seen {
            sqlx::query(SEEN_AGAIN)
                .bind(seq)
                .bind(content.bytes())
                .bind(server)
                .bind(uri)
                .bind(number)
                .execute(&mut *conn)
                .await
                .map_err(failed)?;
            (version_of(&found)?.0, false)
        } else {
            let number = newest + 1;
            sqlx::query(INSERT)
                .bind(server)
                .bind(uri)
                .bind(number)
                .bind(&digest.bytes()[..])
                .bind(i64::try_from(content.len()).map_err(failed)?)
                .bind(content.mime_type.as_deref())
                .bind(content.is_text())
                .bind(content.bytes())
                .bind(micros(now))
                .bind(seq)
                .execute(&mut *conn)
                .await
                .map_err(failed)?;
            (new_version(number, digest, content, now)?, true)
        };
        if retention_applies(newest, is_new) {
            self.apply_retention(conn, key).await?;
        }
        Ok(Recorded { version, is_new })
    }

    /// The latest version of `key` when it has `digest` and still holds its content: seeing
    /// that content again changes nothing a reader can tell (it stays the latest, its content
    /// is kept, retention has nothing new to weigh), so nothing is written and no write lock
    /// is taken. A read that races a new version is ordered before it. One statement, on the
    /// caller's thread when the reader connection is free (`SqliteStore::read_here`).
    async fn latest_if_unchanged(
        &self,
        key: &ResourceKey,
        digest: Digest,
    ) -> Result<Option<ResourceVersion>, StoreError> {
        type Latest = Option<(i64, Vec<u8>, i64, i64, bool)>;
        let here = self.read_here(|conn| -> rusqlite::Result<Latest> {
            use rusqlite::OptionalExtension;
            conn.prepare_cached(LATEST)?
                .query_row(
                    rusqlite::params![key.server.as_str(), key.upstream_uri],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                )
                .optional()
        });
        let latest: Latest = match here {
            Some(latest) => latest,
            None => sqlx::query(LATEST)
                .bind(key.server.as_str())
                .bind(&key.upstream_uri)
                .fetch_optional(&self.pool)
                .await
                .map_err(failed)?
                .map(|row| -> Result<_, StoreError> {
                    Ok((
                        row.try_get("number").map_err(failed)?,
                        row.try_get("digest").map_err(failed)?,
                        row.try_get("size").map_err(failed)?,
                        row.try_get("created_at").map_err(failed)?,
                        row.try_get("kept").map_err(failed)?,
                    ))
                })
                .transpose()?,
        };
        let Some((number, stored, size, created, kept)) = latest else {
            return Ok(None);
        };
        let (version, latest) = version_from(number, stored, size, created)?;
        Ok((kept && latest == digest).then_some(version))
    }

    /// Every version of `key`, oldest first, without content.
    async fn versions_of(&self, key: &ResourceKey) -> Result<Vec<ResourceVersion>, StoreError> {
        let rows = sqlx::query(
            "SELECT number, digest, size, created_at FROM resource_versions
             WHERE server = ? AND uri = ? ORDER BY number",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        rows.iter().map(|r| version_of(r).map(|(v, _)| v)).collect()
    }

    /// Records a content through a pooled connection, in a transaction of its own; the caller
    /// holds the write turn.
    async fn record_pooled(
        &self,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        // IMMEDIATE takes the write lock up front, so two recorders cannot both pick number n.
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
        let result = self.record_in(&mut conn, key, digest, content, now).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(end).execute(&mut *conn).await.map_err(failed)?;
        result
    }

    /// Drops the content of versions beyond the retention limits, newest kept first.
    async fn apply_retention(
        &self,
        conn: &mut SqliteConnection,
        key: &ResourceKey,
    ) -> Result<(), StoreError> {
        let kept: Vec<(i64, i64)> = sqlx::query_as(KEPT)
            .bind(key.server.as_str())
            .bind(&key.upstream_uri)
            .fetch_all(&mut *conn)
            .await
            .map_err(failed)?;
        for number in dropped(&kept, self.retention) {
            sqlx::query(DROP_CONTENT)
                .bind(key.server.as_str())
                .bind(&key.upstream_uri)
                .bind(number)
                .execute(&mut *conn)
                .await
                .map_err(failed)?;
        }
        Ok(())
    }
}

#[async_trait]
impl VersionStore for SqliteStore {
    async fn record(
        &self,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError> {
        if let Some(version) = self.latest_if_unchanged(key, digest).await? {
            return Ok(Recorded {
                version,
                is_new: false,
            });
        }
        if content.len() <= RECORDED_HERE_MAX {
            let sighting = Sighting {
                key: key.clone(),
                digest,
                content: content.clone(),
                now,
            };
            return self.record_together(sighting).await;
        }
        let _turn = self.write_turn().await;
        self.record_pooled(key, digest, content, now).await
    }

    async fn find(
        &self,
        key: &ResourceKey,
        selector: &VersionSelector,
    ) -> Result<Option<(ResourceVersion, Option<Content>)>, StoreError> {
        // Find the version's number from the metadata alone; load only that version's content.
        let number = match selector {
            VersionSelector::Number(n) => i64::from(n.get()),
            VersionSelector::Etag(etag) => {
                let found = self
                    .versions_of(key)
                    .await?
                    .into_iter()
                    .find(|v| &v.etag == etag)
                    .map(|v| i64::from(v.version.get()));
                match found {
                    Some(n) => n,
                    None => return Ok(None),
                }
            }
        };
        let row = sqlx::query(
            "SELECT number, digest, size, created_at, mime_type, is_text, content FROM resource_versions
             WHERE server = ? AND uri = ? AND number = ?",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .bind(number)
        .fetch_optional(&self.pool)
        .await
        .map_err(failed)?;
        row.map(|r| Ok((version_of(&r)?.0, content_of(&r)?)))
            .transpose()
    }

    async fn history(&self, key: &ResourceKey) -> Result<Vec<ResourceVersion>, StoreError> {
        self.versions_of(key).await
    }

    async fn summaries(
        &self,
        server: &ServerName,
        uris: &[String],
    ) -> Result<Vec<VersionSummary>, StoreError> {
        if uris.is_empty() {
            return Ok(Vec::new());
        }
        // The URIs as one JSON array, one row each: two seeks a URI, whatever else the server
        // has versions of.
        // (A list of strings always serialises.)
        let asked = serde_json::to_string(uris).unwrap_or_default();
        let rows = sqlx::query(SUMMARIES)
            .bind(server.as_str())
            .bind(asked)
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        rows.iter()
            .map(|row| {
                let latest: i64 = row.try_get("latest").map_err(failed)?;
                Ok(VersionSummary {
                    upstream_uri: row.try_get("uri").map_err(failed)?,
                    latest: number_of(latest)?,
                    first_seen: from_micros(row.try_get("first_seen").map_err(failed)?),
                })
            })
            .collect()
    }
}
