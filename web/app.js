// The chat page, built on the wgllm-web package (lib/): the engine runs in its Web Worker, so
// the page stays responsive while kernels compile and tokens generate. Pick a cached or
// suggested model (or a file, or any URL), set the context and sampling, chat with streamed
// Markdown replies, stop or regenerate a reply. A Whisper model shows the speech panel instead.
// `?model=URL` loads a model at start-up; `window.wgllm` holds the state the end-to-end tests
// (tests/e2e*.mjs) wait on, and the engine itself.

import { createEngine, webgpuSupport } from './lib/index.js';
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const state = {
  ready: false, loaded: false, loadedBy: null, fromCache: false, busy: false, error: null,
  last: null, speech: false, transcript: null, engine: null,
};
window.wgllm = state;
// Models the page offers before any is cached: served by `wgllm web` from its model cache.
const SUGGESTED = [
  { url: 'models/SmolLM2-135M-Instruct.Q4_1.gguf', label: 'SmolLM2 135M Instruct (Q4_1)' },
];
let engine = null;
let messages = []; // the conversation: {role, content} of every finished turn
let running = null; // the AbortController of the reply being generated

const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

function fail(where, message) {
  state.error = `${where}: ${message}`;
  $('summary').textContent = state.error;
}

function busy(on) {
  state.busy = on;
  $('send').disabled = on || !state.loaded || state.speech;
  $('stop').hidden = !on || state.speech;
  $('regen').disabled = on || !messages.some((m) => m.role === 'assistant');
}

async function refreshModels() {
  const cached = await engine.cache.list();
  const group = (label, items) => {
    const g = document.createElement('optgroup');
    g.label = label;
    for (const { url, text } of items) {
      const o = document.createElement('option');
      o.value = url;
      o.textContent = text;
      g.append(o);
    }
    return g;
  };
  const cachedUrls = new Set(cached.map((c) => c.url));
  const suggested = SUGGESTED.map((s) => ({ url: new URL(s.url, location.href).href, text: s.label }))
    .filter((s) => !cachedUrls.has(s.url));
  const picked = $('model').value;
  $('model').replaceChildren(
    ...(cached.length ? [group('In this browser', cached.map((c) => ({
      url: c.url, text: `${decodeURIComponent(c.url.split('/').pop())} · ${mb(c.bytes)}`,
    })))] : []),
    ...(suggested.length ? [group('Download', suggested)] : []),
  );
  if (picked) $('model').value = picked;
  if (navigator.storage?.estimate) {
    const { usage = 0, quota = 0 } = await navigator.storage.estimate();
    $('storage').textContent = `${cached.length} cached · ${mb(usage)} of ${mb(quota)} used`;
  }
}

async function load(model) {
  $('log').replaceChildren(); // a new model starts a new conversation
  messages = [];
  state.loaded = false;
  state.error = null;
  $('progress').value = 0;
  $('summary').textContent = 'loading…';
  busy(true);
  try {
    const r = await engine.load(model, {
      contextLength: Number($('ctx').value) || 2048,
      onProgress: ({ phase, loaded, total }) => {
        if (phase === 'compile') {
          $('progress').value = 1;
          $('summary').textContent = 'compiling the model on the GPU…';
          return;
        }
        if (total) $('progress').value = loaded / total;
        else $('progress').removeAttribute('value'); // size unknown: an indeterminate bar
        $('summary').textContent = `${phase === 'cache' ? 'reading from the cache' : 'downloading'} ` +
          `${mb(loaded)}${total ? ` of ${mb(total)}` : ''}…`;
      },
    });
    $('summary').textContent = `${r.summary} · ready in ${r.seconds.toFixed(1)} s` +
      `${r.fromCache ? ' (from the cache)' : ''}`;
    $('progress').value = 1;
    state.speech = r.kind === 'speech';
    $('speech').hidden = !state.speech;
    $('chat').hidden = state.speech;
    $('log').hidden = state.speech;
    $('prompt').disabled = r.kind !== 'chat';
    $('transcribe').disabled = !state.speech;
    if (r.kind === 'embedding') fail('loading', 'this is an embedding model: the chat needs a chat model');
    state.loadedBy = r.by;
    state.fromCache = r.fromCache;
    state.loaded = true;
  } catch (e) {
    // The engine names the limit; say what it means for the user.
    const limits = /limit|exceeds|too large|out of memory/i.test(e.message);
    fail('loading', limits ? `this GPU's WebGPU limits or memory are too small for this model ` +
      `(try a smaller one): ${e.message}` : e.message);
  } finally {
    busy(false);
    refreshModels().catch(() => {});
  }
}

function bubble(role, text) {
  const div = document.createElement('div');
  div.className = role;
  if (role === 'user') div.textContent = text;
  else renderMarkdown(div, text);
  $('log').append(div);
  return div;
}

// Streams the reply to the conversation so far into a new bubble.
async function reply() {
  busy(true);
  state.error = null;
  const out = bubble('assistant', '');
  let text = '';
  let drawn = false;
  const draw = () => {
    drawn = false;
    renderMarkdown(out, text);
    $('log').scrollTop = $('log').scrollHeight;
  };
  running = new AbortController();
  const settings = {
    temperature: Number($('temp').value), top_p: Number($('topp').value),
    top_k: Number($('topk').value), max_tokens: Number($('max').value) || 256,
  };
  try {
    const stream = await engine.chat.completions.create({
      messages, stream: true, stream_options: { include_usage: true }, ...settings,
    }, { signal: running.signal });
    let finish = null;
    for await (const chunk of stream) {
      const piece = chunk.choices[0]?.delta?.content;
      if (piece) {
        text += piece;
        if (!drawn) {
          drawn = true;
          requestAnimationFrame(draw);
        }
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) {
        const u = chunk.usage;
        const cached = u.prompt_tokens_details.cached_tokens;
        state.last = {
          text, finish, promptTokens: u.prompt_tokens - cached, cachedTokens: cached,
          generatedTokens: u.completion_tokens, promptTps: chunk.timings.prompt_per_second,
          generateTps: chunk.timings.predicted_per_second,
        };
        $('stats').textContent =
          `prompt ${state.last.promptTokens} tokens (${state.last.promptTps.toFixed(1)} t/s` +
          `${cached ? `, ${cached} more kept from the last turn` : ''}) · generated ` +
          `${u.completion_tokens} tokens (${state.last.generateTps.toFixed(2)} tokens/s)` +
          `${finish === 'length' ? ' · stopped at the token limit' : ''}`;
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') {
      // The turn did not happen: its question goes back to the prompt box.
      fail('generating', e.message);
      out.remove();
      const asked = messages.pop();
      [...$('log').querySelectorAll('.user')].pop()?.remove();
      if (asked && !$('prompt').value) $('prompt').value = asked.content;
      return;
    }
    $('stats').textContent = 'stopped';
    state.last = { text, finish: 'abort' };
  } finally {
    draw();
    running = null;
    if (!state.error) messages.push({ role: 'assistant', content: text });
    busy(false);
  }
}

function send(text) {
  messages.push({ role: 'user', content: text });
  bubble('user', text);
  reply();
}

async function start() {
  const support = await webgpuSupport();
  if (!support.ok) {
    $('adapter').textContent = support.reason;
    $('nogpu').hidden = false;
    $('nogpu').textContent = `wgllm needs WebGPU: ${support.reason}.`;
    state.error = `opening WebGPU: ${support.reason}`;
    return;
  }
  try {
    engine = await createEngine();
  } catch (e) {
    $('adapter').textContent = 'no WebGPU device';
    fail('opening WebGPU', e.message);
    return;
  }
  state.engine = engine;
  $('adapter').textContent = engine.adapter;
  state.ready = true;
  await refreshModels();
  const model = new URLSearchParams(location.search).get('model');
  if (model) {
    $('url').value = model;
    load(model);
  }
}

$('file').onchange = () => {
  const file = $('file').files[0];
  if (file) load(file);
};
$('fetch').onclick = () => load($('url').value.trim() || $('model').value);
$('pick').onclick = () => { if ($('model').value) load($('model').value); };
$('forget').onclick = async () => {
  const url = $('model').value;
  if (url && await engine.cache.delete(url)) refreshModels();
};
$('new').onclick = () => {
  if (state.busy) return;
  messages = [];
  $('log').replaceChildren();
  $('stats').textContent = '';
  busy(false);
};
$('stop').onclick = () => running?.abort();
$('regen').onclick = () => {
  if (state.busy || messages.at(-1)?.role !== 'assistant') return;
  messages.pop();
  [...$('log').querySelectorAll('.assistant')].pop()?.remove();
  reply();
};
$('chat').onsubmit = (ev) => {
  ev.preventDefault();
  const text = $('prompt').value.trim();
  if (text && !state.busy && state.loaded) {
    $('prompt').value = '';
    send(text);
  }
};

// Speech: the picked file goes to the engine as it is (WAV, FLAC, MP3, Ogg); a recording is
// decoded by the browser and sent as 16 kHz WAV.
let recorded = null; // {blob, seconds} of the last recording
async function transcribe(file, audioSeconds) {
  state.busy = true;
  state.transcript = null;
  state.error = null;
  $('transcript').textContent = '';
  $('tprogress').value = 0;
  const t0 = performance.now();
  try {
    const format = $('format').value;
    const api = $('translate').checked ? engine.audio.translations : engine.audio.transcriptions;
    const out = await api.create({ file, language: $('lang').value.trim() || 'auto', response_format: format },
      { onProgress: (f) => { $('tprogress').value = f; } });
    const text = typeof out === 'string' ? out : JSON.stringify(out, null, 2);
    const seconds = (performance.now() - t0) / 1000;
    $('transcript').textContent = text;
    $('tprogress').value = 1;
    $('stats').textContent = `${audioSeconds.toFixed(1)} s of audio in ${seconds.toFixed(1)} s ` +
      `(${(audioSeconds / seconds).toFixed(2)}x real time)`;
    state.transcript = text;
  } catch (e) {
    fail('transcribing', e.message);
  } finally {
    state.busy = false;
  }
}

// 16-bit PCM WAV of mono `samples` at `rate` Hz.
function wav(samples, rate) {
  const out = new DataView(new ArrayBuffer(44 + 2 * samples.length));
  const str = (at, s) => [...s].forEach((c, i) => out.setUint8(at + i, c.charCodeAt(0)));
  str(0, 'RIFF'); out.setUint32(4, 36 + 2 * samples.length, true); str(8, 'WAVEfmt ');
  out.setUint32(16, 16, true); out.setUint16(20, 1, true); out.setUint16(22, 1, true);
  out.setUint32(24, rate, true); out.setUint32(28, 2 * rate, true); out.setUint16(32, 2, true);
  out.setUint16(34, 16, true); str(36, 'data'); out.setUint32(40, 2 * samples.length, true);
  samples.forEach((v, i) => out.setInt16(44 + 2 * i, Math.max(-1, Math.min(1, v)) * 32767, true));
  return out.buffer;
}

let recorder = null;
$('record').onclick = async () => {
  if (recorder) {
    recorder.stop();
    return;
  }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (e) => chunks.push(e.data);
    recorder.onstop = async () => {
      stream.getTracks().forEach((t) => t.stop());
      recorder = null;
      $('record').textContent = 'Record';
      const ctx = new AudioContext({ sampleRate: 16000 });
      const decoded = await ctx.decodeAudioData(await new Blob(chunks).arrayBuffer());
      const blob = new File([wav(decoded.getChannelData(0), 16000)], 'recording.wav');
      recorded = { blob, seconds: decoded.duration };
      $('transcript').textContent = `recorded ${decoded.duration.toFixed(1)} s: press Transcribe`;
    };
    recorder.start();
    $('record').textContent = 'Stop';
  } catch (e) {
    fail('recording', e.message || String(e));
  }
};
$('audio').onchange = () => { recorded = null; };
$('transcribe').onclick = async () => {
  if (state.busy) return;
  const file = $('audio').files[0];
  if (file) {
    // The duration, for the real-time factor (0 when the browser cannot tell).
    let seconds = 0;
    try {
      seconds = (await new AudioContext().decodeAudioData(await file.arrayBuffer())).duration;
    } catch (e) { /* the engine reports what it cannot decode */ }
    transcribe(file, seconds);
  } else if (recorded) {
    transcribe(recorded.blob, recorded.seconds);
  } else {
    fail('transcribing', 'pick an audio file or record one first');
  }
};

start();
