//! Any app served on a free loopback port, for the test crates that build their own app.

use std::sync::Arc;

use tokio::sync::oneshot;
use wgllm_server::{HttpConfig, Service};

/// Serves `app` on a free port until the returned sender is dropped; the base URL.
pub async fn serve<S: Service>(app: Arc<S>) -> (String, oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(wgllm_server::serve(
        listener,
        app,
        HttpConfig::default(),
        async {
            let _ = rx.await;
        },
    ));
    (base, tx)
}
