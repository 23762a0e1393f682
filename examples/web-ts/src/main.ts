// A page on wgllm-web: loads a chat model (cached by the browser after the first download),
// streams a reply into #out with a stop button, and lists the cached models. Bundle it with any
// tool that understands `new URL('./worker.js', import.meta.url)` (Vite, esbuild, webpack 5).
import {
  createEngine,
  webgpuSupport,
  type ChatCompletionChunk,
  type ChatMessage,
  type Engine,
} from 'wgllm-web';

const MODEL = 'https://example.com/models/SmolLM2-135M-Instruct.Q4_1.gguf';

async function ask(engine: Engine, messages: ChatMessage[], out: HTMLElement, stop: HTMLButtonElement) {
  const controller = new AbortController();
  stop.onclick = () => controller.abort();
  const stream = await engine.chat.completions.create(
    { messages, stream: true, temperature: 0.7, top_p: 0.95, max_tokens: 256, stop: ['\n\n\n'] },
    { signal: controller.signal },
  );
  let text = '';
  try {
    for await (const chunk of stream) {
      const c: ChatCompletionChunk = chunk;
      text += c.choices[0]?.delta.content ?? '';
      out.textContent = text;
    }
  } catch (e) {
    if (!(e instanceof DOMException && e.name === 'AbortError')) throw e;
  }
  return text;
}

export async function main(): Promise<void> {
  const out = document.getElementById('out')!;
  const stop = document.getElementById('stop') as HTMLButtonElement;
  const support = await webgpuSupport();
  if (!support.ok) {
    out.textContent = `no WebGPU: ${support.reason}`;
    return;
  }
  const engine = await createEngine();
  const loaded = await engine.load(MODEL, {
    contextLength: 4096,
    onProgress: ({ phase, loaded: n, total }) => {
      out.textContent = `${phase} ${total ? Math.round((100 * n) / total) : n}%`;
    },
  });
  out.textContent = `${loaded.summary}${loaded.fromCache ? ' (from the cache)' : ''}`;
  const answer = await ask(engine, [{ role: 'user', content: 'What is WebGPU?' }], out, stop);
  const done = await engine.chat.completions.create({
    messages: [
      { role: 'user', content: 'What is WebGPU?' },
      { role: 'assistant', content: answer },
      { role: 'user', content: 'In one sentence?' },
    ],
    max_tokens: 64,
  });
  out.textContent = `${done.choices[0].message.content} (${done.usage.completion_tokens} tokens, ` +
    `${done.timings.predicted_per_second.toFixed(1)} tokens/s)`;
  for (const m of await engine.cache.list()) {
    console.log(`${m.url}: ${m.bytes} bytes, sha256 ${m.sha256 ?? 'not given'}`);
  }
  engine.terminate();
}
