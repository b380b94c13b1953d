//! Asking the operator endpoints: a plain HTTP/1.1 GET, and the Prometheus reference parser
//! (`prometheus_client`, from the peers' venv) over a scraped exposition.

use std::{collections::BTreeMap, net::SocketAddr, path::Path};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr`: the status and the body.
///
/// # Panics
/// When the connection fails or the answer is not HTTP.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let ask = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(ask.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        status,
        if chunked {
            dechunked(body)
        } else {
            body.to_owned()
        },
    )
}

/// A chunked body's content.
fn dechunked(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// One sample of a parsed exposition.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Sample {
    /// The metric family (`quarry_requests`, for `quarry_requests_total`).
    pub family: String,
    /// Its type: counter, gauge, histogram...
    #[serde(rename = "type")]
    pub kind: String,
    /// The sample's own name (`quarry_requests_total`, `..._bucket`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Parses `exposition` with Prometheus' Python client parser.
///
/// # Panics
/// When the venv is missing (run `cargo xtask peers`) or the parser refuses the text.
pub fn parse(exposition: &str) -> Vec<Sample> {
    let python = crate::peers::dir().join("venv/bin/python");
    assert!(
        python.is_file(),
        "prometheus_client is not installed at {}; run `cargo xtask peers` (the test command does)",
        python.display()
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/parse_metrics.py");
    let mut child = std::process::Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the parser");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(exposition.as_bytes()).expect("write");
    }
    let out = child.wait_with_output().expect("parser output");
    assert!(
        out.status.success(),
        "prometheus_client refused the exposition: {}\n{exposition}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a sample"))
        .collect()
}

/// The value of the sample named `name` whose labels include `labels`, if there is one.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close` among its headers) to `addr`:
/// the status, the header block and the body as received.
///
/// # Panics
/// When the connection fails or the answer is not HTTP.
pub async fn send(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, head.to_ascii_lowercase(), body.to_owned())
}
