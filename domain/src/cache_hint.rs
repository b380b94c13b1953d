//! The caching hints Quarry gives its clients (MCP 2026-07-28 `ttlMs` and `cacheScope`).
//!
//! A hint must be true: a client (or a shared intermediary) that follows it never serves content
//! longer than Quarry itself would, nor to a principal Quarry would not serve it to. So a read's
//! hint is what is left of Quarry's own cache entry, clamped by what the upstream said; an answer
//! made of several parts (a listing across servers) is as short-lived as its shortest part and
//! private as soon as one part is private or the answer was filtered for its caller. An
//! upstream's `public` never widens what Quarry decided.

use std::time::Duration;

use crate::Timestamp;

/// Who may be served a cached answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CacheScope {
    /// Only the principal it was answered for (the default whenever anything is unsure).
    Private,
    /// Any principal: the answer does not depend on who asked.
    Public,
}

impl CacheScope {
    /// The wire name (`"private"`, `"public"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Public => "public",
        }
    }
}

/// How long an answer stays fresh, and who may be served it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheHint {
    /// How long from now the answer stays fresh.
    pub ttl: Duration,
    /// Who may be served it.
    pub scope: CacheScope,
}

impl Default for CacheHint {
    fn default() -> Self {
        Self::NONE
    }
}

impl CacheHint {
    /// An answer nobody should keep: fresh only now, for its caller.
    pub const NONE: Self = Self {
        ttl: Duration::ZERO,
        scope: CacheScope::Private,
    };

    /// A hint of `ttl` for `scope`.
    pub fn new(ttl: Duration, scope: CacheScope) -> Self {
        Self { ttl, scope }
    }

    /// The hint of content fresh until `expires_at`, seen at `now` (zero once expired).
    pub fn until(expires_at: Timestamp, now: Timestamp, scope: CacheScope) -> Self {
        let ttl = (expires_at - now).to_std().unwrap_or(Duration::ZERO);
        Self { ttl, scope }
    }

    /// The hint of an answer made of `self` and `other`: the shorter TTL, and private unless
    /// both are public. Commutative, associative and idempotent, so parts combine in any order.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self {
            ttl: self.ttl.min(other.ttl),
            scope: self.scope.min(other.scope),
        }
    }

    /// The same hint, private: for an answer that was filtered for its caller (policy decided
    /// what it holds), so it must not be shared with anyone else.
    #[must_use]
    pub fn private(self) -> Self {
        Self {
            scope: CacheScope::Private,
            ..self
        }
    }

    /// A read's hint: what is left of Quarry's own entry (`own`), clamped by what the upstream
    /// said of the content, counted from now (`upstream`, when it said anything). Public only
    /// when Quarry shares the entry across principals and the upstream did not mark it private.
    #[must_use]
    pub fn for_read(own: Self, upstream: Option<Self>) -> Self {
        upstream.map_or(own, |u| own.and(u))
    }

    /// The hint of an answer made of `parts` (a listing across servers), `filtered` when it was
    /// cut to what its caller may see. With no parts, `empty` (what Quarry decides for an answer
    /// that holds nothing, say a listing of no servers).
    pub fn combine(parts: impl IntoIterator<Item = Self>, filtered: bool, empty: Self) -> Self {
        let combined = parts.into_iter().reduce(Self::and).unwrap_or(empty);
        if filtered {
            combined.private()
        } else {
            combined
        }
    }

    /// `ttlMs` on the wire, in whole milliseconds (saturating).
    pub fn ttl_ms(self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hint() -> impl Strategy<Value = CacheHint> {
        (0u64..10_000_000, any::<bool>()).prop_map(|(ms, public)| {
            CacheHint::new(
                Duration::from_millis(ms),
                if public {
                    CacheScope::Public
                } else {
                    CacheScope::Private
                },
            )
        })
    }

    proptest! {
        #[test]
        fn a_combined_hint_is_never_longer_than_a_part(parts in prop::collection::vec(hint(), 1..20), filtered: bool) {
            let combined = CacheHint::combine(parts.clone(), filtered, CacheHint::NONE);
            prop_assert_eq!(combined.ttl, parts.iter().map(|p| p.ttl).min().unwrap());
        }

        #[test]
        fn one_private_part_makes_the_whole_private(parts in prop::collection::vec(hint(), 1..20), filtered: bool) {
            let combined = CacheHint::combine(parts.clone(), filtered, CacheHint::NONE);
            let any_private = parts.iter().any(|p| p.scope == CacheScope::Private);
            prop_assert_eq!(combined.scope == CacheScope::Private, any_private || filtered);
        }

        #[test]
        fn a_filtered_answer_is_private_whatever_its_parts(parts in prop::collection::vec(hint(), 0..20), empty in hint()) {
            prop_assert_eq!(CacheHint::combine(parts, true, empty).scope, CacheScope::Private);
        }

        #[test]
        fn the_order_of_parts_does_not_matter(mut parts in prop::collection::vec(hint(), 1..20), seed: u64) {
            let before = CacheHint::combine(parts.clone(), false, CacheHint::NONE);
            // A deterministic shuffle from the seed.
            let n = parts.len();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                parts.swap(i, (s >> 33) as usize % (i + 1));
            }
            prop_assert_eq!(CacheHint::combine(parts, false, CacheHint::NONE), before);
        }

        #[test]
        fn and_is_associative_and_idempotent(a in hint(), b in hint(), c in hint()) {
            prop_assert_eq!(a.and(b).and(c), a.and(b.and(c)));
            prop_assert_eq!(a.and(a), a);
            prop_assert_eq!(a.and(b), b.and(a));
        }

        #[test]
        fn an_upstream_never_widens_a_read(own in hint(), upstream in hint()) {
            let read = CacheHint::for_read(own, Some(upstream));
            prop_assert!(read.ttl <= own.ttl && read.ttl <= upstream.ttl);
            // Public upstream content Quarry keeps per principal stays private.
            if own.scope == CacheScope::Private {
                prop_assert_eq!(read.scope, CacheScope::Private);
            }
            if upstream.scope == CacheScope::Private {
                prop_assert_eq!(read.scope, CacheScope::Private);
            }
        }

        #[test]
        fn a_silent_upstream_leaves_quarrys_hint(own in hint()) {
            prop_assert_eq!(CacheHint::for_read(own, None), own);
        }

        #[test]
        fn what_is_left_of_an_entry_counts_down_to_zero(ttl_ms in 0i64..10_000_000, elapsed_ms in 0i64..20_000_000) {
            let fetched = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
            let expires = fetched + chrono::Duration::milliseconds(ttl_ms);
            let now = fetched + chrono::Duration::milliseconds(elapsed_ms);
            let hint = CacheHint::until(expires, now, CacheScope::Public);
            prop_assert_eq!(hint.ttl_ms(), u64::try_from((ttl_ms - elapsed_ms).max(0)).unwrap());
        }
    }

    #[test]
    fn no_parts_give_what_quarry_decides_for_an_empty_answer() {
        let empty = CacheHint::new(Duration::from_secs(5), CacheScope::Public);
        assert_eq!(CacheHint::combine([], false, empty), empty);
    }
}
