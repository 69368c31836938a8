// The cluster view: every cube or fixed slice drawn as its grid of chips on one <canvas>,
// coloured by the job that holds each chip; lost hosts hatched and crossed (and named so in
// the tooltip and the table, not by colour alone). A 9,216-chip pod is 144 cubes: one canvas
// and one draw per update, hover found from coordinates, never one DOM node per chip. The
// host table under it reaches every host by keyboard and highlights it on the canvas.
//
// With a highlight (the Services pages: web/services.js replicaGroups), hosts are coloured by
// the replica group they run instead: a group that is not ready is striped, its leader marked
// with a ring, and hosts held by anything else drawn in one neutral grey.

import {chipUtilization, fmtBytes, jobColors, layoutCluster, workersByHost, age} from './model.js';
import {escapeHtml} from './charts.js';

// A replica group's phase as a badge: words and an icon, not colour alone.
export function groupBadge(phase) {
  const cls = {Ready: 'ok', Starting: 'info', Pending: 'warn', Unready: 'bad', Recreating: 'warn',
               Terminating: 'done', Progressing: 'info', Degraded: 'warn', Deleting: 'done'}[phase] || 'info';
  const icon = {Ready: '✓', Starting: '↻', Pending: '◌', Unready: '✕', Recreating: '↻', Terminating: '■',
                Progressing: '↻', Degraded: '!', Deleting: '■'}[phase] || '•';
  return `<span class="badge ${cls}">${icon} ${escapeHtml(phase || '?')}</span>`;
}

const FREE = '#e5e7eb';
const FREE_EDGE = '#9ca3af';
const LOST = '#4b5563';
const OTHER = '#9ca3af';  // held by a workload outside the highlight
const TABLE_ROWS = 200;

export class ClusterView {
  constructor(root, {onOpenJob, onOpenService} = {}) {
    this.root = root;
    this.onOpenJob = onOpenJob;
    this.onOpenService = onOpenService;
    this.hosts = [];
    this.jobs = [];
    this.highlight = null;
    this.services = new Set();
    this.rects = [];
    this.selected = null;
    this.filter = '';
    this.lastRenderMs = 0;
    root.innerHTML = `
      <div class="cluster-wrap">
        <canvas class="cluster-canvas" tabindex="0" role="img"
          aria-label="Chip grid of the cluster; use the host table below or arrow keys to inspect hosts"></canvas>
        <div class="tooltip" role="status" hidden></div>
      </div>
      <p class="caption" data-role="caption"></p>
      <h3>Legend</h3>
      <ul class="legend" data-role="legend"></ul>
      <h3><label for="host-filter">Hosts</label></h3>
      <input id="host-filter" type="search" placeholder="filter by host, job, slice, state"
        aria-describedby="host-filter-help">
      <span id="host-filter-help" class="muted">Tab to a row to see it on the grid; Enter opens its job.</span>
      <div class="table-scroll"><table class="hosts"><thead><tr>
        <th scope="col">Host</th><th scope="col">State</th><th scope="col">Generation</th>
        <th scope="col">Slice / cube</th><th scope="col">Worker</th><th scope="col">Job (rank)</th>
        <th scope="col">Chip util.</th><th scope="col">Memory</th><th scope="col">Heartbeat</th>
      </tr></thead><tbody></tbody></table></div>
      <p class="muted" data-role="more"></p>`;
    this.canvas = root.querySelector('canvas');
    this.tooltip = root.querySelector('.tooltip');
    this.tbody = root.querySelector('tbody');
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { this.tooltip.hidden = true; });
    this.canvas.addEventListener('click', (e) => {
      const r = this.hit(e);
      if (r) this.open(r);
    });
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    root.querySelector('#host-filter').addEventListener('input', (e) => {
      this.filter = e.target.value.trim().toLowerCase();
      this.renderTable();
    });
    this.tbody.addEventListener('focusin', (e) => {
      const row = e.target.closest('tr[data-host]');
      if (row) this.select(row.dataset.host, true);
    });
    this.tbody.addEventListener('keydown', (e) => {
      const row = e.target.closest('tr[data-host]');
      if (!row) return;
      if (e.key === 'Enter' && row.dataset.job) this.openHolder(row.dataset.job);
      if (e.key === 'ArrowDown') row.nextElementSibling?.focus();
      if (e.key === 'ArrowUp') row.previousElementSibling?.focus();
    });
    // The width is read here, not while drawing: reading layout after changing the DOM would
    // force the browser to lay the page out again on every update.
    this.resizeObserver = new ResizeObserver((entries) => {
      const w = Math.floor(entries[0].contentRect.width);
      if (w !== this.width) {
        this.width = w;
        this.schedule();
      }
    });
    this.resizeObserver.observe(root);
  }

  // highlight: {byHost, groups} of replicaGroups (web/services.js), or null for job colours;
  // services: the names of Services, whose hosts link to the Service's page.
  update(hosts, jobs, {highlight = null, services = null} = {}) {
    this.hosts = hosts;
    this.jobs = jobs;
    this.highlight = highlight;
    if (services) this.services = services;
    this.schedule();
  }

  // Opens what runs on a host: its replica group's Service, or its job.
  open(r) {
    if (r.group) this.onOpenService?.(r.group.group.service);
    else if (r.job) this.openHolder(r.job.job);
  }

  openHolder(name) {
    if (this.services.has(name)) this.onOpenService?.(name);
    else this.onOpenJob?.(name);
  }

  colorOf(host) {
    const g = this.highlight?.byHost.get(host.metadata?.name);
    if (this.highlight) return g ? g.group.color : host.status?.job ? OTHER : FREE;
    return host.status?.job ? this.colors.get(host.status.job) : FREE;
  }

  schedule() {
    if (this.pending) return;
    this.pending = requestAnimationFrame(() => {
      this.pending = 0;
      this.render();
    });
  }

  // Lays out and draws everything now; returns the time it took in ms.
  render() {
    const t0 = performance.now();
    this.workers = workersByHost(this.jobs);
    const holders = this.hosts.map((h) => h.status?.job).filter(Boolean);
    this.colors = this.highlight
        ? new Map(this.highlight.groups.filter((g) => g.color).map((g) => [g.key, g.color]))
        : jobColors(holders);
    this.layout = layoutCluster(this.hosts);
    this.draw();
    this.renderLegend();
    this.renderTable();
    this.lastRenderMs = performance.now() - t0;
    const caption =
        `${this.layout.chips.toLocaleString()} chips on ${this.hosts.length.toLocaleString()} hosts ` +
        `in ${this.layout.groups.length} ${this.layout.groups.some((g) => g.kind === 'cube') ? 'cubes/slices' : 'slices'}` +
        ` · drawn in ${this.lastRenderMs.toFixed(1)} ms`;
    this.root.querySelector('[data-role=caption]').textContent = caption;
    return this.lastRenderMs;
  }

  draw() {
    const chips = this.layout.chips;
    const cell = chips <= 128 ? 22 : chips <= 1024 ? 14 : chips <= 4096 ? 9 : 7;
    const gap = Math.max(1, Math.round(cell / 8));
    const pad = 12, labelH = 16, sectionH = 22;
    if (!this.width) this.width = this.root.clientWidth;
    const width = Math.max(320, this.width || 800);
    // Flow the groups: a new section per generation (and block), left to right, wrapping.
    const ctx = this.canvas.getContext('2d');
    const labelFont = `${cell >= 14 ? 12 : 10}px system-ui, sans-serif`;
    ctx.font = labelFont;
    const placed = [];
    let x = pad, y = pad, rowH = 0, section = null;
    for (const g of this.layout.groups) {
      const key = `${g.generation} ${g.block}`;
      // A group is as wide as its chips or its label, whichever is wider.
      const w = Math.max(g.cols * cell, ctx.measureText(g.label).width + 4);
      const h = g.rows * cell + labelH;
      if (key !== section) {
        if (section !== null) y += rowH + pad;
        placed.push({section: true, text: `${g.generation}${g.block ? ` · ${g.block}` : ''}`, x: pad, y});
        y += sectionH;
        x = pad;
        rowH = 0;
        section = key;
      }
      if (x + w > width - pad && x > pad) {
        x = pad;
        y += rowH + pad;
        rowH = 0;
      }
      placed.push({group: g, x, y});
      x += w + pad * 1.5;
      rowH = Math.max(rowH, h);
    }
    const height = y + rowH + pad;
    const dpr = window.devicePixelRatio || 1;
    // Resizing the canvas reallocates its bitmap: only when the size changed.
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(height * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.textBaseline = 'top';
    this.rects = [];
    // One path per colour, filled once: a few draw calls instead of one per chip.
    const fills = new Map();
    const path = (color) => {
      if (!fills.has(color)) fills.set(color, new Path2D());
      return fills.get(color);
    };
    const freeEdges = new Path2D();
    const lostRects = [], unreadyRects = [], leaderRects = [];
    ctx.fillStyle = '#111827';
    for (const p of placed) {
      if (p.section) {
        ctx.font = '600 14px system-ui, sans-serif';
        ctx.fillStyle = '#111827';
        ctx.fillText(p.text, p.x, p.y + 2);
        continue;
      }
      const g = p.group;
      ctx.font = labelFont;
      ctx.fillStyle = '#374151';
      ctx.fillText(g.label, p.x, p.y);
      const oy = p.y + labelH;
      for (const hEntry of g.hosts) {
        const h = hEntry.host;
        const lost = h.status?.state !== 'Ready';
        const job = h.status?.job || '';
        const group = this.highlight?.byHost.get(hEntry.name) || null;
        const color = lost ? LOST : this.colorOf(h);
        const target = path(color);
        let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
        for (const [cx, cy] of hEntry.cells) {
          const rx = p.x + cx * cell, ry = oy + cy * cell;
          target.rect(rx, ry, cell - gap, cell - gap);
          if (color === FREE) freeEdges.rect(rx + 0.5, ry + 0.5, cell - gap - 1, cell - gap - 1);
          minX = Math.min(minX, rx); minY = Math.min(minY, ry);
          maxX = Math.max(maxX, rx + cell - gap); maxY = Math.max(maxY, ry + cell - gap);
        }
        const rect = {x: minX, y: minY, w: maxX - minX, h: maxY - minY, entry: hEntry, slice: g,
                      job: this.workers.get(hEntry.name) || (job ? {job} : null), group};
        if (lost) lostRects.push(rect);
        else if (group && !group.group.ready) unreadyRects.push(rect);
        if (group?.leader) leaderRects.push(rect);
        this.rects.push(rect);
      }
    }
    for (const [color, p] of fills) {
      ctx.fillStyle = color;
      ctx.fill(p);
    }
    ctx.strokeStyle = FREE_EDGE;
    ctx.lineWidth = 1;
    ctx.stroke(freeEdges);
    for (const r of lostRects) this.hatch(ctx, r);
    for (const r of unreadyRects) this.stripe(ctx, r);
    for (const r of leaderRects) this.ring(ctx, r);
    this.rectByHost = new Map(this.rects.map((r) => [r.entry.name, r]));
    if (this.selected && this.rectByHost.has(this.selected)) this.outline(ctx, this.rectByHost.get(this.selected));
  }

  hatch(ctx, r) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(r.x, r.y, r.w, r.h);
    ctx.clip();
    ctx.strokeStyle = '#f9fafb';
    ctx.lineWidth = 1;
    for (let d = -r.h; d < r.w; d += 4) {
      ctx.beginPath();
      ctx.moveTo(r.x + d, r.y + r.h);
      ctx.lineTo(r.x + d + r.h, r.y);
      ctx.stroke();
    }
    ctx.restore();
    // A cross over the host: "lost" without relying on colour.
    ctx.strokeStyle = '#b91c1c';
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.moveTo(r.x + 1, r.y + 1); ctx.lineTo(r.x + r.w - 1, r.y + r.h - 1);
    ctx.moveTo(r.x + r.w - 1, r.y + 1); ctx.lineTo(r.x + 1, r.y + r.h - 1);
    ctx.stroke();
  }

  // A replica group that is not ready: white stripes across its hosts (no cross: not lost).
  stripe(ctx, r) {
    ctx.save();
    ctx.beginPath();
    ctx.rect(r.x, r.y, r.w, r.h);
    ctx.clip();
    ctx.strokeStyle = 'rgba(255,255,255,.85)';
    ctx.lineWidth = 2;
    for (let d = -r.h; d < r.w; d += 7) {
      ctx.beginPath();
      ctx.moveTo(r.x + d, r.y);
      ctx.lineTo(r.x + d + r.h, r.y + r.h);
      ctx.stroke();
    }
    ctx.restore();
  }

  // The leader of a replica group (worker 0, takes HTTP): a ring in the middle of its host.
  ring(ctx, r) {
    const cx = r.x + r.w / 2, cy = r.y + r.h / 2, rad = Math.max(3, Math.min(r.w, r.h) / 5);
    ctx.beginPath();
    ctx.arc(cx, cy, rad, 0, 2 * Math.PI);
    ctx.fillStyle = '#ffffff';
    ctx.fill();
    ctx.strokeStyle = '#111827';
    ctx.lineWidth = 2;
    ctx.stroke();
  }

  outline(ctx, r) {
    ctx.strokeStyle = '#111827';
    ctx.lineWidth = 3;
    ctx.strokeRect(r.x - 2, r.y - 2, r.w + 4, r.h + 4);
    ctx.strokeStyle = '#fde047';
    ctx.lineWidth = 1.5;
    ctx.strokeRect(r.x - 2, r.y - 2, r.w + 4, r.h + 4);
  }

  hit(e) {
    const b = this.canvas.getBoundingClientRect();
    const x = e.clientX - b.left, y = e.clientY - b.top;
    const slack = 1;
    return this.rects.find((r) => x >= r.x - slack && x <= r.x + r.w + slack &&
                                  y >= r.y - slack && y <= r.y + r.h + slack);
  }

  hover(e) {
    const r = this.hit(e);
    if (!r) { this.tooltip.hidden = true; return; }
    this.showTooltip(r);
  }

  showTooltip(r) {
    const h = r.entry.host;
    const st = h.status || {};
    const spec = h.spec || {};
    const w = r.job;
    const where = spec.slice ? `${spec.slice.name} worker ${spec.slice.worker}`
        : spec.cube ? `${spec.cube.name} [${(spec.cube.coord || []).join(',')}]` : '-';
    const lost = st.state !== 'Ready';
    const sg = r.group;
    const holder = sg
      ? `Service: <strong>${escapeHtml(sg.group.service)}</strong> ${escapeHtml(sg.group.role)} replica ${sg.group.replica},
         ${sg.leader ? 'leader' : `worker ${sg.worker}`} · ${escapeHtml(sg.group.phase)}`
      : `${this.services.has(w?.job) ? 'Service' : 'Job'}: ${w ? `<strong>${escapeHtml(w.job)}</strong>${w.rank != null ? ` rank ${w.rank}, TPU_WORKER_ID ${w.worker} of slice ${w.slice}` : ''}` : 'free'}`;
    this.tooltip.innerHTML = `
      <strong>${escapeHtml(r.entry.name)}</strong>${lost ? ' <span class="badge bad">✕ Lost</span>' : ''}<br>
      ${escapeHtml(spec.generation || '')} · ${spec.chips ?? '?'} chips · ${escapeHtml(where)}<br>
      ${holder}<br>
      Chip utilization: ${Math.round(chipUtilization(st.usage) * 100)}% · memory ${fmtBytes(st.usage?.memoryBytes || 0)}<br>
      Heartbeat: ${age(st.lastHeartbeatMs, Date.now())} ago`;
    this.tooltip.hidden = false;
    const wrap = this.canvas.getBoundingClientRect();
    const left = Math.min(r.x + r.w + 8, wrap.width - 300);
    this.tooltip.style.left = `${Math.max(0, left)}px`;
    this.tooltip.style.top = `${r.y}px`;
  }

  select(name, fromTable) {
    this.selected = name;
    this.draw();
    const r = this.rectByHost?.get(name);
    if (r) {
      this.showTooltip(r);
      if (fromTable) this.canvas.scrollIntoView?.({block: 'nearest'});
    }
  }

  key(e) {
    if (!this.rects.length) return;
    const i = Math.max(0, this.rects.findIndex((r) => r.entry.name === this.selected));
    let next = null;
    if (e.key === 'ArrowRight' || e.key === 'ArrowDown') next = this.rects[Math.min(this.rects.length - 1, i + 1)];
    if (e.key === 'ArrowLeft' || e.key === 'ArrowUp') next = this.rects[Math.max(0, i - 1)];
    if (e.key === 'Home') next = this.rects[0];
    if (e.key === 'Enter' && this.selected) {
      const r = this.rectByHost.get(this.selected);
      if (r) this.open(r);
    }
    if (e.key === 'Escape') this.tooltip.hidden = true;
    if (next) {
      e.preventDefault();
      this.select(next.entry.name, false);
    }
  }

  renderLegend() {
    if (this.highlight) return this.renderGroupLegend();
    const chips = new Map();
    for (const h of this.hosts) {
      const j = h.status?.job;
      if (j && h.status?.state === 'Ready') chips.set(j, (chips.get(j) || 0) + (h.spec?.chips || 0));
    }
    const lost = this.hosts.filter((h) => h.status?.state !== 'Ready');
    const free = this.hosts.filter((h) => h.status?.state === 'Ready' && !h.status?.job)
        .reduce((n, h) => n + (h.spec?.chips || 0), 0);
    const items = [...this.colors.entries()].map(([job, color]) => `
      <li data-job="${escapeHtml(job)}"><span class="swatch" style="background:${color}"></span>
        <a href="#/${this.services.has(job) ? 'services' : 'jobs'}/${encodeURIComponent(job)}">${escapeHtml(job)}</a>
        <span class="muted">${chips.get(job) || 0} chips</span></li>`);
    items.push(`<li><span class="swatch free"></span> free <span class="muted">${free} chips</span></li>`);
    items.push(`<li><span class="swatch lost" aria-hidden="true">✕</span> lost host (hatched, crossed)
      <span class="muted">${lost.length} host${lost.length === 1 ? '' : 's'}${lost.length ? ': ' + escapeHtml(lost.slice(0, 8).map((h) => h.metadata.name).join(', ')) + (lost.length > 8 ? ', …' : '') : ''}</span></li>`);
    const html = items.join('');
    if (html !== this.legendHtml) this.root.querySelector('[data-role=legend]').innerHTML = this.legendHtml = html;
  }

  // The legend of a highlight: one item per replica group (colour, readiness in words, slice),
  // then what the other colours and marks mean.
  renderGroupLegend() {
    const chipsOf = new Map(this.hosts.map((h) => [h.metadata.name, h.spec?.chips || 0]));
    const items = this.highlight.groups.map((g) => {
      const chips = g.hosts.reduce((n, h) => n + (chipsOf.get(h) || 0), 0);
      const swatch = g.color ? `<span class="swatch${g.ready ? '' : ' striped'}" style="background-color:${g.color}"></span>`
                             : '<span class="swatch free"></span>';
      return `<li data-group="${escapeHtml(g.key)}" data-ready="${g.ready}">${swatch}
        <a href="#/services/${encodeURIComponent(g.service)}">${escapeHtml(g.label)}</a>
        ${groupBadge(g.phase)}
        <span class="muted">${g.hosts.length ? `${escapeHtml(g.slice)} · ${chips} chips` : escapeHtml(g.reason || 'no slice yet')}</span></li>`;
    });
    const other = this.hosts.filter((h) => h.status?.job && h.status?.state === 'Ready' && !this.highlight.byHost.has(h.metadata.name))
        .reduce((n, h) => n + (h.spec?.chips || 0), 0);
    const free = this.hosts.filter((h) => h.status?.state === 'Ready' && !h.status?.job && !this.highlight.byHost.has(h.metadata.name))
        .reduce((n, h) => n + (h.spec?.chips || 0), 0);
    const lost = this.hosts.filter((h) => h.status?.state !== 'Ready').length;
    items.push(`<li><span class="swatch leader" aria-hidden="true"></span> leader (worker 0, takes HTTP)</li>`);
    items.push(`<li><span class="swatch striped" style="background-color:#6b7280"></span> striped: group not ready</li>`);
    items.push(`<li><span class="swatch" style="background:${OTHER}"></span> other workloads <span class="muted">${other} chips</span></li>`);
    items.push(`<li><span class="swatch free"></span> free <span class="muted">${free} chips</span></li>`);
    if (lost) items.push(`<li><span class="swatch lost" aria-hidden="true">✕</span> lost host <span class="muted">${lost}</span></li>`);
    const html = items.join('');
    if (html !== this.legendHtml) this.root.querySelector('[data-role=legend]').innerHTML = this.legendHtml = html;
  }

  renderTable() {
    const now = Date.now();
    const rows = [];
    let matched = 0;
    for (const g of this.layout?.groups || []) {
      for (const e of g.hosts) {
        const h = e.host, st = h.status || {}, spec = h.spec || {};
        const w = this.workers?.get(e.name);
        const sg = this.highlight?.byHost.get(e.name);
        const job = st.job || '';
        const where = spec.slice ? spec.slice.name : spec.cube ? spec.cube.name : '';
        const worker = spec.slice ? spec.slice.worker : spec.cube ? `[${(spec.cube.coord || []).join(',')}]` : '';
        const text = `${e.name} ${st.state} ${where} ${job} ${spec.generation}`.toLowerCase();
        if (this.filter && !text.includes(this.filter)) continue;
        if (++matched > TABLE_ROWS) continue;
        const lost = st.state !== 'Ready';
        rows.push(`<tr tabindex="0" data-host="${escapeHtml(e.name)}" data-job="${escapeHtml(job)}"
            ${this.selected === e.name ? 'aria-selected="true"' : ''}>
          <th scope="row">${escapeHtml(e.name)}</th>
          <td>${lost ? '<span class="badge bad">✕ Lost</span>' : '<span class="badge ok">✓ Ready</span>'}</td>
          <td>${escapeHtml(spec.generation || '')}</td><td>${escapeHtml(where)}</td><td>${escapeHtml(worker)}</td>
          <td>${sg ? `<span class="swatch" style="background:${sg.group.color}"></span>${escapeHtml(sg.group.label)}, ${sg.leader ? 'leader' : `worker ${sg.worker}`}`
              : job ? `<span class="swatch" style="background:${this.colorOf(h)}"></span>${escapeHtml(job)}${w ? ` (${w.rank})` : ''}` : '<span class="muted">free</span>'}</td>
          <td>${Math.round(chipUtilization(st.usage) * 100)}%</td>
          <td>${fmtBytes(st.usage?.memoryBytes || 0)}</td>
          <td>${age(st.lastHeartbeatMs, now)} ago</td></tr>`);
      }
    }
    const html = rows.join('');
    if (html === this.tableHtml) return;  // most updates change no row: leave the DOM alone
    this.tableHtml = html;
    // Keep keyboard focus on the same host across a redraw.
    const focused = document.activeElement?.closest?.('tr[data-host]')?.dataset.host;
    this.tbody.innerHTML = html;
    if (focused) this.tbody.querySelector(`tr[data-host="${CSS.escape(focused)}"]`)?.focus({preventScroll: true});
    this.root.querySelector('[data-role=more]').textContent =
        matched > TABLE_ROWS ? `Showing ${TABLE_ROWS} of ${matched} hosts; filter to narrow.` : '';
  }

  destroy() {
    this.resizeObserver.disconnect();
    if (this.pending) cancelAnimationFrame(this.pending);
  }
}
