// The tether dashboard: plain DOM, no framework, no build step.
//
// SECURITY: payloads, errors, kinds, queue names and tags are
// attacker-controlled. They reach the page only as text (el() appends
// strings as Text nodes); nothing here parses HTML. The server's
// Content-Security-Policy forbids inline script as a second wall.
'use strict';

const KEY = 'tether.key';
const TENANT = 'tether.tenant'; // the id of the tenant an admin key is looking at
// Live updates: the page follows the tenant's history (GET /v1/events, one
// stream per page) and re-reads the view it shows when an event concerns it.
// A timer re-reads the view too, slowly while the stream is open (what is
// not a history event: progress, settings, schedules, others' pauses) and
// every 5 s while it cannot be opened. `?refresh_ms=` (for tests and links)
// sets that timer in both cases, clamped to 1 s .. 1 h: a link with
// refresh_ms=1 would make whoever opens it refresh back to back, and timers
// past 2^31 ms fire at once.
const ASKED_MS = refreshInterval(new URLSearchParams(location.search).get('refresh_ms'));
const LIVE_REFRESH_MS = 30000; // the timer while the stream is open
const POLL_REFRESH_MS = 5000; // and while it is not
const LIVE_MIN_MS = 500; // at most one re-read per this, however many events come
const STREAM_IDLE_MS = 45000; // silent this long (a heartbeat comes every 15 s): reconnect
const STREAM_HIDDEN_MS = 60000; // a tab hidden this long gives its stream back (64 a tenant)
const STREAM_REFUSED_MS = 60000; // after a 429, try again this much later
const SPARK_MINUTES = 30; // the overview's sparklines: this many minutes,
const SPARK_FRESH_MS = 5000; // each re-read at most this often while jobs finish,
const SPARK_STALE_MS = 60000; // and at least this often (the window slides),
const SPARK_MAX = 100; // for this many queues at most (one read each)
const STATES = ['waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled'];
const WORKFLOW_STATES = ['running', 'succeeded', 'failed', 'cancelled'];
const PAGE_SIZES = ['10', '25', '50', '100'];
const BULK_MAX = 500; // ids per POST /v1/jobs/cancel or /replay
const $ = (selector) => document.querySelector(selector);
const enc = encodeURIComponent;

let key = sessionStorage.getItem(KEY);
// The tenant an admin key looks at, by id (null: the key's own): ids are
// what X-Tether-Tenant carries, since an old tenant may be named like an id.
let tenant = sessionStorage.getItem(TENANT);
let tenantName = null; // its name, for the header
let me = null; // GET /v1/whoami of the key (its own tenant), once per sign-in
const selected = new Set(); // job ids ticked in a list, kept across refreshes
let shown = null; // the hash whose view is on screen
let seq = 0; // the latest render; older ones drop their result
let inflight = 0;
let renders = 0;
let lastTyped = 0;
let lastList = '#/jobs'; // where "back" from a job goes
const opened = new Map(); // <details> open state by key, kept across refreshes
const drafts = new Map(); // settings forms being edited, kept across refreshes
let dirty = false; // an event came that the view on screen does not show yet
let related = new Set(); // ids of the jobs the view shows (a job's page: its neighbours')
const sparks = new Map(); // queue name → {minutes, at}: the overview's sparklines, read at `at`
const sparkDirty = new Set(); // queues whose jobs finished since their sparkline was read

// ---------------------------------------------------------------- helpers

/** The refresh interval a `refresh_ms` parameter asks for, kept between
 * 1 s and 1 h; null (the defaults) when it is absent or not a positive
 * number. */
function refreshInterval(asked) {
  const ms = Number(asked);
  if (!asked || !Number.isFinite(ms) || ms <= 0) return null;
  return Math.min(3600000, Math.max(1000, ms));
}

/** The interval of the timer now: the asked one, else 30 s live, 5 s not. */
const refreshMs = () => ASKED_MS ?? (stream.live ? LIVE_REFRESH_MS : POLL_REFRESH_MS);

/** Builds an element. Strings among the children become Text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'class') node.className = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const link = (hash, text, title) => el('a', { href: hash, title }, text);
const badge = (text) => el('span', { class: `badge ${STATES.includes(text) ? text : ''}` }, text);
const truncate = (s, n) => (s && s.length > n ? `${s.slice(0, n - 1)}…` : s || '');
const json = (v) => el('pre', { class: 'json' }, v === undefined ? 'null' : JSON.stringify(v, null, 2));

/** A table in a box of its own that scrolls sideways when the window is
 * narrower than the table (the page itself never does). Each cell carries
 * its column's name (data-label), which a table of class "stack" shows
 * beside it when a narrow window lays its rows out as cards. */
function table(headers, rows, attrs) {
  const names = headers.map((h) => (Array.isArray(h) ? h[0] : h));
  for (const row of rows) {
    [...row.children].forEach((td, i) => { if (names[i]) td.dataset.label = names[i]; });
  }
  return el('div', { class: 'scroll' }, el('table', attrs,
    // A header given as [text] heads a column of numbers.
    el('thead', {}, el('tr', {}, headers.map((h) => (Array.isArray(h) ? el('th', { class: 'num' }, h[0]) : el('th', {}, h))))),
    el('tbody', {}, rows)));
}

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** A job's row: a click anywhere on it opens the job, except on what the
 * row holds to click (its checkbox, links, buttons). */
function jobRow(j, cells) {
  const open = (e) => {
    if (e.target.closest('a, button, input, label')) return;
    location.hash = `#/jobs/${enc(j.id)}`;
  };
  const tick = el('input', { type: 'checkbox', class: 'pick', 'aria-label': `select job ${j.id}`, checked: selected.has(j.id) });
  tick.addEventListener('change', () => {
    if (tick.checked) selected.add(j.id); else selected.delete(j.id);
    syncBulk();
  });
  return el('tr', { 'data-id': j.id, class: 'clickable', onclick: open }, el('td', {}, tick), cells);
}

/** The bulk bar as the ticks are: "all shown" ticked when every row is,
 * and how many jobs a bulk action would touch (ticks on other pages count). */
function syncBulk() {
  const boxes = [...document.querySelectorAll('#content input.pick')];
  const all = $('#select-all');
  const count = $('#selected-count');
  if (!all || !count) return;
  all.checked = boxes.length > 0 && boxes.every((b) => b.checked);
  all.indeterminate = !all.checked && boxes.some((b) => b.checked);
  const elsewhere = selected.size - boxes.filter((b) => b.checked).length;
  count.textContent = selected.size
    ? `${selected.size} selected${elsewhere > 0 ? ` (${elsewhere} not shown here)` : ''}`
    : 'none selected';
  for (const b of document.querySelectorAll('#cancel-selected, #replay-selected, #clear-selection')) b.disabled = selected.size === 0;
}

/** Cancel or replay the ticked jobs with one bulk request, asking first
 * when it touches more than one. */
function bulkBar() {
  const act = (verb, path) => button(`${verb} selected`, async () => {
    const ids = [...selected];
    if (!ids.length) return 'Select jobs first.';
    if (ids.length > 1 && !window.confirm(`${verb} ${plural(ids.length, 'job')}?`)) return '';
    // The API takes at most BULK_MAX ids a request (ticks can span pages).
    const results = [];
    for (let i = 0; i < ids.length; i += BULK_MAX) {
      results.push(...(await api('POST', path, { ids: ids.slice(i, i + BULK_MAX) })).results);
    }
    const failed = results.filter((r) => !r.ok);
    for (const r of results) if (r.ok) selected.delete(r.id);
    const done = `${verb === 'Cancel' ? 'Cancelled' : 'Replayed'} ${plural(results.length - failed.length, 'job')}`;
    if (!failed.length) return `${done}.`;
    const why = failed.slice(0, 5).map((r) => `${r.id}: ${r.error.message}`);
    if (failed.length > 5) why.push(`and ${failed.length - 5} more (still ticked)`);
    return `${done}; ${failed.length} could not be: ${why.join('; ')}`;
  });
  const all = el('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'select every job shown' });
  all.addEventListener('change', () => {
    const on = all.checked;
    for (const box of document.querySelectorAll('#content input.pick')) {
      box.checked = on;
      box.dispatchEvent(new Event('change'));
    }
  });
  const cancel = act('Cancel', '/v1/jobs/cancel');
  cancel.id = 'cancel-selected';
  const replay = act('Replay', '/v1/jobs/replay');
  replay.id = 'replay-selected';
  const clear = el('button', { type: 'button', id: 'clear-selection', onclick: () => {
    selected.clear();
    for (const box of document.querySelectorAll('#content input.pick')) box.checked = false;
    syncBulk();
  } }, 'Clear selection');
  return el('div', { class: 'bulk' }, el('label', {}, all, ' all shown'),
    el('span', { class: 'muted', id: 'selected-count', 'aria-live': 'polite' }), cancel, replay, clear);
}

function dur(ms) {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function ago(iso) {
  const ms = Date.now() - Date.parse(iso);
  return ms >= 0 ? `${dur(ms)} ago` : `in ${dur(ms)}`;
}

/** A time as "2026-11-30 03:00:00Z (in 5h 2m)"; the exact instant on hover. */
function when(iso, relativeOnly) {
  if (!iso) return '—';
  const abs = iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  return el('time', { datetime: iso, title: iso }, relativeOnly ? ago(iso) : `${abs} (${ago(iso)})`);
}

/** A collapsible section that stays open or closed across refreshes
 * (render() opens it as last seen, once it is on screen). */
function section(id, title, body, open = true) {
  const d = el('details', { 'data-key': id, 'data-open': String(open) }, el('summary', {}, title), body);
  d.addEventListener('toggle', () => { if (d.isConnected) opened.set(id, d.open); });
  return d;
}

function restoreSections() {
  for (const d of document.querySelectorAll('#view details[data-key]')) {
    const id = d.dataset.key;
    d.open = opened.has(id) ? opened.get(id) : d.dataset.open === 'true';
  }
}

function errorText(e) {
  return e instanceof ApiError ? `${e.code}: ${e.message}` : `Error: ${e.message || e}`;
}

let flashTimer;
function flash(message, isError) {
  if (!message) return;
  const box = $('#flash');
  box.textContent = message;
  box.className = isError ? 'error' : 'ok';
  box.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => { box.hidden = true; }, 8000);
}

/** A button that runs `action` (which returns a message), then re-renders. */
function button(label, action, question) {
  const b = el('button', { type: 'button' }, label);
  b.addEventListener('click', async () => {
    if (question && !window.confirm(question)) return;
    b.disabled = true;
    try { flash(await action()); } catch (e) { flash(errorText(e), true); }
    await render();
  });
  return b;
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** One API request. An admin key looking at another tenant sends it in
 * X-Tether-Tenant (the server refuses that header, 403, for any other key);
 * `own` leaves it out: the request is the key's own tenant's. */
async function api(method, path, body, { own = false } = {}) {
  const headers = { Authorization: `Bearer ${key}` };
  if (tenant && !own) headers['X-Tether-Tenant'] = tenant;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: use the status */ }
  if (res.ok) return data;
  const err = (data && data.error) || { code: String(res.status), message: res.statusText || 'request failed' };
  if (res.status === 401) signOut(`The key was not accepted (${err.message}).`);
  throw new ApiError(res.status, err.code, err.message);
}

// ---------------------------------------------------------------- routing

function route() {
  const [path, query = ''] = (location.hash.replace(/^#/, '') || '/').split('?');
  let parts;
  try { parts = path.split('/').filter(Boolean).map(decodeURIComponent); } catch { parts = []; }
  const params = new URLSearchParams(query);
  if (parts[0] === 'jobs' && parts[1]) return { view: 'job', id: parts[1], params };
  if (parts[0] === 'queues' && parts[1]) return { view: 'queue', name: parts[1], params };
  if (parts[0] === 'workflows' && parts[1]) return { view: 'workflow', id: parts[1], params };
  const view = { jobs: 'jobs', workflows: 'workflows', dlq: 'dlq', schedules: 'schedules', workers: 'workers' }[parts[0]] || 'overview';
  return { view, params };
}

function go(view, params) {
  const qs = new URLSearchParams(params).toString();
  const target = `#/${view}${qs ? `?${qs}` : ''}`;
  if (location.hash === target) render(); else location.hash = target;
}

// ---------------------------------------------------------------- views

/** Reads the sparklines of `names` that are missing, older than a minute,
 * or behind a finished job (at most one read a queue per SPARK_FRESH_MS:
 * a queue held back is read once its time comes). A failed read leaves
 * the line as it was. */
let sparkTimer = null;
async function loadSparks(names) {
  const now = Date.now();
  const owner = streamOwner();
  let soonest = Infinity;
  const due = names.filter((name) => {
    const s = sparks.get(name);
    if (!s || now - s.at >= SPARK_STALE_MS) return true;
    if (!sparkDirty.has(name)) return false;
    const wait = s.at + SPARK_FRESH_MS - now;
    if (wait <= 0) return true;
    soonest = Math.min(soonest, wait);
    return false;
  });
  if (soonest < Infinity && !sparkTimer) {
    sparkTimer = setTimeout(() => {
      sparkTimer = null;
      if (route().view === 'overview') markDirty();
    }, soonest);
  }
  await Promise.all(due.map(async (name) => {
    sparkDirty.delete(name); // before the read: a job finishing meanwhile marks it again
    try {
      const t = await api('GET', `/v1/queues/${enc(name)}/throughput?minutes=${SPARK_MINUTES}`);
      if (streamOwner() === owner) sparks.set(name, { minutes: t.minutes, at: Date.now() });
    } catch { /* the counts still show; the line is read again next time */ }
  }));
}

/** A queue's jobs finished (succeeded or failed) per minute, the last
 * SPARK_MINUTES minutes, as a small line; its total beside it. */
function sparkline(name) {
  const s = sparks.get(name);
  if (!s) return el('span', { class: 'muted' }, '—');
  const counts = s.minutes.map((m) => m.succeeded + m.failed);
  const total = counts.reduce((sum, c) => sum + c, 0);
  const peak = Math.max(0, ...counts);
  const failed = s.minutes.reduce((sum, m) => sum + m.failed, 0);
  const w = 90;
  const h = 20;
  const x = (i) => (counts.length > 1 ? (i * w) / (counts.length - 1) : 0).toFixed(1);
  const y = (c) => (h - 1 - (c / Math.max(1, peak)) * (h - 3)).toFixed(1);
  const line = counts.map((c, i) => `${i ? 'L' : 'M'}${x(i)},${y(c)}`).join(' ');
  const title = `${total} finished in the last ${counts.length} minutes (${failed} failed), at most ${peak} a minute`;
  return [
    svg('svg', { class: 'spark', 'data-spark': name, 'data-counts': counts.join(','), width: w, height: h, viewBox: `0 0 ${w} ${h}`,
      role: 'img', 'aria-label': title },
    svg('title', {}, title),
    svg('path', { class: 'area', d: `${line} L${w},${h} L0,${h} Z` }),
    svg('path', { class: 'line', d: line })),
    el('span', { class: 'spark-total', title }, String(total)),
  ];
}

async function overview() {
  const { queues } = await api('GET', '/v1/queues');
  await loadSparks(queues.slice(0, SPARK_MAX).map((q) => q.name));
  const head = ['Queue', 'Status', [`Finished, ${SPARK_MINUTES} min`], ['Queued'], ['Ready'], ['Scheduled'], ['Waiting'], ['Running'],
    ['Succeeded'], ['Failed'], ['Cancelled'], ['Oldest ready'], ['Expired leases'], ''];
  const num = (name, value, content) => el('td', { class: 'num', 'data-count': name }, content ?? value);
  const rows = queues.map((q) => {
    const path = `/v1/queues/${enc(q.name)}`;
    const toggle = q.paused
      ? button('Resume', () => api('POST', `${path}/resume`).then(() => `Queue ${q.name} resumed.`))
      : button('Pause', () => api('POST', `${path}/pause`).then(() => `Queue ${q.name} paused.`));
    return el('tr', { 'data-queue': q.name },
      el('td', {}, link(`#/queues/${enc(q.name)}`, q.name, 'counts, limits and settings')),
      el('td', { 'data-count': 'paused' }, q.paused ? el('span', { class: 'badge paused' }, 'paused') : el('span', { class: 'badge active' }, 'active')),
      el('td', { class: 'num spark-cell', 'data-count': 'finished' }, sparkline(q.name)),
      num('queued', q.counts.queued),
      num('ready', q.ready),
      num('scheduled', q.scheduled),
      // Waiting for their dependencies: not claimable yet.
      num('waiting', q.counts.waiting, q.counts.waiting
        ? link(`#/jobs?${new URLSearchParams({ queue: q.name, state: 'waiting' })}`, q.counts.waiting, 'jobs waiting for their dependencies')
        : '0'),
      // A queue with a limit shows how close it is: running / max_running.
      q.max_running == null
        ? num('running', q.counts.running)
        : el('td', { class: q.counts.running >= q.max_running ? 'num warn' : 'num', 'data-count': 'running',
          title: `at most ${q.max_running} running (max_running)` }, `${q.counts.running} / ${q.max_running}`),
      num('succeeded', q.counts.succeeded),
      num('failed', q.counts.failed, q.counts.failed ? link(`#/dlq?queue=${enc(q.name)}`, q.counts.failed) : '0'),
      num('cancelled', q.counts.cancelled),
      num('oldest_ready', q.oldest_ready_age_ms, q.oldest_ready_age_ms ? dur(q.oldest_ready_age_ms) : '—'),
      el('td', { class: q.expired_leases ? 'num warn' : 'num', 'data-count': 'expired_leases' }, q.expired_leases),
      el('td', {}, toggle));
  });
  const content = queues.length
    ? table(head, rows, { id: 'queues' })
    : el('p', { class: 'muted' }, 'No queues yet: enqueue a job and its queue appears here.');
  return { toolbar: el('h1', {}, 'Queues'), content };
}

// ---------------------------------------------------------------- one queue

/** A length of time as its largest exact unit: 60000 → "1m", 1500 → "1.5s". */
function span(ms) {
  for (const [unit, size] of [['d', 86400000], ['h', 3600000], ['m', 60000]]) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms / 1000}s`;
}

/** The number typed in `input`: null when empty; throws on anything else
 * that is not a number (a number field reads such text as empty). */
function typed(input, what) {
  const text = input.value.trim();
  const n = Number(text);
  if (input.validity.badInput || (text && !Number.isFinite(n))) throw new Error(`${what}: not a number.`);
  return text ? n : null;
}
const typedMs = (input, what) => { const s = typed(input, what); return s === null ? null : Math.round(s * 1000); };
const needed = (value, what) => { if (value === null) throw new Error(`${what}: needs a value.`); return value; };

/** A labelled number input; `clear` adds a button that empties it (= none). */
function numberField(name, label, value, { unit, clear, hint, min, max, step = '1' } = {}) {
  const input = el('input', {
    type: 'number', name, id: `field-${name}`, value: value ?? '', min, max, step,
    placeholder: clear ? 'none' : undefined, inputmode: step === '1' ? 'numeric' : 'decimal',
  });
  const empty = () => {
    input.value = '';
    input.dispatchEvent(new Event('input', { bubbles: true }));
  };
  return el('div', { class: 'field' },
    el('label', { for: input.id }, label),
    el('span', { class: 'inputs' }, input, unit ? el('span', { class: 'unit' }, unit) : null,
      clear ? el('button', { type: 'button', class: 'clear', 'data-clear': name, title: `${label}: none`, onclick: empty }, 'Clear') : null),
    hint ? el('span', { class: 'hint muted' }, hint) : null);
}

/**
 * A form that edits some of a queue's settings with one PATCH. `change(form)`
 * returns the body: only the settings whose typed value differs from `q`'s
 * (it throws on what cannot be sent). A form being edited is kept across
 * refreshes together with the queue it started from, so a refresh neither
 * wipes the edit nor changes what it is compared with.
 */
function settingsForm(id, q, fields, change) {
  const draft = `${q.name}\n${id}`;
  if (drafts.has(draft)) return drafts.get(draft);
  const note = el('p', { class: 'form-error error', role: 'alert' });
  const save = el('button', { type: 'submit' }, 'Save');
  const form = el('form', { id, class: 'settings', novalidate: true, autocomplete: 'off' },
    fields, el('div', { class: 'buttons' }, save, el('button', { type: 'reset' }, 'Reset'), note));
  const edited = () => drafts.set(draft, form);
  form.addEventListener('input', edited);
  form.addEventListener('change', edited);
  form.addEventListener('reset', () => { drafts.delete(draft); note.textContent = ''; });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    note.textContent = '';
    note.className = 'form-error error';
    let body;
    try { body = change(form); } catch (err) { note.textContent = err.message; edited(); return; }
    const names = Object.keys(body);
    if (!names.length) {
      note.textContent = 'Nothing to save: no setting was changed.';
      note.className = 'form-error muted';
      edited();
      return;
    }
    save.disabled = true;
    try {
      await api('PATCH', `/v1/queues/${enc(q.name)}`, body);
    } catch (err) {
      // Nothing changed on the server; keep what was typed, to fix it.
      save.disabled = false;
      note.textContent = errorText(err);
      edited();
      return;
    }
    drafts.delete(draft);
    flash(`Queue ${q.name}: saved ${names.join(', ')}.`);
    await render();
  });
  return form;
}

/** The flow-control settings as they are, and how close the queue is to them. */
function limitsList(q) {
  const running = q.counts.running;
  const max = q.max_running ?? null;
  const perKey = q.key_max_running ?? null;
  const rate = q.rate_limit ?? null;
  const setting = (name, value) => el('span', { class: 'setting', 'data-setting': name }, value);
  const hint = (text) => el('span', { class: 'hint muted' }, text);
  let usage;
  if (max === null) {
    usage = [el('span', { 'data-usage': 'running' }, String(running)), hint('no limit')];
  } else {
    const full = running >= max;
    const high = Math.max(max - 0.5, 0.5);
    usage = [
      el('span', { 'data-usage': 'running', class: full ? 'warn' : undefined }, `${running} / ${max}`),
      el('meter', { id: 'running-meter', min: 0, max, value: Math.min(running, max), optimum: 0, low: Math.min(max * 0.75, high), high,
        title: `${running} of at most ${max} running` }),
      full ? el('span', { class: 'warn', id: 'at-limit' }, running > max ? 'over the limit' : 'at the limit') : null,
      full && q.ready ? hint(`${q.ready} ready job(s) wait for a slot`) : null,
    ];
  }
  const rows = [
    ['running', usage],
    ['max running', [setting('max_running', max ?? 'none'), hint('running jobs, across every worker and replica')]],
    ['max running per key', [setting('key_max_running', perKey ?? 'none'), hint('running jobs of one concurrency key')]],
    ['rate limit', [setting('rate_limit', rate ? `${rate.count} / ${span(rate.period_ms)}` : 'none'),
      hint(rate ? `at most ${rate.count} job(s) handed out in any ${span(rate.period_ms)}` : 'no limit on jobs handed out per period')]],
    ['fair', [setting('fair', q.fair ? 'yes' : 'no'), hint('claims take turns over concurrency keys within a priority')]],
  ];
  return el('dl', { class: 'fields limits', id: 'limits' },
    rows.map(([name, value]) => [el('dt', {}, name), el('dd', {}, value)]));
}

function flowForm(q) {
  const rate = q.rate_limit ?? null;
  const limit = { min: 1, max: 100000, clear: true };
  const fields = [
    numberField('max_running', 'max running', q.max_running, { ...limit, hint: '1–100 000; empty: no limit' }),
    numberField('key_max_running', 'max running per key', q.key_max_running, { ...limit, hint: '1–100 000; empty: no limit' }),
    el('div', { class: 'field' },
      el('label', { for: 'field-rate_count' }, 'rate limit'),
      el('span', { class: 'inputs' },
        el('input', { type: 'number', name: 'rate_count', id: 'field-rate_count', value: rate ? rate.count : '', min: 1, max: 100000,
          step: 1, placeholder: 'none', inputmode: 'numeric', 'aria-label': 'rate limit: jobs' }),
        el('span', { class: 'unit' }, 'jobs per'),
        el('input', { type: 'number', name: 'rate_period', id: 'field-rate_period', value: rate ? rate.period_ms / 1000 : '', min: 1, max: 86400,
          step: 'any', placeholder: 'none', inputmode: 'decimal', 'aria-label': 'rate limit: period in seconds' }),
        el('span', { class: 'unit' }, 's'),
        el('button', { type: 'button', class: 'clear', 'data-clear': 'rate_limit', title: 'rate limit: none',
          onclick: (e) => {
            const f = e.target.form.elements;
            f.rate_count.value = '';
            f.rate_period.value = '';
            f.rate_count.dispatchEvent(new Event('input', { bubbles: true }));
          } }, 'Clear')),
      el('span', { class: 'hint muted' }, '1–100 000 jobs per 1–86 400 s; both empty: no limit')),
    el('div', { class: 'field' },
      el('label', { for: 'field-fair' }, 'fair'),
      el('span', { class: 'inputs' }, el('input', { type: 'checkbox', name: 'fair', id: 'field-fair', checked: Boolean(q.fair) }),
        el('label', { for: 'field-fair', class: 'muted' }, 'take turns over concurrency keys'))),
  ];
  return settingsForm('flow-form', q, fields, (form) => {
    const f = form.elements;
    const body = {};
    for (const [name, what] of [['max_running', 'max running'], ['key_max_running', 'max running per key']]) {
      const value = typed(f[name], what);
      if (value !== (q[name] ?? null)) body[name] = value;
    }
    const count = typed(f.rate_count, 'rate limit jobs');
    const period = typedMs(f.rate_period, 'rate limit period');
    if ((count === null) !== (period === null)) {
      throw new Error('A rate limit needs both a number of jobs and a period; leave both empty for none.');
    }
    const next = count === null ? null : { count, period_ms: period };
    const same = next === null ? rate === null : rate !== null && rate.count === next.count && rate.period_ms === next.period_ms;
    if (!same) body.rate_limit = next;
    if (f.fair.checked !== Boolean(q.fair)) body.fair = f.fair.checked;
    return body;
  });
}

function retryForm(q) {
  const fields = [
    numberField('max_attempts', 'max attempts', q.max_attempts, { min: 1, max: 1000, hint: '1–1 000, copied by new jobs' }),
    numberField('backoff_base', 'backoff base', q.backoff.base_ms / 1000, { unit: 's', step: 'any', min: 0, hint: 'delay before the first retry' }),
    numberField('backoff_cap', 'backoff cap', q.backoff.cap_ms / 1000, { unit: 's', step: 'any', min: 0, hint: 'longest delay, at least the base' }),
    numberField('default_lease_ttl', 'default lease', q.default_lease_ttl_ms / 1000, { unit: 's', step: 'any', min: 1, max: 3600, hint: '1–3 600 s, for claims that set none' }),
  ];
  return settingsForm('retry-form', q, fields, (form) => {
    const f = form.elements;
    const body = {};
    const attempts = needed(typed(f.max_attempts, 'max attempts'), 'max attempts');
    if (attempts !== q.max_attempts) body.max_attempts = attempts;
    const base = needed(typedMs(f.backoff_base, 'backoff base'), 'backoff base');
    const cap = needed(typedMs(f.backoff_cap, 'backoff cap'), 'backoff cap');
    if (base !== q.backoff.base_ms || cap !== q.backoff.cap_ms) body.backoff = { base_ms: base, cap_ms: cap };
    const ttl = needed(typedMs(f.default_lease_ttl, 'default lease'), 'default lease');
    if (ttl !== q.default_lease_ttl_ms) body.default_lease_ttl_ms = ttl;
    return body;
  });
}

const OUTCOMES = ['succeeded', 'failed', 'retried', 'cancelled'];
// The SVG namespace: a name, never fetched. It is the one URL these files
// may hold (the static test in tests/dashboard.rs allows exactly this one).
const SVG = 'http://www.w3.org/2000/svg';

/** An SVG element; attributes only, text as Text nodes (as el()). */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
  return node;
}

/** The last hour of a queue, per minute: bars stacked by outcome. */
function throughputChart(t) {
  const width = 720;
  const height = 160;
  const left = 36;
  const bottom = 20;
  const n = t.minutes.length;
  const total = (m) => OUTCOMES.reduce((sum, o) => sum + m[o], 0);
  const max = Math.max(1, ...t.minutes.map(total));
  const step = (width - left) / n;
  const scale = (height - bottom - 8) / max;
  const bars = t.minutes.map((m, i) => {
    let y = height - bottom;
    const minute = m.at.slice(11, 16);
    const parts = OUTCOMES.filter((o) => m[o] > 0).map((o) => {
      const h = m[o] * scale;
      y -= h;
      return svg('rect', { class: o, x: (left + i * step + 1).toFixed(1), y: y.toFixed(1),
        width: Math.max(step - 2, 1).toFixed(1), height: h.toFixed(1) });
    });
    const attrs = { class: 'minute', 'data-minute': m.at };
    for (const o of OUTCOMES) attrs[`data-${o}`] = m[o];
    // The whole column answers to the pointer, an empty minute too.
    const hit = svg('rect', { class: 'hit', x: (left + i * step).toFixed(1), y: 8, width: step.toFixed(1), height: height - bottom - 8 });
    return svg('g', attrs, svg('title', {}, `${minute}Z: ${OUTCOMES.map((o) => `${m[o]} ${o}`).join(', ')}`), hit, parts);
  });
  const first = t.minutes[0]?.at.slice(11, 16) || '';
  const middle = t.minutes[Math.floor(n / 2)]?.at.slice(11, 16) || '';
  const last = t.minutes[n - 1]?.at.slice(11, 16) || '';
  return svg('svg', { class: 'chart', id: 'throughput-chart', viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `jobs finished per minute, last ${n} minutes` },
  svg('line', { class: 'axis', x1: left, y1: height - bottom, x2: width, y2: height - bottom }),
  svg('line', { class: 'axis', x1: left, y1: 8, x2: left, y2: height - bottom }),
  svg('text', { x: 2, y: 16, id: 'chart-max' }, String(max)),
  svg('text', { x: 2, y: height - bottom }, '0'),
  svg('text', { x: left, y: height - 4 }, `${first}Z`),
  svg('text', { x: (left + Math.floor(n / 2) * step).toFixed(1), y: height - 4, 'text-anchor': 'middle' }, `${middle}Z`),
  svg('text', { x: width - 40, y: height - 4 }, `${last}Z`),
  bars);
}

/** The throughput card: the chart, its legend and the percentiles. */
function throughputCard(t) {
  const pct = (p) => (p ? `p50 ${dur0(p.p50)} · p95 ${dur0(p.p95)} · p99 ${dur0(p.p99)}` : 'no job finished');
  const sums = Object.fromEntries(OUTCOMES.map((o) => [o, t.minutes.reduce((s, m) => s + m[o], 0)]));
  return el('section', { class: 'card', id: 'throughput' },
    el('h2', {}, `Last ${t.minutes.length} minutes`),
    el('div', { class: 'legend' }, OUTCOMES.map((o) => el('span', { 'data-total': o },
      el('span', { class: `swatch ${o}` }), `${o} ${sums[o]}`))),
    throughputChart(t),
    el('dl', { class: 'fields', id: 'percentiles' },
      el('dt', {}, 'wait (ready → claimed)'), el('dd', { 'data-percentiles': 'wait' }, pct(t.wait_ms)),
      el('dt', {}, 'run (claimed → finished)'), el('dd', { 'data-percentiles': 'run' }, pct(t.run_ms))));
}

/** Milliseconds as a short duration that keeps sub-second values. */
const dur0 = (ms) => (ms < 1000 ? `${ms} ms` : dur(ms));

async function queue(r) {
  const path = `/v1/queues/${enc(r.name)}`;
  const [{ queue: q }, t] = await Promise.all([api('GET', path), api('GET', `${path}/throughput?minutes=60`)]);
  const jobsOf = (params) => `#/jobs?${new URLSearchParams({ queue: q.name, ...params })}`;
  const toggle = q.paused
    ? button('Resume', () => api('POST', `${path}/resume`).then(() => `Queue ${q.name} resumed.`))
    : button('Pause', () => api('POST', `${path}/pause`).then(() => `Queue ${q.name} paused.`));
  // A queue that holds no job can be removed (a typo'd name, say).
  const c = q.counts;
  const empty = c.waiting + c.queued + c.running + c.succeeded + c.failed + c.cancelled === 0;
  const remove = button('Remove queue', async () => {
    await api('DELETE', path);
    location.hash = '#/';
    return `Queue ${q.name} removed.`;
  }, `Remove the empty queue ${q.name} (its pause flag and settings)?`);
  remove.id = 'remove-queue';
  const stat = (name, value, content) => el('div', { class: 'stat', 'data-count': name },
    el('span', { class: 'muted' }, name.replace('_', ' ')), el('strong', {}, content ?? String(value)));
  const stats = el('div', { class: 'stats', id: 'queue-counts' },
    stat('queued', q.counts.queued, link(jobsOf({ state: 'queued' }), q.counts.queued)),
    stat('ready', q.ready), stat('scheduled', q.scheduled),
    stat('waiting', q.counts.waiting, link(jobsOf({ state: 'waiting' }), q.counts.waiting)),
    stat('running', q.counts.running, link(jobsOf({ state: 'running' }), q.counts.running)),
    stat('succeeded', q.counts.succeeded),
    stat('failed', q.counts.failed, link(`#/dlq?queue=${enc(q.name)}`, q.counts.failed)),
    stat('cancelled', q.counts.cancelled),
    stat('oldest_ready', 0, q.oldest_ready_age_ms ? dur(q.oldest_ready_age_ms) : '—'),
    stat('expired_leases', q.expired_leases, el('span', { class: q.expired_leases ? 'warn' : undefined }, q.expired_leases)));
  const retries = el('dl', { class: 'fields', id: 'retry-settings' },
    el('dt', {}, 'max attempts'), el('dd', { 'data-setting': 'max_attempts' }, q.max_attempts),
    el('dt', {}, 'backoff'), el('dd', { 'data-setting': 'backoff' }, `${span(q.backoff.base_ms)}, growing to at most ${span(q.backoff.cap_ms)} (jittered)`),
    el('dt', {}, 'default lease'), el('dd', { 'data-setting': 'default_lease_ttl_ms' }, span(q.default_lease_ttl_ms)));
  const content = el('div', { class: 'queue', 'data-queue': q.name },
    el('div', { class: 'actions' },
      q.paused ? el('span', { class: 'badge paused', id: 'queue-status' }, 'paused') : el('span', { class: 'badge active', id: 'queue-status' }, 'active'),
      toggle, link(jobsOf({}), 'Jobs'), link(`#/dlq?queue=${enc(q.name)}`, 'Dead letters'),
      empty ? remove : null),
    stats,
    throughputCard(t),
    el('section', { class: 'card', id: 'flow-control' },
      el('h2', {}, 'Flow control'),
      limitsList(q),
      flowForm(q)),
    section(`retries:${q.name}`, 'Retries and leases', [
      el('p', { class: 'muted' }, 'New jobs copy these when they are enqueued; jobs already queued keep theirs.'),
      retries, retryForm(q)], false));
  const toolbar = [el('p', {}, link('#/', '← all queues')), el('h1', {}, 'Queue ', el('span', { class: 'mono' }, q.name))];
  return { toolbar, content };
}

const LABELS = { id_prefix: 'id or prefix', created_after: 'created from', created_before: 'created before', depends_on: 'waits for',
  workflow_id: 'workflow' };
const PLACEHOLDERS = { depends_on: 'a job id', workflow_id: 'a workflow id' };
// Filters typed as a local date and time; sent to the API as UTC instants.
const TIMES = ['created_after', 'created_before'];

/** The filters of a list, in the URL. A field is a name, or [name,
 * choices] for a menu other than the job states. */
function filterBar(view, params, fields, ...extra) {
  const form = el('form', { class: 'filters', role: 'search', id: 'filters' });
  for (const field of fields) {
    const [f, choices] = Array.isArray(field) ? field : [field, field === 'state' ? STATES : null];
    const value = params.get(f) || '';
    const input = choices
      ? el('select', { name: f, onchange: () => form.requestSubmit() },
        el('option', { value: '' }, 'any'), choices.map((s) => el('option', { value: s, selected: s === value }, s)))
      : TIMES.includes(f)
        ? el('input', { name: f, value, type: 'datetime-local', step: 1 })
        : el('input', { name: f, value, placeholder: PLACEHOLDERS[f] || `any ${LABELS[f] || f}`, spellcheck: 'false', autocomplete: 'off' });
    form.append(el('label', {}, el('span', {}, LABELS[f] || f), input));
  }
  const limit = params.get('limit') || '50';
  const sizes = PAGE_SIZES.includes(limit) ? PAGE_SIZES : [limit, ...PAGE_SIZES];
  form.append(
    el('label', {}, el('span', {}, 'per page'), el('select', { name: 'limit', onchange: () => form.requestSubmit() },
      sizes.map((n) => el('option', { value: n, selected: n === limit }, n)))),
    el('span', { class: 'filter-buttons' },
      el('button', { type: 'submit' }, 'Apply'),
      el('button', { type: 'button', onclick: () => go(view, {}) }, 'Clear')),
    ...extra);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const next = {};
    for (const [k, v] of new FormData(form)) if (v.trim() && !(k === 'limit' && v === '50')) next[k] = v.trim();
    go(view, next);
  });
  return form;
}

function pager(view, params, next) {
  const page = Number(params.get('page')) || 1;
  const base = Object.fromEntries(params);
  delete base.cursor;
  delete base.page;
  return el('div', { class: 'pager' },
    el('button', { type: 'button', disabled: !params.get('cursor'), onclick: () => go(view, base) }, 'First'),
    el('span', { class: 'muted', id: 'page' }, `Page ${page}`),
    el('button', { type: 'button', disabled: !next, onclick: () => go(view, { ...base, cursor: next, page: page + 1 }) }, 'Next'));
}

async function listJobs(params, filters, dlq) {
  const q = new URLSearchParams();
  for (const f of filters) {
    const v = params.get(f);
    if (!v) continue;
    // datetime-local is the browser's local time without a zone.
    q.set(f, TIMES.includes(f) ? new Date(v).toISOString() : v);
  }
  if (dlq) q.set('state', 'failed');
  q.set('limit', params.get('limit') || '50');
  if (params.get('cursor')) q.set('cursor', params.get('cursor'));
  return api('GET', `/v1/jobs?${q}`);
}

const jobLink = (j) => link(`#/jobs/${enc(j.id)}`, j.id);
const errorCell = (j) => el('td', { class: 'error-text', title: j.last_error || '' }, truncate(j.last_error, 80));

async function jobs(r) {
  lastList = location.hash;
  const filters = ['queue', 'state', 'kind', 'tag', 'id_prefix', 'created_after', 'created_before', 'depends_on', 'workflow_id'];
  // A whole id typed into the search opens that job.
  const wanted = (r.params.get('id_prefix') || '').trim();
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(wanted)) {
    location.hash = `#/jobs/${enc(wanted.toLowerCase())}`;
    return { content: [] };
  }
  const page = await listJobs(r.params, filters, false);
  const rows = page.jobs.map((j) => jobRow(j, [
    el('td', {}, j.queue), el('td', { class: 'mono' }, jobLink(j)), el('td', {}, j.kind),
    el('td', {}, badge(j.state), j.cancel_requested ? ' cancel requested' : ''),
    el('td', { class: 'num' }, `${j.attempt}/${j.max_attempts}`),
    el('td', { class: 'age' }, when(j.created_at, true)), errorCell(j)]));
  const content = [
    page.jobs.length ? bulkBar() : null,
    page.jobs.length
      ? table(['', 'Queue', 'Job', 'Kind', 'State', ['Attempt'], 'Age', 'Last error'], rows, { id: 'jobs' })
      : el('p', { class: 'muted' }, 'No jobs match.'),
    pager('jobs', r.params, page.next_cursor)];
  return { toolbar: [el('h1', {}, 'Jobs'), filterBar('jobs', r.params, filters)], content };
}

async function replayAll(params) {
  const kind = params.get('kind');
  const queue = params.get('queue');
  const body = { state: 'failed', ...(kind ? { kind } : {}) };
  const names = queue ? [queue]
    : (await api('GET', '/v1/queues')).queues.filter((q) => q.counts.failed > 0).map((q) => q.name);
  let total = 0;
  for (const name of names) {
    // Each round replays up to 1000 and says where the next one starts, so
    // every job is taken once even if replayed ones fail again meanwhile.
    // Replayed jobs get no expiry: an expired job would expire again at once.
    let cursor = null;
    do {
      const { replayed, next_cursor: next } = await api('POST', `/v1/queues/${enc(name)}/replay`,
        { ...body, ...(cursor ? { cursor } : {}) });
      total += replayed;
      cursor = next;
    } while (cursor);
  }
  return `Replayed ${total} failed job(s).`;
}

async function dlq(r) {
  lastList = location.hash;
  const filters = ['queue', 'kind'];
  const page = await listJobs(r.params, filters, true);
  const rows = page.jobs.map((j) => jobRow(j, [
    el('td', {}, j.queue), el('td', { class: 'mono' }, jobLink(j)), el('td', {}, j.kind),
    el('td', { class: 'num' }, `${j.attempt}/${j.max_attempts}`),
    el('td', { class: 'age' }, when(j.finished_at, true)), errorCell(j),
    el('td', {}, button('Replay', () => api('POST', `/v1/jobs/${enc(j.id)}/replay`).then(() => `Job ${j.id} replayed.`)))]));
  const what = `every failed job${r.params.get('kind') ? ` of kind ${r.params.get('kind')}` : ''} in ${r.params.get('queue') ? `queue ${r.params.get('queue')}` : 'every queue'}`;
  const all = button('Replay all matching', () => replayAll(r.params), `Replay ${what}?`);
  all.id = 'replay-all';
  const content = [
    page.jobs.length ? bulkBar() : null,
    page.jobs.length
      ? table(['', 'Queue', 'Job', 'Kind', ['Attempts'], 'Failed', 'Last error', ''], rows, { id: 'dlq' })
      : el('p', { class: 'muted', id: 'dlq-empty' }, 'No failed jobs match: the dead-letter queue is empty.'),
    pager('dlq', r.params, page.next_cursor)];
  return { toolbar: [el('h1', {}, 'Dead letters'), filterBar('dlq', r.params, filters, all)], content };
}

// A job's whole history: the API hands it out a page at a time.
async function jobHistory(path) {
  const events = [];
  let cursor = null;
  do {
    const q = new URLSearchParams({ limit: '1000' });
    if (cursor) q.set('cursor', cursor);
    const page = await api('GET', `${path}/events?${q}`);
    events.push(...page.events);
    cursor = page.next_cursor;
  } while (cursor);
  return events;
}

/** Most jobs that wait for a job its page lists (one page of the list). */
const DEPENDENTS_SHOWN = 100;

/** What a job waits for, in the order it named them, with their states:
 * `deps` is GET /v1/jobs/{id}/dependencies (one removed by retention is
 * missing from it, and shown as such). */
function dependenciesTable(j, deps) {
  const byId = new Map(deps.map((d) => [d.id, d]));
  const rows = j.depends_on.map((id) => {
    const d = byId.get(id);
    if (!d) {
      return el('tr', { 'data-id': id, 'data-state': 'removed' },
        el('td', { class: 'mono' }, link(`#/jobs/${enc(id)}`, id)), el('td', {}, '—'),
        el('td', { class: 'muted' }, 'removed by retention'), el('td', {}, '—'), el('td', {}, ''));
    }
    return el('tr', { 'data-id': d.id, 'data-state': d.state },
      el('td', { class: 'mono' }, link(`#/jobs/${enc(d.id)}`, d.id)), el('td', {}, d.kind),
      el('td', {}, badge(d.state)), el('td', {}, when(d.finished_at, true)),
      el('td', { class: 'error-text', title: d.last_error || '' }, truncate(d.last_error, 80)));
  });
  const done = deps.filter((d) => d.state === 'succeeded').length;
  const rule = j.dependency_failure === 'run'
    ? 'If one fails or is cancelled, this job still runs once they have all ended.'
    : 'If one fails or is cancelled, this job is cancelled too.';
  return [
    el('p', { class: 'muted', id: 'dependency-rule' }, `${done} of ${plural(j.depends_on.length, 'dependency', 'dependencies')} succeeded. ${rule}`),
    table(['Job', 'Kind', 'State', 'Finished', 'Last error'], rows, { id: 'dependencies' }),
  ];
}

/** The jobs that wait for this one (first page of ?depends_on=). */
function dependentsTable(j, page) {
  const rows = page.jobs.map((d) => el('tr', { 'data-id': d.id, 'data-state': d.state },
    el('td', { class: 'mono' }, link(`#/jobs/${enc(d.id)}`, d.id)), el('td', {}, d.queue), el('td', {}, d.kind),
    el('td', {}, badge(d.state))));
  return [
    table(['Job', 'Queue', 'Kind', 'State'], rows, { id: 'dependents' }),
    page.next_cursor
      ? el('p', {}, link(`#/jobs?${new URLSearchParams({ depends_on: j.id })}`, 'All the jobs that wait for this one'))
      : null,
  ];
}

async function job(r) {
  const path = `/v1/jobs/${enc(r.id)}`;
  const [{ job: j }, events] = await Promise.all([api('GET', path), jobHistory(path)]);
  // What it waits for (only a job that names some has any to read) and
  // what waits for it.
  const [deps, waiters] = await Promise.all([
    j.depends_on.length ? api('GET', `${path}/dependencies`).then((d) => d.jobs) : [],
    api('GET', `/v1/jobs?${new URLSearchParams({ depends_on: j.id, limit: String(DEPENDENTS_SHOWN) })}`),
  ]);
  const actions = [];
  if ((j.state === 'waiting' || j.state === 'queued' || j.state === 'running') && !j.cancel_requested) {
    actions.push(button('Cancel', () => api('POST', `${path}/cancel`).then(() => 'Cancel sent.'), 'Cancel this job?'));
  }
  if (j.state === 'failed' || j.state === 'cancelled') {
    actions.push(button('Replay', () => api('POST', `${path}/replay`).then(() => 'Job replayed.')));
  }
  if (j.state === 'succeeded') {
    // A new run of the same job, with a new attempt budget.
    actions.push(button('Run again', () => api('POST', `${path}/replay`).then(() => 'Job queued to run again.'),
      'Run this succeeded job again?'));
  }
  const fields = [
    ['id', j.id], ['queue', j.queue], ['kind', j.kind], ['state', badge(j.state)],
    ['attempt', `${j.attempt} of ${j.max_attempts}`], ['priority', j.priority],
    ['tags', j.tags.length ? j.tags.map((t) => el('span', { class: 'tag' }, t)) : '—'],
    ['headers', Object.keys(j.headers || {}).length
      ? el('span', { class: 'mono', id: 'job-headers' }, Object.entries(j.headers).map(([k, v]) => `${k}=${v}`).join(', '))
      : '—'],
    ['workflow', j.workflow_id ? el('span', { id: 'job-workflow', class: 'mono' }, link(`#/workflows/${enc(j.workflow_id)}`, j.workflow_id, 'the workflow and its graph')) : '—'],
    ['created', when(j.created_at)], ['run at', when(j.run_at)], ['started', when(j.started_at)],
    ['finished', when(j.finished_at)], ['updated', when(j.updated_at)], ['expires', when(j.expires_at)],
    ['timeout', j.timeout_ms ? dur(j.timeout_ms) : '—'], ['worker', j.worker_id || '—'],
    ['lease expires', when(j.lease_expires_at)], ['heartbeat', when(j.heartbeat_at)],
    ['cancel requested', j.cancel_requested ? 'yes' : 'no'],
    ['unique key', j.unique_key || '—'], ['idempotency key', j.idempotency_key || '—'],
  ];
  const history = table(['At', 'Event', ['Attempt'], 'Worker', 'Detail'], events.map((e) => el('tr', { 'data-event': e.event },
    el('td', {}, when(e.at)), el('td', {}, e.event), el('td', { class: 'num' }, e.attempt),
    el('td', {}, e.worker_id || ''), el('td', { class: 'detail' }, e.detail || ''))), { id: 'history' });
  const content = el('div', { class: 'job', 'data-state': j.state },
    el('div', { class: 'actions' }, badge(j.state), actions),
    j.last_error ? el('div', { class: 'card' }, el('h2', {}, 'Last error'), el('pre', { class: 'error-text', id: 'last-error' }, j.last_error)) : null,
    el('dl', { class: 'fields' }, fields.map(([name, value]) => [el('dt', {}, name), el('dd', {}, value)])),
    section(`payload:${j.id}`, 'Payload', json(j.payload)),
    section(`result:${j.id}`, 'Result', json(j.result)),
    section(`progress:${j.id}`, 'Progress', json(j.progress)),
    j.depends_on.length
      ? section(`dependencies:${j.id}`, `Waits for (${j.depends_on.length})`, dependenciesTable(j, deps))
      : null,
    waiters.jobs.length
      ? section(`dependents:${j.id}`, `Waited for by (${waiters.jobs.length}${waiters.next_cursor ? '+' : ''})`, dependentsTable(j, waiters))
      : null,
    section(`history:${j.id}`, `History (${events.length})`, history));
  const toolbar = [el('p', {}, link(lastList, '← back to the list')), el('h1', {}, `Job ${j.kind}`, el('small', { class: 'mono' }, ` ${j.id}`))];
  return { toolbar, content };
}

// ---------------------------------------------------------------- workflows

/** A workflow's jobs per state, each count linked to those jobs. */
function workflowCounts(w, attrs) {
  const chips = STATES.filter((st) => w.counts[st] > 0).map((st) => link(
    `#/jobs?${new URLSearchParams({ workflow_id: w.id, state: st })}`,
    el('span', { class: `badge ${st}`, 'data-count': st }, `${w.counts[st]} ${st}`), `its ${st} jobs`));
  return el('span', { class: 'counts', ...attrs }, chips.length ? chips : el('span', { class: 'muted' }, 'no jobs'));
}

const jobTotal = (w) => STATES.reduce((sum, st) => sum + (w.counts[st] || 0), 0);

async function workflowList(r) {
  lastList = location.hash;
  const filters = [['state', WORKFLOW_STATES], 'name'];
  const q = new URLSearchParams();
  for (const f of ['state', 'name', 'cursor']) if (r.params.get(f)) q.set(f, r.params.get(f));
  q.set('limit', r.params.get('limit') || '50');
  const page = await api('GET', `/v1/workflows?${q}`);
  const rows = page.workflows.map((w) => {
    const open = (e) => { if (!e.target.closest('a, button, input, label')) location.hash = `#/workflows/${enc(w.id)}`; };
    return el('tr', { 'data-id': w.id, 'data-state': w.state, class: 'clickable', onclick: open },
      el('td', {}, link(`#/workflows/${enc(w.id)}`, w.name, 'its graph'), el('br'), el('small', { class: 'mono muted' }, w.id)),
      el('td', {}, badge(w.state)),
      el('td', { class: 'num', 'data-count': 'jobs' }, jobTotal(w)),
      el('td', {}, workflowCounts(w)),
      el('td', { class: 'age' }, when(w.created_at, true)),
      el('td', { class: 'age' }, when(w.finished_at, true)));
  });
  // A state is derived when read: a filtered page looks at a bounded
  // number of workflows and may be short with more to come.
  const short = r.params.get('state') && page.next_cursor && page.workflows.length < Number(q.get('limit'));
  const content = [
    page.workflows.length
      ? table(['Workflow', 'State', ['Jobs'], 'Jobs by state', 'Created', 'Finished'], rows, { id: 'workflows' })
      : el('p', { class: 'muted', id: 'workflows-empty' }, page.next_cursor ? 'None on this page: Next looks further.' : 'No workflows match.'),
    short && page.workflows.length ? el('p', { class: 'muted' }, 'This page looked at a bounded number of workflows: Next looks further.') : null,
    pager('workflows', r.params, page.next_cursor)];
  return { toolbar: [el('h1', {}, 'Workflows'), filterBar('workflows', r.params, filters)], content };
}

/** Most jobs a workflow's graph is drawn with (past that, the list only). */
const GRAPH_MAX = 2000;
const NODE_W = 172;
const NODE_H = 44;
const GAP_X = 56;
const GAP_Y = 14;
const PAD = 12;

/**
 * Where each job of a graph goes: columns by depth (the longest chain of
 * dependencies inside the workflow above it), and in each column, rows
 * ordered by where the job's dependencies are (their mean height), so edges
 * stay short. Dependencies outside the workflow are kept aside.
 */
function layout(jobs) {
  const index = new Map(jobs.map((j, i) => [j.id, i]));
  const parents = jobs.map((j) => [...new Set(j.depends_on.filter((d) => index.has(d)).map((d) => index.get(d)))]);
  const outside = jobs.map((j) => j.depends_on.filter((d) => !index.has(d)));
  const waiters = jobs.map(() => []);
  parents.forEach((ps, i) => ps.forEach((p) => waiters[p].push(i)));
  const pending = parents.map((ps) => ps.length);
  const depth = jobs.map(() => 0);
  // Kahn's order (a cycle, which the server never makes, stays at depth 0).
  const order = [];
  pending.forEach((n, i) => { if (!n) order.push(i); });
  for (let k = 0; k < order.length; k += 1) {
    const p = order[k];
    for (const i of waiters[p]) {
      depth[i] = Math.max(depth[i], depth[p] + 1);
      pending[i] -= 1;
      if (pending[i] === 0) order.push(i);
    }
  }
  const columns = [];
  jobs.forEach((_, i) => { (columns[depth[i]] ||= []).push(i); });
  const tallest = Math.max(1, ...columns.map((c) => c.length));
  const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y;
  const x = [];
  const y = [];
  columns.forEach((col, d) => {
    if (d > 0) {
      const mean = (i) => parents[i].reduce((sum, p) => sum + y[p], 0) / Math.max(1, parents[i].length);
      col.sort((a, b) => mean(a) - mean(b) || a - b);
    }
    const top = PAD + ((tallest - col.length) * (NODE_H + GAP_Y)) / 2;
    col.forEach((i, row) => {
      x[i] = PAD + d * (NODE_W + GAP_X);
      y[i] = top + row * (NODE_H + GAP_Y);
    });
  });
  const width = PAD * 2 + columns.length * NODE_W + (columns.length - 1) * GAP_X;
  return { parents, outside, depth, x, y, width, height };
}

/** A workflow's graph as an SVG: one box per job (coloured by its state,
 * linked to its page) in columns by depth, a line from each dependency to
 * the job that waits for it. */
function workflowGraph(jobs) {
  const g = layout(jobs);
  const edges = [];
  jobs.forEach((j, i) => {
    for (const p of g.parents[i]) {
      const x1 = g.x[p] + NODE_W;
      const y1 = g.y[p] + NODE_H / 2;
      const x2 = g.x[i];
      const y2 = g.y[i] + NODE_H / 2;
      const bend = GAP_X / 2;
      edges.push(svg('path', { class: `edge ${jobs[p].state}`, 'data-from': jobs[p].id, 'data-to': j.id, 'marker-end': 'url(#arrow)',
        d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}` }));
    }
  });
  const nodes = jobs.map((j, i) => {
    const outside = g.outside[i].length ? `; also waits for ${plural(g.outside[i].length, 'job')} outside the workflow` : '';
    return svg('a', { href: `#/jobs/${enc(j.id)}`, class: 'node-link' },
      svg('g', { class: `node ${STATES.includes(j.state) ? j.state : ''}`, 'data-id': j.id, 'data-state': j.state, 'data-depth': g.depth[i],
        transform: `translate(${g.x[i]},${g.y[i]})` },
      svg('title', {}, `${j.kind}: ${j.state} (job ${j.id})${outside}`),
      svg('rect', { width: NODE_W, height: NODE_H, rx: 6 }),
      svg('text', { x: 10, y: 18, class: 'kind' }, truncate(j.kind, 22)),
      svg('text', { x: 10, y: 35, class: 'meta' }, `…${j.id.slice(-8)} · ${j.state}${g.outside[i].length ? ' ↑' : ''}`)));
  });
  return svg('svg', { class: 'dag', id: 'workflow-graph', width: g.width, height: g.height, viewBox: `0 0 ${g.width} ${g.height}`,
    role: 'img', 'aria-label': `the workflow's ${plural(jobs.length, 'job')} and what each waits for` },
  svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 8 8', refX: 8, refY: 4, markerWidth: 7, markerHeight: 7, orient: 'auto' },
    svg('path', { d: 'M0,0 L8,4 L0,8 z' }))),
  edges, nodes);
}

/** The graph's jobs as a list: each linked, with what it waits for. */
function workflowJobs(jobs) {
  const ids = new Set(jobs.map((j) => j.id));
  const rows = jobs.map((j) => el('tr', { 'data-id': j.id, 'data-state': j.state },
    el('td', { class: 'mono' }, link(`#/jobs/${enc(j.id)}`, j.id)), el('td', {}, j.kind), el('td', {}, badge(j.state)),
    el('td', { class: 'mono' }, j.depends_on.length
      ? j.depends_on.map((d, n) => [n ? ', ' : '', link(`#/jobs/${enc(d)}`, `…${d.slice(-8)}`, ids.has(d) ? d : `${d} (outside the workflow)`)])
      : '—')));
  return table(['Job', 'Kind', 'State', 'Waits for'], rows, { id: 'workflow-jobs' });
}

async function workflow(r) {
  lastList = location.hash; // "back" from one of its jobs comes here
  const path = `/v1/workflows/${enc(r.id)}`;
  const w = await api('GET', path);
  const actions = [];
  if (w.state === 'running') {
    const cancel = button('Cancel workflow', () => api('POST', `${path}/cancel`).then((d) =>
      `Cancelled ${plural(d.cancelled, 'job')} at once; asked ${plural(d.cancel_requested, 'running job')} to stop.`),
    'Cancel every unfinished job of this workflow?');
    cancel.id = 'workflow-cancel';
    actions.push(cancel);
  }
  if (w.counts.failed > 0) {
    const retry = button('Retry failed', () => api('POST', `${path}/retry`, { mode: 'failed' }).then((d) => `Put back ${plural(d.replayed, 'job')}.`));
    retry.id = 'workflow-retry';
    const downstream = button('Retry failed and downstream', () => api('POST', `${path}/retry`, { mode: 'failed_and_downstream' })
      .then((d) => `Put back ${plural(d.replayed, 'job')}.`),
    'Retry the failed jobs and every finished job downstream of them (cancelled by their failure, or run anyway)?');
    downstream.id = 'workflow-retry-downstream';
    actions.push(retry, downstream);
  }
  const fields = [
    ['name', w.name], ['id', w.id], ['state', badge(w.state)], ['idempotency key', w.idempotency_key || '—'],
    ['created', when(w.created_at)], ['finished', when(w.finished_at)],
    ['jobs', [el('span', { 'data-count': 'jobs' }, String(jobTotal(w))), ' ', link(`#/jobs?${new URLSearchParams({ workflow_id: w.id })}`, 'in the jobs list')]],
  ];
  const drawn = w.jobs.length > GRAPH_MAX
    ? el('p', { class: 'muted', id: 'graph-too-big' }, `${plural(w.jobs.length, 'job')}: too many to draw here; they are listed below.`)
    : el('div', { class: 'graph' }, workflowGraph(w.jobs));
  const content = el('div', { class: 'workflow', 'data-state': w.state },
    el('div', { class: 'actions' }, badge(w.state), actions),
    el('dl', { class: 'fields' }, fields.map(([name, value]) => [el('dt', {}, name), el('dd', {}, value)])),
    el('section', { class: 'card', id: 'graph' },
      el('h2', {}, `Graph (${plural(w.jobs.length, 'job')})`),
      el('div', { class: 'legend' }, workflowCounts(w, { id: 'workflow-counts' })),
      el('p', { class: 'muted' }, 'Jobs in columns by depth, each after what it waits for; a box opens the job. Jobs added at run time are drawn too.'),
      drawn),
    section(`workflow-jobs:${w.id}`, `Jobs (${w.jobs.length})`, workflowJobs(w.jobs), w.jobs.length > GRAPH_MAX));
  const toolbar = [el('p', {}, link('#/workflows', '← all workflows')), el('h1', {}, `Workflow ${w.name}`, el('small', { class: 'mono' }, ` ${w.id}`))];
  return { toolbar, content };
}

/** The form that creates a schedule, or edits the one its Edit button
 * loaded (`data-editing` holds its id). In the toolbar, so a refresh of
 * the list never wipes what is being typed. */
function scheduleForm() {
  const field = (name, label, input) => el('div', { class: 'field' }, el('label', { for: `schedule-${name}` }, label), input);
  const text = (name, placeholder) => el('input', { id: `schedule-${name}`, name, placeholder, spellcheck: 'false', autocomplete: 'off' });
  const note = el('p', { class: 'form-error error', role: 'alert' });
  const title = el('summary', {}, 'New schedule');
  const submit = el('button', { type: 'submit' }, 'Create');
  const form = el('form', { id: 'schedule-form', class: 'settings', novalidate: true, autocomplete: 'off' },
    field('name', 'name', text('name', 'nightly-report')),
    field('cron', 'cron', text('cron', '0 3 * * * or @hourly')),
    field('timezone', 'time zone', text('timezone', 'UTC')),
    field('queue', 'queue', text('queue', 'reports')),
    field('kind', 'kind', text('kind', 'build_report')),
    field('payload', 'payload (JSON)', el('textarea', { id: 'schedule-payload', name: 'payload', rows: 2, spellcheck: 'false' })),
    field('overlap', 'overlap', el('select', { id: 'schedule-overlap', name: 'overlap' },
      ['allow', 'skip'].map((o) => el('option', { value: o }, o)))),
    field('enabled', 'enabled', el('input', { type: 'checkbox', id: 'schedule-enabled', name: 'enabled', checked: true })),
    el('div', { class: 'buttons' }, submit, el('button', { type: 'reset' }, 'Clear'), note));
  const box = el('details', { id: 'schedule-editor' }, title, form);
  form.addEventListener('reset', () => {
    delete form.dataset.editing;
    title.textContent = 'New schedule';
    submit.textContent = 'Create';
    note.textContent = '';
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    note.textContent = '';
    const f = form.elements;
    const body = {};
    for (const name of ['name', 'cron', 'timezone', 'queue', 'kind']) {
      if (f[name].value.trim()) body[name] = f[name].value.trim();
    }
    const editing = form.dataset.editing;
    if (f.payload.value.trim()) {
      try { body.payload = JSON.parse(f.payload.value); } catch (err) { note.textContent = `payload: not JSON (${err.message})`; return; }
    } else if (editing) {
      body.payload = null; // emptied: a PATCH without it would keep the old one
    }
    body.overlap = f.overlap.value;
    body.enabled = f.enabled.checked;
    try {
      const { schedule } = editing
        ? await api('PATCH', `/v1/schedules/${enc(editing)}`, body)
        : await api('POST', '/v1/schedules', body);
      form.reset();
      box.open = false;
      flash(`Schedule ${schedule.name} ${editing ? 'saved' : 'created'}.`);
      await render();
    } catch (err) {
      note.textContent = errorText(err); // nothing changed: keep what was typed
    }
  });
  /** Loads schedule `s` into the form, to edit it. */
  box.edit = (s) => {
    const f = form.elements;
    for (const name of ['name', 'cron', 'timezone', 'queue', 'kind']) f[name].value = s[name];
    f.payload.value = s.payload === null ? '' : JSON.stringify(s.payload);
    f.overlap.value = s.overlap;
    f.enabled.checked = s.enabled;
    form.dataset.editing = s.id;
    title.textContent = `Edit schedule ${s.name}`;
    submit.textContent = 'Save';
    box.open = true;
    f.cron.focus();
  };
  return box;
}

/** The actions of one schedule's row. */
function scheduleActions(s) {
  const path = `/v1/schedules/${enc(s.id)}`;
  const edit = el('button', { type: 'button', 'data-action': 'edit', onclick: () => $('#schedule-editor').edit(s) }, 'Edit');
  const toggle = s.enabled
    ? button('Disable', () => api('PATCH', path, { enabled: false }).then(() => `Schedule ${s.name} disabled.`))
    : button('Enable', () => api('PATCH', path, { enabled: true }).then(() => `Schedule ${s.name} enabled.`));
  toggle.dataset.action = 'toggle';
  const trigger = button('Run now', () => api('POST', `${path}/trigger`).then(({ job }) => `Schedule ${s.name} enqueued job ${job.id}.`));
  trigger.dataset.action = 'trigger';
  const remove = button('Delete', () => api('DELETE', path).then(() => `Schedule ${s.name} deleted (its jobs stay).`),
    `Delete schedule ${s.name}? Its jobs stay.`);
  remove.dataset.action = 'delete';
  return el('div', { class: 'row-actions' }, edit, toggle, trigger, remove);
}

async function schedules() {
  // One request for every schedule with its recent runs and next times.
  const list = (await api('GET', '/v1/schedules?runs=10&next=3')).schedules;
  const rows = list.map((s) => {
    const times = s.next_runs;
    const runs = s.recent_runs;
    const recent = runs.slice(0, 10).map((run) => el('li', {}, when(run.fire_at), ' ', el('span', { class: `badge ${run.outcome}` }, run.outcome),
      run.job_id ? [' ', link(`#/jobs/${enc(run.job_id)}`, run.job_id)] : ''));
    return el('tr', { 'data-schedule': s.id },
      el('td', {}, s.name), el('td', { class: 'mono' }, s.cron), el('td', {}, s.timezone),
      el('td', {}, `${s.queue} / ${s.kind}`),
      el('td', {}, s.enabled ? 'yes' : el('span', { class: 'badge paused' }, 'disabled')),
      el('td', {}, s.overlap),
      el('td', {}, el('ol', { class: 'times' }, times.map((t) => el('li', {}, when(t))))),
      el('td', {}, when(s.last_run_at, true)),
      el('td', {}, runs.length ? section(`runs:${s.id}`, `${runs.length} run(s)`, el('ul', { class: 'runs' }, recent), false) : '—'),
      el('td', {}, scheduleActions(s)));
  });
  const content = list.length
    ? table(['Name', 'Cron', 'Zone', 'Queue / kind', 'Enabled', 'Overlap', 'Next runs', 'Last run', 'Recent runs', ''], rows,
      { id: 'schedules', class: 'stack' })
    : el('p', { class: 'muted' }, 'No schedules.');
  return { toolbar: [el('h1', {}, 'Schedules'), scheduleForm()], content };
}

async function workers() {
  const list = (await api('GET', '/v1/workers')).workers;
  const runsOn = (w) => [w.sdk && `${w.sdk}${w.version ? ` ${w.version}` : ''}`,
    w.host && `${w.host}${w.pid != null ? `:${w.pid}` : ''}`].filter(Boolean).join(' on ') || '—';
  const rows = list.map((w) => el('tr', { 'data-worker': w.worker_id },
    el('td', { class: 'mono' }, w.worker_id),
    el('td', {}, w.queues.map((q, i) => [i ? ', ' : '', link(`#/queues/${enc(q)}`, q)])),
    el('td', { class: 'num', 'data-count': 'running' }, link(`#/jobs?${new URLSearchParams({ state: 'running' })}`, w.running)),
    el('td', { class: 'num' }, w.concurrency ?? '—'),
    el('td', {}, runsOn(w)),
    el('td', {}, when(w.last_seen_at, true)),
    el('td', {}, when(w.last_heartbeat_at, true))));
  const content = list.length
    ? table(['Worker', 'Queues', ['Running'], ['Concurrency'], 'Runs on', 'Last seen', 'Last heartbeat'], rows, { id: 'workers' })
    : el('p', { class: 'muted', id: 'no-workers' }, 'No worker holds a job or announced itself in the last 5 minutes.');
  const idle = list.filter((w) => w.running === 0).length;
  return {
    toolbar: [el('h1', {}, 'Workers'),
      el('p', { class: 'muted' }, `${plural(list.length, 'worker')} (${idle} idle): those holding running jobs, and those that announced themselves in the last 5 minutes.`)],
    content,
  };
}

const VIEWS = { overview, queue, jobs, workflows: workflowList, workflow, dlq, job, schedules, workers };

// ---------------------------------------------------------------- shell

function status(text) { $('#status').textContent = text; }

// ---------------------------------------------------------------- live

/** The page's one event stream. The API wants the key in a header, which
 * EventSource cannot send: the stream is read with fetch() and parsed here. */
const stream = {
  ctrl: null, // the AbortController of the stream open or opening
  owner: '', // the key and tenant it is for
  cursor: null, // the last id seen: a reconnect resumes right after it
  live: false, // open and being read
  backoff: 0, // the last wait before a reconnect
  retry: null, // the timer of the next attempt
  why: '', // why it is not open, for the indicator
};
let hiddenSince = null; // when the tab was hidden (null: shown)

const streamOwner = () => `${key}\n${tenant || ''}`;

/** Whether the page should hold a stream: signed in, auto-refresh on, and
 * not hidden for long (a tenant has a limited number of streams). */
function wantStream() {
  const hiddenLong = hiddenSince !== null && Date.now() - hiddenSince >= STREAM_HIDDEN_MS;
  return Boolean(key && me && $('#auto-refresh').checked && !hiddenLong);
}

/** Opens, keeps or closes the stream as wantStream() and the tenant say. */
function syncStream() {
  if (!wantStream()) {
    closeStream();
    showLive();
    return;
  }
  if (stream.owner !== streamOwner()) {
    // Another key or tenant: its history starts now, its sparklines anew.
    closeStream();
    stream.owner = streamOwner();
    sparks.clear();
    sparkDirty.clear();
  }
  if (!stream.ctrl && !stream.retry) openStream();
}

/** Closes the stream and forgets where it stood: reopened, it starts live
 * and the view is read again (no backlog to replay). */
function closeStream() {
  if (stream.ctrl) stream.ctrl.abort();
  clearTimeout(stream.retry);
  Object.assign(stream, { ctrl: null, cursor: null, live: false, backoff: 0, retry: null, why: '' });
  armTimer();
}

async function openStream() {
  stream.retry = null;
  const ctrl = new AbortController();
  stream.ctrl = ctrl;
  const headers = { Authorization: `Bearer ${key}`, Accept: 'text/event-stream' };
  if (tenant) headers['X-Tether-Tenant'] = tenant;
  if (stream.cursor) headers['Last-Event-ID'] = stream.cursor;
  let why;
  let wait;
  const since = Date.now();
  try {
    const res = await fetch('/v1/events', { headers, cache: 'no-store', signal: ctrl.signal });
    if (stream.ctrl !== ctrl) return; // closed or replaced as it answered
    if (res.ok) {
      setLive(true);
      markDirty(); // what changed before it opened (or while it was down)
      await readStream(res.body, ctrl);
      why = 'the live stream ended';
    } else {
      let err = null;
      try { err = (await res.json()).error; } catch { /* not JSON: the status says it */ }
      if (res.status === 401 && stream.ctrl === ctrl) signOut(`The key was not accepted (${err ? err.message : res.statusText}).`);
      if (res.status === 429) wait = STREAM_REFUSED_MS; // the tenant's streams are all taken
      if (res.status === 400) stream.cursor = null; // a cursor this server does not know: start live
      why = `the live stream was refused (${err ? `${err.code}: ${err.message}` : res.status})`;
    }
  } catch (e) {
    why = `the live stream broke (${e.message || e})`;
  }
  if (stream.ctrl !== ctrl) return; // closed or replaced meanwhile
  // Reconnect: at once-ish after a long run, backing off to 30 s when it
  // keeps failing; the cursor makes it resume without a gap.
  if (Date.now() - since > 30000) stream.backoff = 0;
  stream.backoff = Math.min(30000, Math.max(1000, stream.backoff * 2));
  wait = wait || stream.backoff;
  Object.assign(stream, { ctrl: null, why: `${why}; trying again in ${span(wait)}` });
  stream.retry = setTimeout(() => { stream.retry = null; syncStream(); }, wait);
  setLive(false);
}

/** Reads server-sent events (`id:`, `event:`, `data:` lines; a blank line
 * ends a message; `:` lines are heartbeats) until the stream ends. */
async function readStream(body, ctrl) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  let msg = { event: '', data: [] };
  let idle;
  // A connection that died without a word (no heartbeat): reconnect.
  const watch = () => { clearTimeout(idle); idle = setTimeout(() => ctrl.abort(), STREAM_IDLE_MS); };
  const line = (text) => {
    if (text === '') {
      if (msg.data.length) onMessage(msg.event || 'message', msg.data.join('\n'));
      msg = { event: '', data: [] };
      return;
    }
    if (text.startsWith(':')) return;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') msg.data.push(value);
    else if (field === 'event') msg.event = value;
    else if (field === 'id' && !value.includes('\0')) stream.cursor = value;
  };
  watch();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      watch();
      rest += value;
      const ends = /\r\n|\n|\r/g;
      let start = 0;
      for (let m = ends.exec(rest); m; m = ends.exec(rest)) {
        if (m[0] === '\r' && m.index === rest.length - 1) break; // maybe half of \r\n
        line(rest.slice(start, m.index));
        start = ends.lastIndex;
      }
      rest = rest.slice(start);
    }
  } finally {
    clearTimeout(idle);
  }
}

/** One message of the stream. */
function onMessage(name, data) {
  let e = null;
  try { e = JSON.parse(data); } catch { /* read as a gap */ }
  // A gap (events removed before the stream read them), or a message not
  // understood: anything may have changed.
  if (name === 'gap' || !e || typeof e !== 'object') {
    for (const q of sparks.keys()) sparkDirty.add(q);
    markDirty();
    return;
  }
  if (['succeeded', 'failed', 'cancelled', 'retry_scheduled'].includes(e.event)) sparkDirty.add(e.queue);
  if (concerns(e, route())) markDirty();
}

/** Whether event `e` (a job's) may change what view `r` shows. */
function concerns(e, r) {
  const p = r.params;
  const matches = (name, value) => !p.get(name) || p.get(name) === value;
  switch (r.view) {
    case 'queue': return e.queue === r.name;
    case 'job': return e.job_id === r.id || related.has(e.job_id);
    case 'workflow': return e.workflow_id === r.id;
    case 'workflows': return Boolean(e.workflow_id);
    case 'jobs':
    case 'dlq': return matches('queue', e.queue) && matches('kind', e.kind) && matches('workflow_id', e.workflow_id);
    default: return true; // the overview's counts, the schedules' runs, the workers
  }
}

/** Re-reads the view soon: at most once per LIVE_MIN_MS however many
 * events come, and not while a read is in flight or the user types. */
let lastLive = 0;
let liveTimer = null;
function markDirty() {
  dirty = true;
  if (liveTimer) return;
  liveTimer = setTimeout(flush, Math.max(0, lastLive + LIVE_MIN_MS - Date.now()));
}

function flush() {
  liveTimer = null;
  // Switched off or hidden: it stays dirty, read when shown or switched on.
  if (!dirty || !key || !$('#auto-refresh').checked || document.hidden) return;
  if (inflight > 0 || typing()) {
    liveTimer = setTimeout(flush, LIVE_MIN_MS);
    return;
  }
  lastLive = Date.now();
  render();
}

function setLive(live) {
  stream.live = live;
  if (live) stream.why = '';
  armTimer();
  showLive();
}

/** The header says how the page keeps up: "live", or "refreshing every
 * 5s" (why, on hover), or nothing when auto-refresh is off. */
function showLive() {
  const box = $('#live');
  const on = Boolean(key) && $('#auto-refresh').checked;
  const state = !on ? 'off' : stream.live ? 'live' : 'polling';
  document.body.dataset.live = state; // for tests
  box.hidden = !on;
  box.className = state;
  box.textContent = state === 'live' ? 'live' : `refreshing every ${span(refreshMs())}`;
  box.title = state === 'live'
    ? `Updates as jobs change (GET /v1/events); the view is also read again every ${span(refreshMs())}.`
    : stream.why || 'Opening the live stream…';
}

/** The timer that re-reads the view whatever the stream says, re-armed
 * when its interval changes (the stream opened or was lost). */
let timer = null;
let timerMs = 0;
function armTimer() {
  const ms = refreshMs();
  document.body.dataset.refreshMs = String(ms); // for tests: the interval in force
  if (timer && ms === timerMs) return;
  clearInterval(timer);
  timerMs = ms;
  timer = setInterval(tick, ms);
}

function showSignIn() {
  for (const id of ['#nav', '#sign-out', '#auto', '#live', '#view', '#flash']) $(id).hidden = true;
  $('#sign-in').hidden = false;
  $('#key').focus();
  status('');
}

function signOut(message) {
  key = null;
  me = null;
  tenant = null;
  selected.clear();
  closeStream();
  stream.owner = '';
  sparks.clear();
  showTenant();
  $('#tenant-switch').hidden = true;
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(TENANT);
  shown = null;
  $('#view').replaceChildren();
  $('#sign-in-error').textContent = message || '';
  showSignIn();
}

/** Who the key is; for an admin key, the tenant switcher in the header
 * (every tenant, the key's own first). Once per sign-in; renders that start
 * meanwhile wait for the same answer. */
let settingUp = null;
function setUpTenants() {
  if (me) return Promise.resolve();
  if (!settingUp) settingUp = loadTenants().finally(() => { settingUp = null; });
  return settingUp;
}

async function loadTenants() {
  const who = await api('GET', '/v1/whoami', undefined, { own: true });
  const list = who.admin ? (await api('GET', '/v1/tenants', undefined, { own: true })).tenants : [];
  if (!key) return; // signed out meanwhile
  me = who;
  if (!me.admin) { chooseTenant(null); return; }
  const tenants = [me.tenant, ...list.filter((t) => t.id !== me.tenant.id)];
  // A tenant kept from before that is gone now (or a name kept by an older
  // page): back to the key's own.
  const kept = tenants.find((t) => t.id === tenant);
  if (tenant && (!kept || tenant === me.tenant.id)) chooseTenant(null);
  else if (kept) tenantName = kept.name;
  const pick = $('#tenant');
  pick.replaceChildren(...tenants.map((t) => el('option', { value: t.id, selected: t.id === (tenant || me.tenant.id) }, t.name)));
  $('#tenant-switch').hidden = false;
  showTenant();
}

/** Looks at the tenant with this id and name (null: the key's own) from
 * now on, in this tab. */
function chooseTenant(id, name = null) {
  tenant = id;
  tenantName = id ? name : null;
  if (tenant) sessionStorage.setItem(TENANT, tenant); else sessionStorage.removeItem(TENANT);
  selected.clear(); // ids of another tenant mean nothing here
  showTenant();
}

/** The header says whose data is on screen; another tenant's stands out. */
function showTenant() {
  const other = Boolean(me && me.admin && tenant);
  $('#tenant-switch').classList.toggle('acting', other);
  $('#tenant-label').textContent = other ? 'viewing tenant' : 'tenant';
  $('#tenant-switch').title = other
    ? `Every request acts for tenant ${tenantName} (X-Tether-Tenant: ${tenant}); the key is ${me.tenant.name}'s admin key.`
    : 'The tenant shown; an admin key may look at any other.';
  document.body.dataset.tenant = tenant ? tenantName : (me ? me.tenant.name : '');
}

async function render() {
  if (!key) return showSignIn();
  try { await setUpTenants(); } catch (e) { status(`Refresh failed: ${errorText(e)}`); return; }
  if (!key) return showSignIn();
  for (const id of ['#nav', '#sign-out', '#auto', '#view']) $(id).hidden = false;
  $('#sign-in').hidden = true;
  syncStream();
  showLive();
  const mine = ++seq;
  dirty = false; // this read shows every event so far
  const startedAt = Date.now();
  const hash = location.hash || '#/';
  const r = route();
  const fresh = hash !== shown;
  for (const a of document.querySelectorAll('#nav a')) {
    const current = a.dataset.view === r.view || (r.view === 'job' && a.dataset.view === 'jobs')
      || (r.view === 'queue' && a.dataset.view === 'overview') || (r.view === 'workflow' && a.dataset.view === 'workflows');
    if (current) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  inflight += 1;
  try {
    let built;
    try {
      built = await VIEWS[r.view](r);
    } catch (e) {
      if (!fresh || !key) throw e;
      built = { content: el('p', { class: 'error', id: 'view-error' }, errorText(e)) };
    }
    if (mine !== seq || !key) return;
    // A refresh built before the user typed would put back the values of
    // then: drop it (read again once they stop).
    if (!fresh && lastTyped > startedAt) { markDirty(); return; }
    const x = window.scrollX;
    const y = window.scrollY;
    // A refresh swaps the data only: filters being edited, the scroll
    // position and open sections stay.
    if (fresh) {
      $('#view').replaceChildren(...[built.toolbar, el('div', { id: 'content' }, built.content)].flat().filter(Boolean));
    } else {
      $('#content').replaceChildren(...[built.content].flat().filter(Boolean));
    }
    restoreSections();
    syncBulk();
    related = new Set([...document.querySelectorAll('#content [data-id]')].map((n) => n.dataset.id));
    if (fresh) window.scrollTo(0, 0); else window.scrollTo(x, y);
    shown = hash;
    renders += 1;
    document.body.dataset.shown = hash; // for tests: which view is on screen
    document.body.dataset.renders = String(renders);
    status(`Updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    if (mine === seq && key) status(`Refresh failed: ${errorText(e)}`);
  } finally {
    inflight -= 1;
  }
}

function typing() {
  const a = document.activeElement;
  const inField = a && a.matches('#view input:not([type=checkbox]), #view textarea');
  return inField || Date.now() - lastTyped < 3000;
}

function tick() {
  if (!key || !$('#auto-refresh').checked || document.hidden || inflight > 0) return;
  if (typing()) { status('Auto-refresh paused while you type'); return; }
  render();
}

$('#sign-in').addEventListener('submit', async (e) => {
  e.preventDefault();
  const candidate = $('#key').value.trim();
  if (!candidate) return;
  key = candidate;
  try {
    await api('GET', '/v1/queues');
  } catch (err) {
    if (err.status !== 401) { $('#sign-in-error').textContent = errorText(err); key = null; }
    return;
  }
  sessionStorage.setItem(KEY, candidate);
  $('#key').blur();
  $('#key').value = '';
  $('#sign-in-error').textContent = '';
  shown = null;
  render();
});
$('#sign-out').addEventListener('click', () => signOut('Signed out.'));
$('#tenant').addEventListener('change', (e) => {
  const id = e.target.value;
  const name = e.target.selectedOptions[0] ? e.target.selectedOptions[0].textContent : id;
  chooseTenant(me && id !== me.tenant.id ? id : null, name);
  shown = null;
  render();
});
document.addEventListener('input', (e) => {
  if (e.target.matches('#view input:not([type=checkbox]), #view textarea')) lastTyped = Date.now();
}, true);
window.addEventListener('hashchange', () => {
  $('#flash').hidden = true; // a message belongs to the view it was shown on
  drafts.clear(); // and so does a half-edited settings form
  render();
});
$('#auto-refresh').addEventListener('change', (e) => {
  syncStream(); // off: the stream is given back; on: opened again, and the view read
  showLive();
  if (e.target.checked) markDirty();
});
document.addEventListener('visibilitychange', () => {
  if (document.hidden) {
    hiddenSince = Date.now();
    setTimeout(syncStream, STREAM_HIDDEN_MS); // gives the stream back if still hidden
  } else {
    hiddenSince = null;
    if (key && me) syncStream();
    if (dirty) markDirty();
  }
});
armTimer();
render();
