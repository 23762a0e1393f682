//! Reading a model from a JavaScript `ReadableStream` (a `fetch` body, `File.stream()`) into a
//! streamed load ([`Engine::begin_stream`]): chunk by chunk, so at most one chunk of the file is
//! in wasm memory at a time on top of the header.

use js_sys::{Function, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{ReadableStream, ReadableStreamDefaultReader, ReadableStreamReadResult};

use crate::engine::{Engine, WebError};

/// Largest piece of a chunk copied into wasm memory at once (browsers' chunks are usually 64 KiB;
/// a `Blob`'s may be the whole blob).
const PIECE: u32 = 1 << 20;

/// A JavaScript error as text.
fn describe(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// Loads the GGUF file `stream` gives into `engine`, `total` bytes long when known (a
/// `Content-Length`; `None` when absent or when the body is compressed), whose sha256 must be
/// `sha256` when given, calling `on_progress(loaded, total)` after each chunk. Returns the
/// model's summary. On any error the stream is cancelled and nothing stays loaded.
pub async fn load_stream(
    engine: &mut Engine,
    stream: &ReadableStream,
    total: Option<u64>,
    sha256: Option<&str>,
    on_progress: &Function,
) -> Result<String, WebError> {
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let r = match engine.begin_stream(total, sha256) {
        Ok(()) => read_all(engine, &reader, total, on_progress).await,
        Err(e) => Err(e),
    };
    if r.is_err() {
        // Stops the download (the promise settles on its own).
        let _ = reader.cancel();
        engine.abort_stream();
    }
    r
}

async fn read_all(
    engine: &mut Engine,
    reader: &ReadableStreamDefaultReader,
    total: Option<u64>,
    on_progress: &Function,
) -> Result<String, WebError> {
    let js_total = total.map_or(JsValue::NULL, |t| JsValue::from_f64(t as f64));
    let mut loaded = 0u64;
    let mut buf = Vec::new();
    loop {
        let result: ReadableStreamReadResult = JsFuture::from(reader.read())
            .await
            .map_err(|e| WebError::Stream(describe(&e)))?
            .unchecked_into();
        if result.get_done().unwrap_or(false) {
            break;
        }
        let chunk: Uint8Array = result
            .get_value()
            .dyn_into()
            .map_err(|v| WebError::Stream(format!("a chunk is not a Uint8Array: {v:?}")))?;
        let n = chunk.length();
        let mut at = 0;
        while at < n {
            let end = n.min(at + PIECE);
            buf.resize((end - at) as usize, 0);
            chunk.subarray(at, end).copy_to(&mut buf);
            engine.feed(&buf)?;
            at = end;
        }
        loaded += u64::from(n);
        on_progress
            .call2(&JsValue::NULL, &JsValue::from_f64(loaded as f64), &js_total)
            .map_err(|e| WebError::Stream(format!("onProgress threw: {}", describe(&e))))?;
    }
    engine.finish_stream()
}
