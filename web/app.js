// The chat page: the engine runs in a module worker (worker.js), so the page stays responsive
// while kernels compile and tokens generate. Loads a GGUF from a file or URL with a progress bar
// and streams greedy replies in a conversation (New chat starts another). `?model=URL` loads a
// model at start-up; `window.wgllm` exposes the state the end-to-end test (tests/e2e.mjs) waits
// on.

const $ = (id) => document.getElementById(id);
const state = { ready: false, loaded: false, loadedBy: null, busy: false, error: null, last: null };
window.wgllm = state;
let reply = null; // the assistant's text being streamed

function fail(where, message) {
  state.error = `${where}: ${message}`;
  $('summary').textContent = state.error;
}

const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
worker.onerror = (e) => {
  e.preventDefault();
  fail('worker', e.message || 'failed to start (is pkg/ built? run web/build.sh)');
};

function load(request) {
  $('log').replaceChildren(); // a new model starts a new conversation
  state.loaded = false;
  state.error = null;
  $('progress').value = 0;
  $('summary').textContent = 'downloading…';
  worker.postMessage(request);
}

function send(text) {
  state.busy = true;
  const user = document.createElement('div');
  user.className = 'user';
  user.textContent = text;
  reply = document.createElement('div');
  reply.className = 'assistant';
  $('log').append(user, reply);
  worker.postMessage({ type: 'generate', text, maxTokens: Number($('max').value) || 64 });
}

// A new conversation: the worker forgets the turns (a new model does too).
function newChat() {
  $('log').replaceChildren();
  $('stats').textContent = '';
  worker.postMessage({ type: 'reset' });
}

const handlers = {
  ready({ adapter }) {
    $('adapter').textContent = adapter;
    state.ready = true;
    const model = new URLSearchParams(location.search).get('model');
    if (model) {
      $('url').value = model;
      load({ type: 'load', url: new URL(model, location.href).href });
    }
  },
  progress({ loaded, total }) {
    if (total) $('progress').value = loaded / total;
    else $('progress').removeAttribute('value'); // size unknown: an indeterminate bar
  },
  compiling() {
    $('progress').value = 1;
    $('summary').textContent = 'compiling the model on the GPU…';
  },
  loaded({ summary, seconds, by }) {
    $('summary').textContent = `${summary} · ready in ${seconds.toFixed(1)} s`;
    $('progress').value = 1;
    $('prompt').disabled = false;
    $('send').disabled = false;
    state.loadedBy = by;
    state.loaded = true;
  },
  token({ piece }) {
    reply.textContent += piece;
    $('log').scrollTop = $('log').scrollHeight;
  },
  done({ result: r }) {
    state.last = r;
    $('stats').textContent =
      `prompt ${r.promptTokens} tokens (${r.promptTps.toFixed(1)} t/s` +
      `${r.cachedTokens ? `, ${r.cachedTokens} more kept from the last turn` : ''}) · ` +
      `generated ${r.generatedTokens} tokens (${r.generateTps.toFixed(2)} tokens/s) · ${r.stop}`;
    state.busy = false;
  },
  error({ where, message }) {
    if (where === 'opening WebGPU') {
      $('adapter').textContent = 'no WebGPU (Chrome/Edge 113+, or --enable-unsafe-webgpu)';
    }
    fail(where, message);
    state.busy = false;
  },
};
worker.onmessage = ({ data }) => handlers[data.type](data);

$('file').onchange = () => {
  const file = $('file').files[0];
  if (file) load({ type: 'load', file });
};
$('fetch').onclick = () => load({ type: 'load', url: new URL($('url').value, location.href).href });
$('new').onclick = () => {
  if (!state.busy) newChat();
};
$('chat').onsubmit = (ev) => {
  ev.preventDefault();
  const text = $('prompt').value.trim();
  if (text && !state.busy) {
    $('prompt').value = '';
    send(text);
  }
};
