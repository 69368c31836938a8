// Unit tests of the dashboard's pure functions (web/model.js): no browser, no cluster.
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {NONE, chipUtilization, jobColors, layoutCluster, recoveryTimeline, utilizationSample, fmtMs,
        known, percentText, slicesText, stepText, tail} from '../../web/model.js';

const host2d = (slice, worker, job = '', state = 'Ready', usage = {}) => ({
  metadata: {name: `${slice}-w${worker}`},
  spec: {generation: 'v6e', chips: 4, slice: {name: slice, topology: '4x4', worker}},
  status: {state, job, usage},
});
const host3d = (cube, x, y, z, job = '') => ({
  metadata: {name: `${cube}-h${z * 4 + y * 2 + x}`},
  spec: {generation: '7x', chips: 4, cube: {name: cube, block: 'block-00', coord: [x, y, z]}},
  status: {state: 'Ready', job, usage: {}},
});

test('chip utilization: device figure first, else worker CPU capped at one core', () => {
  assert.equal(chipUtilization({cpuPercent: 50}), 0.5);
  assert.equal(chipUtilization({cpuPercent: 250}), 1);
  assert.equal(chipUtilization({cpuPercent: 250, chipUtilizationPercent: 20}), 0.2);
  assert.equal(chipUtilization(undefined), 0);
});

test('a 2D slice is its chip grid, each host a 2x2 block at its worker position', () => {
  const hosts = [0, 1, 2, 3].map((w) => host2d('slice-000', w));
  const {groups, chips} = layoutCluster(hosts);
  assert.equal(chips, 16);
  assert.equal(groups.length, 1);
  assert.equal(groups[0].cols, 4);
  assert.equal(groups[0].rows, 4);
  const cells = new Set(groups[0].hosts.flatMap((h) => h.cells.map((c) => c.join(','))));
  assert.equal(cells.size, 16, 'no chip drawn twice');
  assert.deepEqual(groups[0].hosts.find((h) => h.name === 'slice-000-w3').cells[0], [2, 2]);
});

test('a 9,216-chip Ironwood pod lays out as 144 cubes with every chip once', () => {
  const hosts = [];
  for (let c = 0; c < 144; c++)
    for (let z = 0; z < 4; z++)
      for (let y = 0; y < 2; y++)
        for (let x = 0; x < 2; x++) hosts.push(host3d(`cube-${String(c).padStart(3, '0')}`, x, y, z));
  const t0 = performance.now();
  const {groups, chips} = layoutCluster(hosts);
  const ms = performance.now() - t0;
  assert.equal(chips, 9216);
  assert.equal(groups.length, 144);
  for (const g of groups) {
    const cells = new Set(g.hosts.flatMap((h) => h.cells.map((c) => c.join(','))));
    assert.equal(cells.size, 64, `${g.label}: 64 distinct chips`);
  }
  assert.ok(ms < 500, `layout took ${ms} ms`);
});

test('job colours are distinct and stable', () => {
  const a = jobColors(['b', 'a', 'c', 'a']);
  assert.equal(a.size, 3);
  assert.equal(new Set(a.values()).size, 3);
  assert.deepEqual(jobColors(['a', 'b', 'c']), a);
});

test('utilization sample is chip weighted and counts lost hosts as idle', () => {
  const s = utilizationSample([
    host2d('s', 0, 'j', 'Ready', {cpuPercent: 100, memoryBytes: 10}),
    host2d('s', 1, '', 'Ready', {cpuPercent: 0}),
    host2d('s', 2, 'j', 'Lost', {cpuPercent: 100}),
    host2d('s', 3, '', 'Ready'),
  ], 1);
  assert.equal(s.all.util, 0.25);
  assert.equal(s.all.allocated, 0.5);
  assert.equal(s.all.chips, 16);
  assert.equal(s.byGeneration.v6e.memoryBytes, 10);
});

test('recovery timeline from attempts', () => {
  const job = {
    metadata: {name: 'j', creationTimestampMs: 1000},
    status: {attempts: [
      {attempt: 0, placedMs: 1100, startedMs: 1200, firstStepMs: 1500, failureMs: 5000,
       detectedMs: 5300, endedMs: 5400, endReason: 'WorkerFailed', failedRanks: [3]},
      {attempt: 1, placedMs: 6000, runningMs: 6100, firstStepMs: 9000, resumedFromStep: 40,
       recovery: {timeToDetectMs: 300, timeToScheduleMs: 600, timeToRecoverMs: 4000, stepsLost: 2}},
    ]},
  };
  const t = recoveryTimeline(job, []);
  const kinds = t.map((e) => e.kind);
  assert.deepEqual(kinds, ['submit', 'schedule', 'start', 'step', 'failure', 'detect', 'schedule',
                           'start', 'step', 'recovered']);
  assert.match(t[4].label, /WorkerFailed \(rank 3\)/);
  assert.match(t[9].label, /Recovered in 4.0 s/);
  assert.match(t[9].detail, /2 steps lost/);
});

test('recovery timeline falls back to events, including lost hosts of the job', () => {
  const job = {metadata: {name: 'j', creationTimestampMs: 1000},
               status: {workers: [{host: 'h1'}]}};
  const events = [
    {reason: 'Created', object: 'trainjob/j', timeMs: 1000},
    {reason: 'Placed', object: 'trainjob/j', timeMs: 1100},
    {reason: 'Started', object: 'trainjob/j', timeMs: 1200},
    {reason: 'Placed', object: 'trainjob/other', timeMs: 1300},
    {reason: 'HostLost', object: 'host/h1', timeMs: 1400, message: 'no heartbeat'},
    {reason: 'WorkerFailed', object: 'trainjob/j', timeMs: 1500, message: 'rank 0 exited 1'},
  ];
  const t = recoveryTimeline(job, events);
  assert.deepEqual(t.map((e) => e.label), ['Submitted', 'Placed', 'Started', 'HostLost (h1)', 'WorkerFailed']);
  assert.equal(t[4].kind, 'failure');
});

test('formatting helpers', () => {
  assert.equal(fmtMs(850), '850 ms');
  assert.equal(fmtMs(12300), '12.3 s');
  assert.equal(fmtMs(245000), '4 min 5 s');
  assert.equal(slicesText({slices: {min: 1, max: 2}}), '1-2');
  assert.equal(slicesText({}), '1');
  assert.equal(tail('a\nb\nc\n', 2), 'b\nc');
});

test('the API\'s -1 sentinels are shown as a dash, never as data', () => {
  assert.equal(NONE, '—');
  for (const none of [-1, null, undefined, NaN, Infinity, 'x']) {
    assert.equal(known(none), false, String(none));
    assert.equal(stepText(none), NONE, String(none));
    assert.equal(percentText(none), NONE, String(none));
    assert.equal(fmtMs(none), NONE, String(none));
  }
  assert.equal(stepText(0), '0');
  assert.equal(stepText(42), '42');
  assert.equal(percentText(0), '0.0%');
  assert.equal(percentText(0.975), '97.5%');
  assert.equal(fmtMs(0), '0 ms');
});

test('a job that failed before its first step has no -1 in its timeline', () => {
  // As the head writes it: two attempts, neither reached a step, so every step figure is -1
  // and the recovery figures between them are -1 too.
  const attempt = (n, placedMs) => ({
    attempt: n, slices: 1, placedMs, runningMs: placedMs + 100, firstStepMs: 0, firstStep: -1,
    lastStep: -1, lastStepMs: 0, restored: false, resumedFromStep: -1, restoreSeconds: -1,
    failureMs: placedMs + 1000, detectedMs: placedMs + 1100, endedMs: placedMs + 1200,
    endReason: 'WorkerFailed', failedRanks: [0],
  });
  const second = attempt(1, 5000);
  second.recovery = {timeToDetectMs: 100, timeToScheduleMs: 200, timeToFirstStepMs: -1,
                     timeToRestoreMs: -1, timeToRecoverMs: -1, stepsLost: -1};
  const job = {metadata: {name: 'j', creationTimestampMs: 1000},
               status: {phase: 'Failed', lastStep: -1, attempts: [attempt(0, 1100), second],
                        recovery: {failures: 2, maxFailures: 1, goodput: -1, stepsLost: 0}}};
  const t = recoveryTimeline(job, []);
  assert.ok(t.length > 0);
  for (const e of t) {
    assert.doesNotMatch(`${e.label} ${e.detail}`, /-1\b|-100/, JSON.stringify(e));
  }
  assert.ok(!t.some((e) => e.kind === 'recovered'), 'it never recovered');
  assert.ok(!t.some((e) => e.kind === 'step'), 'it made no step');
});
