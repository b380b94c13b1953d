//! Listing order, filters and pagination: the laws, property-tested.

use chrono::{TimeZone, Utc};
use proptest::prelude::*;

use super::*;
use crate::{ErrorCode, ResourceUri};

fn resource(i: u32, modified: Option<i64>, t: ResourceType) -> Resource {
    Resource {
        uri: ResourceUri::new(ServerName::parse("s").unwrap(), &format!("r://{i}")).unwrap(),
        name: format!("r{i}"),
        resource_type: t,
        size: None,
        mime_type: None,
        created_at: None,
        modified_at: modified.map(|s| Utc.timestamp_opt(s, 0).unwrap()),
        version: None,
        is_protected: false,
        metadata: Default::default(),
    }
}

#[test]
fn limits_outside_1_to_1000_are_e001() {
    for bad in [0, -1, 1001, i64::MIN, i64::MAX] {
        assert_eq!(
            PageLimit::new(bad).unwrap_err().code(),
            ErrorCode::E001,
            "{bad}"
        );
    }
    assert_eq!(PageLimit::new(1000).unwrap().get(), 1000);
    assert!(ListQuery::parse_offset(-1).is_err());
}

// traces: REQ-071-005 — newest first, undated last, URI as the tie-break.
#[test]
fn newest_first_then_undated_with_a_stable_tie_break() {
    let items = vec![
        resource(1, None, ResourceType::File),
        resource(2, Some(100), ResourceType::File),
        resource(3, Some(300), ResourceType::File),
        resource(4, Some(100), ResourceType::File),
        resource(5, None, ResourceType::File),
    ];
    let page = sort_and_page(items, &ListQuery::default());
    let names: Vec<_> = page.items.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["r3", "r2", "r4", "r1", "r5"]);
}

// traces: REQ-071-004
#[test]
fn type_filter_counts_only_matches() {
    let items = vec![
        resource(1, None, ResourceType::File),
        resource(2, None, ResourceType::Api),
        resource(3, None, ResourceType::File),
    ];
    let q = ListQuery {
        filter_type: Some(ResourceType::File),
        ..ListQuery::default()
    };
    let page = sort_and_page(items, &q);
    assert_eq!(page.total_count, 2);
    assert!(
        page.items
            .iter()
            .all(|r| r.resource_type == ResourceType::File)
    );
}

#[test]
fn selectors_match_name_or_id_exactly() {
    let name = ServerName::parse("docs").unwrap();
    let id = ServerId::derive(&name);
    assert!(ServerSelector::new("docs").unwrap().selects(&name, &id));
    assert!(
        ServerSelector::new(id.as_str())
            .unwrap()
            .selects(&name, &id)
    );
    assert!(!ServerSelector::new("Docs").unwrap().selects(&name, &id));
    assert!(ServerSelector::new("").is_err());
}

proptest! {
    // traces: REQ-071-006 — walking the pages with any limit partitions the listing: every resource
    // appears exactly once, in listing order, and total_count is the same on every page.
    #[test]
    fn pages_partition_the_listing(
        stamps in proptest::collection::vec(proptest::option::of(0i64..20), 0..120),
        limit in 1i64..50,
    ) {
        let items: Vec<_> = stamps.iter().enumerate()
            .map(|(i, s)| resource(i as u32, *s, ResourceType::Custom)).collect();
        let everything = sort_and_page(items.clone(), &ListQuery { limit: PageLimit::new(1000).unwrap(), ..ListQuery::default() });
        let mut walked = Vec::new();
        let mut offset = 0;
        loop {
            let q = ListQuery { limit: PageLimit::new(limit).unwrap(), offset, ..ListQuery::default() };
            let page = sort_and_page(items.clone(), &q);
            prop_assert_eq!(page.total_count, items.len() as u64);
            prop_assert!(page.items.len() as i64 <= limit);
            if page.items.is_empty() { break; }
            offset += page.items.len() as u64;
            walked.extend(page.items);
        }
        prop_assert_eq!(walked, everything.items);
    }
}
