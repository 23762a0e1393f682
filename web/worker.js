// The engine's thread: a dedicated module worker that owns wgllm-web's WebEngine, so compiling
// kernels, uploading weights and generating never block the page. Requests run one at a time, in
// the order they arrive. It keeps the conversation: each message is answered after the earlier
// turns (whose tokens the engine keeps in its KV cache), until 'reset' or a new model.
//
// page → worker: {type: 'load', url} | {type: 'load', file} | {type: 'generate', text, maxTokens}
//                | {type: 'reset'}                       a new conversation
//                | {type: 'transcribe', bytes, name, language, translate, format, audioSeconds}
// worker → page: {type: 'ready', adapter}
//                {type: 'progress', loaded, total}       bytes of the model read so far (total 0:
//                                                         unknown)
//                {type: 'compiling'}                     every byte read; building the model
//                {type: 'loaded', summary, seconds, by}  by: 'loadStream' or 'load'
//                {type: 'token', piece}                  streamed text
//                {type: 'done', result}                  {text, promptTokens, cachedTokens,
//                                                         generatedTokens, promptTps,
//                                                         generateTps, stop}
//                {type: 'tprogress', fraction}           of the audio transcribed so far
//                {type: 'transcript', text, seconds, audioSeconds}
//                {type: 'error', where, message}
import init, { WebEngine } from './pkg/wgllm_web.js';

const post = (type, data = {}) => postMessage({ type, ...data });
// The conversation so far: {role, content} of each turn answered.
let messages = [];
const text = (e) => (e && e.message ? e.message : String(e));

// Progress messages at most every 100 ms (a response arrives in thousands of chunks).
function progress() {
  let last = 0;
  return (loaded, total, force = false) => {
    const now = performance.now();
    if (force || now - last >= 100) {
      last = now;
      post('progress', { loaded, total });
    }
  };
}

// Reads a stream into one buffer: `load(bytes)`, for a pkg/ built before `loadStream` existed.
async function readAll(stream, total, report) {
  const reader = stream.getReader();
  const parts = [];
  let got = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    got += value.length;
    report(got, total);
  }
  const bytes = new Uint8Array(got);
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return bytes;
}

async function open() {
  await init();
  const engine = await WebEngine.open('webgpu', 1024);
  // wgpu reports only the browser's adapter description (often empty): add vendor and
  // architecture from the browser itself.
  const info = (await navigator.gpu.requestAdapter())?.info;
  post('ready', {
    adapter: [engine.adapter(), info && `${info.vendor} ${info.architecture}`]
      .filter(Boolean).join(' · '),
  });
  return engine;
}

async function load(engine, { url, file }) {
  messages = []; // the page cleared its log: a new conversation, whether or not this load works
  const t0 = performance.now();
  let stream;
  let total;
  if (file) {
    stream = file.stream();
    total = file.size;
  } else {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    stream = r.body;
    total = Number(r.headers.get('content-length')) || 0;
  }
  const report = progress();
  let summary;
  const by = typeof engine.loadStream === 'function' ? 'loadStream' : 'load';
  if (by === 'loadStream') {
    // Each tensor goes to the GPU as it arrives: the file never sits whole in memory.
    summary = await engine.loadStream(stream, total, (loaded, known) => {
      report(loaded, known ?? 0, loaded === known);
      if (loaded === known) post('compiling');
    });
  } else {
    const bytes = await readAll(stream, total, report);
    report(bytes.length, bytes.length, true);
    post('compiling');
    summary = engine.load(bytes);
  }
  post('loaded', { summary, seconds: (performance.now() - t0) / 1000, by });
}

async function generate(engine, { text, maxTokens }) {
  const turn = [...messages, { role: 'user', content: text }];
  const result = await engine.generateChat(turn, maxTokens, 0, (piece) => {
    post('token', { piece });
    return true;
  });
  messages = [...turn, { role: 'assistant', content: result.text }];
  post('done', { result });
}

async function transcribe(engine, { bytes, name, language, translate, format, audioSeconds }) {
  const t0 = performance.now();
  const text = await engine.transcribe(new Uint8Array(bytes), name, language, translate, format, true,
    (fraction) => post('tprogress', { fraction }));
  post('transcript', { text, seconds: (performance.now() - t0) / 1000, audioSeconds });
}

async function reset() {
  messages = [];
}

const opened = open();
let queue = opened.catch((e) => post('error', { where: 'opening WebGPU', message: text(e) }));
const handlers = {
  load: [load, 'loading'],
  generate: [generate, 'generating'],
  reset: [reset, 'starting a new chat'],
  transcribe: [transcribe, 'transcribing'],
};

onmessage = ({ data }) => {
  const [run, where] = handlers[data.type] || [];
  if (!run) {
    post('error', { where: 'worker', message: `unknown request '${data.type}'` });
    return;
  }
  queue = queue.then(async () => {
    try {
      await run(await opened, data);
    } catch (e) {
      post('error', { where, message: text(e) });
    }
  });
};
