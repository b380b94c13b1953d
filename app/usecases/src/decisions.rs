//! The policy decorator's decision cache: definite answers by request, for the policy version
//! that gave them, dropped when another version decides. A key is a 128-bit keyed digest of the
//! request (two SipHash digests under independent random keys, chosen per process), so a
//! listing of a million resources keeps its decisions in tens of megabytes instead of copies of
//! every URI; two requests share a key only as often as someone guesses a random 128-bit key.

use std::{
    collections::HashMap,
    hash::{BuildHasher, RandomState},
    sync::Mutex,
};

use quarry_domain::PolicyRequest;

/// Decisions kept before the cache starts over.
const MAX_CACHED: usize = 1_000_000;

/// A request, and whether the resource it names is protected (the context the rules saw).
pub(crate) type Asked = (PolicyRequest, bool);

#[derive(Debug, Default)]
pub(crate) struct Decisions {
    keys: (RandomState, RandomState),
    /// The policy version, and its answers by key.
    answers: Mutex<(u64, HashMap<u128, bool>)>,
}

impl Decisions {
    fn key(&self, asked: &Asked) -> u128 {
        (u128::from(self.keys.0.hash_one(asked)) << 64) | u128::from(self.keys.1.hash_one(asked))
    }

    /// The answers `version` gave to `requests`, where it gave one.
    pub(crate) fn get(&self, version: u64, requests: &[Asked]) -> Vec<Option<bool>> {
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.0 != version {
            *answers = (version, HashMap::new());
        }
        requests
            .iter()
            .map(|r| answers.1.get(&self.key(r)).copied())
            .collect()
    }

    /// Keeps the definite answers of `version`, unless `now` (the version deciding now) replaced
    /// it while they were being asked.
    pub(crate) fn keep<'a>(
        &self,
        version: u64,
        now: u64,
        decided: impl Iterator<Item = (&'a Asked, Option<bool>)>,
    ) {
        if version != now {
            return;
        }
        let keyed: Vec<(u128, bool)> = decided
            .filter_map(|(r, d)| d.map(|allowed| (self.key(r), allowed)))
            .collect();
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        if answers.0 != version {
            return;
        }
        if answers.1.len() + keyed.len() > MAX_CACHED {
            answers.1.clear();
        }
        answers.1.extend(keyed);
    }
}

#[cfg(test)]
mod tests {
    use quarry_domain::{Principal, ServerName};

    use super::*;

    fn read(uri: &str) -> Asked {
        (
            PolicyRequest::Access {
                agent: Principal::new("alice"),
                server: ServerName::parse("docs").expect("a server name"),
                resource: uri.to_owned(),
            },
            false,
        )
    }

    #[test]
    fn answers_are_kept_per_request_and_dropped_with_their_version() {
        let cache = Decisions::default();
        let (a, b) = (read("mcp://docs/a"), read("mcp://docs/b"));
        assert_eq!(cache.get(1, &[a.clone(), b.clone()]), [None, None]);
        cache.keep(1, 1, [(&a, Some(true)), (&b, None)].into_iter());
        assert_eq!(cache.get(1, &[a.clone(), b.clone()]), [Some(true), None]);
        // The same request, protected, is another question.
        assert_eq!(cache.get(1, &[(a.0.clone(), true)]), [None]);
        // A decision made while another version took over is not kept.
        cache.keep(1, 2, [(&b, Some(false))].into_iter());
        assert_eq!(cache.get(1, std::slice::from_ref(&b)), [None]);
        assert_eq!(cache.get(2, &[a]), [None]);
    }
}
