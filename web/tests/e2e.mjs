// End-to-end: serves the page with `wgllm web` (the model cache as /models/), drives it in the
// system Chromium through puppeteer-core (never a downloaded browser), loads SmolLM2, holds a
// two-turn conversation and checks that the streamed replies are the native CLI's greedy output
// on the CPU backend (`wgllm chat`; the second reply's first token), the second turn running
// only its new tokens. Also checks that the engine runs in its worker and streams the model to the GPU
// (loadStream), that the page answers throughout, the package's API (a stream aborted midway
// leaves the engine usable; max_tokens, stop strings, usage), the page's stop button, Markdown
// shown safely (a reply's `<script>` is text), that the file picker loads the model too, and
// that with the server gone the model loads again from the browser's cache (checked against
// its sha256; a wrong one is refused and evicted); saves screenshots.
//
//   web/build.sh && (cd web && npm ci) && node web/tests/e2e.mjs [WGLLM [SCREENSHOT]]
//
// WGLLM: the wgllm binary (default target/debug/wgllm); SCREENSHOT: where the screenshot goes
// (default docs/web-chat.png, the README's; CI writes it under target/). CHROMIUM: the
// browser (default /usr/bin/chromium). The model cache is wgllm's ($XDG_CACHE_HOME honoured).
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, open, serve } from './harness.mjs';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const wgllm = resolve(process.argv[2] || 'target/debug/wgllm');
const screenshot = resolve(process.argv[3] || resolve(web, '..', 'docs', 'web-chat.png'));
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

const { server, base, cache } = await serve(wgllm, web);
const browser = await launch();
let code = 1;
try {
  const page = await open(browser, 1000, 760);
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
  const firstLoad = await page.evaluate(() => ({ fromCache: window.wgllm.fromCache }));
  if (firstLoad.fromCache) throw new Error('the first load came from the cache of a new profile');
  await page.$eval('#max', (el, n) => { el.value = String(n); }, maxTokens);
  await page.$eval('#temp', (el) => { el.value = '0'; }); // greedy, as `wgllm chat --temp 0`
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

  // The package's API, on the page's engine: a stream aborted after two pieces, then a request
  // of 3 tokens and one cut by a stop string, both greedy and within the CLI's answer.
  const stopWord = expected.split(' ').slice(2, 3).join(' ');
  const api = await page.evaluate(async (question, stopWord) => {
    const engine = window.wgllm.engine;
    const messages = [{ role: 'user', content: question }];
    const ac = new AbortController();
    const chunks = [];
    let aborted = null;
    try {
      const stream = await engine.chat.completions.create(
        { messages, stream: true, max_tokens: 40, temperature: 0 }, { signal: ac.signal });
      for await (const c of stream) {
        chunks.push(c);
        if (chunks.filter((k) => k.choices[0]?.delta?.content).length === 2) ac.abort();
      }
    } catch (e) {
      aborted = e.name;
    }
    const three = await engine.chat.completions.create({ messages, max_tokens: 3, temperature: 0 });
    const cut = await engine.chat.completions.create({ messages, max_tokens: 7, temperature: 0, stop: [` ${stopWord}`] });
    const schema = {
      type: 'object',
      properties: { capital: { type: 'string', enum: ['Paris', 'Rome', 'Berlin'] } },
      required: ['capital'],
      additionalProperties: false,
    };
    const json = await engine.chat.completions.create({
      messages: [{ role: 'user', content: `${question} Answer in JSON.` }], max_tokens: 24, temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } },
    });
    let refused = null;
    try {
      await engine.chat.completions.create({ messages, tools: [{ type: 'function', function: { name: 'f' } }] });
    } catch (e) {
      refused = e.message;
    }
    return { chunks, aborted, three, cut, json, refused };
  }, prompt, stopWord);
  const streamedText = api.chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  console.log(`api: aborted stream gave ${JSON.stringify(streamedText)} (${api.aborted}); 3 tokens ` +
    `${JSON.stringify(api.three.choices[0].message.content)}; cut at ' ${stopWord}': ` +
    `${JSON.stringify(api.cut.choices[0].message.content)}`);
  if (api.chunks[0]?.object !== 'chat.completion.chunk' || api.chunks[0].choices[0].delta.role !== 'assistant') {
    throw new Error(`the first chunk is not an assistant role delta: ${JSON.stringify(api.chunks[0])}`);
  }
  if (api.aborted !== 'AbortError') throw new Error(`the aborted stream ended with ${api.aborted}, not an AbortError`);
  if (!streamedText || !expected.startsWith(streamedText) || api.chunks.length > 6) {
    throw new Error(`the aborted stream gave ${api.chunks.length} chunks ${JSON.stringify(streamedText)}`);
  }
  const three = api.three.choices[0];
  if (three.finish_reason !== 'length' || api.three.usage.completion_tokens !== 3 ||
      !expected.startsWith(three.message.content) || !three.message.content) {
    throw new Error(`max_tokens 3 gave ${JSON.stringify(api.three)}`);
  }
  const cutText = api.cut.choices[0].message.content;
  if (api.cut.choices[0].finish_reason !== 'stop' || cutText !== expected.slice(0, expected.indexOf(` ${stopWord}`))) {
    throw new Error(`the stop string gave ${JSON.stringify(api.cut.choices[0])}`);
  }
  const jsonText = api.json.choices[0].message.content;
  console.log(`json_schema reply: ${JSON.stringify(jsonText)} (${api.json.choices[0].finish_reason})`);
  let parsed = null;
  try {
    parsed = JSON.parse(jsonText);
  } catch (e) {
    throw new Error(`the json_schema reply is not JSON: ${JSON.stringify(jsonText)}`);
  }
  if (api.json.choices[0].finish_reason !== 'stop' || Object.keys(parsed).join() !== 'capital' ||
      !['Paris', 'Rome', 'Berlin'].includes(parsed.capital)) {
    throw new Error(`the json_schema reply breaks its schema: ${jsonText}`);
  }
  if (!/tools/.test(api.refused || '')) throw new Error(`tools were not refused: ${api.refused}`);
  console.log('e2e: the API streams, aborts, stops at max_tokens and stop strings, holds a reply to ' +
    'a JSON schema, and refuses what it cannot do');

  // The page's stop button: a long reply stopped after its first piece; the page is usable.
  await page.evaluate(() => { window.wgllm.last = null; });
  await page.$eval('#max', (el) => { el.value = '60'; });
  await page.type('#prompt', 'Tell me a long story about a dragon.');
  await page.click('#send');
  await until((s) => s.reply > 0, 'the long reply starting');
  await page.click('#stop');
  await until((s) => s.last, 'stopping');
  const stopped = await page.evaluate(() => ({
    last: window.wgllm.last, busy: window.wgllm.busy,
    stopHidden: document.getElementById('stop').hidden,
    sendDisabled: document.getElementById('send').disabled,
  }));
  if (stopped.last.finish !== 'abort' || stopped.busy || !stopped.stopHidden || stopped.sendDisabled) {
    throw new Error(`the stop button left ${JSON.stringify(stopped)}`);
  }
  console.log(`e2e: the stop button stopped the reply at ${JSON.stringify(stopped.last.text)}`);

  // Markdown as the page renders replies: markup from the model is text, never HTML.
  const md = await page.evaluate(async () => {
    const { renderMarkdown } = await import('./markdown.js');
    const div = document.createElement('div');
    div.className = 'assistant';
    document.getElementById('log').append(div);
    window.pwned = false;
    renderMarkdown(div, 'Hi <script>window.pwned = true</script> <img src=x onerror="window.pwned = true">' +
      ' **bold** and `x < y`\n\n```html\n<script>window.pwned = true</script>\n```\n- one\n- [two](javascript:alert(1))');
    await new Promise((r) => setTimeout(r, 200));
    return {
      markup: div.querySelectorAll('script, img, a').length, pwned: window.pwned,
      strong: div.querySelector('strong')?.textContent, code: div.querySelector('pre code')?.textContent,
      items: div.querySelectorAll('li').length, text: div.textContent,
    };
  });
  await page.screenshot({ path: screenshot.replace(/\.png$/, '-markdown.png') });
  if (md.markup !== 0 || md.pwned || md.strong !== 'bold' || md.items !== 2 ||
      md.code !== '<script>window.pwned = true</script>' || !md.text.includes('<script>window.pwned = true</script>')) {
    throw new Error(`the Markdown was not rendered safely: ${JSON.stringify(md)}`);
  }
  console.log('e2e: Markdown renders, and a reply\'s <script> and <img> are shown as text');
  // A phone's width: the controls wrap, nothing runs off the page.
  await page.setViewport({ width: 390, height: 844 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await page.screenshot({ path: screenshot.replace(/\.png$/, '-mobile.png') });
  await page.setViewport({ width: 1000, height: 760 });
  if (overflow > 0) throw new Error(`at 390 px wide the page is ${overflow} px too wide`);
  console.log('e2e: the page fits a 390 px wide screen');

  // The file picker's path (File.stream()): the same model again.
  await page.evaluate(() => { window.wgllm.loaded = false; });
  await (await page.$('#file')).uploadFile(join(cache, modelFile));
  const pickS = await until((s) => s.loaded, 'loading the picked file');
  const fromFile = await described();
  console.log(`the picked file loaded in ${pickS.toFixed(1)} s: ${fromFile}`);
  if (fromFile !== fromUrl) throw new Error(`the picked file gave '${fromFile}', the URL '${fromUrl}'`);

  // The browser's cache: with the server gone, the model loads again from it, checked against
  // its sha256; a wrong sha256 is refused and the copy evicted.
  server.kill();
  await once(server, 'exit');
  const url = `${base}models/${modelFile}`;
  const sha256 = createHash('sha256').update(readFileSync(join(cache, modelFile))).digest('hex');
  const cached = await page.evaluate(async (url, sha256) => {
    const engine = window.wgllm.engine;
    const listed = await engine.cache.list();
    const again = await engine.load(url, { sha256 });
    let wrong = null;
    try {
      await engine.load(url, { sha256: sha256.replace(/^./, (c) => (c === '0' ? '1' : '0')) });
    } catch (e) {
      wrong = e.message;
    }
    return { listed, again, wrong, after: await engine.cache.list() };
  }, url, sha256);
  console.log(`cache: ${JSON.stringify(cached.listed)}; reloaded in ${cached.again.seconds.toFixed(1)} s ` +
    `from the cache: ${cached.again.fromCache}; a wrong sha256: ${cached.wrong}`);
  const entry = cached.listed.find((m) => m.url === url);
  if (!entry || entry.bytes !== readFileSync(join(cache, modelFile)).length) {
    throw new Error(`the model is not in the browser's cache: ${JSON.stringify(cached.listed)}`);
  }
  if (!cached.again.fromCache || cached.again.summary.replace(/ · .*/, '') !== fromUrl.replace(/ · .*/, '')) {
    throw new Error(`the second load was not served from the cache: ${JSON.stringify(cached.again)}`);
  }
  if (!/sha256/.test(cached.wrong || '') || cached.after.some((m) => m.url === url)) {
    throw new Error(`a wrong sha256 was not refused and evicted: ${cached.wrong}, ${JSON.stringify(cached.after)}`);
  }
  console.log('e2e: the second load came from the cache without the network, and a wrong sha256 was refused');
  code = 0;
} catch (e) {
  console.error(`e2e: ${e.message}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(code);
