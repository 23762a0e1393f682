// End-to-end: serves web/ (with models/ mapped to the wgllm model cache), drives the page in the
// system Chromium through puppeteer-core (never a downloaded browser), loads SmolLM2, sends one
// chat message and checks that the streamed reply equals the native CLI's greedy output. Saves a
// screenshot to docs/web-chat.png.
//
//   web/build.sh && (cd web && npm ci) && node web/tests/e2e.mjs target/release/wgllm
import { execFileSync } from 'node:child_process';
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { homedir } from 'node:os';
import { dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const wgllm = process.argv[2] || 'target/release/wgllm';
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const cache = join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'wgllm', 'models');
const modelFile = 'SmolLM2-135M-Instruct.Q4_1.gguf';
const prompt = 'What is the capital of France?';
const maxTokens = 12;

const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };
const server = createServer((req, res) => {
  const path = decodeURIComponent(new URL(req.url, 'http://x').pathname);
  const file = path.startsWith('/models/')
    ? join(cache, path.slice('/models/'.length))
    : join(web, path === '/' ? 'index.html' : path);
  if (!file.startsWith(web) && !file.startsWith(cache)) return res.writeHead(403).end();
  if (!existsSync(file) || !statSync(file).isFile()) return res.writeHead(404).end();
  res.writeHead(200, {
    'content-type': types[extname(file)] || 'application/octet-stream',
    'content-length': statSync(file).size,
  });
  createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}/`;

// What the native CPU backend answers, greedy, through the same chat template.
const expected = execFileSync(wgllm, [
  'run', '-m', join(cache, modelFile), '--chat', '-p', prompt,
  '-n', String(maxTokens), '--temp', '0', '--backend', 'cpu',
], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).replace(/\n$/, '');

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  // Loading compiles every kernel on the main thread (SwiftShader is slow at it): no page call
  // answers meanwhile.
  protocolTimeout: 1_200_000,
  args: ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--no-sandbox', '--disable-dev-shm-usage'],
});
let code = 1;
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1000, height: 760 });
  page.on('console', (m) => console.log(`page: ${m.text()}`));
  await page.goto(`${base}?model=models/${modelFile}`);
  await page.waitForFunction(() => window.wgllm && (window.wgllm.loaded || window.wgllm.error),
    { timeout: 300_000 });
  const err = await page.evaluate(() => window.wgllm.error);
  if (err) throw new Error(err);
  await page.$eval('#max', (el, n) => { el.value = String(n); }, maxTokens);
  await page.type('#prompt', prompt);
  await page.click('#send');
  await page.waitForFunction(() => window.wgllm.last || window.wgllm.error, { timeout: 600_000 });
  const got = await page.evaluate(() => ({
    error: window.wgllm.error,
    streamed: document.querySelector('.assistant').textContent,
    adapter: document.getElementById('adapter').textContent,
    stats: document.getElementById('stats').textContent,
  }));
  await page.screenshot({ path: join(web, '..', 'docs', 'web-chat.png') });
  console.log(`adapter: ${got.adapter}\nstats: ${got.stats}\nstreamed: ${JSON.stringify(got.streamed)}`);
  if (got.error) throw new Error(got.error);
  if (got.streamed !== expected) {
    throw new Error(`streamed text differs from native greedy output ${JSON.stringify(expected)}`);
  }
  console.log('e2e: the streamed reply equals the native greedy output');
  code = 0;
} catch (e) {
  console.error(`e2e: ${e.message}`);
} finally {
  await browser.close();
  server.close();
}
process.exit(code);
