// A real local cluster for the browser tests: `tessera up` in a temporary state directory, the
// admin token and port it wrote, a small API client, and polling with deadlines (no sleeps
// that wait for an event). Also the browser: Debian's chromium through playwright-core.
import {execFile} from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {promisify} from 'node:util';

import {chromium} from 'playwright-core';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const TESSERA = process.env.TESSERA_BIN || path.join(REPO, 'build', 'dev', 'bin', 'tessera');
export const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
export const ARTIFACTS = process.env.TESSERA_ARTIFACTS ||
    path.join(REPO, 'test-artifacts', 'dashboard');

const run = promisify(execFile);

export class Cluster {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-dash-'));
    this.state = path.join(this.dir, 'state');
  }

  async cli(...args) {
    return run(TESSERA, [...args, '--state-dir', this.state], {cwd: REPO, timeout: 180_000});
  }

  async up(flags = ['--generation', 'v6e', '--topology', '4x4', '--slices', '2']) {
    await this.cli('up', ...flags, '--heartbeat-ms', '500', '--lease-ms', '3000', '--timeout', '120');
    this.token = fs.readFileSync(path.join(this.state, 'admin.token'), 'utf8').trim();
    const head = JSON.parse(fs.readFileSync(path.join(this.state, 'head.json'), 'utf8'));
    this.port = head.port;
    // HTTPS, verified against the cluster CA `up` made (http only with --plain-http).
    this.url = `${head.scheme || 'http'}://127.0.0.1:${this.port}`;
    this.ca = fs.readFileSync(path.join(this.state, 'ca.crt'), 'utf8');
  }

  // fetch() for an https URL of the cluster (the head's, the router's), trusting the cluster CA
  // (Node's fetch cannot be given a CA): resolves to {status, headers.get(name), text()}.
  fetch(url, {method = 'GET', headers = {}, body} = {}) {
    return new Promise((resolve, reject) => {
      const req = https.request(url, {method, headers, ca: this.ca}, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({status: res.statusCode, headers: {get: (name) => res.headers[name.toLowerCase()]},
                   text: async () => text});
        });
        res.on('error', reject);
      });
      req.on('error', reject);
      if (body !== undefined) req.write(body);
      req.end();
    });
  }

  async down() {
    try {
      await this.cli('down', '--purge');
    } finally {
      fs.rmSync(this.dir, {recursive: true, force: true});
    }
  }

  async api(method, p, body) {
    const res = await this.fetch(this.url + p, {
      method,
      headers: {Authorization: `Bearer ${this.token}`, 'Content-Type': 'application/json'},
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch (_) { /* text */ }
    return {status: res.status, json, text};
  }

  async phase(name) {
    const r = await this.api('GET', `/api/v1/jobs/${name}`);
    return r.status === 200 ? r.json.status.phase : 'Gone';
  }
}

// Polls fn() until it returns something truthy, or throws after timeoutMs naming `what`. The
// polls start 50 ms apart and back off to 250 ms (intervalMs: a fixed period instead): many are
// an HTTPS request on a new connection, about 10 ms of the dev build's CPU each, and the pool of
// integration jobs shares two cores (docs/testing.md, "Polls").
export async function waitFor(what, fn, timeoutMs = 60_000, intervalMs = undefined) {
  const deadline = Date.now() + timeoutMs;
  let period = intervalMs ?? 50;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, period));
    if (intervalMs === undefined) period = Math.min(250, period * 1.5);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

export function trainJob(name, command, {slices = 1, topology = '4x4', env = {}} = {}) {
  return {
    apiVersion: 'tessera/v1', kind: 'TrainJob', metadata: {name},
    spec: {accelerator: 'v6e', topology, slices, template: {command, env, workingDir: REPO}},
  };
}

// The browser, trusting `cluster`'s CA: Chromium accepts a chain holding a key in
// --ignore-certificate-errors-spki-list (base64 SHA-256 of a certificate's public key). The list
// holds the CA's key (the head sends the CA at the end of its chain) and the head's own (the
// first certificate of server.crt), both this cluster's: a certificate of any other key is still
// refused.
export async function launchBrowser(cluster) {
  const spki = (pem) => crypto.createHash('sha256')
      .update(new crypto.X509Certificate(pem).publicKey.export({type: 'spki', format: 'der'}))
      .digest('base64');
  const server = fs.readFileSync(path.join(cluster.state, 'server.crt'), 'utf8');
  const trusted = [spki(cluster.ca), spki(server)].join(',');
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', `--ignore-certificate-errors-spki-list=${trusted}`],
  });
}

export async function screenshot(page, name) {
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({path: file, fullPage: true});
  return file;
}

// page.goto, again when Chromium reports net::ERR_NETWORK_CHANGED: it aborts a navigation when
// the machine's interfaces change, which other tests of the pool do while they run (network
// namespaces and their bridge for the partition tests). At most 5 tries, a moment apart.
export async function gotoPage(page, url) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await page.goto(url);
    } catch (e) {
      if (attempt >= 5 || !String(e.message).includes('ERR_NETWORK_CHANGED')) throw e;
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

export async function login(page, url, token) {
  await gotoPage(page, `${url}/`);
  await page.fill('#token', token);
  await page.click('[data-role=login-form] button[type=submit]');
}
