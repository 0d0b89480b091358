// The admin API, called with the master key the operator signed in with.
//
// The key lives in this tab's sessionStorage only: never in a URL, a cookie or a log line.
// Every call sends it as "Authorization: Bearer"; a 401 signs the tab out.

const STORAGE = "crossway.masterKey";
let onSignedOut = () => {};

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.param = error.param || null;
  }
}

export const masterKey = () => sessionStorage.getItem(STORAGE);
export const signedIn = () => Boolean(masterKey());
export function whenSignedOut(handler) { onSignedOut = handler; }

/** Check `key` against the admin API; keep it when it is the master key (else throw ApiError). */
export async function signIn(key) {
  await call("GET", "/admin/teams", { key });
  sessionStorage.setItem(STORAGE, key);
}

export function signOut() {
  sessionStorage.removeItem(STORAGE);
  onSignedOut();
}

/**
 * `method path` with `query` (an object; empty values left out) and a JSON `body`.
 * Returns the decoded JSON (null for 204). Throws ApiError for any other status.
 */
export async function call(method, path, { query = null, body = undefined, key = masterKey() } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
  }
  const headers = { Authorization: `Bearer ${key || ""}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (response.status === 401 && key === masterKey()) signOut();
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path, query) => call("GET", path, { query });
