// @ts-check
/// <reference lib="webworker" />
/**
 * @file The service worker: keeps the app shell (the page, its modules, styles, icons and
 * manifest) so that the installed app opens without a network and shows "reconnecting", and
 * shows the Web Push notifications the server sends. A permission notification's Allow and
 * Deny, and a turn's Reply with a text, are sent to `POST /api/push/actions` with the
 * single-use token the push carried (no other credential); opening a notification, or Reply
 * without a text, opens its conversation.
 *
 * The server serves this file with `self.AGENTMUX_SHELL` (the shell's paths) and
 * `self.AGENTMUX_VERSION` (made from their contents) set in front of it.
 */

const sw = /** @type {ServiceWorkerGlobalScope & {AGENTMUX_SHELL?: string[], AGENTMUX_VERSION?: string}} */ (
  /** @type {unknown} */ (self)
);
const SHELL = sw.AGENTMUX_SHELL ?? ['/'];
const CACHE = `agentmux-shell-${sw.AGENTMUX_VERSION ?? 'dev'}`;

/**
 * What a push carries (see docs/notifications.md).
 * @typedef {object} PushNews
 * @property {'permission' | 'turn' | 'schedule' | 'test'} kind
 * @property {string} [agent_id] the conversation
 * @property {string} title its title
 * @property {string} body a line about what happened
 * @property {string} [token] what the notification's buttons send
 */

sw.addEventListener('install', (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(SHELL))
      .then(() => sw.skipWaiting()),
  );
});

sw.addEventListener('activate', (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((n) => n !== CACHE).map((n) => caches.delete(n))))
      .then(() => sw.clients.claim()),
  );
});

sw.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== 'GET' || url.origin !== sw.location.origin) return;
  const key = request.mode === 'navigate' ? '/' : url.pathname;
  if (!SHELL.includes(key)) return;
  event.respondWith(fresh(request, key));
});

/**
 * The network's answer (kept for next time), or the kept one when the network fails.
 * @param {Request} request
 * @param {string} key
 */
async function fresh(request, key) {
  const cache = await caches.open(CACHE);
  try {
    const response = await fetch(request);
    if (response.ok) await cache.put(key, response.clone());
    return response;
  } catch (err) {
    const kept = await cache.match(key);
    if (kept) return kept;
    throw err;
  }
}

sw.addEventListener('push', (event) => {
  /** @type {PushNews} */
  let news;
  try {
    news = event.data?.json();
  } catch {
    return;
  }
  if (!news?.title) return;
  event.waitUntil(show(news));
});

/**
 * Shows a push as a notification, with its buttons.
 * @param {PushNews} news
 */
function show(news) {
  const actions =
    news.kind === 'permission'
      ? [
          { action: 'allow', title: 'Allow' },
          { action: 'deny', title: 'Deny' },
        ]
      : news.kind === 'turn' || news.kind === 'schedule'
        ? [{ action: 'reply', title: 'Reply', type: 'text', placeholder: 'Reply' }]
        : [];
  // `actions` (and a text Reply) are not in every typing of NotificationOptions yet.
  const options = /** @type {NotificationOptions} */ ({
    body: news.body,
    tag: news.agent_id ?? 'agentmux',
    icon: '/assets/icon-192.png',
    badge: '/assets/icon-192.png',
    data: news,
    actions,
    requireInteraction: news.kind === 'permission',
  });
  return sw.registration.showNotification(news.title, options);
}

sw.addEventListener('notificationclick', (event) => {
  const note = event.notification;
  note.close();
  /** @type {PushNews} */
  const news = note.data ?? {};
  const reply = /** @type {{reply?: string | null}} */ (/** @type {unknown} */ (event)).reply;
  const done = act(event.action, news, reply ?? '');
  event.waitUntil(done);
});

/**
 * What a click on a notification (or one of its buttons) does.
 * @param {string} action `allow`, `deny`, `reply` or '' (the notification itself)
 * @param {PushNews} news
 * @param {string} text what was typed into Reply, where the platform offers it
 */
async function act(action, news, text) {
  if ((action === 'allow' || action === 'deny') && news.token) {
    return send(news, { token: news.token, action });
  }
  if (action === 'reply' && text.trim() && news.token) {
    return send(news, { token: news.token, action, text });
  }
  return openConversation(news.agent_id);
}

/**
 * Posts a button's action; a refusal (a used or expired token, a prompt already answered) is
 * told in a notification of its own, which opens the conversation.
 * @param {PushNews} news
 * @param {{token: string, action: string, text?: string}} body
 */
async function send(news, body) {
  let problem = '';
  try {
    const response = await fetch('/api/push/actions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (response.status === 403) problem = 'This notification has expired.';
    else if (response.status === 404) problem = 'This was answered already, or the conversation is gone.';
    else if (!response.ok) problem = `The server said ${response.status}.`;
  } catch {
    problem = 'The server could not be reached.';
  }
  if (problem) {
    await sw.registration.showNotification(news.title, {
      body: `${problem} Open the conversation to answer there.`,
      tag: news.agent_id ?? 'agentmux',
      data: { ...news, kind: 'test', token: undefined },
    });
  }
}

/**
 * Focuses a window of the app on the conversation, or opens one.
 * @param {string | undefined} agentId
 */
async function openConversation(agentId) {
  const path = agentId ? `/#${encodeURIComponent(agentId)}` : '/';
  const windows = await sw.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const open = windows.find((w) => new URL(w.url).origin === sw.location.origin);
  if (open) {
    await open.focus();
    if (agentId) open.postMessage({ type: 'open', agent_id: agentId });
    return;
  }
  await sw.clients.openWindow(path);
}
