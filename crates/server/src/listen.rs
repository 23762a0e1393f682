//! The listener: HTTP/1 connections served by hyper under the header timeout and the connection
//! cap of [`HttpConfig`], and a graceful shutdown (no new connection; those open finish the
//! response in flight, then close).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use serde_json::json;

use crate::error::ApiError;
use crate::metrics::Refusals;
use crate::HttpConfig;

/// Serves `router` on `listener` until `shutdown` completes, then waits for the open
/// connections to finish their responses.
pub(crate) async fn run(
    listener: TcpListener,
    router: axum::Router,
    cfg: &HttpConfig,
    refusals: Arc<Refusals>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The header timeout runs from a connection's opening and from the end of each response,
    // so it bounds idle keep-alive connections as well as slowly dribbled headers.
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: the next accept may succeed.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            refusals.count(503);
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's errors (a client gone, a header timeout) end only that connection.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection past the cap with a 503 (if it reads within a second) and closes it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let e = ApiError::overloaded(0);
    let body = json!({"error": {
        "message": "The server has too many open connections; retry later",
        "type": e.kind, "param": null, "code": e.code,
    }})
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let answer = [head.as_bytes(), body.as_bytes()].concat();
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
    let _ = stream.shutdown().await;
}
