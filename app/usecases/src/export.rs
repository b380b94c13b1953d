//! Exporting the audit trail: the records a filter selects, a page at a time, each call reading
//! a bounded number of records so that a filter matching little cannot make one call read the
//! whole trail.

use quarry_domain::{AuditFilter, Error, ErrorCode};
use quarry_ports::{AuditLog, AuditPage};

use crate::ResourceService;

/// Records one call reads at most.
const SCAN: usize = 10_000;
/// Records read from the store at a time.
const PAGE: usize = 1_000;
/// Records one page returns at most.
pub const MAX_EXPORT_PAGE: usize = 1_000;

/// The records of `log` after `after` that `filter` selects, at most `limit` (and
/// [`MAX_EXPORT_PAGE`]), reading at most 10,000 records.
///
/// # Errors
/// E012 when the store cannot be read.
pub async fn select_records(
    log: &dyn AuditLog,
    filter: &AuditFilter,
    after: u64,
    limit: usize,
) -> Result<AuditPage, Error> {
    let limit = limit.clamp(1, MAX_EXPORT_PAGE);
    let (mut at, mut scanned, mut records) = (after, 0, Vec::new());
    while scanned < SCAN {
        let page = log
            .records(at, PAGE.min(SCAN - scanned))
            .await
            .map_err(|e| Error::new(ErrorCode::E012, e.to_string()))?;
        if page.is_empty() {
            return Ok(AuditPage {
                records,
                next_after: None,
            });
        }
        for r in page {
            at = r.seq;
            scanned += 1;
            if filter.matches(&r.entry) {
                records.push(r);
                if records.len() == limit {
                    return Ok(AuditPage {
                        records,
                        next_after: Some(at),
                    });
                }
            }
        }
    }
    Ok(AuditPage {
        records,
        next_after: Some(at),
    })
}

impl ResourceService {
    /// The export use case over the service's trail.
    pub(crate) async fn export(
        &self,
        filter: &AuditFilter,
        after: u64,
        limit: usize,
    ) -> Result<AuditPage, Error> {
        let Some(log) = &self.audit else {
            return Err(Error::new(
                ErrorCode::E011,
                "this gateway keeps no audit trail (logging.audit_enabled = false)",
            ));
        };
        select_records(log.as_ref(), filter, after, limit).await
    }

    /// The audit trail requests are recorded in, if any.
    pub fn audit_log(&self) -> Option<std::sync::Arc<dyn AuditLog>> {
        self.audit.clone()
    }
}
