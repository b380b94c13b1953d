//! The policy decorator over the real use cases and fake upstreams: for random fact bases, a
//! resource appears in a listing exactly when reading it is allowed (PO-4), a denied read never
//! reaches the upstream, and an engine that cannot decide denies with E011.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;
use quarry_domain::{Decision, ErrorCode, ListQuery, PageLimit, PolicyRequest, Principal};
use quarry_ports::{PolicyEngine, PolicyUnavailable, ResourceGateway};
use quarry_usecases::Governed;

use super::*;

/// Decides from tables: the servers the agent may list, the URIs it may read; a URI in
/// `undecided` makes the rules fail (as a throwing rule would).
#[derive(Debug, Default)]
struct TablePolicy {
    listable: BTreeSet<String>,
    readable: BTreeSet<String>,
    undecided: BTreeSet<String>,
}

impl TablePolicy {
    fn answer(&self, request: &PolicyRequest) -> Option<bool> {
        match request {
            PolicyRequest::List { server, .. } => Some(self.listable.contains(server.as_str())),
            PolicyRequest::Access { resource, .. } | PolicyRequest::Protected { resource, .. } => {
                if self.undecided.contains(resource) {
                    None
                } else {
                    Some(self.readable.contains(resource))
                }
            }
            PolicyRequest::Configure { .. } | PolicyRequest::Register { .. } => Some(false),
        }
    }
}

#[async_trait::async_trait]
impl PolicyEngine for TablePolicy {
    async fn decide(
        &self,
        request: &PolicyRequest,
        _context: &[(String, String)],
    ) -> Result<Decision, PolicyUnavailable> {
        let allowed = self
            .answer(request)
            .ok_or_else(|| PolicyUnavailable("the rule raised an error".into()))?;
        Ok(Decision {
            allowed,
            why: "table".into(),
        })
    }

    async fn allowed(
        &self,
        requests: &[(PolicyRequest, Vec<(String, String)>)],
    ) -> Result<Vec<Option<bool>>, PolicyUnavailable> {
        Ok(requests.iter().map(|(r, _)| self.answer(r)).collect())
    }

    async fn health(&self) -> quarry_ports::EngineHealth {
        quarry_ports::EngineHealth {
            ready: true,
            ..Default::default()
        }
    }
}

const N: usize = 12;

fn uri(server: &str, n: usize) -> String {
    format!("mcp://{server}/file_3A///{n}.txt")
}

async fn governed(policy: TablePolicy) -> (Governed, Arc<FakeSession>, Arc<FakeSession>) {
    let sessions: Vec<Arc<FakeSession>> = (0..2)
        .map(|_| {
            let s = FakeSession::default();
            for n in 0..N {
                s.set(&format!("file:///{n}.txt"), text(&format!("content {n}")));
            }
            Arc::new(s)
        })
        .collect();
    let connector = Arc::new(FakeConnector::new(HashMap::from([
        ("docs".to_owned(), sessions[0].clone()),
        ("wiki".to_owned(), sessions[1].clone()),
    ])));
    let service = ResourceService::new(
        vec![settings("docs"), settings("wiki")],
        ports(
            connector,
            Arc::new(FakeContentCache::new(1 << 20)),
            Arc::new(FakeVersionStore::new(Retention::default())),
            Arc::new(ManualClock::new()),
        ),
        options(),
    );
    let governed = Governed::new(service, Arc::new(policy), Principal::new("agent"), "stdio");
    (governed, sessions[0].clone(), sessions[1].clone())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    // traces: PO-4, CA-1 — for random tables, the listing holds exactly the resources whose read
    // is allowed (and counts only them); every other read is E004 (E011 where the rules fail)
    // and none of those reaches an upstream.
    #[test]
    fn po_4_a_resource_is_listed_exactly_when_reading_it_is_allowed(
        listable in proptest::collection::btree_set(prop_oneof![Just("docs"), Just("wiki")], 0..=2),
        readable in proptest::collection::btree_set((0..2usize, 0..N), 0..2 * N),
        undecided in proptest::collection::btree_set((0..2usize, 0..N), 0..3),
    ) {
        let server = |i: usize| if i == 0 { "docs" } else { "wiki" };
        let policy = TablePolicy {
            listable: listable.iter().map(|s| (*s).to_owned()).collect(),
            readable: readable.iter().map(|(s, n)| uri(server(*s), *n)).collect(),
            undecided: undecided.iter().map(|(s, n)| uri(server(*s), *n)).collect(),
        };
        let expected: BTreeSet<String> = policy
            .readable
            .iter()
            .filter(|u| !policy.undecided.contains(*u))
            .filter(|u| policy.listable.iter().any(|s| u.starts_with(&format!("mcp://{s}/"))))
            .cloned()
            .collect();
        let readable_uris = policy.readable.clone();
        let undecided_uris = policy.undecided.clone();
        runtime().block_on(async move {
            let (gateway, docs, wiki) = governed(policy).await;
            let query = ListQuery { limit: PageLimit::new(1000).unwrap(), ..ListQuery::default() };
            let listing = gateway.list_resources(query).await.unwrap();
            let listed: BTreeSet<String> = listing.resources.iter().map(|r| r.uri.to_string()).collect();
            assert_eq!(listed, expected);
            assert_eq!(listing.total_count, expected.len() as u64);
            let reads = || docs.reads.load(Ordering::SeqCst) + wiki.reads.load(Ordering::SeqCst);
            let reads_before = reads();
            for s in ["docs", "wiki"] {
                for n in 0..N {
                    let u = uri(s, n);
                    let outcome = gateway.read_resource(read(&u)).await;
                    if undecided_uris.contains(&u) {
                        assert_eq!(outcome.unwrap_err().code(), ErrorCode::E011, "{u}");
                    } else if readable_uris.contains(&u) {
                        assert!(outcome.is_ok(), "{u}: {outcome:?}");
                    } else {
                        assert_eq!(outcome.unwrap_err().code(), ErrorCode::E004, "{u}");
                    }
                }
            }
            let allowed_reads = readable_uris.iter().filter(|u| !undecided_uris.contains(*u)).count();
            assert_eq!(reads() - reads_before, allowed_reads as u32, "only allowed reads reach an upstream");
        });
    }
}
