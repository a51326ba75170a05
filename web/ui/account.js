// @ts-check
/**
 * @file The Settings dialog: the caller's own agent credentials (set and removed by name; a
 * value is never shown or read back), their spending caps, and their usage with a chart per
 * day (inline SVG); and the notice of a turn refused over a cap, whose conversation cap its
 * owner can raise there.
 */

import { api, apiError } from './api.js';
import { ask } from './dialogs.js';
import { button, el, ui } from './dom.js';

/**
 * @typedef {{name: string, set_at: string}} CredentialName
 * @typedef {{agent: string, accepts: string[], set: CredentialName[], required: boolean}} AgentCredentials
 * @typedef {{principal: string, daily_usd: number | null, monthly_usd: number | null,
 *   daily_spent_usd: number, monthly_spent_usd: number, overridden: boolean, can_set: boolean}} Budget
 * @typedef {{key: string, agent_id?: string, cost_usd: number, input_tokens: number,
 *   output_tokens: number, cache_read_tokens: number, cache_creation_tokens: number, turns: number}} UsageRow
 */

const SVG = 'http://www.w3.org/2000/svg';

/** @param {number} usd */
export function dollars(usd) {
  return `$${usd < 1 ? usd.toFixed(4) : usd.toFixed(2)}`;
}

const dialog = el('dialog', 'account');
dialog.id = 'account';
dialog.setAttribute('aria-labelledby', 'account-title');
const title = el('h2', '', 'Settings');
title.id = 'account-title';
const status = el('p', 'account-status');
status.setAttribute('role', 'status');
const credentials = el('section', 'account-credentials');
const budget = el('section', 'account-budget');
const usage = el('section', 'account-usage');
const close = button('Close', 'account-close', () => dialog.close());
const actions = el('div', 'dialog-actions');
actions.append(close);
dialog.append(title, status, credentials, budget, usage, actions);
document.body.append(dialog);

/** Opens the dialog and loads what it shows. */
async function openAccount() {
  status.textContent = '';
  dialog.showModal();
  await Promise.all([loadCredentials(), loadBudget(), loadUsage('day')]);
}

/** @param {string} text */
function failed(text) {
  status.textContent = text;
}

async function loadCredentials() {
  const response = await api('/api/me/credentials');
  credentials.replaceChildren(el('h3', '', 'Your agent credentials'));
  if (!response.ok) return failed(await apiError(response));
  /** @type {{agents: AgentCredentials[]}} */
  const { agents } = await response.json();
  if (agents.length === 0) {
    credentials.append(el('p', 'account-hint', 'No agent here takes credentials of its own.'));
    return;
  }
  credentials.append(
    el('p', 'account-hint', 'Your agents run on these instead of the server’s. Values are stored encrypted and never shown again.'),
  );
  for (const agent of agents) credentials.append(agentForm(agent));
}

/** @param {AgentCredentials} agent */
function agentForm(agent) {
  const box = el('form', 'credential-agent');
  box.dataset.agent = agent.agent;
  const set = agent.set.map((c) => `${c.name} (set ${new Date(c.set_at).toLocaleString()})`);
  box.append(
    el('h4', '', agent.agent + (agent.required ? ' — your own credentials are required' : '')),
    el('p', 'credential-set', set.length ? `Set: ${set.join(', ')}` : 'Nothing set.'),
  );
  const name = el('select', 'credential-name');
  name.setAttribute('aria-label', `Variable for ${agent.agent}`);
  for (const n of agent.accepts) name.append(new Option(n, n));
  const value = el('input', 'credential-value');
  value.type = 'password';
  value.autocomplete = 'off';
  value.placeholder = 'value';
  value.setAttribute('aria-label', `Value for ${agent.agent}`);
  const save = el('button', 'credential-save', 'Save');
  save.type = 'submit';
  const row = el('div', 'credential-row');
  row.append(name, value, save);
  if (agent.set.length) row.append(button('Remove all', 'credential-remove danger', () => removeCredentials(agent)));
  box.append(row);
  box.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (!value.value) return;
    const response = await api(`/api/me/credentials/${encodeURIComponent(agent.agent)}`, {
      method: 'PUT',
      json: { env: { [name.value]: value.value } },
    });
    value.value = '';
    if (!response.ok) return failed(await apiError(response));
    status.textContent = `Saved for ${agent.agent}; your running conversations use it from their next turn.`;
    await loadCredentials();
  });
  return box;
}

/** @param {AgentCredentials} agent */
async function removeCredentials(agent) {
  const ok = await ask({ title: `Remove your credentials for ${agent.agent}?`, ok: 'Remove', danger: true });
  if (ok === null) return;
  const response = await api(`/api/me/credentials/${encodeURIComponent(agent.agent)}`, { method: 'DELETE' });
  if (!response.ok) return failed(await apiError(response));
  await loadCredentials();
}

async function loadBudget() {
  budget.replaceChildren(el('h3', '', 'Spending caps'));
  const response = await api('/api/budgets/me');
  if (!response.ok) return failed(await apiError(response));
  /** @type {Budget} */
  const b = await response.json();
  /** @param {string} what @param {number | null} cap @param {number} spent */
  const line = (what, cap, spent) =>
    el('p', `budget-${what}`, cap === null ? `${what}: no cap` : `${what}: ${dollars(spent)} of ${dollars(cap)}`);
  budget.append(line('today', b.daily_usd, b.daily_spent_usd), line('this month', b.monthly_usd, b.monthly_spent_usd));
  if (b.can_set) budget.append(capsForm(b));
  else if (b.daily_usd !== null || b.monthly_usd !== null)
    budget.append(el('p', 'account-hint', 'An admin can raise these caps.'));
}

/**
 * For an admin: a member's caps (empty: the configured default).
 * @param {Budget} b the admin's own, whose figures fill the form
 */
function capsForm(b) {
  const form = el('form', 'caps-form');
  /** @param {string} label @param {string} value */
  const field = (label, value) => {
    const input = el('input', '');
    input.setAttribute('aria-label', label);
    input.placeholder = label;
    input.value = value;
    return input;
  };
  const who = field('Member', b.principal);
  const daily = field('Daily cap (USD)', b.daily_usd === null ? '' : String(b.daily_usd));
  const monthly = field('Monthly cap (USD)', b.monthly_usd === null ? '' : String(b.monthly_usd));
  const save = el('button', '', 'Set caps');
  save.type = 'submit';
  const row = el('div', 'credential-row');
  row.append(who, daily, monthly, save);
  form.append(el('h4', '', 'Set a member’s caps (admin)'), row);
  /** @param {HTMLInputElement} input */
  const usd = (input) => (input.value.trim() === '' ? null : Number(input.value));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const response = await api(`/api/budgets/${encodeURIComponent(who.value.trim())}`, {
      method: 'PUT',
      json: { daily_usd: usd(daily), monthly_usd: usd(monthly) },
    });
    if (!response.ok) return failed(await apiError(response));
    status.textContent = `Caps set for ${who.value.trim()}.`;
    await loadBudget();
  });
  return form;
}

/** @param {string} groupBy */
async function loadUsage(groupBy) {
  usage.replaceChildren(el('h3', '', 'Usage, last 30 days'));
  const pick = el('select', 'usage-group');
  pick.setAttribute('aria-label', 'Group usage by');
  for (const g of ['day', 'conversation', 'agent', 'model']) pick.append(new Option(`by ${g}`, g, false, g === groupBy));
  pick.addEventListener('change', () => loadUsage(pick.value));
  usage.append(pick);
  const response = await api(`/api/usage?group_by=${groupBy}`);
  if (!response.ok) return failed(await apiError(response));
  /** @type {{rows: UsageRow[], total: UsageRow, from: string, to: string}} */
  const report = await response.json();
  if (groupBy === 'day') usage.append(chart(report.rows, report.from, report.to));
  const table = el('table', 'usage-table');
  const head = table.createTHead().insertRow();
  for (const h of [groupBy, 'cost', 'input', 'output', 'cache read', 'cache write', 'turns']) head.append(el('th', '', h));
  const body = table.createTBody();
  for (const r of [...report.rows, { ...report.total, key: 'total' }]) {
    const tr = body.insertRow();
    const cells = [
      r.agent_id ?? r.key,
      dollars(r.cost_usd),
      r.input_tokens,
      r.output_tokens,
      r.cache_read_tokens,
      r.cache_creation_tokens,
      r.turns,
    ];
    for (const c of cells) tr.insertCell().textContent = String(c);
  }
  usage.append(table);
}

/**
 * A bar per day from `from` to `to`, its height the day's cost.
 * @param {UsageRow[]} rows
 * @param {string} from
 * @param {string} to
 */
function chart(rows, from, to) {
  const byDay = new Map(rows.map((r) => [r.key, r.cost_usd]));
  const days = [];
  for (let d = new Date(`${from}T00:00:00Z`); d <= new Date(`${to}T00:00:00Z`); d.setUTCDate(d.getUTCDate() + 1)) {
    days.push(d.toISOString().slice(0, 10));
  }
  const max = Math.max(...days.map((d) => byDay.get(d) ?? 0), 0);
  const [width, height, gap] = [days.length * 12, 80, 2];
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'usage-chart');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `Cost per day, at most ${dollars(max)}`);
  days.forEach((day, i) => {
    const cost = byDay.get(day) ?? 0;
    const h = max > 0 ? Math.max((cost / max) * (height - 4), cost > 0 ? 1 : 0) : 0;
    const bar = document.createElementNS(SVG, 'rect');
    bar.setAttribute('x', String(i * 12 + gap / 2));
    bar.setAttribute('y', String(height - h));
    bar.setAttribute('width', String(12 - gap));
    bar.setAttribute('height', String(h));
    bar.dataset.day = day;
    const tip = document.createElementNS(SVG, 'title');
    tip.textContent = `${day}: ${dollars(cost)}`;
    bar.append(tip);
    svg.append(bar);
  });
  return svg;
}

/**
 * The notice of a turn refused over a cap, with a way for the owner to raise a conversation's.
 * @param {string} agentId
 * @param {{detail?: string, cap?: string, limit_usd?: number, spent_usd?: number}} frame
 */
export function budgetNotice(agentId, frame) {
  const note = el('article', 'msg notice budget-exceeded', frame.detail ?? 'A spending cap is reached.');
  note.setAttribute('aria-label', 'Notice');
  if (frame.cap === 'conversation' && !agentId.startsWith('~')) {
    note.append(
      button('Raise cap', 'budget-raise', async () => {
        const answer = await ask({
          title: 'Raise this conversation’s cap',
          text: `It has spent ${dollars(frame.spent_usd ?? 0)} of ${dollars(frame.limit_usd ?? 0)}. New cap in US dollars:`,
          ok: 'Raise',
          value: String(Math.ceil(((frame.limit_usd ?? 0) * 2 + 1) * 100) / 100),
        });
        if (answer === null) return;
        const response = await api(`/api/sessions/${encodeURIComponent(agentId)}/budget`, {
          method: 'PUT',
          json: { budget_usd: Number(answer) },
        });
        note.append(el('p', 'budget-raised', response.ok ? `Cap raised to ${dollars(Number(answer))}; send again.` : await apiError(response)));
      }),
    );
  }
  return note;
}

ui.openAccount.addEventListener('click', openAccount);
