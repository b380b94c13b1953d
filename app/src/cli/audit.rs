//! `quarry audit verify`: walks the audit trail from its first record (or from retention's
//! checkpoint, its signature checked), recomputing each record's hash and its link to the one
//! before, and checks that the chain ends where the store's head says. Names the first record that breaks it (edited, inserted, moved, or
//! records missing), as E006 (integrity).
//!
//! `quarry audit export`: the records a filter selects, streamed as JSON lines or CSV.
//!
//! `quarry audit prune`: retention now, with the checkpoint it leaves.

use std::io::Write;

use clap::{Args, Subcommand};

use crate::{compose, config::Settings, failure::Failure, render};

/// `quarry audit` options.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub action: AuditAction,
}

/// `quarry audit verify | export`.
#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Check that no record of the audit trail was edited, inserted, moved or deleted.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the records a filter selects to stdout, oldest first (progress on stderr).
    Export(export::ExportArgs),
    /// Remove records older than the retention (logging.audit_retention_days, or --keep-days)
    /// behind a signed checkpoint, so the rest still verifies (`quarry serve` does this hourly).
    Prune(PruneArgs),
}

mod export;

/// Progress on stderr every this many records.
const PROGRESS_EVERY: u64 = 100_000;

/// `quarry audit prune` options.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Keep records younger than this many days (default: logging.audit_retention_days; 0
    /// removes every record older than now).
    #[arg(long, value_name = "DAYS")]
    pub keep_days: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs one `quarry audit` command.
pub(super) async fn run(settings: &Settings, args: AuditArgs) -> Result<(), Failure> {
    let json = match args.action {
        AuditAction::Export(export) => {
            let log = compose::audit_log(settings).await?;
            return export::run(log.as_ref(), export).await;
        }
        AuditAction::Prune(prune) => return self::prune(settings, prune).await,
        AuditAction::Verify { json } => json,
    };
    let trail = compose::audit_trail(settings, false).await?;
    let mut reported = 0;
    let verified = trail
        .verify(|at| {
            if at / PROGRESS_EVERY > reported / PROGRESS_EVERY {
                eprintln!("quarry: {at} records verified");
            }
            reported = at;
        })
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        render::json(
            &mut out,
            &serde_json::json!({
                "intact": true,
                "records": verified.records,
                "head": verified.head.1,
                "last_record": verified.head.0,
                "checkpoint": verified.checkpoint,
            }),
        )?;
    } else {
        write!(out, "audit trail intact: {} records", verified.records)?;
        if let Some(c) = &verified.checkpoint {
            write!(
                out,
                " (records 1 to {} removed by retention on {}; checkpoint signed by {})",
                c.seq, c.pruned_at, c.key_id
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

async fn prune(settings: &Settings, args: PruneArgs) -> Result<(), Failure> {
    let days = args.keep_days.unwrap_or(settings.audit_retention_days);
    let trail = compose::audit_trail(settings, true).await?;
    let pruned = trail.prune(chrono::Duration::days(i64::from(days))).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        render::json(
            &mut out,
            &serde_json::json!({"keep_days": days, "removed": pruned.as_ref().map_or(0, |p| p.removed), "checkpoint": pruned.map(|p| p.checkpoint)}),
        )?;
    } else {
        match pruned {
            Some(p) => writeln!(
                out,
                "removed {} records older than {days} days; the trail now starts after record {} (checkpoint signed by {})",
                p.removed, p.checkpoint.seq, p.checkpoint.key_id
            )?,
            None => writeln!(out, "no record is older than {days} days")?,
        }
    }
    Ok(())
}
