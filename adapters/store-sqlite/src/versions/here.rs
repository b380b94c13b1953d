//! A version recorded on this process's direct connection (`direct.rs`), on the caller's
//! thread: the statements of the pooled path, in one `IMMEDIATE` transaction, without a
//! hand-off to a connection's thread for each of them. Under the write turn, like every write.

use quarry_domain::{Content, Digest, Retention, Timestamp};
use quarry_ports::{Recorded, ResourceKey, StoreError};
use rusqlite::params;

use super::{
    DROP_CONTENT, INSERT, KEPT, LOOKUP, SEEN_AGAIN, dropped, new_version, retention_applies,
    version_from,
};
use crate::{direct::Direct, failed, micros};

/// The version with the content's digest, as stored: number, digest, size, first sighting.
type Stored = (i64, Vec<u8>, i64, i64);

/// What the transaction did: the version seen again, or the number of the new one.
enum Outcome {
    SeenAgain(Stored),
    New(i64),
}

/// Records `content` as [`super::SqliteStore::record_in`] does, on `direct`; with whether a
/// checkpoint is due. `Ok(Err(_))` when the transaction failed (another process holds the
/// file's write lock, say) and nothing was written: the caller records it through the pool.
pub(super) fn record(
    direct: &mut Direct,
    key: &ResourceKey,
    digest: Digest,
    content: &Content,
    now: Timestamp,
    retention: Retention,
) -> Result<Result<(Recorded, bool), rusqlite::Error>, StoreError> {
    let (server, uri) = (key.server.as_str(), key.upstream_uri.as_str());
    let size = i64::try_from(content.len()).map_err(failed)?;
    let done = direct.transaction(|tx| {
        let (seq, newest, seen): (i64, i64, Option<Stored>) = tx
            .prepare_cached(LOOKUP)?
            .query_row(params![server, uri, &digest.bytes()[..]], |r| {
                let seen = match r.get::<_, Option<i64>>(2)? {
                    Some(number) => Some((number, r.get(3)?, r.get(4)?, r.get(5)?)),
                    None => None,
                };
                Ok((r.get(0)?, r.get(1)?, seen))
            })?;
        let outcome = if let Some(seen) = seen {
            tx.prepare_cached(SEEN_AGAIN)?.execute(params![
                seq,
                content.bytes(),
                server,
                uri,
                seen.0
            ])?;
            Outcome::SeenAgain(seen)
        } else {
            tx.prepare_cached(INSERT)?.execute(params![
                server,
                uri,
                newest + 1,
                &digest.bytes()[..],
                size,
                content.mime_type.as_deref(),
                content.is_text(),
                content.bytes(),
                micros(now),
                seq
            ])?;
            Outcome::New(newest + 1)
        };
        if retention_applies(newest, matches!(outcome, Outcome::New(_))) {
            let kept = tx
                .prepare_cached(KEPT)?
                .query_map(params![server, uri], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(i64, i64)>>>()?;
            for number in dropped(&kept, retention) {
                tx.prepare_cached(DROP_CONTENT)?
                    .execute(params![server, uri, number])?;
            }
        }
        Ok(outcome)
    });
    let (outcome, checkpoint_due) = match done {
        Ok(done) => done,
        Err(e) => return Ok(Err(e)),
    };
    let recorded = match outcome {
        Outcome::SeenAgain((number, stored, size, created)) => Recorded {
            version: version_from(number, stored, size, created)?.0,
            is_new: false,
        },
        Outcome::New(number) => Recorded {
            version: new_version(number, digest, content, now)?,
            is_new: true,
        },
    };
    Ok(Ok((recorded, checkpoint_due)))
}
