// The dashboard: asks for the admin token once per tab, follows the head's watch streams
// (jobs, hosts, services, events), polls what has no stream (host usage, ClusterQueue status,
// the router's traffic per Service, a job's progress and logs), and renders one view at a time
// from the hash route:
//   #/cluster  #/jobs  #/jobs/NAME  #/services  #/services/NAME  #/queues  #/utilization  #/events
// Nothing reloads the page; views re-render from the in-memory state when it changes.

import {AuthError, getJson, getText, setToken, token, watch} from './api.js';
import {drawLineChart, escapeHtml, legendHtml} from './charts.js';
import {ClusterView, groupBadge} from './cluster.js';
import {NONE, age, attemptCount, fmtBytes, fmtMs, jobColors, known, pendingText, percentText,
        recoveryTimeline, slicesText, stepText, tail, utilizationSample} from './model.js';
import {autoscalerText, disaggRoles, latestTraffic, mergeService, rateText, replicaGroups, replicaSeries,
        replicasText, roleSizeText, secondsText, serviceSample, shareText, trafficSeries} from './services.js';

const USAGE_POLL_MS = 5000;
const JOB_POLL_MS = 2000;
const SERVICE_POLL_MS = 2000;  // a Service's page; the router reports load every second
const MAX_SAMPLES = 720;  // an hour at one sample every 5 s
const LOG_LINES = 200;

const state = {
  jobs: new Map(),
  hosts: new Map(),
  events: [],
  clusterQueues: [],
  localQueues: [],
  samples: [],
  progress: new Map(),  // job -> [[timeMs, step]] sampled here when status.progress is absent
  services: new Map(),
  serviceSamples: new Map(),  // service -> [serviceSample], taken here at each read
  versions: {},  // kind -> the resourceVersion (BigInt) of the last change its watch delivered
  who: null,  // GET /api/v1/whoami: the user this token is, its role and namespace
  hidden: {},  // what -> why this user may not see it (the head's 403 message)
  abort: null,
  timers: [],
};

const $ = (sel) => document.querySelector(sel);
const main = () => $('[data-role=main]');
let view = null;  // {name, render(), destroy?()}
let renderQueued = false;

// ------------------------------------------------------------------------------------------
// Token and connection

function showLogin(message) {
  stop();
  setToken('');
  $('[data-role=main]').hidden = true;
  $('[data-role=login]').hidden = false;
  $('[data-role=login-error]').textContent = message || '';
  $('#token').value = '';
  $('#token').focus();
  $('[data-role=conn]').textContent = 'not connected';
  $('[data-role=who]').textContent = '';
  $('[data-role=hidden]').hidden = true;
}

// Namespaces (docs/security.md "Namespaces"): a cluster admin's dashboard lists every namespace,
// anyone else's its user's own. Objects are keyed as the head keys them (common/object_key.h):
// NAME in default, NS.NAME elsewhere; lists show NS/NAME when they hold every namespace.
const everyNamespace = () => state.who?.role === 'cluster-admin';
function scoped(path) {
  const sep = path.includes('?') ? '&' : '?';
  if (everyNamespace()) return `${path}${sep}allNamespaces=true`;
  const ns = state.who?.namespace || 'default';
  return ns === 'default' ? path : `${path}${sep}namespace=${encodeURIComponent(ns)}`;
}
function keyOf(o) {
  const ns = o.metadata?.namespace || 'default';
  return ns === 'default' ? o.metadata.name : `${ns}.${o.metadata.name}`;
}
function shownKey(key) {
  const dot = key.indexOf('.');
  return dot < 0 ? key : `${key.slice(0, dot)}/${key.slice(dot + 1)}`;
}
// /api/v1/KIND/NAME[SUB]?namespace=NS of an object's key.
function objectPath(kind, key, sub = '') {
  const dot = key.indexOf('.');
  const name = dot < 0 ? key : key.slice(dot + 1), ns = dot < 0 ? 'default' : key.slice(0, dot);
  return `/api/v1/${kind}/${encodeURIComponent(name)}${sub}${sub.includes('?') ? '&' : '?'}namespace=${encodeURIComponent(ns)}`;
}

// What this user may not see, and why: the head's 403 for that list (docs/security.md).
function hide(what, message) {
  state.hidden[what] = message;
  const note = $('[data-role=hidden]');
  note.textContent = Object.entries(state.hidden)
      .map(([w, why]) => `Hidden: ${w}: ${why}.`).join(' ');
  note.hidden = false;
}

async function connect() {
  try {
    state.who = await getJson('/api/v1/whoami');  // checks the token before anything else
  } catch (e) {
    showLogin(e instanceof AuthError ? e.message : `Cannot reach the head: ${e.message}`);
    return;
  }
  $('[data-role=login]').hidden = true;
  const who = state.who;
  $('[data-role=who]').textContent = `${who.name} (${who.role}` +
      (who.namespace ? ` in ${who.namespace})` : ')');
  state.hidden = {};
  $('[data-role=hidden]').hidden = true;
  main().hidden = false;
  start();
  route();
}

function stop() {
  state.abort?.abort();
  state.abort = null;
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
}

function start() {
  stop();
  state.abort = new AbortController();
  const signal = state.abort.signal;
  const statuses = {};
  const onStatus = (kind) => (s) => {
    statuses[kind] = s;
    const all = Object.values(statuses);
    $('[data-role=conn]').textContent = all.every((v) => v === 'live' || v === 'hidden')
        ? '● live' : `◌ ${all.includes('reconnecting') ? 'reconnecting…' : 'connecting…'}`;
  };
  // 401: the token is no longer good, ask for another. 403: this user may not read that
  // list; the rest of the dashboard goes on, and says what is hidden and why.
  const onAuthError = (what) => (e) => {
    if (e.status === 401) return showLogin(e.message);
    onStatus(what)('hidden');
    hide(what, e.message);
  };
  // A reconnected watch resumes after the last change it delivered; only a replay (a first
  // connection, or a version the head no longer keeps) starts from the current objects.
  const follow = (path, kind, map) => watch(path, {
    signal, onAuthError: onAuthError(kind), onStatus: onStatus(kind),
    onReady: ({replay}) => { if (replay) map.clear(); },
    onChange: ({type, object, resourceVersion}) => {
      const name = object.metadata?.namespace ? keyOf(object) : object.metadata?.name;
      if (type === 'DELETED') map.delete(name);
      else map.set(name, object);
      state.versions[kind] = BigInt(resourceVersion || 0);
      if (kind === 'jobs') scheduleQueues();
      if (kind === 'services' && type !== 'DELETED') sampleServices(Date.now(), name);  // replicas over time
      queueRender();
    },
  });
  follow(scoped('/api/v1/jobs'), 'jobs', state.jobs);
  follow('/api/v1/hosts', 'hosts', state.hosts);
  follow(scoped('/api/v1/services'), 'services', state.services);
  watch(scoped('/api/v1/events'), {
    signal, onAuthError: onAuthError('events'), onStatus: onStatus('events'),
    onReady: ({replay}) => { if (replay) state.events = []; },
    onChange: ({object}) => {
      state.events.push(object);
      if (state.events.length > 2000) state.events.splice(0, state.events.length - 2000);
      queueRender();
    },
  });
  // Host usage is carried by heartbeats, which are not streamed (1,000 hosts at 1 Hz): poll.
  const pollHosts = async () => {
    try {
      const list = await getJson('/api/v1/hosts', {signal});
      // A list older than a change the hosts watch already delivered would undo it: from such
      // a list take only what heartbeats carry (usage and heartbeat time), which is not watched.
      const stale = BigInt(list.metadata?.resourceVersion || 0) < (state.versions.hosts || 0n);
      for (const h of list.items) {
        const known = state.hosts.get(h.metadata.name);
        if (!stale || !known) state.hosts.set(h.metadata.name, h);
        else known.status = {...known.status, usage: h.status.usage, lastHeartbeatMs: h.status.lastHeartbeatMs};
      }
      state.samples.push(utilizationSample(list.items, Date.now()));
      if (state.samples.length > MAX_SAMPLES) state.samples.shift();
      queueRender();
    } catch (e) {
      if (e instanceof AuthError) onAuthError('hosts')(e);
    }
  };
  pollHosts();
  state.timers.push(setInterval(pollHosts, USAGE_POLL_MS));
  pollQueues();
  state.timers.push(setInterval(pollQueues, USAGE_POLL_MS));
  // The router's traffic and the autoscaler's latest decision change without a watch event
  // (status.roles[].traffic, .autoscaler): poll, and sample every Service for its charts.
  const pollServices = async () => {
    try {
      const list = await getJson(scoped('/api/v1/services'), {signal});
      const stale = BigInt(list.metadata?.resourceVersion || 0) < (state.versions.services || 0n);
      for (const s of list.items) {
        const name = keyOf(s);
        if (!stale || state.services.has(name)) state.services.set(name, mergeService(state.services.get(name), s, stale));
      }
      sampleServices(Date.now());
      queueRender();
    } catch (e) {
      if (e instanceof AuthError) onAuthError('services')(e);
    }
  };
  pollServices();
  state.timers.push(setInterval(pollServices, USAGE_POLL_MS));
}

function sampleServices(timeMs, only) {
  for (const [name, svc] of state.services) {
    if (only && name !== only) continue;
    const samples = state.serviceSamples.get(name) || [];
    samples.push(serviceSample(svc, timeMs));
    if (samples.length > MAX_SAMPLES) samples.shift();
    state.serviceSamples.set(name, samples);
  }
  for (const name of state.serviceSamples.keys())
    if (!state.services.has(name)) state.serviceSamples.delete(name);
}

let queuesTimer = 0;
function scheduleQueues() {
  if (!queuesTimer) queuesTimer = setTimeout(() => { queuesTimer = 0; pollQueues(); }, 500);
}

async function pollQueues() {
  try {
    const [cq, lq] = await Promise.all([getJson('/api/v1/clusterqueues'), getJson(scoped('/api/v1/localqueues'))]);
    state.clusterQueues = cq.items;
    state.localQueues = lq.items;
    if (view?.name === 'queues') queueRender();
  } catch (e) {
    // The watch streams report trouble; a 403 says this user may not read the queues.
    if (e instanceof AuthError && e.status === 403) hide('queues', e.message);
  }
}

function queueRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    view?.render();
  });
}

// ------------------------------------------------------------------------------------------
// Routing

function route() {
  if (!token()) return;
  const hash = location.hash || '#/cluster';
  const [, name, arg] = hash.match(/^#\/([a-z]+)(?:\/(.+))?$/) || [, 'cluster'];
  view?.destroy?.();
  const make = {cluster: clusterView, jobs: arg ? () => jobView(decodeURIComponent(arg)) : jobsView,
                services: arg ? () => serviceView(decodeURIComponent(arg)) : servicesView,
                queues: queuesView, utilization: utilizationView, events: eventsView}[name] || clusterView;
  view = make();
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  view.render();
}

function openJob(name) {
  location.hash = `#/jobs/${encodeURIComponent(name)}`;
}

function openService(name) {
  location.hash = `#/services/${encodeURIComponent(name)}`;
}

// ------------------------------------------------------------------------------------------
// Views

function phaseBadge(phase) {
  const cls = {Running: 'ok', Succeeded: 'done', Failed: 'bad', Pending: 'warn', Starting: 'info',
               Terminating: 'warn'}[phase] || 'info';
  const icon = {Running: '▶', Succeeded: '✓', Failed: '✕', Pending: '◌', Starting: '↻', Terminating: '■'}[phase] || '•';
  return `<span class="badge ${cls}">${icon} ${escapeHtml(phase || '?')}</span>`;
}

function summaryCards() {
  const hosts = [...state.hosts.values()];
  const jobs = [...state.jobs.values()];
  const byGen = {};
  for (const h of hosts) {
    const g = (byGen[h.spec?.generation || '?'] ||= {chips: 0, allocated: 0, unhealthy: 0});
    g.chips += h.spec?.chips || 0;
    if (h.status?.job) g.allocated += h.spec?.chips || 0;
    if (h.status?.state !== 'Ready') g.unhealthy += h.spec?.chips || 0;
  }
  const count = (p) => jobs.filter((j) => j.status?.phase === p).length;
  const s = state.samples[state.samples.length - 1];
  const cards = Object.entries(byGen).map(([g, v]) => `
    <div class="card"><div class="k">${escapeHtml(g)} chips allocated / total</div>
      <div class="v">${v.allocated} / ${v.chips}</div>
      <div class="k">${v.unhealthy ? `<span class="badge bad">✕ ${v.unhealthy} unhealthy</span>` : '✓ none unhealthy'}</div></div>`);
  cards.push(`<div class="card"><div class="k">jobs running / pending</div><div class="v">${count('Running')} / ${count('Pending')}</div>
    <div class="k">${count('Failed')} failed, ${count('Succeeded')} succeeded</div></div>`);
  const services = [...state.services.values()];
  if (services.length) {
    const ready = services.filter((v) => v.status?.phase === 'Ready').length;
    cards.push(`<div class="card"><div class="k">services ready / total</div><div class="v">${ready} / ${services.length}</div>
      <div class="k"><a href="#/services">Services</a></div></div>`);
  }
  cards.push(`<div class="card"><div class="k">chip utilization (cluster)</div>
    <div class="v">${s ? Math.round(s.all.util * 100) : 0}%</div><div class="k">worker memory ${fmtBytes(s?.all.memoryBytes || 0)}</div></div>`);
  return `<div class="cards" data-role="cards">${cards.join('')}</div>`;
}

function clusterView() {
  main().innerHTML = `<h1>Cluster</h1><div data-role="summary"></div><div data-role="grid"></div>`;
  const cv = new ClusterView(main().querySelector('[data-role=grid]'), {onOpenJob: openJob, onOpenService: openService});
  window.__tessera.cluster = cv;
  return {
    name: 'cluster',
    render() {
      main().querySelector('[data-role=summary]').innerHTML = summaryCards();
      cv.update([...state.hosts.values()], [...state.jobs.values()], {services: new Set(state.services.keys())});
    },
    destroy() { cv.destroy(); window.__tessera.cluster = null; },
  };
}

function jobsView() {
  main().innerHTML = `<h1>Jobs</h1>
    <div class="filters"><label>Show <select data-role="phase">
      <option value="">every phase</option><option>Pending</option><option>Starting</option>
      <option>Running</option><option>Succeeded</option><option>Failed</option><option>Terminating</option>
    </select></label></div>
    <div class="table-scroll" style="max-height:none"><table class="jobs"><caption class="muted" style="text-align:left">Newest first. Select a name for its attempts, recovery timeline, progress and logs.</caption>
    <thead><tr><th scope="col">Name</th><th scope="col">State</th><th scope="col">Queue</th>
      <th scope="col">Priority</th><th scope="col">Shape</th><th scope="col">Slices</th>
      <th scope="col">Attempts</th><th scope="col">Age</th><th scope="col">Pending reason / message</th></tr></thead>
    <tbody></tbody></table></div>`;
  const select = main().querySelector('[data-role=phase]');
  select.addEventListener('change', () => view.render());
  return {
    name: 'jobs',
    render() {
      const now = Date.now();
      const jobs = [...state.jobs.values()]
          .filter((j) => !select.value || j.status?.phase === select.value)
          .sort((a, b) => (b.metadata.creationTimestampMs || 0) - (a.metadata.creationTimestampMs || 0));
      main().querySelector('tbody').innerHTML = jobs.map((j) => {
        const st = j.status || {}, spec = j.spec || {};
        const why = st.phase === 'Pending' ? pendingText(j) : st.phase === 'Running' ? '' : `${st.reason || ''}${st.message ? ': ' + st.message : ''}`;
        return `<tr data-job="${escapeHtml(keyOf(j))}">
          <th scope="row"><a href="#/jobs/${encodeURIComponent(keyOf(j))}">${escapeHtml(everyNamespace() ? shownKey(keyOf(j)) : j.metadata.name)}</a></th>
          <td>${phaseBadge(st.phase)}${st.queuePosition ? ` <span class="muted">#${st.queuePosition}</span>` : ''}</td>
          <td>${escapeHtml(j.metadata.queue || 'default')}</td>
          <td>${escapeHtml(spec.priority ?? NONE)}</td>
          <td>${escapeHtml(spec.accelerator || '')} ${escapeHtml(spec.topology || '')}</td>
          <td>${escapeHtml(slicesText(spec))}</td>
          <td>${attemptCount(j)}</td>
          <td>${age(j.metadata.creationTimestampMs, now)}</td>
          <td>${escapeHtml(why)}</td></tr>`;
      }).join('') || '<tr><td colspan="9" class="muted">No jobs.</td></tr>';
    },
  };
}

function jobView(name) {
  main().innerHTML = `<p><a href="#/jobs">← Jobs</a></p><h1>Job ${escapeHtml(name)}</h1>
    <div data-role="facts"></div>
    <h2>Attempts</h2><div data-role="attempts"></div>
    <h2>Recovery timeline</h2><div data-role="timeline"></div>
    <h2>Progress</h2><canvas class="chart" data-role="progress" role="img" aria-label="Training step over time"></canvas>
    <p data-role="progress-text" class="muted"></p>
    <h2>Worker logs</h2><p class="muted">The last ${LOG_LINES} lines of each worker, refreshed every ${JOB_POLL_MS / 1000} s while the job runs. Open a worker to read its log.</p>
    <div class="logs" data-role="logs"></div>`;
  const open = new Set([0]);
  const logs = new Map();  // rank -> text
  let job = state.jobs.get(name);
  let stopped = false;
  const poll = async () => {
    try {
      job = await getJson(objectPath('jobs', name));
      state.jobs.set(name, job);
      const st = job.status || {};
      if (st.lastStep >= 0) {
        const p = state.progress.get(name) || [];
        if (!p.length || p[p.length - 1][1] !== st.lastStep) p.push([Date.now(), st.lastStep]);
        state.progress.set(name, p.slice(-500));
      }
      await Promise.all([...open].map(async (rank) => {
        if (!(st.workers || []).some((w) => w.rank === rank)) return;
        try {
          logs.set(rank, tail(await getText(objectPath('jobs', name, `/logs?worker=${rank}`)), LOG_LINES));
        } catch (e) {
          if (e instanceof AuthError) throw e;
          logs.set(rank, `(log unavailable: ${e.message})`);
        }
      }));
    } catch (e) {
      if (e instanceof AuthError) return showLogin(e.message);
      if (!job) main().querySelector('[data-role=facts]').innerHTML = `<p class="error">${escapeHtml(e.message)}</p>`;
    }
    if (!stopped) view?.render();
  };
  poll();
  const timer = setInterval(() => {
    const phase = job?.status?.phase;
    if (phase !== 'Succeeded' && phase !== 'Failed') poll();
  }, JOB_POLL_MS);
  main().querySelector('[data-role=logs]').addEventListener('toggle', (e) => {
    const rank = Number(e.target.dataset.rank);
    if (e.target.open) { open.add(rank); poll(); } else open.delete(rank);
  }, true);
  return {
    name: 'job',
    render() {
      job = state.jobs.get(name) || job;
      if (!job) return;
      renderJobFacts(job);
      renderAttempts(job);
      renderTimeline(job);
      renderProgress(job, state.progress.get(name) || []);
      renderLogs(job, open, logs);
    },
    destroy() { stopped = true; clearInterval(timer); },
  };
}

function renderJobFacts(job) {
  const st = job.status || {}, spec = job.spec || {};
  const rec = st.recovery;
  const facts = [
    ['State', `${phaseBadge(st.phase)} ${escapeHtml(st.reason || '')}`],
    ['Message', escapeHtml(st.message || '')],
    ['Queue / priority', `${escapeHtml(job.metadata.queue || 'default')} / ${escapeHtml(spec.priority ?? NONE)}`],
    ['Shape', `${escapeHtml(spec.accelerator)} ${escapeHtml(spec.topology)} × ${escapeHtml(slicesText(spec))} slice(s)`],
    ['Placement', (st.placement || []).map((p) => `${escapeHtml(p.slice)}: ${escapeHtml(p.hosts.join(', '))}`).join('<br>') || NONE],
    ['Last step', stepText(st.lastStep)],
    ['Age', age(job.metadata.creationTimestampMs, Date.now())],
  ];
  if (st.phase === 'Pending') facts.splice(2, 0, ['Pending reason', escapeHtml(pendingText(job))]);
  // maxFailures -1 is "no limit", not a number of failures.
  const budget = known(rec?.maxFailures) ? ` of ${rec.maxFailures} allowed` : rec?.maxFailures === -1 ? ' (no limit)' : '';
  if (rec) facts.push(['Recovery', `${rec.failures ?? 0} failure(s)${budget}` +
      (known(rec.goodput) ? `, goodput ${percentText(rec.goodput)} of the time since placement (start-up included)` : '') +
      (known(rec.stepsLost) ? `, ${rec.stepsLost} steps lost` : '') +
      (rec.checkpoint?.advisedIntervalSeconds > 0 ? `; advised checkpoint interval ${fmtMs(rec.checkpoint.advisedIntervalSeconds * 1000)}` : '')]);
  main().querySelector('[data-role=facts]').innerHTML =
      `<dl class="facts">${facts.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

function renderAttempts(job) {
  const st = job.status || {};
  const t = (ms) => (known(ms) && ms > 0 ? new Date(ms).toLocaleTimeString() : NONE);
  let rows;
  if (Array.isArray(st.attempts) && st.attempts.length) {
    rows = st.attempts.map((a) => `<tr><th scope="row">${a.attempt}</th><td>${a.slices ?? NONE}</td>
      <td>${t(a.placedMs)}</td><td>${t(a.startedMs ?? a.runningMs)}</td><td>${t(a.firstStepMs)}</td>
      <td>${stepText(a.resumedFromStep)}</td><td>${stepText(a.lastStep)}</td>
      <td>${a.endReason ? escapeHtml(a.endReason) : '<span class="badge ok">current</span>'}${a.failedRanks?.length ? ` (rank ${a.failedRanks.join(', ')})` : ''}</td>
      <td>${fmtMs(a.recovery?.timeToRecoverMs)}</td></tr>`);
  } else if ((st.attempt ?? -1) >= 0) {
    rows = [`<tr><th scope="row">${st.attempt}</th><td>${(st.placement || []).length}</td><td>${NONE}</td>
      <td>${t(st.startTimeMs)}</td><td>${NONE}</td><td>${NONE}</td><td>${stepText(st.lastStep)}</td>
      <td>${['Succeeded', 'Failed'].includes(st.phase) ? escapeHtml(st.reason) : '<span class="badge ok">current</span>'}</td><td>${NONE}</td></tr>`];
  } else {
    rows = ['<tr><td colspan="9" class="muted">Not placed yet.</td></tr>'];
  }
  main().querySelector('[data-role=attempts]').innerHTML = `<table><thead><tr>
    <th scope="col">Attempt</th><th scope="col">Slices</th><th scope="col">Placed</th><th scope="col">Started</th>
    <th scope="col">First step</th><th scope="col">Resumed from</th><th scope="col">Last step</th>
    <th scope="col">Ended</th><th scope="col">Time to recover</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

const MARKS = {submit: '+', failure: '✕', detect: '!', schedule: '⇄', start: '▶', step: '1', recovered: '✓', end: '■', info: 'i'};

function renderTimeline(job) {
  const items = recoveryTimeline(job, state.events);
  const el = main().querySelector('[data-role=timeline]');
  if (!items.length) { el.innerHTML = '<p class="muted">Nothing yet.</p>'; return; }
  const t0 = items[0].timeMs, t1 = Math.max(items[items.length - 1].timeMs, t0 + 1000);
  const x = (t) => 10 + ((t - t0) / (t1 - t0)) * 980;
  const colors = {failure: '#991b1b', detect: '#92400e', recovered: '#065f46', step: '#065f46'};
  const marks = items.map((it) => `<g transform="translate(${x(it.timeMs).toFixed(1)},24)">
      <circle r="9" fill="#fff" stroke="${colors[it.kind] || '#4b5563'}" stroke-width="2"/>
      <text y="4" text-anchor="middle" font-size="10" font-weight="700" fill="${colors[it.kind] || '#374151'}">${MARKS[it.kind]}</text></g>`).join('');
  el.innerHTML = `<svg class="timeline-axis" viewBox="0 0 1000 64" preserveAspectRatio="none" aria-hidden="true">
      <line x1="10" y1="24" x2="990" y2="24" stroke="#9ca3af" stroke-width="2"/>${marks}
      <text x="10" y="56" font-size="11" fill="#4b5563">${new Date(t0).toLocaleTimeString()}</text>
      <text x="990" y="56" font-size="11" text-anchor="end" fill="#4b5563">${new Date(t1).toLocaleTimeString()} (+${fmtMs(t1 - t0)})</text></svg>
    <ol class="timeline" aria-label="Recovery timeline">${items.map((it) => `<li class="${it.kind}" data-kind="${it.kind}">
      <span class="mark" aria-hidden="true">${MARKS[it.kind]}</span>
      <time datetime="${new Date(it.timeMs).toISOString()}">${new Date(it.timeMs).toLocaleTimeString()} (+${fmtMs(it.timeMs - t0)})</time>
      <strong>${escapeHtml(it.label)}</strong>${it.detail ? ` — ${escapeHtml(it.detail)}` : ''}</li>`).join('')}</ol>`;
}

function renderProgress(job, sampled) {
  const st = job.status || {};
  const points = Array.isArray(st.progress) && st.progress.length ? st.progress : sampled;
  const canvas = main().querySelector('[data-role=progress]');
  drawLineChart(canvas, [{name: 'step', points}], {yFormat: (v) => String(Math.round(v)), height: 180});
  main().querySelector('[data-role=progress-text]').textContent = points.length
      ? `Step ${points[points.length - 1][1]} at ${new Date(points[points.length - 1][0]).toLocaleTimeString()}` +
        (points.length > 1 ? `; ${((points[points.length - 1][1] - points[0][1]) / Math.max(1, (points[points.length - 1][0] - points[0][0]) / 1000)).toFixed(2)} steps/s over the chart` : '')
      : 'No step reported yet (workers report steps through the tessera SDK).';
}

function renderLogs(job, open, logs) {
  const el = main().querySelector('[data-role=logs]');
  const workers = job.status?.workers || [];
  if (!workers.length) { el.innerHTML = '<p class="muted">No workers yet.</p>'; return; }
  // Update in place so open panes and their scroll positions survive a refresh.
  for (const w of workers) {
    let d = el.querySelector(`details[data-rank="${w.rank}"]`);
    if (!d) {
      d = document.createElement('details');
      d.dataset.rank = w.rank;
      d.open = open.has(w.rank);
      d.innerHTML = '<summary></summary><pre tabindex="0"></pre>';
      el.appendChild(d);
    }
    d.querySelector('summary').textContent =
        `Worker rank ${w.rank} · ${w.host} · slice ${w.slice} worker ${w.worker} · ${w.state}` +
        (w.state === 'Failed' ? ` (exit ${w.exitCode}${w.signal ? `, signal ${w.signal}` : ''})` : '');
    const pre = d.querySelector('pre');
    const text = logs.has(w.rank) ? logs.get(w.rank) || '(empty)' : open.has(w.rank) ? 'loading…' : '';
    if (pre.textContent !== text) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  }
  for (const d of el.querySelectorAll('details'))
    if (!workers.some((w) => String(w.rank) === d.dataset.rank)) d.remove();
}

// ------------------------------------------------------------------------------------------
// Services (docs/serving.md): the list, and a Service's page. Request rate and latency are
// the router's (its load reports to the head, status.roles[].traffic), charted from what this
// page reads; replica groups are drawn on the chip grid by web/services.js replicaGroups.

const byName = (a, b) => (a.metadata.name < b.metadata.name ? -1 : 1);

function roleSpecs(svc) {
  return new Map((svc.spec?.roles || []).map((r) => [r.name, r]));
}

function serviceGrid(cv, services) {
  cv.update([...state.hosts.values()], [...state.jobs.values()],
            {highlight: replicaGroups(services), services: new Set(state.services.keys())});
}

function servicesView() {
  main().innerHTML = `<h1>Services</h1>
    <div class="table-scroll" style="max-height:none"><table class="services"><caption class="muted" style="text-align:left">Select a name for its replica groups, autoscaler and traffic over time. Requests and latency are the router's, between this page's last two reads.</caption>
    <thead><tr><th scope="col">Name</th><th scope="col">State</th><th scope="col">Role</th><th scope="col">Shape</th>
      <th scope="col">Ready / desired</th><th scope="col">Autoscaler</th><th scope="col">Requests</th>
      <th scope="col">Latency p50</th><th scope="col">Age</th><th scope="col">Message</th></tr></thead><tbody></tbody></table></div>
    <h2>Replica groups on the chip grid</h2>
    <p class="muted">Each replica group in its own colour on its slice, its leader ringed; a group that is not ready is striped.</p>
    <div data-role="grid"></div>`;
  const cv = new ClusterView(main().querySelector('[data-role=grid]'), {onOpenJob: openJob, onOpenService: openService});
  window.__tessera.cluster = cv;
  return {
    name: 'services',
    render() {
      const now = Date.now();
      const services = [...state.services.values()].sort(byName);
      main().querySelector('tbody').innerHTML = services.map((svc) => serviceRows(svc, now)).join('') ||
          '<tr><td colspan="10" class="muted">No services. <code>tessera apply -f service.yaml</code> deploys one (docs/serving.md).</td></tr>';
      serviceGrid(cv, services);
    },
    destroy() { cv.destroy(); window.__tessera.cluster = null; },
  };
}

function serviceRows(svc, now) {
  const name = keyOf(svc), st = svc.status || {};
  const specs = roleSpecs(svc);
  const roles = st.roles?.length ? st.roles : [...specs.keys()].map((n) => ({name: n}));
  const samples = state.serviceSamples.get(name) || [];
  const span = `rowspan="${Math.max(1, roles.length)}"`;
  return roles.map((role, i) => {
    const spec = specs.get(role.name) || {};
    const t = latestTraffic(samples, role.name);
    return `<tr data-service="${escapeHtml(name)}" data-role-name="${escapeHtml(role.name)}">
      ${i ? '' : `<th scope="row" ${span}><a href="#/services/${encodeURIComponent(name)}">${escapeHtml(shownKey(name))}</a></th>
        <td ${span}>${groupBadge(st.phase)}</td>`}
      <td>${escapeHtml(role.name)}</td>
      <td>${escapeHtml(spec.accelerator || '')} ${escapeHtml(spec.topology || '')}</td>
      <td><strong>${replicasText(role)}</strong> <span class="muted">${escapeHtml(roleSizeText(spec))}</span></td>
      <td>${escapeHtml(autoscalerText(role)) || '<span class="muted">fixed size</span>'}</td>
      <td>${rateText(t?.rate)}</td>
      <td>${secondsText(t?.p50 ?? t?.mean)}</td>
      ${i ? '' : `<td ${span}>${age(svc.metadata.creationTimestampMs, now)}</td><td ${span}>${escapeHtml(st.message || '')}</td>`}</tr>`;
  }).join('');
}

function serviceView(name) {
  main().innerHTML = `<p><a href="#/services">← Services</a></p><h1>Service ${escapeHtml(name)}</h1>
    <div data-role="facts"></div>
    <div data-role="disagg"></div>
    <h2>Replica groups</h2><div data-role="groups"></div>
    <h2>Traffic</h2>
    <p class="muted">From the router's load reports to the head (one a second), read by this page every ${SERVICE_POLL_MS / 1000} s since it opened:
      requests relayed per second, their latency (request header to last response byte, p50 and p99 from the router's histogram),
      ongoing requests (in flight and queued: the autoscaler's input) and replicas.</p>
    <div class="grid2">
      <section><h3>Request rate</h3><canvas class="chart" data-role="rate" role="img" aria-label="Requests per second over time"></canvas><div data-role="rate-legend"></div></section>
      <section><h3>Latency</h3><canvas class="chart" data-role="latency" role="img" aria-label="Request latency over time"></canvas><div data-role="latency-legend"></div></section>
      <section><h3>Replicas</h3><canvas class="chart" data-role="replicas" role="img" aria-label="Ready and desired replicas over time"></canvas><div data-role="replicas-legend"></div></section>
      <section><h3>Ongoing requests</h3><canvas class="chart" data-role="ongoing" role="img" aria-label="Ongoing requests over time"></canvas><div data-role="ongoing-legend"></div></section>
    </div>
    <h2>On the chip grid</h2>
    <p class="muted">Each replica group of this Service in its own colour on its slice, its leader ringed; a group that is not ready is striped; other workloads grey.</p>
    <div data-role="grid"></div>`;
  const cv = new ClusterView(main().querySelector('[data-role=grid]'), {onOpenJob: openJob, onOpenService: openService});
  window.__tessera.cluster = cv;
  let stopped = false;
  let problem = '';
  const poll = async () => {
    try {
      const got = await getJson(objectPath('services', name));
      const known = state.services.get(name);
      const stale = !!known && BigInt(got.metadata?.resourceVersion || 0) < BigInt(known.metadata?.resourceVersion || 0);
      state.services.set(name, mergeService(known, got, stale));
      sampleServices(Date.now(), name);
      problem = '';
    } catch (e) {
      if (e instanceof AuthError) return showLogin(e.message);
      problem = e.message;
    }
    if (!stopped) view?.render();
  };
  poll();
  const timer = setInterval(poll, SERVICE_POLL_MS);
  return {
    name: 'service',
    render() {
      const svc = state.services.get(name);
      if (!svc) {
        main().querySelector('[data-role=facts]').innerHTML = `<p class="error">${escapeHtml(problem || 'Loading…')}</p>`;
        return;
      }
      renderServiceFacts(svc);
      renderDisagg(svc);
      renderGroups(svc);
      serviceGrid(cv, [svc]);
      renderServiceCharts(svc, state.serviceSamples.get(name) || []);
    },
    destroy() { stopped = true; clearInterval(timer); cv.destroy(); window.__tessera.cluster = null; },
  };
}

function renderServiceFacts(svc) {
  const st = svc.status || {};
  const specs = roleSpecs(svc);
  const now = Date.now();
  const endpoints = st.endpoints || [];
  const roles = (st.roles || []).map((role) => {
    const spec = specs.get(role.name) || {};
    return `<strong>${escapeHtml(role.name)}</strong>: ${escapeHtml(spec.accelerator || '')} ${escapeHtml(spec.topology || '')} per replica,
      ${escapeHtml(roleSizeText(spec))}, ${replicasText(role)} ready, generation ${role.generation ?? 1},
      up to ${spec.maxOngoingRequests ?? '?'} ongoing per replica, readiness ${escapeHtml(spec.readiness?.path || '/healthz')}`;
  });
  const autoscalers = (st.roles || []).filter((r) => r.autoscaler).map((r) =>
    `<span data-role="autoscaler" data-role-name="${escapeHtml(r.name)}"><strong>${escapeHtml(r.name)}</strong>: ${escapeHtml(autoscalerText(r))}` +
    (r.autoscaler.atMs ? ` <span class="muted">(${age(r.autoscaler.atMs, now)} ago)</span>` : '') + '</span>');
  const facts = [
    ['State', `${groupBadge(st.phase)} ${escapeHtml(st.reason || '')}`],
    ['Message', escapeHtml(st.message || '')],
    ['Roles', roles.join('<br>') || NONE],
    ['Autoscaler', autoscalers.join('<br>') || '<span class="muted">fixed size (no autoscaling)</span>'],
    ['Endpoints', `${endpoints.filter((e) => e.ready).length} ready of ${endpoints.length} (the router sends requests to the ready ones of ${
      disaggRoles(svc) ? 'the decode role, naming a prefill replica to each' : 'the first role'})`],
    ['Queue / priority', `${escapeHtml(svc.metadata.queue || 'default')} / ${escapeHtml(svc.spec?.priority || NONE)}`],
    ['Age', age(svc.metadata.creationTimestampMs, now)],
  ];
  main().querySelector('[data-role=facts]').innerHTML =
      `<dl class="facts">${facts.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

// A disaggregated Service's prefill and decode roles side by side (web/services.js
// disaggRoles), with the router's handoff, fallback and pairing counts; nothing otherwise.
function renderDisagg(svc) {
  const d = disaggRoles(svc);
  const el = main().querySelector('[data-role=disagg]');
  if (!d) {
    if (el.innerHTML) el.innerHTML = '';
    return;
  }
  const cells = [
    ['Shape per replica', (r) => escapeHtml(r.shape)],
    ['Ready / desired replicas', (r) => `${r.ready} / ${r.desired}`],
    ['Ongoing (in flight + queued)', (r) => String(Math.round(r.ongoing))],
    ['Queued at the router', (r) => String(r.queued)],
    ['Queued prompt tokens', (r) => (r.kind === 'prefill' ? String(Math.round(r.queuedPromptTokens)) : NONE)],
    ['Time to first token (mean)', (r) => secondsText(r.ttft)],
    ['Time per output token (mean)', (r) => (r.kind === 'decode' ? secondsText(r.tpot) : NONE)],
    ['Output tokens', (r) => (r.kind === 'decode' ? String(r.outputTokens) : NONE)],
  ];
  const h = d.handoffs, p = d.pairing;
  const reasons = h.reasons.length ? ` (${h.reasons.map(([k, v]) => `${escapeHtml(k)} ${v}`).join(', ')})` : '';
  const html = `<h2>Prefill and decode</h2>
    <p class="muted">The router's counts since it started. Time to first token is of the streams the role prefilled (prefill: those decode handed off; decode: the rest), time per output token of those it decoded.</p>
    <table class="disagg"><thead><tr><th scope="col"></th>${d.roles.map((r) =>
      `<th scope="col" data-role-name="${escapeHtml(r.name)}">${escapeHtml(r.name)} <span class="muted">(${escapeHtml(r.kind)})</span></th>`).join('')}</tr></thead>
    <tbody>${cells.map(([k, f]) => `<tr><th scope="row">${k}</th>${d.roles.map((r) =>
      `<td data-kind="${escapeHtml(r.kind)}">${f(r)}</td>`).join('')}</tr>`).join('')}</tbody></table>
    <dl class="facts">
      <dt>Handoffs</dt><dd data-role="handoffs">${h.remote} prefilled remotely (KV handed off), ${h.local} locally (short prompts)</dd>
      <dt>Fallbacks</dt><dd data-role="fallbacks">${h.fallbacks} to local prefill${reasons}</dd>
      <dt>Pairing</dt><dd data-role="pairing">${shareText(p.sameShare)} on the decode replica's slice (${p.sameSlice} same slice, ${p.otherSlice} other slice, ${p.none} with no prefill replica)</dd>
    </dl>`;
  if (el.innerHTML !== html) el.innerHTML = html;
}

function renderGroups(svc) {
  const {groups} = replicaGroups([svc]);
  const color = new Map(groups.map((g) => [g.key, g.color]));
  const html = (svc.status?.roles || []).map((role) => {
    const inFlight = role.traffic?.perReplica || {};
    const rows = (role.replicas || []).map((r) => {
      const key = `${svc.metadata.name}/${role.name}/${r.replica}`;
      const c = color.get(key);
      const leader = r.leader ? `${escapeHtml(r.leader.address)}:${r.leader.port}` : NONE;
      return `<tr data-group="${escapeHtml(key)}" data-phase="${escapeHtml(r.phase)}">
        <th scope="row">${c ? `<span class="swatch${r.phase === 'Ready' ? '' : ' striped'}" style="background-color:${c}"></span>` : ''}${r.replica}</th>
        <td>${groupBadge(r.phase)}</td><td>${r.generation}</td>
        <td>${escapeHtml(r.slice || NONE)}</td><td>${escapeHtml((r.hosts || []).join(', ') || NONE)}</td>
        <td>${leader}</td><td>${inFlight[r.replica] ?? NONE}</td><td>${r.restarts ?? 0}</td>
        <td>${escapeHtml(r.reason || '')}${r.message ? `: ${escapeHtml(r.message)}` : ''}</td></tr>`;
    }).join('') || `<tr><td colspan="9" class="muted">No replica groups (${replicasText(role)}).</td></tr>`;
    return `<h3>Role ${escapeHtml(role.name)} · ${replicasText(role)} ready</h3>
      <table class="groups" data-role-name="${escapeHtml(role.name)}"><thead><tr><th scope="col">Replica</th><th scope="col">Readiness</th>
      <th scope="col">Generation</th><th scope="col">Slice</th><th scope="col">Hosts (leader first)</th><th scope="col">Leader</th>
      <th scope="col">In flight</th><th scope="col">Restarts</th><th scope="col">Reason / message</th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join('');
  const el = main().querySelector('[data-role=groups]');
  if (el.innerHTML !== html) el.innerHTML = html || '<p class="muted">No roles yet.</p>';
}

function renderServiceCharts(svc, samples) {
  const roles = (svc.status?.roles || []).map((r) => r.name);
  const label = (role, what) => (roles.length > 1 ? `${role} ${what}` : what);
  const rate = [], latency = [], replicas = [], ongoing = [];
  for (const role of roles) {
    const t = trafficSeries(samples, role);
    const r = replicaSeries(samples, role);
    rate.push({name: label(role, 'requests/s'), points: t.rate});
    latency.push({name: label(role, 'p50'), points: t.p50}, {name: label(role, 'p99'), points: t.p99},
                 {name: label(role, 'mean'), points: t.mean});
    replicas.push({name: label(role, 'ready'), points: r.ready}, {name: label(role, 'desired'), points: r.desired});
    ongoing.push({name: label(role, 'ongoing (in flight + queued)'), points: t.ongoing});
  }
  const count = (v) => String(Math.round(v * 10) / 10);
  const maxReplicas = Math.max(1, ...replicas.flatMap((s) => s.points.map((p) => p[1])));
  const charts = [['rate', rate, (v) => `${count(v)}/s`, undefined], ['latency', latency, secondsText, undefined],
                  ['replicas', replicas, count, Math.ceil((maxReplicas + 1) / 4) * 4], ['ongoing', ongoing, count, undefined]];
  for (const [key, series, fmt, yMax] of charts) {
    drawLineChart(main().querySelector(`[data-role=${key}]`), series, {yMax, yFormat: fmt, height: 180});
    main().querySelector(`[data-role=${key}-legend]`).innerHTML = legendHtml(series, fmt);
  }
}

function queuesView() {
  main().innerHTML = `<h1>Queues</h1><div data-role="cq"></div><h2>Local queues</h2><div data-role="lq"></div>
    <h2>Pending jobs by queue</h2><div data-role="pending"></div>`;
  return {
    name: 'queues',
    render() {
      const cq = state.clusterQueues;
      main().querySelector('[data-role=cq]').innerHTML = cq.length ? `<table><thead><tr>
          <th scope="col">ClusterQueue</th><th scope="col">Cohort</th><th scope="col">Nominal chips</th>
          <th scope="col">Used</th><th scope="col">Borrowed</th><th scope="col">Lendable</th>
          <th scope="col">Pending</th><th scope="col">Admitted</th></tr></thead><tbody>${cq.map((q) => {
            const s = q.status || {};
            const over = (s.usedChips || 0) > (s.nominalChips || 0);
            return `<tr><th scope="row">${escapeHtml(q.metadata.name)}</th><td>${escapeHtml(q.spec?.cohort || '-')}</td>
              <td>${s.nominalChips ?? 0}</td><td>${s.usedChips ?? 0}${over ? ' <span class="badge warn">over nominal</span>' : ''}</td>
              <td>${s.borrowedChips ?? 0}</td><td>${s.lendableChips ?? 0}</td>
              <td>${s.pendingWorkloads ?? 0}</td><td>${s.admittedWorkloads ?? 0}</td></tr>`;
          }).join('')}</tbody></table>`
        : '<p class="muted">No ClusterQueue defined: jobs are admitted first come, first served.</p>';
      main().querySelector('[data-role=lq]').innerHTML = state.localQueues.length
        ? `<table><thead><tr><th scope="col">LocalQueue</th><th scope="col">ClusterQueue</th></tr></thead><tbody>${
            state.localQueues.map((q) => `<tr><th scope="row">${escapeHtml(everyNamespace() ? shownKey(keyOf(q)) : q.metadata.name)}</th><td>${escapeHtml(q.spec?.clusterQueue || '')}</td></tr>`).join('')}</tbody></table>`
        : '<p class="muted">None.</p>';
      const pending = {};
      for (const j of state.jobs.values())
        if (j.status?.phase === 'Pending') (pending[shownKey(keyOf({metadata: {...j.metadata, name: j.metadata.queue || 'default'}}))] ||= []).push(j);
      main().querySelector('[data-role=pending]').innerHTML = Object.keys(pending).length
        ? `<table><thead><tr><th scope="col">Queue</th><th scope="col">Pending</th><th scope="col">Head of line and why</th></tr></thead><tbody>${
            Object.entries(pending).map(([q, js]) => {
              js.sort((a, b) => (a.status.queuePosition || 1e9) - (b.status.queuePosition || 1e9));
              return `<tr><th scope="row">${escapeHtml(q)}</th><td>${js.length}</td><td><a href="#/jobs/${encodeURIComponent(keyOf(js[0]))}">${escapeHtml(shownKey(keyOf(js[0])))}</a>: ${escapeHtml(pendingText(js[0]))}</td></tr>`;
            }).join('')}</tbody></table>`
        : '<p class="muted">Nothing is waiting.</p>';
    },
  };
}

function utilizationView() {
  main().innerHTML = `<h1>Utilization</h1>
    <p class="muted">Sampled by this page every ${USAGE_POLL_MS / 1000} s from the hosts' reports since it opened.
      Chip utilization is chip-weighted over every chip (idle chips count 0); emulated hosts derive it from their workers' CPU.</p>
    <div class="grid2">
      <section><h2>Chip utilization</h2><canvas class="chart" data-role="util" role="img" aria-label="Chip utilization over time"></canvas><div data-role="util-legend"></div></section>
      <section><h2>Chips allocated</h2><canvas class="chart" data-role="alloc" role="img" aria-label="Share of chips allocated over time"></canvas><div data-role="alloc-legend"></div></section>
      <section><h2>Worker memory</h2><canvas class="chart" data-role="mem" role="img" aria-label="Worker memory over time"></canvas><div data-role="mem-legend"></div></section>
    </div>`;
  return {
    name: 'utilization',
    render() {
      const gens = [...new Set(state.samples.flatMap((s) => Object.keys(s.byGeneration)))].sort();
      const series = (pick) => [{name: 'cluster', points: state.samples.map((s) => [s.timeMs, pick(s.all)])},
        ...gens.map((g) => ({name: g, points: state.samples.filter((s) => s.byGeneration[g]).map((s) => [s.timeMs, pick(s.byGeneration[g])])}))];
      const pct = (v) => `${Math.round(v * 100)}%`;
      const charts = [['util', (t) => t.util, pct, 1], ['alloc', (t) => t.allocated, pct, 1], ['mem', (t) => t.memoryBytes, fmtBytes, undefined]];
      for (const [key, pick, fmt, yMax] of charts) {
        const s = series(pick);
        drawLineChart(main().querySelector(`[data-role=${key}]`), s, {yMax, yFormat: fmt});
        main().querySelector(`[data-role=${key}-legend]`).innerHTML = legendHtml(s, fmt);
      }
    },
  };
}

function eventsView() {
  main().innerHTML = `<h1>Events</h1>
    <div class="filters"><label>Filter <input type="search" data-role="filter" placeholder="reason, object or message"></label>
      <label><input type="checkbox" data-role="warnings"> warnings only</label></div>
    <div class="table-scroll" style="max-height:none"><table><thead><tr><th scope="col">Time</th><th scope="col">Type</th>
      <th scope="col">Reason</th><th scope="col">Object</th><th scope="col">Message</th></tr></thead><tbody></tbody></table></div>`;
  const filter = main().querySelector('[data-role=filter]');
  const warnings = main().querySelector('[data-role=warnings]');
  filter.addEventListener('input', () => view.render());
  warnings.addEventListener('change', () => view.render());
  return {
    name: 'events',
    render() {
      const f = filter.value.trim().toLowerCase();
      const rows = state.events.filter((e) => (!warnings.checked || e.type === 'Warning') &&
          (!f || `${e.reason} ${e.object} ${e.message}`.toLowerCase().includes(f))).slice(-500).reverse();
      main().querySelector('tbody').innerHTML = rows.map((e) => {
        const obj = e.object || '', ns = e.metadata?.namespace || 'default';
        const key = (name) => (ns === 'default' ? name : `${ns}.${name}`);
        const shown = everyNamespace() && ns !== 'default' ? `${ns}: ${obj}` : obj;
        const link = obj.startsWith('trainjob/') ? `<a href="#/jobs/${encodeURIComponent(key(obj.slice(9)))}">${escapeHtml(shown)}</a>`
            : obj.startsWith('service/') ? `<a href="#/services/${encodeURIComponent(key(obj.slice(8)))}">${escapeHtml(shown)}</a>` : escapeHtml(shown);
        return `<tr><td>${new Date(e.timeMs).toLocaleTimeString()}</td>
          <td>${e.type === 'Warning' ? '<span class="badge bad">⚠ Warning</span>' : '<span class="badge done">Normal</span>'}</td>
          <td>${escapeHtml(e.reason)}</td><td>${link}</td><td>${escapeHtml(e.message)}</td></tr>`;
      }).join('') || '<tr><td colspan="5" class="muted">No events.</td></tr>';
    },
  };
}

// ------------------------------------------------------------------------------------------
// Start

window.__tessera = {state, cluster: null, jobColors};
$('[data-role=login-form]').addEventListener('submit', (e) => {
  e.preventDefault();
  setToken($('#token').value.trim());
  connect();
});
$('[data-role=signout]').addEventListener('click', () => showLogin('Token forgotten.'));
window.addEventListener('hashchange', route);
if (token()) connect();
else showLogin('');
