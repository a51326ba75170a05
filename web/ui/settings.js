// @ts-check
/**
 * @file Settings: the model and permission-mode pickers (remembered per conversation, sent
 * with its next turn) and the colour theme.
 */

import { ui } from './dom.js';
import { THEME_KEY, state } from './state.js';

/** @typedef {import('./state.js').SessionInfo} SessionInfo */

/**
 * Shows the conversation's model and permission mode in the pickers.
 * @param {SessionInfo | undefined} info
 */
export function renderPickers(info) {
  renderModeOptions(info);
  for (const [select, value] of /** @type {[HTMLSelectElement, string][]} */ ([
    [ui.model, info?.model ?? ''],
    [ui.permissionMode, info?.permission_mode ?? ''],
  ])) {
    if (value && ![...select.options].some((o) => o.value === value)) {
      select.append(new Option(value, value));
    }
    select.value = value;
  }
}

/**
 * Offers the permission modes of the conversation's agent: an ACP agent's own, once the server
 * knows them, else the Claude CLI's.
 * @param {SessionInfo | undefined} info
 */
function renderModeOptions(info) {
  state.cliModeOptions ??= [...ui.permissionMode.options].map((o) => [o.value, o.text]);
  const name = info?.backend ?? (info ? state.newOptions.get(info.agent_id)?.agent : null);
  const agent = state.agents.find((a) => a.name === name);
  const own = agent?.kind === 'acp' && agent.modes?.length ? agent.modes : null;
  const options = own ? [['', 'Default permissions'], ...own.map((m) => [m, m])] : state.cliModeOptions;
  const have = [...ui.permissionMode.options].map((o) => o.value).join('\n');
  if (have === options.map(([value]) => value).join('\n')) return;
  ui.permissionMode.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
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
