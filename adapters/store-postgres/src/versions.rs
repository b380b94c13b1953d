//! Version history: one row per distinct content of a resource. A record takes a transaction
//! advisory lock on its resource, so recorders on any number of replicas never both take
//! number n; the sighting order is a sequence.

use async_trait::async_trait;
use quarry_domain::{
    Body, Content, Digest, ResourceVersion, ServerName, Timestamp, VersionNumber, VersionSelector,
};
use quarry_ports::{Recorded, ResourceKey, StoreError, VersionStore, VersionSummary};
use sqlx::{PgConnection, Row, postgres::PgRow};

use crate::{PostgresStore, corrupt, failed, from_micros, micros};

fn number_of(n: i64) -> Result<VersionNumber, StoreError> {
    u32::try_from(n)
        .ok()
        .and_then(|n| VersionNumber::new(n).ok())
        .ok_or_else(|| corrupt(format!("a stored version number is {n}")))
}

fn version_of(row: &PgRow) -> Result<ResourceVersion, StoreError> {
    let digest_bytes: Vec<u8> = row.try_get("digest").map_err(failed)?;
    let digest: [u8; 32] = digest_bytes
        .try_into()
        .map_err(|_| corrupt("a stored digest is not 32 bytes"))?;
    let digest = Digest::new(digest);
    let size: i64 = row.try_get("size").map_err(failed)?;
    Ok(ResourceVersion {
        version: number_of(row.try_get("number").map_err(failed)?)?,
        etag: digest.etag(),
        created_at: from_micros(row.try_get("created_at").map_err(failed)?),
        size: u64::try_from(size).map_err(failed)?,
        checksum: digest.checksum(),
    })
}

fn content_of(row: &PgRow) -> Result<Option<Content>, StoreError> {
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

impl PostgresStore {
    /// The latest version of `key` when it has `digest` and still holds its content: seeing
    /// that content again changes nothing a reader can tell, so nothing is written and no lock
    /// is taken (one query instead of a transaction). A read that races a new version is
    /// ordered before it.
    async fn latest_if_unchanged(
        &self,
        key: &ResourceKey,
        digest: Digest,
    ) -> Result<Option<ResourceVersion>, StoreError> {
        let row = sqlx::query(
            "SELECT number, digest, size, created_at, content IS NOT NULL AS kept
             FROM resource_versions WHERE server = $1 AND uri = $2
             ORDER BY seen_seq DESC LIMIT 1",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .fetch_optional(&self.pool)
        .await
        .map_err(failed)?;
        let Some(row) = row else { return Ok(None) };
        let kept: bool = row.try_get("kept").map_err(failed)?;
        let stored: Vec<u8> = row.try_get("digest").map_err(failed)?;
        if !kept || stored[..] != digest.bytes()[..] {
            return Ok(None);
        }
        version_of(&row).map(Some)
    }

    async fn record_in(
        &self,
        conn: &mut PgConnection,
        key: &ResourceKey,
        digest: Digest,
        content: &Content,
        now: Timestamp,
    ) -> Result<Recorded, StoreError> {
        let server = key.server.as_str();
        let uri = key.upstream_uri.as_str();
        // One recorder per resource at a time, whichever replica it runs on.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(10) || $2, 0))")
            .bind(server)
            .bind(uri)
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
        let existing = sqlx::query(
            "SELECT number, digest, size, created_at FROM resource_versions
             WHERE server = $1 AND uri = $2 AND digest = $3",
        )
        .bind(server)
        .bind(uri)
        .bind(&digest.bytes()[..])
        .fetch_optional(&mut *conn)
        .await
        .map_err(failed)?;
        let recorded = if let Some(row) = existing {
            // Seen again: it is the latest now, and its content is back if retention dropped it.
            sqlx::query(
                "UPDATE resource_versions
                 SET seen_seq = nextval('resource_versions_seen'), content = COALESCE(content, $1)
                 WHERE server = $2 AND uri = $3 AND number = $4",
            )
            .bind(content.bytes())
            .bind(server)
            .bind(uri)
            .bind(row.try_get::<i64, _>("number").map_err(failed)?)
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
            Recorded {
                version: version_of(&row)?,
                is_new: false,
            }
        } else {
            let row = sqlx::query(
                "INSERT INTO resource_versions
                 (server, uri, number, digest, size, mime_type, is_text, content, created_at, seen_seq)
                 SELECT $1, $2, COALESCE(MAX(number), 0) + 1, $3, $4, $5, $6, $7, $8,
                        nextval('resource_versions_seen')
                 FROM resource_versions WHERE server = $1 AND uri = $2
                 RETURNING number, digest, size, created_at",
            )
            .bind(server)
            .bind(uri)
            .bind(&digest.bytes()[..])
            .bind(i64::try_from(content.len()).map_err(failed)?)
            .bind(content.mime_type.as_deref())
            .bind(content.is_text())
            .bind(content.bytes())
            .bind(micros(now))
            .fetch_one(&mut *conn)
            .await
            .map_err(failed)?;
            Recorded {
                version: version_of(&row)?,
                is_new: true,
            }
        };
        self.apply_retention(conn, key).await?;
        Ok(recorded)
    }

    /// Drops the content of versions beyond the retention limits, newest kept first.
    async fn apply_retention(
        &self,
        conn: &mut PgConnection,
        key: &ResourceKey,
    ) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT number, size FROM resource_versions
             WHERE server = $1 AND uri = $2 AND content IS NOT NULL ORDER BY seen_seq DESC",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .fetch_all(&mut *conn)
        .await
        .map_err(failed)?;
        let mut kept_bytes: u64 = 0;
        let mut dropped: Vec<i64> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let size =
                u64::try_from(row.try_get::<i64, _>("size").map_err(failed)?).unwrap_or(u64::MAX);
            // The latest content is always kept: a read must be able to name what it returned.
            let keep = i == 0
                || (i < self.retention.count as usize && kept_bytes + size <= self.retention.bytes);
            if keep {
                kept_bytes += size;
            } else {
                dropped.push(row.try_get("number").map_err(failed)?);
            }
        }
        if !dropped.is_empty() {
            sqlx::query(
                "UPDATE resource_versions SET content = NULL
                 WHERE server = $1 AND uri = $2 AND number = ANY($3)",
            )
            .bind(key.server.as_str())
            .bind(&key.upstream_uri)
            .bind(&dropped)
            .execute(&mut *conn)
            .await
            .map_err(failed)?;
        }
        Ok(())
    }
}

#[async_trait]
impl VersionStore for PostgresStore {
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
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let recorded = self.record_in(&mut tx, key, digest, content, now).await?;
        tx.commit().await.map_err(failed)?;
        Ok(recorded)
    }

    async fn find(
        &self,
        key: &ResourceKey,
        selector: &VersionSelector,
    ) -> Result<Option<(ResourceVersion, Option<Content>)>, StoreError> {
        let number = match selector {
            VersionSelector::Number(n) => i64::from(n.get()),
            VersionSelector::Etag(etag) => {
                let found = self
                    .history(key)
                    .await?
                    .into_iter()
                    .find(|v| &v.etag == etag);
                match found {
                    Some(v) => i64::from(v.version.get()),
                    None => return Ok(None),
                }
            }
        };
        let row = sqlx::query(
            "SELECT number, digest, size, created_at, mime_type, is_text, content
             FROM resource_versions WHERE server = $1 AND uri = $2 AND number = $3",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .bind(number)
        .fetch_optional(&self.pool)
        .await
        .map_err(failed)?;
        row.map(|r| Ok((version_of(&r)?, content_of(&r)?)))
            .transpose()
    }

    async fn history(&self, key: &ResourceKey) -> Result<Vec<ResourceVersion>, StoreError> {
        let rows = sqlx::query(
            "SELECT number, digest, size, created_at FROM resource_versions
             WHERE server = $1 AND uri = $2 ORDER BY number",
        )
        .bind(key.server.as_str())
        .bind(&key.upstream_uri)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        rows.iter().map(version_of).collect()
    }

    async fn summaries(
        &self,
        server: &ServerName,
        uris: &[String],
    ) -> Result<Vec<VersionSummary>, StoreError> {
        if uris.is_empty() {
            return Ok(Vec::new());
        }
        // Each asked URI's versions alone, whatever else the server has versions of.
        let rows = sqlx::query(
            "SELECT asked.uri, latest.number AS latest, earliest.seen AS first_seen
             FROM UNNEST($2::text[]) AS asked(uri)
             CROSS JOIN LATERAL (SELECT number FROM resource_versions
                                  WHERE server = $1 AND uri = asked.uri
                                  ORDER BY seen_seq DESC LIMIT 1) AS latest
             CROSS JOIN LATERAL (SELECT MIN(created_at) AS seen FROM resource_versions
                                  WHERE server = $1 AND uri = asked.uri) AS earliest",
        )
        .bind(server.as_str())
        .bind(uris)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        rows.iter()
            .map(|row| {
                Ok(VersionSummary {
                    upstream_uri: row.try_get("uri").map_err(failed)?,
                    latest: number_of(row.try_get("latest").map_err(failed)?)?,
                    first_seen: from_micros(row.try_get("first_seen").map_err(failed)?),
                })
            })
            .collect()
    }
}
