// Pure functions of the Services pages: no DOM, no network. They turn Service documents
// (GET /api/v1/services, docs/serving.md) into what the pages draw: the replica groups on the
// chip grid, readiness, the autoscaler's decision, and request rate, latency and replicas over
// time from the samples the page takes. Tested by tests/dashboard/services.test.mjs.
//
// Request rate and latency come from status.roles[].traffic: the router's last load report as
// the head received it (atMs on the head's clock), with counters since the router started
// (requests, latencySecondsSum, latencyBuckets). A rate is the difference of two reads.

import {jobColors} from './model.js';

// The key of one replica group: "service/role/replica".
export function groupKey(service, role, replica) {
  return `${service}/${role}/${replica}`;
}

// A replica group is ready when its leader passed its readiness probe (phase Ready).
export function groupReady(replica) {
  return replica?.phase === 'Ready';
}

// Every replica group of the services, with its hosts, slice, readiness and a colour:
//   {groups: [{key, service, role, replica, generation, phase, ready, reason, message, slice,
//              hosts, leader, color, label}], byHost: Map(host -> {group, worker, leader})}
// Groups are ordered by service, role (spec order) and replica. Pending groups (no slice yet)
// are listed with no hosts. Colours are distinct per group and stable while the set is.
export function replicaGroups(services) {
  const groups = [];
  for (const svc of [...services].sort((a, b) => cmp(a.metadata?.name, b.metadata?.name))) {
    const name = svc.metadata?.name ?? '?';
    for (const role of svc.status?.roles || []) {
      for (const r of [...(role.replicas || [])].sort((a, b) => a.replica - b.replica)) {
        const procs = r.processes || [];
        const hosts = procs.length ? procs.map((p) => p.host) : r.hosts || [];
        groups.push({
          key: groupKey(name, role.name, r.replica), service: name, role: role.name,
          replica: r.replica, generation: r.generation, phase: r.phase || 'Pending',
          ready: groupReady(r), reason: r.reason || '', message: r.message || '',
          slice: r.slice || '', hosts, leader: hosts[0] || '', restarts: r.restarts || 0,
          label: `${name} · ${role.name} ${r.replica}`,
        });
      }
    }
  }
  const colors = jobColors(groups.filter((g) => g.hosts.length).map((g) => g.key));
  const byHost = new Map();
  for (const g of groups) {
    g.color = colors.get(g.key) || null;
    g.hosts.forEach((h, worker) => byHost.set(h, {group: g, worker, leader: worker === 0}));
  }
  return {groups, byHost};
}

function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

// "2 / 3": ready replicas of a role over the ones it should have.
export function replicasText(role) {
  return `${role?.readyReplicas ?? 0} / ${role?.desiredReplicas ?? 0}`;
}

// The role's size as written: "2 replicas" or "autoscaling 1-4, target 2 ongoing".
export function roleSizeText(roleSpec) {
  const a = roleSpec?.autoscaling;
  if (a) return `autoscaling ${a.minReplicas}-${a.maxReplicas}, target ${a.targetOngoingRequests} ongoing`;
  const n = roleSpec?.replicas ?? 1;
  return `${n} replica${n === 1 ? '' : 's'}`;
}

// The autoscaler's last decision in words, or '' for a role without autoscaling.
export function autoscalerText(role) {
  const a = role?.autoscaler;
  if (!a) return '';
  return `${a.desiredReplicas} replica${a.desiredReplicas === 1 ? '' : 's'}: ${a.reason || 'no reason given'}`;
}

// A list read may be older than a change the watch already delivered. From such a list take
// only what changes without a watch event (the router's traffic and the autoscaler's latest
// decision, by role); otherwise the listed document replaces what is known. Returns the
// document to keep.
export function mergeService(known, listed, listIsStale) {
  if (!known || !listIsStale) return listed;
  const byName = new Map((listed.status?.roles || []).map((r) => [r.name, r]));
  const roles = (known.status?.roles || []).map((r) => {
    const fresh = byName.get(r.name);
    if (!fresh) return r;
    const out = {...r};
    if (fresh.traffic) out.traffic = fresh.traffic;
    if (fresh.autoscaler) out.autoscaler = fresh.autoscaler;
    return out;
  });
  return {...known, status: {...known.status, roles}};
}

// One sample of a service for the charts: {timeMs, roles: {name: {ready, desired, traffic}}}.
export function serviceSample(service, timeMs) {
  const roles = {};
  for (const r of service.status?.roles || [])
    roles[r.name] = {ready: r.readyReplicas ?? 0, desired: r.desiredReplicas ?? 0, traffic: r.traffic || null};
  return {timeMs, roles};
}

// The q-quantile (0..1) of a histogram's observations, from cumulative counts per upper bound
// (the last count the total, +Inf), interpolated linearly inside the bucket as Prometheus'
// histogram_quantile does. Observations beyond the last bound give that bound. null when empty.
export function histogramQuantile(q, bounds, cumulative) {
  const total = cumulative?.[cumulative.length - 1] ?? 0;
  if (!total || !bounds?.length || cumulative.length !== bounds.length + 1) return null;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    if (cumulative[i] >= rank) {
      const lo = i ? bounds[i - 1] : 0, below = i ? cumulative[i - 1] : 0;
      const inBucket = cumulative[i] - below;
      return inBucket ? lo + (bounds[i] - lo) * ((rank - below) / inBucket) : bounds[i];
    }
  }
  return bounds[bounds.length - 1];
}

// Request rate and latency of a role over the samples: from each pair of successive distinct
// router reports (by atMs), the requests per second between them and, when some finished, the
// mean, p50 and p99 latency (seconds) of those requests. A counter that went down (the router
// restarted) starts afresh. Points are [atMs, value].
//   {rate, mean, p50, p99, ongoing}
export function trafficSeries(samples, role) {
  const out = {rate: [], mean: [], p50: [], p99: [], ongoing: []};
  let prev = null;
  for (const s of samples) {
    const t = s.roles?.[role]?.traffic;
    if (!t || !(t.atMs > 0) || (prev && t.atMs <= prev.atMs)) continue;
    out.ongoing.push([t.atMs, t.ongoingRequests ?? 0]);
    if (prev && (t.requests ?? 0) >= (prev.requests ?? 0)) {
      const dn = (t.requests ?? 0) - (prev.requests ?? 0);
      out.rate.push([t.atMs, dn / ((t.atMs - prev.atMs) / 1000)]);
      if (dn > 0) {
        out.mean.push([t.atMs, ((t.latencySecondsSum ?? 0) - (prev.latencySecondsSum ?? 0)) / dn]);
        const b = t.latencyBuckets, a = prev.latencyBuckets;
        if (b && a && sameBounds(a.upperBounds, b.upperBounds) && a.cumulative?.length === b.cumulative?.length) {
          const diff = b.cumulative.map((c, i) => c - a.cumulative[i]);
          const p50 = histogramQuantile(0.5, b.upperBounds, diff), p99 = histogramQuantile(0.99, b.upperBounds, diff);
          if (p50 != null) out.p50.push([t.atMs, p50]);
          if (p99 != null) out.p99.push([t.atMs, p99]);
        }
      }
    }
    prev = t;
  }
  return out;
}

function sameBounds(a, b) {
  return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => v === b[i]);
}

// Ready and desired replicas of a role over the samples: {ready, desired} as [timeMs, n].
export function replicaSeries(samples, role) {
  const out = {ready: [], desired: []};
  for (const s of samples) {
    const r = s.roles?.[role];
    if (!r) continue;
    out.ready.push([s.timeMs, r.ready]);
    out.desired.push([s.timeMs, r.desired]);
  }
  return out;
}

// The latest request rate (requests/s) and p50 latency (s) of a role, for the list; null when
// fewer than two reports have been seen.
export function latestTraffic(samples, role) {
  const s = trafficSeries(samples, role);
  const last = (pts) => (pts.length ? pts[pts.length - 1][1] : null);
  const rate = last(s.rate);
  if (rate == null) return null;
  // p50 of the last interval that finished requests.
  return {rate, p50: last(s.p50), mean: last(s.mean), ongoing: last(s.ongoing)};
}

// "12.5 req/s", "0.20 req/s", or '—'.
export function rateText(rps) {
  if (typeof rps !== 'number' || !Number.isFinite(rps) || rps < 0) return '—';
  return `${rps >= 10 ? rps.toFixed(1) : rps.toFixed(2)} req/s`;
}

// Seconds as "850 µs", "12.3 ms", "1.50 s", or '—'.
export function secondsText(s) {
  if (typeof s !== 'number' || !Number.isFinite(s) || s < 0) return '—';
  if (s < 0.001) return `${Math.round(s * 1e6)} µs`;
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 1)} ms`;
  return `${s.toFixed(2)} s`;
}

// A disaggregated Service's roles side by side (docs/serving.md "Prefill and decode roles"), or
// null for a Service without a prefill and a decode role. From the spec (each role's
// disaggregation and shape) and each role's last router report (status.roles[].traffic,
// counters since the router started):
//   {roles: [{name, kind, shape, ready, desired, ongoing, queued, queuedPromptTokens,
//             ttft, tpot, outputTokens}],            prefill first, then decode
//    handoffs: {remote, local, fallbacks, reasons: [[reason, n]]},
//    pairing: {sameSlice, otherSlice, none, sameShare}}
// ttft is the mean time to first token of the streams the role prefilled (the prefill role:
// those decode handed off; the decode role: the rest), tpot the mean time per output token of
// those it decoded, both in seconds, null before any. sameShare is the fraction of pairings
// on the decode replica's own slice, null before any pairing. The handoff and pairing counts
// are the decode role's report.
export function disaggRoles(svc) {
  const specs = svc?.spec?.roles || [];
  const kinds = new Map(specs.map((r) => [r.name, r.disaggregation]));
  const byKind = (k) => specs.find((r) => r.disaggregation === k);
  if (!byKind('prefill') || !byKind('decode')) return null;
  const statusOf = new Map((svc.status?.roles || []).map((r) => [r.name, r]));
  const mean = (sum, n) => (n > 0 && typeof sum === 'number' ? sum / n : null);
  const roles = ['prefill', 'decode'].map((kind) => {
    const spec = byKind(kind);
    const st = statusOf.get(spec.name) || {};
    const t = st.traffic || {};
    return {
      name: spec.name, kind: kinds.get(spec.name), shape: `${spec.accelerator || ''} ${spec.topology || ''}`.trim(),
      ready: st.readyReplicas ?? 0, desired: st.desiredReplicas ?? 0,
      ongoing: t.ongoingRequests ?? 0, queued: t.queued ?? 0,
      queuedPromptTokens: t.queuedPromptTokens ?? 0,
      ttft: mean(t.ttftSecondsSum, t.ttftCount), tpot: mean(t.tpotSecondsSum, t.tpotCount),
      outputTokens: t.outputTokens ?? 0,
    };
  });
  const d = statusOf.get(byKind('decode').name)?.traffic?.disagg || {};
  const n = (k) => d[k] ?? 0;
  const reasons = Object.entries(d).filter(([k]) => k.startsWith('fallback_'))
      .map(([k, v]) => [k.slice('fallback_'.length), v]).sort((a, b) => cmp(a[0], b[0]));
  const paired = n('pairedSameSlice') + n('pairedOtherSlice');
  return {
    roles,
    handoffs: {remote: n('prefilledRemote'), local: n('prefilledLocal'), fallbacks: n('fallbacks'), reasons},
    pairing: {sameSlice: n('pairedSameSlice'), otherSlice: n('pairedOtherSlice'), none: n('noPrefillReplica'),
              sameShare: paired ? n('pairedSameSlice') / paired : null},
  };
}

// A share 0..1 as "75%", or '—'.
export function shareText(x) {
  if (typeof x !== 'number' || !Number.isFinite(x) || x < 0) return '—';
  return `${Math.round(x * 100)}%`;
}
