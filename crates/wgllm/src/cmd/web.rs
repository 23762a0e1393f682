//! `wgllm web`: serves the browser chat page and the model cache under `/models/`, so the page can
//! fetch a cached GGUF from the same origin. The page is `--dir`, else the one built into the
//! binary (when `web/build.sh` had run before it was built: `build.rs`), else a checkout's
//! `web/` once built.

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
    wasm-bindgen-cli needed); a wgllm built after it holds the page and serves it from \
    anywhere. GET / is the page; GET /models/FILE is FILE in the model cache \
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
    /// The page's directory: index.html, app.js, lib/ and pkg/ from web/build.sh.
    /// (Default: the page built into this binary, else ./web.)
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

mod assets {
    include!(concat!(env!("OUT_DIR"), "/web_assets.rs"));
}

/// Where the page comes from.
enum Page {
    Dir(PathBuf),
    BuiltIn,
}

impl Page {
    fn choose(dir: Option<&Path>) -> Result<Page> {
        let built = |d: &Path| d.join("pkg").join("wgllm_web.js").is_file();
        match dir {
            Some(d) if built(d) => Ok(Page::Dir(d.to_path_buf())),
            Some(d) => bail!(
                "{} is missing: run web/build.sh first (it builds the page's wasm module), or \
                 point --dir at the page's directory",
                d.join("pkg").join("wgllm_web.js").display()
            ),
            None if !assets::PAGE.is_empty() => Ok(Page::BuiltIn),
            None if built(Path::new("web")) => Ok(Page::Dir(PathBuf::from("web"))),
            None => bail!(
                "this wgllm was built without the browser page and ./web/pkg is not here: in a \
                 checkout run web/build.sh, then build or install wgllm again (the page goes \
                 into the binary), or point --dir at a built page"
            ),
        }
    }

    fn describe(&self) -> String {
        match self {
            Page::Dir(d) => d.display().to_string(),
            Page::BuiltIn => "the page built into wgllm".into(),
        }
    }
}

/// Serves the page and the model cache until Ctrl-C, after printing the URL to open.
pub fn run(args: &Args, out: &mut impl Write) -> Result<()> {
    let page = Page::choose(args.dir.as_deref())?;
    let cache = model_cache_dir();
    let app = router(&page, &cache);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = bind(&args.host, args.port).await?;
        let addr = listener.local_addr()?;
        announce(out, addr, &page, &cache)?;
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
fn announce(out: &mut impl Write, addr: SocketAddr, page: &Page, cache: &Path) -> Result<()> {
    let base = format!("http://{addr}/");
    writeln!(
        out,
        "serving {} at {base} and the model cache {} at {base}models/ (Ctrl-C stops)",
        page.describe(),
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
fn router(page: &Page, cache: &Path) -> Router {
    let models = ServeDir::new(cache).append_index_html_on_directories(false);
    let r = Router::new().nest_service("/models", models);
    let r = match page {
        Page::Dir(dir) => r.fallback_service(ServeDir::new(dir)),
        Page::BuiltIn => r.fallback(built_in),
    };
    r.layer(middleware::from_fn(guard))
}

/// A file of the built-in page (`/` is index.html), with its content type.
async fn built_in(uri: axum::http::Uri) -> Response {
    let path = match uri.path().trim_start_matches('/') {
        "" => "index.html",
        p => p,
    };
    let Some((name, bytes)) = assets::PAGE.iter().find(|(n, _)| *n == path) else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let kind = match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, kind)], *bytes).into_response()
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
