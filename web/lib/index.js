// wgllm-web: wgllm's engine in a Web Worker behind an OpenAI-style API.
//
//   import { createEngine } from 'wgllm-web';
//   const engine = await createEngine();
//   await engine.load('https://example.com/SmolLM2-135M-Instruct.Q4_1.gguf', { sha256 });
//   for await (const chunk of await engine.chat.completions.create({ messages, stream: true })) {
//     out.textContent += chunk.choices[0]?.delta?.content ?? '';
//   }
//
// Types: index.d.ts. The worker (worker.js) owns the wasm engine; this module only sends it
// requests, so nothing here blocks the page.

let counter = 0;
const newId = (prefix) =>
  `${prefix}-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 10)}`;

function abortError() {
  return new DOMException('the request was aborted', 'AbortError');
}

// Rebuilds a worker's error with its name (AbortError stays an AbortError).
function workerError({ name, message }) {
  if (name === 'AbortError') return new DOMException(message, 'AbortError');
  const e = new Error(message);
  e.name = name === 'Error' ? 'WgllmError' : name;
  return e;
}

// A request's text: a string, or OpenAI's content parts of which the text ones count.
function contentText(content, i) {
  if (typeof content === 'string') return content;
  if (content == null) return '';
  if (Array.isArray(content)) {
    return content.map((p, j) => {
      if (p?.type === 'text' && typeof p.text === 'string') return p.text;
      throw new TypeError(`messages[${i}].content[${j}]: only text parts are supported`);
    }).join('');
  }
  throw new TypeError(`messages[${i}].content must be a string or an array of text parts`);
}

const ROLES = new Set(['system', 'developer', 'user', 'assistant']);

// OpenAI's chat request as the engine's messages and options; refuses what it cannot honour.
function chatRequest(body) {
  if (!body || !Array.isArray(body.messages) || body.messages.length === 0) {
    throw new TypeError('messages must be a non-empty array');
  }
  const messages = body.messages.map((m, i) => {
    if (!ROLES.has(m?.role)) {
      throw new TypeError(`messages[${i}].role must be system, user or assistant, not '${m?.role}'`);
    }
    return { role: m.role === 'developer' ? 'system' : m.role, content: contentText(m.content, i) };
  });
  const unsupported = [
    ['tools', body.tools?.length],
    ['tool_choice', body.tool_choice && body.tool_choice !== 'none'],
    ['n', body.n != null && body.n !== 1],
    ['logprobs', body.logprobs],
  ].filter(([, used]) => used).map(([name]) => name);
  if (unsupported.length) {
    throw new TypeError(`${unsupported.join(', ')}: not supported in the browser engine`);
  }
  let stop = body.stop ?? [];
  if (typeof stop === 'string') stop = [stop];
  if (!Array.isArray(stop) || stop.some((s) => typeof s !== 'string' || s === '') || stop.length > 4) {
    throw new TypeError('stop must be a non-empty string or an array of up to 4 of them');
  }
  // The engine reads these as the server does (and names a bad one).
  const constrains = {
    response_format: body.response_format, grammar: body.grammar, json_schema: body.json_schema,
  };
  const options = {
    structured: Object.values(constrains).some((v) => v != null) ? JSON.stringify(constrains) : undefined,
    maxTokens: body.max_completion_tokens ?? body.max_tokens,
    temperature: body.temperature,
    topP: body.top_p,
    topK: body.top_k,
    minP: body.min_p,
    repeatPenalty: body.repeat_penalty,
    presencePenalty: body.presence_penalty,
    frequencyPenalty: body.frequency_penalty,
    seed: body.seed,
    stop,
  };
  return { messages, options };
}

function usage(r) {
  const prompt = r.promptTokens + r.cachedTokens;
  return {
    prompt_tokens: prompt,
    completion_tokens: r.generatedTokens,
    total_tokens: prompt + r.generatedTokens,
    prompt_tokens_details: { cached_tokens: r.cachedTokens },
  };
}

// The chunks of a streamed completion, as an async iterator; `abort()` stops it.
class ChunkStream {
  constructor(start, abort) {
    this.queue = [];
    this.waiting = null;
    this.done = false;
    this.failure = null;
    this.abort = abort;
    start((chunk) => this.push(chunk), (e) => this.end(e));
  }

  push(chunk) {
    if (this.waiting) {
      this.waiting.resolve({ value: chunk, done: false });
      this.waiting = null;
    } else {
      this.queue.push(chunk);
    }
  }

  end(error) {
    this.done = true;
    this.failure = error || null;
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = null;
      if (error) w.reject(error);
      else w.resolve({ value: undefined, done: true });
    }
  }

  next() {
    if (this.queue.length) return Promise.resolve({ value: this.queue.shift(), done: false });
    if (this.done) {
      if (this.failure) {
        const e = this.failure;
        this.failure = null;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => { this.waiting = { resolve, reject }; });
  }

  // Leaving a `for await` early (break, throw) stops generation.
  return() {
    if (!this.done) this.abort();
    this.queue = [];
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator]() {
    return this;
  }
}

export class Engine {
  constructor(worker, adapter) {
    this.worker = worker;
    this.adapter = adapter;
    this.pending = new Map();
    this.model = null; // {name, kind, summary} of the loaded model
    worker.onmessage = ({ data }) => this.pending.get(data.id)?.(data);
    worker.onerror = (e) => {
      e.preventDefault();
      const err = new Error(`the engine's worker failed: ${e.message || 'it did not start'}`);
      for (const handle of this.pending.values()) handle({ type: 'error', name: err.name, message: err.message });
    };
    const chat = { completions: { create: (body, opts) => this.#chat(body, opts) } };
    this.chat = chat;
    this.embeddings = { create: (body, opts) => this.#embed(body, opts) };
    const audio = (translate) => ({ create: (body, opts) => this.#transcribe(body, opts, translate) });
    this.audio = { transcriptions: audio(false), translations: audio(true) };
    this.cache = {
      list: () => this.#request('cache.list', {}),
      delete: (url) => this.#request('cache.delete', { url: new URL(url, location.href).href }),
    };
  }

  // Sends a request; `events` gets its progress, pieces...; `signal` aborts it.
  #request(type, data, { events, signal, transfer } = {}) {
    const id = ++counter;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError());
        return;
      }
      const onAbort = () => this.worker.postMessage({ id: ++counter, type: 'abort', target: id });
      signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(id, (msg) => {
        if (msg.type === 'result' || msg.type === 'error') {
          this.pending.delete(id);
          signal?.removeEventListener('abort', onAbort);
          if (msg.type === 'result') resolve(msg.value);
          else reject(workerError(msg));
        } else {
          events?.(msg);
        }
      });
      this.worker.postMessage({ id, type, ...data }, transfer || []);
    });
  }

  // Loads a GGUF model (or whisper.cpp's ggml-*.bin) from a URL or a File/Blob.
  async load(model, { sha256, contextLength, cache = true, onProgress, signal } = {}) {
    const isBlob = typeof Blob !== 'undefined' && model instanceof Blob;
    const request = isBlob ? { file: model } : { url: new URL(model, location.href).href };
    this.model = null; // a load replaces the model, whether or not it succeeds
    const r = await this.#request('load', { ...request, sha256, contextLength, cache }, {
      signal,
      events: (m) => onProgress?.({ phase: m.phase, loaded: m.loaded, total: m.total }),
    });
    const name = isBlob ? (model.name || 'model') : request.url.split('/').pop();
    this.model = { name, kind: r.kind, summary: r.summary };
    return r;
  }

  #need(kind, what) {
    if (!this.model) throw new Error('no model is loaded: call engine.load first');
    if (this.model.kind !== kind) {
      throw new Error(`the loaded model (${this.model.name}) is a ${this.model.kind} model: ${what}`);
    }
  }

  async #chat(body, { signal } = {}) {
    this.#need('chat', 'chat completions need a chat model');
    const req = chatRequest(body);
    const id = newId('chatcmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = this.model.name;
    if (!body.stream) {
      const r = await this.#request('chat', req, { signal });
      return {
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message: { role: 'assistant', content: r.text }, finish_reason: r.finish, logprobs: null }],
        usage: usage(r),
        timings: { prompt_per_second: r.promptTps, predicted_per_second: r.generateTps },
      };
    }
    const chunk = (delta, finish = null) => ({
      id, object: 'chat.completion.chunk', created, model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    });
    const stopper = new AbortController();
    signal?.addEventListener('abort', () => stopper.abort(), { once: true });
    if (signal?.aborted) stopper.abort();
    return new ChunkStream((push, end) => {
      push(chunk({ role: 'assistant', content: '' }));
      this.#request('chat', req, {
        signal: stopper.signal,
        events: (m) => { if (m.type === 'piece') push(chunk({ content: m.text })); },
      }).then((r) => {
        push(chunk({}, r.finish));
        if (body.stream_options?.include_usage) {
          push({
            id, object: 'chat.completion.chunk', created, model, choices: [], usage: usage(r),
            timings: { prompt_per_second: r.promptTps, predicted_per_second: r.generateTps },
          });
        }
        end();
      }, end);
    }, () => stopper.abort());
  }

  async #embed(body, { signal } = {}) {
    this.#need('embedding', 'embeddings need an embedding model');
    const input = typeof body?.input === 'string' ? [body.input] : body?.input;
    if (!Array.isArray(input) || input.length === 0 || input.some((t) => typeof t !== 'string' || !t)) {
      throw new TypeError('input must be a non-empty string or an array of non-empty strings');
    }
    if (body.dimensions != null) throw new TypeError('dimensions: not supported in the browser engine');
    const format = body.encoding_format ?? 'float';
    if (format !== 'float' && format !== 'base64') {
      throw new TypeError(`encoding_format must be float or base64, not '${format}'`);
    }
    const vectors = await this.#request('embed', { texts: input, normalize: true, truncate: !!body.truncate }, { signal });
    const encode = (v) => {
      if (format === 'float') return Array.from(v);
      const bytes = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
      let s = '';
      for (const b of bytes) s += String.fromCharCode(b);
      return btoa(s);
    };
    return {
      object: 'list', model: this.model.name,
      data: vectors.map((v, index) => ({ object: 'embedding', index, embedding: encode(v) })),
    };
  }

  async #transcribe(body, { signal, onProgress } = {}, translate) {
    this.#need('speech', 'transcription needs a Whisper model');
    const file = body?.file;
    if (!(file instanceof Blob)) throw new TypeError('file must be a File or a Blob of audio');
    const format = body.response_format ?? 'json';
    const formats = ['json', 'text', 'srt', 'vtt', 'verbose_json'];
    if (!formats.includes(format)) throw new TypeError(`response_format must be one of ${formats.join(', ')}`);
    const bytes = await file.arrayBuffer();
    const out = await this.#request('transcribe', {
      bytes, name: file.name || 'audio.wav', language: body.language || 'auto', translate,
      format, fallback: body.temperature == null || body.temperature > 0,
    }, { signal, transfer: [bytes], events: (m) => onProgress?.(m.fraction) });
    return format === 'json' || format === 'verbose_json' ? JSON.parse(out) : out;
  }

  // Stops the worker; the engine cannot be used after.
  terminate() {
    this.worker.terminate();
    for (const handle of this.pending.values()) handle({ type: 'error', name: 'Error', message: 'the engine was terminated' });
    this.pending.clear();
  }
}

// Whether this browser has WebGPU at all, and why not when it has none.
export async function webgpuSupport() {
  if (typeof navigator === 'undefined' || !navigator.gpu) {
    return { ok: false, reason: 'this browser has no WebGPU (Chrome or Edge 113+, Safari 26+, Firefox 141+ on Windows)' };
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { ok: false, reason: 'WebGPU is present but no GPU adapter is available' };
  return { ok: true, reason: null };
}

// Starts the engine's worker and opens its device: 'webgpu' (default) or 'cpu'.
export async function createEngine({ device = 'webgpu', workerUrl } = {}) {
  const url = workerUrl ?? new URL('./worker.js', import.meta.url);
  const worker = new Worker(url, { type: 'module' });
  const probe = new Engine(worker, null);
  const opened = await new Promise((resolve, reject) => {
    const id = ++counter;
    probe.pending.set(id, (msg) => {
      probe.pending.delete(id);
      if (msg.type === 'result') resolve(msg.value);
      else reject(workerError(msg));
    });
    worker.postMessage({ id, type: 'open', device });
  }).catch((e) => {
    worker.terminate();
    throw e;
  });
  probe.adapter = opened.adapter;
  return probe;
}
