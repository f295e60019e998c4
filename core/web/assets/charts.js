/*
 * charts.js -- the dashboard's two drawings, in plain SVG: stacked bars of
 * attempts done and failed per time bucket, and a job's attempts on a
 * timeline. Small on purpose, no library: every text node is set with
 * textContent and every number is a number, so nothing from the database
 * can become markup.
 */
'use strict';

window.skipqCharts = (function () {
  const NS = 'http://www.w3.org/2000/svg';

  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function pad2(n) { return String(n).padStart(2, '0'); }
  function hhmm(ms) { const d = new Date(ms); return pad2(d.getHours()) + ':' + pad2(d.getMinutes()); }

  /* A round ceiling for the axis: 1, 2, 5 x 10^n. */
  function niceMax(v) {
    if (v <= 4) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  /*
   * bars(buckets, {bucketMs, labelEvery}): buckets are {t (ms), done,
   * failed}; returns an <svg class="chart"> with one group per bucket
   * (rect.bar-done below rect.bar-failed, and a <title> with the counts).
   */
  function bars(buckets, opts) {
    const W = 720, H = 190, L = 44, R = 8, T = 10, B = 24;
    const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img' });
    const max = niceMax(Math.max(0, ...buckets.map(b => b.done + b.failed)));
    const y = v => T + (H - T - B) * (1 - v / max);
    for (const f of [0, 0.5, 1]) {
      s.append(svg('line', { x1: L, x2: W - R, y1: y(max * f), y2: y(max * f), class: 'grid' }));
      s.append(svg('text', { x: L - 6, y: y(max * f) + 4, 'text-anchor': 'end', class: 'axis' },
        (max * f).toLocaleString('en-US')));
    }
    const n = buckets.length, bw = (W - L - R) / Math.max(n, 1);
    let total = 0;
    buckets.forEach((b, i) => {
      const x = L + i * bw + Math.min(1, bw * 0.15), w = Math.max(1, bw - Math.min(2, bw * 0.3));
      const g = svg('g', { class: 'bucket' });
      g.append(svg('title', {}, `${hhmm(b.t)}–${hhmm(b.t + opts.bucketMs)}: ${b.done} done, ${b.failed} failed`));
      if (b.done > 0) g.append(svg('rect', { x, y: y(b.done), width: w, height: y(0) - y(b.done), class: 'bar-done' }));
      if (b.failed > 0) {
        g.append(svg('rect', { x, y: y(b.done + b.failed), width: w, height: y(b.done) - y(b.done + b.failed),
          class: 'bar-failed' }));
      }
      if (i % opts.labelEvery === 0) {
        s.append(svg('text', { x: x + w / 2, y: H - 6, 'text-anchor': 'middle', class: 'axis' }, hhmm(b.t)));
      }
      total += b.done + b.failed;
      s.append(g);
    });
    if (total === 0) {
      s.append(svg('text', { x: (L + W) / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' },
        'no attempts ended in this period'));
    }
    return s;
  }

  function duration(ms) {
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
    return (ms / 3600000).toFixed(1) + ' h';
  }

  /*
   * timeline(createdMs, attempts, nowMs): attempts are {attempt, worker,
   * status, start (ms), end (ms or null: still running)}. One lane per
   * attempt, a bar from start to end (rect.attempt.<status>), the job's
   * creation as a line; the scale runs from creation to the last end (or
   * now). `width`: the pixels it will take, so text keeps its size.
   */
  function timeline(createdMs, attempts, nowMs, width) {
    const W = Math.round(width), L = 190, R = 90, lane = 26, top = 8, axis = 22;
    const H = top + Math.max(1, attempts.length) * lane + axis;
    const s = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'timeline', role: 'img' });
    const ends = attempts.map(a => (a.end === null ? nowMs : a.end));
    const t0 = Math.min(createdMs, ...attempts.map(a => a.start));
    const t1 = Math.max(t0 + 1, ...ends, attempts.length ? 0 : nowMs);
    const x = t => L + (W - L - R) * (t - t0) / (t1 - t0);
    s.append(svg('line', { x1: x(createdMs), x2: x(createdMs), y1: top - 4, y2: H - axis + 2, class: 'created' }));
    attempts.forEach((a, i) => {
      const yy = top + i * lane, end = a.end === null ? nowMs : a.end;
      s.append(svg('rect', { x: 0, y: yy, width: W, height: lane - 4, class: 'lane' }));
      s.append(svg('text', { x: 6, y: yy + 16, class: 'label' }, `#${a.attempt} ${a.worker}`));
      const r = svg('rect', { x: x(a.start), y: yy + 3, width: Math.max(2, x(end) - x(a.start)), height: lane - 10,
        class: 'attempt ' + a.status, 'data-attempt': a.attempt });
      r.append(svg('title', {}, `attempt ${a.attempt} on ${a.worker}: ${a.status}, ${duration(end - a.start)}` +
        (a.end === null ? ' so far' : '')));
      s.append(r);
      s.append(svg('text', { x: W - R + 6, y: yy + 16, class: 'axis' }, duration(end - a.start)));
    });
    if (!attempts.length) {
      s.append(svg('text', { x: L, y: top + 16, class: 'axis' }, 'no attempt yet'));
    }
    const fmt = t => new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
    s.append(svg('text', { x: L, y: H - 6, class: 'axis' }, 'created ' + fmt(createdMs)));
    s.append(svg('text', { x: W - R, y: H - 6, 'text-anchor': 'end', class: 'axis' },
      fmt(t1) + ' (+' + duration(t1 - t0) + ')'));
    return s;
  }

  return { bars, timeline, duration };
})();
