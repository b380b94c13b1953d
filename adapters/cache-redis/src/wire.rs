//! How entries are written in Redis: a content entry is its metadata (JSON) after a 4-byte
//! length, then the content's bytes as they are; a listing is JSON. Whatever does not decode is
//! a miss (logged), never an error or a wrong answer; the caller checks content against its
//! digest as well.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use quarry_domain::{
    Body, CacheScope, Content, Digest, Principal, ResourceType, ResourceVersion, Timestamp,
    VersionNumber,
};
use quarry_ports::{CachedContent, CachedListing, ListedEntry, UpstreamResource};
use serde::{Deserialize, Serialize};

fn micros(t: Timestamp) -> i64 {
    t.timestamp_micros()
}

fn at(us: i64) -> Option<Timestamp> {
    Utc.timestamp_micros(us).single()
}

#[derive(Serialize, Deserialize)]
struct Meta {
    mime: Option<String>,
    text: bool,
    digest: String,
    version: Option<Version>,
    partition: Option<String>,
    cached_at: i64,
    expires_at: i64,
}

#[derive(Serialize, Deserialize)]
struct Version {
    number: u32,
    etag: String,
    created_at: i64,
    size: u64,
    checksum: String,
}

/// The bytes stored for `entry`.
pub(crate) fn encode_content(entry: &CachedContent) -> Vec<u8> {
    let meta = Meta {
        mime: entry.content.mime_type.clone(),
        text: entry.content.is_text(),
        digest: entry.digest.hex(),
        version: entry.version.as_ref().map(|v| Version {
            number: v.version.get(),
            etag: v.etag.clone(),
            created_at: micros(v.created_at),
            size: v.size,
            checksum: v.checksum.clone(),
        }),
        partition: entry.partition.as_ref().map(|p| p.as_str().to_owned()),
        cached_at: micros(entry.cached_at),
        expires_at: micros(entry.expires_at),
    };
    // Serialising plain strings and numbers cannot fail.
    let meta = serde_json::to_vec(&meta).unwrap_or_default();
    let body = entry.content.bytes();
    let mut out = Vec::with_capacity(4 + meta.len() + body.len());
    out.extend_from_slice(&u32::try_from(meta.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(body);
    out
}

/// The entry `bytes` hold, or why not.
pub(crate) fn decode_content(bytes: &[u8]) -> Result<CachedContent, String> {
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or("shorter than its header")?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len {
        return Err("shorter than its metadata".into());
    }
    let (meta, body) = rest.split_at(len);
    let meta: Meta = serde_json::from_slice(meta).map_err(|e| e.to_string())?;
    let body = if meta.text {
        Body::Text(String::from_utf8(body.to_vec()).map_err(|_| "text that is not UTF-8")?)
    } else {
        Body::Blob(body.to_vec())
    };
    let version = match meta.version {
        Some(v) => Some(ResourceVersion {
            version: VersionNumber::new(v.number).map_err(|e| e.message().to_owned())?,
            etag: v.etag,
            created_at: at(v.created_at).ok_or("a bad time")?,
            size: v.size,
            checksum: v.checksum,
        }),
        None => None,
    };
    Ok(CachedContent {
        content: Arc::new(Content {
            mime_type: meta.mime,
            body,
        }),
        digest: Digest::from_hex(&meta.digest).map_err(|e| e.message().to_owned())?,
        version,
        partition: meta.partition.map(Principal::new),
        cached_at: at(meta.cached_at).ok_or("a bad time")?,
        expires_at: at(meta.expires_at).ok_or("a bad time")?,
    })
}

#[derive(Serialize, Deserialize)]
struct Listing {
    entries: Vec<Entry>,
    truncated: bool,
    fetched_at: i64,
    expires_at: i64,
    private: bool,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    uri: String,
    name: String,
    title: Option<String>,
    description: Option<String>,
    mime: Option<String>,
    size: Option<u64>,
    modified: Option<i64>,
    gateway_uri: String,
    kind: ResourceType,
}

/// The JSON stored for `listing`.
pub(crate) fn encode_listing(listing: &CachedListing) -> Vec<u8> {
    let stored = Listing {
        entries: listing
            .resources
            .iter()
            .map(|e| Entry {
                uri: e.resource.uri.clone(),
                name: e.resource.name.clone(),
                title: e.resource.title.clone(),
                description: e.resource.description.clone(),
                mime: e.resource.mime_type.clone(),
                size: e.resource.size,
                modified: e.resource.last_modified.map(micros),
                gateway_uri: e.gateway_uri.clone(),
                kind: e.resource_type,
            })
            .collect(),
        truncated: listing.truncated,
        fetched_at: micros(listing.fetched_at),
        expires_at: micros(listing.expires_at),
        private: listing.scope == CacheScope::Private,
    };
    serde_json::to_vec(&stored).unwrap_or_default()
}

/// The listing `bytes` hold, or why not.
pub(crate) fn decode_listing(bytes: &[u8]) -> Result<CachedListing, String> {
    let stored: Listing = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let resources = stored
        .entries
        .into_iter()
        .map(|e| {
            Ok(ListedEntry {
                resource: UpstreamResource {
                    uri: e.uri,
                    name: e.name,
                    title: e.title,
                    description: e.description,
                    mime_type: e.mime,
                    size: e.size,
                    last_modified: match e.modified {
                        Some(us) => Some(at(us).ok_or("a bad time")?),
                        None => None,
                    },
                },
                gateway_uri: e.gateway_uri,
                resource_type: e.kind,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(CachedListing {
        resources: Arc::new(resources),
        truncated: stored.truncated,
        fetched_at: at(stored.fetched_at).ok_or("a bad time")?,
        expires_at: at(stored.expires_at).ok_or("a bad time")?,
        scope: if stored.private {
            CacheScope::Private
        } else {
            CacheScope::Public
        },
    })
}
