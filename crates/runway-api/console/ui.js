// What every page shares: building elements (text only, never HTML from data), the confirm
// dialog, the outcome line, and how figures and times are written.

/**
 * An element: `h('a', {href: '/ui/'}, 'Services')`. Attributes are set as attributes except
 * `on*` functions (listeners) and `dataset`; children are nodes or text (null is skipped).
 */
export function h(tag, attributes, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'dataset') {
      Object.assign(element.dataset, value);
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's children. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/**
 * A table whose rows turn into cards on a phone: `columns` are `[label, className?]`, each
 * row an array of cells (text or nodes).
 */
export function table(caption, columns, rows, empty) {
  if (rows.length === 0 && empty) return h('p', { class: 'muted' }, empty);
  const head = h('tr', null, columns.map(([label, cls]) => h('th', { scope: 'col', class: cls }, label)));
  const body = rows.map((cells) =>
    h('tr', null, cells.map((cell, i) =>
      h('td', { 'data-label': columns[i][0], class: columns[i][1] }, cell))));
  return h('div', { class: 'table-wrap' },
    h('table', { class: 'cards' }, caption ? h('caption', null, caption) : null,
      h('thead', null, head), h('tbody', null, body)));
}

/** A state in words, coloured by how it stands. */
export function badge(text, tone) {
  return h('span', { class: `state ${tone || toneOf(text)}` }, text.replaceAll('_', ' '));
}

function toneOf(state) {
  if (['ready', 'succeeded', 'running', 'issued', 'serving', 'completed', 'within'].includes(state)) return 'ok';
  if (['failing', 'failed', 'timed_out', 'rolled_back', 'crash_loop', 'revoked', 'rejected', 'over'].includes(state)) return 'bad';
  if (['not deployed', 'none', 'expired', 'no limit'].includes(state)) return 'none';
  if (['paused', 'pending', 'progressing', 'starting', 'rolling out', 'too few', 'measuring'].includes(state)) return 'warn';
  return '';
}

/** The line saying what an action did (or why it failed), announced to screen readers. */
export function announce(message, tone) {
  const outcome = document.getElementById('outcome');
  fill(outcome, h('div', { class: `note ${tone || ''}` }, h('p', null, message)));
}

export function clearAnnouncement() {
  document.getElementById('outcome').replaceChildren();
}

/** A message in the page: the error's words, with what a 403 or 404 means here. */
export function problem(error, what) {
  if (error.status === 403) {
    return h('div', { class: 'note bad', role: 'alert' },
      h('p', null, h('strong', null, 'Not allowed. '),
        `Your token may not see ${what || 'this'}: ${error.message}.`));
  }
  if (error.status === 404) {
    return h('div', { class: 'note warn', role: 'alert' },
      h('p', null, h('strong', null, 'Not found. '), error.message));
  }
  return h('div', { class: 'note bad', role: 'alert' },
    h('p', null, h('strong', null, 'Could not load. '), error.message));
}

/**
 * Asks before an action, in the page's one <dialog>. With `typed`, the action is allowed only
 * once that text is typed. Resolves true when confirmed.
 */
export function confirmAction({ title, body, action, danger, typed }) {
  const dialog = document.getElementById('confirm');
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  const input = document.getElementById('confirm-input');
  const typedRow = document.getElementById('confirm-typed');
  fill(document.getElementById('confirm-title'), title);
  fill(document.getElementById('confirm-body'), ...[body].flat().map((p) => h('p', null, p)));
  ok.textContent = action;
  ok.className = danger ? 'danger' : '';
  typedRow.hidden = !typed;
  input.value = '';
  ok.disabled = Boolean(typed);
  if (typed) {
    fill(typedRow.querySelector('label'), 'Type ', h('code', null, typed), ' to confirm');
  }
  return new Promise((resolve) => {
    const onInput = () => { ok.disabled = input.value !== typed; };
    const onOk = () => dialog.close('confirm');
    const onCancel = () => dialog.close('cancel');
    const onClose = () => {
      input.removeEventListener('input', onInput);
      ok.removeEventListener('click', onOk);
      cancel.removeEventListener('click', onCancel);
      dialog.removeEventListener('close', onClose);
      resolve(dialog.returnValue === 'confirm');
    };
    input.addEventListener('input', onInput);
    ok.addEventListener('click', onOk);
    cancel.addEventListener('click', onCancel);
    dialog.addEventListener('close', onClose);
    dialog.returnValue = '';
    dialog.showModal();
    (typed ? input : cancel).focus();
  });
}

/** `2026-11-24T10:00:00Z` as a <time>, in the reader's locale, the exact time on hover. */
export function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return h('time', { datetime: iso, title: iso }, ago(date));
}

function ago(date) {
  const seconds = Math.round((Date.now() - date.getTime()) / 1000);
  if (seconds < 0) return `in ${span(-seconds)}`;
  if (seconds < 5) return 'just now';
  if (seconds > 7 * 86400) return date.toLocaleString();
  return `${span(seconds)} ago`;
}

function span(seconds) {
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

export const percent = (ratio) => `${(ratio * 100).toFixed(ratio < 0.01 && ratio > 0 ? 2 : 1)} %`;
export const rate = (perSecond) => `${perSecond < 10 ? perSecond.toFixed(2) : perSecond.toFixed(1)}/s`;
export const millis = (seconds) => (seconds === null || seconds === undefined ? '—' : `${(seconds * 1000).toFixed(seconds < 0.01 ? 1 : 0)} ms`);

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attributes, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes || {})) element.setAttribute(name, String(value));
  for (const child of children) element.append(child);
  return element;
}

/**
 * A small line chart (inline SVG, no library): `points` are `{t, v}` (milliseconds, a figure
 * or null for none), drawn over `from`..`to` and 0..`max`. `label` says in words what it
 * shows (its accessible name and its tooltip): the chart is never the only place a figure is.
 */
export function sparkline(points, { from, to, max, label }) {
  const width = 96;
  const height = 24;
  const pad = 2;
  const span = Math.max(to - from, 1);
  const top = max > 0 ? max : 1;
  const x = (t) => (pad + ((t - from) / span) * (width - 2 * pad)).toFixed(1);
  const y = (v) => (height - pad - (Math.min(v, top) / top) * (height - 2 * pad)).toFixed(1);
  const chart = svg('svg', {
    class: 'spark', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': label,
  }, svg('title', null, label));
  chart.append(svg('line', { class: 'base', x1: pad, x2: width - pad, y1: height - pad, y2: height - pad }));
  // A run of points with figures is one line; a point alone (or a run of one) is a dot.
  let run = [];
  const flush = () => {
    if (run.length === 1) {
      chart.append(svg('circle', { cx: x(run[0].t), cy: y(run[0].v), r: 1.8 }));
    } else if (run.length > 1) {
      chart.append(svg('polyline', { points: run.map((p) => `${x(p.t)},${y(p.v)}`).join(' ') }));
    }
    run = [];
  };
  for (const point of points) {
    if (point.v === null || point.v === undefined || !Number.isFinite(point.v)) flush();
    else run.push(point);
  }
  flush();
  return chart;
}

/** A digest or image reference, shortened to what a person compares. */
export function shortDigest(text) {
  if (!text) return '—';
  const at = text.indexOf('sha256:');
  if (at < 0) return text;
  return h('span', { class: 'mono wrap-any', title: text }, `${text.slice(0, at)}sha256:${text.slice(at + 7, at + 19)}`);
}

/** The access table (GET /v1/access): what each route needs, which the server enforces. */
let ACCESS = [];
export function setAccess(table) { ACCESS = table; }

const RANK = { viewer: 1, deployer: 2, maintainer: 3 };


/** Whether `grant` is on `service` (a preview is its parent's); any service when none is named. */
function covers(who, grant, service) {
  if (grant.every_service || service === undefined) return true;
  const owner = ownerOf(service);
  if (grant.service) return grant.service === owner;
  return Boolean(grant.team && (who.team_services?.[grant.team] || []).includes(owner));
}

/**
 * Whether the signed-in token may call `method path` (as the access table names it) on
 * `service` in `env`: each console action names its route, and the table says the role. The
 * API decides; this hides what would be refused. Without a service, whether it may somewhere.
 */
export function may(who, method, path, service, env) {
  const entry = ACCESS.find((e) => e.method === method && e.path === path);
  if (!entry) return false;
  if (entry.needs === 'public' || entry.needs === 'signed') return true;
  if (who.admin) return true;
  if (entry.needs === 'admin') return false;
  return who.grants.some((g) => RANK[g.role] >= RANK[entry.needs] && covers(who, g, service)
    && (!env || !g.environments || g.environments.includes(env)));
}

/** The path of a service's routes in an environment, as the access table names them. */
export const ENV_ROUTE = '/v1/services/{service}/environments/{env}';

/** The service whose tokens act on `name`: a preview's parent (`mr-12--app` is app's), else itself. */
export function ownerOf(name) {
  const at = name.indexOf('--');
  return at > 0 ? name.slice(at + 2) : name;
}

export const isAdmin = (who) => Boolean(who.admin);

/** A token's scope in a few words. */
export function scopeText(scope) {
  if (scope.admin) return 'admin';
  if (scope.person) return `${scope.person.user}${scope.person.admin ? ', admin' : ''}${scope.person.groups.length ? ` in ${scope.person.groups.join(', ')}` : ''}`;
  if (scope.deploy) return `deploy: ${scope.deploy.service} in ${scope.deploy.environments.join(', ')}`;
  const g = scope.role;
  const on = g.service || (g.team ? `team ${g.team}'s services` : 'every service');
  return `${g.role}: ${on} in ${g.environments ? g.environments.join(', ') : 'every environment'}`;
}
