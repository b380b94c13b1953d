//! `quarry audit verify`: walks the audit trail from its first record, recomputing each
//! record's hash and its link to the one before, and checks that the chain ends where the
//! store's head says. Names the first record that breaks it (edited, inserted, moved, or
//! records missing), as E006 (integrity).
//!
//! `quarry audit export`: the records a filter selects, streamed as JSON lines or CSV.

use std::io::Write;

use clap::{Args, Subcommand};
use quarry_domain::{Error, ErrorCode, GENESIS_HASH, verify_chain};

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
}

mod export;

/// Records read per page.
const PAGE: usize = 1_000;
/// Progress on stderr every this many records.
const PROGRESS_EVERY: u64 = 100_000;

fn broken(seq: u64, what: &str) -> Failure {
    Error::new(
        ErrorCode::E006,
        format!("the audit trail is broken at record {seq}: {what}"),
    )
    .into()
}

/// Runs one `quarry audit` command.
pub(super) async fn run(settings: &Settings, args: AuditArgs) -> Result<(), Failure> {
    let log = compose::audit_log(settings).await?;
    let json = match args.action {
        AuditAction::Export(export) => return export::run(log.as_ref(), export).await,
        AuditAction::Verify { json } => json,
    };
    let hasher = compose::hasher();
    let unreadable = |e: quarry_ports::StoreError| match e {
        quarry_ports::StoreError::Corrupt(why) => Failure::from(Error::new(
            ErrorCode::E006,
            format!("the audit trail is broken: {why}"),
        )),
        other => Failure::from(Error::new(ErrorCode::E012, other.to_string())),
    };
    let mut at = (0, GENESIS_HASH.to_owned());
    loop {
        let page = log.records(at.0, PAGE).await.map_err(unreadable)?;
        if page.is_empty() {
            break;
        }
        let before = at.0;
        at = verify_chain(&page, at, |b| hasher.sha256(b)).map_err(|b| broken(b.seq, &b.what))?;
        if at.0 / PROGRESS_EVERY > before / PROGRESS_EVERY {
            eprintln!("quarry: {} records verified", at.0);
        }
    }
    match log.head().await.map_err(unreadable)? {
        Some((seq, hash)) if seq == at.0 && hash == at.1 => {}
        None if at.0 == 0 => {}
        Some((seq, _)) if seq > at.0 => {
            let what = if seq == at.0 + 1 {
                format!("record {seq} is missing at the end")
            } else {
                format!("records {} to {seq} are missing at the end", at.0 + 1)
            };
            return Err(broken(at.0 + 1, &what));
        }
        _ => {
            return Err(broken(
                at.0,
                "the chain's head does not match its last record",
            ));
        }
    }
    let mut out = std::io::stdout().lock();
    if json {
        render::json(
            &mut out,
            &serde_json::json!({"intact": true, "records": at.0, "head": at.1}),
        )?;
    } else {
        writeln!(out, "audit trail intact: {} records", at.0)?;
    }
    Ok(())
}
