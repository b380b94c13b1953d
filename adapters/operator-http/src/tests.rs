//! The three endpoints over a real socket.

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use quarry_ports::{Operations, Readiness, ReadinessCheck};
use quarry_testkit::scrape;

use crate::OperatorHttp;

#[derive(Debug, Default)]
struct Switch {
    down: AtomicBool,
}

#[async_trait::async_trait]
impl Operations for Switch {
    async fn metrics(&self) -> String {
        "# TYPE up gauge\nup 1\n".to_owned()
    }

    async fn readiness(&self) -> Readiness {
        let down = self.down.load(Ordering::SeqCst);
        Readiness::of(vec![ReadinessCheck {
            name: "policy",
            ok: !down,
            detail: if down { "no answer" } else { "answers" }.to_owned(),
        }])
    }
}

#[tokio::test]
async fn metrics_health_and_readiness_are_served() {
    let ops = Arc::new(Switch::default());
    let http = OperatorHttp::start("127.0.0.1:0".parse().unwrap(), ops.clone())
        .await
        .unwrap();
    assert_eq!(
        scrape::get(http.addr, "/healthz").await,
        (200, "ok\n".into())
    );
    let (status, body) = scrape::get(http.addr, "/metrics").await;
    assert_eq!((status, body.as_str()), (200, "# TYPE up gauge\nup 1\n"));

    let (status, body) = scrape::get(http.addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    ops.down.store(true, Ordering::SeqCst);
    let (status, body) = scrape::get(http.addr, "/readyz").await;
    assert_eq!(status, 503);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["ready"], false);
    assert_eq!(json["checks"][0]["detail"], "no answer");

    assert_eq!(scrape::get(http.addr, "/elsewhere").await.0, 404);
    let addr = http.addr;
    http.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "stopped listening"
    );
}
