// @ts-check
/**
 * @file The conversation's header and controls: its title, totals, branch and the buttons that
 * act on it, the Stop button while a turn runs, and the connection's state.
 */

import { client } from './api.js';
import { renderWorktree } from './changes.js';
import { ui } from './dom.js';
import { dollars, plainTitle } from './format.js';
import { renderPickers } from './settings.js';
import { OWNER_ONLY, allow, renderRole, roleOf } from './sharing.js';
import { state } from './state.js';

/** @typedef {import('../client.js').ConnectionState} ConnectionState */

export function renderHeader() {
  const info = state.current ? state.sessions.get(state.current) : undefined;
  ui.title.textContent = plainTitle(info?.title ?? '') || 'New session';
  ui.title.title = info?.title ?? '';
  const exists = !!state.current && (client.lastSeq(state.current) > 0 || typeof info?.total_cost_usd === 'number');
  ui.exportButton.disabled = !exists;
  renderRole();
  const owned = roleOf(state.current) === 'owner' ? '' : OWNER_ONLY;
  for (const b of [ui.rename, ui.deleteButton, ui.share]) {
    if (owned) allow(b, owned);
    else {
      allow(b, '');
      b.disabled = !exists;
    }
  }
  const spent = (info?.total_cost_usd ?? 0) > 0 || (info?.input_tokens ?? 0) + (info?.output_tokens ?? 0) > 0;
  if (info && typeof info.total_cost_usd === 'number' && spent) {
    ui.totals.textContent = `${dollars(info.total_cost_usd)} · ${info.input_tokens ?? 0} in / ${info.output_tokens ?? 0} out tokens`;
    ui.totals.title = 'What this conversation has cost so far';
  } else {
    ui.totals.textContent = '';
  }
  renderWorktree(info);
  renderPickers(info);
}

export function renderControls() {
  const busy = state.current ? (state.views.get(state.current)?.busy ?? false) : false;
  ui.stop.hidden = !busy;
  document.body.classList.toggle('busy', busy);
}

/** @param {ConnectionState} connection */
export function renderConnection(connection) {
  const labels = {
    connecting: 'Connecting…',
    open: 'Connected',
    reconnecting: 'Reconnecting…',
    closed: 'Disconnected',
  };
  ui.conn.textContent = labels[connection];
  ui.conn.dataset.state = connection;
}
