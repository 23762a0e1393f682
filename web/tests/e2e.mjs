// End-to-end: serves the page with `wgllm web` (the model cache as /models/), drives it in the
// system Chromium through puppeteer-core (never a downloaded browser), loads SmolLM2, holds a
// two-turn conversation and checks that the streamed replies are the native CLI's greedy output
// on the CPU backend (`wgllm chat`; the second reply's first token), the second turn running
// only its new tokens. Also checks that the engine runs in its worker and streams the model to the GPU
// (loadStream), that the page answers throughout, and that the file picker loads the model too;
// saves a screenshot.
//
//   web/build.sh && (cd web && npm ci) && node web/tests/e2e.mjs [WGLLM [SCREENSHOT]]
//
// WGLLM: the wgllm binary (default target/debug/wgllm); SCREENSHOT: where the screenshot goes
// (default docs/web-chat.png, the README's; CI writes it under target/). CHROMIUM: the
// browser (default /usr/bin/chromium). The model cache is wgllm's ($XDG_CACHE_HOME honoured).
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const wgllm = resolve(process.argv[2] || 'target/debug/wgllm');
const screenshot = resolve(process.argv[3] || resolve(web, '..', 'docs', 'web-chat.png'));
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const modelFile = 'SmolLM2-135M-Instruct.Q4_1.gguf';
const prompt = 'What is the capital of France?';
const followUp = 'And of Italy?';
// SwiftShader decodes a token in ~1.6 s (CPU shapes; ~20-50 s before): the 7 tokens of the
// expected sentence, no more (its end-of-generation token would take one more step).
const maxTokens = 7;
// The page's main thread must answer within this while the worker loads and generates.
const responsiveMs = 5_000;

// What the native CPU backend answers, greedy, through the same chat template (pulled if absent):
// `wgllm chat` prints "> " before each turn's answer and a newline after it.
const chat = execFileSync(wgllm, [
  'chat', '-m', 'smollm2', '-n', String(maxTokens), '--temp', '0', '--backend', 'cpu',
], { encoding: 'utf8', input: `${prompt}\n${followUp}\n`, stdio: ['pipe', 'pipe', 'inherit'] });
const turns = chat.match(/^> ([^]*)\n> ([^]*)\n> $/);
if (!turns) throw new Error(`unexpected wgllm chat output ${JSON.stringify(chat)}`);
const [, expected, expectedFollowUp] = turns;

// `wgllm web` on a free port; its first line holds the address.
const server = spawn(wgllm, ['web', '--port', '0', '--dir', web], { stdio: ['ignore', 'pipe', 'inherit'] });
const exited = once(server, 'exit').then(([code]) => {
  throw new Error(`wgllm web exited (${code}) before serving`);
});
const [line] = await Promise.race([once(createInterface({ input: server.stdout }), 'line'), exited]);
const base = line.match(/http:\/\/\S+?\//)[0];
const cache = line.match(/the model cache (.+) at http/)[1];
server.stdout.resume();

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  protocolTimeout: 120_000,
  args: ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--no-sandbox', '--disable-dev-shm-usage'],
});
let code = 1;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 760 });
  page.on('console', (m) => console.log(`page: ${m.text()}`));
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
  // Polls the page ourselves, timing each answer: the engine works in the worker, so the main
  // thread answers while the model loads and while tokens are generated.
  let slowest = 0;
  const partial = new Set(); // reply lengths seen before generation finished
  const until = async (done, what) => {
    const t0 = Date.now();
    for (;;) {
      const asked = Date.now();
      const s = await page.evaluate(() => ({
        loaded: window.wgllm.loaded,
        last: window.wgllm.last,
        error: window.wgllm.error,
        reply: [...document.querySelectorAll('.assistant')].pop()?.textContent.length ?? 0,
      }));
      slowest = Math.max(slowest, Date.now() - asked);
      if (s.error) throw new Error(s.error);
      if (done(s)) return (Date.now() - t0) / 1000;
      if (s.reply) partial.add(s.reply);
      if (Date.now() - t0 > 600_000) throw new Error(`${what} took over 10 minutes`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  await page.goto(`${base}?model=models/${modelFile}`);
  const loadS = await until((s) => s.loaded, 'loading');
  await page.$eval('#max', (el, n) => { el.value = String(n); }, maxTokens);
  await page.type('#prompt', prompt);
  await page.click('#send');
  const genS = await until((s) => s.last, 'generating');
  console.log(`loaded in ${loadS.toFixed(1)} s, answered in ${genS.toFixed(1)} s; ` +
    `the page answered within ${slowest} ms throughout; ${partial.size} partial replies seen`);
  // The model's summary line, without the time it took.
  const described = () => page.$eval('#summary', (el) => el.textContent.replace(/ · ready in .*/, ''));
  const fromUrl = await described();
  const loadedBy = await page.evaluate(() => window.wgllm.loadedBy);
  console.log(`the worker loaded the model with ${loadedBy}`);
  if (loadedBy !== 'loadStream') throw new Error('the model was not streamed to the GPU (loadStream)');
  const workers = page.workers().map((w) => w.url());
  if (!workers.some((u) => u.endsWith('/worker.js'))) {
    throw new Error(`the engine's worker is not running (workers: ${JSON.stringify(workers)})`);
  }
  if (slowest > responsiveMs) {
    throw new Error(`the page did not answer for ${slowest} ms while the worker ran`);
  }
  if (partial.size === 0) throw new Error('no partial reply was seen: the text was not streamed');
  const got = await page.evaluate(() => ({
    error: window.wgllm.error,
    streamed: document.querySelector('.assistant').textContent,
    adapter: document.getElementById('adapter').textContent,
    stats: document.getElementById('stats').textContent,
  }));
  await page.screenshot({ path: screenshot });
  console.log(`adapter: ${got.adapter}\nstats: ${got.stats}\nstreamed: ${JSON.stringify(got.streamed)}`);
  console.log(`screenshot: ${screenshot}`);
  if (got.error) throw new Error(got.error);
  if (got.streamed !== expected) {
    throw new Error(`streamed text differs from native greedy output ${JSON.stringify(expected)}`);
  }
  console.log('e2e: the streamed reply equals the native greedy output');
  // The second turn, answered after the first, which the engine's cache still holds. One token
  // (from the prompt's own step: SwiftShader decodes a token in ~1.6 s), which must start what
  // `wgllm chat` answers; its prompt is the whole conversation, of which the first prompt is kept.
  const first = await page.evaluate(() => window.wgllm.last);
  await page.evaluate(() => { window.wgllm.last = null; });
  await page.$eval('#max', (el) => { el.value = '1'; });
  await page.type('#prompt', followUp);
  await page.click('#send');
  const followS = await until((s) => s.last, 'answering the second turn');
  const second = await page.evaluate(() => ({
    last: window.wgllm.last,
    streamed: [...document.querySelectorAll('.assistant')].pop().textContent,
  }));
  const { promptTokens: ran, cachedTokens: kept } = second.last;
  console.log(`second turn in ${followS.toFixed(1)} s: ${ran} prompt tokens ran, ${kept} kept ` +
    `(the first ran ${first.promptTokens}): ${JSON.stringify(second.streamed)}`);
  if (!second.streamed || !expectedFollowUp.startsWith(second.streamed)) {
    throw new Error(`the second turn does not start wgllm chat's ${JSON.stringify(expectedFollowUp)}`);
  }
  // The cache holds the first prompt and every answer token a step fed: all but the last.
  if (kept < first.promptTokens + first.generatedTokens - 1) {
    throw new Error('the second turn did not follow the first in the cache');
  }
  console.log('e2e: the second turn follows the first and starts as wgllm chat answers');
  // The file picker's path (File.stream()): the same model again.
  await page.evaluate(() => { window.wgllm.loaded = false; });
  await (await page.$('#file')).uploadFile(join(cache, modelFile));
  const pickS = await until((s) => s.loaded, 'loading the picked file');
  const fromFile = await described();
  console.log(`the picked file loaded in ${pickS.toFixed(1)} s: ${fromFile}`);
  if (fromFile !== fromUrl) throw new Error(`the picked file gave '${fromFile}', the URL '${fromUrl}'`);
  code = 0;
} catch (e) {
  console.error(`e2e: ${e.message}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(code);
