// The Services pages in a real headless Chromium against a live local cluster (three v6e 4x4
// slices, the router `tessera up` starts): a Service of two replica groups of a fast fake
// server (tests/integration/router_backend.py) is listed with its replicas and autoscaler, its
// groups are drawn on the chip grid in their own colours, readiness per group follows a group
// restart live, and requests sent through the router show up as request rate and latency.
// Screenshots go to test-artifacts/dashboard/ ($TESSERA_ARTIFACTS).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {after, before, test} from 'node:test';

import {Cluster, gotoPage, REPO, launchBrowser, login, screenshot, waitFor} from './cluster.mjs';

const NAME = 'dash-svc';
// Every process of a group serves HTTP on its $PORT; the leader's /healthz answers 200.
const SERVICE = {
  apiVersion: 'tessera/v1', kind: 'Service', metadata: {name: NAME},
  spec: {
    accelerator: 'v6e', topology: '4x4',
    command: ['/bin/sh', '-c',
              'exec /usr/bin/python3 tests/integration/router_backend.py --name "r$TESSERA_REPLICA" --port "$PORT"'],
    workingDir: REPO,
    // Autoscaled, so the page has a decision and its reason to show; the load below stays far
    // under 2 replicas x 4, so it keeps 2.
    autoscaling: {minReplicas: 2, maxReplicas: 3, targetOngoingRequests: 4, upscaleDelay: '600s'},
    readiness: {path: '/healthz', startupGrace: '60s', period: '1s', timeout: '2s'},
    terminationGracePeriod: '2s',
  },
};

let cluster;
let browser;
let routerUrl;  // up's router: HTTPS with a certificate from the cluster CA

before(async () => {
  cluster = new Cluster();
  await cluster.up(['--generation', 'v6e', '--topology', '4x4', '--slices', '3']);
  const router = JSON.parse(fs.readFileSync(path.join(cluster.state, 'router.json'), 'utf8'));
  routerUrl = `${router.scheme || 'http'}://127.0.0.1:${router.port}`;
  browser = await launchBrowser(cluster);
  const r = await cluster.api('POST', '/api/v1/apply', SERVICE);
  assert.ok(r.status === 201 || r.status === 200, `apply: ${r.status} ${r.text}`);
  await waitFor('both replica groups Ready', async () => {
    const s = (await cluster.api('GET', `/api/v1/services/${NAME}`)).json;
    return s?.status?.roles?.[0]?.readyReplicas === 2 && s.status.phase === 'Ready';
  }, 120_000, 250);
});

after(async () => {
  await browser?.close();
  await cluster?.down();
});

async function newPage() {
  const context = await browser.newContext({viewport: {width: 1400, height: 1000}});
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.done = async () => {
    await context.close();
    assert.deepEqual(errors, [], 'uncaught errors in the page');
  };
  return page;
}

async function groups() {
  return (await cluster.api('GET', `/api/v1/services/${NAME}`)).json.status.roles[0].replicas;
}

// Requests through the router until stop() (a few at a time, each answered at once).
function sendLoad() {
  let running = true;
  let sent = 0, failed = 0;
  const worker = async (k) => {
    while (running) {
      try {
        const res = await cluster.fetch(`${routerUrl}/services/${NAME}/hello-${k}`);
        await res.text();
        if (res.status === 200) sent++;
        else failed++;
      } catch (_) {
        failed++;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const done = Promise.all([0, 1, 2].map(worker));
  return {stop: async () => { running = false; await done; return {sent, failed}; }};
}

// The canvas pixel in the middle-left of each named host's rectangle, and the colour wanted.
async function pixels(page, hosts, key) {
  return page.evaluate(([names, groupKey]) => {
    const cv = window.__tessera.cluster;
    const probe = document.createElement('canvas').getContext('2d');
    probe.fillStyle = cv.colors.get(groupKey);
    probe.fillRect(0, 0, 1, 1);
    const want = [...probe.getImageData(0, 0, 1, 1).data.slice(0, 3)];
    const ctx = cv.canvas.getContext('2d');
    const dpr = window.devicePixelRatio || 1;
    // Two pixels in from the top-left corner: clear of the leader's ring and of stripes'
    // first line.
    const at = (r) => [...ctx.getImageData(Math.round((r.x + 2) * dpr), Math.round((r.y + 2) * dpr), 1, 1).data.slice(0, 3)];
    const free = cv.rects.find((r) => !r.entry.host.status.job);
    return {want, got: names.map((n) => at(cv.rectByHost.get(n))), free: free ? at(free) : null};
  }, [hosts, key]);
}

test('the Services list shows the Service, its replicas, autoscaler and groups on the grid', async () => {
  const page = await newPage();
  await login(page, cluster.url, cluster.token);
  await gotoPage(page, `${cluster.url}/#/services`);
  const row = page.locator(`tr[data-service="${NAME}"]`);
  await row.filter({hasText: 'Ready'}).filter({hasText: '2 / 2'}).waitFor({timeout: 60_000});
  assert.match(await row.innerText(), /v6e 4x4/);
  // The autoscaler's decision and its reason, once the head has run it (every tick).
  await row.filter({hasText: /2 replicas: demand/}).waitFor({timeout: 60_000});
  // Each group in the legend, ready, with its slice; the third slice free.
  const reps = await groups();
  for (const r of reps) {
    const item = page.locator(`.legend li[data-group="${NAME}/server/${r.replica}"][data-ready="true"]`);
    await item.filter({hasText: r.slice}).waitFor();
  }
  await page.locator('.legend li', {hasText: 'free 16 chips'}).waitFor();
  // On the canvas each group's hosts have its colour, and the groups' colours differ.
  const colors = [];
  for (const r of reps) {
    const px = await pixels(page, r.hosts, `${NAME}/server/${r.replica}`);
    for (const p of px.got) assert.deepEqual(p, px.want, `replica ${r.replica}`);
    assert.notDeepEqual(px.free, px.want);
    colors.push(px.want);
  }
  assert.notDeepEqual(colors[0], colors[1]);
  // Hovering a leader names the Service, role, replica and that it leads.
  const leader = reps[0].hosts[0];
  const box = await page.evaluate((n) => {
    const cv = window.__tessera.cluster;
    const r = cv.rectByHost.get(n);
    const b = cv.canvas.getBoundingClientRect();
    return {x: b.left + r.x + r.w / 2, y: b.top + r.y + r.h / 2};
  }, leader);
  await page.mouse.move(box.x, box.y);
  const tip = page.locator('.tooltip').filter({hasText: leader});
  await tip.waitFor();
  assert.match(await tip.innerText(), new RegExp(`Service: ${NAME} server replica ${reps[0].replica},\\s+leader · Ready`));
  await screenshot(page, 'services-list');
  await page.done();
});

test('a Service page shows readiness per group live, and request rate and latency', async () => {
  const page = await newPage();
  await login(page, cluster.url, cluster.token);
  await gotoPage(page, `${cluster.url}/#/services/${NAME}`);
  const reps = await groups();
  for (const r of reps) {
    const tr = page.locator(`tr[data-group="${NAME}/server/${r.replica}"][data-phase="Ready"]`);
    await tr.filter({hasText: r.slice}).filter({hasText: r.hosts[0]}).waitFor({timeout: 60_000});
  }
  await page.locator('[data-role=autoscaler]', {hasText: /2 replicas: demand .* target 4/}).waitFor({timeout: 60_000});

  // Traffic through the router: the charts' legends get a request rate and a latency.
  const load = sendLoad();
  let result;
  try {
    await waitFor('a request rate above 0 on the page', () => page.evaluate(() => {
      const m = document.querySelector('[data-role=rate-legend]')?.textContent.match(/requests\/s: ([\d.]+)/);
      return m && Number(m[1]) > 0;
    }), 60_000, 250);
    await page.locator('[data-role=latency-legend]', {hasText: /p50: [\d.]+ (µs|ms|s)/}).waitFor({timeout: 30_000});
    await page.locator('[data-role=latency-legend]', {hasText: /p99: [\d.]+ (µs|ms|s)/}).waitFor();
    await page.locator('[data-role=replicas-legend]', {hasText: 'ready: 2'}).waitFor();
    // A few points on the rate chart before the picture, so it shows lines.
    await waitFor('three request rate points', () => page.evaluate(async (name) => {
      const {trafficSeries} = await import('/web/services.js');
      return trafficSeries(window.__tessera.state.serviceSamples.get(name) || [], 'server').rate.length >= 3;
    }, NAME), 60_000, 250);
    await screenshot(page, 'service-page');
  } finally {
    result = await load.stop();
  }
  assert.ok(result.sent > 0, JSON.stringify(result));
  assert.equal(result.failed, 0, JSON.stringify(result));
  // The head serves what the page charted: the router's counters in status.roles[].traffic.
  const traffic = (await cluster.api('GET', `/api/v1/services/${NAME}`)).json.status.roles[0].traffic;
  assert.ok(traffic.requests > 0 && traffic.latencySecondsSum > 0, JSON.stringify(traffic));
  assert.equal(traffic.latencyBuckets.cumulative.at(-1), traffic.requests);

  // kill -9 of a follower of one group: that group leaves Ready (striped on the grid), is
  // recreated and comes back, with a restart counted; the other stays Ready throughout.
  const [victim, other] = reps;
  const follower = victim.processes[1];
  process.kill(follower.pid, 'SIGKILL');
  const victimRow = (phase) => page.locator(`tr[data-group="${NAME}/server/${victim.replica}"]${phase}`);
  await victimRow(':not([data-phase="Ready"])').waitFor({timeout: 30_000});
  await page.locator(`.legend li[data-group="${NAME}/server/${victim.replica}"][data-ready="false"]`).waitFor();
  assert.equal(await page.locator(`tr[data-group="${NAME}/server/${other.replica}"]`).getAttribute('data-phase'), 'Ready');
  await screenshot(page, 'service-page-recreating');
  await victimRow('[data-phase="Ready"]').waitFor({timeout: 90_000});
  const restarts = await victimRow('').locator('td').nth(6).innerText();
  // On a mismatch, the Service's events say what restarted the group each time.
  const serviceEvents = async () => ((await cluster.api('GET', '/api/v1/events')).json?.items || [])
      .filter((e) => e.object === `service/${NAME}`).map((e) => `${e.reason}: ${e.message}`);
  if (restarts !== '1') assert.fail(`restarts ${restarts}, not 1:\n${(await serviceEvents()).join('\n')}`);
  // Replicas over time went 2 -> 1 -> 2 ready, as the watch brought each change.
  const ready = await page.evaluate(async (name) => {
    const {replicaSeries} = await import('/web/services.js');
    return replicaSeries(window.__tessera.state.serviceSamples.get(name) || [], 'server').ready.map((p) => p[1]);
  }, NAME);
  const dip = ready.indexOf(1);
  assert.ok(dip > 0 && ready.indexOf(2) < dip && ready.lastIndexOf(2) > dip, ready.join(','));
  await page.locator('[data-role=replicas-legend]', {hasText: 'ready: 2'}).waitFor();
  await page.done();
});

test('deleting the Service empties the list and frees its chips, live', async () => {
  const page = await newPage();
  await login(page, cluster.url, cluster.token);
  await gotoPage(page, `${cluster.url}/#/services`);
  await page.locator(`tr[data-service="${NAME}"]`).waitFor({timeout: 60_000});
  const r = await cluster.api('DELETE', `/api/v1/services/${NAME}`);
  assert.equal(r.status, 200, r.text);
  await page.locator('tbody', {hasText: 'No services'}).waitFor({timeout: 60_000});
  await page.locator('.legend li', {hasText: 'free 48 chips'}).waitFor({timeout: 30_000});
  await page.done();
});

// A Service with a prefill and a decode role (each a 4x4 slice of serving_backend.py, whose
// decode role answers X-Tessera-Prefilled: remote when the router names a prefill replica):
// its page shows the two roles side by side, with the router's handoffs, pairing and the
// decode role's time per output token. The real KV handoff is tests/integration/test_disagg_live.py.
test('a disaggregated Service page shows prefill and decode side by side with handoffs and TPOT', async () => {
  const PD = 'dash-pd';
  const roleSpec = (name, kind) => ({
    name, disaggregation: kind, accelerator: 'v6e', topology: '4x4', replicas: 1,
    command: ['/usr/bin/python3', 'tests/integration/serving_backend.py', '--token-ms', '2'],
    workingDir: REPO, readiness: {path: '/healthz', startupGrace: '60s', period: '1s', timeout: '2s'},
    terminationGracePeriod: '2s',
  });
  const doc = {apiVersion: 'tessera/v1', kind: 'Service', metadata: {name: PD},
               spec: {roles: [roleSpec('decode', 'decode'), roleSpec('prefill', 'prefill')]}};
  const r = await cluster.api('POST', '/api/v1/apply', doc);
  assert.ok(r.status === 201 || r.status === 200, `apply: ${r.status} ${r.text}`);
  await waitFor('both roles Ready', async () => {
    const s = (await cluster.api('GET', `/api/v1/services/${PD}`)).json;
    return s?.status?.phase === 'Ready' && s.status.roles.every((x) => x.readyReplicas === 1);
  }, 120_000, 250);
  // Streamed completions through the router until the head has the decode role's report.
  const stream = async () => {
    const res = await cluster.fetch(`${routerUrl}/services/${PD}/v1/completions`, {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({prompt: 'a prompt for the prefill role', max_tokens: 8, stream: true})});
    const text = await res.text();
    assert.equal(res.status, 200, text);
    assert.equal(res.headers.get('x-tessera-prefilled'), 'remote');
  };
  await waitFor('the decode role counted handoffs and TPOT', async () => {
    await stream();
    const s = (await cluster.api('GET', `/api/v1/services/${PD}`)).json;
    const t = s.status.roles.find((x) => x.name === 'decode')?.traffic;
    return t?.disagg?.prefilledRemote > 0 && t.tpotCount > 0;
  }, 60_000, 200);
  const page = await newPage();
  await login(page, cluster.url, cluster.token);
  await gotoPage(page, `${cluster.url}/#/services/${PD}`);
  const table = page.locator('[data-role=disagg] table.disagg');
  await table.waitFor({timeout: 60_000});
  assert.deepEqual(await table.locator('thead th[data-role-name]').evaluateAll((ths) => ths.map((t) => t.dataset.roleName)),
                   ['prefill', 'decode'], 'prefill, then decode');
  const row = (label) => table.locator('tbody tr', {hasText: label});
  assert.deepEqual(await row('Ready / desired').locator('td').allInnerTexts(), ['1 / 1', '1 / 1']);
  const tpot = await row('Time per output token').locator('td').allInnerTexts();
  assert.equal(tpot[0], '—');
  assert.match(tpot[1], /^[\d.]+ (µs|ms|s)$/);
  assert.match((await row('Time to first token').locator('td').allInnerTexts())[0], /^[\d.]+ (µs|ms|s)$/,
               'the prefill role prefilled the handed-off streams');
  await page.locator('[data-role=handoffs]', {hasText: /^[1-9]\d* prefilled remotely/}).waitFor({timeout: 60_000});
  assert.match(await page.locator('[data-role=fallbacks]').innerText(), /^0 to local prefill/);
  // One slice per role: never the same slice, so 0% on the decode replica's slice.
  assert.match(await page.locator('[data-role=pairing]').innerText(), /^0% on the decode replica's slice \(0 same slice, [1-9]\d* other slice/);
  await screenshot(page, 'service-page-disagg');
  await page.done();
  assert.equal((await cluster.api('DELETE', `/api/v1/services/${PD}`)).status, 200);
});
