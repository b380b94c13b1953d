//! The composition root's audit side: the trail in the store, its checkpoint signer,
//! and the retention `quarry serve` applies.

use std::sync::Arc;

use quarry_crypto_ring::RingSigner;
use quarry_domain::Error;
use quarry_ports::AuditLog;
use quarry_usecases::AuditTrail;

use super::{Store, hasher};
use crate::{clock::SystemClock, config::Settings};

/// The audit trail, in the store, chained with SHA-256.
///
/// # Errors
/// E012 when the store cannot be opened.
pub async fn audit_log(settings: &Settings) -> Result<Arc<dyn AuditLog>, Error> {
    Ok(Store::open(settings).await?.audit())
}

/// The audit trail with its checkpoint signer (the key file is created on first use only when
/// `create`: a prune signs, a verification only checks).
///
/// # Errors
/// E012 when the store cannot be opened.
pub async fn audit_trail(settings: &Settings, create: bool) -> Result<AuditTrail, Error> {
    let signer = match &settings.audit_key {
        Some(path) => RingSigner::new(path.clone(), create, |path| {
            eprintln!(
                "quarry: created the audit signing key {} (mode 0600); retention's checkpoints are signed with it, so back it up",
                path.display()
            );
        }),
        None => RingSigner::ephemeral(),
    };
    Ok(AuditTrail::new(
        audit_log(settings).await?,
        Arc::new(signer),
        hasher(),
        Arc::new(SystemClock::new()),
    ))
}

/// How often `quarry serve` applies the audit retention.
const RETENTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// Applies `logging.audit_retention_days` now and every hour while serving (with the trail on
/// and a signing key that outlives the process); what it removes is logged.
pub(crate) fn keep_audit_retention(settings: &Settings) {
    // A key to sign checkpoints with that outlives the process: beside the store file, or
    // `logging.audit_key_file` (which PostgreSQL deployments set).
    if !settings.audit_enabled || settings.audit_key.is_none() {
        return;
    }
    let settings = settings.clone();
    tokio::spawn(async move {
        let keep = chrono::Duration::days(i64::from(settings.audit_retention_days));
        let trail = match audit_trail(&settings, true).await {
            Ok(trail) => trail,
            Err(e) => {
                tracing::error!("audit retention cannot run: {e}");
                return;
            }
        };
        loop {
            match trail.prune(keep).await {
                Ok(Some(p)) => tracing::info!(
                    removed = p.removed,
                    through = p.checkpoint.seq,
                    days = settings.audit_retention_days,
                    "audit retention removed old records behind a signed checkpoint"
                ),
                Ok(None) => {}
                Err(e) => tracing::error!("audit retention failed: {e}"),
            }
            tokio::time::sleep(RETENTION_INTERVAL).await;
        }
    });
}
