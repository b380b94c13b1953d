//! Making untrusted upstream labels and MIME types safe to show.
//!
//! A hostile server can hide instructions for an agent in characters a person never sees (format
//! characters, the tag block), forge lines in a listing or a log (controls, line and paragraph
//! separators), or make a label as long as it likes. Labels keep what is visible, bounded.

use unicode_general_category::{GeneralCategory, get_general_category};

/// The most characters kept from an upstream label (name, title, description); with the ellipsis
/// that marks a cut, a label is at most 256 characters, the spec's bound on names.
pub(crate) const MAX_LABEL_CHARS: usize = 255;

/// The longest MIME type kept (RFC 6838 bounds type and subtype at 127 characters each).
pub const MAX_MIME_TYPE_LEN: usize = 255;

/// Strips control characters, every Unicode format character (Cf: zero-width, bidirectional
/// controls, invisible operators), the tag block U+E0000–E007F and noncharacters from an
/// upstream label, turns line breaks and line or paragraph separators into spaces, and bounds its
/// length.
pub fn sanitize_label(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_LABEL_CHARS * 4));
    let mut count = 0;
    for c in text.chars() {
        if count == MAX_LABEL_CHARS {
            out.push('…');
            break;
        }
        match classify(c) {
            Keep::Yes => out.push(c),
            Keep::AsSpace => out.push(' '),
            Keep::No => continue,
        }
        count += 1;
    }
    out
}

/// A MIME type as an upstream gave it, if it is one: printable ASCII (parameters and their
/// spaces included), at most [`MAX_MIME_TYPE_LEN`] bytes, with a `/`. Anything else (CR, LF, other
/// controls, non-ASCII, overlong) is dropped rather than repaired: a repaired MIME type would be a
/// guess.
pub fn sanitize_mime_type(mime: &str) -> Option<String> {
    let mime = mime.trim();
    let printable = mime.bytes().all(|b| (0x20..0x7f).contains(&b));
    (printable && !mime.is_empty() && mime.len() <= MAX_MIME_TYPE_LEN && mime.contains('/'))
        .then(|| mime.to_owned())
}

enum Keep {
    Yes,
    AsSpace,
    No,
}

fn classify(c: char) -> Keep {
    if matches!(c, '\n' | '\r' | '\t') {
        return Keep::AsSpace;
    }
    if ('\u{E0000}'..='\u{E007F}').contains(&c) || is_noncharacter(c) {
        return Keep::No;
    }
    match get_general_category(c) {
        GeneralCategory::Control | GeneralCategory::Format | GeneralCategory::Surrogate => Keep::No,
        GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator => Keep::AsSpace,
        _ => Keep::Yes,
    }
}

fn is_noncharacter(c: char) -> bool {
    let n = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&n) || n & 0xFFFE == 0xFFFE
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn control_bidi_and_zero_width_characters_are_removed() {
        assert_eq!(sanitize_label("a\u{1b}[31mb"), "a[31mb");
        assert_eq!(sanitize_label("line1\nline2"), "line1 line2");
        assert_eq!(sanitize_label("ab\u{202E}cd\u{200B}e"), "abcde");
    }

    // traces: RC-2 — the characters used for hidden prompt injection are gone.
    #[test]
    fn rc_2_format_characters_separators_and_tags_are_removed() {
        assert_eq!(sanitize_label("a\u{2028}b\u{2029}c"), "a b c");
        assert_eq!(sanitize_label("x\u{061C}y\u{180E}z\u{FFF9}"), "xyz");
        let tagged: String = "hi"
            .chars()
            .chain(
                "ignore all"
                    .chars()
                    .map(|c| char::from_u32(0xE0000 + u32::from(c)).unwrap()),
            )
            .collect();
        assert_eq!(sanitize_label(&tagged), "hi");
        assert_eq!(
            sanitize_label("caf\u{E9} \u{1F600} 日本"),
            "caf\u{E9} \u{1F600} 日本"
        );
    }

    #[test]
    fn labels_are_bounded() {
        let long = "x".repeat(10_000);
        assert_eq!(sanitize_label(&long).chars().count(), MAX_LABEL_CHARS + 1);
    }

    #[test]
    fn mime_types_are_kept_only_when_they_are_mime_types() {
        assert_eq!(
            sanitize_mime_type("text/plain").as_deref(),
            Some("text/plain")
        );
        assert_eq!(
            sanitize_mime_type(" text/plain; charset=utf-8 ").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        for bad in [
            "text/plain\r\nX-Evil: 1",
            "text",
            "",
            "tëxt/plain",
            &format!("a/{}", "b".repeat(300)),
        ] {
            assert_eq!(sanitize_mime_type(bad), None, "{bad:?}");
        }
    }

    proptest! {
        // traces: RC-2 — whatever comes in, what comes out shows nothing hidden and is bounded.
        #[test]
        fn rc_2_sanitised_labels_hold_no_hidden_characters(text in any::<String>()) {
            let out = sanitize_label(&text);
            prop_assert!(out.chars().count() <= MAX_LABEL_CHARS + 1);
            for c in out.chars() {
                let category = get_general_category(c);
                prop_assert!(!matches!(
                    category,
                    GeneralCategory::Control
                        | GeneralCategory::Format
                        | GeneralCategory::LineSeparator
                        | GeneralCategory::ParagraphSeparator
                ), "{c:?} is {category:?}");
                prop_assert!(!('\u{E0000}'..='\u{E007F}').contains(&c), "{c:?}");
            }
        }

        #[test]
        fn sanitised_mime_types_are_bounded_printable_ascii(text in any::<String>()) {
            if let Some(m) = sanitize_mime_type(&text) {
                prop_assert!(m.len() <= MAX_MIME_TYPE_LEN);
                prop_assert!(m.bytes().all(|b| (0x20..0x7f).contains(&b)));
            }
        }
    }
}
