// The chat page: opens WebGPU through wgllm-web, loads a GGUF from a file or URL with a progress
// bar, and streams greedy replies. `?model=URL` loads a model at start-up; `window.wgllm` exposes
// the state the end-to-end test (tests/e2e.mjs) waits on.
import init, { WebEngine } from './pkg/wgllm_web.js';

const $ = (id) => document.getElementById(id);
const state = { ready: false, loaded: false, busy: false, error: null, last: null };
window.wgllm = state;
let engine;

function fail(where, e) {
  state.error = `${where}: ${e && e.message ? e.message : e}`;
  $('summary').textContent = state.error;
}

// Reads a response or file stream into one buffer, reporting progress.
async function readAll(stream, total) {
  const reader = stream.getReader();
  const parts = [];
  let got = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    got += value.length;
    $('progress').value = total ? got / total : 0;
  }
  const bytes = new Uint8Array(got);
  let at = 0;
  for (const p of parts) { bytes.set(p, at); at += p.length; }
  return bytes;
}

async function load(stream, total) {
  state.loaded = false;
  state.error = null;
  $('summary').textContent = 'downloading…';
  try {
    const bytes = await readAll(stream, total);
    $('summary').textContent = 'compiling the model on the GPU…';
    await new Promise((r) => setTimeout(r, 0)); // let the page paint first
    const t0 = performance.now();
    const summary = engine.load(bytes);
    $('summary').textContent = `${summary} · ready in ${((performance.now() - t0) / 1000).toFixed(1)} s`;
    $('progress').value = 1;
    $('prompt').disabled = false;
    $('send').disabled = false;
    state.loaded = true;
  } catch (e) {
    fail('loading', e);
  }
}

async function loadUrl(url) {
  try {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    await load(r.body, Number(r.headers.get('content-length')) || 0);
  } catch (e) {
    fail('fetching', e);
  }
}

async function send(text) {
  state.busy = true;
  const user = document.createElement('div');
  user.className = 'user';
  user.textContent = text;
  const reply = document.createElement('div');
  reply.className = 'assistant';
  $('log').append(user, reply);
  try {
    const max = Number($('max').value) || 64;
    const r = await engine.generate(text, true, max, 0, (piece) => {
      reply.textContent += piece;
      $('log').scrollTop = $('log').scrollHeight;
      return true;
    });
    state.last = r;
    $('stats').textContent =
      `prompt ${r.promptTokens} tokens (${r.promptTps.toFixed(1)} t/s) · ` +
      `generated ${r.generatedTokens} tokens (${r.generateTps.toFixed(2)} tokens/s) · ${r.stop}`;
  } catch (e) {
    fail('generating', e);
  }
  state.busy = false;
}

async function main() {
  await init();
  try {
    engine = await WebEngine.open('webgpu', 1024);
  } catch (e) {
    $('adapter').textContent = 'no WebGPU (Chrome/Edge 113+, or --enable-unsafe-webgpu)';
    return fail('opening WebGPU', e);
  }
  // wgpu reports only the browser's adapter description (often empty): add vendor and
  // architecture from the browser itself.
  const info = (await navigator.gpu.requestAdapter())?.info;
  $('adapter').textContent = [engine.adapter(), info && `${info.vendor} ${info.architecture}`]
    .filter(Boolean).join(' · ');
  state.ready = true;
  $('file').onchange = () => {
    const f = $('file').files[0];
    if (f) load(f.stream(), f.size);
  };
  $('fetch').onclick = () => loadUrl($('url').value);
  $('chat').onsubmit = (ev) => {
    ev.preventDefault();
    const text = $('prompt').value.trim();
    if (text && !state.busy) {
      $('prompt').value = '';
      send(text);
    }
  };
  const model = new URLSearchParams(location.search).get('model');
  if (model) {
    $('url').value = model;
    await loadUrl(model);
  }
}

main();
