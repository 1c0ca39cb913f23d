// Drives tether's dashboard in Debian's Chromium (playwright-core, no
// downloaded browser). Run by crates/tether-server/tests/http/dashboard.rs, which
// starts a real server over a seeded database and passes in the environment:
// TETHER_URL, TETHER_KEY (admin), the seeded ids (FAILED_JOB, FAILED_JOB2,
// RUNNING_JOB, XSS_JOB, SCHEDULE_ID, SUCCEEDED_JOB, RETRIED_JOB,
// CANCELLED_JOB, and PARENT_JOB with WAITING_JOB, which waits for it), a second tenant (OTHER_TENANT, its OTHER_QUEUE and
// OTHER_JOB, and its non-admin OTHER_KEY) and SCREENSHOT_DIR. The expected
// counts below mirror that seed. The workflow steps make their own graph
// (queue `flows`) late, so that the counts before them stay the seed's, and
// the live steps (queues `live` and `live-flow`) later still.
// Exit code 0 means every check passed.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const need = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run this through cargo test -p tether-server --test http -- dashboard)`);
  return value;
};
const BASE = need('TETHER_URL');
const KEY = need('TETHER_KEY');
const FAILED_JOB = need('FAILED_JOB');
const FAILED_JOB2 = need('FAILED_JOB2');
const RUNNING_JOB = need('RUNNING_JOB');
const XSS_JOB = need('XSS_JOB');
const SCHEDULE_ID = need('SCHEDULE_ID');
const SUCCEEDED_JOB = need('SUCCEEDED_JOB'); // images: succeeded,
const RETRIED_JOB = need('RETRIED_JOB'); // failed once, waiting out an hour's backoff,
const CANCELLED_JOB = need('CANCELLED_JOB'); // cancelled before it ran
const PARENT_JOB = need('PARENT_JOB'); // pipeline: queued,
const WAITING_JOB = need('WAITING_JOB'); // and a job waiting for it (its one dependency)
const OTHER_TENANT = need('OTHER_TENANT'); // a second tenant, with one queue of its own
const OTHER_QUEUE = need('OTHER_QUEUE');
const OTHER_JOB = need('OTHER_JOB'); // its one job
const OTHER_KEY = need('OTHER_KEY'); // its own key, not an admin key
const OUT = need('SCREENSHOT_DIR');
const REFRESH_MS = 1000;
const XSS_TEXT = '<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>';
const ERROR_TEXT = 'upstream said 503 <img src=x onerror=window.__pwned=3>';

mkdirSync(OUT, { recursive: true });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const step = (text) => console.log(`- ${text}`);

/** The API with the admin key (as `tenant` when given). */
async function api(method, route, tenant) {
  const headers = { Authorization: `Bearer ${KEY}` };
  if (tenant) headers['X-Tether-Tenant'] = tenant;
  const res = await fetch(`${BASE}${route}`, { method, headers });
  assert.ok(res.ok, `${method} ${route}: ${res.status}`);
  return res.json();
}

/** A POST with the admin key and a JSON body; answers the JSON. */
async function post(route, body) {
  const res = await fetch(`${BASE}${route}`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await res.text();
  assert.ok(res.ok, `POST ${route}: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** Claims the ready jobs of `queue` as a worker would: id → lease token. */
async function claim(queue) {
  const { jobs } = await post(`/v1/queues/${queue}/claim`, { worker_id: 'flow-worker', limit: 10 });
  return new Map(jobs.map((j) => [j.id, j.lease_token]));
}

/** Milliseconds as the page writes a percentile under a second. */
const ms = (n) => { assert.ok(n < 1000, `${n} ms: a seeded job took a second`); return `${n} ms`; };

/** Polls `check` (which returns true, or a value to report) until true. */
async function until(what, check, timeout = 20000) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await check();
      if (last === true) return;
    } catch (e) {
      last = e.message;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last seen: ${JSON.stringify(last)})`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: [
    '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    // Nothing outside this machine is reachable: ask for nothing.
    '--disable-component-update', '--disable-sync', '--disable-quic', '--no-first-run',
  ],
  headless: true,
});
const problems = [];
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
  page = await context.newPage();
  page.setDefaultTimeout(20000);
  page.on('pageerror', (e) => problems.push(`uncaught error in the page: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused/.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  // Confirmation dialogs: what they asked, answered as `answer` says.
  const dialogs = [];
  let answer = true;
  page.on('dialog', (d) => { dialogs.push(d.message()); return answer ? d.accept() : d.dismiss(); });
  // Every API request the page makes, to count them, and the tenant each
  // acted for (X-Tether-Tenant, or '' for the key's own).
  const requests = [];
  const actingFor = [];
  page.on('request', (r) => {
    if (!r.url().includes('/v1/')) return;
    requests.push(r.url().slice(BASE.length));
    actingFor.push(r.headers()['x-tether-tenant'] || '');
  });

  // The whole page, no taller than its content (a short window first).
  // Auto-refreshes are held meanwhile (a refresh landing during the capture
  // left rows half painted): the page's timer skips its turn while a render
  // is counted in flight (app.js: inflight), so one is counted.
  const shot = async (name) => {
    await page.evaluate(() => { inflight += 1; }); // eslint-disable-line no-undef
    await sleep(300); // a refresh already under way lands
    try {
      const size = page.viewportSize();
      await page.setViewportSize({ width: size.width, height: 240 });
      await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
      await page.setViewportSize(size);
    } finally {
      await page.evaluate(() => { inflight -= 1; }); // eslint-disable-line no-undef
    }
  };
  const text = async (selector) => (await page.locator(selector).first().textContent({ timeout: 1000 }))?.trim();
  const expectText = (selector, expected, timeout) =>
    until(`${selector} to read ${JSON.stringify(expected)}`, async () => {
      const seen = await text(selector);
      return seen === expected || seen;
    }, timeout);
  const liveState = () => page.evaluate(() => document.body.dataset.live);
  const isLive = () => until('the live stream', async () => (await liveState()) === 'live' || liveState());
  const renders = () => page.evaluate(() => Number(document.body.dataset.renders || 0));
  const waitRenders = async (n) => {
    const start = await renders();
    await until(`${n} auto-refreshes`, async () => (await renders()) >= start + n || `${(await renders()) - start} so far`);
  };
  // The view of the current hash is on screen (not the previous one's).
  const settled = () => until(`the view of ${page.url()}`, () =>
    page.evaluate(() => document.body.dataset.shown === (location.hash || '#/') || location.hash));
  const visit = async (hash) => {
    await page.evaluate((h) => { location.hash = h; }, hash);
    await settled();
  };
  const rows = (table) => page.locator(`#${table} tbody tr`);
  const ids = (table) => rows(table).evaluateAll((trs) => trs.map((tr) => tr.dataset.id));
  const nav = async (label, table) => {
    await page.locator('#nav a', { hasText: label }).click();
    await settled();
    if (table) await page.locator(`#${table}`).waitFor();
  };

  step('sign in: a wrong key is refused, the right one is kept in sessionStorage');
  await page.goto(`${BASE}/?refresh_ms=${REFRESH_MS}`);
  await page.locator('#sign-in').waitFor();
  await shot('sign-in');
  await page.fill('#key', 'tether_not_a_real_key');
  await page.click('#sign-in button[type=submit]');
  await page.locator('#sign-in-error', { hasText: 'not accepted' }).waitFor();
  await page.fill('#key', KEY);
  await page.click('#sign-in button[type=submit]');
  await page.locator('#queues').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.key')), KEY);
  await waitRenders(2); // auto-refresh runs with no one touching the page
  assert.match(await text('#status'), /^Updated /);

  step('overview: per-queue counts, ready vs scheduled, oldest ready age');
  const cell = (queue, name) => `#queues tr[data-queue="${queue}"] td[data-count="${name}"]`;
  for (const [queue, name, expected] of [
    ['emails', 'queued', '5'], ['emails', 'ready', '4'], ['emails', 'scheduled', '1'], ['emails', 'paused', 'active'],
    ['reports', 'queued', '1'], ['reports', 'running', '1 / 3'], ['reports', 'failed', '1'],
    ['billing', 'failed', '1'], ['billing', 'expired_leases', '0'],
    ['pipeline', 'queued', '1'], ['pipeline', 'waiting', '1'], ['emails', 'waiting', '0'],
  ]) await expectText(cell(queue, name), expected);
  assert.notEqual(await text(cell('emails', 'oldest_ready')), '—');
  await shot('overview');

  step('pause and resume a queue');
  await page.locator('#queues tr[data-queue="emails"] button', { hasText: 'Pause' }).click();
  await expectText(cell('emails', 'paused'), 'paused');
  assert.equal((await api('GET', '/v1/queues/emails')).queue.paused, true);
  await shot('overview-paused');
  await page.locator('#queues tr[data-queue="emails"] button', { hasText: 'Resume' }).click();
  await expectText(cell('emails', 'paused'), 'active');
  assert.equal((await api('GET', '/v1/queues/emails')).queue.paused, false);

  step('queue view: flow control as it is, and how close the queue is to it');
  const patches = []; // every PATCH body the page sends
  page.on('request', (req) => { if (req.method() === 'PATCH') patches.push(JSON.parse(req.postData())); });
  const setting = (name) => `#view [data-setting="${name}"]`;
  const usage = '#limits [data-usage="running"]';
  const flowSubmit = '#flow-form button[type=submit]';
  const flowNote = '#flow-form .form-error';
  const settingsOf = (q) => ({
    max_running: q.max_running, rate_limit: q.rate_limit, key_max_running: q.key_max_running, fair: q.fair,
    max_attempts: q.max_attempts, backoff: q.backoff, default_lease_ttl_ms: q.default_lease_ttl_ms,
  });
  const reports = async () => (await api('GET', '/v1/queues/reports')).queue;
  await page.locator('#queues tr[data-queue="reports"] a', { hasText: 'reports' }).click();
  await settled();
  assert.equal(await page.evaluate(() => location.hash), '#/queues/reports');
  await page.locator('#flow-control').waitFor();
  await expectText(setting('max_running'), '3');
  await expectText(usage, '1 / 3');
  await expectText(setting('key_max_running'), 'none');
  await expectText(setting('rate_limit'), 'none');
  await expectText(setting('fair'), 'no');
  assert.equal(await page.locator('#at-limit').count(), 0, 'not at the limit yet');
  assert.equal(await page.locator('#running-meter').evaluate((m) => [m.value, m.max].join('/')), '1/3');
  await expectText('#queue-counts [data-count="running"] strong', '1');
  await expectText('#queue-counts [data-count="failed"] strong', '1');
  assert.equal(await page.inputValue('#field-max_running'), '3');
  assert.equal(await page.inputValue('#field-key_max_running'), '');
  await shot('queue');

  step('queue view: set max_running, rate_limit, key_max_running and fair with one PATCH');
  await page.fill('#field-max_running', '1');
  await page.fill('#field-key_max_running', '2');
  await page.fill('#field-rate_count', '20');
  await page.fill('#field-rate_period', '60');
  await page.check('#field-fair');
  await page.click(flowSubmit);
  await page.locator('#flash', { hasText: 'saved' }).waitFor();
  assert.deepEqual(patches, [{ max_running: 1, key_max_running: 2, rate_limit: { count: 20, period_ms: 60000 }, fair: true }]);
  await expectText(setting('max_running'), '1');
  await expectText(setting('key_max_running'), '2');
  await expectText(setting('rate_limit'), '20 / 1m');
  await expectText(setting('fair'), 'yes');
  await expectText(usage, '1 / 1');
  await expectText('#at-limit', 'at the limit');
  assert.match(await page.locator(usage).getAttribute('class'), /warn/);
  let q = await reports();
  assert.equal(q.max_running, 1);
  assert.equal(q.key_max_running, 2);
  assert.deepEqual(q.rate_limit, { count: 20, period_ms: 60000 });
  assert.equal(q.fair, true);
  // The form now starts from the saved values.
  assert.equal(await page.inputValue('#field-max_running'), '1');
  assert.equal(await page.inputValue('#field-rate_period'), '60');
  assert.equal(await page.isChecked('#field-fair'), true);
  await shot('queue-limited');

  step('queue view: nothing changed sends nothing; half a rate limit is refused before sending');
  await page.click(flowSubmit);
  await expectText(flowNote, 'Nothing to save: no setting was changed.');
  await page.fill('#field-rate_period', '');
  await page.click(flowSubmit);
  await page.locator(flowNote, { hasText: 'needs both' }).waitFor();
  assert.equal(patches.length, 1, 'no PATCH for an unchanged or half-filled form');
  await page.click('#flow-form button[type=reset]');
  assert.equal(await page.inputValue('#field-rate_period'), '60');

  step('overview: the new limit reads 1 / 1, highlighted');
  await nav('Overview', 'queues');
  await expectText(cell('reports', 'running'), '1 / 1');
  assert.match(await page.locator(cell('reports', 'running')).getAttribute('class'), /warn/);
  await page.locator('#queues tr[data-queue="reports"] a', { hasText: 'reports' }).click();
  await settled();

  step('queue view: clearing one setting sends null and reads none');
  await page.click('#flow-form [data-clear="key_max_running"]');
  assert.equal(await page.inputValue('#field-key_max_running'), '');
  await page.click(flowSubmit);
  await expectText(setting('key_max_running'), 'none');
  assert.deepEqual(patches.at(-1), { key_max_running: null });
  q = await reports();
  assert.equal(q.key_max_running, null);
  assert.equal(q.max_running, 1);
  assert.deepEqual(q.rate_limit, { count: 20, period_ms: 60000 });
  assert.equal(q.fair, true);

  step("queue view: an invalid max_running shows the server's error and changes nothing");
  const saved = settingsOf(await reports());
  const sent = patches.length;
  await page.fill('#field-max_running', '0');
  await page.click(flowSubmit);
  await page.locator(flowNote, { hasText: 'max_running' }).waitFor();
  assert.equal(patches.length, sent + 1);
  assert.deepEqual(patches.at(-1), { max_running: 0 });
  assert.match(await text(flowNote), /^invalid_argument: .*max_running/);
  assert.deepEqual(settingsOf(await reports()), saved, 'a refused PATCH changes nothing');
  await expectText(setting('max_running'), '1');
  // What was typed stays across refreshes, to be fixed.
  await waitRenders(2);
  assert.equal(await page.inputValue('#field-max_running'), '0');
  await expectText(setting('max_running'), '1');
  await shot('queue-error');
  await page.click('#flow-form button[type=reset]');
  assert.equal(await page.inputValue('#field-max_running'), '1');
  assert.equal(await text(flowNote), '');

  step('queue view: retries and leases (max_attempts, default lease)');
  await page.locator('details[data-key="retries:reports"] summary').click();
  await expectText(setting('max_attempts'), '5');
  await expectText(setting('default_lease_ttl_ms'), '30s');
  await page.fill('#field-max_attempts', '7');
  await page.fill('#field-default_lease_ttl', '45');
  await page.click('#retry-form button[type=submit]');
  await expectText(setting('max_attempts'), '7');
  await expectText(setting('default_lease_ttl_ms'), '45s');
  assert.deepEqual(patches.at(-1), { max_attempts: 7, default_lease_ttl_ms: 45000 });
  q = await reports();
  assert.equal(q.max_attempts, 7);
  assert.equal(q.default_lease_ttl_ms, 45000);
  assert.equal(q.max_running, 1, 'the other settings stay');

  step('queue view: fits an 800 px window');
  await page.setViewportSize({ width: 800, height: 860 });
  await sleep(200);
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 800),
    `the page is wider than 800 px: ${await page.evaluate(() => document.documentElement.scrollWidth)}`);
  await shot('queue-800');
  await page.setViewportSize({ width: 1360, height: 860 });

  step('queue view: the last hour per minute drawn from the real history, with wait and run percentiles');
  await visit('#/queues/reports');
  await page.locator('#throughput-chart g.minute').first().waitFor({ state: 'attached' });
  const drawn = await page.locator('#throughput-chart g.minute').evaluateAll((gs) => gs.map((g) => ({
    at: g.dataset.minute, succeeded: Number(g.dataset.succeeded), failed: Number(g.dataset.failed),
    retried: Number(g.dataset.retried), cancelled: Number(g.dataset.cancelled) })));
  const served = (await api('GET', '/v1/queues/reports/throughput?minutes=60')).minutes;
  assert.equal(drawn.length, 60);
  // The page read it a moment earlier: the same minutes, unless one turned.
  const shift = served.findIndex((m) => m.at === drawn[0].at);
  assert.ok(shift === 0 || shift === 1, `chart starts at ${drawn[0].at}, the API at ${served[0].at}`);
  for (let i = 0; i + shift < 60; i += 1) {
    assert.deepEqual(drawn[i], served[i + shift], `minute ${drawn[i].at}`);
  }
  const failedDrawn = drawn.reduce((s, m) => s + m.failed, 0);
  assert.equal(failedDrawn, 1, 'the seeded failure is drawn');
  assert.equal(await page.locator('#throughput-chart rect.failed').count(), 1);
  assert.match(await text('[data-total="failed"]'), /failed 1$/);
  assert.match(await text('[data-percentiles="run"]'), /^p50 .* p95 .* p99 /);

  step('queue view: the chart of images shows its seeded history (1 succeeded, 1 retried, 1 cancelled) as the API counts it');
  await visit('#/queues/images');
  await page.locator('#throughput-chart g.minute').first().waitFor({ state: 'attached' });
  const minutesOf = () => page.locator('#throughput-chart g.minute').evaluateAll((gs) => gs.map((g) => ({
    at: g.dataset.minute, succeeded: Number(g.dataset.succeeded), failed: Number(g.dataset.failed),
    retried: Number(g.dataset.retried), cancelled: Number(g.dataset.cancelled),
    title: g.querySelector('title').textContent,
    bars: [...g.querySelectorAll('rect:not(.hit)')].map((r) => r.getAttribute('class')) })));
  const images = await minutesOf();
  const imagesServed = await api('GET', '/v1/queues/images/throughput?minutes=60');
  const from = imagesServed.minutes.findIndex((m) => m.at === images[0].at);
  assert.ok(from === 0 || from === 1, `chart starts at ${images[0].at}, the API at ${imagesServed.minutes[0].at}`);
  const outcomes = ['succeeded', 'failed', 'retried', 'cancelled'];
  for (let i = 0; i + from < 60; i += 1) {
    const m = images[i];
    const served1 = imagesServed.minutes[i + from];
    for (const o of ['at', ...outcomes]) assert.equal(m[o], served1[o], `${o} of minute ${m.at}`);
    // The tooltip gives the exact numbers; one bar per outcome that happened.
    assert.equal(m.title, `${m.at.slice(11, 16)}Z: ${outcomes.map((o) => `${m[o]} ${o}`).join(', ')}`);
    assert.deepEqual(m.bars, outcomes.filter((o) => m[o] > 0), `bars of minute ${m.at}`);
  }
  const totals = Object.fromEntries(outcomes.map((o) => [o, images.reduce((sum, m) => sum + m[o], 0)]));
  assert.deepEqual(totals, { succeeded: 1, failed: 0, retried: 1, cancelled: 1 }, 'the seeded history');
  for (const o of outcomes) await expectText(`[data-total="${o}"]`, `${o} ${totals[o]}`);
  const busiest = Math.max(...images.map((m) => outcomes.reduce((sum, o) => sum + m[o], 0)));
  await expectText('#chart-max', String(busiest));
  // The percentiles are the API's, over the one job that finished.
  for (const [name, p] of [['wait', imagesServed.wait_ms], ['run', imagesServed.run_ms]]) {
    assert.ok(p, `${name} percentiles`);
    await expectText(`[data-percentiles="${name}"]`, `p50 ${ms(p.p50)} · p95 ${ms(p.p95)} · p99 ${ms(p.p99)}`);
  }
  await page.locator('#throughput-chart g.minute').nth(59).hover();
  await shot('queue-chart');

  step('jobs: all jobs, then the state filter');
  await nav('Jobs', 'jobs');
  await until('14 jobs listed', async () => (await rows('jobs').count()) === 14 || (await rows('jobs').count()));
  await page.selectOption('#filters select[name=state]', 'failed');
  await settled();
  await until('2 failed jobs', async () => {
    const seen = await ids('jobs');
    return (seen.length === 2 && seen.includes(FAILED_JOB) && seen.includes(FAILED_JOB2)) || seen;
  });
  assert.match(page.url(), /state=failed/);
  assert.equal(await text(`#jobs tr[data-id="${FAILED_JOB}"] td.error-text`), ERROR_TEXT);
  await shot('jobs');

  step('jobs: paging with next_cursor (Next, Next, First)');
  await visit('#/jobs?queue=emails&limit=2');
  await expectText('#page', 'Page 1');
  await until('2 rows on page 1', async () => (await rows('jobs').count()) === 2);
  const page1 = await ids('jobs');
  await page.locator('.pager button', { hasText: 'Next' }).click();
  await settled();
  await expectText('#page', 'Page 2');
  await until('another 2 rows on page 2', async () => {
    const seen = await ids('jobs');
    return (seen.length === 2 && !seen.some((id) => page1.includes(id))) || seen;
  });
  const page2 = await ids('jobs');

  step('auto-refresh keeps the page, the filters and the scroll position');
  const hash = await page.evaluate(() => location.hash);
  await page.setViewportSize({ width: 1360, height: 260 });
  await page.evaluate(() => window.scrollTo(0, 120));
  const scrolled = await page.evaluate(() => window.scrollY);
  assert.ok(scrolled > 0, 'the page should be scrollable in a short window');
  await waitRenders(2);
  assert.equal(await page.evaluate(() => window.scrollY), scrolled);
  assert.equal(await page.evaluate(() => location.hash), hash);
  assert.deepEqual(await ids('jobs'), page2);
  assert.equal(await page.inputValue('#filters input[name=queue]'), 'emails');
  await page.setViewportSize({ width: 1360, height: 860 });

  step('auto-refresh pauses while the user types, and keeps what was typed');
  await page.click('#filters input[name=kind]');
  await page.keyboard.type('send_em');
  await sleep(1500); // a refresh already under way may still land
  const before = await renders();
  await sleep(REFRESH_MS * 3);
  assert.equal(await renders(), before, 'no refresh while typing');
  assert.match(await text('#status'), /paused while you type/);
  await page.locator('#view h1').click(); // focus leaves the field
  await waitRenders(1);
  assert.equal(await page.inputValue('#filters input[name=kind]'), 'send_em');
  assert.equal(await page.evaluate(() => location.hash), hash);
  await page.locator('.pager button', { hasText: 'Next' }).click();
  await settled();
  await expectText('#page', 'Page 3');
  await until('1 row on the last page', async () => (await rows('jobs').count()) === 1);
  assert.equal(await page.locator('.pager button', { hasText: 'Next' }).isDisabled(), true);
  await page.locator('.pager button', { hasText: 'First' }).click();
  await settled();
  await expectText('#page', 'Page 1');
  assert.deepEqual(await ids('jobs'), page1);

  step('job detail: the failed job, its error and its history');
  await visit('#/jobs?state=failed');
  await page.locator(`#jobs tr[data-id="${FAILED_JOB}"] a`).click();
  await settled();
  await page.locator('.job[data-state=failed]').waitFor();
  assert.equal(await text('#last-error'), ERROR_TEXT);
  for (const event of ['enqueued', 'claimed', 'failed']) {
    await page.locator(`#history tr[data-event=${event}]`).first().waitFor();
  }
  assert.match(await text('details[data-key^="payload:"] pre'), /"report": "weekly"/);
  await shot('job-failed');

  step('job detail: a closed section stays closed across refreshes');
  await page.locator('details[data-key^="payload:"] summary').click();
  await waitRenders(2);
  assert.equal(await page.locator('details[data-key^="payload:"]').evaluate((d) => d.open), false);
  await page.locator('details[data-key^="payload:"] summary').click();

  step('dependencies: the waiting state in the filter and its badge; the jobs that wait for a job');
  await visit('#/jobs');
  assert.deepEqual(await page.locator('#filters select[name=state] option').allTextContents(),
    ['any', 'waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled']);
  await page.selectOption('#filters select[name=state]', 'waiting');
  await settled();
  assert.match(page.url(), /state=waiting/);
  await until('the one waiting job', async () => (await ids('jobs')).join() === WAITING_JOB || (await ids('jobs')));
  await expectText(`#jobs tr[data-id="${WAITING_JOB}"] .badge.waiting`, 'waiting');
  await visit(`#/jobs?depends_on=${PARENT_JOB}`);
  await until('the jobs waiting for the parent', async () => (await ids('jobs')).join() === WAITING_JOB || (await ids('jobs')));
  assert.equal(await page.inputValue('#filters input[name=depends_on]'), PARENT_JOB);

  step('dependencies: a waiting job\'s page lists what it waits for (with states, linked); the parent\'s what waits for it');
  await visit(`#/jobs/${WAITING_JOB}`);
  await page.locator('.job[data-state=waiting]').waitFor();
  await expectText(`#dependencies tr[data-id="${PARENT_JOB}"] .badge`, 'queued');
  await expectText('#dependency-rule', '0 of 1 dependency succeeded. If one fails or is cancelled, this job is cancelled too.');
  assert.equal(await page.locator('details[data-key^="dependents:"]').count(), 0, 'nothing waits for it');
  assert.equal(await page.locator('.actions button', { hasText: 'Cancel' }).count(), 1, 'a waiting job can be cancelled');
  await shot('job-waiting');
  await page.locator(`#dependencies tr[data-id="${PARENT_JOB}"] a`).click();
  await settled();
  assert.equal(await page.evaluate(() => location.hash), `#/jobs/${PARENT_JOB}`);
  await page.locator('.job[data-state=queued]').waitFor();
  assert.equal(await page.locator('details[data-key^="dependencies:"]').count(), 0, 'it waits for nothing');
  await expectText('details[data-key^="dependents:"] summary', 'Waited for by (1)');
  await expectText(`#dependents tr[data-id="${WAITING_JOB}"] .badge.waiting`, 'waiting');
  await shot('job-waited-for');
  await page.locator(`#dependents tr[data-id="${WAITING_JOB}"] a`).click();
  await settled();
  await page.locator('.job[data-state=waiting]').waitFor();

  step('dependencies: the queue view counts its waiting jobs, linked to them');
  await visit('#/queues/pipeline');
  await expectText('#queue-counts [data-count="waiting"] strong', '1');
  await page.locator('#queue-counts [data-count="waiting"] a').click();
  await settled();
  assert.match(page.url(), /queue=pipeline/);
  assert.match(page.url(), /state=waiting/);
  await until('the waiting job', async () => (await ids('jobs')).join() === WAITING_JOB || (await ids('jobs')));

  step('dead letters: replay one and see it leave');
  await nav('Dead letters', 'dlq');
  await page.locator(`#dlq tr[data-id="${FAILED_JOB}"]`).waitFor();
  await page.locator(`#dlq tr[data-id="${FAILED_JOB2}"]`).waitFor();
  await shot('dlq');
  // The dead letters take the same ticks and bulk buttons as the jobs list.
  assert.equal(await page.locator('#dlq tbody input.pick').count(), 2);
  for (const id of ['#select-all', '#cancel-selected', '#replay-selected']) await page.locator(id).waitFor();
  await page.locator(`#dlq tr[data-id="${FAILED_JOB}"] button`, { hasText: 'Replay' }).click();
  await page.locator(`#dlq tr[data-id="${FAILED_JOB}"]`).waitFor({ state: 'detached' });
  await page.locator(`#dlq tr[data-id="${FAILED_JOB2}"]`).waitFor();
  assert.equal((await api('GET', `/v1/jobs/${FAILED_JOB}`)).job.state, 'queued');

  step('dead letters: replay all matching a queue filter');
  await page.fill('#filters input[name=queue]', 'billing');
  await page.press('#filters input[name=queue]', 'Enter');
  await settled();
  await until('the billing filter', async () => (await ids('dlq')).join() === FAILED_JOB2 || (await ids('dlq')));
  await page.click('#replay-all');
  await page.locator('#dlq-empty').waitFor();
  await page.locator('#flash', { hasText: 'Replayed 1 failed job' }).waitFor();
  assert.equal((await api('GET', `/v1/jobs/${FAILED_JOB2}`)).job.state, 'queued');
  await page.locator('#filters button', { hasText: 'Clear' }).click();
  await settled();
  await page.locator('#dlq-empty').waitFor();

  step('a <script> payload and an <img onerror> error are shown as text, never run');
  await visit(`#/jobs/${XSS_JOB}`);
  await page.locator('details[data-key^="payload:"] pre').waitFor();
  assert.match(await text('details[data-key^="payload:"] pre'), /"html": "<script>window.__pwned=1<\/script><img src=x onerror=window.__pwned=2>"/);
  await page.getByText(XSS_TEXT, { exact: false }).first().waitFor();
  await shot('job-xss');
  await nav('Jobs', 'jobs');
  await page.locator(`#jobs tr[data-id="${XSS_JOB}"]`).waitFor();
  await visit(`#/jobs/${FAILED_JOB}`);
  await page.locator('.job').waitFor();
  await sleep(300);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'job data ran as script');
  assert.equal(await page.locator('#view script, #view img').count(), 0, 'job data became elements');

  step('running job: its whole history (past one page), progress shown, cancel asks the worker to stop');
  await visit(`#/jobs/${RUNNING_JOB}`);
  await page.locator('.job[data-state=running]').waitFor();
  assert.equal(await page.locator('#history tbody tr').count(), 1042, 'the history is shown whole');
  assert.equal(await page.locator('#history tbody tr[data-event=snoozed]').count(), 520);
  assert.match(await text('details[data-key^="progress:"] pre'), /"done": 3/);
  await page.locator('.actions button', { hasText: 'Cancel' }).click();
  await until('cancel requested', async () => (await api('GET', `/v1/jobs/${RUNNING_JOB}`)).job.cancel_requested === true);
  await page.locator('.fields dd', { hasText: /^yes$/ }).waitFor();

  step('job detail: a succeeded job runs again (asked first), the same job with a new attempt budget');
  await visit(`#/jobs/${SUCCEEDED_JOB}`);
  await page.locator('.job[data-state=succeeded]').waitFor();
  assert.match(await text('details[data-key^="result:"] pre'), /"width": 640/);
  let asked = dialogs.length;
  answer = false;
  await page.locator('.actions button', { hasText: 'Run again' }).click();
  await until('the question', () => dialogs.length > asked || 'no dialog yet');
  assert.equal(dialogs[asked], 'Run this succeeded job again?');
  await sleep(300);
  assert.equal((await api('GET', `/v1/jobs/${SUCCEEDED_JOB}`)).job.state, 'succeeded', 'dismissed: nothing happens');
  answer = true;
  await page.locator('.actions button', { hasText: 'Run again' }).click();
  await page.locator('#flash', { hasText: 'Job queued to run again.' }).waitFor();
  await page.locator('.job[data-state=queued]').waitFor();
  await page.locator('#history tr[data-event=replayed]').waitFor();
  const rerun = (await api('GET', `/v1/jobs/${SUCCEEDED_JOB}`)).job;
  assert.deepEqual([rerun.id, rerun.state, rerun.attempt, rerun.result], [SUCCEEDED_JOB, 'queued', 0, null]);

  step('schedules: expression, zone, next runs, recent runs (kept open across refreshes)');
  await nav('Schedules', 'schedules');
  const row = `#schedules tr[data-schedule="${SCHEDULE_ID}"]`;
  await page.locator(row).waitFor();
  const rowText = await text(row);
  for (const part of ['nightly-report', '0 3 * * *', 'Europe/Berlin', 'reports / build_report', 'skip']) {
    assert.ok(rowText.includes(part), `schedule row lacks ${part}: ${rowText}`);
  }
  assert.equal(await page.locator(`${row} ol.times li`).count(), 3);
  await page.locator(`${row} details summary`, { hasText: '1 run(s)' }).click();
  await waitRenders(2);
  assert.equal(await page.locator(`${row} details`).evaluate((d) => d.open), true);
  await page.locator(`${row} ul.runs li`, { hasText: 'enqueued' }).waitFor();
  await shot('schedules');
  const requestsBefore = requests.length;
  await waitRenders(2);
  const perRefresh = requests.slice(requestsBefore);
  assert.ok(perRefresh.length >= 2, `${perRefresh.length} requests in two refreshes`);
  for (const url of perRefresh) {
    assert.equal(url, '/v1/schedules?runs=10&next=3', 'the schedules view reads everything in one request');
  }

  step('schedules: create, edit, disable and enable, run now, delete — from the page');
  await page.locator('#schedule-editor summary').click();
  await page.fill('#schedule-name', 'hourly-cleanup');
  await page.fill('#schedule-cron', '@hourly');
  await page.fill('#schedule-queue', 'maintenance');
  await page.fill('#schedule-kind', 'purge');
  await page.fill('#schedule-timezone', 'America/New_York');
  await page.fill('#schedule-payload', '{"older_than": "30d"}');
  await page.selectOption('#schedule-overlap', 'skip');
  await page.click('#schedule-form button[type=submit]');
  await page.locator('#flash', { hasText: 'Schedule hourly-cleanup created.' }).waitFor();
  const made = (await api('GET', '/v1/schedules')).schedules.find((s) => s.name === 'hourly-cleanup');
  assert.ok(made, 'the schedule exists');
  assert.deepEqual([made.cron, made.timezone, made.queue, made.kind, made.payload, made.overlap, made.enabled],
    ['@hourly', 'America/New_York', 'maintenance', 'purge', { older_than: '30d' }, 'skip', true]);
  const mine = `#schedules tr[data-schedule="${made.id}"]`;
  await page.locator(mine).waitFor();
  assert.equal(await page.locator(`${mine} ol.times li`).count(), 3, 'its next three runs are shown');
  await page.locator(`${mine} button[data-action=edit]`).click();
  assert.equal(await page.inputValue('#schedule-cron'), '@hourly');
  assert.equal(await page.inputValue('#schedule-timezone'), 'America/New_York');
  assert.equal(await page.inputValue('#schedule-payload'), '{"older_than":"30d"}');
  await shot('schedule-edit');
  await page.fill('#schedule-cron', '30 * * * *');
  await page.fill('#schedule-payload', ''); // emptied: the payload becomes null
  await page.click('#schedule-form button[type=submit]');
  await page.locator('#flash', { hasText: 'Schedule hourly-cleanup saved.' }).waitFor();
  await expectText(`${mine} td.mono`, '30 * * * *');
  const edited = (await api('GET', `/v1/schedules/${made.id}`)).schedule;
  assert.deepEqual([edited.cron, edited.timezone, edited.overlap, edited.payload], ['30 * * * *', 'America/New_York', 'skip', null],
    'the cron changed, the payload was emptied, the rest stays');
  await page.locator(`${mine} button[data-action=toggle]`, { hasText: 'Disable' }).click();
  await page.locator(`${mine} .badge.paused`, { hasText: 'disabled' }).waitFor();
  assert.equal((await api('GET', `/v1/schedules/${made.id}`)).schedule.enabled, false);
  await page.locator(`${mine} button[data-action=toggle]`, { hasText: 'Enable' }).click();
  await page.locator(`${mine} button[data-action=toggle]`, { hasText: 'Disable' }).waitFor();
  await page.locator(`${mine} button[data-action=trigger]`).click();
  await page.locator('#flash', { hasText: 'Schedule hourly-cleanup enqueued job' }).waitFor();
  assert.equal((await api('GET', `/v1/schedules/${made.id}/runs`)).runs.length, 1);
  await page.locator(`${mine} details summary`, { hasText: '1 run(s)' }).waitFor();
  asked = dialogs.length;
  await page.locator(`${mine} button[data-action=delete]`).click();
  await page.locator(mine).waitFor({ state: 'detached' });
  assert.match(dialogs[asked], /^Delete schedule hourly-cleanup\?/);
  assert.equal((await api('GET', '/v1/schedules')).schedules.some((s) => s.name === 'hourly-cleanup'), false);

  step('workers: who holds running jobs, from the jobs themselves');
  await nav('Workers', 'workers');
  await expectText('#workers tr[data-worker="w1"] td[data-count="running"]', '1');
  assert.match(await text('#workers tr[data-worker="w1"]'), /reports/);
  await shot('workers');

  step('jobs: a click anywhere on a row opens the job; its checkbox and links do not navigate elsewhere');
  await visit('#/jobs?queue=emails&state=queued');
  const firstQueued = (await ids('jobs'))[0];
  await page.locator(`#jobs tr[data-id="${firstQueued}"] td`).nth(3).click();
  await page.locator('.job').waitFor();
  assert.equal(await page.evaluate(() => location.hash), `#/jobs/${firstQueued}`);
  await visit('#/jobs?queue=emails&state=queued');
  await page.locator(`#jobs tr[data-id="${firstQueued}"] input.pick`).click();
  await sleep(300);
  assert.equal(await page.evaluate(() => location.hash), '#/jobs?queue=emails&state=queued', 'a tick stays on the list');
  await expectText('#selected-count', '1 selected');
  await page.locator('#clear-selection').click();
  await expectText('#selected-count', 'none selected');
  assert.equal(await page.locator('#cancel-selected').isDisabled(), true, 'nothing to cancel');

  step('jobs: cancel selected asks first; dismissed, nothing changes; accepted, both are cancelled');
  await visit('#/jobs?queue=emails&state=queued&kind=send_email');
  const picked = (await ids('jobs')).slice(0, 2);
  assert.equal(picked.length, 2);
  for (const id of picked) await page.locator(`#jobs tr[data-id="${id}"] input.pick`).check();
  assert.equal(await page.evaluate(() => location.hash), '#/jobs?queue=emails&state=queued&kind=send_email');
  await expectText('#selected-count', '2 selected');
  // The ticks are kept across auto-refreshes (the rows are rebuilt).
  await waitRenders(2);
  for (const id of picked) assert.equal(await page.locator(`#jobs tr[data-id="${id}"] input.pick`).isChecked(), true);
  await expectText('#selected-count', '2 selected');
  assert.equal(await page.locator('#select-all').isChecked(), false, 'not every row is ticked');
  await shot('jobs-selected');
  answer = false;
  asked = dialogs.length;
  await page.click('#cancel-selected');
  await until('the question', () => dialogs.length > asked || 'no dialog yet');
  assert.equal(dialogs.at(-1), 'Cancel 2 jobs?');
  await sleep(300);
  for (const id of picked) assert.equal((await api('GET', `/v1/jobs/${id}`)).job.state, 'queued', 'dismissed: nothing changes');
  answer = true;
  await waitRenders(1);
  await page.click('#cancel-selected');
  await page.locator('#flash', { hasText: 'Cancelled 2 jobs.' }).waitFor();
  assert.equal(dialogs.at(-1), 'Cancel 2 jobs?');
  for (const id of picked) assert.equal((await api('GET', `/v1/jobs/${id}`)).job.state, 'cancelled');
  for (const id of picked) await page.locator(`#jobs tr[data-id="${id}"]`).waitFor({ state: 'detached' });
  await expectText('#selected-count', 'none selected');

  step('jobs: replay selected (all shown) brings them back, after the question');
  await visit('#/jobs?queue=emails&state=cancelled&kind=send_email');
  await until('the 2 cancelled jobs', async () => (await ids('jobs')).sort().join() === [...picked].sort().join() || (await ids('jobs')));
  await page.locator('#select-all').check();
  await expectText('#selected-count', '2 selected');
  asked = dialogs.length;
  await page.click('#replay-selected');
  await page.locator('#flash', { hasText: 'Replayed 2 jobs.' }).waitFor();
  assert.equal(dialogs[asked], 'Replay 2 jobs?');
  for (const id of picked) assert.equal((await api('GET', `/v1/jobs/${id}`)).job.state, 'queued');

  step('jobs: a bulk replay that partly fails says which job could not be, and why; that one stays ticked');
  await visit('#/jobs?queue=images');
  await page.locator(`#jobs tr[data-id="${CANCELLED_JOB}"]`).waitFor();
  await page.locator(`#jobs tr[data-id="${RETRIED_JOB}"] input.pick`).check();
  await page.locator(`#jobs tr[data-id="${CANCELLED_JOB}"] input.pick`).check();
  asked = dialogs.length;
  await page.click('#replay-selected');
  const partial = page.locator('#flash', { hasText: 'Replayed 1 job; 1 could not be:' });
  await partial.waitFor();
  assert.equal(dialogs[asked], 'Replay 2 jobs?');
  assert.ok((await partial.textContent()).includes(RETRIED_JOB), await partial.textContent());
  assert.equal((await api('GET', `/v1/jobs/${CANCELLED_JOB}`)).job.state, 'queued');
  const stillWaiting = (await api('GET', `/v1/jobs/${RETRIED_JOB}`)).job;
  assert.deepEqual([stillWaiting.state, stillWaiting.attempt], ['queued', 1], 'the refused one is untouched');
  await expectText('#selected-count', '1 selected');
  assert.equal(await page.locator(`#jobs tr[data-id="${RETRIED_JOB}"] input.pick`).isChecked(), true);
  await page.locator('#clear-selection').click();

  step('jobs: a creation time range (local time in the page, UTC to the API)');
  const inHour = new Date(Date.now() + 3600000);
  const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  await visit(`#/jobs?queue=emails&created_after=${encodeURIComponent(local(inHour))}`);
  await page.locator('#content p.muted', { hasText: 'No jobs match.' }).waitFor();
  await visit(`#/jobs?queue=emails&created_before=${encodeURIComponent(local(inHour))}`);
  await until('the emails jobs created before then', async () => (await rows('jobs').count()) === 5 || (await rows('jobs').count()));
  // A datetime-local input drops ":00" seconds from its value; compare
  // without them (this failed whenever the test ran at a whole minute).
  const noZeroSeconds = (v) => v.replace(/:00$/, '');
  assert.equal(noZeroSeconds(await page.inputValue('#filters input[name=created_before]')), noZeroSeconds(local(inHour)));

  step('jobs: search by id prefix (the API\'s matches); a whole id opens the job');
  const everyId = (await api('GET', '/v1/jobs?limit=100')).jobs.map((j) => j.id);
  const search = async (typed) => {
    await visit('#/jobs');
    await page.fill('#filters input[name=id_prefix]', typed);
    await page.press('#filters input[name=id_prefix]', 'Enter');
    await settled();
  };
  // A short prefix (ids made in the same millisecond share it).
  const short = SUCCEEDED_JOB.slice(0, 8);
  await search(short);
  const sharing = (await api('GET', `/v1/jobs?id_prefix=${short}&limit=50`)).jobs.map((j) => j.id);
  assert.ok(sharing.includes(SUCCEEDED_JOB));
  await until(`the jobs starting ${short}`, async () => (await ids('jobs')).join() === sharing.join() || (await ids('jobs')));
  assert.equal(await page.inputValue('#filters input[name=id_prefix]'), short);
  // The shortest prefix that names one job.
  let n = 9;
  while (everyId.filter((id) => id.startsWith(SUCCEEDED_JOB.slice(0, n))).length > 1) n += 1;
  await search(SUCCEEDED_JOB.slice(0, n));
  await until('the one job', async () => (await ids('jobs')).join() === SUCCEEDED_JOB || (await ids('jobs')));
  await search(SUCCEEDED_JOB.toUpperCase());
  await until('the job opened', async () => (await page.evaluate(() => location.hash)) === `#/jobs/${SUCCEEDED_JOB}` || page.evaluate(() => location.hash));
  await settled();
  await page.locator('.job').waitFor();

  step('workflows: a graph enqueued as one batch, grown at run time, listed with its counts');
  // fetch, then resize and thumb, then publish after both; fetch succeeds
  // and its handler adds notify (after publish) at run time; resize fails
  // for good (publish, then notify, are cancelled by the cascade) while
  // thumb runs.
  const seeded = await post('/v1/jobs/batch', {
    workflow: { name: 'publish-post', idempotency_key: 'post-7' },
    jobs: [
      { queue: 'flows', kind: 'fetch' },
      { queue: 'flows', kind: 'resize', depends_on_entries: [0] },
      { queue: 'flows', kind: 'thumb', depends_on_entries: [0] },
      { queue: 'flows', kind: 'publish', depends_on_entries: [1, 2] },
    ],
  });
  const WF = seeded.workflow_id;
  const [FETCH, RESIZE, THUMB, PUBLISH] = seeded.results.map((r) => r.job.id);
  let tokens = await claim('flows');
  assert.deepEqual([...tokens.keys()], [FETCH]);
  await post(`/v1/jobs/${FETCH}/complete`, { lease_token: tokens.get(FETCH) });
  const NOTIFY = (await post('/v1/jobs', { queue: 'flows', kind: 'notify', workflow_id: WF, depends_on: [PUBLISH] })).job.id;
  tokens = await claim('flows');
  assert.deepEqual([...tokens.keys()].sort(), [RESIZE, THUMB].sort());
  await post(`/v1/jobs/${RESIZE}/fail`, { lease_token: tokens.get(RESIZE), error: 'no luck', fatal: true });
  const thumbToken = tokens.get(THUMB);
  const graphOf = async () => new Map((await api('GET', `/v1/workflows/${WF}`)).jobs.map((j) => [j.id, j.state]));
  assert.deepEqual(Object.fromEntries(await graphOf()), {
    [FETCH]: 'succeeded', [RESIZE]: 'failed', [THUMB]: 'running', [PUBLISH]: 'cancelled', [NOTIFY]: 'cancelled',
  });
  await nav('Workflows', 'workflows');
  const wfRow = `#workflows tr[data-id="${WF}"]`;
  await expectText(`${wfRow} .badge`, 'running');
  await expectText(`${wfRow} td[data-count="jobs"]`, '5');
  for (const [st, n] of [['succeeded', 1], ['failed', 1], ['running', 1], ['cancelled', 2]]) {
    await expectText(`${wfRow} .counts [data-count="${st}"]`, `${n} ${st}`);
  }
  assert.equal(await page.locator(`${wfRow} .counts [data-count="waiting"]`).count(), 0, 'no waiting job, no chip');
  assert.deepEqual(await page.locator('#filters select[name=state] option').allTextContents(),
    ['any', 'running', 'succeeded', 'failed', 'cancelled']);
  await page.selectOption('#filters select[name=state]', 'failed');
  await settled();
  assert.match(page.url(), /#\/workflows\?state=failed/);
  await page.locator('#workflows-empty').waitFor();
  await page.selectOption('#filters select[name=state]', 'running');
  await settled();
  await page.locator(wfRow).waitFor();
  await shot('workflows');
  // A count opens those jobs in the jobs list.
  await page.locator(`${wfRow} .counts a`, { hasText: 'cancelled' }).click();
  await settled();
  await until('the cancelled jobs of the workflow', async () => (await ids('jobs')).sort().join() === [PUBLISH, NOTIFY].sort().join() || (await ids('jobs')));
  assert.equal(await page.inputValue('#filters input[name=workflow_id]'), WF);

  step('a workflow\'s page draws its graph: every job (notify, added at run time, too) in columns by depth, with its state and links');
  await visit('#/workflows');
  await page.locator(`${wfRow} a`, { hasText: 'publish-post' }).click();
  await settled();
  assert.equal(await page.evaluate(() => location.hash), `#/workflows/${WF}`);
  const node = (id) => `#workflow-graph g.node[data-id="${id}"]`;
  const drawnStates = () => page.locator('#workflow-graph g.node').evaluateAll((gs) => Object.fromEntries(gs.map((g) => [g.dataset.id, g.dataset.state])));
  const graphMatches = (what) => until(what, async () => {
    const want = Object.fromEntries(await graphOf());
    const seen = await drawnStates();
    return JSON.stringify(Object.entries(seen).sort()) === JSON.stringify(Object.entries(want).sort()) || { seen, want };
  });
  await graphMatches('the graph as the API reads it');
  assert.equal(await page.locator('#workflow-graph g.node').count(), 5);
  for (const [id, depth] of [[FETCH, 0], [RESIZE, 1], [THUMB, 1], [PUBLISH, 2], [NOTIFY, 3]]) {
    assert.equal(await page.locator(node(id)).getAttribute('data-depth'), String(depth), `the depth of ${id}`);
  }
  // Columns left to right by depth; each box is coloured by its state.
  const boxes = await page.locator('#workflow-graph g.node').evaluateAll((gs) => Object.fromEntries(gs.map((g) => {
    const r = g.getBoundingClientRect();
    return [g.dataset.id, { x: Math.round(r.x), fill: getComputedStyle(g.querySelector('rect')).fill }];
  })));
  assert.equal(boxes[RESIZE].x, boxes[THUMB].x);
  assert.ok(boxes[FETCH].x < boxes[RESIZE].x && boxes[RESIZE].x < boxes[PUBLISH].x && boxes[PUBLISH].x < boxes[NOTIFY].x, JSON.stringify(boxes));
  assert.notEqual(boxes[RESIZE].fill, boxes[THUMB].fill, 'failed and running look different');
  assert.notEqual(boxes[FETCH].fill, boxes[PUBLISH].fill, 'succeeded and cancelled look different');
  assert.match(await page.locator(`${node(NOTIFY)} text.meta`).textContent(), new RegExp(`…${NOTIFY.slice(-8)} · cancelled`));
  assert.equal(await page.locator(`${node(PUBLISH)} text.kind`).textContent(), 'publish');
  // One line per dependency.
  const edges = await page.locator('#workflow-graph path.edge').evaluateAll((ps) => ps.map((p) => `${p.dataset.from}>${p.dataset.to}`).sort());
  assert.deepEqual(edges, [`${FETCH}>${RESIZE}`, `${FETCH}>${THUMB}`, `${RESIZE}>${PUBLISH}`, `${THUMB}>${PUBLISH}`, `${PUBLISH}>${NOTIFY}`].sort());
  await expectText('#workflow-counts [data-count="cancelled"]', '2 cancelled');
  await expectText('.workflow .fields [data-count="jobs"]', '5');
  assert.equal(await page.locator('#workflow-cancel').count(), 1, 'a running workflow can be cancelled');
  assert.equal(await page.locator('#workflow-retry').count(), 1, 'one failed: it can be retried');
  await shot('workflow');
  // A box opens its job, whose page links back to the workflow.
  await page.locator(`${node(NOTIFY)}`).click();
  await settled();
  assert.equal(await page.evaluate(() => location.hash), `#/jobs/${NOTIFY}`);
  await page.locator('.job[data-state=cancelled]').waitFor();
  await expectText('#job-workflow a', WF);
  await page.locator('#job-workflow a').click();
  await settled();
  assert.equal(await page.evaluate(() => location.hash), `#/workflows/${WF}`);
  // The list below the graph: every job, linked, with what it waits for.
  await page.locator('details[data-key^="workflow-jobs:"] summary').click();
  await until('the list of its jobs', async () => (await ids('workflow-jobs')).join() === [FETCH, RESIZE, THUMB, PUBLISH, NOTIFY].join() || (await ids('workflow-jobs')));
  await page.locator('details[data-key^="workflow-jobs:"] summary').click();

  step('a workflow\'s page: thumb succeeds (failed, redrawn), retry failed, retry failed and downstream (asked first), cancel');
  await post(`/v1/jobs/${THUMB}/complete`, { lease_token: thumbToken });
  await page.locator('.workflow[data-state=failed]').waitFor();
  await graphMatches('thumb succeeded, drawn');
  assert.equal(await page.locator('#workflow-cancel').count(), 0, 'a finished workflow has nothing to cancel');
  await page.click('#workflow-retry');
  await page.locator('#flash', { hasText: 'Put back 1 job.' }).waitFor();
  await page.locator('.workflow[data-state=running]').waitFor();
  await graphMatches('resize back in its queue, publish still cancelled');
  assert.equal(await page.locator(node(RESIZE)).getAttribute('data-state'), 'queued');
  assert.equal(await page.locator(node(PUBLISH)).getAttribute('data-state'), 'cancelled');
  tokens = await claim('flows');
  await post(`/v1/jobs/${RESIZE}/fail`, { lease_token: tokens.get(RESIZE), error: 'no luck again', fatal: true });
  await page.locator('.workflow[data-state=failed]').waitFor();
  asked = dialogs.length;
  await page.click('#workflow-retry-downstream');
  await page.locator('#flash', { hasText: 'Put back 3 jobs.' }).waitFor();
  assert.match(dialogs[asked], /^Retry the failed jobs and every finished job downstream/);
  await graphMatches('resize queued, publish and notify waiting again');
  for (const [id, st] of [[RESIZE, 'queued'], [PUBLISH, 'waiting'], [NOTIFY, 'waiting']]) {
    assert.equal(await page.locator(node(id)).getAttribute('data-state'), st);
  }
  asked = dialogs.length;
  await page.click('#workflow-cancel');
  await page.locator('#flash', { hasText: 'Cancelled 3 jobs at once; asked 0 running jobs to stop.' }).waitFor();
  assert.equal(dialogs[asked], 'Cancel every unfinished job of this workflow?');
  await page.locator('.workflow[data-state=cancelled]').waitFor();
  await graphMatches('every unfinished job cancelled');
  assert.equal((await api('GET', `/v1/workflows/${WF}`)).state, 'cancelled');
  await shot('workflow-cancelled');

  step('every view fits an 800 px window: only a table\'s own box scrolls sideways');
  await page.setViewportSize({ width: 800, height: 860 });
  await page.locator('#view h1').click(); // out of the search field: refreshes go on
  await until('a refresh after the typing', async () => /^Updated /.test(await text('#status')) || text('#status'));
  // What sticks out of the window, outside a box that scrolls sideways.
  const overflowing = () => page.evaluate(() => {
    const out = [];
    for (const node of document.querySelectorAll('body *')) {
      const r = node.getBoundingClientRect();
      if (r.width === 0 || r.right <= window.innerWidth + 0.5) continue;
      let boxed = false;
      for (let a = node.parentElement; a && a !== document.body; a = a.parentElement) {
        if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX) && a.getBoundingClientRect().right <= window.innerWidth + 0.5) { boxed = true; break; }
      }
      if (!boxed) out.push(`${node.tagName.toLowerCase()}${node.id ? `#${node.id}` : ''}${node.className && typeof node.className === 'string' ? `.${node.className.split(' ').join('.')}` : ''} ends at ${Math.round(r.right)}`);
    }
    return { width: document.documentElement.scrollWidth, out: out.slice(0, 10) };
  });
  for (const [hash, name] of [['#/', 'overview-800'], ['#/queues/images', 'queue-chart-800'], ['#/jobs', null], ['#/dlq', null],
    [`#/jobs/${FAILED_JOB}`, null], [`#/jobs/${WAITING_JOB}`, 'job-waiting-800'], [`#/jobs/${PARENT_JOB}`, null],
    ['#/schedules', 'schedules-800'], ['#/workers', null], ['#/workflows', null], [`#/workflows/${WF}`, 'workflow-800']]) {
    await visit(hash);
    await sleep(200);
    const seen = await overflowing();
    assert.ok(seen.width <= 800 && seen.out.length === 0, `${hash} at 800 px: ${JSON.stringify(seen)}`);
    if (name) await shot(name);
  }
  // The jobs list with two ticked, as a bulk action sees it.
  await visit('#/jobs?queue=emails');
  for (const id of (await ids('jobs')).slice(0, 2)) await page.locator(`#jobs tr[data-id="${id}"] input.pick`).check();
  await expectText('#selected-count', '2 selected');
  assert.ok((await overflowing()).out.length === 0);
  await shot('jobs-800');
  await page.locator('#clear-selection').click();
  await page.setViewportSize({ width: 1360, height: 860 });

  step('queue view: an empty queue (a typo) is removed after a question; one with jobs offers no removal');
  const paused = await fetch(`${BASE}/v1/queues/emials/pause`, { method: 'POST', headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(paused.status, 200);
  await visit('#/queues/emials');
  const askedBefore = dialogs.length;
  await page.click('#remove-queue');
  await page.locator('#queues').waitFor();
  assert.match(dialogs[askedBefore], /^Remove the empty queue emials/);
  assert.equal(await page.locator('#queues tr[data-queue="emials"]').count(), 0);
  assert.equal((await api('GET', '/v1/queues')).queues.some((q) => q.name === 'emials'), false);
  await visit('#/queues/emails');
  await page.locator('#queue-counts').waitFor();
  assert.equal(await page.locator('#remove-queue').count(), 0);

  step('tenant switcher: the admin key looks at another tenant (its queues and jobs only), kept across a reload, then back');
  // The switcher sends the tenant's id, never its name (an old tenant may be named like another's id).
  const OTHER_TENANT_ID = (await api('GET', '/v1/tenants')).tenants.find((t) => t.name === OTHER_TENANT).id;
  await nav('Overview', 'queues');
  assert.equal(await page.locator('#tenant-switch').isVisible(), true);
  assert.deepEqual(await page.locator('#tenant option').allTextContents(), ['default', OTHER_TENANT]);
  assert.equal(await text('#tenant-label'), 'tenant');
  assert.deepEqual([...new Set(actingFor)], [''], 'until a switch, every request is the key\'s own tenant\'s');
  let sentBefore = actingFor.length;
  await page.selectOption('#tenant', OTHER_TENANT);
  await page.locator(`#queues tr[data-queue="${OTHER_QUEUE}"]`).waitFor();
  assert.equal(await page.locator('#queues tbody tr').count(), 1, 'only the other tenant\'s queue');
  assert.equal(await text('#tenant-label'), 'viewing tenant');
  assert.match(await page.locator('#tenant-switch').getAttribute('class'), /acting/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.tenant')), OTHER_TENANT_ID);
  assert.equal(await page.evaluate(() => document.body.dataset.tenant), OTHER_TENANT);
  await nav('Jobs', 'jobs');
  await until('the other tenant\'s one job', async () => (await ids('jobs')).join() === OTHER_JOB || (await ids('jobs')));
  assert.deepEqual(await (await api('GET', '/v1/jobs', OTHER_TENANT)).jobs.map((j) => j.id), [OTHER_JOB]);
  await shot('tenant-other');
  assert.deepEqual([...new Set(actingFor.slice(sentBefore))], [OTHER_TENANT_ID], 'each request after the switch names the tenant by id');
  await page.reload();
  await page.locator(`#jobs tr[data-id="${OTHER_JOB}"]`).waitFor();
  assert.equal(await page.inputValue('#tenant'), OTHER_TENANT_ID, 'the choice is kept in this tab');
  assert.equal(await page.evaluate(() => document.body.dataset.tenant), OTHER_TENANT);
  assert.equal(await page.locator(`#jobs tr[data-id="${FAILED_JOB}"]`).count(), 0);
  sentBefore = actingFor.length;
  await page.selectOption('#tenant', 'default');
  await until('the default tenant\'s jobs', async () => (await ids('jobs')).includes(FAILED_JOB) || (await ids('jobs')));
  assert.equal(await page.locator(`#jobs tr[data-id="${OTHER_JOB}"]`).count(), 0);
  assert.equal(await text('#tenant-label'), 'tenant');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.tenant')), null);
  assert.deepEqual([...new Set(actingFor.slice(sentBefore))], [''], 'back to the key\'s own tenant');

  step('overview after the replays: nothing failed');
  await nav('Overview', 'queues');
  await expectText(cell('reports', 'failed'), '0');
  await expectText(cell('billing', 'failed'), '0');

  step('live: with the timer at an hour, the page follows GET /v1/events (counts, lists, a job\'s page, a workflow\'s graph)');
  // The stream's requests: how many are open at once (one per page) and
  // the cursor each resumes from.
  const streams = { open: new Set(), most: 0, resumed: [] };
  const isStream = (r) => new URL(r.url()).pathname === '/v1/events';
  page.on('request', (r) => {
    if (!isStream(r)) return;
    streams.open.add(r);
    streams.most = Math.max(streams.most, streams.open.size);
    streams.resumed.push(r.headers()['last-event-id'] || null);
  });
  const streamGone = (r) => streams.open.delete(r);
  page.on('requestfinished', streamGone);
  page.on('requestfailed', streamGone);
  // Within this bound, not the hour: a stalled host must not fail it, and
  // the timer could not have done it.
  const LIVE = 30000;
  await page.goto(`${BASE}/?refresh_ms=3600000#/`);
  await page.locator('#queues').waitFor();
  await isLive();
  assert.equal(await page.evaluate(() => document.body.dataset.refreshMs), '3600000');
  await expectText('#live', 'live');
  // The overview: every queue has its sparkline (jobs finished a minute).
  const everyQueue = (await api('GET', '/v1/queues')).queues.map((x) => x.name);
  for (const name of everyQueue) await page.locator(`#queues tr[data-queue="${name}"] svg.spark path.line`).waitFor({ state: 'attached' });
  assert.equal(await page.locator('#queues svg.spark').count(), everyQueue.length);
  const imagesLine = await page.locator('#queues svg.spark[data-spark="images"]').getAttribute('data-counts');
  assert.equal(imagesLine.split(',').length, 30);
  assert.equal(imagesLine.split(',').map(Number).reduce((a, b) => a + b, 0), 1, 'images: one job succeeded (the others retried, cancelled)');
  await expectText(`${cell('images', 'finished')} .spark-total`, '1');
  // A job enqueued, claimed and completed through the API shows up live.
  const LIVE_JOB = (await post('/v1/jobs', { queue: 'live', kind: 'tick' })).job.id;
  await expectText(cell('live', 'queued'), '1', LIVE);
  await expectText(`${cell('live', 'finished')} .spark-total`, '0', LIVE);
  let liveTokens = await claim('live');
  await expectText(cell('live', 'running'), '1', LIVE);
  await post(`/v1/jobs/${LIVE_JOB}/complete`, { lease_token: liveTokens.get(LIVE_JOB) });
  await expectText(cell('live', 'succeeded'), '1', LIVE);
  await expectText(cell('live', 'queued'), '0', LIVE);
  await expectText(`${cell('live', 'finished')} .spark-total`, '1', LIVE);
  await shot('overview-live');
  // The jobs list gains a row.
  await visit('#/jobs?queue=live');
  await until('the live job listed', async () => (await ids('jobs')).join() === LIVE_JOB || (await ids('jobs')), LIVE);
  const LIVE_JOB2 = (await post('/v1/jobs', { queue: 'live', kind: 'tock' })).job.id;
  await until('the new job listed', async () => (await ids('jobs')).includes(LIVE_JOB2) || (await ids('jobs')), LIVE);
  // A job's page follows its state and history.
  await visit(`#/jobs/${LIVE_JOB2}`);
  await page.locator('.job[data-state=queued]').waitFor();
  liveTokens = await claim('live');
  await page.locator('.job[data-state=running]').waitFor({ timeout: LIVE });
  await post(`/v1/jobs/${LIVE_JOB2}/complete`, { lease_token: liveTokens.get(LIVE_JOB2), result: { ok: true } });
  await page.locator('.job[data-state=succeeded]').waitFor({ timeout: LIVE });
  await page.locator('#history tr[data-event=succeeded]').waitFor({ timeout: LIVE });
  assert.match(await text('details[data-key^="result:"] pre'), /"ok": true/);
  // A workflow's graph redraws a job as it finishes.
  const flow = await post('/v1/jobs/batch', {
    workflow: { name: 'live-flow' },
    jobs: [{ queue: 'live-flow', kind: 'first' }, { queue: 'live-flow', kind: 'second', depends_on_entries: [0] }],
  });
  const [FIRST, SECOND] = flow.results.map((r) => r.job.id);
  await visit(`#/workflows/${flow.workflow_id}`);
  await page.locator(`#workflow-graph g.node[data-id="${SECOND}"][data-state=waiting]`).waitFor();
  liveTokens = await claim('live-flow');
  await post(`/v1/jobs/${FIRST}/complete`, { lease_token: liveTokens.get(FIRST) });
  await page.locator(`#workflow-graph g.node[data-id="${FIRST}"][data-state=succeeded]`).waitFor({ timeout: LIVE });
  await page.locator(`#workflow-graph g.node[data-id="${SECOND}"][data-state=queued]`).waitFor({ timeout: LIVE });
  assert.equal(await page.evaluate(() => document.body.dataset.refreshMs), '3600000', 'the timer never ran');

  step('live: a stream that ends is resumed right after the last id it delivered');
  // A real cursor, the last the page saw; a first stream that hands it
  // over (CRLF lines, a heartbeat) and ends, as a proxy cutting it would.
  const CURSOR = await page.evaluate(() => stream.cursor); // eslint-disable-line no-undef
  assert.ok(CURSOR, 'the page keeps the last id it saw');
  const data = { cursor: CURSOR, job_id: LIVE_JOB2, workflow_id: null, queue: 'live', kind: 'tock', event: 'succeeded', state: 'succeeded' };
  let cut = false;
  const cutOnce = (url) => url.pathname === '/v1/events';
  await page.route(cutOnce, (r) => {
    if (cut) return r.continue();
    cut = true;
    return r.fulfill({ status: 200, contentType: 'text/event-stream',
      body: `: heartbeat\r\n\r\nid: ${CURSOR}\r\nevent: succeeded\r\ndata: ${JSON.stringify(data)}\r\n\r\n` });
  });
  await visit('#/');
  const opened = streams.resumed.length;
  await page.reload(); // a new page (a goto that changes only the hash is none)
  await page.locator('#queues').waitFor();
  await until('a second stream', () => streams.resumed.length >= opened + 2 || streams.resumed.slice(opened));
  assert.deepEqual(streams.resumed.slice(opened, opened + 2), [null, CURSOR], 'the second stream resumes after the first one\'s last id');
  await isLive();
  await page.unroute(cutOnce);
  // And it is live: a job enqueued now shows.
  await post('/v1/jobs', { queue: 'live', kind: 'tick' });
  await expectText(cell('live', 'queued'), '1', LIVE);
  assert.equal(streams.most, 1, 'one stream per page at a time');

  step('live: the page\'s reader of server-sent events takes lines split anywhere');
  // CR LF cut between chunks, a message over three chunks, data on two
  // lines, comments; what it hands on and the id it would resume from.
  const parsed = await page.evaluate(async () => {
    /* eslint-disable no-undef */
    const seen = [];
    const kept = { cursor: stream.cursor, onMessage };
    onMessage = (name, data) => seen.push([name, data]);
    const chunks = [': hi\r', '\n\r\nid: 1\r', '\nevent: succeeded\ndata: {"a":', '1}\ndata:x\r\n\r', '\nid: 2\nevent: gap\ndata: {}\n', '\n: tail\n\n'];
    const body = new ReadableStream({ start(c) { for (const t of chunks) c.enqueue(new TextEncoder().encode(t)); c.close(); } });
    try {
      await readStream(body, new AbortController());
      return { seen, cursor: stream.cursor };
    } finally {
      onMessage = kept.onMessage;
      stream.cursor = kept.cursor;
    }
    /* eslint-enable no-undef */
  });
  assert.deepEqual(parsed, { seen: [['succeeded', '{"a":1}\nx'], ['gap', '{}']], cursor: '2' });

  step('live: a refused stream (429) falls back to refreshing every 5 s, and says so');
  const refuse = (url) => url.pathname === '/v1/events';
  await page.route(refuse, (r) => r.fulfill({ status: 429, contentType: 'application/json',
    body: JSON.stringify({ error: { code: 'too_many_requests', message: 'this tenant has 64 event streams open, the most allowed' } }) }));
  await page.goto(`${BASE}/#/`);
  await page.locator('#queues').waitFor();
  await until('the fallback', async () => (await liveState()) === 'polling' || liveState());
  await expectText('#live', 'refreshing every 5s');
  assert.match(await page.locator('#live').getAttribute('title'), /too_many_requests.*trying again in 1m/);
  assert.equal(await page.evaluate(() => document.body.dataset.refreshMs), '5000');
  await waitRenders(1); // the timer runs
  await shot('overview-polling');
  await page.unroute(refuse);
  await page.goto(`${BASE}/?refresh_ms=${REFRESH_MS}#/`);
  await page.locator('#queues').waitFor();
  await isLive();

  step('sign out forgets the key');
  await page.click('#sign-out');
  await page.locator('#sign-in').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tether.key')), null);
  await page.reload();
  await page.locator('#sign-in').waitFor();
  assert.equal(await page.locator('#nav').isHidden(), true);

  step('a tenant\'s own (non-admin) key sees its tenant and no switcher');
  sentBefore = actingFor.length;
  await page.fill('#key', OTHER_KEY);
  await page.click('#sign-in button[type=submit]');
  await page.locator(`#queues tr[data-queue="${OTHER_QUEUE}"]`).waitFor();
  assert.equal(await page.locator('#queues tbody tr').count(), 1);
  await waitRenders(1);
  assert.equal(await page.locator('#tenant-switch').isHidden(), true);
  assert.deepEqual([...new Set(actingFor.slice(sentBefore))], [''], 'a tenant key never sends X-Tether-Tenant');
  assert.ok(!requests.slice(sentBefore).some((r) => r.startsWith('/v1/tenants')), 'no tenant list for a tenant key');

  step('a link cannot make the page refresh back to back: refresh_ms is kept between 1 s and 1 h (else 30 s, live)');
  for (const [asked, kept] of [['1', 1000], ['0.5', 1000], ['0', 30000], ['-5', 30000], ['nope', 30000], ['1e12', 3600000]]) {
    await page.goto(`${BASE}/?refresh_ms=${asked}`);
    await page.locator('#queues').waitFor();
    await isLive();
    assert.equal(await page.evaluate(() => Number(document.body.dataset.refreshMs)), kept, `refresh_ms=${asked}`);
  }
  await page.goto(`${BASE}/?refresh_ms=1`);
  await page.locator('#queues').waitFor();
  await isLive();
  // The read the stream's opening asks for is done.
  await until('the page at rest', () => page.evaluate(() => !dirty && liveTimer === null && inflight === 0)); // eslint-disable-line no-undef
  const rendered = await renders();
  await sleep(2500);
  const refreshes = (await renders()) - rendered;
  assert.ok(refreshes <= 3, `${refreshes} refreshes in 2.5 s with refresh_ms=1`);

  assert.deepEqual(problems, [], 'the page reported errors');
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  console.log(`dashboard: all browser checks passed; screenshots in ${OUT}`);
} catch (e) {
  console.error(`dashboard: FAILED: ${e.stack || e}`);
  if (problems.length) console.error(`page problems:\n${problems.join('\n')}`);
  if (page) {
    await page.screenshot({ path: path.join(OUT, 'failure.png'), fullPage: true }).catch(() => {});
    console.error(`screenshot of the failure: ${path.join(OUT, 'failure.png')}`);
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
