//! Cutting the requested range (and the inline limit) out of a content, and building the read
//! result around it.

use base64::Engine as _;
use quarry_domain::{
    Body, CacheHint, Content, Error, Origin, ReadResourceResult, ResourceVersion, Timestamp,
    UpstreamFailure,
};
use quarry_ports::ReadRequest;

/// How a read was answered, for the result's metadata.
#[derive(Debug, Default)]
pub(crate) struct Provenance {
    pub(crate) cached_at: Option<Timestamp>,
    pub(crate) stale: Option<Error>,
    pub(crate) version: Option<ResourceVersion>,
    /// How long the answer stays fresh, and for whom.
    pub(crate) cache: CacheHint,
}

/// The result of `request` over `content`.
///
/// # Errors
/// E007 when the range starts at or past the end.
pub(crate) fn excerpt(
    request: &ReadRequest,
    content: &Content,
    how: Provenance,
) -> Result<ReadResourceResult, Error> {
    let asked = request.range.resolve(content.len())?;
    let mut slice = asked;
    let mut note = None;
    if let Some(cap) = request.inline_limit.filter(|cap| asked.len() > *cap) {
        let mut end = asked.start() + cap;
        // Text is cut on a character boundary so the part returned stays text.
        if let Body::Text(text) = &content.body {
            while end > asked.start() && !text.is_char_boundary(end as usize) {
                end -= 1;
            }
        }
        slice = asked.ending_at(end);
        note = Some(format!(
            "Only bytes {}-{} of the {} asked for are included (the inline limit is {} bytes). Call read_mcp_resource again with offset={} to continue.",
            slice.start(),
            slice.end() - 1,
            asked.len(),
            cap,
            slice.end()
        ));
    }
    let bytes = slice.apply(content.bytes());
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let (text, blob) = match &content.body {
        // A range of text that splits a UTF-8 character comes back as its exact bytes, never as
        // repaired or invalid text. The text is valid UTF-8 already, so only the range's two
        // ends are checked, not every byte again.
        Body::Text(whole) => match whole.get(slice.start() as usize..slice.end() as usize) {
            Some(t) => (Some(t.to_owned()), None),
            None => (None, Some(encode(bytes))),
        },
        Body::Blob(_) => (None, Some(encode(bytes))),
    };
    Ok(ReadResourceResult {
        success: true,
        uri: request.uri.clone(),
        content: text,
        bytes_content: blob,
        mime_type: content.mime_type.clone(),
        size: slice.total(),
        content_range: slice.content_range(),
        version: how.version,
        cached: how.cached_at.is_some(),
        cached_at: how.cached_at,
        stale: how.stale.is_some(),
        upstream_error: how.stale.as_ref().map(UpstreamFailure::from),
        next_offset: (slice.end() < asked.end()).then_some(slice.end()),
        note,
        origin: Origin::of(&request.uri),
        cache: how.cache,
    })
}
