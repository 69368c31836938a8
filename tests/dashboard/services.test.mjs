// Unit tests of the Services pages' pure functions (web/services.js): no browser, no cluster.
import assert from 'node:assert/strict';
import {test} from 'node:test';

import {autoscalerText, disaggRoles, groupKey, histogramQuantile, latestTraffic, mergeService, rateText,
        replicaGroups, replicaSeries, replicasText, roleSizeText, secondsText, serviceSample,
        shareText, trafficSeries} from '../../web/services.js';

const proc = (host, port = 9000) => ({host, address: '127.0.0.1', port, phase: 'Running', pid: 1});
const replica = (n, phase, slice, hosts, extra = {}) => ({
  replica: n, generation: 1, phase, reason: phase, message: '', restarts: 0, slice,
  hosts, processes: hosts.map((h) => proc(h)), ...extra,
});
const service = (name, roles, version = 1) => ({
  metadata: {name, resourceVersion: version},
  spec: {roles: roles.map((r) => ({name: r.name, replicas: r.replicas.length}))},
  status: {phase: 'Ready', roles},
});
const role = (name, replicas, extra = {}) => ({
  name, generation: 1, desiredReplicas: replicas.length,
  readyReplicas: replicas.filter((r) => r.phase === 'Ready').length, replicas, ...extra,
});

const near = (actual, want) => assert.ok(Math.abs(actual - want) < 1e-12, `${actual} is not ${want}`);

test('replica groups: one per replica, hosts in worker order, the leader first, distinct colours', () => {
  const llm = service('llm', [role('server', [
    replica(1, 'Starting', 'slice-001', ['s1-w0', 's1-w1']),
    replica(0, 'Ready', 'slice-000', ['s0-w0', 's0-w1']),
    replica(2, 'Pending', '', []),
  ])]);
  const {groups, byHost} = replicaGroups([llm]);
  assert.deepEqual(groups.map((g) => g.key), ['llm/server/0', 'llm/server/1', 'llm/server/2']);
  assert.deepEqual(groups.map((g) => g.ready), [true, false, false]);
  assert.equal(groups[0].slice, 'slice-000');
  assert.equal(groups[0].leader, 's0-w0');
  assert.equal(groups[2].hosts.length, 0, 'a pending group holds no host');
  assert.equal(groups[2].color, null, 'and takes no colour');
  assert.notEqual(groups[0].color, groups[1].color);
  assert.deepEqual(byHost.get('s0-w0'), {group: groups[0], worker: 0, leader: true});
  assert.deepEqual(byHost.get('s1-w1'), {group: groups[1], worker: 1, leader: false});
  assert.equal(byHost.size, 4);
  assert.equal(groupKey('a', 'b', 3), 'a/b/3');
});

test('replica groups of several services are ordered by service, then role in spec order', () => {
  const b = service('b', [role('server', [replica(0, 'Ready', 's2', ['h4'])])]);
  const a = service('a', [role('prefill', [replica(0, 'Ready', 's0', ['h0'])]),
                          role('decode', [replica(0, 'Unready', 's1', ['h2'])])]);
  const {groups} = replicaGroups([b, a]);
  assert.deepEqual(groups.map((g) => g.key), ['a/prefill/0', 'a/decode/0', 'b/server/0']);
  // Colours do not depend on the order the services came in.
  assert.deepEqual(replicaGroups([a, b]).groups.map((g) => g.color), groups.map((g) => g.color));
});

test('replicas, size and autoscaler in words', () => {
  assert.equal(replicasText({readyReplicas: 1, desiredReplicas: 3}), '1 / 3');
  assert.equal(replicasText(undefined), '0 / 0');
  assert.equal(roleSizeText({replicas: 1}), '1 replica');
  assert.equal(roleSizeText({replicas: 2}), '2 replicas');
  assert.equal(roleSizeText({autoscaling: {minReplicas: 0, maxReplicas: 4, targetOngoingRequests: 2}}),
               'autoscaling 0-4, target 2 ongoing');
  assert.equal(autoscalerText({}), '');
  assert.equal(autoscalerText({autoscaler: {desiredReplicas: 2, reason: 'demand 3 in flight over 2 replicas, target 4 -> want 1: keep 2'}}),
               '2 replicas: demand 3 in flight over 2 replicas, target 4 -> want 1: keep 2');
});

test('a stale list brings only traffic and the autoscaler; a fresh one replaces the document', () => {
  const known = service('llm', [role('server', [replica(0, 'Ready', 's0', ['h0'])])], 7);
  const listed = service('llm', [role('server', [replica(0, 'Unready', 's0', ['h0'])],
      {traffic: {atMs: 5, requests: 3}, autoscaler: {desiredReplicas: 1, reason: 'r'}})], 6);
  const merged = mergeService(known, listed, true);
  assert.equal(merged.status.roles[0].replicas[0].phase, 'Ready', 'the watched phase stays');
  assert.deepEqual(merged.status.roles[0].traffic, {atMs: 5, requests: 3});
  assert.equal(merged.status.roles[0].autoscaler.reason, 'r');
  assert.equal(known.status.roles[0].traffic, undefined, 'the known document is not mutated');
  assert.equal(mergeService(known, listed, false), listed);
  assert.equal(mergeService(undefined, listed, true), listed);
});

test('histogram quantiles interpolate inside the bucket, as histogram_quantile does', () => {
  const bounds = [0.01, 0.1, 1];
  // 10 below 10 ms, 80 in (10 ms, 100 ms], 10 in (100 ms, 1 s], none beyond.
  const cum = [10, 90, 100, 100];
  near(histogramQuantile(0.5, bounds, cum), 0.055);  // 40 of the 80 into (10 ms, 100 ms]
  near(histogramQuantile(0.99, bounds, cum), 0.91);  // 9 of the 10 into (100 ms, 1 s]
  near(histogramQuantile(0.05, bounds, cum), 0.005);
  // Beyond the last bound: that bound.
  assert.equal(histogramQuantile(0.99, bounds, [0, 0, 0, 5]), 1);
  assert.equal(histogramQuantile(0.5, bounds, [0, 0, 0, 0]), null);
  assert.equal(histogramQuantile(0.5, bounds, [1, 2]), null, 'counts that do not match the bounds');
});

const traffic = (atMs, requests, sum, cumulative, ongoing = 0) => ({
  atMs, requests, latencySecondsSum: sum, ongoingRequests: ongoing,
  latencyBuckets: {upperBounds: [0.01, 0.1, 1], cumulative},
});
const sample = (timeMs, t, ready = 2, desired = 2) => ({timeMs, roles: {server: {ready, desired, traffic: t}}});

test('request rate and latency come from successive distinct reports', () => {
  const samples = [
    sample(1000, null),
    sample(2000, traffic(10_000, 100, 2, [50, 100, 100, 100])),
    sample(3000, traffic(10_000, 100, 2, [50, 100, 100, 100])),  // the same report again: skipped
    sample(4000, traffic(12_000, 140, 4, [50, 120, 140, 140], 3)),  // 40 requests in 2 s
    sample(5000, traffic(14_000, 140, 4, [50, 120, 140, 140])),  // none finished
  ];
  const s = trafficSeries(samples, 'server');
  assert.deepEqual(s.rate, [[12_000, 20], [14_000, 0]]);
  assert.deepEqual(s.mean, [[12_000, 2 / 40]]);
  // Of those 40: 20 in (10 ms, 100 ms], 20 in (100 ms, 1 s].
  assert.equal(s.p50.length, 1);
  assert.equal(s.p50[0][1], 0.1);
  near(s.p99[0][1], 0.1 + 0.9 * (19.6 / 20));
  assert.deepEqual(s.ongoing.map((p) => p[1]), [0, 3, 0]);
  assert.deepEqual(trafficSeries(samples, 'decode'), {rate: [], mean: [], p50: [], p99: [], ongoing: []});
  const last = latestTraffic(samples, 'server');
  assert.equal(last.rate, 0);
  assert.equal(last.p50, 0.1, 'the last interval that finished requests');
});

test('a router restart (counters going down) starts the rate afresh, never negative', () => {
  const samples = [
    sample(1, traffic(1000, 500, 5, [500, 500, 500, 500])),
    sample(2, traffic(2000, 10, 0.1, [10, 10, 10, 10])),
    sample(3, traffic(3000, 30, 0.3, [30, 30, 30, 30])),
  ];
  const s = trafficSeries(samples, 'server');
  assert.deepEqual(s.rate, [[3000, 20]]);
  assert.ok(s.mean[0][1] > 0);
  assert.equal(latestTraffic([samples[0]], 'server'), null, 'one report gives no rate');
});

test('reports from an older router (no latency buckets) still give rate and mean latency', () => {
  const old = (atMs, requests, sum) => ({atMs, requests, latencySecondsSum: sum, ongoingRequests: 1});
  const s = trafficSeries([sample(1, old(1000, 0, 0)), sample(2, old(3000, 10, 0.5))], 'server');
  assert.deepEqual(s.rate, [[3000, 5]]);
  assert.deepEqual(s.mean, [[3000, 0.05]]);
  assert.deepEqual(s.p50, []);
});

test('replicas over time: ready and desired per sample', () => {
  const svc = service('llm', [role('server', [replica(0, 'Ready', 's0', ['h0']), replica(1, 'Starting', 's1', ['h1'])])]);
  const a = serviceSample(svc, 100);
  assert.deepEqual(a, {timeMs: 100, roles: {server: {ready: 1, desired: 2, traffic: null}}});
  const s = replicaSeries([a, sample(200, null, 2, 3)], 'server');
  assert.deepEqual(s.ready, [[100, 1], [200, 2]]);
  assert.deepEqual(s.desired, [[100, 2], [200, 3]]);
});

test('rates and durations in words', () => {
  assert.equal(rateText(12.345), '12.3 req/s');
  assert.equal(rateText(0.2), '0.20 req/s');
  assert.equal(rateText(null), '—');
  assert.equal(rateText(-1), '—');
  assert.equal(secondsText(0.0005), '500 µs');
  assert.equal(secondsText(0.0123), '12.3 ms');
  assert.equal(secondsText(0.005), '5.00 ms');
  assert.equal(secondsText(1.5), '1.50 s');
  assert.equal(secondsText(undefined), '—');
});

test('a disaggregated Service: prefill and decode side by side, handoffs, fallbacks, pairing share', () => {
  const svc = {
    metadata: {name: 'pd'},
    spec: {roles: [{name: 'gen', disaggregation: 'decode', accelerator: 'v6e', topology: '2x4'},
                   {name: 'pre', disaggregation: 'prefill', accelerator: 'v6e', topology: '2x2'}]},
    status: {roles: [
      {name: 'gen', readyReplicas: 2, desiredReplicas: 2, traffic: {
        ongoingRequests: 3, queued: 1, ttftCount: 2, ttftSecondsSum: 0.1, outputTokens: 120,
        tpotCount: 4, tpotSecondsSum: 0.02,
        disagg: {pairedSameSlice: 3, pairedOtherSlice: 1, noPrefillReplica: 2, prefilledRemote: 4,
                 prefilledLocal: 2, fallbacks: 3, fallback_timeout: 1, fallback_connect: 2}}},
      {name: 'pre', readyReplicas: 1, desiredReplicas: 2, traffic: {
        ongoingRequests: 1, queuedPromptTokens: 300, ttftCount: 4, ttftSecondsSum: 1.0}},
    ]},
  };
  const d = disaggRoles(svc);
  assert.deepEqual(d.roles.map((r) => [r.name, r.kind]), [['pre', 'prefill'], ['gen', 'decode']],
                   'prefill first, whatever the spec order');
  const [pre, gen] = d.roles;
  assert.equal(pre.shape, 'v6e 2x2');
  assert.deepEqual([pre.ready, pre.desired, pre.queuedPromptTokens], [1, 2, 300]);
  near(pre.ttft, 0.25);
  assert.equal(pre.tpot, null, 'the prefill role decoded nothing');
  assert.deepEqual([gen.ongoing, gen.queued, gen.outputTokens], [3, 1, 120]);
  near(gen.ttft, 0.05);
  near(gen.tpot, 0.005);
  assert.deepEqual(d.handoffs, {remote: 4, local: 2, fallbacks: 3, reasons: [['connect', 2], ['timeout', 1]]});
  assert.deepEqual(d.pairing, {sameSlice: 3, otherSlice: 1, none: 2, sameShare: 0.75});
  assert.equal(shareText(d.pairing.sameShare), '75%');
  assert.equal(shareText(null), '—');
  // Before any report: zeros, no means, no share.
  const fresh = disaggRoles({...svc, status: {roles: []}});
  assert.deepEqual(fresh.roles.map((r) => [r.ttft, r.tpot, r.ready]), [[null, null, 0], [null, null, 0]]);
  assert.equal(fresh.pairing.sameShare, null);
  assert.equal(fresh.handoffs.remote, 0);
  // Not disaggregated: one role, or only one of the two kinds.
  assert.equal(disaggRoles(service('llm', [role('server', [])])), null);
  assert.equal(disaggRoles({spec: {roles: [{name: 'a', disaggregation: 'decode'}, {name: 'b'}]}}), null);
});
