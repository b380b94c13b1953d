//! Assigning one of the spec's resource types to upstream resources, which carry none.
//!
//! Classification is an ordered list of rules: the configured rules first, then the defaults; the
//! first rule that matches wins and is named in the result, so every type can be explained.

use serde::Deserialize;

use crate::{Error, ResourceType};

/// One rule: every matcher it sets must match (any of a matcher's values will do).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassificationRule {
    /// The type given when the rule matches.
    #[serde(rename = "type")]
    pub resource_type: ResourceType,
    /// URI schemes, without `:` (`file`, `postgres`).
    #[serde(default)]
    pub scheme: Vec<String>,
    /// MIME type prefixes (`application/sql`, `image/`).
    #[serde(default)]
    pub mime_prefix: Vec<String>,
    /// File extensions of the URI's last path segment, without the dot (`md`, `csv`).
    #[serde(default)]
    pub extension: Vec<String>,
    /// Prefixes of the upstream URI (`test://static/`).
    #[serde(default)]
    pub uri_prefix: Vec<String>,
}

impl ClassificationRule {
    fn matches(&self, uri: &str, mime: Option<&str>) -> bool {
        // No allocation here: this runs for every listed resource.
        let scheme = uri.split_once(':').map(|(s, _)| s);
        let ext = extension(uri);
        let prefixed = |text: &str, prefix: &str| {
            text.len() >= prefix.len()
                && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        };
        (self.scheme.is_empty()
            || scheme.is_some_and(|s| self.scheme.iter().any(|x| x.eq_ignore_ascii_case(s))))
            && (self.mime_prefix.is_empty()
                || mime.is_some_and(|m| self.mime_prefix.iter().any(|p| prefixed(m, p))))
            && (self.extension.is_empty()
                || ext.is_some_and(|e| self.extension.iter().any(|x| x.eq_ignore_ascii_case(e))))
            && (self.uri_prefix.is_empty() || self.uri_prefix.iter().any(|p| uri.starts_with(p)))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (what, values) in [
            ("scheme", &self.scheme),
            ("mime_prefix", &self.mime_prefix),
            ("extension", &self.extension),
            ("uri_prefix", &self.uri_prefix),
        ] {
            if !values.is_empty() {
                parts.push(format!("{what} in [{}]", values.join(", ")));
            }
        }
        parts.join(" and ")
    }

    fn validate(&self) -> Result<(), Error> {
        if self.scheme.is_empty()
            && self.mime_prefix.is_empty()
            && self.extension.is_empty()
            && self.uri_prefix.is_empty()
        {
            return Err(Error::invalid(format!(
                "classification rule for type {} sets no matcher (scheme, mime_prefix, extension or uri_prefix)",
                self.resource_type
            )));
        }
        Ok(())
    }
}

fn extension(uri: &str) -> Option<&str> {
    let path = uri.split(['?', '#']).next().unwrap_or(uri);
    let last = path.rsplit('/').next()?;
    let (stem, ext) = last.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty()).then_some(ext)
}

/// The type a resource got and the rule that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// The assigned type.
    pub resource_type: ResourceType,
    /// Which rule matched, in words (`configured rule 1: scheme in [postgres]`).
    pub explanation: String,
}

/// An ordered set of classification rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classifier {
    configured: Vec<ClassificationRule>,
    defaults: Vec<ClassificationRule>,
}

impl Default for Classifier {
    fn default() -> Self {
        Self {
            configured: Vec::new(),
            defaults: default_rules(),
        }
    }
}

impl Classifier {
    /// The configured rules, tried in order before the defaults.
    ///
    /// # Errors
    /// E001 when a rule sets no matcher.
    pub fn new(configured: Vec<ClassificationRule>) -> Result<Self, Error> {
        for rule in &configured {
            rule.validate()?;
        }
        Ok(Self {
            configured,
            defaults: default_rules(),
        })
    }

    /// The type only, without the explanation (no allocation): for filtering whole listings.
    pub fn type_of(&self, upstream_uri: &str, mime_type: Option<&str>) -> ResourceType {
        self.configured
            .iter()
            .chain(&self.defaults)
            .find(|r| r.matches(upstream_uri, mime_type))
            .map_or(ResourceType::Custom, |r| r.resource_type)
    }

    /// Classifies an upstream resource by its URI and MIME type.
    pub fn classify(&self, upstream_uri: &str, mime_type: Option<&str>) -> Classified {
        let tagged = self
            .configured
            .iter()
            .enumerate()
            .map(|(i, r)| ("configured", i, r))
            .chain(
                self.defaults
                    .iter()
                    .enumerate()
                    .map(|(i, r)| ("default", i, r)),
            );
        for (origin, i, rule) in tagged {
            if rule.matches(upstream_uri, mime_type) {
                return Classified {
                    resource_type: rule.resource_type,
                    explanation: format!("{origin} rule {}: {}", i + 1, rule.describe()),
                };
            }
        }
        Classified {
            resource_type: ResourceType::Custom,
            explanation: "no rule matched".to_owned(),
        }
    }
}

fn rule(t: ResourceType, scheme: &[&str], mime: &[&str], ext: &[&str]) -> ClassificationRule {
    let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
    ClassificationRule {
        resource_type: t,
        scheme: own(scheme),
        mime_prefix: own(mime),
        extension: own(ext),
        uri_prefix: Vec::new(),
    }
}

fn default_rules() -> Vec<ClassificationRule> {
    use ResourceType::*;
    vec![
        rule(Secret, &["secret", "vault"], &[], &[]),
        rule(
            Database,
            &[
                "postgres",
                "postgresql",
                "mysql",
                "sqlite",
                "mongodb",
                "redis",
                "db",
            ],
            &[],
            &[],
        ),
        rule(
            Database,
            &[],
            &[
                "application/sql",
                "application/x-sqlite3",
                "application/vnd.sqlite3",
            ],
            &[],
        ),
        rule(Api, &["http", "https"], &[], &[]),
        rule(File, &["file"], &[], &[]),
        rule(
            File,
            &[],
            &[],
            &[
                "md", "txt", "json", "yaml", "yml", "toml", "csv", "tsv", "xml", "html", "pdf",
                "png", "jpg", "jpeg", "gif", "svg", "rs", "py", "js", "ts", "go", "java", "c", "h",
                "log", "ini", "cfg", "conf",
            ],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_cover_the_common_cases_and_explain_themselves() {
        let c = Classifier::default();
        let got = c.classify("file:///etc/hosts", None);
        assert_eq!(got.resource_type, ResourceType::File);
        assert_eq!(got.explanation, "default rule 5: scheme in [file]");
        assert_eq!(
            c.classify("postgres://db/users", None).resource_type,
            ResourceType::Database
        );
        assert_eq!(
            c.classify("x://q", Some("application/sql")).resource_type,
            ResourceType::Database
        );
        assert_eq!(
            c.classify("https://api/x", None).resource_type,
            ResourceType::Api
        );
        assert_eq!(
            c.classify("demo://resource/static/document/architecture.md", None)
                .resource_type,
            ResourceType::File
        );
        let other = c.classify("test://static/resource/1", Some("text/plain"));
        assert_eq!(other.resource_type, ResourceType::Custom);
        assert_eq!(other.explanation, "no rule matched");
    }

    #[test]
    fn configured_rules_come_first_and_need_a_matcher() {
        let rules = vec![ClassificationRule {
            resource_type: ResourceType::Secret,
            scheme: vec![],
            mime_prefix: vec![],
            extension: vec![],
            uri_prefix: vec!["file:///etc/secrets/".into()],
        }];
        let c = Classifier::new(rules).unwrap();
        let got = c.classify("file:///etc/secrets/token", None);
        assert_eq!(got.resource_type, ResourceType::Secret);
        assert!(got.explanation.starts_with("configured rule 1"));

        let empty = ClassificationRule {
            resource_type: ResourceType::Api,
            scheme: vec![],
            mime_prefix: vec![],
            extension: vec![],
            uri_prefix: vec![],
        };
        assert!(Classifier::new(vec![empty]).is_err());
    }

    #[test]
    fn all_matchers_of_a_rule_must_match() {
        let rule = ClassificationRule {
            resource_type: ResourceType::Database,
            scheme: vec!["test".into()],
            mime_prefix: vec!["application/json".into()],
            extension: vec![],
            uri_prefix: vec![],
        };
        let c = Classifier::new(vec![rule]).unwrap();
        assert_eq!(
            c.classify("test://a", Some("application/json"))
                .resource_type,
            ResourceType::Database
        );
        assert_eq!(
            c.classify("test://a", Some("text/plain")).resource_type,
            ResourceType::Custom
        );
    }
}
