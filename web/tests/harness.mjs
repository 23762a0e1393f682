// What the end-to-end tests share: `wgllm web` serving the page and the model cache on a free
// port, and the system Chromium (never a downloaded browser) with WebGPU, through puppeteer-core.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import puppeteer from 'puppeteer-core';

/** Starts `wgllm web --dir web`; resolves to {server, base (the page's URL), cache (its model folder)}. */
export async function serve(wgllm, web) {
  const server = spawn(wgllm, ['web', '--port', '0', '--dir', web], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = once(server, 'exit').then(([code]) => {
    throw new Error(`wgllm web exited (${code}) before serving`);
  });
  const [line] = await Promise.race([once(createInterface({ input: server.stdout }), 'line'), exited]);
  exited.catch(() => {}); // a later exit is the test's own (one stops the server to go offline)
  server.stdout.resume();
  return {
    server,
    base: line.match(/http:\/\/\S+?\//)[0],
    cache: line.match(/the model cache (.+) at http/)[1],
  };
}

/** Headless Chromium with WebGPU (SwiftShader where there is no GPU); CHROMIUM overrides the path. */
export function launch(protocolTimeout = 120_000) {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    protocolTimeout,
    args: ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--no-sandbox', '--disable-dev-shm-usage'],
  });
}

/** A new page that echoes the page's console and errors. */
export async function open(browser, width, height) {
  const page = await browser.newPage();
  await page.setViewport({ width, height });
  page.on('console', (m) => console.log(`page: ${m.text()}`));
  page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
  return page;
}
