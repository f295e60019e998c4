/*
 * app.js -- the dashboard: one page, five views chosen by the URL's hash
 * (#/, #/jobs?..., #/job/ID, #/dead, #/hosts), each drawn from the JSON
 * API and refreshed in place.
 *
 * Every value from the database reaches the page as a text node
 * (textContent) or an attribute value (setAttribute), never as markup:
 * nothing here parses a string as HTML, so a payload, an error message or a key
 * holding <script> or "><img onerror=...> shows as those characters. Links
 * are built from numbers and encodeURIComponent'd names under "#/" only.
 * Actions (retry, cancel, pause, resume) are POSTs carrying the CSRF token
 * from /api/session; they are not drawn at all when the server says this
 * session may not act.
 */
'use strict';

(function () {
  const charts = window.skipqCharts;
  const state = { session: null, stop: null, names: { queues: [], kinds: [] } };

  /* ---- DOM -------------------------------------------------------------------------------- */

  /* el('a', {href, class, onclick}, child...): strings become text nodes. */
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const $ = id => document.getElementById(id);
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  /* ---- formatting ------------------------------------------------------------------------------ */

  /* ISO 8601, or the server's "YYYY-MM-DD HH:MM:SS[.f]+HH[:MM]". */
  function parseTime(s) {
    if (s === null || s === undefined) return null;
    let t = String(s).replace(' ', 'T');
    t = t.replace(/([+-]\d\d)$/, '$1:00');
    const ms = Date.parse(t);
    return isNaN(ms) ? null : ms;
  }
  function pad2(n) { return String(n).padStart(2, '0'); }
  function fmtTime(s) {
    const ms = parseTime(s);
    if (ms === null) return '';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ` +
      `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  }
  function age(seconds) {
    if (seconds === null || seconds === undefined) return '';
    const s = Math.abs(seconds);
    const v = s < 90 ? Math.round(s) + ' s' : s < 5400 ? Math.round(s / 60) + ' min'
      : s < 172800 ? (s / 3600).toFixed(1) + ' h' : Math.round(s / 86400) + ' d';
    return seconds < 0 ? 'in ' + v : v;
  }
  function ago(s) {
    const ms = parseTime(s);
    return ms === null ? '' : age((Date.now() - ms) / 1000) + (ms <= Date.now() ? ' ago' : '');
  }
  function num(v) { return v === null || v === undefined ? '–' : Number(v).toLocaleString('en-US'); }
  function numCell(v, href) {
    const zero = v === 0 || v === '0';
    const text = num(v);
    return el('td', { class: 'num' + (zero ? ' zero' : '') }, href && !zero ? el('a', { href }, text) : text);
  }
  function badge(text, cls) { return el('span', { class: 'badge ' + (cls || text) }, text); }
  function jobLink(id) { return el('a', { href: '#/job/' + Number(id) }, '#' + Number(id)); }
  function query(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== '') q.set(k, v);
    const qs = q.toString();
    return path + (qs ? '?' + qs : '');
  }
  /* A link within the dashboard; an API path is query('jobs', {...}). */
  function hash(path, params) { return '#' + query(path, params); }

  /* ---- the API ---------------------------------------------------------------------------------- */

  async function api(path, body) {
    const opts = { credentials: 'same-origin', headers: { Accept: 'application/json' } };
    if (body !== undefined) {
      opts.method = 'POST';
      opts.headers['Content-Type'] = 'application/json';
      opts.headers['X-CSRF-Token'] = state.session ? state.session.csrf : '';
      opts.body = JSON.stringify(body);
    }
    const res = await fetch('/api/' + path, opts);
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (!res.ok) throw new Error((data && data.error) || `${res.status} ${res.statusText}`);
    const timing = /dur=([\d.]+)/.exec(res.headers.get('Server-Timing') || '');
    if (data && timing) Object.defineProperty(data, 'serverMs', { value: Number(timing[1]) });
    return data;
  }

  let noticeTimer = null;
  function notice(text, bad) {
    const n = $('notice');
    n.textContent = text;
    n.className = 'notice' + (bad ? ' bad' : '');
    n.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { n.hidden = true; }, bad ? 10000 : 5000);
  }
  function canAct() { return state.session && state.session.actions; }

  /* A button that asks before it acts: "Cancel 3 jobs?" [Yes] [No]. */
  function confirmButton(label, question, action, cls) {
    const wrap = el('span', { class: 'confirm' });
    const start = el('button', { class: cls || '', type: 'button' }, label);
    start.addEventListener('click', () => {
      clear(wrap).append(question + ' ',
        el('button', { class: 'primary small', type: 'button', 'data-confirm': 'yes', onclick: run }, 'Yes'),
        el('button', { class: 'small', type: 'button', onclick: () => clear(wrap).append(start) }, 'No'));
    });
    async function run(ev) {
      ev.target.disabled = true;
      try { await action(); } finally { clear(wrap).append(start); }
    }
    wrap.append(start);
    return wrap;
  }

  async function act(path, body, done) {
    try {
      const r = await api(path, body);
      notice(done(r));
      return r;
    } catch (e) {
      notice(e.message, true);
      return null;
    }
  }
  const retry = (ids, then) => act('retry', { ids }, r => `${r.retried} of ${r.asked} job(s) back to pending`)
    .then(then);
  const cancel = (ids, then) => act('cancel', { ids }, r => `${r.cancelled} of ${r.asked} job(s) cancelled`)
    .then(then);
  function pauseButton(scope, name, paused, then) {
    if (!canAct()) return null;
    const what = paused ? 'resume' : 'pause';
    return el('button', {
      class: 'small', type: 'button', title: `${what} ${scope} ${name}`, 'data-action': what,
      onclick: () => act(what, { scope, name }, r => `${scope} ${name} ${r.changed ? what + 'd' : paused
        ? 'was not paused' : 'was already paused'}`).then(then),
    }, paused ? `Resume ${scope}` : `Pause ${scope}`);
  }

  /* Someone is in the middle of something: a question asked, a box ticked,
   * a field being typed in. A refresh would wipe it, so it waits. */
  function busy() {
    const main = $('main'), f = document.activeElement;
    return main.querySelector('[data-confirm], input[type=checkbox]:checked') !== null ||
      (f && main.contains(f) && (f.tagName === 'INPUT' || f.tagName === 'SELECT'));
  }

  /* A page refreshing itself every `ms` while visible; returns its stop. */
  function every(ms, fn) {
    let timer = null, stopped = false, first = true;
    const tick = async () => {
      if (stopped) return;
      if (first || (!document.hidden && !busy())) {
        first = false;
        try { await fn(); } catch (e) { notice(e.message, true); }
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return () => { stopped = true; clearTimeout(timer); };
  }

  /* ---- overview --------------------------------------------------------------------------------- */

  function pausedSet(list) {
    const s = new Set();
    for (const p of list || []) s.add(p.scope + '/' + p.name);
    return s;
  }

  function overviewTable(d, refresh) {
    const paused = pausedSet(d.paused);
    const dead = new Map((d.dead_now || []).map(r => [r.queue + '/' + r.kind, r.dead]));
    const rows = d.queues.slice();
    for (const r of d.dead_now || []) {
      if (!rows.some(q => q.queue === r.queue && q.kind === r.kind)) {
        rows.push({ queue: r.queue, kind: r.kind, ready: 0, scheduled: 0, blocked: 0, running: 0, expired: 0,
          oldest_ready_s: null, done_1h: 0, dead_1h: 0, p50_ms: null, p95_ms: null, p99_ms: null, served: true,
          paused: false });
      }
    }
    rows.sort((a, b) => a.queue.localeCompare(b.queue) || a.kind.localeCompare(b.kind));
    const cols = ['Ready', 'Scheduled', 'Blocked', 'Running', 'Expired', 'Dead', 'Done 1h', 'Dead 1h',
      'Oldest ready', 'p50', 'p95', 'p99'];
    const head = el('tr', {}, el('th', {}, 'Queue / kind'), cols.map(c => el('th', { class: 'num' }, c)),
      el('th', {}, 'State'), canAct() ? el('th', {}, '') : null);
    const body = el('tbody');
    let queue = null;
    for (const r of rows) {
      if (r.queue !== queue) {
        queue = r.queue;
        const qs = rows.filter(x => x.queue === queue);
        const sum = k => qs.reduce((a, x) => a + Number(x[k] || 0), 0);
        const qp = paused.has('queue/' + queue);
        body.append(el('tr', { class: 'group', 'data-queue': queue },
          el('td', {}, el('a', { href: hash('/jobs', { queue }) }, queue)),
          ['ready', 'scheduled', 'blocked', 'running', 'expired'].map(k => numCell(sum(k))),
          numCell(qs.reduce((a, x) => a + (dead.get(x.queue + '/' + x.kind) || 0), 0)),
          numCell(sum('done_1h')), numCell(sum('dead_1h')), el('td', { colspan: 4 }),
          el('td', {}, qp ? badge('paused', 'paused') : null),
          canAct() ? el('td', {}, pauseButton('queue', queue, qp, refresh)) : null));
      }
      const kp = paused.has('kind/' + r.kind), qp = paused.has('queue/' + r.queue);
      const f = { queue: r.queue, kind: r.kind };
      const ms = v => (v === null ? '–' : Number(v).toLocaleString('en-US', { maximumFractionDigits: 1 }) + ' ms');
      const st = [];
      if (kp || qp) st.push(badge(kp ? 'kind paused' : 'queue paused', 'paused'));
      if (!r.served && r.ready + r.scheduled + r.blocked + r.running > 0) st.push(badge('no live host', 'bad'));
      if (r.expired > 0) st.push(badge('expired leases', 'warn'));
      body.append(el('tr', { 'data-queue': r.queue, 'data-kind': r.kind },
        el('td', { class: 'kind' }, el('a', { href: hash('/jobs', f) }, r.kind)),
        numCell(r.ready, hash('/jobs', { ...f, status: 'pending' })),
        numCell(r.scheduled, hash('/jobs', { ...f, status: 'pending' })),
        numCell(r.blocked, hash('/jobs', { ...f, status: 'blocked' })),
        numCell(r.running, hash('/jobs', { ...f, status: 'running' })),
        numCell(r.expired),
        numCell(dead.get(r.queue + '/' + r.kind) || 0, hash('/jobs', { ...f, status: 'dead' })),
        numCell(r.done_1h), numCell(r.dead_1h),
        el('td', { class: 'num' }, r.oldest_ready_s === null ? '–' : age(r.oldest_ready_s)),
        el('td', { class: 'num' }, ms(r.p50_ms)), el('td', { class: 'num' }, ms(r.p95_ms)),
        el('td', { class: 'num' }, ms(r.p99_ms)),
        el('td', {}, st),
        canAct() ? el('td', {}, pauseButton('kind', r.kind, kp, refresh)) : null));
    }
    if (!rows.length) body.append(el('tr', {}, el('td', { colspan: 15, class: 'muted' }, 'No jobs yet.')));
    return el('div', { class: 'scroll' }, el('table', { id: 'overview-table' }, el('thead', {}, head), body));
  }

  function chartCard(title, id) {
    return el('div', { class: 'card', id },
      el('div', { class: 'row between' }, el('h2', {}, title),
        el('div', { class: 'legend' }, el('span', {}, el('span', { class: 'swatch done' }), 'done'),
          el('span', {}, el('span', { class: 'swatch failed' }), 'failed (retry, dead, lost)'),
          el('span', { class: 'total' }))),
      el('div', { class: 'plot' }, el('p', { class: 'muted' }, 'Loading…')));
  }

  async function drawChart(card, range) {
    const d = await api('throughput?range=' + range);
    const done = d.buckets.reduce((a, b) => a + b.done, 0), failed = d.buckets.reduce((a, b) => a + b.failed, 0);
    card.querySelector('.total').textContent = `${num(done)} done, ${num(failed)} failed`;
    const plot = clear(card.querySelector('.plot'));
    plot.append(charts.bars(d.buckets, { bucketMs: d.bucket_s * 1000, labelEvery: range === 'day' ? 12 : 10 }));
  }

  function overview(main) {
    const status = el('div', { class: 'stats', id: 'status' });
    const banners = el('div');
    const hour = chartCard('Attempts per minute, last hour', 'chart-hour');
    const day = chartCard('Attempts per 15 minutes, last 24 hours', 'chart-day');
    const table = el('div', { class: 'card' }, el('h2', {}, 'Queues and kinds'), el('div', { class: 'tbl' }));
    main.append(el('h1', {}, 'Overview'), status, banners, el('div', { class: 'cards spaced' }, hour, day), table);
    const load = async () => {
      const d = await api('overview');
      const stat = (k, v, cls) => el('div', { class: 'stat ' + (cls || '') }, el('div', { class: 'v' }, v),
        el('div', { class: 'k' }, k));
      const le = d.last_error;
      clear(status).append(stat('live hosts', num(d.hosts_alive)), stat('threads', num(d.threads)),
        stat('done / s (10 s)', d.done_per_s.toFixed(1)), stat('failed / s (10 s)', d.failed_per_s.toFixed(1)),
        el('div', { class: 'stat wide', id: 'last-error' },
          el('div', { class: 'k' }, 'last error (last hour)'),
          le ? el('div', { class: 'err' }, jobLink(le.job), ' at ', le.at, ': ', le.error)
            : el('div', { class: 'muted' }, 'none')),
        el('div', { class: 'stat' }, el('div', { class: 'k' }, 'updated'),
          el('div', {}, new Date().toLocaleTimeString()), el('div', { class: 'k' }, `server ${d.serverMs} ms`)));
      clear(banners);
      for (const p of d.paused) {
        banners.append(el('div', { class: 'banner paused' }, badge('paused', 'paused'),
          `${p.scope} ${p.name}: no host claims it; jobs running finish. Since ${fmtTime(p.paused_at)} by ${
            p.paused_by}.`, pauseButton(p.scope, p.name, true, load)));
      }
      for (const u of d.unserved) {
        banners.append(el('div', { class: 'banner warn' }, badge('no live host', 'bad'),
          `kind ${u.kind} on queue ${u.queue}: ${num(u.ready)} ready, ${num(u.scheduled)} scheduled, ${
            num(u.blocked)} blocked, and no live host serves it.`));
      }
      state.names.queues = [...new Set(d.queues.map(q => q.queue))];
      state.names.kinds = [...new Set(d.queues.map(q => q.kind))];
      clear(table.querySelector('.tbl')).append(overviewTable(d, load));
    };
    const stops = [every(5000, load), every(5000, () => drawChart(hour, 'hour')),
      every(60000, () => drawChart(day, 'day'))];
    return () => stops.forEach(s => s());
  }

  /* ---- jobs ---------------------------------------------------------------------------------------- */

  const STATUSES = ['blocked', 'pending', 'running', 'done', 'dead', 'cancelled'];

  function localInput(iso) {
    const ms = parseTime(iso);
    if (ms === null) return '';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}T${pad2(d.getHours())}:${
      pad2(d.getMinutes())}`;
  }

  function filterForm(p) {
    const input = (name, label, extra) => el('label', { class: 'field' }, label,
      el('input', { name, value: p.get(name) || '', ...extra }));
    const status = el('select', { name: 'status' }, el('option', { value: '' }, 'any'),
      STATUSES.map(s => el('option', { value: s, selected: p.get('status') === s }, s)));
    const lists = el('span', {},
      el('datalist', { id: 'queue-names' }, state.names.queues.map(q => el('option', { value: q }))),
      el('datalist', { id: 'kind-names' }, state.names.kinds.map(k => el('option', { value: k }))));
    const form = el('form', { class: 'filters card', id: 'filters' },
      input('queue', 'Queue', { list: 'queue-names' }), input('kind', 'Kind', { list: 'kind-names' }),
      el('label', { class: 'field' }, 'Status', status),
      el('label', { class: 'field' }, 'Created from',
        el('input', { name: 'from', type: 'datetime-local', value: localInput(p.get('from')) })),
      el('label', { class: 'field' }, 'Created before',
        el('input', { name: 'to', type: 'datetime-local', value: localInput(p.get('to')) })),
      input('unique_key', 'Unique key'), input('ordering_key', 'Ordering key'),
      input('error', 'Text in last error'),
      el('div', { class: 'row' }, el('button', { class: 'primary', type: 'submit' }, 'Search'),
        el('a', { href: '#/jobs' }, 'Clear')), lists);
    form.addEventListener('submit', ev => {
      ev.preventDefault();
      const q = {};
      for (const [k, v] of new FormData(form).entries()) {
        if (!v) continue;
        q[k] = k === 'from' || k === 'to' ? new Date(v).toISOString() : v;
      }
      location.hash = hash('/jobs', q);
    });
    return form;
  }

  function jobsTable(jobs, selected, onSelect) {
    const head = el('tr', {}, canAct() ? el('th', {}) : null,
      ['ID', 'Queue', 'Kind', 'Status', 'Attempts', 'Priority', 'Created', 'Run at / finished', 'Last error']
        .map(h => el('th', {}, h)));
    const body = el('tbody');
    for (const j of jobs) {
      const box = canAct() ? el('input', { type: 'checkbox', 'data-id': j.id, 'data-status': j.status }) : null;
      if (box) {
        box.checked = selected.has(j.id);
        box.addEventListener('change', () => { box.checked ? selected.set(j.id, j.status) : selected.delete(j.id);
          onSelect(); });
      }
      body.append(el('tr', { 'data-id': j.id }, box ? el('td', {}, box) : null,
        el('td', {}, jobLink(j.id)), el('td', {}, j.queue), el('td', {}, j.kind),
        el('td', {}, badge(j.status)), el('td', { class: 'num' }, `${j.attempts} / ${j.max_attempts}`),
        el('td', { class: 'num' }, j.priority),
        el('td', { title: fmtTime(j.created_at) }, ago(j.created_at)),
        el('td', { title: fmtTime(j.finished_at || j.run_at) },
          j.finished_at ? 'finished ' + ago(j.finished_at) : 'run ' + ago(j.run_at)),
        el('td', { class: 'err clip', title: j.last_error || '' }, j.last_error || '')));
    }
    if (!jobs.length) body.append(el('tr', {}, el('td', { colspan: 10, class: 'muted' }, 'No job matches.')));
    return el('div', { class: 'scroll' }, el('table', { id: 'jobs-table' }, el('thead', {}, head), body));
  }

  function jobs(main, p) {
    const selected = new Map();
    const bar = el('div', { class: 'row', id: 'bulk' });
    const list = el('div', { class: 'card' }, el('p', { class: 'muted' }, 'Loading…'));
    main.append(el('h1', {}, 'Jobs'), filterForm(p), list);
    const params = Object.fromEntries(p.entries());
    const updateBar = () => {
      clear(bar);
      if (!canAct()) return;
      const ids = [...selected.keys()];
      const dead = ids.filter(i => ['dead', 'cancelled'].includes(selected.get(i)));
      const live = ids.filter(i => ['blocked', 'pending', 'running'].includes(selected.get(i)));
      bar.append(el('span', { class: 'muted' }, `${ids.length} selected`));
      if (dead.length) bar.append(confirmButton(`Retry ${dead.length}`, `Retry ${dead.length} job(s)?`,
        () => retry(dead, load)));
      if (live.length) bar.append(confirmButton(`Cancel ${live.length}`, `Cancel ${live.length} job(s)?`,
        () => cancel(live, load), 'danger'));
    };
    const load = async () => {
      const d = await api(query('jobs', params));
      selected.clear();
      const older = d.next_before ? el('a', { href: hash('/jobs', { ...params, before: d.next_before }),
        id: 'older' }, 'Older →') : null;
      clear(list).append(el('div', { class: 'row between' }, bar,
        el('span', { class: 'muted small', id: 'page-timing' }, `${d.jobs.length} shown · server ${d.serverMs} ms`)),
      jobsTable(d.jobs, selected, updateBar),
      el('div', { class: 'pager' }, params.before ? el('a', { href: hash('/jobs', { ...params, before: null }) },
        '← Newest') : null, older));
      updateBar();
    };
    load().catch(e => { clear(list).append(el('p', { class: 'notice bad' }, e.message)); });
    return null;
  }

  /* ---- one job --------------------------------------------------------------------------------------- */

  function facts(pairs) {
    return el('dl', { class: 'facts' }, pairs.filter(p => p).map(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  /* Refreshed every 2 s while the job is unfinished (so a retried job is
   * seen running and done), not once it has finished. */
  function job(main, id) {
    const box = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
    main.append(box);
    let timer = null, stopped = false, active = true;
    const refresh = async () => {
      clearTimeout(timer);
      if (!busy()) {
        try { await load(); } catch (e) { notice(e.message, true); }
      }
      if (!stopped && active) timer = setTimeout(refresh, 2000);
    };
    const load = async () => {
      const d = await api('jobs/' + encodeURIComponent(id));
      const j = d.job, now = parseTime(d.now);
      const acts = el('span', { class: 'row' });
      if (canAct() && ['dead', 'cancelled'].includes(j.status)) {
        acts.append(el('button', { class: 'primary', type: 'button', id: 'retry-job',
          onclick: () => retry([j.id], refresh) }, 'Retry'));
      }
      if (canAct() && ['blocked', 'pending', 'running'].includes(j.status)) {
        acts.append(confirmButton('Cancel', 'Cancel this job?', () => cancel([j.id], refresh), 'danger'));
      }
      const ord = d.ordering;
      const parents = d.parents.length ? el('ul', {}, d.parents.map(pp => el('li', {}, jobLink(pp.id), ' ',
        pp.kind === null ? el('span', { class: 'muted' }, '(deleted by retention)') : [pp.kind, ' ',
          badge(pp.status)]))) : null;
      const kids = d.waiting_children.length ? el('ul', {}, d.waiting_children.map(k => el('li', {}, jobLink(k.id),
        ' ', k.kind, ' ', badge(k.status))), d.more_waiting_children ? el('li', { class: 'muted' }, 'and more')
        : null) : null;
      const attempts = d.executions.map(e => ({ attempt: e.attempt, worker: e.worker, status: e.status,
        start: parseTime(e.started_at), end: parseTime(e.finished_at) }));
      const exRows = d.executions.map(e => el('tr', { 'data-attempt': e.attempt },
        el('td', { class: 'num' }, e.attempt), el('td', {}, e.worker), el('td', {}, badge(e.status)),
        el('td', {}, fmtTime(e.started_at)), el('td', {}, fmtTime(e.finished_at)),
        el('td', { class: 'num' }, e.ms === null ? 'running' : charts.duration(e.ms)),
        el('td', { class: 'err' }, e.error || '')));
      clear(box).append(
        el('h1', {}, `Job #${j.id}`, el('span', { class: 'muted' }, j.kind), badge(j.status), el('span',
          { class: 'grow' }), acts),
        el('div', { class: 'cards' },
          el('div', { class: 'card' }, el('h2', {}, 'Job'), facts([
            ['queue', el('a', { href: hash('/jobs', { queue: j.queue }) }, j.queue)],
            ['kind', el('a', { href: hash('/jobs', { kind: j.kind }) }, j.kind)],
            ['status', badge(j.status)], ['attempts', `${j.attempts} of ${j.max_attempts}`],
            ['priority', j.priority], ['created', `${fmtTime(j.created_at)} (${ago(j.created_at)})`],
            ['run at', fmtTime(j.run_at)], ['finished', j.finished_at ? fmtTime(j.finished_at) : '–'],
            j.lease_expires_at ? ['lease until', fmtTime(j.lease_expires_at)] : null,
            ['locked by', j.locked_by || '–'],
            ['unique key', j.unique_key === null ? '–' : el('span', { class: 'mono', id: 'unique-key' },
              j.unique_key)],
            j.unique_until ? ['unique until', fmtTime(j.unique_until)] : null,
          ])),
          el('div', { class: 'card' }, el('h2', {}, 'Order and dependencies'), facts([
            ['ordering key', j.ordering_key === null ? '–' : el('span', { class: 'mono' }, j.ordering_key)],
            ord ? ['key held by', ord.holder === null ? 'nobody' : jobLink(ord.holder)] : null,
            ord ? ['unfinished with key', `${ord.unfinished} (${ord.ahead} ahead of this one)`] : null,
            ['depends on', parents || '–'], ['waiting on it', kids || '–'],
          ]))),
        j.last_error ? el('div', { class: 'card' }, el('h2', {}, 'Last error'),
          el('pre', { class: 'error', id: 'last-error-text' }, j.last_error)) : null,
        el('div', { class: 'card', id: 'timeline' }, el('h2', {}, `Attempts (${d.executions.length})`),
          charts.timeline(parseTime(j.created_at), attempts, now, Math.max(480, box.clientWidth - 34)),
          el('div', { class: 'scroll' }, el('table', { id: 'executions' }, el('thead', {}, el('tr', {},
            ['#', 'Worker', 'Outcome', 'Started', 'Finished', 'Duration', 'Error'].map(h => el('th', {}, h)))),
          el('tbody', {}, exRows)))),
        el('div', { class: 'card' }, el('h2', {}, `Payload (${num(j.payload_bytes)} bytes)`),
          el('pre', { class: 'payload', id: 'payload' }, j.payload_pretty)));
      active = ['blocked', 'pending', 'running'].includes(j.status);
    };
    refresh();
    return () => { stopped = true; clearTimeout(timer); };
  }

  /* ---- dead jobs -------------------------------------------------------------------------------------- */

  function deadGroupJobs(g, refresh) {
    const selected = new Set();
    const wrap = el('div', { class: 'group-jobs' });
    const load = async before => {
      const d = await api(query('dead/jobs', { kind: g.kind, group: g.error_group, before, limit: 50 }));
      const rows = d.jobs.map(j => {
        const box = canAct() ? el('input', { type: 'checkbox', 'data-id': j.id }) : null;
        if (box) box.addEventListener('change', () => (box.checked ? selected.add(j.id) : selected.delete(j.id)));
        return el('tr', { 'data-id': j.id }, box ? el('td', {}, box) : null, el('td', {}, jobLink(j.id)),
          el('td', {}, j.queue), el('td', { class: 'num' }, `${j.attempts} / ${j.max_attempts}`),
          el('td', { title: fmtTime(j.finished_at) }, ago(j.finished_at)),
          el('td', { class: 'err' }, j.last_error || ''),
          canAct() ? el('td', {}, el('button', { class: 'small', type: 'button', 'data-retry': j.id,
            onclick: () => retry([j.id], refresh) }, 'Retry')) : null);
      });
      const tbl = el('table', {}, before ? null : el('thead', {}, el('tr', {}, canAct() ? el('th') : null,
        ['Job', 'Queue', 'Attempts', 'Died', 'Error', ''].map(h => el('th', {}, h)))), el('tbody', {}, rows));
      const more = d.next_before ? el('button', { class: 'small', type: 'button',
        onclick: () => { more.remove(); load(d.next_before); } }, 'More') : null;
      wrap.append(tbl, more || '');
    };
    const bar = canAct() ? el('div', { class: 'row' }, confirmButton('Retry selected', 'Retry the selected jobs?',
      () => retry([...selected], refresh))) : null;
    load().catch(e => notice(e.message, true));
    return el('div', {}, bar, wrap);
  }

  function dead(main) {
    const box = el('div', { class: 'card' }, el('p', { class: 'muted' }, 'Loading…'));
    const summary = el('p', { class: 'muted', id: 'dead-summary' });
    main.append(el('h1', {}, 'Dead jobs'), summary, box);
    const open = new Set();
    const load = async () => {
      const d = await api('dead');
      summary.textContent = `${num(d.dead)} dead job(s) in ${d.groups.length} group(s) of kind and error ` +
        '(digits in messages are folded, so "timeout after 30012 ms" and "… 30200 ms" group together).';
      const body = el('tbody');
      for (const g of d.groups) {
        const key = g.kind + '\u0000' + g.error_group;
        const detail = el('tr', { class: 'expand', hidden: !open.has(key) },
          el('td', { colspan: 6 }, open.has(key) ? deadGroupJobs(g, load) : null));
        const show = el('button', { class: 'small', type: 'button', onclick: () => {
          if (open.has(key)) { open.delete(key); detail.hidden = true; return; }
          open.add(key);
          clear(detail.firstChild).append(deadGroupJobs(g, load));
          detail.hidden = false;
        } }, 'Jobs');
        body.append(el('tr', { class: 'dead-group', 'data-kind': g.kind },
          el('td', {}, el('a', { href: hash('/jobs', { kind: g.kind, status: 'dead' }) }, g.kind)),
          el('td', { class: 'err', title: g.example || '' }, g.error_group || '(no message)'),
          el('td', { class: 'num' }, num(g.jobs)),
          el('td', { title: fmtTime(g.first_died) }, ago(g.first_died)),
          el('td', { title: fmtTime(g.last_died) }, ago(g.last_died)),
          el('td', {}, el('div', { class: 'row' }, show, canAct() ? confirmButton(`Retry all ${g.jobs}`,
            `Retry ${g.jobs} job(s)?`, () => act('retry', { kind: g.kind, group: g.error_group },
              r => `${r.retried} of ${r.asked} job(s) back to pending`).then(load), 'small') : null))), detail);
      }
      if (!d.groups.length) body.append(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'No dead jobs.')));
      clear(box).append(el('div', { class: 'scroll' }, el('table', { id: 'dead-groups' }, el('thead', {},
        el('tr', {}, ['Kind', 'Error', 'Jobs', 'First died', 'Last died', ''].map(h => el('th', {}, h)))), body)));
    };
    return every(10000, load);
  }

  /* ---- hosts -------------------------------------------------------------------------------------------- */

  function table(id, heads, rows, empty) {
    return el('div', { class: 'scroll' }, el('table', { id }, el('thead', {}, el('tr', {}, heads.map(h =>
      el('th', { class: h.endsWith(' ') ? 'num' : '' }, h.trim())))), el('tbody', {}, rows.length ? rows
      : el('tr', {}, el('td', { colspan: heads.length, class: 'muted' }, empty)))));
  }

  function pauseForm(d, refresh) {
    if (!canAct()) return null;
    const scope = el('select', { name: 'scope' }, el('option', { value: 'queue' }, 'queue'),
      el('option', { value: 'kind' }, 'kind'));
    const name = el('input', { name: 'name', list: 'pause-names', placeholder: 'name', required: true });
    const names = el('datalist', { id: 'pause-names' });
    const fill = () => clear(names).append((scope.value === 'queue' ? d.queues : d.kinds)
      .map(n => el('option', { value: n })));
    scope.addEventListener('change', fill);
    fill();
    const form = el('form', { class: 'row', id: 'pause-form' }, el('span', {}, 'Pause'), scope, name, names,
      el('button', { type: 'submit' }, 'Pause'));
    form.addEventListener('submit', ev => {
      ev.preventDefault();
      act('pause', { scope: scope.value, name: name.value }, r => `${scope.value} ${name.value} ${r.changed
        ? 'paused' : 'was already paused'}`).then(refresh);
    });
    return form;
  }

  function hosts(main) {
    const box = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
    main.append(el('h1', {}, 'Hosts'), box);
    const load = async () => {
      const d = await api('hosts');
      const hostRows = d.hosts.map(h => el('tr', { 'data-host': h.id },
        el('td', { class: 'mono' }, h.id), el('td', {}, h.hostname), el('td', {}, h.version),
        el('td', {}, h.alive ? badge('alive', 'ok') : badge('not alive', 'bad')),
        el('td', { class: 'num' }, age(h.heartbeat_age_s)), el('td', { class: 'num' }, h.threads),
        el('td', { class: 'num' }, h.running), el('td', {}, fmtTime(h.started_at)),
        el('td', {}, (h.queues || []).join(', ')), el('td', {}, (h.kinds || []).join(', '))));
      const unserved = d.unserved.map(u => el('div', { class: 'banner warn' }, badge('no live host', 'bad'),
        `kind ${u.kind} on queue ${u.queue} has ${num(u.ready + u.scheduled + u.blocked + u.running)} job(s) ` +
        `(${num(u.ready)} ready) and no live host serves it.`));
      const pausedRows = d.paused.map(p => el('tr', {}, el('td', {}, p.scope), el('td', {}, p.name),
        el('td', {}, fmtTime(p.paused_at)), el('td', {}, p.paused_by),
        el('td', {}, pauseButton(p.scope, p.name, true, load))));
      const cronRows = d.cron.map(c => el('tr', {}, el('td', {}, c.name), el('td', { class: 'mono' }, c.schedule),
        el('td', {}, c.timezone), el('td', {}, fmtTime(c.last_tick)),
        el('td', {}, c.next_tick ? `${fmtTime(c.next_tick)} (${age((Date.now() - parseTime(c.next_tick)) / 1000)})`
          : '–')));
      const limitRows = d.limits.map(l => {
        const meter = l.max_running ? el('span', { class: 'meter' + (l.running >= l.max_running ? ' full' : '') },
          el('span')) : null;
        if (meter) meter.firstChild.style.width = Math.min(100, 100 * l.running / l.max_running) + '%';
        return el('tr', {}, el('td', {}, l.kind), el('td', { class: 'num' }, l.max_running === null ? '–'
          : l.max_running), el('td', { class: 'num' }, l.running, meter),
        el('td', { class: 'num' }, l.rate === null ? '–' : `${l.rate} / ${l.rate_unit}`),
        el('td', { class: 'num' }, l.claimed_this_window));
      });
      clear(box).append(...unserved,
        el('div', { class: 'card' }, el('h2', {}, 'Hosts'), table('hosts-table', ['Host', 'Hostname', 'Version',
          'State', 'Heartbeat age ', 'Threads ', 'Running ', 'Started', 'Queues', 'Kinds'], hostRows,
        'No host has registered.')),
        el('div', { class: 'card' }, el('div', { class: 'row between' }, el('h2', {}, 'Paused'), pauseForm(d, load)),
          table('paused-table', ['Scope', 'Name', 'Since', 'By', ''], pausedRows, 'Nothing is paused.')),
        el('div', { class: 'cards' },
          el('div', { class: 'card' }, el('h2', {}, 'Cron schedules'), table('cron-table', ['Name', 'Schedule',
            'Time zone', 'Last tick', 'Next tick'], cronRows, 'No cron schedule registered.')),
          el('div', { class: 'card' }, el('h2', {}, 'Kind limits'), table('limits-table', ['Kind', 'Max running ',
            'Running ', 'Rate ', 'Claimed this window '], limitRows, 'No kind has limits.'))));
    };
    return every(5000, load);
  }

  /* ---- routing ------------------------------------------------------------------------------------------- */

  function route() {
    if (state.stop) { state.stop(); state.stop = null; }
    const h = location.hash.replace(/^#/, '') || '/';
    const [path, query] = h.split('?');
    const p = new URLSearchParams(query || '');
    const main = clear($('main'));
    let page = 'overview';
    const m = /^\/job\/(\d+)$/.exec(path);
    if (m) { page = 'jobs'; state.stop = job(main, m[1]); }
    else if (path === '/jobs') { page = 'jobs'; state.stop = jobs(main, p); }
    else if (path === '/dead') { page = 'dead'; state.stop = dead(main); }
    else if (path === '/hosts') { page = 'hosts'; state.stop = hosts(main); }
    else state.stop = overview(main);
    for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
    document.title = 'skipq · ' + page;
  }

  async function start() {
    try {
      state.session = await api('session');
    } catch (e) {
      clear($('main')).append(el('p', { class: 'notice bad' }, e.message));
      return;
    }
    const s = state.session;
    const parts = [el('span', {}, 'role ', el('b', {}, s.role)),
      s.actions ? null : el('span', { class: 'badge warn', title: s.why_no_actions, id: 'read-only' }, 'read-only'),
      el('span', {}, 'skipq ' + s.version)];
    clear($('session')).append(...parts.filter(Boolean));
    window.addEventListener('hashchange', route);
    route();
  }

  start();
})();
