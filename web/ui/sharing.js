// @ts-check
/**
 * @file Working together on a conversation: the Share dialog (sharing with a principal in a
 * role, the list of shares with Revoke, making a link), opening a link, what a conversation
 * shared with you lets you do (the controls it does not are disabled, saying why), and who is
 * viewing it.
 */

import { api, apiError } from './api.js';
import { button, el, messagePlaceholder, ui } from './dom.js';
import { state } from './state.js';

/** Why a control is off in a conversation shared with you as a viewer. */
export const VIEWER_ONLY = 'Shared with you as a viewer: only its owner or an editor can do this';
/** Why a control is off in a conversation shared with you at all. */
export const OWNER_ONLY = 'Only the owner of this conversation can do this';

/**
 * The caller's role in a conversation: `owner` for their own, else the role it was shared
 * with them in.
 * @param {string | null} agentId
 * @returns {'owner' | 'editor' | 'viewer'}
 */
export function roleOf(agentId) {
  const info = agentId ? state.sessions.get(agentId) : undefined;
  return info?.role ?? 'owner';
}

/** The titles controls have when nothing limits them. */
const ownTitles = new Map();

/**
 * Turns a control on or off, its title saying why it is off.
 * @param {HTMLButtonElement | HTMLSelectElement | HTMLTextAreaElement} control
 * @param {string} why empty: allowed
 */
export function allow(control, why) {
  if (!ownTitles.has(control)) ownTitles.set(control, control.title);
  control.disabled = why !== '';
  control.title = why || (ownTitles.get(control) ?? '');
  if (why) control.setAttribute('aria-description', why);
  else control.removeAttribute('aria-description');
}

/** Applies the open conversation's role to the controls a role limits. */
export function renderRole() {
  const role = roleOf(state.current);
  const viewer = role === 'viewer' ? VIEWER_ONLY : '';
  const ownerOnly = role === 'owner' ? '' : OWNER_ONLY;
  for (const c of [ui.input, ui.send, ui.stop, ui.attach]) allow(c, viewer);
  ui.input.placeholder = viewer ? 'You can read this conversation: only its owner or an editor can write in it' : messagePlaceholder();
  for (const c of [ui.model, ui.permissionMode, ui.share]) allow(c, ownerOnly);
  const info = state.current ? state.sessions.get(state.current) : undefined;
  ui.sharedBy.hidden = role === 'owner';
  ui.sharedBy.textContent = info?.owner ? `${info.owner}’s · you are ${role === 'viewer' ? 'a viewer' : 'an editor'}` : '';
  renderViewers();
}

/**
 * Applies `agentId`'s role to the controls of a turn or a permission prompt in its pane.
 * @param {string} agentId
 * @param {HTMLElement} root
 */
export function limitActions(agentId, root) {
  if (roleOf(agentId) !== 'viewer') return;
  for (const b of root.querySelectorAll('button.allow, button.allow-always, button.deny, button.turn-rewind, input.permission-reason')) {
    allow(/** @type {HTMLButtonElement} */ (b), VIEWER_ONLY);
  }
}

/** Who is viewing each conversation, by agent_id, from its last `viewers` frame. */
const viewing = new Map();

/**
 * A `viewers` frame: who views the conversation now.
 * @param {string} agentId
 * @param {{viewers: string[]}} frame
 */
export function viewersChanged(agentId, frame) {
  viewing.set(agentId, frame.viewers);
  if (agentId === state.current) renderViewers();
}

/**
 * Whether a conversation is worked on by several principals: shared with the caller, or
 * viewed by someone else.
 * @param {string} agentId
 */
export function isShared(agentId) {
  return roleOf(agentId) !== 'owner' || (viewing.get(agentId)?.length ?? 0) > 1;
}

function renderViewers() {
  const names = (state.current && viewing.get(state.current)) || [];
  ui.viewers.hidden = names.length < 2;
  ui.viewers.textContent = names.length < 2 ? '' : `Viewing: ${names.join(', ')}`;
}

/** Loads the open conversation's shares and links into the dialog. */
async function loadShares() {
  const agentId = state.current;
  if (!agentId) return;
  const path = `/api/sessions/${encodeURIComponent(agentId)}`;
  const [shares, links] = await Promise.all([api(`${path}/shares`), api(`${path}/links`)]);
  if (!shares.ok) {
    ui.shareError.textContent = await apiError(shares);
    return;
  }
  /** @type {{shares: {principal: string, role: string}[]}} */
  const body = await shares.json();
  ui.shareList.replaceChildren(
    ...body.shares.map((s) => {
      const li = el('li', 'share');
      li.append(el('span', 'share-who', s.principal), el('span', 'share-role', s.role));
      const revoke = button('Revoke', 'danger', async () => {
        const response = await api(`${path}/shares/${encodeURIComponent(s.principal)}`, { method: 'DELETE' });
        if (!response.ok) ui.shareError.textContent = await apiError(response);
        loadShares();
      });
      revoke.setAttribute('aria-label', `Revoke ${s.principal}`);
      li.append(revoke);
      return li;
    }),
  );
  ui.shareEmpty.hidden = body.shares.length > 0;
  if (!links.ok) return;
  /** @type {{links: {id: string, role: string, expires_at: string, uses: number, max_uses: number | null}[]}} */
  const listed = await links.json();
  ui.linkList.replaceChildren(
    ...listed.links.map((l) => {
      const li = el('li', 'share');
      const uses = l.max_uses === null ? `${l.uses} uses` : `${l.uses} of ${l.max_uses} uses`;
      const until = new Date(l.expires_at).toLocaleString();
      li.append(el('span', 'share-who', `Link (${l.role})`), el('span', 'share-role', `${uses}, until ${until}`));
      const revoke = button('Revoke', 'danger', async () => {
        await api(`${path}/links/${encodeURIComponent(l.id)}`, { method: 'DELETE' });
        loadShares();
      });
      revoke.setAttribute('aria-label', `Revoke link ${l.id}`);
      li.append(revoke);
      return li;
    }),
  );
}

ui.share.addEventListener('click', () => {
  ui.shareError.textContent = '';
  ui.linkUrl.hidden = true;
  ui.shareDialog.showModal();
  ui.sharePrincipal.focus();
  loadShares();
});
ui.shareClose.addEventListener('click', () => ui.shareDialog.close());
ui.shareForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  const who = ui.sharePrincipal.value.trim();
  if (!who || !state.current) return;
  const response = await api(`/api/sessions/${encodeURIComponent(state.current)}/shares/${encodeURIComponent(who)}`, {
    method: 'PUT',
    json: { role: ui.shareRole.value },
  });
  ui.shareError.textContent = response.ok ? '' : await apiError(response);
  if (response.ok) ui.sharePrincipal.value = '';
  loadShares();
});
ui.makeLink.addEventListener('click', async () => {
  if (!state.current) return;
  const response = await api(`/api/sessions/${encodeURIComponent(state.current)}/links`, {
    method: 'POST',
    json: { role: ui.linkRole.value, expires_in_secs: Number(ui.linkExpiry.value) },
  });
  if (!response.ok) {
    ui.shareError.textContent = await apiError(response);
    return;
  }
  /** @type {{url: string}} */
  const made = await response.json();
  ui.linkUrl.value = new URL(made.url, location.origin).href;
  ui.linkUrl.hidden = false;
  ui.linkUrl.select();
  loadShares();
});

/**
 * Opens a share link's token: the conversation is shared with this principal, and opened.
 * @param {string} token
 * @param {(agentId: string) => void} open
 */
export async function openLink(token, open) {
  const response = await api('/api/links/open', { method: 'POST', json: { token } });
  history.replaceState(null, '', location.pathname);
  if (!response.ok) {
    ui.linkError.textContent = `This share link can't be opened: ${await apiError(response)}`;
    ui.linkError.hidden = false;
    return;
  }
  /** @type {{agent_id: string, owner: string, role: 'viewer' | 'editor', title: string | null, created_at: string, last_active_at: string}} */
  const shared = await response.json();
  state.sessions.set(shared.agent_id, {
    agent_id: shared.agent_id,
    title: shared.title ?? '',
    created_at: shared.created_at,
    last_active_at: shared.last_active_at,
    owner: shared.owner,
    role: shared.role,
  });
  open(shared.agent_id);
}
