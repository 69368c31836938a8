// Makes docs/images/dashboard.png (and dashboard-job.png) from the demo cluster: two v6e 4x4
// slices running examples/train/job.yaml (with more steps, so it is still training when the
// picture is taken), plus a job that fails, so the picture shows a recovery timeline too.
//
//   TESSERA_BIN=build/release/bin/tessera node tests/dashboard/screenshot.mjs
import fs from 'node:fs';
import path from 'node:path';

import {Cluster, gotoPage, REPO, launchBrowser, login, trainJob, waitFor} from './cluster.mjs';

const out = path.join(REPO, 'docs', 'images');
fs.mkdirSync(out, {recursive: true});
const cluster = new Cluster();
let browser;
try {
  await cluster.up();
  const yaml = fs.readFileSync(path.join(REPO, 'examples/train/job.yaml'), 'utf8')
      .replace(/STEPS: "\d+"/, 'STEPS: "100000"');
  const applied = await cluster.fetch(`${cluster.url}/api/v1/apply`, {
    method: 'POST', body: yaml,
    headers: {Authorization: `Bearer ${cluster.token}`, 'Content-Type': 'application/yaml'},
  });
  if (applied.status !== 201) throw new Error(`apply: ${applied.status} ${await applied.text()}`);
  await waitFor('train-demo Running', async () => (await cluster.phase('train-demo')) === 'Running', 120_000);
  // Let it report steps and CPU for a few heartbeats.
  await waitFor('train-demo steps', async () => {
    const j = (await cluster.api('GET', '/api/v1/jobs/train-demo')).json;
    return j.status.lastStep >= 5;
  }, 120_000, 500);
  // A pending job behind it, so the jobs table and queue show a reason.
  await cluster.api('POST', '/api/v1/jobs', trainJob('waiting-for-chips', ['/usr/bin/python3', '-c', 'pass']));

  browser = await launchBrowser(cluster);
  const page = await (await browser.newContext({viewport: {width: 1280, height: 860}})).newPage();
  await login(page, cluster.url, cluster.token);
  await page.locator('.legend li[data-job="train-demo"]').waitFor({timeout: 30_000});
  await waitFor('a utilization sample above 0', () => page.evaluate(
      () => (window.__tessera.state.samples.at(-1)?.all.util || 0) > 0), 30_000, 500);
  await page.locator(`tr[data-host="slice-000-w1"]`).focus();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({path: path.join(out, 'dashboard.png')});
  await gotoPage(page, `${cluster.url}/#/jobs/train-demo`);
  await page.locator('details[data-rank="0"] pre').filter({hasText: /\S/}).waitFor({timeout: 30_000});
  await page.screenshot({path: path.join(out, 'dashboard-job.png')});
  console.log(`wrote ${path.relative(REPO, out)}/dashboard.png and dashboard-job.png`);
} finally {
  await browser?.close();
  await cluster.down();
}
