// @ts-check
/**
 * @file Settings: the model and permission-mode pickers (remembered per conversation, sent
 * with its next turn) and the colour theme.
 */

import { ui } from './dom.js';
import { THEME_KEY, state } from './state.js';

/** @typedef {import('./state.js').SessionInfo} SessionInfo */

/** The Claude CLI's permission modes, as the pickers name them (others by their id). */
const MODE_LABELS = /** @type {Record<string, string>} */ ({
  default: 'Ask before tools (default)',
  acceptEdits: 'Accept edits',
  plan: 'Plan only',
  dontAsk: 'Only pre-allowed tools',
  manual: 'Manual',
  bypassPermissions: 'Bypass permissions',
  auto: 'Auto',
});

/**
 * Shows the conversation's model and permission mode in the pickers, offering what its agent
 * offers: its own models, and the modes this server allows.
 * @param {SessionInfo | undefined} info
 */
export function renderPickers(info) {
  offerChoices(ui.model, ui.permissionMode, agentOf(info), info?.model ?? '', info?.permission_mode ?? '');
}

/**
 * Fills a model and a permission-mode picker with what `agent` offers (its own models, the
 * modes this server allows) and shows `model` and `mode` in them.
 * @param {HTMLSelectElement} modelSelect
 * @param {HTMLSelectElement} modeSelect
 * @param {import('./state.js').Agent | undefined} agent
 * @param {string} model
 * @param {string} mode
 */
export function offerChoices(modelSelect, modeSelect, agent, model, mode) {
  const models = (agent?.models ?? []).filter((m) => m.id !== 'default');
  setOptions(modelSelect, [
    ['', 'Default model', ''],
    ...models.map((m) => /** @type {[string, string, string]} */ ([m.id, m.name ?? m.id, m.description ?? ''])),
  ]);
  setOptions(modeSelect, [
    ['', 'Default permissions', ''],
    // An ACP agent's modes are its own, named by their ids.
    ...(agent?.modes ?? []).map((m) => /** @type {[string, string, string]} */ ([m, (agent?.kind !== 'acp' && MODE_LABELS[m]) || m, ''])),
  ]);
  for (const [select, value] of /** @type {[HTMLSelectElement, string][]} */ ([
    [modelSelect, model],
    [modeSelect, mode],
  ])) {
    // What the conversation runs with shows even when no longer offered.
    if (value && ![...select.options].some((o) => o.value === value)) {
      select.append(new Option(value, value));
    }
    select.value = value;
  }
}

/**
 * The agent a conversation runs, or would run (the one chosen for it, else the default).
 * @param {SessionInfo | undefined} info
 */
export function agentOf(info) {
  const name = info?.backend ?? (info ? state.newOptions.get(info.agent_id)?.agent : null);
  return state.agents.find((a) => a.name === name) ?? state.agents.find((a) => a.default) ?? state.agents[0];
}

/**
 * Replaces a picker's options with `options` (value, label, description), when they differ.
 * @param {HTMLSelectElement} select
 * @param {[string, string, string][]} options
 */
function setOptions(select, options) {
  const have = [...select.options].map((o) => `${o.value}\n${o.text}`).join('\n');
  if (have === options.map(([value, text]) => `${value}\n${text}`).join('\n')) return;
  select.replaceChildren(
    ...options.map(([value, text, description]) => {
      const option = new Option(text, value);
      if (description) option.title = description;
      return option;
    }),
  );
}

/** The settings pickers apply from the next turn: remembered for the conversation. */
for (const [select, field] of /** @type {[HTMLSelectElement, 'model' | 'permission_mode'][]} */ ([
  [ui.model, 'model'],
  [ui.permissionMode, 'permission_mode'],
])) {
  select.addEventListener('change', () => {
    const info = state.current ? state.sessions.get(state.current) : undefined;
    if (info) info[field] = select.value || null;
  });
}

const darkQuery = window.matchMedia('(prefers-color-scheme: dark)');

export function renderTheme() {
  const chosen = localStorage.getItem(THEME_KEY);
  if (chosen === 'dark' || chosen === 'light') document.documentElement.dataset.theme = chosen;
  else delete document.documentElement.dataset.theme;
  const dark = chosen ? chosen === 'dark' : darkQuery.matches;
  ui.theme.setAttribute('aria-pressed', String(dark));
}

ui.theme.addEventListener('click', () => {
  const dark = ui.theme.getAttribute('aria-pressed') === 'true';
  // Back to following the system when the choice matches it.
  const next = dark ? 'light' : 'dark';
  if ((next === 'dark') === darkQuery.matches) localStorage.removeItem(THEME_KEY);
  else localStorage.setItem(THEME_KEY, next);
  renderTheme();
});
darkQuery.addEventListener('change', renderTheme);
