// The admin's pages (tokens, the audit log) and custom domains.

import { api, get, enc } from './api.js';
import { h, fill, table, badge, announce, problem, confirmAction, when, isAdmin } from './ui.js';

function done(main) {
  main.dataset.ready = 'true';
  performance.mark('runway:rendered');
}

function scopeText(scope) {
  if (scope.admin) return 'admin';
  return `deploy: ${scope.deploy.service} in ${scope.deploy.environments.join(', ')}`;
}

/** `/ui/tokens`: every token (admin), never a token's text. */
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

/** `/ui/audit`: the last 200 entries of the audit log (admin), newest first. */
export async function audit({ main, signal }) {
  const heading = h('h1', null, 'Audit log');
  let list;
  try {
    list = await get('/v1/audit?last=200', signal);
  } catch (e) {
    if (e.name === 'AbortError' || e.status === 401) throw e;
    fill(main, heading, problem(e, 'the audit log'));
    done(main);
    return;
  }
  fill(main, heading,
    h('p', { class: 'muted' }, 'The last 200 entries, newest first; ', h('code', null, 'runway audit'), ' reads further back.'),
    table(null, [['When'], ['Who'], ['Action'], ['Target'], ['Detail']],
      [...list].reverse().map((a) => [when(a.at), a.actor, h('code', null, a.action), a.target,
        h('span', { class: 'mono wrap-any' }, a.detail && Object.keys(a.detail).length ? JSON.stringify(a.detail) : '')]),
      'Nothing audited yet.'));
  done(main);
}

/** `/ui/domains`: custom domains, their certificates' state; an admin adds and removes them. */
export async function domains(context) {
  const { main, who, signal } = context;
  const heading = h('h1', null, 'Custom domains');
  let list;
  try {
    list = await get('/v1/domains', signal);
  } catch (e) {
    if (e.name === 'AbortError' || e.status === 401) throw e;
    if (e.status === 404 && e.message === 'no such route') {
      fill(main, heading, h('div', { class: 'note' },
        h('p', null, 'This control plane does not serve custom domains yet: its API has no ', h('code', null, '/v1/domains'), '.')));
    } else {
      fill(main, heading, problem(e, 'the domains'));
    }
    done(main);
    return;
  }
  const rows = list.map((d) => [
    h('strong', { class: 'wrap-any' }, d.domain),
    `${d.service} in ${d.env}`,
    badge(d.state),
    d.not_after ? when(d.not_after) : '—',
    [d.source ? `${d.source}. ` : '', d.detail || ''].join('') || '—',
    isAdmin(who) ? h('button', {
      type: 'button', class: 'quiet danger', 'data-key': `domain-${d.domain}`,
      onclick: () => removeDomain(context, d),
    }, 'Remove') : '',
  ]);
  fill(main, heading,
    h('p', { class: 'muted' }, 'A domain routes to a service in an environment once its DNS points at the ingress; ',
      'its certificate is issued by ACME and renewed before it expires.'),
    table(null, [['Domain'], ['Routes to'], ['Certificate'], ['Valid until'], ['Detail'], ['Action']], rows,
      'No custom domains.'),
    isAdmin(who) ? await addForm(context) : null);
  done(main);
}

async function addForm(context) {
  const services = await get('/v1/services', context.signal);
  if (services.length === 0) return null;
  const domain = h('input', { id: 'domain', name: 'domain', required: true, placeholder: 'www.example.com', autocomplete: 'off' });
  const service = h('select', { id: 'domain-service', name: 'service' }, services.map((s) => h('option', { value: s.name }, s.name)));
  const env = h('select', { id: 'domain-env', name: 'env' });
  const envs = () => fill(env, (services.find((s) => s.name === service.value)?.environments || []).map((e) => h('option', { value: e }, e)));
  service.addEventListener('change', envs);
  envs();
  const form = h('form', { class: 'inline', 'aria-labelledby': 'add-domain-h' },
    h('p', null, h('label', { for: 'domain' }, 'Domain'), domain),
    h('p', null, h('label', { for: 'domain-service' }, 'Service'), service),
    h('p', null, h('label', { for: 'domain-env' }, 'Environment'), env),
    h('p', null, h('button', { type: 'submit' }, 'Add domain')));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      const added = await api('POST', '/v1/domains', { domain: domain.value.trim(), service: service.value, env: env.value });
      await domains(context);
      announce(`${added.domain} routes to ${added.service} in ${added.env}; its certificate is ${added.state}.`, 'ok');
    } catch (e) {
      announce(`Adding the domain failed: ${e.message}`, 'bad');
      domain.focus();
    }
  });
  return h('section', { class: 'card' }, h('h2', { id: 'add-domain-h' }, 'Add a domain'), form);
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
    await api('DELETE', `/v1/domains/${enc(d.domain)}`);
    await domains(context);
    announce(`${d.domain} was removed.`, 'ok');
  } catch (e) {
    announce(`Removing ${d.domain} failed: ${e.message}`, 'bad');
  }
}
