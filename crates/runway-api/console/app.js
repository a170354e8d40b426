// The console's entry: who is signed in (GET /v1/whoami), sign-in and sign-out (the session
// endpoints), and the pages by path under /ui/ (history navigation, no reloads).

import { api, ApiError } from './api.js';
import { h, fill, announce, clearAnnouncement, may, setAccess, scopeText } from './ui.js';
import { overview, serviceEnv, serviceHome } from './pages.js';
import { tokens, audit, domains } from './admin.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const whoBox = document.getElementById('who');

const ROUTES = [
  [/^\/ui\/?$/, overview, 'Services'],
  [/^\/ui\/services\/([^/]+)\/([^/]+)\/?$/, serviceEnv, null],
  [/^\/ui\/services\/([^/]+)\/?$/, serviceHome, null],
  [/^\/ui\/tokens\/?$/, tokens, 'Tokens'],
  [/^\/ui\/audit\/?$/, audit, 'Audit log'],
  [/^\/ui\/domains\/?$/, domains, 'Domains'],
];

let who = null;
// What the page on screen holds open (its live stream, its followed logs): ended on leaving.
let leave = new AbortController();

async function boot() {
  try {
    const [signedIn, access] = await Promise.all([api('GET', '/v1/whoami'), api('GET', '/v1/access')]);
    who = signedIn;
    setAccess(access);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      signIn();
      return;
    }
    fill(main, h('div', { class: 'note bad', role: 'alert' }, h('p', null, `Cannot reach the control plane: ${e.message}`)));
    return;
  }
  fill(document.getElementById('who-name'), 'Signed in as ', h('strong', null, who.name), ` (${scopeText(who.scope)})`);
  whoBox.hidden = false;
  nav.hidden = false;
  // Each page shows where its route's role is had (`data-route`: the access table's).
  for (const item of nav.querySelectorAll('[data-route]')) {
    const [method, path] = item.dataset.route.split(' ');
    item.hidden = !may(who, method, path);
  }
  await render();
}

/** The page for the current path. */
async function render() {
  leave.abort();
  leave = new AbortController();
  const path = decodeURI(location.pathname);
  for (const link of nav.querySelectorAll('a')) {
    const current = link.getAttribute('href') === '/ui/' ? /^\/ui\/(services\/.*)?$/.test(path) : path.startsWith(link.getAttribute('href'));
    if (current) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
  }
  for (const [pattern, page, title] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    document.title = title ? `${title} · Runway` : 'Runway';
    const context = { main, who, signal: leave.signal, go, params: match.slice(1), signedOut };
    main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    try {
      await page(context);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e instanceof ApiError && e.status === 401) {
        signedOut('Your session ended: sign in again.');
        return;
      }
      fill(main, h('div', { class: 'note bad', role: 'alert' }, h('p', null, e.message)));
    }
    return;
  }
  document.title = 'Not found · Runway';
  fill(main, h('h1', null, 'Not found'), h('p', null, 'The console has no such page. ', h('a', { href: '/ui/' }, 'All services')));
}

/** Goes to `path` inside the console, without reloading. */
function go(path) {
  clearAnnouncement();
  history.pushState(null, '', path);
  render().then(() => main.focus());
}

function signedOut(message) {
  leave.abort();
  who = null;
  whoBox.hidden = true;
  nav.hidden = true;
  signIn(message);
}

function signIn(message) {
  document.title = 'Sign in · Runway';
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true,
    'aria-describedby': 'token-help', spellcheck: 'false' });
  const error = h('div', { role: 'alert' });
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'signin', novalidate: true },
    h('h1', null, 'Sign in to Runway'),
    message ? h('div', { class: 'note' }, h('p', null, message)) : null,
    h('p', null, h('label', { for: 'token' }, 'Runway token'), input),
    h('p', { id: 'token-help', class: 'muted' },
      'An admin token, or a service\u2019s deploy token (which sees only its service). ',
      'The console keeps a session of at most 12 hours in a cookie its scripts cannot read; ',
      'signing out ends it.'),
    error,
    h('p', null, button));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) {
      fill(error, h('div', { class: 'note bad' }, h('p', null, 'Paste a token: runway_admin_… or runway_deploy_…')));
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      await api('POST', '/v1/session', { token });
      input.value = '';
      if (!location.pathname.startsWith('/ui/')) history.replaceState(null, '', '/ui/');
      await boot();
      main.focus();
    } catch (e) {
      // The API's one message for a malformed or unknown token speaks of a header the
      // console sends for you; say what it means here.
      const text = e.status === 401 && e.message.startsWith('missing or invalid token')
        ? 'This is not a token this server knows: paste the whole of it (runway_admin_… or runway_deploy_…).'
        : e.message;
      fill(error, h('div', { class: 'note bad' }, h('p', null, text)));
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  fill(main, form);
  input.focus();
  // With a sign-in provider (api.sso), people sign in there instead.
  api('GET', '/v1/sso').then((sso) => {
    if (!sso.enabled) return;
    const to = location.pathname.startsWith('/ui/') ? location.pathname : '/ui/';
    const link = h('a', { class: 'button', href: `/v1/sso/login?to=${encodeURIComponent(to)}` }, 'Sign in with single sign-on');
    form.insertBefore(h('p', { class: 'sso' }, link, h('span', { class: 'muted' }, ' or with a token:')), form.children[message ? 2 : 1]);
  }).catch(() => {});
}

document.getElementById('sign-out').addEventListener('click', async () => {
  try {
    await api('DELETE', '/v1/session');
  } catch (e) {
    // A session that had already ended is as good as ended now.
    if (!(e instanceof ApiError && e.status === 401)) {
      announce(`Signing out failed: ${e.message}`, 'bad');
      return;
    }
  }
  clearAnnouncement();
  signedOut('Signed out.');
});

// Links inside the console change the page without a reload.
document.addEventListener('click', (event) => {
  const link = event.target.closest('a[href]');
  if (!link || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || link.target) return;
  event.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener('popstate', () => { clearAnnouncement(); render(); });

boot();
