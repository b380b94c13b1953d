//! Protected resources (the spec's US-004): what an operator declares must not be read without a
//! credential for its server — a whole server, or the upstream URIs matching some patterns.

use crate::Error;

/// The most patterns one server may declare.
pub const MAX_PATTERNS: usize = 64;

/// Which of a server's resources are protected.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protection {
    /// None of them.
    #[default]
    Nothing,
    /// All of them.
    Everything,
    /// Those whose upstream URI matches a pattern: the URI itself, or a prefix ending in `*`.
    Uris(Vec<String>),
}

impl Protection {
    /// Builds the protection a server declares: `whole` for all of it, or `patterns`.
    ///
    /// # Errors
    /// E001 naming `field`: both given, too many patterns, an empty or over-long one, or a `*`
    /// anywhere but at the end.
    pub fn declare(
        whole: bool,
        patterns: Vec<String>,
        field: &dyn Fn(&str) -> String,
    ) -> Result<Self, Error> {
        if whole && !patterns.is_empty() {
            return Err(Error::invalid(format!(
                "{} and {} are both set; protect the whole server or some of its URIs",
                field("protected"),
                field("protected_uris")
            )));
        }
        if whole {
            return Ok(Self::Everything);
        }
        if patterns.is_empty() {
            return Ok(Self::Nothing);
        }
        if patterns.len() > MAX_PATTERNS {
            return Err(Error::invalid(format!(
                "{} may hold at most {MAX_PATTERNS} patterns",
                field("protected_uris")
            )));
        }
        for p in &patterns {
            let body = p.strip_suffix('*').unwrap_or(p);
            if body.is_empty() || p.len() > 2048 || body.contains('*') {
                return Err(Error::invalid(format!(
                    "{}: {:?} must be an upstream URI, or a prefix of one ending in '*'",
                    field("protected_uris"),
                    p.chars().take(128).collect::<String>()
                )));
            }
        }
        Ok(Self::Uris(patterns))
    }

    /// Whether the resource at `upstream_uri` is protected.
    pub fn covers(&self, upstream_uri: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::Everything => true,
            Self::Uris(patterns) => patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => upstream_uri.starts_with(prefix),
                None => upstream_uri == p,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(f: &str) -> String {
        format!("servers.docs.{f}")
    }

    #[test]
    fn patterns_match_whole_uris_or_prefixes() {
        let p = Protection::declare(
            false,
            vec!["file:///secret/*".into(), "file:///keys.txt".into()],
            &named,
        )
        .unwrap();
        assert!(p.covers("file:///secret/a.txt"));
        assert!(p.covers("file:///keys.txt"));
        assert!(!p.covers("file:///keys.txt.bak"));
        assert!(!p.covers("file:///public/a.txt"));
        assert!(
            Protection::declare(true, vec![], &named)
                .unwrap()
                .covers("anything")
        );
        assert!(
            !Protection::declare(false, vec![], &named)
                .unwrap()
                .covers("anything")
        );
    }

    #[test]
    fn bad_declarations_name_the_key() {
        for (whole, patterns) in [
            (true, vec!["a".to_owned()]),
            (false, vec!["".to_owned()]),
            (false, vec!["*".to_owned()]),
            (false, vec!["a*b*".to_owned()]),
            (false, vec!["x".to_owned(); MAX_PATTERNS + 1]),
        ] {
            let e = Protection::declare(whole, patterns, &named).unwrap_err();
            assert!(
                e.message().contains("servers.docs.protected"),
                "{}",
                e.message()
            );
        }
    }
}
