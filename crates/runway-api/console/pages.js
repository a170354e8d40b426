// The services at a glance, and one service in one environment, kept live by the API's watch
// stream (server-sent events) and its followed logs. Every figure is the API's; the console
// computes nothing the API does not say.

import { api, get, enc, envPath, followLogs } from './api.js';
import {
  h, fill, table, badge, announce, problem, confirmAction, when, percent, rate, millis,
  shortDigest, may, ENV_ROUTE, isAdmin, sparkline, ownerOf,
} from './ui.js';

/** The environment previews run in (`mr-12--app`, a service of its own, is app's preview). */
const PREVIEW = 'preview';

/** The environments of `service` this token may read, in the service's order. */
function readableEnvs(who, service) {
  return service.environments.filter((env) => may(who, 'GET', `${ENV_ROUTE}/status`, service.name, env));
}

/**
 * How a service stands in an environment, in one word, from its status and last deployment.
 * A rejected revision (see `rejectedOf`) still stopping says nothing of it either.
 */
function envState(status, last, rejected) {
  if (status.desired.length === 0 && status.routes.length === 0) return 'not deployed';
  if (status.rollout) return status.rollout.paused ? 'paused' : 'rolling out';
  if (last && (last.state === 'pending' || last.state === 'progressing')) return last.state;
  // A revision wanted at no instance (one draining away) says nothing of how this stands.
  const conditions = status.revisions
    .filter((r) => r.desired_instances > 0 && !(rejected && rejected.has(r.revision)))
    .map((r) => r.condition);
  for (const condition of ['failing', 'timed_out', 'progressing']) {
    if (conditions.includes(condition)) return condition;
  }
  return conditions.length ? 'ready' : 'not deployed';
}

/**
 * The revisions the newest of `deployments` to them failed or rolled back (a canary its
 * analysis failed, an aborted rollout, a deploy that timed out): rejected, by name, with
 * that deployment. Only the deployments listed count (the page holds the 20 newest).
 */
function rejectedOf(deployments) {
  const newest = new Map();
  for (const d of deployments) {
    const seen = newest.get(d.to_revision);
    if (!seen || d.id > seen.id) newest.set(d.to_revision, d);
  }
  return new Map([...newest].filter(([, d]) => d.state === 'failed' || d.state === 'rolled_back'));
}

/** The revision with the most traffic. */
function serving(status) {
  const routes = [...status.routes].sort((a, b) => b.weight - a.weight);
  return routes.length ? routes[0].revision : null;
}

function readyOfDesired(status) {
  const desired = status.revisions.reduce((sum, r) => sum + r.desired_instances, 0);
  const ready = status.revisions.reduce((sum, r) => sum + r.ready, 0);
  return `${ready} of ${desired} ready`;
}

function split(status) {
  if (status.routes.length === 0) return '—';
  return status.routes.map((r) => `${r.revision.replace(/^.*-(\d+)$/, '#$1')} ${r.weight} %`).join(' · ');
}

function lastDeployment(d) {
  if (!d) return 'none yet';
  return h('span', null, `${d.kind} #${d.id} `, badge(d.state), ' ', when(d.updated_at), ` by ${d.created_by}`);
}

/** `/ui/`: every service the token may read, each environment on a row. */
export async function overview({ main, who, signal, go }) {
  const services = await get('/v1/services', signal);
  const heading = h('h1', null, 'Services');
  if (services.length === 0) {
    fill(main, heading, h('p', null, 'No services yet. ',
      isAdmin(who) ? 'Onboard one with ' : 'An admin onboards one with ',
      h('code', null, 'runway services create NAME'), ', then deploy it with ', h('code', null, 'runway deploy'), '.'));
    done(main);
    return;
  }
  const sections = await Promise.all(services.map(async (service) => {
    const readable = readableEnvs(who, service);
    // `preview` holds the service's previews, each a service of its own, listed below.
    const envs = readable.filter((env) => env !== PREVIEW);
    const previews = readable.includes(PREVIEW)
      ? await get(`/v1/services/${enc(service.name)}/previews`, signal).catch(() => null)
      : null;
    const rows = await Promise.all(envs.map(async (env) => {
      const [status, deployments] = await Promise.allSettled([
        get(`${envPath(service.name, env)}/status`, signal),
        get(`${envPath(service.name, env)}/deployments?limit=1`, signal),
      ]);
      const link = h('a', { href: `/ui/services/${enc(service.name)}/${enc(env)}` }, env);
      if (status.status === 'rejected') {
        return [link, badge('unknown', 'none'), status.reason.message, '', '', '', ''];
      }
      const s = status.value;
      const last = deployments.status === 'fulfilled' ? deployments.value[0] : null;
      const state = envState(s, last, rejectedOf(last ? [last] : []));
      return [
        link,
        badge(state),
        serving(s) || '—',
        split(s),
        state === 'not deployed' ? '—' : readyOfDesired(s),
        lastDeployment(last),
        s.url && state !== 'not deployed' ? h('a', { href: s.url, rel: 'noreferrer', class: 'wrap-any' }, s.url) : '—',
      ];
    }));
    const hidden = service.environments.length - readable.length;
    return h('section', { class: 'card', 'aria-labelledby': `svc-${service.name}` },
      h('h2', { id: `svc-${service.name}` }, h('a', { href: `/ui/services/${enc(service.name)}` }, service.name)),
      h('p', { class: 'muted' }, `Owners: ${service.owners.join(', ') || 'none'}`),
      table(null, [['Environment'], ['State'], ['Serving'], ['Traffic'], ['Instances'], ['Last deployment'], ['URL']], rows,
        'This token may read none of its environments.'),
      previews ? previewsTable(who, service.name, previews, go) : null,
      hidden > 0 ? h('p', { class: 'muted' }, `${hidden} other environment(s) are not readable with this token.`) : null);
  }));
  fill(main, heading, sections);
  done(main);
}

/** A service's previews: each one's page, URL, base, last deploy and expiry, and a stop button. */
function previewsTable(who, service, previews, go) {
  const writable = may(who, 'DELETE', '/v1/services/{service}/previews/{name}', service, PREVIEW);
  const rows = previews.map((p) => [
    h('a', { href: `/ui/services/${enc(p.service)}/${PREVIEW}` }, p.name),
    h('a', { href: p.url, rel: 'noreferrer', class: 'wrap-any' }, p.url),
    p.origin.fork ? `${p.base_env} (a fork: no secrets)` : p.base_env,
    h('span', null, when(p.updated_at), ` by ${p.origin.deployed_by || p.created_by}`),
    when(p.expires_at),
    writable ? h('button', { type: 'button', 'aria-label': `Stop ${p.name}`, onclick: () => stopPreview(service, p, go) }, 'Stop') : '',
  ]);
  return h('div', null,
    h('h3', null, 'Previews'),
    table(null, [['Preview'], ['URL'], ['From'], ['Last deploy'], ['Expires'], ['']], rows,
      'No previews: a merge request\'s pipeline (or `runway deploy --preview NAME`) makes one.'));
}

async function stopPreview(service, preview, go) {
  const ok = await confirmAction({
    title: `Stop preview ${preview.name} of ${service}?`,
    body: [`Its instances stop and its revisions go. A new deploy of ${preview.name} makes it again.`],
    action: 'Stop preview',
    danger: true,
  });
  if (!ok) return;
  try {
    await api('DELETE', `/v1/services/${enc(service)}/previews/${enc(preview.name)}`);
    go('/ui/');
    announce(`Preview ${preview.name} of ${service} was stopped.`, 'ok');
  } catch (e) {
    announce(`Stopping preview ${preview.name} failed: ${e.message}`, 'bad');
  }
}

/** Marks the page as drawn (the tests and the load-time figure wait for it). */
function done(main) {
  main.dataset.ready = 'true';
  performance.mark('runway:rendered');
}

/** `/ui/services/{service}`: its first environment this token may read. */
export async function serviceHome(context) {
  const { who, signal, params, main } = context;
  const name = params[0];
  const service = await get(`/v1/services/${enc(name)}`, signal).catch((e) => {
    fill(main, h('h1', null, name), problem(e, 'this service'));
    return null;
  });
  if (!service) return;
  const envs = readableEnvs(who, service);
  if (envs.length === 0) {
    fill(main, h('h1', null, name), h('p', null, 'This token may read none of its environments.'));
    return;
  }
  history.replaceState(null, '', `/ui/services/${enc(name)}/${enc(envs[0])}`);
  await serviceEnv({ ...context, params: [name, envs[0]] });
}

/** `/ui/services/{service}/{env}`: everything about it, kept live. */
export async function serviceEnv(context) {
  const { main, who, signal, params, go } = context;
  const [name, env] = params;
  const base = envPath(name, env);
  document.title = `${name} in ${env} · Runway`;
  const heading = h('h1', null, `${name} in ${env}`);
  const crumbs = h('nav', { 'aria-label': 'Breadcrumb' },
    h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Services'), ' / ', name));
  let service;
  try {
    service = await get(`/v1/services/${enc(name)}`, signal);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    fill(main, crumbs, heading, problem(e, `service ${name}`));
    done(main);
    return;
  }
  if (!service.environments.includes(env)) {
    fill(main, crumbs, heading, h('div', { class: 'note warn', role: 'alert' },
      h('p', null, `${name} has no environment ${env}; it has ${service.environments.join(', ')}.`)));
    return;
  }
  let loaded;
  try {
    loaded = await Promise.all([
      get(`${base}/status`, signal),
      get(`${base}/revisions`, signal),
      get(`${base}/deployments?limit=20`, signal),
      get(`${base}/secrets`, signal),
    ]);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    fill(main, crumbs, heading, problem(e, `${name} in ${env}`));
    done(main);
    return;
  }
  const page = {
    name, env, base, who, service, go, signal,
    status: loaded[0], revisions: loaded[1], deployments: loaded[2], secrets: loaded[3],
    events: new Map(), open: new Set(),
    // The traffic figures each status brought while the page is open, by revision: the
    // charts' points (the control plane keeps 5 minutes; the page keeps what it saw).
    samples: new Map(),
  };
  const writable = {
    rollback: may(who, 'POST', `${ENV_ROUTE}/rollback`, name, env),
    rollout: may(who, 'POST', `${ENV_ROUTE}/rollout`, name, env),
  };
  const next = service.environments[service.environments.indexOf(env) + 1];
  const others = readableEnvs(who, service).filter((e) => e !== env);

  page.live = h('p', { class: 'live', role: 'status' }, 'Connecting for live updates…');
  page.summary = h('section', { class: 'card', 'aria-labelledby': 'summary-h' });
  page.traffic = h('section', { 'aria-labelledby': 'traffic-h' });
  page.rollout = h('section', { 'aria-labelledby': 'rollout-h' });
  page.requests = h('section', { 'aria-labelledby': 'requests-h' });
  page.instances = h('section', { 'aria-labelledby': 'instances-h' });
  page.revisionsBox = h('section', { 'aria-labelledby': 'revisions-h' });
  page.deploymentsBox = h('section', { 'aria-labelledby': 'deployments-h' });
  const logs = h('section', { 'aria-labelledby': 'logs-h' });
  const secrets = h('section', { 'aria-labelledby': 'secrets-h' },
    h('h2', { id: 'secrets-h' }, 'Secrets'),
    h('p', { class: 'muted' }, 'Names and versions only: a value is never shown.'),
    table(null, [['Name'], ['Version', 'num'], ['Set by'], ['When'], ['From']],
      page.secrets.map((s) => [h('code', null, s.name), String(s.version), s.created_by, when(s.created_at), s.origin || 'the API']),
      'No secrets set in this environment.'));

  const promoting = next && may(who, 'POST', '/v1/services/{service}/promote', name, next);
  const actions = promoting
    ? h('div', { class: 'actions' },
      h('button', { type: 'button', 'data-key': 'promote-env', onclick: () => promote(page, next) }, `Promote to ${next}`))
    : null;
  // What cannot be undone, at the bottom, away from the everyday buttons.
  const danger = may(who, 'DELETE', '/v1/services/{service}', name)
    ? h('section', { class: 'card danger-zone', 'aria-labelledby': 'danger-h' },
      h('h2', { id: 'danger-h' }, 'Danger zone'),
      h('p', null, `Deleting ${name} stops it in every environment (${service.environments.join(', ')}), `,
        'deletes its revisions, deployments and secrets and revokes its deploy tokens. It cannot be undone.'),
      h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'quiet danger', 'data-key': 'delete', onclick: () => remove(page) }, 'Delete service\u2026')))
    : null;

  fill(main, crumbs, heading,
    others.length ? h('nav', { 'aria-label': 'Environments' }, h('p', null, 'Other environments: ',
      others.map((e, i) => [i ? ', ' : '', h('a', { href: `/ui/services/${enc(name)}/${enc(e)}` }, e)]))) : null,
    page.live, page.summary, actions,
    page.traffic, page.rollout, page.requests, page.instances, page.revisionsBox,
    page.deploymentsBox, logs, secrets, danger);
  page.writable = writable;
  renderStatus(page);
  renderRevisions(page);
  renderDeployments(page);
  done(main);
  watch(page);
  logsSection(page, logs);
}

/** Keeps focus on the same control across a redraw (buttons carry a `data-key`). */
function keepFocus(redraw) {
  const key = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
  redraw();
  if (key) {
    const again = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/** The service is in maintenance: its clients get a 503, whatever else the page says. */
function maintenanceNote(m) {
  const allowed = m.allow.length ? ` Let through: ${m.allow.join(', ')}.` : '';
  return h('div', { class: 'note warn', id: 'maintenance', role: 'note' },
    h('p', null, h('strong', null, 'In maintenance'),
      ` since ${when(m.since)} (by ${m.set_by}): clients get 503 with Retry-After ${m.retry_after_seconds} s.${allowed}`),
    m.message ? h('p', null, 'Their message: ', h('q', null, m.message)) : null);
}

function renderStatus(page) {
  recordSamples(page);
  keepFocus(() => {
    const { status } = page;
    const last = page.deployments[0];
    const rejected = rejectedOf(page.deployments);
    const state = envState(status, last, rejected);
    fill(page.summary,
      h('h2', { id: 'summary-h' }, 'Now'),
      h('dl', { class: 'facts' },
        h('dt', null, 'State'), h('dd', { id: 'state' }, badge(state)),
        h('dt', null, 'URL'), h('dd', null, status.url ? h('a', { href: status.url, rel: 'noreferrer' }, status.url) : '—'),
        h('dt', null, 'Serving'), h('dd', { id: 'serving' }, serving(status) || '—'),
        h('dt', null, 'Instances'), h('dd', { id: 'ready' }, state === 'not deployed' ? '—' : readyOfDesired(status)),
        h('dt', null, 'Last deployment'), h('dd', null, lastDeployment(last))),
      status.maintenance ? maintenanceNote(status.maintenance) : null,
      status.warnings && status.warnings.length
        ? h('div', { class: 'note warn' }, status.warnings.map((w) => h('p', null, w))) : null,
      status.control_plane
        ? h('p', { class: 'muted' }, `Answered by replica ${status.control_plane.replica}; leader: ${status.control_plane.leader || 'none'}.`) : null);

    const total = status.routes.reduce((sum, r) => sum + r.weight, 0) || 1;
    fill(page.traffic, h('h2', { id: 'traffic-h' }, 'Traffic'),
      status.routes.length === 0
        ? h('p', { class: 'muted' }, 'Nothing is routed yet.')
        : [
          h('div', { class: 'bar', 'aria-hidden': 'true' }, status.routes.map((r) => {
            const segment = h('span', { title: `${r.revision}: ${r.weight} %` }, r.weight >= 12 ? `${r.revision.replace(/^.*-(\d+)$/, '#$1')} ${r.weight} %` : '');
            segment.style.flexBasis = `${(r.weight / total) * 100}%`;
            segment.style.flexGrow = '0';
            return segment;
          })),
          h('ul', { class: 'legend', id: 'routes' }, status.routes.map((r) => h('li', null, h('strong', null, r.revision), `: ${r.weight} %`))),
        ]);

    renderRollout(page);
    renderRequests(page, rejected);

    fill(page.instances, h('h2', { id: 'instances-h' }, 'Instances'),
      status.revisions.length
        ? h('ul', { class: 'legend' }, status.revisions.map((r) => h('li', { dataset: { revision: r.revision } },
          h('strong', null, r.revision), ': ',
          // A rejected revision still stopping is not "progressing" anywhere: it is on its way out.
          rejected.has(r.revision) ? badge('rejected') : badge(r.condition),
          ` ${r.ready} of ${r.desired_instances} ready`, r.failed ? `, ${r.failed} failed` : '',
          r.reason && !rejected.has(r.revision) ? ` (${r.reason})` : '')))
        : null,
      table(null, [['Instance'], ['Revision'], ['Phase'], ['Ready'], ['Restarts', 'num'], ['Reason']],
        status.instances.map((i) => [h('span', { class: 'mono wrap-any' }, i.id), i.revision, badge(i.phase),
          i.ready ? 'yes' : 'no', String(i.restarts), i.message || '—']),
        'No instances.'));
  });
  // A revision that appeared since the list was read (a deploy under way).
  const known = new Set(page.revisions.map((r) => r.name));
  if ([...page.status.routes, ...page.status.desired].some((r) => !known.has(r.revision))) refreshRevisions(page);
  else renderRevisions(page);
}

/** How many figures a revision's chart keeps: 12 hours of a reading every 10 s. */
const MAX_SAMPLES = 4320;

/**
 * Keeps the traffic figures of the status on screen, once per reading of the control plane
 * (it reads the ingress every 10 s; a status brings the same figures until the next): the
 * charts' points. A revision no longer measured gets a gap.
 */
function recordSamples(page) {
  const now = Date.now();
  const measured = new Set();
  for (const r of page.status.revisions) {
    const t = r.traffic;
    if (!t || !(t.window_seconds > 0)) continue;
    measured.add(r.revision);
    const list = page.samples.get(r.revision) || [];
    const last = list[list.length - 1];
    const p99 = t.p99_seconds ?? null;
    if (last && last.window === t.window_seconds && last.rps === t.requests_per_second
      && last.err === t.error_ratio && last.p99 === p99) continue;
    list.push({ t: now, window: t.window_seconds, rps: t.requests_per_second, err: t.error_ratio, p99 });
    if (list.length > MAX_SAMPLES) list.shift();
    page.samples.set(r.revision, list);
  }
  for (const [revision, list] of page.samples) {
    if (!measured.has(revision) && list[list.length - 1].rps !== null) {
      list.push({ t: now, window: null, rps: null, err: null, p99: null });
    }
  }
}

/** `12 s`, `4 min`: how long a span of milliseconds is. */
function lasting(ms) {
  const seconds = Math.round(ms / 1000);
  return seconds < 120 ? `${seconds} s` : `${Math.round(seconds / 60)} min`;
}

/** Each revision's requests, 5xx and p99 now, with charts of what the page has seen. */
function renderRequests(page, rejected) {
  const { status } = page;
  const weights = new Map(status.routes.map((r) => [r.revision, r.weight]));
  const byName = new Map(status.revisions.map((r) => [r.revision, r]));
  // Every revision taking traffic, from the moment it is routed (its figures follow once the
  // control plane has read the ingress twice), and every one the page has figures of.
  const names = [...new Set([
    ...status.routes.filter((r) => r.weight > 0).map((r) => r.revision),
    ...status.revisions.filter((r) => r.traffic).map((r) => r.revision),
    ...page.samples.keys(),
  ])];
  const points = [...page.samples.values()].flat();
  const to = points.length ? Math.max(...points.map((p) => p.t)) : Date.now();
  const from = Math.min(points.length ? Math.min(...points.map((p) => p.t)) : to, to - 10_000);
  const peak = (key, floor) => Math.max(floor, ...points.map((p) => p[key] ?? 0));
  const scales = { rps: peak('rps', 0.1), err: peak('err', 0.01), p99: peak('p99', 0.001) };
  const rows = names.map((name) => {
    const traffic = byName.get(name)?.traffic;
    const measured = Boolean(traffic && traffic.window_seconds > 0);
    const samples = page.samples.get(name) || [];
    const figure = (key, what, format, now) => {
      const values = samples.map((s) => s[key]).filter((v) => v !== null && v !== undefined);
      const chart = samples.length
        ? sparkline(samples.map((s) => ({ t: s.t, v: s[key] })), {
          from, to, max: scales[key],
          label: `${what} of ${name} over the ${lasting(to - from)} this page has watched: `
            + (values.length ? `from ${format(Math.min(...values))} to ${format(Math.max(...values))}` : 'no figure'),
        })
        : null;
      return h('span', { class: 'metric' }, chart, h('span', null, now));
    };
    const state = measured ? null : badge(weights.get(name) > 0 ? 'measuring' : 'not routed', weights.get(name) > 0 ? 'warn' : 'none');
    return [
      h('span', null, h('strong', null, name), rejected.has(name) ? [' ', badge('rejected')] : null),
      weights.has(name) ? `${weights.get(name)} %` : '—',
      figure('rps', 'Requests per second', rate, measured ? rate(traffic.requests_per_second) : state),
      figure('err', '5xx share', percent, measured ? percent(traffic.error_ratio) : ''),
      figure('p99', 'p99 latency', millis, measured ? millis(traffic.p99_seconds) : ''),
      measured ? `${Math.round(traffic.window_seconds)} s` : '—',
    ];
  });
  fill(page.requests, h('h2', { id: 'requests-h' }, 'Requests'),
    h('p', { class: 'muted' }, 'Per revision over the last 5 minutes at most (the window column says how long): ',
      'the control plane reads the ingress every 10 s and keeps 5 minutes, so an hour is not available here. ',
      'The charts hold each figure as the page received it, since it was opened. ',
      'Prometheus keeps longer (see ', h('code', null, 'runway render -t observability'), ').'),
    table(null, [['Revision'], ['Share', 'num'], ['Requests'], ['5xx'], ['p99'], ['Window', 'num']], rows,
      'No figures yet: a revision has them once it has been routed for 10 seconds.'));
}

function renderRollout(page) {
  const { status } = page;
  const rollout = status.rollout;
  keepFocus(() => {
    if (!rollout) {
      fill(page.rollout);
      return;
    }
    const steps = rollout.step ? `step ${rollout.step}${rollout.steps ? ` of ${rollout.steps}` : ''}` : rollout.phase.replaceAll('_', ' ');
    const command = (label, cmd, extra) => h('button', {
      type: 'button', class: extra, 'data-key': `rollout-${cmd}`,
      onclick: () => rolloutCommand(page, cmd, label),
    }, label);
    const deployment = page.deployments.find((d) => d.id === rollout.deployment);
    const target = deployment ? deployment.to_revision : null;
    fill(page.rollout, h('div', { class: 'card' },
      h('h2', { id: 'rollout-h' }, 'Rollout in progress'),
      h('dl', { class: 'facts' },
        h('dt', null, 'Deployment'), h('dd', null, `#${rollout.deployment}`),
        h('dt', null, 'Strategy'), h('dd', null, rollout.strategy),
        h('dt', null, 'Where'), h('dd', null, badge(rollout.paused ? 'paused' : rollout.phase), ` ${steps}`),
        h('dt', null, 'New revision'), h('dd', null, target ? `${target}: ` : '', `${rollout.new_weight} % of the traffic`),
        h('dt', null, 'The controller says'), h('dd', { id: 'rollout-message' }, rollout.message || '—')),
      rollout.analysis ? analysis(rollout.analysis) : null,
      page.writable.rollout ? h('div', { class: 'actions' },
        rollout.paused ? command('Resume', 'resume') : command('Pause', 'pause', 'quiet'),
        command('Promote now', 'promote'),
        command('Abort', 'abort', 'danger')) : null));
  });
}

/** A check's standing (the API's word) as a badge. */
function standing(check, enough) {
  const words = { within: enough || 'within', over: 'over', too_few: 'too few', unmeasured: 'no figure' };
  const tones = { within: 'ok', over: 'bad', too_few: 'warn', unmeasured: 'none' };
  return badge(words[check.standing] || check.standing, tones[check.standing]);
}

/**
 * A canary step's analysis so far, as the API's status says it (`rollout.analysis`): both
 * revisions' figures over the step's window, the limits in force, how each measure stands
 * and the verdict the controller would take now. Nothing here is computed: the words around
 * the figures are all the page adds.
 */
function analysis(a) {
  const t = a.thresholds;
  const c = a.checks;
  const now = (check, format) => (check.limit !== null && check.limit !== undefined ? ` (${format(check.limit)} now)` : '');
  const errors = (w) => `${percent(w.error_ratio)} (${w.errors_5xx} of ${w.requests})`;
  const rows = [
    ['Requests', String(a.canary.requests), String(a.stable.requests),
      `at least ${t.min_requests} to ${a.revision} to judge it`, standing(c.requests, 'enough')],
    ['5xx', errors(a.canary), errors(a.stable),
      `at most ${percent(t.max_error_ratio)}, and ${percent(t.max_error_ratio_over_stable)} over ${a.stable_revision}\u2019s${now(c.error_ratio, percent)}`,
      standing(c.error_ratio)],
    ['p99', millis(a.canary.p99_seconds), millis(a.stable.p99_seconds),
      `at most ${millis(t.latency_slo_seconds)}, and ${t.max_p99_over_stable_ratio}\u00d7 ${a.stable_revision}\u2019s `
        + `once both have ${t.p99_samples} requests${now(c.latency_p99, millis)}`,
      standing(c.latency_p99)],
    ['Restarts', String(a.canary.restarts), String(a.stable.restarts), `at most ${t.max_restarts}`, standing(c.restarts)],
    ['Readiness failures', String(a.canary.readiness_failures), String(a.stable.readiness_failures),
      `at most ${t.max_readiness_failures}`, standing(c.readiness_failures)],
  ];
  return h('div', { id: 'analysis' },
    table('The analysis so far', [['Measure'], [a.revision, 'num'], [a.stable_revision, 'num'], ['Limit'], ['Stands']], rows),
    h('p', { id: 'analysis-verdict' }, 'Verdict now: ',
      badge(a.verdict, { pass: 'ok', fail: 'bad', inconclusive: 'warn' }[a.verdict]),
      a.reason ? ` ${a.reason}` : ''),
    h('p', { class: 'muted' },
      'Since the step began', a.window_started_at ? [' (', when(a.window_started_at), ')'] : null, '. ',
      `It moves on at the end of its ${Math.round(a.window_seconds)} s window when every measure is within its limit, `,
      `is held while there are too few requests, and rolled back after ${t.max_inconclusive_windows} windows without a verdict.`));
}

async function refreshRevisions(page) {
  try {
    page.revisions = await get(`${page.base}/revisions`, page.signal);
    renderRevisions(page);
  } catch (e) {
    if (e.name !== 'AbortError') announce(`Could not read the revisions: ${e.message}`, 'bad');
  }
}

function renderRevisions(page) {
  keepFocus(() => {
    const weights = new Map(page.status.routes.map((r) => [r.revision, r.weight]));
    const soleServing = page.status.routes.length === 1 ? page.status.routes[0].revision : null;
    const rejected = rejectedOf(page.deployments);
    fill(page.revisionsBox, h('h2', { id: 'revisions-h' }, 'Revisions'),
      table(null, [['Revision'], ['Artifact'], ['Deployed by'], ['Created'], ['Traffic', 'num'], ['Action']],
        page.revisions.map((r) => [
          rejected.has(r.name)
            ? h('span', { class: 'rejected' }, h('strong', null, r.name), ' ', badge('rejected'),
              h('span', { class: 'why' }, `${rejected.get(r.name).kind} #${rejected.get(r.name).id} ${rejected.get(r.name).state.replaceAll('_', ' ')}`,
                rejected.get(r.name).reason ? `: ${rejected.get(r.name).reason}` : ''))
            : h('strong', null, r.name),
          shortDigest(r.image || r.source || r.source_dir),
          r.created_by,
          when(r.created_at),
          weights.has(r.name) ? `${weights.get(r.name)} %` : '—',
          // A rejected revision is not offered back: it failed once already.
          page.writable.rollback && r.name !== soleServing && !rejected.has(r.name)
            ? h('button', { type: 'button', class: 'quiet', 'data-key': `rollback-${r.name}`, onclick: () => rollback(page, r) }, `Roll back to ${r.name.replace(/^.*-(\d+)$/, '#$1')}`)
            : '',
        ]),
        'No revisions yet: deploy one with runway deploy.'));
  });
}

function renderDeployments(page) {
  keepFocus(() => {
    const items = page.deployments.map((d, index) => {
      const inProgress = d.state === 'pending' || d.state === 'progressing';
      const list = h('ol', { 'aria-label': `Events of deployment ${d.id}` });
      const details = h('details', { class: 'deployment', dataset: { id: String(d.id) } },
        h('summary', null, h('strong', null, `#${d.id} ${d.kind}`), ` to ${d.to_revision} `, badge(d.state), ' ',
          when(d.created_at), ` by ${d.created_by}`, d.reason ? ` \u2014 ${d.reason}` : ''),
        list);
      if (page.open.has(d.id) || (index === 0 && inProgress && !page.closed?.has(d.id))) details.open = true;
      const draw = () => fill(list, (page.events.get(d.id) || []).map((e) => h('li', null, when(e.at), ' ', e.message)));
      details.addEventListener('toggle', () => {
        if (details.open) {
          page.open.add(d.id);
          (page.closed ||= new Set()).delete(d.id);
          loadEvents(page, d.id).then(draw);
        } else {
          page.open.delete(d.id);
          (page.closed ||= new Set()).add(d.id);
        }
      });
      if (page.events.has(d.id)) draw();
      page.drawEvents = page.drawEvents || new Map();
      page.drawEvents.set(d.id, draw);
      return details;
    });
    fill(page.deploymentsBox, h('h2', { id: 'deployments-h' }, 'Deployments'),
      items.length ? items : h('p', { class: 'muted' }, 'No deployments yet.'));
  });
}

async function loadEvents(page, id) {
  if (page.events.has(id)) return;
  try {
    const events = await get(`/v1/deployments/${id}/events`, page.signal);
    // The watch stream may have brought them meanwhile, and newer.
    if (!page.events.has(id)) page.events.set(id, events);
  } catch (e) {
    if (e.name !== 'AbortError') page.events.set(id, [{ at: null, message: `Could not read its events: ${e.message}` }]);
  }
}

/** The watch stream: the status document when it changes, the deployments, their new events. */
function watch(page) {
  const source = new EventSource(`${page.base}/watch`);
  page.signal.addEventListener('abort', () => source.close());
  const live = (text, on) => { page.live.textContent = text; page.live.classList.toggle('on', on); };
  source.addEventListener('open', () => live('Live: this page follows the control plane.', true));
  source.addEventListener('status', (event) => {
    page.status = JSON.parse(event.data);
    renderStatus(page);
  });
  source.addEventListener('deployments', (event) => {
    page.deployments = JSON.parse(event.data);
    renderDeployments(page);
    renderStatus(page);
  });
  source.addEventListener('deployment_events', (event) => {
    const { deployment, after, events } = JSON.parse(event.data);
    const known = page.events.get(deployment);
    if (known && known.length >= after) {
      known.push(...events.slice(known.length - after));
    } else if (after === 0) {
      page.events.set(deployment, [...events]);
    } else {
      return;
    }
    const draw = page.drawEvents && page.drawEvents.get(deployment);
    if (draw) draw();
  });
  source.addEventListener('end', (event) => {
    source.close();
    live(`Live updates ended: ${event.data}`, false);
  });
  source.addEventListener('error', async () => {
    if (source.readyState === EventSource.CONNECTING) {
      live('Reconnecting for live updates…', false);
      return;
    }
    live('Live updates stopped.', false);
    try {
      await api('GET', '/v1/whoami');
    } catch (e) {
      if (e.status === 401) page.go('/ui/');
    }
  });
}

/**
 * A log line's time as text that sorts as the time does: RFC 3339 in UTC with its fraction
 * made nine digits (`…T10:00:00.5Z` and `…T10:00:00.123456789Z` compare right); null when
 * it is not such a time.
 */
function timeKey(time) {
  const match = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/.exec(time || '');
  return match ? `${match[1]}.${(match[2] || '').padEnd(9, '0')}` : null;
}

/** Where `key` goes in `entries` (sorted by key): after every entry of the same time. */
function place(entries, key) {
  let low = 0;
  let high = entries.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (entries[middle].key <= key) low = middle + 1; else high = middle;
  }
  return low;
}

/** The most lines the logs box keeps; the oldest go first. */
const LOG_LINES = 500;

function logsSection(page, box) {
  const out = h('div', { class: 'logs', role: 'log', 'aria-label': `Logs of ${page.name} in ${page.env}`, tabindex: '0' });
  const state = h('p', { class: 'live', role: 'status' });
  const toggle = h('button', { type: 'button', class: 'quiet', 'data-key': 'logs-follow' });
  let stop = null;
  // The lines on screen in time order, whatever order their instances' streams brought them.
  let entries = [];
  const start = () => {
    const controller = new AbortController();
    page.signal.addEventListener('abort', () => controller.abort());
    stop = () => controller.abort();
    out.replaceChildren();
    entries = [];
    toggle.textContent = 'Stop following';
    state.textContent = 'Following the logs live, in time order across instances.';
    state.classList.add('on');
    followLogs(page.name, page.env, controller.signal, (line) => {
      const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      // A line with no time stays where it came, after the latest so far.
      const key = timeKey(line.time) ?? (entries.length ? entries[entries.length - 1].key : '');
      const node = h('div', { class: line.stream === 'stderr' ? 'err' : null, dataset: { time: line.time || '', instance: line.instance || '' } },
        h('span', { class: 'meta' }, `${(line.time || '').slice(11, 23)} ${(line.instance || '').replace(/^.*-/, '')} `), line.text);
      const at = place(entries, key);
      if (at === 0 && entries.length >= LOG_LINES) return; // older than all the lines kept
      out.insertBefore(node, at < entries.length ? entries[at].node : null);
      entries.splice(at, 0, { key, node });
      while (entries.length > LOG_LINES) entries.shift().node.remove();
      if (atEnd) out.scrollTop = out.scrollHeight;
    }).then(() => ended('The log stream ended.'), (e) => ended(e.name === 'AbortError' ? 'Not following.' : `The logs could not be followed: ${e.message}`));
  };
  const ended = (text) => {
    stop = null;
    toggle.textContent = 'Follow';
    state.textContent = text;
    state.classList.remove('on');
  };
  toggle.addEventListener('click', () => (stop ? stop() : start()));
  fill(box, h('h2', { id: 'logs-h' }, 'Logs'), state, h('div', { class: 'actions' }, toggle), out);
  start();
}

async function rollback(page, revision) {
  const ok = await confirmAction({
    title: `Roll back ${page.name} in ${page.env}?`,
    body: [`All traffic moves to ${revision.name}, deployed by ${revision.created_by}.`,
      'Its instances start first; the deployment\u2019s events say when it is done.'],
    action: `Roll back to ${revision.name}`,
  });
  if (!ok) return;
  try {
    const d = await api('POST', `${page.base}/rollback`, { to: revision.name });
    announce(`Rollback #${d.id} started: ${page.name} in ${page.env} goes to ${d.to_revision} (${d.state}).`, 'ok');
  } catch (e) {
    announce(`Rollback refused: ${e.message}`, 'bad');
  }
}

async function promote(page, to) {
  const from = serving(page.status);
  const ok = await confirmAction({
    title: `Promote ${page.name} to ${to}?`,
    body: [`${from || 'The revision serving in ' + page.env} is deployed to ${to} with the same artifact and variables, and ${to}\u2019s own secrets.`],
    action: `Promote to ${to}`,
  });
  if (!ok) return;
  try {
    const d = await api('POST', `/v1/services/${enc(page.name)}/promote`, { from: page.env, to });
    announce(`Promotion #${d.id} started: ${d.to_revision} in ${to} (${d.state}).`, 'ok');
  } catch (e) {
    announce(`Promotion refused: ${e.message}`, 'bad');
  }
}

const COMMANDS = {
  pause: 'The weights stay where they are until you resume (a failed analysis still rolls back).',
  resume: 'The rollout carries on; the current step\u2019s analysis starts again.',
  promote: 'The new revision takes all the traffic as soon as it is ready.',
  abort: 'All traffic goes back to the stable revision now, and the deployment is rolled back.',
};

async function rolloutCommand(page, command, label) {
  const ok = await confirmAction({
    title: `${label}: the rollout of ${page.name} in ${page.env}?`,
    body: COMMANDS[command],
    action: label,
    danger: command === 'abort',
  });
  if (!ok) return;
  try {
    const d = await api('POST', `${page.base}/rollout`, { command });
    announce(`${label}: asked of deployment #${d.id}; the controller carries it out on its next pass.`, 'ok');
  } catch (e) {
    announce(`${label} refused: ${e.message}`, 'bad');
  }
}

async function remove(page) {
  const ok = await confirmAction({
    title: `Delete ${page.name}?`,
    body: [`Every environment of ${page.name} stops: its revisions, deployments and desired state go, its secrets are deleted and its deploy tokens revoked.`,
      'This cannot be undone.'],
    action: 'Delete service',
    danger: true,
    typed: page.name,
  });
  if (!ok) return;
  try {
    await api('DELETE', `/v1/services/${enc(page.name)}?confirm=${enc(page.name)}`);
    page.go('/ui/');
    announce(`${page.name} was deleted.`, 'ok');
  } catch (e) {
    announce(`Deleting ${page.name} failed: ${e.message}`, 'bad');
  }
}
