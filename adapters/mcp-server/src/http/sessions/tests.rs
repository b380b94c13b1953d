//! Unit tests of the sessions' bookkeeping.

#![allow(clippy::unwrap_used)]

use super::*;

/// A client's `initialize` parameters.
fn params() -> InitializeRequestParams {
    serde_json::from_value(serde_json::json!({
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}
    }))
    .unwrap()
}

// A session rmcp is taking over is not yet held, for the requests that would otherwise reach
// it before its handshake is replayed; once closed (a failed replay closes it), nothing of
// the takeover is left.
#[tokio::test]
async fn a_session_being_taken_over_is_not_held_until_its_handshake() {
    let sessions = Sessions::default();
    let id: SessionId = fresh_id();
    let opened = sessions.open_here(params());
    assert!(!sessions.has_session(&opened).await.unwrap());
    assert_eq!(sessions.open().await, 1);

    let restored = sessions.restore_session(opened.clone()).await.unwrap();
    assert!(matches!(restored, RestoreOutcome::Restored(_)));
    assert!(sessions.local.has_session(&opened).await.unwrap());
    assert!(
        !sessions.has_session(&opened).await.unwrap(),
        "held before its handshake is replayed"
    );

    assert_eq!(sessions.open().await, 1);

    sessions.close_session(&opened).await.unwrap();
    assert!(!sessions.has_session(&opened).await.unwrap());
    assert!(lock(&sessions.restoring).is_empty());
    assert_eq!(sessions.open().await, 0);
    assert!(!sessions.has_session(&id).await.unwrap());
}

// What the guard may forget the owner of: a session nothing here holds. One opened outside
// rmcp, one rmcp is taking over and one rmcp serves are held; once rmcp has closed them, and
// for an id never seen, nothing is. What it may close in rmcp: only what rmcp serves, not
// one it is still taking over.
#[tokio::test]
async fn a_session_is_held_until_rmcp_ends_it() {
    let sessions = Sessions::default();
    let here = sessions.open_here(params());
    let taken = sessions.open_here(params());
    let _transport = sessions.restore_session(taken.clone()).await.unwrap();
    let (served, _worker) = sessions.local.create_session().await.unwrap();
    let never = fresh_id();
    let all = || {
        [&here, &taken, &served, &never]
            .map(|id| id.to_string())
            .to_vec()
    };
    assert_eq!(sessions.not_held(all()).await, vec![never.to_string()]);
    assert_eq!(sessions.held_by_rmcp(all()).await, vec![served.to_string()]);
    assert!(
        !sessions.close_in_rmcp(&taken).await,
        "not closed while rmcp takes it over"
    );

    lock(&sessions.restoring).remove(taken.as_ref());
    assert_eq!(
        sessions.not_held(all()).await,
        vec![never.to_string()],
        "rmcp serves the one it took over"
    );
    assert_eq!(
        sessions.held_by_rmcp(all()).await,
        vec![taken.to_string(), served.to_string()]
    );
    for id in [&here, &never] {
        assert!(!sessions.close_in_rmcp(id).await, "rmcp does not hold {id}");
    }
    for id in [&taken, &served] {
        assert!(sessions.close_in_rmcp(id).await);
    }
    sessions.close_session(&here).await.unwrap();
    assert_eq!(sessions.not_held(all()).await, all());
    assert!(sessions.held_by_rmcp(all()).await.is_empty());
}

// One request at a time hands a session to rmcp: another waits while the first has its turn.
// A turn given up before rmcp serves the session passes to the next request; once rmcp has
// replayed the handshake, the waiting ones go on with nothing to hand over, and so does any
// later one.
#[tokio::test]
async fn one_request_at_a_time_hands_a_session_to_rmcp() {
    let sessions = Arc::new(Sessions::default());
    let opened = sessions.open_here(params()).to_string();
    let waiting = |sessions: &Arc<Sessions>| {
        let (sessions, id) = (sessions.clone(), opened.clone());
        tokio::spawn(async move { sessions.hand_over(&id).await.is_some() })
    };
    let first = sessions
        .hand_over(&opened)
        .await
        .expect("the first request's turn");
    let second = waiting(&sessions);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!second.is_finished(), "waits while another has the turn");
    drop(first);
    assert!(second.await.unwrap(), "a turn given up passes on");

    let third = sessions.hand_over(&opened).await.expect("its turn");
    let fourth = waiting(&sessions);
    let _transport = sessions
        .restore_session(opened.as_str().into())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !fourth.is_finished(),
        "waits while rmcp replays the handshake"
    );
    // What `initialize_session` does once the handshake is replayed.
    lock(&sessions.restoring).remove(&opened);
    sessions.handed_over(&opened);
    assert!(
        !fourth.await.unwrap(),
        "served by rmcp: nothing to hand over"
    );
    drop(third);
    assert!(sessions.hand_over(&opened).await.is_none());
}

// A request given up halfway through a takeover (rmcp holds the session, its handshake not
// replayed) leaves nothing half made: the session is closed in rmcp before the next request's
// turn, which takes it over afresh.
#[tokio::test]
async fn a_takeover_given_up_halfway_is_undone_before_the_next_turn() {
    let sessions = Arc::new(Sessions::default());
    let opened = sessions.open_here(params()).to_string();
    let turn = sessions.hand_over(&opened).await.expect("its turn");
    let _transport = sessions
        .restore_session(opened.as_str().into())
        .await
        .unwrap();
    assert!(
        sessions
            .local
            .has_session(&opened.as_str().into())
            .await
            .unwrap()
    );
    drop(turn);
    let next = tokio::time::timeout(Duration::from_secs(5), sessions.hand_over(&opened))
        .await
        .expect("the next turn comes");
    assert!(next.is_some(), "not served: the next request takes it over");
    assert!(
        !sessions
            .local
            .has_session(&opened.as_str().into())
            .await
            .unwrap()
    );
    assert!(lock(&sessions.restoring).is_empty());
    let restored = sessions
        .restore_session(opened.as_str().into())
        .await
        .unwrap();
    assert!(matches!(restored, RestoreOutcome::Restored(_)), "afresh");
}
