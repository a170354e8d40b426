// The web console in a real headless Chromium (Debian's), driven by playwright-core, against
// a real `runway server` that crates/runway-cli/tests/console.rs started. It signs in, sees the
// deployed service, asks that test to deploy (a line `deploy-now` on stdout) and watches the
// new revision roll out without a reload, rolls back from the page, finds "Delete service" in
// the danger zone at the bottom, asks for a canary under load (`canary-now`) and watches it:
// listed among the requests once routed, its figures charted, its analysis as the API says it (against the
// limits of its manifest), the log lines of its instances in time order; aborts it from the
// page and sees its revision marked rejected (never "progressing", no "roll back to"), adds a custom domain
// through the domains page (bad names refused at the field) and removes it, checks what a
// deploy token sees (its own service's domains, no form), that a cross-site change with the
// cookie is refused, and that signing out ends the session. It measures the first page's weight and time, writes screenshots, and exits 0
// only when every check held.
//
// Environment: RUNWAY_API (https://127.0.0.1:PORT), RUNWAY_ADMIN_TOKEN, RUNWAY_DEPLOY_TOKEN
// (a deploy token of service `other`), RUNWAY_SCREENSHOTS (a directory), RUNWAY_CHROMIUM
// (default /usr/bin/chromium); playwright-core found through NODE_PATH.

import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import https from 'node:https';
import { createInterface } from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const API = process.env.RUNWAY_API;
const ADMIN = process.env.RUNWAY_ADMIN_TOKEN;
const DEPLOY = process.env.RUNWAY_DEPLOY_TOKEN;
const VIEWER = process.env.RUNWAY_VIEWER_TOKEN;
const MAINTAINER = process.env.RUNWAY_MAINTAINER_TOKEN;
const SHOTS = process.env.RUNWAY_SCREENSHOTS;
const CHROMIUM = process.env.RUNWAY_CHROMIUM || '/usr/bin/chromium';
for (const [name, value] of Object.entries({ RUNWAY_API: API, RUNWAY_ADMIN_TOKEN: ADMIN, RUNWAY_DEPLOY_TOKEN: DEPLOY, RUNWAY_SCREENSHOTS: SHOTS })) {
  if (!value) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
}
mkdirSync(SHOTS, { recursive: true });

// The whole run is bounded, whatever hangs.
const bound = setTimeout(() => {
  console.error('console.mjs: over its 300 s bound');
  process.exit(3);
}, 300_000);

const step = (text) => console.log(`step: ${text}`);
function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}
const shot = (page, name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });

// Lines from the Rust side (`deployed`), read as they come.
const stdinLines = [];
let stdinWaiter = null;
createInterface({ input: process.stdin }).on('line', (line) => {
  stdinLines.push(line.trim());
  if (stdinWaiter) stdinWaiter();
});
async function waitForLine(wanted, ms) {
  const deadline = Date.now() + ms;
  while (!stdinLines.includes(wanted)) {
    check(Date.now() < deadline, `no "${wanted}" from the test within ${ms} ms`);
    await new Promise((resolve) => { stdinWaiter = resolve; setTimeout(resolve, 500); });
  }
}

/** The admin's view through the API, as the CLI would see it. */
async function apiAs(request, token, method, path, body) {
  const response = await request.fetch(`${API}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}` },
    data: body,
  });
  return { status: response.status(), body: await response.json().catch(() => null) };
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
const origin = new URL(API).origin;
const foreign = [];
const consoleErrors = [];
function watchRequests(page) {
  page.on('request', (request) => {
    const url = request.url();
    if (!url.startsWith(origin) && !url.startsWith('data:') && !url.startsWith('about:')) foreign.push(url);
  });
  page.on('console', (message) => {
    if (message.type() === 'error') consoleErrors.push(message.text());
  });
  page.on('pageerror', (error) => consoleErrors.push(String(error)));
}

let failed = null;
try {
  const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  watchRequests(page);

  // ---- sign in ------------------------------------------------------------------------
  step('sign in');
  const root = await page.goto(`${API}/`);
  check(page.url() === `${API}/ui/`, `GET / lands on /ui/, not ${page.url()}`);
  const headers = root.headers();
  check(headers['content-security-policy'] === "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    `the page's CSP: ${headers['content-security-policy']}`);
  await page.getByLabel('Runway token').waitFor();
  // Keyboard: the skip link comes first in the tab order, and the token field has the focus.
  check(await page.evaluate(() => document.querySelector('a[href], button, input, select, textarea, [tabindex]').classList.contains('skip')),
    'the skip link is the first thing the keyboard reaches');
  check(await page.evaluate(() => document.activeElement.id === 'token'), 'the token field has the focus');
  await shot(page, '01-sign-in');
  await page.getByLabel('Runway token').fill('runway_admin_not-a-real-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'not a token this server knows' }).waitFor();
  await page.getByLabel('Runway token').fill(ADMIN);
  await page.getByLabel('Runway token').press('Enter');

  // ---- the services at a glance ---------------------------------------------------------
  step('see the deployed service');
  await page.locator('main[data-ready="true"] h1', { hasText: 'Services' }).waitFor();
  const helloCard = page.locator('section.card', { has: page.getByRole('heading', { name: 'hello' }) });
  await helloCard.getByText('hello-dev-00001').first().waitFor();
  check(await helloCard.getByText('1 of 1 ready').count() > 0, 'hello in dev shows 1 of 1 ready');
  check(await page.getByText('Signed in as').textContent().then((t) => t.includes('console: admin')), 'the header names the session');
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === 'runway_session');
  check(session && session.httpOnly && session.secure && session.sameSite === 'Strict', `the session cookie: ${JSON.stringify(session && { ...session, value: '…' })}`);
  check(await page.evaluate(() => document.cookie.includes('runway_session')) === false, 'scripts cannot read the session cookie');
  await shot(page, '02-services');

  // ---- first load: bytes and time, in a fresh context (nothing cached) ---------------------
  step('measure the first load');
  const cold = await browser.newContext({ ignoreHTTPSErrors: true });
  await cold.addCookies([{ ...session }]);
  const coldPage = await cold.newPage();
  watchRequests(coldPage);
  await coldPage.goto(`${API}/ui/`);
  await coldPage.locator('main[data-ready="true"]').waitFor();
  const load = await coldPage.evaluate(() => {
    const navigation = performance.getEntriesByType('navigation')[0];
    const resources = performance.getEntriesByType('resource');
    const files = resources.filter((r) => new URL(r.name).pathname.startsWith('/ui/'));
    const sum = (entries) => entries.reduce((total, r) => total + r.transferSize, 0);
    const rendered = performance.getEntriesByName('runway:rendered')[0];
    return {
      bytes: navigation.transferSize + sum(resources),
      console_bytes: navigation.transferSize + sum(files),
      api_bytes: sum(resources) - sum(files),
      requests: 1 + resources.length,
      dom_content_loaded_ms: Math.round(navigation.domContentLoadedEventEnd),
      rendered_ms: Math.round(rendered.startTime),
    };
  });
  console.log(`metric: ${JSON.stringify(load)}`);
  check(load.bytes < 100_000, `the first page weighs ${load.bytes} bytes, over 100 KB`);
  await cold.close();

  // ---- one service, live -------------------------------------------------------------
  step('open hello in dev and watch a deploy roll out');
  await helloCard.getByRole('link', { name: 'dev', exact: true }).click();
  await page.getByRole('heading', { name: 'hello in dev' }).waitFor();
  await page.locator('.live.on').first().waitFor();
  await page.locator('.logs').getByText('listening on').first().waitFor({ timeout: 20_000 });
  check(await page.locator('#serving').textContent() === 'hello-dev-00001', 'hello-dev-00001 serves');
  await page.evaluate(() => { window.runwayNoReload = true; });
  let navigations = 0;
  page.on('framenavigated', (frame) => { if (frame === page.mainFrame()) navigations += 1; });
  console.log('deploy-now');
  await page.waitForFunction(() => document.querySelector('#serving')?.textContent === 'hello-dev-00002', null, { timeout: 120_000 });
  await page.locator('#routes').getByText('hello-dev-00002').waitFor();
  await page.locator('section[aria-labelledby="instances-h"]').getByText('hello-dev-00002', { exact: false }).first().waitFor();
  await page.locator('details.deployment', { hasText: 'to hello-dev-00002' }).first().waitFor();
  await page.locator('section[aria-labelledby="revisions-h"]').getByText('hello-dev-00002').first().waitFor();
  check(await page.evaluate(() => window.runwayNoReload === true) && navigations === 0, 'the page was not reloaded');
  await waitForLine('deployed', 120_000);
  // The deployment's events arrived live.
  const newest = page.locator('details.deployment').first();
  if (!(await newest.evaluate((d) => d.open))) await newest.locator('summary').click();
  await newest.locator('li').first().waitFor();
  await shot(page, '03-service-dev');

  // ---- roll back from the page -------------------------------------------------------
  step('roll back to hello-dev-00001');
  await page.locator('[data-key="rollback-hello-dev-00001"]').click();
  const dialog = page.locator('dialog#confirm');
  await dialog.waitFor();
  check(await dialog.evaluate((d) => d.open && d.contains(document.activeElement)), 'the dialog holds the focus');
  await page.keyboard.press('Escape');
  await dialog.waitFor({ state: 'hidden' });
  const before = await apiAs(page.request, ADMIN, 'GET', '/v1/services/hello/environments/dev/status');
  check(before.body.desired.some((d) => d.revision === 'hello-dev-00002'), 'a cancelled dialog changes nothing');
  await page.locator('[data-key="rollback-hello-dev-00001"]').click();
  await shot(page, '04-confirm-rollback');
  await dialog.getByRole('button', { name: 'Roll back to hello-dev-00001' }).click();
  await page.locator('#outcome').getByText(/Rollback #\d+ started/).waitFor();
  const deadline = Date.now() + 30_000;
  let desired;
  for (;;) {
    desired = (await apiAs(page.request, ADMIN, 'GET', '/v1/services/hello/environments/dev/status')).body.desired;
    if (desired.length === 1 && desired[0].revision === 'hello-dev-00001' && desired[0].weight === 100) break;
    check(Date.now() < deadline, `the desired state after the rollback: ${JSON.stringify(desired)}`);
    await page.waitForTimeout(250);
  }
  await page.waitForFunction(() => document.querySelector('#serving')?.textContent === 'hello-dev-00001', null, { timeout: 60_000 });

  // ---- maintenance shows on the page, live -----------------------------------------------
  step('maintenance shows in the summary while it lasts');
  const maintenancePath = '/v1/services/hello/environments/dev/maintenance';
  const put = await apiAs(page.request, ADMIN, 'PUT', maintenancePath, { message: 'Back by noon', allow: ['192.0.2.0/24'] });
  check(put.status === 200, `maintenance on: ${put.status}`);
  const note = page.locator('#maintenance');
  await note.waitFor({ timeout: 30_000 });
  const said = await note.textContent();
  check(said.includes('In maintenance') && said.includes('Back by noon') && said.includes('192.0.2.0/24'), `the note says ${said}`);
  await shot(page, '04b-maintenance');
  const ended = await apiAs(page.request, ADMIN, 'DELETE', maintenancePath);
  check(ended.status === 204, `maintenance off: ${ended.status}`);
  await note.waitFor({ state: 'detached', timeout: 30_000 });

  // ---- "Delete service" in a danger zone, away from the summary --------------------------
  step('delete service sits in the danger zone at the bottom');
  const deletePlace = await page.evaluate(() => {
    const buttons = document.querySelectorAll('[data-key="delete"]');
    const zone = buttons[0]?.closest('section');
    const logs = document.querySelector('section[aria-labelledby="logs-h"]');
    const summary = document.querySelector('section[aria-labelledby="summary-h"]');
    return {
      buttons: buttons.length,
      heading: zone?.querySelector('h2')?.textContent,
      last: Boolean(zone) && zone === document.querySelector('main').lastElementChild,
      afterLogs: Boolean(zone) && Boolean(logs.compareDocumentPosition(zone) & Node.DOCUMENT_POSITION_FOLLOWING),
      nearSummary: summary.contains(buttons[0]) || Boolean(summary.nextElementSibling?.querySelector('[data-key="delete"]')),
    };
  });
  check(deletePlace.buttons === 1 && deletePlace.heading === 'Danger zone' && deletePlace.last && deletePlace.afterLogs
    && !deletePlace.nearSummary, `the delete button's place: ${JSON.stringify(deletePlace)}`);

  // ---- a canary under load, watched live ------------------------------------------------
  step('a canary: its requests as it takes traffic, its analysis against its limits, charts');
  console.log('canary-now');
  await waitForLine('canary-started', 120_000);
  const rolloutBox = page.locator('section[aria-labelledby="rollout-h"]');
  await rolloutBox.getByRole('heading', { name: 'Rollout in progress' }).waitFor({ timeout: 60_000 });
  // Listed among the requests from the moment it is routed, before its figures.
  const requestsBox = page.locator('section[aria-labelledby="requests-h"]');
  await requestsBox.locator('tbody tr', { hasText: 'hello-dev-00003' }).waitFor({ timeout: 60_000 });
  const canaryRequestsRouted = Date.now();
  // Its figures once the control plane has read the ingress twice (every 10 s), charted.
  await page.waitForFunction(() => {
    const row = [...document.querySelectorAll('section[aria-labelledby="requests-h"] tbody tr')]
      .find((r) => r.cells[0].textContent.startsWith('hello-dev-00003'));
    const figure = row?.cells[2].querySelector('.metric > span');
    return row && row.querySelectorAll('svg.spark').length === 3 && parseFloat(figure?.textContent) > 0;
  }, null, { timeout: 45_000 });
  console.log(`metric: {"canary_figures_after_routed_ms": ${Date.now() - canaryRequestsRouted}}`);
  const charts = await page.evaluate(() => [...document.querySelectorAll('section[aria-labelledby="requests-h"] svg.spark')]
    .map((s) => s.getAttribute('aria-label')));
  check(charts.some((label) => label.startsWith('Requests per second of hello-dev-00001'))
    && charts.some((label) => label.startsWith('5xx share of hello-dev-00003'))
    && charts.some((label) => label.startsWith('p99 latency of hello-dev-00003')), `the charts: ${charts}`);
  // The analysis is the API's (`rollout.analysis` of the status), shown as it says it: the
  // counts since the step began, the limits of the canary's manifest, how each stands.
  const analysisBox = page.locator('#analysis');
  await analysisBox.waitFor();
  const shown = () => page.evaluate(() => {
    const table = document.querySelector('#analysis table');
    const rows = Object.fromEntries([...table.querySelectorAll('tbody tr')]
      .map((r) => [r.cells[0].textContent, [...r.cells].slice(1).map((c) => c.textContent)]));
    return {
      columns: [...table.querySelectorAll('thead th')].map((th) => th.textContent),
      rows,
      verdict: document.getElementById('analysis-verdict').textContent,
    };
  });
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#analysis tbody tr')];
    const row = (name) => rows.find((r) => r.cells[0].textContent === name);
    return parseInt(row('Requests')?.cells[1].textContent, 10) > 0 && parseFloat(row('5xx')?.cells[1].textContent) > 0;
  }, null, { timeout: 45_000 });
  const statusPath = '/v1/services/hello/environments/dev/status';
  const apiAnalysis = async () => (await apiAs(page.request, ADMIN, 'GET', statusPath)).body.rollout?.analysis;
  // The counts move under load: what the page shows lies between the API's answer before
  // its last second's update and the API's answer after.
  let compared = null;
  for (let attempt = 0; attempt < 10 && !compared?.ok; attempt += 1) {
    const before = await apiAnalysis();
    await page.waitForTimeout(1_500);
    const seen = await shown();
    const after = await apiAnalysis();
    const requests = parseInt(seen.rows.Requests[0], 10);
    const errors = /\((\d+) of (\d+)\)$/.exec(seen.rows['5xx'][0]);
    const limits = {
      Requests: `at least ${after.thresholds.min_requests} to ${after.revision} to judge it`,
      Restarts: `at most ${after.thresholds.max_restarts}`,
      'Readiness failures': `at most ${after.thresholds.max_readiness_failures}`,
    };
    const words = { within: 'within', over: 'over', too_few: 'too few', unmeasured: 'no figure' };
    compared = {
      ok: before.canary.requests <= requests && requests <= after.canary.requests
        && errors !== null && Number(errors[2]) === requests
        && before.canary.errors_5xx <= Number(errors[1]) && Number(errors[1]) <= after.canary.errors_5xx
        && seen.columns[1] === after.revision && seen.columns[2] === after.stable_revision
        && Object.entries(limits).every(([row, limit]) => seen.rows[row][2] === limit)
        && seen.rows['5xx'][2].startsWith(`at most 2.5 %`) && after.thresholds.max_error_ratio === 0.025
        && seen.rows.Requests[3] === 'too few' && after.checks.requests.standing === 'too_few'
        && seen.rows['5xx'][3] === words[after.checks.error_ratio.standing]
        && seen.rows.Restarts[3] === words[after.checks.restarts.standing]
        && after.verdict === 'inconclusive'
        && /^Verdict now: inconclusive \d+ requests to the new revision, fewer than the 100000 needed to judge it$/.test(seen.verdict),
      seen,
      before: before.canary,
      after,
    };
  }
  check(compared.ok, `the analysis shown is the API's: ${JSON.stringify(compared)}`);
  const analysisText = await analysisBox.textContent();
  check(analysisText.includes('after 3 windows without a verdict'), `the analysis's rules: ${analysisText}`);
  check(/^at 20 %/.test(await page.locator('#rollout-message').textContent()),
    `the controller's words: ${await page.locator('#rollout-message').textContent()}`);

  step('log lines of several instances in time order');
  // Both canary instances log every request they answer, each stream read on its own.
  await page.waitForFunction(() => new Set([...document.querySelectorAll('.logs > div')]
    .filter((d) => d.textContent.includes('"GET / HTTP/1.1"')).map((d) => d.dataset.instance)).size >= 2, null, { timeout: 30_000 });
  await page.waitForTimeout(3_000);
  const logOrder = await page.evaluate(() => {
    const key = (time) => {
      const match = /^(.{19})(?:\.(\d{1,9}))?Z$/.exec(time);
      return match ? `${match[1]}.${(match[2] || '').padEnd(9, '0')}` : null;
    };
    const lines = [...document.querySelectorAll('.logs > div')].map((d) => ({ time: d.dataset.time, instance: d.dataset.instance }));
    const out = lines.findIndex((line, i) => i > 0 && key(line.time) < key(lines[i - 1].time));
    return {
      lines: lines.length,
      timed: lines.filter((line) => key(line.time)).length,
      instances: new Set(lines.map((line) => line.instance)).size,
      out: out < 0 ? null : lines.slice(out - 1, out + 1),
    };
  });
  check(logOrder.out === null && logOrder.timed === logOrder.lines && logOrder.instances >= 2,
    `the log lines' order: ${JSON.stringify(logOrder)}`);
  await shot(page, '04b-canary');

  step('abort the canary from the page: its revision is rejected');
  await rolloutBox.locator('[data-key="rollout-abort"]').click();
  await dialog.getByRole('button', { name: 'Abort' }).click();
  await page.locator('#outcome').getByText(/Abort: asked of deployment #\d+/).waitFor();
  const rejectedRow = page.locator('section[aria-labelledby="revisions-h"] tbody tr', { hasText: 'hello-dev-00003' });
  await rejectedRow.locator('.state', { hasText: 'rejected' }).waitFor({ timeout: 60_000 });
  await rejectedRow.getByText('aborted by an operator').waitFor();
  check(await page.locator('[data-key="rollback-hello-dev-00003"]').count() === 0, 'a rejected revision is offered to roll back to');
  check(await page.locator('[data-key="rollback-hello-dev-00002"]').count() === 1, 'an earlier good revision is no longer offered');
  await rolloutBox.getByRole('heading', { name: 'Rollout in progress' }).waitFor({ state: 'detached', timeout: 30_000 });
  // While it stops and after, it is nowhere "progressing".
  for (let i = 0; i < 12; i += 1) {
    const seen = await page.evaluate(() => {
      const found = [...document.querySelectorAll('section[aria-labelledby="instances-h"] li, section[aria-labelledby="revisions-h"] tr, section[aria-labelledby="requests-h"] tr')]
        .filter((e) => e.textContent.includes('hello-dev-00003'));
      return {
        progressing: found.filter((e) => /progressing/.test(e.textContent)).map((e) => e.textContent),
        state: document.getElementById('state').textContent,
      };
    });
    check(seen.progressing.length === 0 && seen.state !== 'progressing', `the rejected revision shown as progressing: ${JSON.stringify(seen)}`);
    await page.waitForTimeout(250);
  }
  const canaryRow = requestsBox.locator('tbody tr', { hasText: 'hello-dev-00003' });
  check(await canaryRow.locator('.state', { hasText: 'rejected' }).count() === 1, 'the requests mark the rejected revision');
  check(await canaryRow.locator('svg.spark').count() === 3, 'the charts of a revision no longer routed stay');
  await shot(page, '04c-canary-rejected');
  console.log('load-stop');
  await waitForLine('load-stopped', 30_000);

  // ---- a phone's width -----------------------------------------------------------------
  step('a phone at 360 px');
  await page.setViewportSize({ width: 360, height: 780 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  check(overflow <= 360, `the service page is ${overflow} px wide at 360 px`);
  await shot(page, '05-service-phone');
  await page.goto(`${API}/ui/`);
  await page.locator('main[data-ready="true"]').waitFor();
  const overviewWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  check(overviewWidth <= 360, `the services page is ${overviewWidth} px wide at 360 px`);
  await shot(page, '06-services-phone');
  await page.setViewportSize({ width: 1280, height: 900 });

  // ---- the admin's pages ---------------------------------------------------------------
  step('tokens, audit log, domains');
  await page.getByRole('link', { name: 'Tokens' }).click();
  await page.getByRole('cell', { name: 'console: admin' }).first().waitFor();
  await shot(page, '07-tokens');
  await page.getByRole('link', { name: 'Audit log' }).click();
  await page.getByRole('cell', { name: 'rollback' }).first().waitFor();
  await shot(page, '08-audit');
  // People apart from the platform: the reconciler's rollout events alone, then none of them.
  await page.getByRole('link', { name: 'The platform' }).click();
  await page.locator('main[data-ready="true"] .audit-by strong', { hasText: 'The platform' }).waitFor();
  const platformWho = await page.locator('main table tbody tr td:nth-child(2)').allTextContents();
  check(platformWho.length > 0 && platformWho.every((who) => who === 'reconciler'), `the platform's entries: ${platformWho}`);
  const detail = await page.locator('main table tbody tr td:nth-child(5)').first().textContent();
  check(/^\w+=/.test(detail ?? ''), `an entry's detail reads as key=value: ${detail}`);
  await page.getByRole('link', { name: 'People' }).click();
  await page.locator('main[data-ready="true"] .audit-by strong', { hasText: 'People' }).waitFor();
  const peopleWho = await page.locator('main table tbody tr td:nth-child(2)').allTextContents();
  check(peopleWho.length > 0 && !peopleWho.includes('reconciler'), `people's entries: ${peopleWho}`);
  await page.getByRole('link', { name: 'Domains' }).click();
  await page.locator('main[data-ready="true"] h1', { hasText: 'Custom domains' }).waitFor();
  await page.getByText('No custom domains.').waitFor();

  // ---- custom domains: add one through the form, a bad name refused, remove it ----------
  step('domains: a bad name is refused at its field');
  const errorsBeforeDomains = consoleErrors.length;
  const domainField = page.getByLabel('Domain', { exact: true });
  const addDomain = page.getByRole('button', { name: 'Add domain' });
  const fieldError = page.locator('#domain-form-error');
  await page.getByLabel('Service').selectOption('hello');
  await page.getByLabel('Environment').selectOption('dev');
  /** The refusal of `name`: said under the form, tied to the domain field, which has the focus. */
  async function refused(name, words) {
    await domainField.fill(name);
    await addDomain.click();
    await fieldError.filter({ hasText: words }).waitFor();
    const state = await page.evaluate(() => {
      const field = document.getElementById('domain');
      const described = (field.getAttribute('aria-describedby') || '').split(' ')
        .map((id) => document.getElementById(id)?.textContent || '').join(' ');
      return { focused: document.activeElement === field, invalid: field.getAttribute('aria-invalid'), described };
    });
    check(state.focused, `the domain field has the focus after ${name} is refused`);
    check(state.invalid === 'true', `the domain field is marked invalid after ${name}: ${state.invalid}`);
    check(state.described.includes(words), `the domain field is described by its error (${words}): ${state.described}`);
    check((await fieldError.textContent()).startsWith('Domain: '), `the error names the field: ${await fieldError.textContent()}`);
  }
  await refused('*.example.test', 'is a wildcard');
  await shot(page, '09-domains-refused');
  await refused('hello.dev.localhost', "is the platform's own");
  check((await apiAs(page.request, ADMIN, 'GET', '/v1/domains')).body.length === 0, 'a refused name was added');

  step('domains: add www.example.test for hello in dev');
  await domainField.fill('www.example.test');
  await addDomain.click();
  await page.locator('#outcome').getByText('www.example.test routes to hello in dev; its certificate is pending.').waitFor();
  const domainRow = page.getByRole('row').filter({ hasText: 'www.example.test' });
  await domainRow.waitFor();
  check(await domainRow.getByRole('cell').nth(1).textContent() === 'hello in dev', 'the row says where it routes');
  check(await domainRow.locator('.state').textContent() === 'pending', `the certificate's state: ${await domainRow.locator('.state').textContent()}`);
  check(await domainRow.getByText('no ACME directory').count() === 1, `the row gives the detail: ${await domainRow.textContent()}`);
  check(await fieldError.isHidden(), 'the last refusal is gone after a success');
  check(await page.evaluate(() => document.activeElement?.id === 'domain' && !document.activeElement.hasAttribute('aria-invalid')),
    'the focus is back in a fresh domain field');
  const listed = (await apiAs(page.request, ADMIN, 'GET', '/v1/domains')).body;
  check(listed.length === 1 && listed[0].domain === 'www.example.test' && listed[0].service === 'hello'
    && listed[0].env === 'dev' && listed[0].state === 'pending', `the API's domains: ${JSON.stringify(listed)}`);
  await shot(page, '09-domains');
  // A name already routed: 409, said at the field too.
  await refused('www.example.test', 'already exists');
  // Every form control has a label; every button a name.
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select')]
    .filter((e) => e.offsetParent && e.labels.length === 0).map((e) => e.outerHTML)
    .concat([...document.querySelectorAll('button')].filter((b) => b.offsetParent && !b.textContent.trim()).map((b) => b.outerHTML)));
  check(unlabelled.length === 0, `unlabelled controls: ${unlabelled}`);

  step('domains: remove www.example.test');
  await domainRow.getByRole('button', { name: 'Remove www.example.test' }).click();
  const domainDialog = page.locator('dialog#confirm');
  await domainDialog.getByRole('heading', { name: 'Remove www.example.test?' }).waitFor();
  check(await domainDialog.evaluate((d) => d.open && d.contains(document.activeElement)), 'the dialog holds the focus');
  await domainDialog.getByRole('button', { name: 'Remove domain' }).click();
  await page.locator('#outcome').getByText('www.example.test was removed.').waitFor();
  await page.getByText('No custom domains.').waitFor();
  check(await page.getByRole('row').filter({ hasText: 'www.example.test' }).count() === 0, 'the removed domain is still listed');
  check((await apiAs(page.request, ADMIN, 'GET', '/v1/domains')).body.length === 0, 'the API still has the removed domain');
  // The refusals above were the API's expected answers (400, 409); the browser logs them.
  const domainErrors = consoleErrors.splice(errorsBeforeDomains);
  consoleErrors.push(...domainErrors.filter((e) => !/status of (400|409)/.test(e)));

  // ---- previews -------------------------------------------------------------------------
  step('previews: listed under their service, stopped from the page');
  await page.goto(`${API}/ui/`);
  await page.locator('main[data-ready="true"] h1', { hasText: 'Services' }).waitFor();
  const previewRow = helloCard.getByRole('row').filter({ hasText: 'mr-5' });
  await previewRow.waitFor();
  check(await previewRow.getByRole('link', { name: /^https:\/\/mr-5--hello\.preview\.localhost:\d+\/$/ }).count() === 1,
    'the preview\'s URL is linked');
  check(await helloCard.getByRole('row').filter({ hasText: /^preview/ }).count() === 0,
    'preview is not shown as an environment of hello');
  await shot(page, '09b-previews');
  await previewRow.getByRole('button', { name: 'Stop mr-5' }).click();
  const previewDialog = page.locator('dialog#confirm');
  await previewDialog.getByRole('heading', { name: 'Stop preview mr-5 of hello?' }).waitFor();
  await previewDialog.getByRole('button', { name: 'Stop preview' }).click();
  await page.locator('#outcome').getByText('Preview mr-5 of hello was stopped.').waitFor();
  await page.locator('main[data-ready="true"]').getByText('No previews').waitFor();
  check((await apiAs(page.request, ADMIN, 'GET', '/v1/previews')).body.length === 0, 'the API still has the stopped preview');

  // ---- a cross-site change with the cookie --------------------------------------------
  step('a cross-site POST with the cookie is refused');
  for (const extra of [{}, { 'X-Runway-Console': '1', Origin: 'https://evil.example' }]) {
    const forged = await page.request.post(`${API}/v1/services`, {
      headers: { 'Content-Type': 'application/json', Origin: 'https://evil.example', ...extra },
      data: { name: 'forged', owners: ['mallory'] },
    });
    check(forged.status() === 403, `a cross-site POST answered ${forged.status()}`);
  }
  // And from a page of another site, as a form would post: the cookie is not even sent.
  const evil = await context.newPage();
  watchRequests(evil);
  await evil.setContent(`<form method="post" action="${API}/v1/services" enctype="text/plain"><input name='{"name":"forged2","owners":["x"],"a":"' value='"}'></form>`);
  await Promise.all([evil.waitForLoadState(), evil.evaluate(() => document.forms[0].submit())]);
  await evil.waitForTimeout(500);
  await evil.close();
  const services = await apiAs(page.request, ADMIN, 'GET', '/v1/services');
  check(!services.body.some((s) => s.name.startsWith('forged')), 'a forged service was created');

  // ---- what a deploy token sees ----------------------------------------------------------
  step('a deploy token sees its own service only');
  // A domain of each service, for the deploy token of `other` to see its own only.
  for (const [domain, service] of [['hello.example.test', 'hello'], ['other.example.test', 'other']]) {
    const added = await apiAs(page.request, ADMIN, 'POST', '/v1/domains', { domain, service, env: 'dev' });
    check(added.status === 201, `adding ${domain}: ${added.status} ${JSON.stringify(added.body)}`);
  }
  const tenant = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
  const tenantPage = await tenant.newPage();
  watchRequests(tenantPage);
  await tenantPage.goto(`${API}/ui/`);
  await tenantPage.getByLabel('Runway token').fill(DEPLOY);
  await tenantPage.getByRole('button', { name: 'Sign in' }).click();
  await tenantPage.locator('main[data-ready="true"] h1', { hasText: 'Services' }).waitFor();
  const headings = await tenantPage.locator('main section.card h2').allTextContents();
  check(headings.length === 1 && headings[0] === 'other', `a deploy token's services: ${headings}`);
  check(await tenantPage.getByRole('link', { name: 'Tokens' }).isHidden(), 'no Tokens link for a deploy token');
  await tenantPage.goto(`${API}/ui/services/hello/dev`);
  const refusal = tenantPage.getByRole('alert').filter({ hasText: 'Not allowed' });
  await refusal.waitFor();
  await shot(tenantPage, '10-deploy-token-403');
  step('a deploy token sees its own service\'s domains, and cannot add one');
  await tenantPage.getByRole('link', { name: 'Domains' }).click();
  await tenantPage.locator('main[data-ready="true"] h1', { hasText: 'Custom domains' }).waitFor();
  const tenantDomains = await tenantPage.locator('main tbody tr td:first-child').allTextContents();
  check(tenantDomains.length === 1 && tenantDomains[0] === 'other.example.test', `a deploy token's domains: ${tenantDomains}`);
  check(await tenantPage.locator('#domain, form').count() === 0, 'a deploy token is offered the add form');
  check(await tenantPage.getByRole('button', { name: /Remove/ }).count() === 0, 'a deploy token is offered a Remove button');
  await tenantPage.getByText('A service\u2019s maintainer adds or removes its domains').waitFor();
  const tenantPost = await tenantPage.evaluate(async () => {
    const response = await fetch('/v1/domains', {
      method: 'POST',
      headers: { 'X-Runway-Console': '1', 'Content-Type': 'application/json' },
      body: JSON.stringify({ domain: 'mine.example.test', service: 'other', env: 'dev' }),
    });
    return response.status;
  });
  check(tenantPost === 403, `a deploy token's session adding a domain: ${tenantPost}`);
  await shot(tenantPage, '11-deploy-token-domains');
  await tenant.close();

  // ---- roles ---------------------------------------------------------------------------
  // Each action names its route, and the access table its role: a viewer is offered none of
  // what it may not do, and the API refuses it anyway; a maintainer adds its own domains.
  step('a viewer reads and is offered no action');
  const signInAs = async (token) => {
    const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    const p = await ctx.newPage();
    watchRequests(p);
    await p.goto(`${API}/ui/`);
    await p.getByLabel('Runway token').fill(token);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.locator('main[data-ready="true"] h1', { hasText: 'Services' }).waitFor();
    return [ctx, p];
  };
  const [viewerContext, viewerPage] = await signInAs(VIEWER);
  await viewerPage.getByText('viewer: hello in every environment').waitFor();
  check(await viewerPage.getByRole('link', { name: 'Tokens' }).isHidden(), 'a viewer is offered Tokens');
  await viewerPage.goto(`${API}/ui/services/hello/dev`);
  await viewerPage.locator('main[data-ready="true"]').waitFor();
  await viewerPage.getByRole('heading', { name: 'Revisions' }).waitFor();
  for (const name of [/Roll back/, /Promote to/, /Delete service/, /^Pause$/]) {
    check(await viewerPage.getByRole('button', { name }).count() === 0, `a viewer is offered ${name}`);
  }
  const viewerRollback = await viewerPage.evaluate(async () => {
    const response = await fetch('/v1/services/hello/environments/dev/rollback', {
      method: 'POST', credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-runway-console': '1' }, body: '{}',
    });
    return [response.status, (await response.json()).error.message];
  });
  check(viewerRollback[0] === 403 && viewerRollback[1].includes('`deployer`'), `a viewer's rollback: ${viewerRollback}`);
  await shot(viewerPage, '12-viewer');
  await viewerContext.close();

  step('a maintainer adds a domain to its own service');
  const [maintainerContext, maintainerPage] = await signInAs(MAINTAINER);
  check(await maintainerPage.getByRole('link', { name: 'Tokens' }).isVisible(), 'a maintainer is not offered Tokens');
  await maintainerPage.getByRole('link', { name: 'Domains' }).click();
  await maintainerPage.locator('main[data-ready="true"] h1', { hasText: 'Custom domains' }).waitFor();
  const offered = await maintainerPage.locator('#domain-service option').allTextContents();
  check(offered.length === 1 && offered[0] === 'hello', `a maintainer of hello is offered ${offered}`);
  await maintainerPage.getByRole('textbox', { name: 'Domain' }).fill('maintained.example.test');
  await maintainerPage.getByRole('button', { name: 'Add domain' }).click();
  await maintainerPage.locator('main tbody tr td:first-child', { hasText: 'maintained.example.test' }).waitFor();
  await maintainerPage.getByRole('button', { name: 'Remove maintained.example.test' }).waitFor();
  await shot(maintainerPage, '13-maintainer-domains');
  await maintainerContext.close();
  const maintained = await apiAs(page.request, ADMIN, 'DELETE', '/v1/domains/maintained.example.test');
  check(maintained.status === 204, `removing maintained.example.test: ${maintained.status}`);

  for (const domain of ['hello.example.test', 'other.example.test']) {
    const removed = await apiAs(page.request, ADMIN, 'DELETE', `/v1/domains/${domain}`);
    check(removed.status === 204, `removing ${domain}: ${removed.status}`);
  }

  // ---- sign out ------------------------------------------------------------------------
  step('sign out');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Runway token').waitFor();
  await page.getByText('Signed out.').waitFor();
  const after = await context.cookies();
  check(!after.some((c) => c.name === 'runway_session'), 'the cookie was cleared');
  const whoami = await new Promise((resolve, reject) => {
    const options = { rejectUnauthorized: false, headers: { Cookie: `runway_session=${session.value}` } };
    const req = https.request(`${API}/v1/whoami`, options, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end();
  });
  check(whoami === 401, `the old cookie after signing out: ${whoami}`);

  check(foreign.length === 0, `requests to elsewhere: ${foreign}`);
  // Chromium fails a request in flight with ERR_NETWORK_CHANGED when an interface comes or
  // goes on the host, and the platform under test makes one for each instance it starts
  // (its own network): the page reconnects, and every check above saw it work.
  const unexpected = consoleErrors.filter((e) => !/status of (401|403|404)|net::ERR_NETWORK_CHANGED/.test(e));
  check(unexpected.length === 0, `console errors: ${unexpected}`);
  await context.close();
} catch (error) {
  failed = error;
}
await browser.close();
clearTimeout(bound);
if (failed) {
  console.error(failed.stack || String(failed));
  process.exit(1);
}
console.log('console.mjs: every check held');
process.exit(0);
