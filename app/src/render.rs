//! Human output for the CLI: plain tables on stdout, notes on stderr.

use std::io::{self, Write};

use base64::Engine as _;
use quarry_domain::{
    ConnectionStatus, ListResourcesResult, ReadResourceResult, ResourceVersion, ServerStatus,
};
use serde::Serialize;

pub(crate) fn json(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

fn size(bytes: Option<u64>) -> String {
    match bytes {
        None => "-".into(),
        Some(b) if b < 1024 => format!("{b} B"),
        Some(b) if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        Some(b) => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: Vec<&str>| -> io::Result<()> {
        let last = cells.len() - 1;
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                write!(out, "{cell}")?;
            } else {
                write!(out, "{cell:<w$}  ")?;
            }
        }
        writeln!(out)
    };
    line(out, header.to_vec())?;
    for row in rows {
        line(out, row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

pub(crate) fn resources(
    out: &mut impl Write,
    result: &ListResourcesResult,
    offset: u64,
) -> io::Result<()> {
    if result.resources.is_empty() {
        writeln!(out, "no resources (total {})", result.total_count)?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = result
        .resources
        .iter()
        .map(|r| {
            vec![
                r.uri.to_string(),
                r.resource_type.to_string(),
                size(r.size),
                r.modified_at
                    .map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M").to_string()),
                r.name.clone(),
            ]
        })
        .collect();
    table(out, &["URI", "TYPE", "SIZE", "MODIFIED", "NAME"], &rows)?;
    writeln!(
        out,
        "\n{}-{} of {} resources from {} server(s){}",
        offset + 1,
        offset + result.resources.len() as u64,
        result.total_count,
        result.servers.len(),
        if result.partial {
            " (partial: see warnings)"
        } else {
            ""
        }
    )
}

pub(crate) fn server_warnings(err: &mut impl Write, servers: &[ServerStatus]) -> io::Result<()> {
    for s in servers
        .iter()
        .filter(|s| s.status == ConnectionStatus::Error)
    {
        writeln!(
            err,
            "warning: server '{}' could not be listed: {}",
            s.server_name,
            s.last_error.as_deref().unwrap_or("unknown error")
        )?;
    }
    for s in servers.iter().filter(|s| s.skipped_entries > 0) {
        writeln!(
            err,
            "warning: server '{}' listed {} malformed entr{} (left out): {}",
            s.server_name,
            s.skipped_entries,
            if s.skipped_entries == 1 { "y" } else { "ies" },
            s.skipped_reason.as_deref().unwrap_or("no reason given")
        )?;
    }
    Ok(())
}

pub(crate) fn servers(out: &mut impl Write, servers: &[ServerStatus]) -> io::Result<()> {
    if servers.is_empty() {
        return writeln!(
            out,
            "no servers configured (add [servers.NAME] to quarry.toml)"
        );
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            vec![
                s.server_name.to_string(),
                s.server_id.to_string(),
                s.endpoint.clone(),
                s.status.as_str().to_owned(),
                if s.authenticated { "yes" } else { "no" }.to_owned(),
                s.resource_count.to_string(),
                s.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "NAME",
            "ID",
            "ENDPOINT",
            "STATUS",
            "AUTHENTICATED",
            "RESOURCES",
            "LAST ERROR",
        ],
        &rows,
    )
}

/// Writes the content itself: text as text, bytes as bytes.
pub(crate) fn content(out: &mut impl Write, result: &ReadResourceResult) -> io::Result<()> {
    if let Some(text) = &result.content {
        out.write_all(text.as_bytes())
    } else if let Some(b64) = &result.bytes_content {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| io::Error::other(e.to_string()))?;
        out.write_all(&bytes)
    } else {
        Ok(())
    }
}

pub(crate) fn read_summary(err: &mut impl Write, result: &ReadResourceResult) -> io::Result<()> {
    let cache = match (result.cached_at, &result.upstream_error) {
        (Some(at), Some(e)) => format!(
            "STALE: upstream unavailable ({}: {}), cached content from {}",
            e.error_code,
            e.error_message,
            at.to_rfc3339()
        ),
        (Some(at), None) => format!("served from cache (fetched {})", at.to_rfc3339()),
        (None, _) => "fetched from upstream".into(),
    };
    let version = result.version.as_ref().map_or(String::new(), |v| {
        format!(" · {} {}", v.version, v.checksum)
    });
    writeln!(
        err,
        "{} · {} · {}{} · {}",
        result.mime_type.as_deref().unwrap_or("unknown type"),
        size(Some(result.size)),
        result.content_range.as_str(),
        version,
        cache
    )
}

pub(crate) fn versions(out: &mut impl Write, versions: &[ResourceVersion]) -> io::Result<()> {
    if versions.is_empty() {
        return writeln!(
            out,
            "no versions recorded yet (a version is recorded when the resource is read)"
        );
    }
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            vec![
                v.version.to_string(),
                v.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                size(Some(v.size)),
                v.etag.clone(),
                v.checksum.clone(),
            ]
        })
        .collect();
    table(
        out,
        &["VERSION", "FIRST SEEN", "SIZE", "ETAG", "CHECKSUM"],
        &rows,
    )
}
