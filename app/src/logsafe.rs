//! The log's last line of defence against forged lines (AU-5): every event is written through
//! [`Escaped`], which turns line breaks, other control characters and the invisible characters
//! that reorder or hide text (bidi controls, zero-width marks) inside an event into visible
//! escapes (`\n`, `\r`, `\u001b`, `\u202e`: valid in JSON strings too), keeping only the newline
//! that ends it. Whatever text a request carries into a message, an event stays one line that
//! reads as it is.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;

/// A `MakeWriter` whose writers escape what could forge or hide log text.
#[derive(Debug)]
pub struct Escaped<M>(pub M);

/// One event's writer.
#[derive(Debug)]
pub struct EscapedWriter<W>(W);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Escaped<M> {
    type Writer = EscapedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapedWriter(self.0.make_writer())
    }
}

/// Characters that change how text around them is shown without being seen.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `event` with everything but its final newline made visible.
pub fn escape(event: &str) -> String {
    let (body, end) = match event.strip_suffix('\n') {
        Some(body) => (body, "\n"),
        None => (event, ""),
    };
    let mut out = String::with_capacity(event.len());
    for c in body.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push('\t'),
            c if c.is_control() || invisible(c) => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push_str(end);
    out
}

impl<W: Write> Write for EscapedWriter<W> {
    /// The formatter hands over each event whole, in one `write_all`.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(escape(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn an_event_stays_one_visible_line() {
        let event = "2026-12-01T00:00:00Z  INFO tool call failed: server 'x\n2026-12-01T00:00:01Z  INFO FORGED\r\u{1b}[2J\u{202e}\u{0}' tab\there\n";
        let escaped = escape(event);
        assert_eq!(escaped.matches('\n').count(), 1);
        assert!(escaped.ends_with("tab\there\n"));
        assert!(
            escaped.contains("'x\\n2026-12-01T00:00:01Z  INFO FORGED\\r\\u001b[2J\\u202e\\u0000'"),
            "{escaped}"
        );
        // JSON events stay JSON: the escapes are JSON's own.
        let json = "{\"message\":\"a\u{202e}b\"}\n";
        let v: serde_json::Value = serde_json::from_str(&escape(json)).unwrap();
        assert_eq!(v["message"], "a\u{202e}b");
    }
}
