// The services at a glance, and one service in one environment, kept live by the API's watch
// stream (server-sent events) and its followed logs. Every figure is the API's; the console
// computes nothing the API does not say.

import { api, get, enc, envPath, followLogs } from './api.js';
import {
  h, fill, table, badge, announce, problem, confirmAction, when, percent, rate, millis,
  shortDigest, mayWrite, isAdmin,
} from './ui.js';

/** The environments of `service` this token may read, in the service's order. */
function readableEnvs(who, service) {
  if (who.scope.admin) return service.environments;
  const deploy = who.scope.deploy;
  if (!deploy || deploy.service !== service.name) return [];
  return service.environments.filter((env) => deploy.environments.includes(env));
}

/** How a service stands in an environment, in one word, from its status and last deployment. */
function envState(status, last) {
  if (status.desired.length === 0 && status.routes.length === 0) return 'not deployed';
  if (status.rollout) return status.rollout.paused ? 'paused' : 'rolling out';
  if (last && (last.state === 'pending' || last.state === 'progressing')) return last.state;
  // A revision wanted at no instance (one draining away) says nothing of how this stands.
  const conditions = status.revisions.filter((r) => r.desired_instances > 0).map((r) => r.condition);
  for (const condition of ['failing', 'timed_out', 'progressing']) {
    if (conditions.includes(condition)) return condition;
  }
  return conditions.length ? 'ready' : 'not deployed';
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
export async function overview({ main, who, signal }) {
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
    const envs = readableEnvs(who, service);
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
      const state = envState(s, last);
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
    const hidden = service.environments.length - envs.length;
    return h('section', { class: 'card', 'aria-labelledby': `svc-${service.name}` },
      h('h2', { id: `svc-${service.name}` }, h('a', { href: `/ui/services/${enc(service.name)}` }, service.name)),
      h('p', { class: 'muted' }, `Owners: ${service.owners.join(', ') || 'none'}`),
      table(null, [['Environment'], ['State'], ['Serving'], ['Traffic'], ['Instances'], ['Last deployment'], ['URL']], rows,
        'This token may read none of its environments.'),
      hidden > 0 ? h('p', { class: 'muted' }, `${hidden} other environment(s) are not readable with this token.`) : null);
  }));
  fill(main, heading, sections);
  done(main);
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
  };
  const writable = mayWrite(who, name, env);
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

  const actions = h('div', { class: 'actions' },
    next && mayWrite(who, name, next)
      ? h('button', { type: 'button', 'data-key': 'promote-env', onclick: () => promote(page, next) }, `Promote to ${next}`)
      : null,
    isAdmin(who)
      ? h('button', { type: 'button', class: 'quiet danger', 'data-key': 'delete', onclick: () => remove(page) }, 'Delete service\u2026')
      : null);

  fill(main, crumbs, heading,
    others.length ? h('nav', { 'aria-label': 'Environments' }, h('p', null, 'Other environments: ',
      others.map((e, i) => [i ? ', ' : '', h('a', { href: `/ui/services/${enc(name)}/${enc(e)}` }, e)]))) : null,
    page.live, page.summary, writable || isAdmin(who) ? actions : null,
    page.traffic, page.rollout, page.requests, page.instances, page.revisionsBox,
    page.deploymentsBox, logs, secrets);
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

function renderStatus(page) {
  keepFocus(() => {
    const { status } = page;
    const last = page.deployments[0];
    const state = envState(status, last);
    fill(page.summary,
      h('h2', { id: 'summary-h' }, 'Now'),
      h('dl', { class: 'facts' },
        h('dt', null, 'State'), h('dd', { id: 'state' }, badge(state)),
        h('dt', null, 'URL'), h('dd', null, status.url ? h('a', { href: status.url, rel: 'noreferrer' }, status.url) : '—'),
        h('dt', null, 'Serving'), h('dd', { id: 'serving' }, serving(status) || '—'),
        h('dt', null, 'Instances'), h('dd', { id: 'ready' }, state === 'not deployed' ? '—' : readyOfDesired(status)),
        h('dt', null, 'Last deployment'), h('dd', null, lastDeployment(last))),
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

    const rollout = status.rollout;
    if (!rollout) {
      fill(page.rollout);
    } else {
      const steps = rollout.step ? `step ${rollout.step}${rollout.steps ? ` of ${rollout.steps}` : ''}` : rollout.phase.replaceAll('_', ' ');
      const command = (label, cmd, extra) => h('button', {
        type: 'button', class: extra, 'data-key': `rollout-${cmd}`,
        onclick: () => rolloutCommand(page, cmd, label),
      }, label);
      fill(page.rollout, h('div', { class: 'card' },
        h('h2', { id: 'rollout-h' }, 'Rollout in progress'),
        h('dl', { class: 'facts' },
          h('dt', null, 'Deployment'), h('dd', null, `#${rollout.deployment}`),
          h('dt', null, 'Strategy'), h('dd', null, rollout.strategy),
          h('dt', null, 'Where'), h('dd', null, badge(rollout.paused ? 'paused' : rollout.phase), ` ${steps}`),
          h('dt', null, 'New revision'), h('dd', null, `${rollout.new_weight} % of the traffic`),
          h('dt', null, 'Analysis'), h('dd', null, rollout.message || '—')),
        page.writable ? h('div', { class: 'actions' },
          rollout.paused ? command('Resume', 'resume') : command('Pause', 'pause', 'quiet'),
          command('Promote now', 'promote'),
          command('Abort', 'abort', 'danger')) : null));
    }

    const figures = status.revisions.filter((r) => r.traffic);
    fill(page.requests, h('h2', { id: 'requests-h' }, 'Requests'),
      h('p', { class: 'muted' }, 'Per revision over the last 5 minutes at most (the window column says how long): ',
        'the control plane reads the ingress every 10 s and keeps 5 minutes, so an hour is not available here. ',
        'Prometheus keeps longer (see ', h('code', null, 'runway render -t observability'), ').'),
      table(null, [['Revision'], ['Requests', 'num'], ['5xx', 'num'], ['p99', 'num'], ['Window', 'num']],
        figures.map((r) => [r.revision, rate(r.traffic.requests_per_second), percent(r.traffic.error_ratio),
          millis(r.traffic.p99_seconds), `${Math.round(r.traffic.window_seconds)} s`]),
        'No figures yet: a revision has them once it has been routed for 10 seconds.'));

    fill(page.instances, h('h2', { id: 'instances-h' }, 'Instances'),
      status.revisions.length
        ? h('ul', { class: 'legend' }, status.revisions.map((r) => h('li', null, h('strong', null, r.revision), ': ',
          badge(r.condition), ` ${r.ready} of ${r.desired_instances} ready`, r.failed ? `, ${r.failed} failed` : '',
          r.reason ? ` (${r.reason})` : '')))
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
    fill(page.revisionsBox, h('h2', { id: 'revisions-h' }, 'Revisions'),
      table(null, [['Revision'], ['Artifact'], ['Deployed by'], ['Created'], ['Traffic', 'num'], ['Action']],
        page.revisions.map((r) => [
          h('strong', null, r.name),
          shortDigest(r.image || r.source || r.source_dir),
          r.created_by,
          when(r.created_at),
          weights.has(r.name) ? `${weights.get(r.name)} %` : '—',
          page.writable && r.name !== soleServing
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

function logsSection(page, box) {
  const out = h('div', { class: 'logs', role: 'log', 'aria-label': `Logs of ${page.name} in ${page.env}`, tabindex: '0' });
  const state = h('p', { class: 'live', role: 'status' });
  const toggle = h('button', { type: 'button', class: 'quiet', 'data-key': 'logs-follow' });
  let stop = null;
  const start = () => {
    const controller = new AbortController();
    page.signal.addEventListener('abort', () => controller.abort());
    stop = () => controller.abort();
    out.replaceChildren();
    toggle.textContent = 'Stop following';
    state.textContent = 'Following the logs live.';
    state.classList.add('on');
    followLogs(page.name, page.env, controller.signal, (line) => {
      const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.append(h('div', { class: line.stream === 'stderr' ? 'err' : null },
        h('span', { class: 'meta' }, `${(line.time || '').slice(11, 23)} ${line.instance.replace(/^.*-/, '')} `), line.text));
      while (out.childElementCount > 500) out.firstElementChild.remove();
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
