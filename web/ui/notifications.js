// @ts-check
/**
 * @file Attention: a conversation not on screen is marked in the sidebar and counted in the
 * tab's title when its turn ends or a tool waits (from its own frames, or from the activity
 * feed of every conversation), and shows a system notification when the user allowed them.
 */

import { client } from './api.js';
import { openSession } from './conversations.js';
import { ui } from './dom.js';
import { plainTitle } from './format.js';
import { pushOn } from './push.js';
import { renderSidebar, scheduleSessionsRefresh, touchSession } from './sidebar.js';
import { NOTIFY_KEY, state } from './state.js';

/** Whether the user can see this conversation right now. */
function onScreen(/** @type {string} */ agentId) {
  return agentId === state.current && document.visibilityState === 'visible';
}

/**
 * Marks a conversation that needs a look, counts it in the tab title and, when the user
 * allowed it, shows a system notification.
 * @param {string} agentId
 * @param {'done' | 'permission'} kind
 * @param {string} text
 */
export function needsAttention(agentId, kind, text) {
  if (onScreen(agentId)) return;
  const info = state.sessions.get(agentId);
  if (!info) return;
  if (info.attention !== 'permission') info.attention = kind;
  renderSidebar();
  renderTabTitle();
  // With push on for this device, the server's notification is the one shown.
  if (notificationsOn() && !pushOn()) {
    try {
      const note = new Notification(plainTitle(info.title) || 'agentmux', { body: text, tag: agentId });
      note.onclick = () => {
        window.focus();
        openSession(agentId);
        note.close();
      };
    } catch {
      // Some browsers only notify from a service worker; the sidebar mark stays.
    }
  }
}

/** @param {string} agentId */
export function clearAttention(agentId) {
  const info = state.sessions.get(agentId);
  if (!info?.attention) return;
  info.attention = '';
  renderSidebar();
  renderTabTitle();
}

/**
 * An `activity` line about any conversation of ours: the sidebar shows which run, and one not
 * on screen is marked when its turn ends or a tool waits (the open one's frames say so).
 * @param {import('../protocol').ActivityFrame} frame
 */
export function onActivity(frame) {
  const agentId = frame.agent_id;
  // A conversation opened here before it existed has been started elsewhere: follow it.
  if (state.views.has(agentId)) client.follow(agentId);
  if (frame.activity === 'turn_started') state.running.add(agentId);
  if (frame.activity === 'turn_ended') state.running.delete(agentId);
  const news =
    frame.activity === 'turn_ended'
      ? { kind: /** @type {const} */ ('done'), text: frame.is_error ? 'The turn ended with an error' : 'The reply is ready' }
      : frame.activity === 'permission_request'
        ? { kind: /** @type {const} */ ('permission'), text: `${frame.tool_name ?? 'A tool'} waits for your approval` }
        : null;
  if (!state.sessions.has(agentId)) {
    // Started elsewhere (another tab, a schedule): listed at the next refresh.
    if (news) state.unlisted.set(agentId, news);
    scheduleSessionsRefresh();
    return;
  }
  if (frame.activity === 'turn_started' || frame.activity === 'turn_ended') {
    touchSession(agentId, { last_active_at: frame.timestamp });
  }
  if (news && !state.views.get(agentId)?.live) needsAttention(agentId, news.kind, news.text);
}

/** Marks the conversations news came for before they were listed. */
export function markUnlisted() {
  for (const [agentId, news] of state.unlisted) {
    if (!state.sessions.has(agentId)) continue;
    state.unlisted.delete(agentId);
    needsAttention(agentId, news.kind, news.text);
  }
}

export function renderTabTitle() {
  const count = [...state.sessions.values()].filter((s) => s.attention).length;
  document.title = count ? `(${count}) agentmux` : 'agentmux';
}

function notificationsOn() {
  return (
    typeof Notification !== 'undefined' &&
    Notification.permission === 'granted' &&
    localStorage.getItem(NOTIFY_KEY) === 'on'
  );
}

export function renderNotifyButton() {
  const supported = typeof Notification !== 'undefined' && window.isSecureContext;
  ui.notify.disabled = !supported || Notification.permission === 'denied';
  ui.notify.setAttribute('aria-pressed', String(supported && notificationsOn()));
  ui.notify.textContent = window.isSecureContext ? 'Notifications' : 'Notifications need HTTPS';
  ui.notify.title = !window.isSecureContext
    ? 'Browsers notify only pages served over HTTPS (or from this computer): open agentmux at its https:// address'
    : !supported
      ? 'This browser has no notifications'
      : Notification.permission === 'denied'
        ? 'Notifications are blocked for this site in the browser'
        : 'Notify me when a turn finishes or a tool waits, while I look elsewhere';
}

ui.notify.addEventListener('click', async () => {
  if (typeof Notification === 'undefined') return;
  if (notificationsOn()) {
    localStorage.setItem(NOTIFY_KEY, 'off');
  } else {
    const permission =
      Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
    localStorage.setItem(NOTIFY_KEY, permission === 'granted' ? 'on' : 'off');
  }
  renderNotifyButton();
});

document.addEventListener('visibilitychange', () => {
  if (state.current && document.visibilityState === 'visible') clearAttention(state.current);
});
