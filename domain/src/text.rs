//! Making untrusted upstream labels safe to show.

/// The most characters kept from an upstream label (name, title, description); with the ellipsis
/// that marks a cut, a label is at most 256 characters, the spec's bound on names.
pub(crate) const MAX_LABEL_CHARS: usize = 255;

/// Strips control, zero-width and bidirectional-override characters from an upstream label and
/// bounds its length, so a hostile server cannot forge lines in a listing or a log, or hide text.
pub fn sanitize_label(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_LABEL_CHARS * 4));
    let mut count = 0;
    for c in text.chars() {
        if count == MAX_LABEL_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            if c == '\n' || c == '\t' || c == '\r' {
                out.push(' ');
                count += 1;
            }
            continue;
        }
        if is_invisible_format(c) {
            continue;
        }
        out.push(c);
        count += 1;
    }
    out
}

fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}' // bidi isolates
        | '\u{FEFF}'              // zero-width no-break space
        | '\u{00AD}'              // soft hyphen
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bidi_and_zero_width_characters_are_removed() {
        assert_eq!(sanitize_label("a\u{1b}[31mb"), "a[31mb");
        assert_eq!(sanitize_label("line1\nline2"), "line1 line2");
        assert_eq!(sanitize_label("ab\u{202E}cd\u{200B}e"), "abcde");
    }

    #[test]
    fn labels_are_bounded() {
        let long = "x".repeat(10_000);
        assert_eq!(sanitize_label(&long).chars().count(), MAX_LABEL_CHARS + 1);
    }
}
