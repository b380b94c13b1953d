//! Versions recorded on this process's direct connection (`direct.rs`), on the caller's
//! thread: the statements of the pooled path, every sighting of a batch in one `IMMEDIATE`
//! transaction, without a hand-off to a connection's thread for each of them. Under the write
//! turn, like every write.

use quarry_domain::Retention;
use quarry_ports::{Recorded, StoreError};
use rusqlite::params;

use super::{
    DROP_CONTENT, INSERT, KEPT, LOOKUP, SEEN_AGAIN, Sighting, dropped, new_version,
    retention_applies, version_from,
};
use crate::{direct::Direct, micros};

/// The version with the content's digest, as stored: number, digest, size, first sighting.
type Stored = (i64, Vec<u8>, i64, i64);

/// What the transaction did with one sighting: the version seen again, or the number of the
/// new one.
enum Outcome {
    SeenAgain(Stored),
    New(i64),
}

/// Records `sightings`, in order, as [`super::SqliteStore::record_in`] does, on `direct`; with
/// whether a checkpoint is due. `Err(_)` when the transaction failed (another process holds
/// the file's write lock, say) and nothing was written: the caller records them through the
/// pool. Each sighting's answer is its own: one whose stored row cannot be read back fails
/// alone.
pub(super) fn record(
    direct: &mut Direct,
    sightings: &[&Sighting],
    retention: Retention,
) -> Result<(Vec<Result<Recorded, StoreError>>, bool), rusqlite::Error> {
    let (outcomes, checkpoint_due) = direct.transaction(|tx| {
        sightings
            .iter()
            .map(|s| one(tx, s, retention))
            .collect::<rusqlite::Result<Vec<_>>>()
    })?;
    let recorded = sightings
        .iter()
        .zip(outcomes)
        .map(|(s, outcome)| match outcome {
            Outcome::SeenAgain((number, stored, size, created)) => Ok(Recorded {
                version: version_from(number, stored, size, created)?.0,
                is_new: false,
            }),
            Outcome::New(number) => Ok(Recorded {
                version: new_version(number, s.digest, &s.content, s.now)?,
                is_new: true,
            }),
        })
        .collect();
    Ok((recorded, checkpoint_due))
}

/// One sighting's statements, inside the batch's transaction: a later sighting of the same
/// resource sees what an earlier one wrote.
fn one(
    tx: &rusqlite::Transaction<'_>,
    s: &Sighting,
    retention: Retention,
) -> rusqlite::Result<Outcome> {
    let (server, uri) = (s.key.server.as_str(), s.key.upstream_uri.as_str());
    let digest = &s.digest.bytes()[..];
    let (seq, newest, seen): (i64, i64, Option<Stored>) =
        tx.prepare_cached(LOOKUP)?
            .query_row(params![server, uri, digest], |r| {
                let seen = match r.get::<_, Option<i64>>(2)? {
                    Some(number) => Some((number, r.get(3)?, r.get(4)?, r.get(5)?)),
                    None => None,
                };
                Ok((r.get(0)?, r.get(1)?, seen))
            })?;
    let outcome = if let Some(seen) = seen {
        tx.prepare_cached(SEEN_AGAIN)?.execute(params![
            seq,
            s.content.bytes(),
            server,
            uri,
            seen.0
        ])?;
        Outcome::SeenAgain(seen)
    } else {
        let size = i64::try_from(s.content.len())
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        tx.prepare_cached(INSERT)?.execute(params![
            server,
            uri,
            newest + 1,
            digest,
            size,
            s.content.mime_type.as_deref(),
            s.content.is_text(),
            s.content.bytes(),
            micros(s.now),
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
}
