// The chat page: the engine runs in a module worker (worker.js), so the page stays responsive
// while kernels compile and tokens generate. Loads a GGUF from a file or URL with a progress bar
// and streams greedy replies in a conversation (New chat starts another). A Whisper model shows
// the speech panel instead: a picked audio file, or one recorded from the microphone, is
// transcribed (or translated) with a progress bar. `?model=URL` loads a model at start-up;
// `window.wgllm` exposes the state the end-to-end tests (tests/e2e*.mjs) wait on.

const $ = (id) => document.getElementById(id);
const state = {
  ready: false, loaded: false, loadedBy: null, busy: false, error: null, last: null,
  speech: false, transcript: null,
};
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
    state.speech = summary.includes(': whisper,');
    $('speech').hidden = !state.speech;
    $('chat').hidden = state.speech;
    $('log').hidden = state.speech;
    $('prompt').disabled = state.speech;
    $('send').disabled = state.speech;
    $('transcribe').disabled = !state.speech;
    state.loadedBy = by;
    state.loaded = true;
  },
  tprogress({ fraction }) {
    $('tprogress').value = fraction;
  },
  transcript({ text, seconds, audioSeconds }) {
    $('transcript').textContent = text;
    $('tprogress').value = 1;
    $('stats').textContent =
      `${audioSeconds.toFixed(1)} s of audio in ${seconds.toFixed(1)} s ` +
      `(${(audioSeconds / seconds).toFixed(2)}x real time)`;
    state.transcript = text;
    state.busy = false;
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

// Speech: the picked file goes to the engine as it is (WAV, FLAC, MP3, Ogg); a recording is
// decoded by the browser and sent as 16 kHz WAV.
let recorded = null; // {bytes, name} of the last recording
function transcribe(bytes, name, audioSeconds) {
  state.busy = true;
  state.transcript = null;
  state.error = null;
  $('transcript').textContent = '';
  $('tprogress').value = 0;
  worker.postMessage({
    type: 'transcribe', bytes, name, audioSeconds,
    language: $('lang').value.trim() || 'auto',
    translate: $('translate').checked,
    format: $('format').value,
  }, [bytes]);
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
      recorded = { bytes: wav(decoded.getChannelData(0), 16000), name: 'recording.wav', seconds: decoded.duration };
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
    const bytes = await file.arrayBuffer();
    // The duration, for the real-time factor (0 when the browser cannot tell).
    let seconds = 0;
    try {
      seconds = (await new AudioContext().decodeAudioData(bytes.slice(0))).duration;
    } catch (e) { /* the engine reports what it cannot decode */ }
    transcribe(bytes, file.name, seconds);
  } else if (recorded) {
    transcribe(recorded.bytes.slice(0), recorded.name, recorded.seconds);
  } else {
    fail('transcribing', 'pick an audio file or record one first');
  }
};
