//! Connections served at once (`http.max_connections`): past the bound a new connection waits its
//! turn instead of being refused, and meanwhile the connections served close after their current
//! exchange (idle keep-alive ones at once), so waiting clients are served and no idle client
//! starves them. Clients here keep their connections open, as HTTP clients do, and open another
//! when the server closed an idle one before answering.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use quarry_testkit::fixture::HttpFixture;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use crate::{
    eras::{MODERN, meta},
    http::{Served, served},
    http_bounds::slow_fixture,
    support::{http_fixture, http_server},
};

/// `quarry serve --http` with `http.max_connections = max` over the fixture `notes` (the slow
/// one, whose `fixture://slow` takes 700 ms, with `slow`), and what must outlive it.
struct Bounded {
    served: Served,
    _notes: HttpFixture,
    _dir: tempfile::TempDir,
}

async fn bounded(max: usize, slow: bool) -> Bounded {
    let notes = if slow {
        slow_fixture().await
    } else {
        http_fixture("notes", 2).await
    };
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[http]\nmax_connections = {max}\n",
        http_server("notes", &notes.url)
    );
    let served = served(dir.path(), &config, &[]).await;
    Bounded {
        served,
        _notes: notes,
        _dir: dir,
    }
}

/// A stateless 2026-07-28 `resources/read` of `uri`, as one HTTP/1.1 keep-alive request.
fn read_request(addr: SocketAddr, uri: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
        "params": {"_meta": meta(), "uri": uri}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: resources/read\r\nMcp-Name: {uri}\r\nContent-Length: {}\r\n\r\n{body}",
        addr.port(),
        body.len()
    )
}

/// One answer: its status, head and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// A client's keep-alive connection.
struct Client {
    addr: SocketAddr,
    stream: TcpStream,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        Self { addr, stream }
    }

    /// Sends `request` and reads its answer; `None` when the server closed the connection
    /// before a byte of one.
    async fn exchange(&mut self, request: &str) -> Option<Answer> {
        self.stream.write_all(request.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) if buf.is_empty() => return None,
                Ok(0) | Err(_) => panic!("connection closed mid-answer"),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let status = head[9..12].parse().unwrap();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map(|v| v.trim().parse::<usize>().unwrap());
        let mut rest = buf.split_off(head_end);
        let body = match length {
            Some(n) => {
                while rest.len() < n {
                    self.more(&mut rest).await;
                }
                rest.truncate(n);
                rest
            }
            // Chunked: each chunk's size in hex on its own line, then the chunk, to a 0.
            None => {
                let mut body = Vec::new();
                loop {
                    let line_end = loop {
                        if let Some(i) = rest.windows(2).position(|w| w == b"\r\n") {
                            break i;
                        }
                        self.more(&mut rest).await;
                    };
                    let size = usize::from_str_radix(
                        String::from_utf8_lossy(&rest[..line_end]).trim(),
                        16,
                    )
                    .unwrap();
                    while rest.len() < line_end + 2 + size + 2 {
                        self.more(&mut rest).await;
                    }
                    body.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
                    rest.drain(..line_end + 2 + size + 2);
                    if size == 0 {
                        break body;
                    }
                }
            }
        };
        let body = String::from_utf8_lossy(&body).into_owned();
        Some(Answer { status, head, body })
    }

    async fn more(&mut self, buf: &mut Vec<u8>) {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed mid-answer");
        buf.extend_from_slice(&chunk[..n]);
    }

    /// As an HTTP client does: when the server closed the (idle) connection before answering,
    /// opens another and sends the request again.
    async fn send(&mut self, request: &str) -> Answer {
        for _ in 0..20 {
            if let Some(answer) = self.exchange(request).await {
                return answer;
            }
            self.stream = TcpStream::connect(self.addr).await.unwrap();
        }
        panic!("closed before answering twenty times over")
    }

    /// Whether the server closes this connection within `within`.
    async fn closed_within(&mut self, within: Duration) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(within, self.stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

// traces: TR-8 — connections are bounded (http.max_connections): with two served and idle, two
// more are each answered on the connection they opened, not left waiting behind the idle ones,
// and the idle two are closed to make room.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_idle_connections_make_room_for_waiting_ones() {
    let gw = bounded(2, false).await;
    let read = read_request(gw.served.addr, "mcp://notes/fixture_3A//item/1");
    let (mut a, mut b) = (
        Client::connect(gw.served.addr).await,
        Client::connect(gw.served.addr).await,
    );
    for client in [&mut a, &mut b] {
        let answer = client.exchange(&read).await.expect("answered");
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(!answer.head.contains("connection: close"), "{answer:?}");
    }
    let (mut c, mut d) = (
        Client::connect(gw.served.addr).await,
        Client::connect(gw.served.addr).await,
    );
    let (for_c, for_d) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(c.exchange(&read), d.exchange(&read))
    })
    .await
    .expect("the new connections were served while two idle ones were open");
    for answer in [for_c, for_d] {
        let answer = answer.expect("answered on the connection it opened, not closed unread");
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.body.contains("\"contents\""), "{answer:?}");
    }
    assert!(
        a.closed_within(Duration::from_secs(5)).await,
        "a stayed open"
    );
    assert!(
        b.closed_within(Duration::from_secs(5)).await,
        "b stayed open"
    );
}

// traces: TR-8 — a connection in the middle of an exchange is not cut to make room: its answer
// arrives whole (then the connection closes), and the connection waiting meanwhile is served
// after it.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_a_busy_connection_finishes_its_exchange_before_making_room() {
    let gw = bounded(1, true).await;
    let slow = read_request(gw.served.addr, "mcp://notes/fixture_3A//slow");
    let quick = read_request(gw.served.addr, "mcp://notes/fixture_3A//item/1");
    let mut busy = Client::connect(gw.served.addr).await;
    let (slow_answer, quick_answer) = tokio::join!(
        async {
            let answer = busy.exchange(&slow).await.expect("answered");
            (answer, Instant::now())
        },
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut waiting = Client::connect(gw.served.addr).await;
            let answer = waiting.send(&quick).await;
            (answer, Instant::now())
        },
    );
    assert_eq!(slow_answer.0.status, 200, "{:?}", slow_answer.0);
    assert!(slow_answer.0.body.contains("slow"), "{:?}", slow_answer.0);
    assert!(
        slow_answer.0.head.contains("connection: close"),
        "the busy connection was asked to close after its exchange: {:?}",
        slow_answer.0
    );
    assert_eq!(quick_answer.0.status, 200, "{:?}", quick_answer.0);
    assert!(
        quick_answer.0.body.contains("\"contents\""),
        "{:?}",
        quick_answer.0
    );
    assert!(
        quick_answer.1 >= slow_answer.1,
        "the waiting connection was served before the busy one's exchange ended"
    );
    assert!(busy.closed_within(Duration::from_secs(5)).await);
}

// traces: TR-8 — a connection let in while others still wait, which sends its request only
// later (as a slow client or one finishing a TLS handshake does), is served that request before it
// is closed to make room, not closed unread.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_a_connection_let_in_while_others_wait_is_served_its_first_request() {
    let gw = bounded(1, true).await;
    let slow = read_request(gw.served.addr, "mcp://notes/fixture_3A//slow");
    let quick = read_request(gw.served.addr, "mcp://notes/fixture_3A//item/1");
    let mut busy = Client::connect(gw.served.addr).await;
    let (held, (mut first, mut second)) = tokio::join!(busy.exchange(&slow), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (
            Client::connect(gw.served.addr).await,
            Client::connect(gw.served.addr).await,
        )
    });
    assert_eq!(held.expect("answered").status, 200);
    // The busy connection has closed: the first waiting one is in, the second still waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = first
        .exchange(&quick)
        .await
        .expect("answered on the connection it opened, not closed unread");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("\"contents\""), "{answer:?}");
    assert!(
        answer.head.contains("connection: close"),
        "let in while another waited, it makes room after its exchange: {answer:?}"
    );
    let answer = second.exchange(&quick).await.expect("answered");
    assert_eq!(answer.status, 200, "{answer:?}");
}

// traces: TR-8 — many more clients than connections served, each holding its connection open:
// every one is answered, none refused, in turns of the bound.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_more_clients_than_connections_are_all_answered() {
    const CLIENTS: usize = 64;
    let gw = bounded(4, false).await;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Client::connect(gw.served.addr).await);
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut client)| {
            let barrier = barrier.clone();
            let read = read_request(
                gw.served.addr,
                &format!("mcp://notes/fixture_3A//item/{}", 1 + i % 2),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                let answer = client.send(&read).await;
                // Held open until every client is answered, as a pool would hold it.
                (answer, client)
            })
        })
        .collect();
    let mut held = Vec::new();
    for task in tasks {
        let (answer, client) = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every client answered in time")
            .unwrap();
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.body.contains("\"contents\""), "{answer:?}");
        held.push(client);
    }
}

// traces: TR-8 — a client that opens a connection and stalls halfway through its request head
// does not keep its place: past 30 s it is closed, and the client waiting behind it is served.
#[tokio::test(flavor = "multi_thread")]
async fn tr_8_a_connection_stalled_in_its_head_does_not_keep_its_place() {
    let gw = bounded(1, false).await;
    let mut stalled = Client::connect(gw.served.addr).await;
    let part = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n",
        gw.served.addr.port()
    );
    stalled.stream.write_all(part.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let mut waiting = Client::connect(gw.served.addr).await;
    let read = read_request(gw.served.addr, "mcp://notes/fixture_3A//item/1");
    let answer = tokio::time::timeout(Duration::from_secs(45), waiting.send(&read))
        .await
        .expect("the waiting client was served once the stalled one's time was up");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("\"contents\""), "{answer:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "served after {:?}: the stalled connection did not hold the only place",
        started.elapsed()
    );
    // The stalled connection was closed (an answer saying so, if any, then the end).
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(
        Duration::from_secs(5),
        stalled.stream.read_to_end(&mut rest),
    )
    .await;
    assert!(ended.is_ok(), "the stalled connection is still open");
}
