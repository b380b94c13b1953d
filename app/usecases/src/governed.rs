//! The policy decorator: [`Governed`] wraps the gateway for one agent and asks the policy
//! before anything reaches a use case. Listings show exactly what the agent may read (servers
//! by `may_list_resources`, resources by `may_access_mcp`, protected ones by
//! `may_read_protected_resource` too), before paging; reads and version reads are checked on
//! the exact gateway URI before the cache or an upstream is touched; changing credentials or the
//! cache needs `may_configure_mcp`, adding or removing a server `may_change_registry` (the
//! registry flags are facts of the policy, so the service does not check them again). A denial
//! is E004 with the same text whether the resource exists or not; an engine that cannot decide
//! is E011 (deny). Decisions are cached per request until another policy replaces the one that
//! made them.

use std::sync::Arc;

use async_trait::async_trait;
use quarry_domain::{Error, ErrorCode, PolicyRequest, Principal, ResourceUri, ServerName};
use quarry_ports::PolicyEngine;

use crate::{ResourceService, audited::explain_denial, decisions::Decisions, list::Visibility};

mod port;

/// Resources of a listing decided together.
const VISIBILITY_SLICE: usize = 5_000;

/// The gateway as one agent may use it.
#[derive(Debug)]
pub struct Governed {
    service: Arc<ResourceService>,
    policy: Arc<dyn PolicyEngine>,
    agent: Principal,
    transport: String,
    /// Decisions by request, for the policy version they were made under.
    decisions: Decisions,
}

impl Governed {
    /// The gateway for `agent`, reached over `transport` (`stdio`, `http`), under `policy`.
    pub fn new(
        service: Arc<ResourceService>,
        policy: Arc<dyn PolicyEngine>,
        agent: Principal,
        transport: &str,
    ) -> Self {
        Self {
            service,
            policy,
            agent,
            transport: transport.to_owned(),
            decisions: Decisions::default(),
        }
    }

    /// The policy's answers to `requests` (request, protected): `Some(allowed)`, or `None`
    /// where the rules could not decide. Definite answers are cached per request.
    async fn answers(
        &self,
        requests: &[(PolicyRequest, bool)],
    ) -> Result<Vec<Option<bool>>, Error> {
        let version = self.policy.version();
        let mut answers = self.decisions.get(version, requests);
        let missing: Vec<usize> = (0..requests.len())
            .filter(|&i| answers[i].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(answers);
        }
        let asked: Vec<(PolicyRequest, Vec<(String, String)>)> = missing
            .iter()
            .map(|&i| {
                let (request, protected) = &requests[i];
                let context = vec![
                    ("transport".to_owned(), self.transport.clone()),
                    ("protected".to_owned(), protected.to_string()),
                ];
                (request.clone(), context)
            })
            .collect();
        let decided = self.policy.allowed(&asked).await.map_err(|e| {
            tracing::warn!(agent = %self.agent, "{e}: denied");
            Error::new(ErrorCode::E011, format!("{e}; the request is denied"))
        })?;
        // Decisions of a policy replaced meanwhile answer this call but are not kept.
        self.decisions.keep(
            version,
            self.policy.version(),
            missing
                .iter()
                .zip(&decided)
                .map(|(&i, d)| (&requests[i], *d)),
        );
        for (&i, d) in missing.iter().zip(decided) {
            answers[i] = d;
        }
        Ok(answers)
    }

    /// What reading `resource` of `server` needs allowed.
    fn read_requests(
        &self,
        server: &ServerName,
        resource: &str,
        protected: bool,
    ) -> Vec<(PolicyRequest, bool)> {
        let mut needed = vec![(
            PolicyRequest::Access {
                agent: self.agent.clone(),
                server: server.clone(),
                resource: resource.to_owned(),
            },
            protected,
        )];
        if protected {
            needed.push((
                PolicyRequest::Protected {
                    agent: self.agent.clone(),
                    resource: resource.to_owned(),
                },
                true,
            ));
        }
        needed
    }

    /// One request: allowed or not; E011 when the rules could not decide.
    async fn allows(&self, request: PolicyRequest) -> Result<bool, Error> {
        let answers = self.answers(&[(request, false)]).await?;
        answers.first().copied().flatten().ok_or_else(undecided)
    }

    /// E004 unless the agent may read `uri`; E011 when the rules cannot decide.
    async fn check_read(&self, uri: &ResourceUri) -> Result<(), Error> {
        let protected = self.service.is_protected(uri);
        let needed = self.read_requests(uri.server(), uri.as_str(), protected);
        let answers = self.answers(&needed).await?;
        if answers.contains(&None) {
            return Err(undecided());
        }
        match needed
            .into_iter()
            .zip(answers)
            .find(|(_, a)| *a != Some(true))
        {
            None => Ok(()),
            Some((refused, _)) => {
                self.explain(refused).await;
                Err(denied(&format!("reading {uri}")))
            }
        }
    }

    /// Hands the audit record of the request in progress the rules' reason for refusing
    /// `refused` (asked again, with explanation: denials only, so allowed requests stay on the
    /// cached path). The caller's error keeps the same text whatever the reason (PO-4).
    async fn explain(&self, (request, protected): (PolicyRequest, bool)) {
        let context = [
            ("transport".to_owned(), self.transport.clone()),
            ("protected".to_owned(), protected.to_string()),
        ];
        let kind = request.terms().first().cloned().unwrap_or_default();
        if let Ok(decision) = self.policy.decide(&request, &context).await {
            explain_denial(format!("{kind}: {}", decision.why));
        }
    }

    /// E004 unless the agent may change credentials and the cache.
    async fn check_configure(&self) -> Result<(), Error> {
        let request = PolicyRequest::Configure {
            agent: self.agent.clone(),
        };
        if self.allows(request.clone()).await? {
            Ok(())
        } else {
            self.explain((request, false)).await;
            Err(denied("changing the gateway's credentials or cache"))
        }
    }

    /// E004 unless the agent may add or remove servers (`command`: a program to run).
    async fn check_register(&self, command: bool) -> Result<(), Error> {
        let request = PolicyRequest::Register {
            agent: self.agent.clone(),
            command,
        };
        if self.allows(request.clone()).await? {
            return Ok(());
        }
        self.explain((request, false)).await;
        if command {
            Err(denied("registering a program for the gateway to run"))
        } else {
            Err(denied("changing the gateway's servers"))
        }
    }

    async fn may_list(&self, server: &ServerName) -> Result<bool, Error> {
        let request = PolicyRequest::List {
            agent: self.agent.clone(),
            server: server.clone(),
        };
        self.allows(request).await
    }
}

fn denied(what: &str) -> Error {
    Error::new(ErrorCode::E004, format!("access denied by policy: {what}"))
}

fn undecided() -> Error {
    Error::new(
        ErrorCode::E011,
        "the policy could not decide (a rule raised an error or ran past its budget); the \
         request is denied",
    )
}

#[async_trait]
impl Visibility for Governed {
    async fn server(&self, server: &ServerName) -> Result<bool, Error> {
        self.may_list(server).await
    }

    async fn resources(
        &self,
        resources: &[(ServerName, String, bool)],
    ) -> Result<Vec<bool>, Error> {
        let mut shown = Vec::with_capacity(resources.len());
        // In slices, so that a listing of a million resources never holds a million requests.
        for slice in resources.chunks(VISIBILITY_SLICE) {
            let mut requests = Vec::with_capacity(slice.len());
            let mut spans = Vec::with_capacity(slice.len());
            for (server, uri, protected) in slice {
                let needed = self.read_requests(server, uri, *protected);
                spans.push(needed.len());
                requests.extend(needed);
            }
            let answers = self.answers(&requests).await?;
            let mut at = 0;
            for n in spans {
                // Shown exactly when a read would be allowed (an undecided one is not).
                shown.push(answers[at..at + n].iter().all(|a| *a == Some(true)));
                at += n;
            }
        }
        Ok(shown)
    }

    fn denied(&self, server: &ServerName) -> Error {
        denied(&format!("listing server '{server}'"))
    }
}
