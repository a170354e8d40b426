// The one place the console talks to the control plane: the same JSON API the `runway` CLI
// uses, on this page's own origin. The session is an httpOnly cookie this script never sees;
// `X-Runway-Console: 1` marks a request as the console's (the API refuses a cookie-carrying
// change without it, which a page on another site cannot add without a CORS preflight).

/** An answer that was not a success, in the API's error shape. */
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field ?? null;
  }
}

const HEADERS = { 'X-Runway-Console': '1', Accept: 'application/json' };

/** Calls the API; resolves to the JSON body (null for 204), rejects with an ApiError. */
export async function api(method, path, body, signal) {
  const init = { method, headers: { ...HEADERS }, credentials: 'same-origin', signal };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', `the control plane did not answer (${e.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || 'http',
      error.message || `${response.status} ${response.statusText}`, error.field);
  }
  return data;
}

export const get = (path, signal) => api('GET', path, undefined, signal);

export const enc = encodeURIComponent;

/** `/v1/services/{service}/environments/{env}`. */
export const envPath = (service, env) =>
  `/v1/services/${enc(service)}/environments/${enc(env)}`;

/**
 * Follows a service's logs (NDJSON from `…/logs?follow=true`), calling `onLine` with each
 * line until `signal` aborts or the server ends the stream. Rejects with an ApiError when
 * the request is refused.
 */
export async function followLogs(service, env, signal, onLine) {
  const response = await fetch(`${envPath(service, env)}/logs?follow=true&lines=200`, {
    headers: { ...HEADERS, Accept: 'application/x-ndjson' },
    credentials: 'same-origin',
    signal,
  });
  if (!response.ok) {
    let error = {};
    try {
      error = (await response.json()).error || {};
    } catch {
      error = {};
    }
    throw new ApiError(response.status, error.code || 'http', error.message || response.statusText);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += value;
    let end;
    while ((end = rest.indexOf('\n')) >= 0) {
      const line = rest.slice(0, end);
      rest = rest.slice(end + 1);
      if (!line.trim()) continue;
      try {
        onLine(JSON.parse(line));
      } catch {
        onLine({ instance: '', time: '', stream: 'stderr', text: line });
      }
    }
  }
}
