// The engine's thread: a dedicated module worker that owns wgllm-web's WebEngine, so compiling
// kernels, uploading weights and generating never block the page. Requests run one at a time in
// the order they arrive; `abort`, `cache.list` and `cache.delete` are answered at once.
// index.js is the only client; the protocol is internal to the package.
//
// page → worker: {id, type, ...}
//   open       {device}                                   → {adapter, gpu}
//   load       {url | file, sha256, contextLength, cache} → {summary, kind, fromCache, stored,
//                                                            seconds, by}
//   chat       {messages, options}                        → {text, finish, promptTokens,
//                                                            cachedTokens, generatedTokens,
//                                                            promptTps, generateTps}
//   embed      {texts, normalize, truncate}               → [Float32Array]
//   transcribe {bytes, name, language, translate, format, fallback} → string
//   abort      {target}                                   the request `target` stops (if it
//                                                            has not started: never starts)
//   cache.list {}                                         → [{url, bytes, sha256, stored}]
//   cache.delete {url}                                    → whether it was cached
// worker → page: {id, type: 'result', value} | {id, type: 'error', name, message}
//                | {id, type: 'progress', phase, loaded, total}   phase: download | cache | compile
//                | {id, type: 'piece', text}                      generated text
//                | {id, type: 'tprogress', fraction}              of the audio transcribed
import init, { WebEngine } from '../pkg/wgllm_web.js';

// The Cache API bucket that holds downloaded models under their URL.
const CACHE = 'wgllm-models';
const SHA_HEADER = 'x-wgllm-sha256';
const STORED_HEADER = 'x-wgllm-stored';

const post = (id, type, data = {}) => postMessage({ id, type, ...data });
const message = (e) => (e && e.message ? e.message : String(e));
const abortError = () => new DOMException('the request was aborted', 'AbortError');
// Requests asked to stop, by id.
const aborted = new Set();

// Progress at most every 100 ms (a download arrives in thousands of chunks), and at the end.
function throttled(id, phase) {
  let last = 0;
  return (loaded, total) => {
    const now = performance.now();
    if (now - last >= 100 || (total && loaded === total)) {
      last = now;
      post(id, 'progress', { phase, loaded, total: total || 0 });
    }
  };
}

async function open({ device }) {
  await init();
  const engine = await WebEngine.open(device || 'webgpu', 2048);
  // wgpu reports only the browser's adapter description (often empty): add vendor and
  // architecture from the browser itself.
  const info = device === 'cpu' ? null : (await navigator.gpu?.requestAdapter())?.info;
  const adapter = [engine.adapter(), info && `${info.vendor} ${info.architecture}`]
    .filter((s) => s && s.trim()).join(' · ');
  return { engine, adapter };
}

const cacheAvailable = () => typeof caches !== 'undefined';

// The model at `url` as a stream: from the cache when it holds it (with the same sha256 when
// one is asked for), else from the network, stored into the cache as it arrives when `cache`.
async function source(url, sha256, cache, signal) {
  const store = cache && cacheAvailable() ? await caches.open(CACHE) : null;
  if (store) {
    const hit = await store.match(url);
    const known = hit?.headers.get(SHA_HEADER) || '';
    if (hit && (!sha256 || !known || known === sha256.toLowerCase())) {
      const total = Number(hit.headers.get('content-length')) || 0;
      return { stream: hit.body, total, fromCache: true, store };
    }
    if (hit) await store.delete(url); // another file than the one asked for
  }
  const r = await fetch(url, { signal });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status} ${r.statusText}`);
  // A compressed body's length is not the file's.
  const total = r.headers.get('content-encoding') ? 0 : Number(r.headers.get('content-length')) || 0;
  if (!store) return { stream: r.body, total, fromCache: false };
  if (total && navigator.storage?.estimate) {
    const { usage = 0, quota = 0 } = await navigator.storage.estimate();
    if (quota && usage + total > quota) {
      const mb = (n) => `${(n / 1e6).toFixed(0)} MB`;
      throw new Error(`the model is ${mb(total)} but this site may store only ${mb(Math.max(0,
        quota - usage))} more: delete cached models (engine.cache.delete) or load with ` +
        '{cache: false}');
    }
  }
  const [forEngine, forCache] = r.body.tee();
  const headers = { 'content-type': 'application/octet-stream', [STORED_HEADER]: String(Date.now()) };
  if (total) headers['content-length'] = String(total);
  if (sha256) headers[SHA_HEADER] = sha256.toLowerCase();
  const put = store.put(url, new Response(forCache, { headers }));
  return { stream: forEngine, total, fromCache: false, store, put };
}

async function load(engine, id, { url, file, sha256, contextLength, cache }) {
  const t0 = performance.now();
  if (contextLength) engine.setContextLength(contextLength);
  const download = new AbortController();
  let src;
  if (file) src = { stream: file.stream(), total: file.size, fromCache: false };
  else src = await source(url, sha256, cache !== false, download.signal);
  const phase = src.fromCache ? 'cache' : 'download';
  const report = throttled(id, phase);
  let summary;
  try {
    // Each tensor goes to the GPU as it arrives: the file never sits whole in memory.
    summary = await engine.loadStream(src.stream, src.total, (loaded, known) => {
      if (aborted.has(id)) throw abortError();
      report(loaded, known ?? 0);
      if (loaded === known) post(id, 'progress', { phase: 'compile', loaded, total: known });
    }, sha256 || undefined);
  } catch (e) {
    download.abort();
    // A download that did not load (cut, corrupt, another file) is never kept, nor a cached
    // copy of the wrong hash; a cached file that fits no device here stays for another.
    await src.put?.catch(() => {});
    if (src.store && url && (!src.fromCache || /sha256/.test(message(e)))) await src.store.delete(url);
    throw aborted.has(id) ? abortError() : e;
  }
  let stored = src.fromCache;
  if (src.put) {
    // A full disk fails the copy, not the load.
    stored = await src.put.then(() => true, () => false);
  }
  return {
    summary, kind: engine.modelKind(), fromCache: src.fromCache, stored,
    seconds: (performance.now() - t0) / 1000, by: 'loadStream',
  };
}

async function chat(engine, id, { messages, options }) {
  const r = await engine.generateChat(messages, options, (text) => {
    post(id, 'piece', { text });
    return !aborted.has(id);
  });
  if (r.stop === 'callback') throw abortError();
  return {
    text: r.text, finish: r.stop === 'length' ? 'length' : 'stop',
    promptTokens: r.promptTokens, cachedTokens: r.cachedTokens, generatedTokens: r.generatedTokens,
    promptTps: r.promptTps, generateTps: r.generateTps,
  };
}

async function embed(engine, id, { texts, normalize, truncate }) {
  return engine.embed(texts, normalize, truncate);
}

async function transcribe(engine, id, { bytes, name, language, translate, format, fallback }) {
  return engine.transcribe(new Uint8Array(bytes), name, language || 'auto', !!translate,
    format || 'text', fallback !== false, (fraction) => post(id, 'tprogress', { fraction }));
}

async function cacheList() {
  if (!cacheAvailable()) return [];
  const store = await caches.open(CACHE);
  const out = [];
  for (const req of await store.keys()) {
    const r = await store.match(req);
    out.push({
      url: req.url,
      bytes: Number(r?.headers.get('content-length')) || 0,
      sha256: r?.headers.get(SHA_HEADER) || null,
      stored: Number(r?.headers.get(STORED_HEADER)) || null,
    });
  }
  return out;
}

async function cacheDelete({ url }) {
  return cacheAvailable() && (await caches.open(CACHE)).delete(url);
}

let opened = null;
const queued = { load, chat, embed, transcribe };
const immediate = {
  abort: ({ target }) => { aborted.add(target); return true; },
  'cache.list': cacheList,
  'cache.delete': cacheDelete,
};
let queue = Promise.resolve();

onmessage = ({ data }) => {
  const { id, type } = data;
  const answer = (p) => p.then(
    (value) => post(id, 'result', { value }),
    (e) => post(id, 'error', { name: e?.name || 'Error', message: message(e) }),
  );
  if (type === 'open') {
    opened = open(data);
    answer(opened.then(({ adapter, engine }) => ({ adapter, gpu: engine.adapter() })));
  } else if (immediate[type]) {
    answer(Promise.resolve().then(() => immediate[type](data)));
  } else if (queued[type] && opened) {
    const run = queue.then(async () => {
      if (aborted.has(id)) throw abortError();
      const { engine } = await opened;
      return queued[type](engine, id, data);
    });
    queue = run.catch(() => {}).then(() => aborted.delete(id));
    answer(run);
  } else {
    answer(Promise.reject(new Error(opened ? `unknown request '${type}'` : 'the engine is not open')));
  }
};
