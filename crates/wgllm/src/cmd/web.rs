//! `wgllm web`: serves the browser chat page (`web/`, built by `web/build.sh`) and the model cache
//! under `/models/`, so the page can fetch a cached GGUF from the same origin.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use clap::Args as ClapArgs;
use tower_http::services::ServeDir;
use wgllm_models::config::model_cache_dir;
use wgllm_models::pull::{self, KNOWN_MODELS};

/// Arguments of `wgllm web`.
#[derive(ClapArgs, Debug)]
#[command(
    after_help = "The page's wasm module is built by web/build.sh (wasm32 target and \
    wasm-bindgen-cli needed). GET / is the page; GET /models/FILE is FILE in the model cache \
    (where `wgllm pull` puts models), with byte ranges. Open the printed URL in a browser with \
    WebGPU (Chrome/Edge 113+); ?model=models/FILE loads that model at start-up."
)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the bound one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The page's directory: index.html, app.js, worker.js and pkg/ from web/build.sh.
    #[arg(long, default_value = "web")]
    pub dir: PathBuf,
}

/// Serves the page and the model cache until Ctrl-C, after printing the URL to open.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let glue = args.dir.join("pkg").join("wgllm_web.js");
    if !glue.is_file() {
        bail!(
            "{} is missing: run web/build.sh first (it builds the page's wasm module), or point \
             --dir at the page's directory",
            glue.display()
        );
    }
    let cache = model_cache_dir();
    let app = router(&args.dir, &cache);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = bind(&args.host, args.port).await?;
        let addr = listener.local_addr()?;
        announce(out, addr, &args.dir, &cache)?;
        axum::serve(listener, app)
            .with_graceful_shutdown(wgllm_server::ctrl_c())
            .await
            .context("serving the page")
    })
}

/// Listens on `host:port`, saying plainly when the port is taken.
async fn bind(host: &str, port: u16) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "{host}:{port} is already in use: stop the server on it or choose another --port"
            ),
            _ => anyhow::anyhow!("cannot listen on {host}:{port}: {e}"),
        })
}

/// Prints where the server listens and the URL to open (with the default model when cached).
fn announce(out: &mut impl Write, addr: SocketAddr, dir: &Path, cache: &Path) -> Result<()> {
    let base = format!("http://{addr}/");
    writeln!(
        out,
        "serving {} at {base} and the model cache {} at {base}models/ (Ctrl-C stops)",
        dir.display(),
        cache.display()
    )?;
    let default = &KNOWN_MODELS[0];
    match pull::cached(default, cache) {
        Some(_) => writeln!(out, "open {base}?model=models/{}", default.file)?,
        None => writeln!(
            out,
            "open {base} and choose a GGUF (`wgllm pull {}` puts the default model in the cache)",
            default.name
        )?,
    }
    out.flush()?;
    Ok(())
}

/// The page's files at `/`, the cache's at `/models/`; hidden names and traversal refused.
fn router(dir: &Path, cache: &Path) -> Router {
    let models = ServeDir::new(cache).append_index_html_on_directories(false);
    Router::new()
        .nest_service("/models", models)
        .fallback_service(ServeDir::new(dir))
        .layer(middleware::from_fn(guard))
}

/// Answers 403 to a path with a segment that is `..`, hidden (`.download-*`, `.gitignore`) or
/// holds a backslash, decoded or not; marks every answer `no-cache` so a rebuilt page is seen
/// (revalidation is cheap: the files carry Last-Modified).
async fn guard(req: Request, next: Next) -> Response {
    let raw = req.uri().path();
    let decoded = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
    let refused = [raw, decoded.as_ref()].iter().any(|p| {
        p.split('/')
            .any(|seg| seg.starts_with('.') || seg.contains('\\'))
    });
    if refused {
        return (StatusCode::FORBIDDEN, "forbidden path\n").into_response();
    }
    let mut resp = next.run(req).await;
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
