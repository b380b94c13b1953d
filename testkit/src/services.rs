//! Where the tests' shared services are, and names that keep each test's data apart.
//!
//! Tests reach PostgreSQL and Redis through `QUARRY_TEST_POSTGRES_URL` and
//! `QUARRY_TEST_REDIS_URL`, defaulting to the local servers on their standard loopback ports
//! (`cargo xtask ci` starts its own and sets these where none answers). A test that needs one
//! and cannot reach it fails; it never skips. Each test works in a schema or under a key prefix
//! of its own, from [`unique_name`], and removes it when done.

use std::sync::atomic::{AtomicU64, Ordering};

/// The PostgreSQL the tests use.
pub fn postgres_url() -> String {
    std::env::var("QUARRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// The Redis the tests use.
pub fn redis_url() -> String {
    std::env::var("QUARRY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A name no other test, process or run uses: lowercase letters, digits and `_`, starting with
/// `prefix` (a schema name or a key prefix).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A Redis server of the test's own, on a free loopback port, that the test can kill and start
/// again on the same port (from the `redis-server` on the PATH: Debian's `redis-server`).
#[derive(Debug)]
pub struct OwnRedis {
    port: u16,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    /// Starts one, waiting until it answers.
    ///
    /// # Panics
    /// When `redis-server` is not installed or does not start.
    pub fn start() -> Self {
        let port = free_port();
        let mut redis = Self { port, child: None };
        redis.restart();
        redis
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills it (SIGKILL): connections drop, nothing is kept.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, waiting until it answers.
    ///
    /// # Panics
    /// As [`OwnRedis::start`].
    pub fn restart(&mut self) {
        self.kill();
        let child = std::process::Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--port",
            ])
            .arg(self.port.to_string())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run redis-server (install Debian's redis-server): {e}")
            });
        self.child = Some(child);
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("redis-server did not start on port {}", self.port);
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port (bound and released: free unless taken in between).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// A TCP relay in front of a service, which a test cuts (every connection reset, new ones
/// refused, as when the service dies) and restores on the same port (as when it is back).
#[derive(Debug)]
pub struct Relay {
    port: u16,
    target: std::net::SocketAddr,
    stop: Option<tokio::sync::watch::Sender<bool>>,
}

impl Relay {
    /// A relay to `target` on a free loopback port, relaying from now on.
    pub async fn start(target: std::net::SocketAddr) -> Self {
        let mut relay = Self {
            port: free_port(),
            target,
            stop: None,
        };
        relay.restore().await;
        relay
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Resets every relayed connection and refuses new ones.
    pub fn cut(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }

    /// Relays to `target` from now on, on the same port, as a load balancer does once a
    /// replica has gone: every connection to the old target is reset.
    pub async fn switch(&mut self, target: std::net::SocketAddr) {
        self.target = target;
        self.restore().await;
    }

    /// Relays again, on the same port.
    ///
    /// # Panics
    /// When the port cannot be bound again.
    pub async fn restore(&mut self) {
        self.cut();
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot bind the relay's port {}: {e}", self.port),
            }
        };
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let target = self.target;
        tokio::spawn(async move {
            loop {
                let mut until = stopped.clone();
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = until.changed() => return,
                };
                let Ok((mut inbound, _)) = accepted else {
                    return;
                };
                let mut until = stopped.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        // Both ends close, as a dead server's connections do.
                        _ = until.changed() => {}
                    }
                });
            }
        });
        self.stop = Some(stop);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}
