//! Policy requests and decisions: what the gateway asks its access rules, and what they answer.

use crate::{Principal, ServerName};

/// What an agent wants to do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PolicyRequest {
    /// Read `resource` (a gateway URI) of `server` (`may_access_mcp`).
    Access {
        /// Who asks.
        agent: Principal,
        /// The server.
        server: ServerName,
        /// The gateway URI, after any rewriting (the exact URI read).
        resource: String,
    },
    /// List `server`'s resources (`may_list_resources`).
    List {
        /// Who asks.
        agent: Principal,
        /// The server.
        server: ServerName,
    },
    /// Read a protected resource (`may_read_protected_resource`).
    Protected {
        /// Who asks.
        agent: Principal,
        /// The gateway URI.
        resource: String,
    },
    /// Change credentials or the cache (`may_configure_mcp`).
    Configure {
        /// Who asks.
        agent: Principal,
    },
    /// Add or remove a server through the registry tools (`may_change_registry`).
    Register {
        /// Who asks.
        agent: Principal,
        /// True when the server is a program the gateway would run (stdio).
        command: bool,
    },
}

impl PolicyRequest {
    /// The request as the rules take it: its kind, then its arguments.
    pub fn terms(&self) -> Vec<String> {
        match self {
            Self::Access {
                agent,
                server,
                resource,
            } => vec![
                "access".into(),
                agent.as_str().into(),
                server.as_str().into(),
                resource.clone(),
            ],
            Self::List { agent, server } => {
                vec!["list".into(), agent.as_str().into(), server.as_str().into()]
            }
            Self::Protected { agent, resource } => {
                vec!["protected".into(), agent.as_str().into(), resource.clone()]
            }
            Self::Configure { agent } => vec!["configure".into(), agent.as_str().into()],
            Self::Register { agent, command } => vec![
                "register".into(),
                agent.as_str().into(),
                if *command { "command" } else { "url" }.into(),
            ],
        }
    }
}

/// What the rules answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// True when a rule allows the request.
    pub allowed: bool,
    /// Which rule allowed it and with which facts, or what each rule that could have was missing.
    pub why: String,
}

/// What the configuration says of one agent (`[policy.agents.NAME]`), before it becomes facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentFacts {
    /// The agent.
    pub agent: String,
    /// Its permissions (`has_permission`).
    pub permissions: Vec<String>,
    /// The servers assigned to it (`mcp_server_assignment`).
    pub servers: Vec<ServerName>,
    /// Its access level (`agent_access_level`).
    pub level: Option<String>,
    /// Protected resources of its tenant (`resource_belongs_to_tenant`).
    pub tenant_resources: Vec<String>,
}
