//! The bounds of one request: its body is read whole (within `http.max_body_kb`) so its
//! JSON-RPC message can be checked before rmcp sees it, and its answer must end within
//! `http.request_timeout_seconds`. An answer not begun by then is 504; an event stream still
//! open then gets a JSON-RPC error for the request and ends, and so does a request on a
//! 2025-11-25 session, whose answer rmcp would have begun as an event stream at once, cut
//! before it began (waiting for its turn, or answered by the direct path): its error comes as
//! one JSON body, status 200. The caller's in-flight permit is
//! held until the answer's last byte, and so is its turn among the requests handled at once
//! (`http.max_requests_in_flight`), which it waits for within its time: both are a [`Hold`],
//! which the handler of a request keeps too, so that work an answer is no longer wanted for (its
//! client hung up, or the bound passed) still counts until it ends.

use std::{
    sync::{
        Arc, OnceLock, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    body::{Body, Bytes},
    extract::Request,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::Instant,
};

use super::{message::Message, refuse};

/// The request with its body read, and what the guard needs of the JSON-RPC message it holds
/// (None when it is not JSON: rmcp answers that).
pub(super) async fn read_message(
    request: Request,
    max: usize,
) -> Result<(Request, Option<Message>), Response> {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max).await else {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is larger than http.max_body_kb",
        ));
    };
    let message = Message::read(&bytes);
    Ok((Request::from_parts(parts, Body::from(bytes)), message))
}

/// What a request holds while it counts against the bounds: its agent's in-flight permit
/// (`http.max_requests_per_agent`) and, once it has one, its turn among the requests handled at
/// once. Given back when the last holder lets go: the answer's body, and the handler of the
/// request through its [`Claim`].
#[derive(Debug)]
pub(crate) struct Hold {
    _permit: OwnedSemaphorePermit,
    turn: OnceLock<OwnedSemaphorePermit>,
    /// When the answer must have ended, for a request bounded in time.
    deadline: Option<Instant>,
    /// Cut before its answer begins, the request gets the JSON-RPC error an event stream would
    /// have ended with, not a 504 (see [`Hold::cut_as_a_stream_would_be`]).
    error_when_cut: AtomicBool,
}

impl Hold {
    /// What a request holds with `permit`, its answer due within `limit` from now.
    pub(super) fn new(permit: OwnedSemaphorePermit, limit: Option<Duration>) -> Arc<Self> {
        Arc::new(Self {
            _permit: permit,
            turn: OnceLock::new(),
            deadline: limit.map(|l| Instant::now() + l),
            error_when_cut: AtomicBool::new(false),
        })
    }

    /// Called for a request on a 2025-11-25 session, whose answer rmcp begins as an event stream
    /// at once (or the direct path gives where rmcp would have): cut at the time bound before
    /// its answer begins (while it waited for its turn, or the direct path worked), the request
    /// then gets what rmcp's stream would have ended with, the JSON-RPC error for it, as one
    /// JSON body with status 200. A client of that era takes it as the request's error; a 504
    /// would be a failure of the transport.
    pub(super) fn cut_as_a_stream_would_be(&self) {
        self.error_when_cut.store(true, Ordering::Relaxed);
    }

    /// How long the answer may still take (None: no bound).
    pub(crate) fn answer_within(&self) -> Option<Duration> {
        self.deadline
            .map(|at| at.saturating_duration_since(Instant::now()))
    }
}

/// The way to a request's [`Hold`], in its extensions, for its handler to keep while it works.
/// Weak, so that a copy of the request's parts kept anywhere holds nothing.
#[derive(Debug, Clone)]
pub(crate) struct Claim(pub(super) Weak<Hold>);

impl Claim {
    /// The hold, while the request still holds it (None once its answer has been dropped).
    pub(crate) fn keep(&self) -> Option<Arc<Hold>> {
        self.0.upgrade()
    }
}

/// The JSON-RPC error a request gets when it runs out of time.
fn timed_out(id: Option<&Value>, limit: Duration) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {
            "code": -32001,
            "message": format!(
                "E009 the request took longer than http.request_timeout_seconds ({} s)",
                limit.as_secs()
            ),
        },
    })
}

/// The event a stream gets when its request runs out of time.
fn timed_out_event(id: Option<&Value>, limit: Duration) -> Bytes {
    Bytes::from(format!(
        "event: message\ndata: {}\n\n",
        timed_out(id, limit)
    ))
}

/// Runs `answer` within `limit`, the time `hold` was made with (None: no limit, for event
/// streams a client keeps open), its body too, holding `hold` until the body ends; with
/// `admission`, `answer` starts once it has a turn there, put in `hold`.
pub(super) async fn within(
    answer: impl Future<Output = Response>,
    limit: Option<Duration>,
    id: Option<Value>,
    hold: Arc<Hold>,
    admission: Option<Arc<Semaphore>>,
) -> Response {
    let deadline = hold.deadline;
    // The turn is waited for within the request's time.
    let answer = async {
        if let Some(admission) = admission
            && let Ok(turn) = admission.acquire_owned().await
        {
            // Nowhere else puts a turn, so this is the first.
            let _ = hold.turn.set(turn);
        }
        answer.await
    };
    let response = match deadline {
        Some(at) => match tokio::time::timeout_at(at, answer).await {
            Ok(answered) => answered,
            Err(_) => {
                tracing::warn!("a request ran past http.request_timeout_seconds");
                if let Some(limit) = limit
                    && hold.error_when_cut.load(Ordering::Relaxed)
                {
                    let error = timed_out(id.as_ref(), limit).to_string();
                    return (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/json")],
                        error,
                    )
                        .into_response();
                }
                return refuse(
                    StatusCode::GATEWAY_TIMEOUT,
                    "E009 the request took longer than http.request_timeout_seconds",
                );
            }
        },
        None => answer.await,
    };
    let (parts, body) = response.into_parts();
    let events = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let data = body.into_data_stream();
    let Some((deadline, limit)) = deadline.zip(limit) else {
        let stream = data.map(move |chunk| {
            let _held = &hold;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    };
    let stream = futures::stream::unfold(
        (data, Some(hold), id),
        move |(mut data, hold, id)| async move {
            hold.as_ref()?;
            tokio::select! {
                chunk = data.next() => chunk.map(|c| (c, (data, hold, id))),
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!("an answer ran past http.request_timeout_seconds; it was cut");
                    // The error ends the stream; the hold goes with it.
                    events.then(|| (Ok(timed_out_event(id.as_ref(), limit)), (data, None, None)))
                }
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(stream))
}
