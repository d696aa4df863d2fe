// The console's only way to the server: the same HTTP API and owner tokens as every
// other client. The token lives in sessionStorage (this tab, until it closes) and goes
// out only in the Authorization header: never in a URL, a cookie or localStorage.

const TOKEN_KEY = "prme-pg.token";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function signIn(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
}

export function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// A token is prme.<base64url(owner)>.<secret>: the owner is shown, never the secret.
export function ownerOf(value) {
  const parts = (value || "").split(".");
  if (parts.length !== 3 || parts[0] !== "prme") return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0));
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

// Called when the server refuses the token: the console goes back to sign-in.
let onUnauthorized = () => {};
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

export async function call(method, path, { body, query, auth = true, allow = [], signingIn = false } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    for (const one of [].concat(value)) {
      if (one !== undefined && one !== null && one !== "") url.searchParams.append(name, String(one));
    }
  }
  const headers = { Accept: "application/json" };
  if (auth) headers.Authorization = `Bearer ${token() || ""}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const send = () =>
    fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  let response = await send();
  // 429: the owner has as many requests in flight as the server allows (a page loads several
  // parts at once). The request never ran, so it is sent again after Retry-After, a few times.
  for (let retry = 0; response.status === 429 && retry < 5; retry += 1) {
    const seconds = Number(response.headers.get("Retry-After")) || 1;
    await new Promise((resolve) => setTimeout(resolve, Math.min(seconds, 5) * 1000));
    response = await send();
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { detail: text };
    }
  }
  if (response.ok || allow.includes(response.status)) return data;
  if (response.status === 401 && auth && !signingIn) onUnauthorized();
  throw new ApiError(response.status, data);
}
