//! Serving the router on a TCP listener with bounds on connections: how
//! many may be open at once, how long a new one may take to send its first
//! request head, and how long one may sit idle between requests.
//!
//! Without these, a client that opens connections and sends half a header
//! holds a file descriptor each for as long as it likes; enough of them
//! starve the process of descriptors (for its database connections too).
//!
//! One watchdog per connection does both timeouts, from the requests the
//! connection's service sees: while no request is in flight, the connection
//! must deliver a complete request head within `header_read_timeout` of
//! being accepted, and within `idle_timeout` of its previous response;
//! otherwise it is closed. A request in flight (a long-poll claim, say) is
//! never cut by them — `request_timeout` bounds those — and closing a
//! connection with nothing in flight loses nothing: no handler has started.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Bounds on the HTTP connections of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once (default 2 048); further clients wait
    /// in the listen backlog until one closes. Keep it below the process's
    /// open-file limit, which database connections share.
    pub max_connections: usize,
    /// How long a new connection may take to send its first complete
    /// request head (default 10 s).
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight after
    /// its last response (default 60 s); the next request head must be
    /// complete within it.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 2_048,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `stop` is cancelled;
/// then accepts no more connections, lets requests in flight finish, closes
/// idle connections, and returns once every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let connections = TaskTracker::new();
    loop {
        // A free slot first: at the cap, clients wait in the backlog rather
        // than being accepted and costing a descriptor each.
        let slot = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was
                    // accepted: neither stops the server. Pause briefly so a
                    // lack of descriptors does not spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        connections.spawn(connection(stream, app.clone(), limits, stop.clone(), slot));
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// What a connection's watchdog knows: requests in flight and when the
/// connection last had none.
#[derive(Debug)]
struct Activity {
    in_flight: usize,
    idle_since: Instant,
    served: bool,
}

impl Activity {
    /// When the connection is to be closed if it stays idle, or `None`
    /// while a request is in flight.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        if self.in_flight > 0 {
            return None;
        }
        let allowed = if self.served {
            limits.idle_timeout
        } else {
            limits.header_read_timeout
        };
        Some(self.idle_since + allowed)
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Mutex::new(Activity {
        in_flight: 0,
        idle_since: Instant::now(),
        served: false,
    }));
    let tracked = activity.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let activity = tracked.clone();
        activity.lock().expect("activity lock").in_flight += 1;
        let app = app.clone();
        async move {
            let response: Result<Response<Body>, Infallible> =
                app.oneshot(req.map(Body::new)).await;
            let mut a = activity.lock().expect("activity lock");
            a.in_flight -= 1;
            a.served = true;
            a.idle_since = Instant::now();
            response
        }
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        // Re-read on every turn: a request may have started or ended.
        let deadline = activity.lock().expect("activity lock").deadline(&limits);
        let far = Instant::now() + limits.header_read_timeout.max(limits.idle_timeout);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.cancelled(), if !stopping => {
                // Idle connections close now; requests in flight finish.
                conn.as_mut().graceful_shutdown();
                stopping = true;
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)) => {
                let now = Instant::now();
                let due = activity.lock().expect("activity lock").deadline(&limits);
                if due.is_some_and(|d| d <= now) {
                    // Dropping the connection closes the socket; nothing is
                    // in flight, so no request is cut off.
                    tracing::debug!("closing a connection that sent no request in time");
                    return;
                }
            }
        }
    }
}
