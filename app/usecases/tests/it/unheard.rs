//! A server whose announcements went unheard because its only session died: reconnecting is the
//! supervisor's, on the circuit's schedule, and the session that replaces the dead one asks for
//! the watched URIs once.

use std::sync::Mutex;

use quarry_ports::UpstreamSession;

use super::{supervision::service_with, *};

/// What a [`flaky`] connector saw and made.
#[derive(Default)]
struct Made {
    /// The sessions opened, in order.
    sessions: Mutex<Vec<Arc<FakeSession>>>,
    /// The observer the last session opened was given.
    observer: Mutex<Option<Arc<dyn UpstreamObserver>>>,
    /// When each attempt to connect was made.
    attempts: Mutex<Vec<tokio::time::Instant>>,
}

impl Made {
    fn session(&self, n: usize) -> Arc<FakeSession> {
        self.sessions.lock().unwrap()[n].clone()
    }

    /// Seconds from `from` to each attempt after the first `skip`.
    fn offsets(&self, skip: usize, from: tokio::time::Instant) -> Vec<u64> {
        self.attempts.lock().unwrap()[skip..]
            .iter()
            .map(|t| (*t - from).as_secs())
            .collect()
    }
}

/// A connector whose first `up` attempts open a new session of the `docs` server and whose
/// later ones are refused.
fn flaky(up: usize) -> (Arc<dyn UpstreamConnector>, Arc<Made>) {
    let made = Arc::new(Made::default());
    let seen = made.clone();
    let mut connector = MockUpstreamConnector::new();
    connector
        .expect_connect()
        .returning(move |_, _, _, observer| {
            let mut attempts = seen.attempts.lock().unwrap();
            attempts.push(tokio::time::Instant::now());
            if attempts.len() > up {
                return Err(UpstreamError::Unreachable("connection refused".into()));
            }
            *seen.observer.lock().unwrap() = Some(observer);
            let session = Arc::new(docs_session());
            seen.sessions.lock().unwrap().push(session.clone());
            Ok(session as Arc<dyn UpstreamSession>)
        });
    (Arc::new(connector), made)
}

/// A supervised service over `connector` with an agent watching [`A`]; jitter off, so the
/// schedule is exact, and a circuit that stays closed.
async fn watching(connector: Arc<dyn UpstreamConnector>) -> Arc<ResourceService> {
    let supervision = Supervision {
        jitter: 0.0,
        circuit_threshold: 100,
        ..Supervision::default()
    };
    let store = Arc::new(FakeVersionStore::new(Retention::default()));
    let service = service_with(connector, store, supervision);
    service.start_supervision();
    service
        .watch(&ResourceUri::parse(A).unwrap())
        .await
        .unwrap();
    service
}

/// The only session dies and says its announcements went unheard, as a real one does when its
/// process exits.
async fn dies(made: &Made) -> tokio::time::Instant {
    made.session(0).closed.store(true, Ordering::SeqCst);
    let observer = made.observer.lock().unwrap().clone().unwrap();
    let died = tokio::time::Instant::now();
    observer.unheard(&ServerName::parse("docs").unwrap()).await;
    died
}

// traces: AV-1, CA-2 — a server that dies under a watch and stays down is tried on the backoff
// schedule alone (1, 2, 4, 8, 16, 30 s), measured on tokio's paused clock: the check of what
// went unheard opens no connection of its own beside the supervisor's.
#[tokio::test(start_paused = true)]
async fn av_1_a_server_lost_under_a_watch_is_tried_on_the_schedule_alone() {
    let (connector, made) = flaky(1);
    let service = watching(connector).await;
    let died = dies(&made).await;
    tokio::time::sleep(Duration::from_secs(92)).await;
    assert_eq!(made.offsets(1, died), [0, 1, 3, 7, 15, 31, 61, 91]);
    let status = service.servers_status();
    assert_eq!(status[0].status, quarry_domain::ConnectionStatus::Error);
    service.shutdown().await;
}

// traces: CA-2 — a server that dies under a watch and is back at once is reconnected at once,
// and the new session is asked for the watched URI once (not once by the session that replaces
// the dead one and again by the check).
#[tokio::test(start_paused = true)]
async fn ca_2_a_server_back_at_once_is_asked_for_the_watched_uris_once() {
    let (connector, made) = flaky(2);
    let service = watching(connector).await;
    let died = dies(&made).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(made.offsets(1, died), [0], "not reconnected at once");
    assert_eq!(
        made.session(1).subscribes.load(Ordering::SeqCst),
        1,
        "the new session was asked for the watched URI more than once"
    );
    service.shutdown().await;
}
