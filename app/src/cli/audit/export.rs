//! `quarry audit export`: the records a filter selects, oldest first, as JSON lines (each the
//! whole record, hashes included, so a verifier can check what it receives) or CSV (one column
//! per field; a cell that a spreadsheet would run as a formula is quoted as text).

use std::io::Write;

use clap::{Args, ValueEnum};
use quarry_domain::{AuditFilter, AuditRecord};
use quarry_ports::AuditLog;
use quarry_usecases::{MAX_EXPORT_PAGE, select_records};

use crate::failure::Failure;

/// `quarry audit export` options.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Only records at or after this time (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long)]
    since: Option<String>,
    /// Only records before this time (RFC 3339).
    #[arg(long)]
    until: Option<String>,
    /// Only this agent's records.
    #[arg(long)]
    agent: Option<String>,
    /// Only records about this server.
    #[arg(long)]
    server: Option<String>,
    /// Only allowed or only denied requests.
    #[arg(long, value_parser = ["allow", "deny"])]
    decision: Option<String>,
    /// The output format.
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
}

/// How records are written.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// One JSON record per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// Progress on stderr every this many records read.
const PROGRESS_EVERY: u64 = 100_000;

const COLUMNS: [&str; 23] = [
    "seq",
    "time",
    "correlation_id",
    "agent",
    "transport",
    "action",
    "server",
    "resource_uri",
    "byte_range",
    "decision",
    "explanation",
    "cache_status",
    "result",
    "error_code",
    "latency_us",
    "bytes_returned",
    "input_digest",
    "previous_hash",
    "record_hash",
    "mcp_request_id",
    "host_request_id",
    "client_address",
    "retry_count",
];

/// A CSV cell: quoted when it holds a comma, quote or line break; text that a spreadsheet would
/// evaluate (starting with `=`, `+`, `-`, `@`, tab or carriage return) gets a leading `'`.
fn cell(value: &str) -> String {
    let guarded = if value.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{value}")
    } else {
        value.to_owned()
    };
    if guarded.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", guarded.replace('"', "\"\""))
    } else {
        guarded
    }
}

fn csv_row(r: &AuditRecord) -> String {
    let e = &r.entry;
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    let fields = [
        r.seq.to_string(),
        e.time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        e.correlation_id.clone(),
        e.agent.clone(),
        e.transport.clone(),
        e.action.clone(),
        opt(&e.server),
        opt(&e.resource_uri),
        opt(&e.byte_range),
        e.decision.clone(),
        opt(&e.explanation),
        opt(&e.cache_status),
        e.result.clone(),
        opt(&e.error_code),
        e.latency_us.to_string(),
        e.bytes_returned.map(|b| b.to_string()).unwrap_or_default(),
        e.input_digest.clone(),
        r.previous_hash.clone(),
        r.record_hash.clone(),
        opt(&e.mcp_request_id),
        opt(&e.host_request_id),
        opt(&e.client_address),
        e.retry_count.to_string(),
    ];
    fields.iter().map(|f| cell(f)).collect::<Vec<_>>().join(",")
}

/// Streams the selected records of `log` to stdout.
pub(super) async fn run(log: &dyn AuditLog, args: ExportArgs) -> Result<(), Failure> {
    let time = |flag: &str, v: Option<&str>| {
        v.map(|v| AuditFilter::time(&format!("--{flag}"), v))
            .transpose()
    };
    let filter = AuditFilter {
        since: time("since", args.since.as_deref())?,
        until: time("until", args.until.as_deref())?,
        agent: args.agent,
        server: args.server,
        decision: args.decision,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if matches!(args.format, Format::Csv) {
        writeln!(out, "{}", COLUMNS.join(","))?;
    }
    let (mut after, mut written) = (0u64, 0u64);
    loop {
        let page = select_records(log, &filter, after, MAX_EXPORT_PAGE).await?;
        for r in &page.records {
            match args.format {
                Format::Jsonl => {
                    // Bidi controls and zero-width marks as JSON escapes: the same record to a
                    // parser, and no reordered text in a terminal.
                    let line = serde_json::to_string(r).map_err(std::io::Error::from)?;
                    writeln!(out, "{}", crate::logsafe::escape(&line))?;
                }
                Format::Csv => writeln!(out, "{}", csv_row(r))?,
            }
            written += 1;
        }
        let Some(next) = page.next_after else { break };
        if next / PROGRESS_EVERY > after / PROGRESS_EVERY {
            eprintln!("quarry: {next} records read, {written} exported");
        }
        after = next;
    }
    out.flush()?;
    eprintln!("quarry: {written} records exported");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn csv_cells_are_quoted_and_never_run_as_formulas() {
        assert_eq!(cell("plain"), "plain");
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"hi\"\nnext"), "\"say \"\"hi\"\"\nnext\"");
        assert_eq!(cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(cell("-1+2"), "'-1+2");
        assert_eq!(cell("@SUM(A1)"), "'@SUM(A1)");
    }
}
