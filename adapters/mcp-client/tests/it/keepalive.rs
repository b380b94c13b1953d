//! Reads over streamable HTTP keep their connections: a POST's event stream is read to its end
//! after rmcp has its answer (rmcp reads on for only 50 ms), so the connection goes back to the
//! pool instead of being closed and the next request opening another (over HTTPS, with a TLS
//! handshake). A server that never ends its streams holds no connection past the grace.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use quarry_domain::{Endpoint, ServerName, ServerSpec};
use quarry_testkit::hostile::HttpHostile;
use tokio::net::{TcpListener, TcpStream};

use super::{MB, connect};

/// A TCP forwarder in front of `upstream` (`http://127.0.0.1:PORT/mcp`) that counts the
/// connections it accepted and those still open.
struct Counted {
    url: String,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
}

async fn counted(upstream: &str) -> Counted {
    let rest = upstream.strip_prefix("http://").unwrap();
    let (target, path) = rest.split_once('/').unwrap();
    let target = target.to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/{path}", listener.local_addr().unwrap());
    let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, o) = (accepted.clone(), open.clone());
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            o.fetch_add(1, Ordering::SeqCst);
            let (target, o) = (target.clone(), o.clone());
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    Counted {
        url,
        accepted,
        open,
    }
}

fn spec(url: &str) -> ServerSpec {
    ServerSpec::new(
        ServerName::parse("counted").unwrap(),
        Endpoint::Http {
            url: url.to_owned(),
        },
    )
}

#[tokio::test]
async fn reads_keep_their_connection_when_the_server_ends_its_streams_late() {
    // The server ends each answer's stream 200 ms after the answer: past rmcp's own 50 ms of
    // reading on, within the grace.
    let hostile = HttpHostile::start(&["--end-streams-late"]).await;
    let forwarder = counted(&hostile.url).await;
    let session = connect(&spec(&forwarder.url)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after_handshake = forwarder.accepted.load(Ordering::SeqCst);
    for _ in 0..5 {
        let read = session.read("hostile://one", MB).await.unwrap();
        assert_eq!(read.content.body, quarry_domain::Body::Text("one".into()));
        // The next read comes once this one's stream has ended.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let during_reads = forwarder.accepted.load(Ordering::SeqCst) - after_handshake;
    assert!(
        during_reads <= 1,
        "5 reads opened {during_reads} connections (one per read: each answer's stream was \
         dropped before its end, which closes the connection)"
    );
    session.close().await;
}

#[tokio::test]
async fn a_server_that_never_ends_its_streams_holds_no_connection_past_the_grace() {
    let hostile = HttpHostile::start(&["--hold-streams"]).await;
    let forwarder = counted(&hostile.url).await;
    let session = connect(&spec(&forwarder.url)).await;
    for _ in 0..5 {
        let started = Instant::now();
        let read = session.read("hostile://one", MB).await.unwrap();
        assert_eq!(read.content.body, quarry_domain::Body::Text("one".into()));
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "the answer waited for the stream: {:?}",
            started.elapsed()
        );
    }
    // Every held stream is given up a second after its answer (then 1 s of slack).
    let deadline = Instant::now() + Duration::from_secs(2);
    while forwarder.open.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        forwarder.open.load(Ordering::SeqCst),
        0,
        "connections still open 2 s after their answers, of {} opened",
        forwarder.accepted.load(Ordering::SeqCst)
    );
    session.close().await;
}
