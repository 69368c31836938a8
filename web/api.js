// The head's API from the browser: requests with the admin token, and watch streams read with
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
  if (res.status === 403)
    throw new AuthError(403, 'This token may not read the API (403): use the admin token.');
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

// Follows `path`?watch=true: calls onReady() when connected, onChange({type, object}) per
// line. Resolves when the stream ends; rejects with AuthError on 401/403 and Error otherwise.
export async function watchOnce(path, {onReady, onChange, signal}) {
  const sep = path.includes('?') ? '&' : '?';
  const res = await fetch(`${path}${sep}watch=true`, {headers: headers(), signal});
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
      if (line) onChange(JSON.parse(line));
    }
  }
}

// Keeps a watch open: reconnects with backoff (0.5 s doubling to 10 s) when it ends or fails.
// Stops on AuthError (calls onAuthError) or when `signal` aborts.
export async function watch(path, {onReady, onChange, onAuthError, onStatus, signal}) {
  let backoff = 500;
  while (!signal?.aborted) {
    try {
      await watchOnce(path, {
        onReady: () => { backoff = 500; onStatus?.('live'); onReady?.(); },
        onChange, signal,
      });
      onStatus?.('reconnecting');
    } catch (e) {
      if (signal?.aborted) return;
      if (e instanceof AuthError) { onAuthError?.(e); return; }
      onStatus?.('reconnecting');
    }
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(10000, backoff * 2);
  }
}
