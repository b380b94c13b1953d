//! `[policy]` and `[serve]`: the access policy (its rules, its facts files, the agents the
//! configuration describes) and the identity a stdio session acts for.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use quarry_domain::{AgentFacts, Error, Principal, ServerName};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicySection {
    /// The rules file (default: the spec's rules as shipped).
    pub(super) rules: Option<PathBuf>,
    /// Prolog files of facts (and rules of the deployment's own).
    #[serde(default)]
    pub(super) facts: Vec<PathBuf>,
    /// The most a decision may take, in milliseconds.
    pub(super) decision_budget_ms: Option<u64>,
    /// The most memory a policy worker may allocate, in MiB.
    pub(super) worker_memory_mb: Option<u64>,
    /// Agents and what they may do.
    #[serde(default)]
    pub(super) agents: BTreeMap<String, AgentSection>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentSection {
    /// `has_permission` facts: mcp_access, mcp_restricted_access, admin, mcp_admin...
    #[serde(default)]
    pub(super) permissions: Vec<String>,
    /// Its `mcp_server_assignment`: the servers it may use.
    #[serde(default)]
    pub(super) servers: Vec<String>,
    /// Its `agent_access_level` (normal, elevated, restricted).
    pub(super) level: Option<String>,
    /// Gateway URIs of protected resources that belong to its tenant.
    #[serde(default)]
    pub(super) tenant_resources: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServeSection {
    /// The agent a stdio session acts for.
    pub(super) agent: Option<String>,
}

/// The policy the configuration describes.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// The rules file, or the spec's rules as shipped.
    pub rules: Option<PathBuf>,
    /// Facts files, read in order after the rules.
    pub facts: Vec<PathBuf>,
    /// The agents `[policy.agents]` describes.
    pub agents: Vec<AgentFacts>,
    /// The most one decision may take.
    pub budget: Duration,
    /// The most memory a policy worker may allocate, in bytes.
    pub worker_memory: u64,
    /// The `[registry]` flags that are set, as `registry_allows` facts (`tool_registration`,
    /// `tool_commands`).
    pub registry_allows: Vec<String>,
}

/// The default decision budget.
const DEFAULT_BUDGET: Duration = Duration::from_millis(250);
/// The default cap on a policy worker's memory, in MiB (a loaded policy takes about 30).
const DEFAULT_WORKER_MEMORY_MB: u64 = 1024;

/// A name the policy knows (an agent id, a permission, a level): 1 to 128 visible characters.
fn name(key: &str, value: &str) -> Result<(), Error> {
    if value.is_empty() || value.len() > 128 || value.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{key} must be 1 to 128 characters, none of them control characters"
        )));
    }
    Ok(())
}

/// Checks `[policy]` and makes its settings; `relative_to` is the configuration file's folder.
pub(super) fn policy_settings(
    section: PolicySection,
    relative_to: Option<&std::path::Path>,
) -> Result<PolicySettings, Error> {
    let resolve = |p: PathBuf| match relative_to {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p,
    };
    let mut agents = Vec::new();
    for (agent, a) in section.agents {
        let key = format!("policy.agents.{agent}");
        name(&key, &agent)?;
        for p in &a.permissions {
            name(&format!("{key}.permissions"), p)?;
        }
        let servers = a
            .servers
            .iter()
            .map(|s| {
                ServerName::parse(s)
                    .map_err(|e| Error::invalid(format!("{key}.servers: {}", e.message())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(level) = &a.level
            && !matches!(level.as_str(), "normal" | "elevated" | "restricted")
        {
            return Err(Error::invalid(format!(
                "{key}.level must be normal, elevated or restricted"
            )));
        }
        for uri in &a.tenant_resources {
            name(&format!("{key}.tenant_resources"), uri)?;
        }
        agents.push(AgentFacts {
            agent,
            permissions: a.permissions,
            servers,
            level: a.level,
            tenant_resources: a.tenant_resources,
        });
    }
    let budget = match section.decision_budget_ms {
        None => DEFAULT_BUDGET,
        Some(ms) if (1..=10_000).contains(&ms) => Duration::from_millis(ms),
        Some(_) => {
            return Err(Error::invalid(
                "policy.decision_budget_ms must be between 1 and 10000",
            ));
        }
    };
    let worker_memory_mb = section.worker_memory_mb.unwrap_or(DEFAULT_WORKER_MEMORY_MB);
    if !(64..=65_536).contains(&worker_memory_mb) {
        return Err(Error::invalid(
            "policy.worker_memory_mb must be between 64 and 65536",
        ));
    }
    Ok(PolicySettings {
        rules: section.rules.map(resolve),
        facts: section.facts.into_iter().map(resolve).collect(),
        agents,
        budget,
        worker_memory: worker_memory_mb * 1024 * 1024,
        registry_allows: Vec::new(),
    })
}

/// The stdio agent `[serve] agent` names (default `local`).
pub(super) fn serve_agent(section: &ServeSection) -> Result<Principal, Error> {
    match &section.agent {
        None => Ok(Principal::local()),
        Some(agent) => {
            name("serve.agent", agent)?;
            Ok(Principal::new(agent.clone()))
        }
    }
}

impl PolicySettings {
    /// The spec's rules as shipped, with no facts: what `quarry policy` commands use when no
    /// `[policy]` is configured.
    pub fn spec_rules() -> Self {
        Self {
            rules: None,
            facts: Vec::new(),
            agents: Vec::new(),
            budget: DEFAULT_BUDGET,
            worker_memory: DEFAULT_WORKER_MEMORY_MB * 1024 * 1024,
            registry_allows: Vec::new(),
        }
    }

    /// The rules file's text (None: the spec's rules as shipped) and each facts file's, in order.
    ///
    /// # Errors
    /// E001 naming a file that cannot be read.
    pub fn texts(&self) -> Result<(Option<String>, Vec<String>), Error> {
        let read = |p: &PathBuf| {
            std::fs::read_to_string(p).map_err(|e| {
                Error::invalid(format!("cannot read the policy file {}: {e}", p.display()))
            })
        };
        let rules = self.rules.as_ref().map(read).transpose()?;
        let facts = self.facts.iter().map(read).collect::<Result<_, _>>()?;
        Ok((rules, facts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_checked_and_kept_as_data() {
        let mut agents = BTreeMap::new();
        agents.insert(
            "o'neil".to_owned(),
            AgentSection {
                permissions: vec!["mcp_access".into()],
                servers: vec!["docs".into()],
                level: Some("elevated".into()),
                tenant_resources: vec![],
            },
        );
        let settings = policy_settings(
            PolicySection {
                agents,
                ..PolicySection::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(settings.agents[0].agent, "o'neil");
        assert_eq!(settings.agents[0].servers[0].as_str(), "docs");
        let mut bad = BTreeMap::new();
        bad.insert(
            "a".to_owned(),
            AgentSection {
                level: Some("god".into()),
                ..AgentSection::default()
            },
        );
        let e = policy_settings(
            PolicySection {
                agents: bad,
                ..PolicySection::default()
            },
            None,
        )
        .unwrap_err();
        assert!(
            e.message().contains("policy.agents.a.level"),
            "{}",
            e.message()
        );
    }
}
