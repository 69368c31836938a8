// A small line chart on a canvas: time on x, series told apart by colour AND dash pattern and
// named in a legend, so no line is known by its colour alone.

const PALETTE = ['#1d4ed8', '#b45309', '#047857', '#7c3aed', '#be123c', '#0f766e'];
const DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3], [1, 2], [8, 8]];

// series: [{name, points: [[timeMs, value], ...]}]; options: {yMax, yFormat, title}.
export function drawLineChart(canvas, series, {yMax, yFormat = String, height = 220} = {}) {
  const dpr = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 600;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d');
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, width, height);
  const left = 64, right = 12, top = 12, bottom = 28;
  const all = series.flatMap((s) => s.points);
  ctx.font = '12px system-ui, sans-serif';
  ctx.fillStyle = '#1f2937';
  if (!all.length) {
    ctx.fillText('No samples yet.', left, top + 20);
    return;
  }
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]), t0 + 1000);
  const top_ = yMax ?? Math.max(1e-9, ...all.map((p) => p[1])) * 1.1;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = (v) => top + (1 - v / top_) * (height - top - bottom);
  // Axes and grid.
  ctx.strokeStyle = '#d1d5db';
  ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (top_ * i) / 4;
    ctx.beginPath();
    ctx.moveTo(left, y(v));
    ctx.lineTo(width - right, y(v));
    ctx.stroke();
    ctx.fillText(yFormat(v), 4, y(v) + 4);
  }
  const fmtT = (t) => new Date(t).toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', second: '2-digit'});
  ctx.fillText(fmtT(t0), left, height - 8);
  const last = fmtT(t1);
  ctx.fillText(last, width - right - ctx.measureText(last).width, height - 8);
  series.forEach((s, i) => {
    ctx.strokeStyle = PALETTE[i % PALETTE.length];
    ctx.setLineDash(DASHES[i % DASHES.length]);
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.points.forEach(([t, v], k) => (k ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    ctx.stroke();
    // A lone point has no line to draw: a dot.
    if (s.points.length === 1) {
      ctx.beginPath();
      ctx.arc(x(s.points[0][0]), y(s.points[0][1]), 3.5, 0, 2 * Math.PI);
      ctx.fillStyle = PALETTE[i % PALETTE.length];
      ctx.fill();
      ctx.fillStyle = '#1f2937';
    }
  });
  ctx.setLineDash([]);
}

// The legend for drawLineChart's series: a list with a line sample (colour and dash) per name.
export function legendHtml(series, lastValue) {
  return `<ul class="chart-legend">${series.map((s, i) => {
    const dash = DASHES[i % DASHES.length].join(' ');
    const last = s.points.length ? s.points[s.points.length - 1][1] : null;
    return `<li><svg width="28" height="10" aria-hidden="true"><line x1="0" y1="5" x2="28" y2="5"
      stroke="${PALETTE[i % PALETTE.length]}" stroke-width="2.5" stroke-dasharray="${dash}"/></svg>
      ${escapeHtml(s.name)}${last != null && lastValue ? `: <strong>${escapeHtml(lastValue(last))}</strong>` : ''}</li>`;
  }).join('')}</ul>`;
}

export function escapeHtml(s) {
  return String(s ?? '').replace(/[&<>"']/g, (c) => (
    {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
