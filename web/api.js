// The head's API from the browser: requests with the admin token or a user's token, and watch streams read with
// fetch (EventSource cannot send an Authorization header). The token lives in sessionStorage
// only: it is gone when the tab closes.

const TOKEN_KEY = 'tessera.token';

export class AuthError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers() {
  return {Authorization: `Bearer ${token()}`};
}

async function check(res) {
  if (res.ok) return res;
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body.error) message = body.error;
  } catch (_) { /* not JSON */ }
  if (res.status === 401) throw new AuthError(401, 'The head refused this token (401).');
  // The head's 403 names the user, the verb, the object and the role that would allow it.
  if (res.status === 403) throw new AuthError(403, message);
  throw new Error(message);
}

export async function getJson(path, options = {}) {
  const res = await fetch(path, {headers: headers(), ...options});
  await check(res);
  return res.json();
}

export async function getText(path, options = {}) {
  const res = await fetch(path, {headers: headers(), ...options});
  await check(res);
  return res.text();
}

// A watch's resourceVersion is too old (or from an earlier run of the head): list again.
export class GoneError extends Error {}

// Follows `path`?watch=true, from `resourceVersion` when given (the changes after it), else
// from the start (the current objects as ADDED, then the changes: the head takes both at once).
// Calls onReady() when connected, onChange({type, object, resourceVersion}) per change.
// Resolves when the stream ends; rejects with GoneError when the version is too old,
// AuthError on 401/403 and Error otherwise.
export async function watchOnce(path, {resourceVersion, onReady, onChange, signal}) {
  const sep = path.includes('?') ? '&' : '?';
  const from = resourceVersion ? `&resourceVersion=${encodeURIComponent(resourceVersion)}` : '';
  const res = await fetch(`${path}${sep}watch=true${from}`, {headers: headers(), signal});
  if (res.status === 410) throw new GoneError(`${path}: resourceVersion ${resourceVersion} is gone`);
  await check(res);
  onReady?.();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue;
      const change = JSON.parse(line);
      if (change.type === 'ERROR') {
        reader.cancel().catch(() => {});
        throw new GoneError(change.object?.message || `${path}: watch error`);
      }
      onChange(change);
    }
  }
}

// Keeps a watch open: reconnects with backoff (0.5 s doubling to 10 s) when it ends or fails,
// resuming after the last change it delivered, so nothing is missed or repeated. Only when that
// version is gone does it start over: onReady({replay: true}) then tells the caller to drop
// what it holds, as the current objects arrive again as ADDED. Stops on AuthError (calls
// onAuthError) or when `signal` aborts.
export async function watch(path, {onReady, onChange, onAuthError, onStatus, signal}) {
  let backoff = 500;
  let version = '';
  while (!signal?.aborted) {
    try {
      await watchOnce(path, {
        resourceVersion: version,
        onReady: () => {
          backoff = 500;
          onStatus?.('live');
          onReady?.({replay: !version});
        },
        onChange: (change) => {
          if (change.resourceVersion) version = change.resourceVersion;
          onChange(change);
        },
        signal,
      });
      onStatus?.('reconnecting');
    } catch (e) {
      if (signal?.aborted) return;
      if (e instanceof AuthError) { onAuthError?.(e); return; }
      if (e instanceof GoneError) version = '';
      onStatus?.('reconnecting');
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(10000, backoff * 2);
  }
}
