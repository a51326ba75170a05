// @ts-check
/**
 * @file The agentmux web UI: a session sidebar (search, activity, attention marks) and one
 * conversation pane (history, streaming, tools, diffs, per-turn rewind and fork, settings),
 * all over one WebSocket (see client.js) plus the REST API for session management. This module
 * starts the page and holds its keyboard shortcuts; each part of the page is a module of
 * ui/, and what changes while the page lives is in ui/state.js.
 */

import './ui/account.js';
import { client } from './ui/api.js';
import { interrupt } from './ui/composer.js';
import { openSession, startSession } from './ui/conversations.js';
import { ui } from './ui/dom.js';
import { renderConnection } from './ui/header.js';
import { onActivity, renderNotifyButton } from './ui/notifications.js';
import { newSession } from './ui/projects.js';
import { sendPresence, startWorker } from './ui/push.js';
import { loadSchedules } from './ui/schedules.js';
import { openLink } from './ui/sharing.js';
import { renderTheme } from './ui/settings.js';
import { loadLocalSessions, refreshSessions, renderSidebar, sortedSessions, stepSession } from './ui/sidebar.js';
import { CURRENT_KEY, state } from './ui/state.js';

/** How often the sidebar is refreshed from the server, in milliseconds. */
const SIDEBAR_REFRESH_MS = 30_000;

/** @param {EventTarget | null} target */
function typing(target) {
  return (
    target instanceof HTMLElement &&
    (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName))
  );
}

document.addEventListener('keydown', (event) => {
  if (ui.dialog.open || ui.shortcuts.open || document.querySelector('#account[open]') || ui.projectDialog.open || ui.changes.open || ui.shareDialog.open || !ui.signIn.hidden) return;
  if (event.key === 'Escape') {
    interrupt();
    return;
  }
  if (event.altKey && !event.ctrlKey && !event.metaKey) {
    if (event.code === 'KeyN') {
      event.preventDefault();
      newSession();
    } else if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      event.preventDefault();
      stepSession(event.key === 'ArrowDown' ? 1 : -1);
    }
    return;
  }
  if (typing(event.target) || event.ctrlKey || event.metaKey) return;
  if (event.key === '/') {
    event.preventDefault();
    ui.input.focus();
  } else if (event.key === '?') {
    event.preventDefault();
    ui.shortcuts.showModal();
  }
});

/** The token of a share link the page was opened with (`#link=TOKEN`), if any. */
function linkToken() {
  return location.hash.startsWith('#link=') ? location.hash.slice('#link='.length) : null;
}

window.addEventListener('hashchange', () => {
  const token = linkToken();
  if (token) {
    openLink(token, openSession);
    return;
  }
  const agentId = decodeURIComponent(location.hash.slice(1));
  if (agentId && agentId !== state.current) openSession(agentId);
});

client.watchActivity(onActivity);
client.onState((connection) => {
  renderConnection(connection);
  if (connection === 'open') {
    // A reply that was streaming when the socket dropped is replaced by the stored one.
    if (state.wasConnected) for (const view of state.views.values()) view.endStream();
    // Turns that ended while the socket was down sent no activity line.
    state.running.clear();
    state.wasConnected = true;
    refreshSessions();
    loadSchedules();
  }
});

renderTheme();
renderNotifyButton();
startWorker(openSession);
sendPresence();
loadLocalSessions();
renderConnection(client.state);
client.connect();
const token = linkToken();
const initial =
  (token ? '' : decodeURIComponent(location.hash.slice(1))) ||
  localStorage.getItem(CURRENT_KEY) ||
  sortedSessions()[0]?.agent_id;
if (initial) openSession(initial);
else startSession();
if (token) openLink(token, openSession);
setInterval(() => {
  refreshSessions();
  loadSchedules();
  renderSidebar();
}, SIDEBAR_REFRESH_MS);
