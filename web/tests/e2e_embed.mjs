// End-to-end embeddings through the wgllm-web package: serves the page with `wgllm web` (the
// model cache as /models/), opens it in the system Chromium, loads all-MiniLM-L6-v2 (f32:
// SwiftShader has no shader-f16) with `engine.load` and embeds the reference fixture's texts
// with `engine.embeddings.create`, as floats and as base64, on the browser's WebGPU. Every
// vector must be unit length with a cosine of at least 0.9999 with the numpy reference
// (crates/models/tests/fixtures/minilm_embed.json), base64 must decode to the floats, and an
// empty input and a chat request to an embedding model must be refused naming why.
//
//   web/build.sh && (cd web && npm ci) && node web/tests/e2e_embed.mjs [WGLLM]
//
// Needs `wgllm pull minilm` and its f32 form in the cache:
//   wgllm convert ~/.cache/wgllm/models/all-MiniLM-L6-v2 --type f32 \
//     -o ~/.cache/wgllm/models/all-MiniLM-L6-v2.F32.gguf
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, open, serve } from './harness.mjs';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(web, '..');
const wgllm = resolve(process.argv[2] || 'target/debug/wgllm');
const modelFile = 'all-MiniLM-L6-v2.F32.gguf';
const fixture = JSON.parse(readFileSync(resolve(repo, 'crates/models/tests/fixtures/minilm_embed.json'), 'utf8'));
// The empty text is the engine tests' (the API refuses empty inputs, as the server does).
const cases = fixture.texts.filter((t) => t.text);
const texts = cases.map((t) => t.text);

const { server, base } = await serve(wgllm, web);
const browser = await launch(600_000);
let code = 1;
try {
  const page = await open(browser, 1000, 640);
  await page.goto(base);
  await page.waitForFunction(() => window.wgllm.ready || window.wgllm.error, { timeout: 120_000 });
  const got = await page.evaluate(async (url, texts) => {
    const engine = window.wgllm.engine;
    const loaded = await engine.load(url, { cache: false });
    const t0 = performance.now();
    const floats = await engine.embeddings.create({ input: texts });
    const seconds = (performance.now() - t0) / 1000;
    const b64 = await engine.embeddings.create({ input: texts, encoding_format: 'base64' });
    const decoded = b64.data.map((d) => Array.from(new Float32Array(
      Uint8Array.from(atob(d.embedding), (c) => c.charCodeAt(0)).buffer)));
    let empty = null;
    try {
      await engine.embeddings.create({ input: ['fine', ''] });
    } catch (e) {
      empty = e.message;
    }
    let refused = null;
    try {
      await engine.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }] });
    } catch (e) {
      refused = e.message;
    }
    return { loaded, floats, decoded, seconds, empty, refused };
  }, `${base}models/${modelFile}`, texts);
  console.log(`loaded: ${got.loaded.summary}; ${texts.length} texts embedded in ${got.seconds.toFixed(2)} s`);
  const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
  const bad = [];
  if (got.loaded.kind !== 'embedding') bad.push(`the model's kind is ${got.loaded.kind}`);
  if (got.floats.object !== 'list' || got.floats.data.length !== texts.length) bad.push('not one embedding a text');
  got.floats.data.forEach((d, i) => {
    const v = d.embedding;
    const want = cases[i].embedding;
    const norm = Math.sqrt(dot(v, v));
    const cos = dot(v, want) / (norm * Math.sqrt(dot(want, want)));
    console.log(`cosine with the reference ${cos.toFixed(7)}, norm ${norm.toFixed(6)}: ${JSON.stringify(texts[i])}`);
    if (d.index !== i) bad.push(`data[${i}].index is ${d.index}`);
    if (Math.abs(norm - 1) > 1e-4) bad.push(`${JSON.stringify(texts[i])}: norm ${norm}`);
    if (!(cos >= 0.9999)) bad.push(`${JSON.stringify(texts[i])}: cosine ${cos}`);
    if (v.some((x, j) => x !== got.decoded[i][j])) bad.push(`${JSON.stringify(texts[i])}: base64 differs from the floats`);
  });
  if (!/non-empty/.test(got.empty || '')) bad.push(`an empty input was not refused: ${got.empty}`);
  if (!/embedding model/.test(got.refused || '')) bad.push(`a chat request was not refused: ${got.refused}`);
  if (bad.length) throw new Error(bad.join('; '));
  console.log('e2e embed: every embedding matches the numpy reference; base64 agrees; chat is refused');
  code = 0;
} catch (e) {
  console.error(`e2e embed: ${e.message}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(code);
