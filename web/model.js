// Pure functions of the dashboard: no DOM, no network. They turn API documents into what the
// views draw (the cluster layout, job colours, recovery timelines, utilization samples), so
// they can be tested with `node --test` (tests/dashboard/model.test.mjs).

// Chip utilization of a host, 0..1, from its status.usage. A device that knows its duty cycle
// reports chipUtilizationPercent; emulated hosts have none, so the CPU of the host's workers
// stands for it: one busy core drives the host's chips at 100%. The head's /metrics uses the
// same rule (src/api/metrics.h).
export function chipUtilization(usage) {
  if (!usage) return 0;
  let p = typeof usage.chipUtilizationPercent === 'number' ? usage.chipUtilizationPercent
      : typeof usage.cpuPercent === 'number' ? usage.cpuPercent : 0;
  return Math.min(100, Math.max(0, p)) / 100;
}

// Chips a host covers inside its slice (width x height), by chips per host.
function hostDims(chips) {
  if (chips === 1) return [1, 1];
  if (chips === 2) return [2, 1];
  if (chips === 8) return [2, 4];
  return [2, 2];
}

function parseShape(text) {
  const dims = String(text || '').split('x').map((d) => parseInt(d, 10));
  return dims.every((d) => Number.isFinite(d) && d > 0) ? dims : null;
}

// Groups hosts into what an operator recognises: 3D cubes (4x4x4 chips, drawn as four 4x4
// layers, z = 0..3, in a 2x2 arrangement) inside their block, 2D fixed slices (the slice's
// chip grid), and unplaced hosts. Every host gets chip cells in the group's grid:
//   {groups: [{key, label, kind, generation, block, cols, rows, hosts: [{name, cells: [[x,y]]}]}]}
// Groups are ordered by generation, block and name, so the picture does not move around.
export function layoutCluster(hosts) {
  const groups = new Map();
  const group = (key, make) => {
    if (!groups.has(key)) groups.set(key, {key, hosts: [], ...make()});
    return groups.get(key);
  };
  for (const h of hosts) {
    const spec = h.spec || {};
    const name = h.metadata?.name ?? '?';
    const gen = spec.generation || 'unknown';
    if (spec.cube && Array.isArray(spec.cube.coord)) {
      const [hx, hy, hz] = spec.cube.coord;
      const g = group(`${gen}/${spec.cube.block || ''}/${spec.cube.name}`, () => ({
        label: spec.cube.name, kind: 'cube', generation: gen, block: spec.cube.block || '',
        cols: 9, rows: 9,
      }));
      // Layer z sits at ((z % 2) * 5, floor(z / 2) * 5): 4 chips and a one-chip gap.
      const ox = (hz % 2) * 5, oy = Math.floor(hz / 2) * 5;
      const cells = [];
      for (let dy = 0; dy < 2; dy++)
        for (let dx = 0; dx < 2; dx++) cells.push([ox + hx * 2 + dx, oy + hy * 2 + dy]);
      g.hosts.push({name, host: h, cells, coord: [hx, hy, hz]});
    } else if (spec.slice && spec.slice.name) {
      const shape = parseShape(spec.slice.topology) || [2, 2];
      const [cw, ch] = shape.length >= 2 ? [shape[0], shape[1]] : [shape[0], 1];
      const g = group(`${gen}/~slice/${spec.slice.name}`, () => ({
        label: `${spec.slice.name} (${spec.slice.topology || '?'})`, kind: 'slice',
        generation: gen, block: '', cols: cw, rows: ch, topology: spec.slice.topology,
      }));
      let [hw, hh] = hostDims(spec.chips || 4);
      hw = Math.min(hw, cw);
      hh = Math.min(hh, ch);
      const perRow = Math.max(1, Math.floor(cw / hw));
      const w = spec.slice.worker ?? g.hosts.length;
      const x0 = (w % perRow) * hw, y0 = Math.floor(w / perRow) * hh;
      const cells = [];
      for (let dy = 0; dy < hh; dy++)
        for (let dx = 0; dx < hw; dx++) cells.push([x0 + dx, y0 + dy]);
      g.rows = Math.max(g.rows, y0 + hh);
      g.hosts.push({name, host: h, cells, worker: w});
    } else {
      const g = group(`${gen}/~unplaced`, () => ({
        label: `${gen} hosts without a slice`, kind: 'loose', generation: gen, block: '',
        cols: 0, rows: 2,
      }));
      const x0 = g.hosts.length * 3;
      g.hosts.push({name, host: h, cells: [[x0, 0], [x0 + 1, 0], [x0, 1], [x0 + 1, 1]]});
      g.cols = x0 + 2;
    }
  }
  const out = [...groups.values()];
  out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const g of out) g.hosts.sort((a, b) => (a.name < b.name ? -1 : 1));
  return {groups: out, chips: out.reduce((n, g) => n + g.hosts.reduce((m, h) => m + h.cells.length, 0), 0)};
}

// A stable, distinct colour per job: jobs sorted by name take hues by the golden angle, so
// neighbours in the list differ and a job keeps its colour while the set is unchanged.
export function jobColors(jobNames) {
  const names = [...new Set(jobNames)].filter(Boolean).sort();
  const out = new Map();
  names.forEach((n, i) => {
    const hue = Math.round((i * 137.508 + 210) % 360);
    out.set(n, `hsl(${hue} 65% ${i % 2 ? 38 : 48}%)`);
  });
  return out;
}

// Which worker of which job runs on each host: host name -> {job, rank, slice, worker}.
export function workersByHost(jobs) {
  const out = new Map();
  for (const j of jobs) {
    const phase = j.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') continue;
    for (const w of j.status?.workers || [])
      out.set(w.host, {job: j.metadata.name, rank: w.rank, slice: w.slice, worker: w.worker,
                       state: w.state});
  }
  return out;
}

// Utilization sample of the whole cluster and per generation, from a host list:
//   {timeMs, all: {util, allocated, chips, memoryBytes}, byGeneration: {v6e: {...}}}
// util is the chip-weighted mean over every chip (idle chips count 0); allocated the share of
// chips a job holds.
export function utilizationSample(hosts, timeMs) {
  const blank = () => ({utilSum: 0, chips: 0, allocatedChips: 0, memoryBytes: 0});
  const all = blank();
  const byGen = {};
  for (const h of hosts) {
    const chips = h.spec?.chips || 0;
    const gen = h.spec?.generation || 'unknown';
    const g = (byGen[gen] ||= blank());
    const u = h.status?.state === 'Ready' ? chipUtilization(h.status?.usage) : 0;
    for (const t of [all, g]) {
      t.utilSum += u * chips;
      t.chips += chips;
      if (h.status?.job) t.allocatedChips += chips;
      t.memoryBytes += h.status?.usage?.memoryBytes || 0;
    }
  }
  const fin = (t) => ({
    util: t.chips ? t.utilSum / t.chips : 0,
    allocated: t.chips ? t.allocatedChips / t.chips : 0,
    chips: t.chips, memoryBytes: t.memoryBytes,
  });
  const byGeneration = {};
  for (const [k, v] of Object.entries(byGen)) byGeneration[k] = fin(v);
  return {timeMs, all: fin(all), byGeneration};
}

const FAILURE_REASONS = new Set(['WorkerFailed', 'HostLost', 'HangDetected', 'Hang', 'Failed',
                                 'Preempted', 'Evicted', 'StartTimeout']);

// The recovery timeline of a job: [{timeMs, kind, label, detail}] in time order. kind is one of
// submit, failure, detect, schedule, start, step, recovered, end, info. From status.attempts
// when the controller reports them, otherwise from the job's events (and HostLost events of
// the hosts it ran on).
export function recoveryTimeline(job, events) {
  const out = [];
  const add = (timeMs, kind, label, detail = '') => {
    if (typeof timeMs === 'number' && timeMs > 0) out.push({timeMs, kind, label, detail});
  };
  const st = job.status || {};
  add(job.metadata?.creationTimestampMs, 'submit', 'Submitted');
  const attempts = Array.isArray(st.attempts) ? st.attempts : [];
  if (attempts.length) {
    for (const a of attempts) {
      const n = a.attempt ?? 0;
      const r = a.recovery || {};
      add(a.placedMs, 'schedule', n ? `Attempt ${n} rescheduled` : `Attempt ${n} placed`,
          a.slices != null ? `${a.slices} slice(s)` : '');
      // Every worker running: startedMs, or runningMs as the controller names it.
      add(a.startedMs ?? a.runningMs, 'start', n ? `Attempt ${n} restarted` : `Attempt ${n} started`);
      add(a.firstStepMs, 'step', `Attempt ${n} first step`,
          known(a.resumedFromStep) ? `resumed from step ${a.resumedFromStep}` : '');
      if (known(r.timeToRecoverMs))
        add(a.firstStepMs || a.startedMs || a.runningMs, 'recovered', `Recovered in ${fmtMs(r.timeToRecoverMs)}`,
            [known(r.timeToDetectMs) && `detect ${fmtMs(r.timeToDetectMs)}`,
             known(r.timeToScheduleMs) && `schedule ${fmtMs(r.timeToScheduleMs)}`,
             known(r.timeToFirstStepMs) && `first step ${fmtMs(r.timeToFirstStepMs)}`,
             known(r.stepsLost) && `${r.stepsLost} steps lost`].filter(Boolean).join(', '));
      const ranks = Array.isArray(a.failedRanks) && a.failedRanks.length
          ? ` (rank ${a.failedRanks.join(', ')})` : '';
      if (a.failureMs) add(a.failureMs, 'failure', `${a.endReason || 'Failure'}${ranks}`, a.message || '');
      add(a.detectedMs, 'detect', 'Failure detected',
          a.failureMs && a.detectedMs ? `${fmtMs(a.detectedMs - a.failureMs)} after it happened` : '');
      if (a.endedMs && !a.failureMs)
        add(a.endedMs, FAILURE_REASONS.has(a.endReason) ? 'failure' : 'end',
            `Attempt ${n} ended: ${a.endReason || 'ended'}`, a.message || '');
    }
  } else {
    const name = job.metadata?.name;
    const hosts = new Set((st.workers || []).map((w) => w.host));
    for (const e of events || []) {
      const obj = e.object || '';
      const mine = obj === `trainjob/${name}`;
      const myHost = obj.startsWith('host/') && hosts.has(obj.slice(5));
      if (!mine && !(myHost && e.reason === 'HostLost')) continue;
      const kind = e.reason === 'Created' ? null
          : FAILURE_REASONS.has(e.reason) ? 'failure'
          : e.reason === 'Placed' ? 'schedule'
          : e.reason === 'Restarting' || e.reason === 'Resized' || e.reason === 'GrowingBack' ? 'schedule'
          : e.reason === 'Started' ? 'start'
          : e.reason === 'Recovered' ? 'recovered'
          : e.reason === 'Succeeded' || e.reason === 'Completed' || e.reason === 'Deleted' ? 'end'
          : 'info';
      if (kind) add(e.timeMs, kind, myHost ? `HostLost (${obj.slice(5)})` : e.reason, e.message || '');
    }
  }
  const order = {submit: 0, failure: 1, detect: 2, schedule: 3, start: 4, step: 5, recovered: 6, end: 7, info: 8};
  out.sort((a, b) => a.timeMs - b.timeMs || order[a.kind] - order[b.kind]);
  return out;
}

// What the dashboard shows for a figure that does not exist yet. The API writes -1 for "none"
// (lastStep and resumedFromStep before a first step or a restore, goodput and recovery times
// before they can be computed); those are never shown as data.
export const NONE = '—';

// True for a figure the API has (a finite number >= 0), false for a -1 sentinel or a gap.
export function known(v) {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0;
}

// A step number, or NONE.
export function stepText(step) {
  return known(step) ? String(step) : NONE;
}

// A 0..1 ratio as "97.5%", or NONE.
export function percentText(ratio) {
  return known(ratio) ? `${(ratio * 100).toFixed(1)}%` : NONE;
}

// "850 ms", "12.3 s", "4 min 5 s", "2 h 3 min"; NONE for an unknown (negative) duration.
export function fmtMs(ms) {
  if (!known(ms)) return NONE;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

// "42s", "5m", "3h", "2d" since `ms`.
export function age(ms, nowMs) {
  if (!ms) return '-';
  const s = Math.max(0, Math.floor((nowMs - ms) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function fmtBytes(n) {
  if (!n) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// spec.slices as written: 2, or {min, max}.
export function slicesText(spec) {
  const s = spec?.slices;
  if (s == null) return '1';
  if (typeof s === 'object') return `${s.min ?? 1}-${s.max ?? s.min ?? 1}`;
  return String(s);
}

// The number of attempts a job has made (attempt is 0-based; -1 before the first).
export function attemptCount(job) {
  const st = job.status || {};
  if (Array.isArray(st.attempts) && st.attempts.length) return st.attempts.length;
  return (st.attempt ?? -1) + 1;
}

// Why a job is not running, in one line.
export function pendingText(job) {
  const st = job.status || {};
  if (st.phase !== 'Pending') return st.phase === 'Running' ? '' : (st.reason || '');
  const reason = st.pendingReason || st.reason || '';
  const msg = st.message || '';
  return [reason, msg].filter(Boolean).join(': ');
}

// The last `n` lines of a log text.
export function tail(text, n) {
  const lines = String(text || '').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines.slice(-n).join('\n');
}
