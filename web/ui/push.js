// @ts-check
/**
 * @file Web Push on this device: the service worker (the installed app's offline shell and its
 * notifications), telling the server which conversation is in view (it pushes nothing about
 * that one), and the Push dialog: enable or disable push here, which news, a test.
 */

import { api, apiError, client } from './api.js';
import { ui } from './dom.js';
import { PUSH_KEY, state } from './state.js';

/** Tells the server what this page shows now. */
export function sendPresence() {
  client.presence(document.visibilityState === 'visible', state.current);
}

document.addEventListener('visibilitychange', sendPresence);

/** Whether push is on for this device (then the page shows no notifications of its own). */
export function pushOn() {
  return localStorage.getItem(PUSH_KEY) !== null;
}

/**
 * Registers the service worker; `open` is called with the conversation a notification asks
 * for, when the page is already open.
 * @param {(agentId: string) => void} open
 */
export function startWorker(open) {
  if (!('serviceWorker' in navigator)) return;
  navigator.serviceWorker.register('/sw.js').catch(() => {
    // Not a secure context, or the browser refused: the page works without it.
  });
  navigator.serviceWorker.addEventListener('message', (event) => {
    if (event.data?.type === 'open' && typeof event.data.agent_id === 'string') open(event.data.agent_id);
  });
}

/** Whether this browser can do Web Push at all. */
function supported() {
  return window.isSecureContext && 'serviceWorker' in navigator && 'PushManager' in window && typeof Notification !== 'undefined';
}

/** The news ticked in the dialog. */
function events() {
  return [...ui.pushEvents.querySelectorAll('input')].filter((i) => i.checked).map((i) => i.value);
}

/** @param {string} text */
function say(text) {
  ui.pushStatus.textContent = text;
}

function render() {
  const on = pushOn();
  ui.pushToggle.textContent = on ? 'Turn off on this device' : 'Enable on this device';
  ui.pushToggle.disabled = !supported();
  ui.pushTest.disabled = !on;
  if (!window.isSecureContext) say('Push needs this page over HTTPS (or from this computer): open agentmux at its https:// address.');
  else if (!supported()) say('This browser has no Web Push. On an iPhone, add agentmux to the Home Screen and open it from there.');
}

/**
 * The base64url key as bytes, for `applicationServerKey`.
 * @param {string} text
 */
function bytes(text) {
  const b64 = text.replace(/-/g, '+').replace(/_/g, '/');
  return Uint8Array.from(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0));
}

/** Subscribes this browser and tells the server (again: with the news ticked now). */
async function enable() {
  const permission = Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
  if (permission !== 'granted') {
    say('Notifications are blocked for this site in the browser.');
    return;
  }
  const key = await api('/api/push/key');
  if (!key.ok) {
    say(`The server has push off: ${await apiError(key)}`);
    return;
  }
  /** @type {{public_key: string}} */
  const { public_key } = await key.json();
  const registration = await navigator.serviceWorker.ready;
  const subscription =
    (await registration.pushManager.getSubscription()) ??
    (await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: bytes(public_key) }));
  const saved = await api('/api/push/subscriptions', { method: 'POST', json: { ...subscription.toJSON(), events: events() } });
  if (!saved.ok) {
    say(`Not enabled: ${await apiError(saved)}`);
    return;
  }
  /** @type {{id: string}} */
  const { id } = await saved.json();
  localStorage.setItem(PUSH_KEY, id);
  say('On: this device is told when you are not looking.');
}

async function disable() {
  const id = localStorage.getItem(PUSH_KEY);
  localStorage.removeItem(PUSH_KEY);
  if (id) await api(`/api/push/subscriptions/${encodeURIComponent(id)}`, { method: 'DELETE' });
  const registration = await navigator.serviceWorker.ready;
  await (await registration.pushManager.getSubscription())?.unsubscribe();
  say('Off on this device.');
}

/** @param {() => Promise<void>} step */
async function run(step) {
  ui.pushToggle.disabled = true;
  try {
    await step();
  } catch (err) {
    say(`Failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  render();
}

ui.pushOpen.addEventListener('click', () => {
  say('');
  render();
  ui.push.showModal();
});
ui.pushClose.addEventListener('click', () => ui.push.close());
ui.pushToggle.addEventListener('click', () => run(pushOn() ? disable : enable));
ui.pushEvents.addEventListener('change', () => {
  if (pushOn()) run(enable);
});
ui.pushTest.addEventListener('click', async () => {
  const sent = await api('/api/push/test', { method: 'POST' });
  say(sent.ok ? 'Sent: it should show in a moment.' : `Not sent: ${await apiError(sent)}`);
});
