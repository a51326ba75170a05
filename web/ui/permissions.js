// @ts-check
/**
 * @file Permission cards: a tool the agent wants to use, its input as a person reads it (the
 * command; the file and a diff for an edit; else each field), and the answer: Allow, Always
 * allow (this tool, for the rest of the conversation while the page lives, as the terminal
 * client does), or Deny with an optional reason for the agent. The decision stays in the card.
 */

import { renderDiff, toolDiff } from '../diff.js';
import { client } from './api.js';
import { button, el } from './dom.js';
import { state } from './state.js';

/** @typedef {import('../protocol').PermissionRequestFrame} PermissionRequestFrame */
/** @typedef {import('../protocol').PermissionDecision} PermissionDecision */

/** What a deny without a reason tells the agent. */
const DENIED = 'The user denied this tool use.';

/**
 * Whether the user chose to always allow `tool` in conversation `agentId`.
 * @param {string} agentId
 * @param {string} tool
 */
export function isAlwaysAllowed(agentId, tool) {
  return state.alwaysAllowed.get(agentId)?.has(tool) ?? false;
}

/**
 * The tool's input as a person reads it.
 * @param {string} tool
 * @param {Record<string, unknown>} input
 * @returns {HTMLElement[]}
 */
function readable(tool, input) {
  const edit = toolDiff(tool, input);
  if (edit) return [el('div', 'permission-path', edit.path), renderDiff(edit.lines)];
  const shown = [];
  if (typeof input.description === 'string') shown.push(el('div', 'permission-description', input.description));
  if (typeof input.command === 'string') {
    const command = el('pre', 'permission-command', input.command);
    command.setAttribute('aria-label', 'Command');
    shown.push(command);
  }
  const rest = Object.entries(input).filter(([key]) => key !== 'command' && key !== 'description');
  if (rest.length) {
    const fields = el('dl', 'permission-fields');
    for (const [key, value] of rest) {
      fields.append(el('dt', undefined, key), el('dd', undefined, typeof value === 'string' ? value : JSON.stringify(value, null, 2)));
    }
    shown.push(fields);
  }
  return shown;
}

/**
 * A card asking for `frame`'s tool, answered in conversation `agentId`.
 * @param {string} agentId
 * @param {PermissionRequestFrame} frame
 * @param {(kind: string, from: string) => HTMLElement} message makes the card's article
 */
export function permissionCard(agentId, frame, message) {
  const card = message('permission', 'Permission request');
  card.append(el('div', 'permission-title', `Allow ${frame.tool_name}?`), ...readable(frame.tool_name, frame.input ?? {}));
  const actions = card.appendChild(el('div', 'permission-actions'));
  const reason = el('input', 'permission-reason');
  reason.type = 'text';
  reason.maxLength = 500;
  reason.placeholder = 'Why not? (optional, told to the agent)';
  reason.setAttribute('aria-label', 'Reason for denying');
  /** @param {PermissionDecision} decision */
  const answer = (decision) => {
    for (const b of actions.querySelectorAll('button, input')) /** @type {HTMLButtonElement} */ (b).disabled = true;
    if (decision.behavior === 'deny' && decision.message !== DENIED) card.dataset.reason = decision.message;
    client.respondToPermission(agentId, frame.request_id, decision);
  };
  const always = button('Always allow', 'allow-always', () => {
    const tools = state.alwaysAllowed.get(agentId) ?? new Set();
    tools.add(frame.tool_name);
    state.alwaysAllowed.set(agentId, tools);
    answer({ behavior: 'allow', always: true });
  });
  always.title = `Allow ${frame.tool_name} now and from now on in this conversation`;
  actions.append(
    button('Allow', 'allow', () => answer({ behavior: 'allow' })),
    always,
    reason,
    button('Deny', 'deny', () => answer({ behavior: 'deny', message: reason.value.trim() || DENIED })),
  );
  reason.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter') return;
    event.preventDefault();
    event.stopPropagation();
    answer({ behavior: 'deny', message: reason.value.trim() || DENIED });
  });
  return { card, allow: () => answer({ behavior: 'allow', always: true }) };
}

/**
 * Shows how a card's request ended, in place of its buttons.
 * @param {HTMLElement} card
 * @param {string} outcome `allowed`, `denied`, `timed_out` or `cancelled`
 * @param {string | null} [by] who answered it, when not the page's own principal
 */
export function settleCard(card, outcome, by = null) {
  const labels = /** @type {Record<string, string>} */ ({
    allowed: 'Allowed',
    denied: 'Denied',
    timed_out: 'Denied: nobody answered in time',
    cancelled: 'Withdrawn by the agent',
  });
  card.querySelector('.permission-actions')?.remove();
  card.classList.add(`permission-${outcome}`);
  card.append(el('div', 'permission-outcome', `${labels[outcome] ?? outcome}${by ? ` by ${by}` : ''}`));
  if (outcome === 'denied' && card.dataset.reason) card.append(el('div', 'permission-why', `Reason: ${card.dataset.reason}`));
}
