// @ts-check
/**
 * @file Signing in and talking to the server: REST calls with the tab's credentials, and the
 * one socket ({@link client}) that every conversation shares.
 */

import { AgentmuxClient, defaultUrl } from '../client.js';
import { ui } from './dom.js';
import { CURRENT_KEY, DRAFT_PREFIX, SESSIONS_KEY, TOKEN_KEY, state } from './state.js';

/** What the sign-in form says when the server refused the token it was sent. */
const REFUSED = 'That token was not accepted.';

/**
 * `Authorization` for REST calls: the token, when this tab has one.
 * @returns {Record<string, string>}
 */
function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { authorization: `Bearer ${token}` } : {};
}

/**
 * Forgets the token (it was refused, or there is none yet) and shows the sign-in form.
 * Resolves once a new token has been entered.
 * @param {string} [message] why, when a token was refused
 * @returns {Promise<void>}
 */
function signIn(message = '') {
  sessionStorage.removeItem(TOKEN_KEY);
  ui.signOut.hidden = true;
  // Another refused call says nothing new: the form keeps why it came up.
  if (message || ui.signIn.hidden) ui.signInError.textContent = message;
  ui.signIn.hidden = false;
  ui.token.focus();
  state.signedIn ??= new Promise((resolve) => (state.resolveSignIn = resolve));
  return state.signedIn;
}

ui.signIn.addEventListener('submit', (event) => {
  event.preventDefault();
  const token = ui.token.value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.signOut.hidden = false;
  ui.token.value = '';
  ui.signIn.hidden = true;
  state.signedIn = null;
  state.resolveSignIn();
});

/**
 * The URL of the next connection attempt. With authentication on, it carries a fresh
 * single-use ticket (browsers can't send headers on a WebSocket); a refused token brings up
 * the sign-in form, and the attempt waits for it.
 * @returns {Promise<string>}
 */
async function socketUrl() {
  if (state.authOff) return defaultUrl();
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const response = await fetch('/api/ws-ticket', { method: 'POST', headers: authHeaders() });
    if (response.status === 401) {
      await signIn(token ? REFUSED : '');
      continue;
    }
    if (!response.ok) throw new Error(`no ticket: HTTP ${response.status}`);
    /** @type {{ticket: string, principal?: string}} */
    const { ticket, principal } = await response.json();
    state.me = principal ?? null;
    if (!token) {
      state.authOff = true;
      return defaultUrl();
    }
    return `${defaultUrl()}?ticket=${encodeURIComponent(ticket)}`;
  }
}

/**
 * A REST call with the tab's credentials. A refused token brings up the sign-in form.
 * @param {string} path
 * @param {RequestInit & {json?: unknown}} [init]
 * @returns {Promise<Response>}
 */
export async function api(path, init = {}) {
  const { json, headers: extra, ...rest } = init;
  /** @type {Record<string, string>} */
  const headers = { accept: 'application/json', ...authHeaders(), .../** @type {Record<string, string>} */ (extra ?? {}) };
  if (json !== undefined) headers['content-type'] = 'application/json';
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, {
    ...rest,
    headers,
    ...(json !== undefined ? { body: JSON.stringify(json) } : {}),
  });
  if (response.status === 401) signIn(token ? REFUSED : '');
  return response;
}

/**
 * The `error` text of a failed REST answer.
 * @param {Response} response
 */
export async function apiError(response) {
  try {
    const body = await response.json();
    return `${body.error ?? response.statusText} (${body.code ?? response.status})`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

/**
 * Signs out: this tab forgets its token, and this browser what it kept of the conversations
 * (their list, the one open, drafts); the page starts again at the sign-in form.
 */
function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  for (const key of Object.keys(localStorage)) {
    if (key === SESSIONS_KEY || key === CURRENT_KEY || key.startsWith(DRAFT_PREFIX)) localStorage.removeItem(key);
  }
  location.replace(location.pathname);
}

ui.signOut.hidden = !sessionStorage.getItem(TOKEN_KEY);
ui.signOut.addEventListener('click', signOut);

/** The socket every conversation of the page shares. */
export const client = new AgentmuxClient({ url: socketUrl });
