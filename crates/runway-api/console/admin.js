// The admin's pages (tokens, the audit log) and custom domains.

import { api, get, enc } from './api.js';
import { h, fill, table, badge, announce, problem, confirmAction, when, may, isAdmin, scopeText } from './ui.js';

function done(main) {
  main.dataset.ready = 'true';
  performance.mark('runway:rendered');
}

/** `/ui/tokens`: the tokens this one may manage (an admin's: all), never a token's text. */
export async function tokens({ main, signal }) {
  const heading = h('h1', null, 'Tokens');
  let list;
  try {
    list = await get('/v1/tokens', signal);
  } catch (e) {
    if (e.name === 'AbortError' || e.status === 401) throw e;
    fill(main, heading, problem(e, 'the tokens'));
    done(main);
    return;
  }
  const now = Date.now();
  const state = (t) => {
    if (t.revoked_at) return 'revoked';
    if (t.expires_at && Date.parse(t.expires_at) <= now) return 'expired';
    return 'active';
  };
  fill(main, heading,
    h('p', { class: 'muted' }, 'Console sessions are tokens named ', h('code', null, 'console: …'),
      ', made from the token signed in with; revoking that token ends them. Create and revoke tokens with ',
      h('code', null, 'runway tokens'), '.'),
    table(null, [['Id', 'num'], ['Name'], ['Scope'], ['State'], ['Created'], ['Expires']],
      [...list].reverse().map((t) => [String(t.id), t.name, scopeText(t.scope), badge(state(t)),
        h('span', null, when(t.created_at), ` by ${t.created_by}`), t.expires_at ? when(t.expires_at) : 'never']),
      'No tokens.'));
  done(main);
}

/** Whose entries the audit page shows: `?by=people` or `?by=platform`, else all. */
const AUDIT_BY = [['', 'Everyone'], ['people', 'People'], ['platform', 'The platform']];

/** An audit entry's detail for people: `key=value` pairs, as `runway audit` prints them. */
function readableDetail(detail) {
  if (!detail || typeof detail !== 'object') return detail == null ? '' : String(detail);
  return Object.entries(detail)
    .filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => {
      if (typeof v !== 'string') return `${k}=${JSON.stringify(v)}`;
      return `${k}=${v === '' || /[ "=]/.test(v) ? JSON.stringify(v) : v}`;
    })
    .join(' ');
}

/** `/ui/audit`: the last 200 entries of the audit log (admin), newest first; people's
 * actions apart from the platform's own events when asked (`?by=`). */
export async function audit({ main, signal }) {
  const heading = h('h1', null, 'Audit log');
  const by = new URLSearchParams(location.search).get('by') || '';
  const known = AUDIT_BY.some(([value]) => value === by) ? by : '';
  let list;
  try {
    list = await get(`/v1/audit?last=200${known ? `&by=${enc(known)}` : ''}`, signal);
  } catch (e) {
    if (e.name === 'AbortError' || e.status === 401) throw e;
    fill(main, heading, problem(e, 'the audit log'));
    done(main);
    return;
  }
  const filters = h('p', { class: 'audit-by' }, 'Show: ',
    ...AUDIT_BY.flatMap(([value, label], i) => [
      i ? ' · ' : '',
      value === known
        ? h('strong', { 'aria-current': 'page' }, label)
        : h('a', { href: value ? `/ui/audit?by=${value}` : '/ui/audit' }, label),
    ]));
  fill(main, heading,
    filters,
    h('p', { class: 'muted' }, 'The last 200 entries, newest first; ', h('code', null, 'runway audit'),
      ' reads further back and filters by service, actor, action and time.'),
    table(null, [['When'], ['Who'], ['Action'], ['Target'], ['Detail']],
      [...list].reverse().map((a) => [when(a.at), a.actor, h('code', null, a.action), a.target,
        h('span', { class: 'mono wrap-any' }, readableDetail(a.detail))]),
      'Nothing audited yet.'));
  done(main);
}

/** `/ui/domains`: custom domains, their certificates' state; a service's maintainer adds and
 * removes its own. */
export async function domains(context) {
  const { main, who, signal } = context;
  // A maintainer of some service adds domains to it, and removes its own.
  const adds = may(who, 'POST', '/v1/domains');
  const removes = (d) => may(who, 'DELETE', '/v1/domains/{domain}', d.service, d.env);
  const heading = h('h1', null, 'Custom domains');
  let list;
  try {
    list = await get('/v1/domains', signal);
  } catch (e) {
    if (e.name === 'AbortError' || e.status === 401) throw e;
    fill(main, heading, problem(e, 'the domains'));
    done(main);
    return;
  }
  const columns = [['Domain'], ['Routes to'], ['Certificate'], ['Valid until'], ['Detail'], ['Added']];
  if (list.some(removes)) columns.push(['Action']);
  const rows = list.map((d) => {
    const cells = [
      h('a', { href: d.url, title: d.url }, h('strong', null, breakable(d.domain))),
      `${d.service} in ${d.env}`,
      badge(d.state),
      d.not_after ? when(d.not_after) : '—',
      domainDetail(d),
      h('span', null, when(d.created_at), ` by ${d.created_by}`),
    ];
    if (removes(d)) {
      cells.push(h('button', {
        type: 'button', class: 'quiet danger', 'data-key': `domain-${d.domain}`,
        'aria-label': `Remove ${d.domain}`,
        onclick: () => removeDomain(context, d),
      }, 'Remove'));
    }
    else if (columns.length > 6) cells.push('');
    return cells;
  });
  const form = adds ? await addForm(context) : null;
  fill(main, heading,
    h('p', { class: 'muted' }, 'A domain routes to a service in an environment once its DNS points at the ingress; ',
      'its certificate is issued by ACME and renewed before it expires.'),
    table(null, columns, rows, isAdmin(who) ? 'No custom domains.' : 'No custom domains route to the services you may see.'),
    form,
    adds ? null : h('p', { class: 'muted' }, 'A service\u2019s maintainer adds or removes its domains (',
      h('code', null, 'runway domains add'), '); you see those of the services you have a role on.'));
  done(main);
}

/** A domain name that may wrap after its dots, never inside a label. */
function breakable(name) {
  return name.split('.').flatMap((label, i) => (i === 0 ? [label] : ['.', h('wbr'), label]));
}

/** What stands in the way of a certificate, or when it is next renewed. */
function domainDetail(d) {
  const parts = [];
  if (d.detail) parts.push(h('span', { class: 'wrap-any' }, d.detail));
  if (d.state === 'failed' && d.attempts > 0) {
    parts.push(h('span', null, ` ${d.attempts} failed ${d.attempts === 1 ? 'attempt' : 'attempts in a row'}`,
      d.next_attempt_at ? ['; tried again ', when(d.next_attempt_at)] : null, '.'));
  } else if (d.state === 'issued' && d.next_attempt_at) {
    parts.push(h('span', null, ' Renewal due ', when(d.next_attempt_at), '.'));
  }
  return parts.length ? h('span', null, parts) : '—';
}

/** The form: a domain, the service and environment it routes to (those this token maintains). */
async function addForm(context) {
  const { who } = context;
  const maintains = (service, env) => may(who, 'POST', '/v1/domains', service, env);
  const services = (await get('/v1/services', context.signal)).filter((s) => maintains(s.name));
  if (services.length === 0) {
    return h('p', { class: 'muted' }, 'Onboard a service before routing a domain to it.');
  }
  const domain = h('input', {
    id: 'domain', name: 'domain', required: true, placeholder: 'www.example.com', autocomplete: 'off',
    autocapitalize: 'off', spellcheck: 'false', 'aria-describedby': 'domain-hint',
  });
  const service = h('select', { id: 'domain-service', name: 'service' }, services.map((s) => h('option', { value: s.name }, s.name)));
  const env = h('select', { id: 'domain-env', name: 'env' });
  const envs = () => fill(env, (services.find((s) => s.name === service.value)?.environments || [])
    .filter((e) => maintains(service.value, e)).map((e) => h('option', { value: e }, e)));
  service.addEventListener('change', envs);
  envs();
  const fields = { domain, service, env };
  const labels = { domain: 'Domain', service: 'Service', env: 'Environment' };
  const error = h('p', { id: 'domain-form-error', class: 'field-error', hidden: true });
  const button = h('button', { type: 'submit' }, 'Add domain');
  const clearError = () => {
    error.hidden = true;
    error.replaceChildren();
    for (const field of [service, env]) field.removeAttribute('aria-describedby');
    for (const field of Object.values(fields)) field.removeAttribute('aria-invalid');
    domain.setAttribute('aria-describedby', 'domain-hint');
  };
  // The API's refusal, said under the form and tied to the field it names (the domain's when
  // it names none: a name taken is the domain's fault), which takes the focus.
  const showError = (e) => {
    const name = e.field in fields ? e.field : 'domain';
    const field = fields[name];
    fill(error, h('strong', null, `${labels[name]}: `), e.message);
    error.hidden = false;
    field.setAttribute('aria-invalid', 'true');
    field.setAttribute('aria-describedby', field === domain ? 'domain-form-error domain-hint' : 'domain-form-error');
    field.focus();
  };
  const form = h('form', { class: 'inline', 'aria-labelledby': 'add-domain-h' },
    h('p', null, h('label', { for: 'domain' }, 'Domain'), domain),
    h('p', null, h('label', { for: 'domain-service' }, 'Service'), service),
    h('p', null, h('label', { for: 'domain-env' }, 'Environment'), env),
    h('p', null, button),
    error);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError();
    button.disabled = true;
    let added;
    try {
      added = await api('POST', '/v1/domains', { domain: domain.value.trim(), service: service.value, env: env.value });
    } catch (e) {
      button.disabled = false;
      if (e.status === 401) {
        context.signedOut('Your session ended: sign in again.');
      } else if ([400, 404, 409, 422].includes(e.status)) {
        showError(e);
      } else {
        announce(`Adding the domain failed: ${e.message}`, 'bad');
        domain.focus();
      }
      return;
    }
    await refresh(context);
    announce(`${added.domain} routes to ${added.service} in ${added.env}; its certificate is ${added.state}.`, 'ok');
    document.getElementById('domain')?.focus();
  });
  return h('section', { class: 'card' }, h('h2', { id: 'add-domain-h' }, 'Add a domain'), form,
    h('p', { id: 'domain-hint', class: 'muted' },
      'A name of its own whose DNS points at the ingress, such as www.example.com: not a wildcard, ',
      'an address or one of the platform\u2019s own names.'));
}

/** Draws the page again after a change; a page left meanwhile stays left. */
async function refresh(context) {
  try {
    await domains(context);
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (e.status === 401) {
      context.signedOut('Your session ended: sign in again.');
      return;
    }
    announce(`Could not reload the domains: ${e.message}`, 'bad');
  }
}

async function removeDomain(context, d) {
  const ok = await confirmAction({
    title: `Remove ${d.domain}?`,
    body: `${d.domain} stops routing to ${d.service} in ${d.env}, and its certificate is forgotten.`,
    action: 'Remove domain',
    danger: true,
  });
  if (!ok) return;
  try {
    // 204: no body.
    await api('DELETE', `/v1/domains/${enc(d.domain)}`);
  } catch (e) {
    if (e.status === 401) {
      context.signedOut('Your session ended: sign in again.');
      return;
    }
    announce(`Removing ${d.domain} failed: ${e.message}`, 'bad');
    return;
  }
  await refresh(context);
  announce(`${d.domain} was removed.`, 'ok');
  context.main.focus();
}
