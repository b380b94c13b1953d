//! Resource content as it came from an upstream: text or bytes, with its MIME type.

/// The content of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// The MIME type the upstream gave, if any.
    pub mime_type: Option<String>,
    /// The bytes, and whether they are text.
    pub body: Body,
}

/// Text (valid UTF-8 by construction) or raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Text content (`text` in MCP).
    Text(String),
    /// Binary content (`blob` in MCP, already base64-decoded).
    Blob(Vec<u8>),
}

impl Content {
    /// The content's bytes: UTF-8 for text.
    pub fn bytes(&self) -> &[u8] {
        match &self.body {
            Body::Text(t) => t.as_bytes(),
            Body::Blob(b) => b,
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// True for empty content.
    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// True when the content is text.
    pub fn is_text(&self) -> bool {
        matches!(self.body, Body::Text(_))
    }
}
