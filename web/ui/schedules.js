// @ts-check
/**
 * @file Schedules: the dialog that lists them (with their next and last run) and creates,
 * edits, pauses, runs and deletes them over the REST API; and which schedule started a
 * conversation, for its mark in the sidebar.
 */

import { randomId } from '../client.js';
import { api, apiError, client } from './api.js';
import { ask } from './dialogs.js';
import { button, el, ui } from './dom.js';
import { plainTitle } from './format.js';
import { agentOf, offerChoices } from './settings.js';
import { renderSidebar, scheduleSessionsRefresh } from './sidebar.js';
import { state } from './state.js';

/** @typedef {import('./state.js').Schedule} Schedule */

/**
 * The schedule that started conversation `agentId`: its own conversation (`same`), or one of
 * the `<agent_id>-<time>` conversations it creates (`new`).
 * @param {string} agentId
 */
export function scheduleOf(agentId) {
  return state.schedules.find((sc) =>
    sc.mode === 'new'
      ? agentId.startsWith(`${sc.agent_id}-`) && /^\d{8}T\d{6}\.\d{3}Z$/.test(agentId.slice(sc.agent_id.length + 1))
      : agentId === sc.agent_id,
  );
}

export async function loadSchedules() {
  if (state.signedIn) return;
  try {
    const response = await api('/api/schedules');
    if (!response.ok) return;
    state.schedules = (await response.json()).schedules;
    renderSchedules();
    renderSidebar();
  } catch {
    // Offline: the list stays as it was.
  }
}

/** @param {Schedule} sc */
function timing(sc) {
  return sc.cron ? `cron ${sc.cron}` : `every ${sc.every_secs} s`;
}

function renderSchedules() {
  ui.schedulesEmpty.hidden = state.schedules.length > 0;
  ui.scheduleList.replaceChildren(
    ...state.schedules.map((sc) => {
      const li = el('li', 'schedule');
      li.dataset.scheduleId = sc.id;
      const head = li.appendChild(el('div', 'schedule-head'));
      head.append(el('strong', 'schedule-name', sc.name), el('span', 'schedule-timing', timing(sc)));
      const where = sc.mode === 'new' ? `new conversation per run (${sc.agent_id}-…)` : sc.agent_id;
      li.append(el('div', 'schedule-where', where));
      const state = sc.enabled && sc.next_run_at ? `next ${new Date(sc.next_run_at).toLocaleString()}` : 'paused';
      const last = sc.last_run ? ` · last run ${sc.last_run.outcome}${sc.last_run.detail ? `: ${sc.last_run.detail}` : ''}` : '';
      li.append(el('div', 'schedule-state', state + last));
      const actions = li.appendChild(el('div', 'schedule-actions'));
      actions.append(
        button('Edit', 'schedule-edit', () => editSchedule(sc)),
        button(sc.enabled ? 'Pause' : 'Resume', 'schedule-toggle', () => changeSchedule(sc, { enabled: !sc.enabled })),
        button('Run now', 'schedule-run', () => runSchedule(sc)),
        button('Delete', 'schedule-delete danger', () => deleteSchedule(sc)),
      );
      return li;
    }),
  );
}

/**
 * Offers the conversations a schedule can run in (a new one first, then the sidebar's), the
 * projects a new one can work in, and the models and modes of the agent it would run.
 * @param {string} agentId the conversation to show chosen; `''`: a new one
 * @param {Schedule['options']} [options]
 */
function renderTargets(agentId, options) {
  const listed = [...state.sessions.values()].filter((s) => s.stored || client.lastSeq(s.agent_id) > 0);
  ui.scheduleAgent.replaceChildren(
    new Option('A new conversation', ''),
    ...listed.map((s) => new Option(plainTitle(s.title) || s.agent_id, s.agent_id)),
  );
  if (agentId && !listed.some((s) => s.agent_id === agentId)) ui.scheduleAgent.append(new Option(agentId, agentId));
  ui.scheduleAgent.value = agentId;
  ui.scheduleProject.replaceChildren(
    new Option('No project (a workspace of its own)', ''),
    ...state.projects.map((p) => new Option(`${p.name} \u2014 ${p.path}`, p.path)),
  );
  ui.scheduleProject.value = options?.cwd ?? '';
  renderTargetChoices(options?.model ?? '', options?.permission_mode ?? '');
}

/**
 * A project is for a new conversation only; the pickers offer the chosen conversation's agent's
 * choices.
 * @param {string} model
 * @param {string} mode
 */
function renderTargetChoices(model, mode) {
  renderProjectField();
  const agent = agentOf(state.sessions.get(ui.scheduleAgent.value));
  offerChoices(ui.scheduleModel, ui.schedulePermission, agent, model, mode);
}

/** Whether the runs start conversations of their own, which a project applies to. */
function startsConversations() {
  return !ui.scheduleAgent.value || ui.scheduleMode.value === 'new';
}

function renderProjectField() {
  ui.scheduleProjectField.hidden = !startsConversations() || state.projects.length === 0;
}

function resetScheduleForm() {
  state.editing = null;
  ui.scheduleForm.reset();
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = 'New schedule';
  ui.scheduleSave.textContent = 'Create';
  ui.scheduleAgent.disabled = false;
  renderTargets('');
}

/** @param {Schedule} sc */
function editSchedule(sc) {
  state.editing = sc.id;
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = `Edit “${sc.name}”`;
  ui.scheduleSave.textContent = 'Save';
  ui.scheduleName.value = sc.name;
  ui.scheduleMode.value = sc.mode;
  renderTargets(sc.agent_id, sc.options);
  ui.scheduleAgent.disabled = true;
  ui.scheduleContent.value = sc.content;
  ui.scheduleKind.value = sc.cron ? 'cron' : 'every';
  ui.scheduleWhen.value = sc.cron ?? String(sc.every_secs);
  ui.scheduleName.focus();
}

/**
 * The id of a new conversation for schedule `name`: its name in a few letters, made unique.
 * @param {string} name
 */
function newAgentId(name) {
  const words = name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 40);
  return `${words || 'schedule'}-${randomId().slice(0, 8)}`;
}

async function saveSchedule() {
  const when = ui.scheduleWhen.value.trim();
  const existing = ui.scheduleAgent.value;
  /** @type {Record<string, string>} */
  const options = {};
  const kept = state.schedules.find((sc) => sc.id === state.editing)?.options?.cwd;
  if (startsConversations() && ui.scheduleProject.value) options.cwd = ui.scheduleProject.value;
  else if (!startsConversations() && kept) options.cwd = kept;
  if (ui.scheduleModel.value) options.model = ui.scheduleModel.value;
  if (ui.schedulePermission.value) options.permission_mode = ui.schedulePermission.value;
  /** @type {Record<string, unknown>} */
  const body = {
    name: ui.scheduleName.value,
    content: ui.scheduleContent.value,
    mode: ui.scheduleMode.value,
    options,
  };
  if (!state.editing) body.agent_id = existing || newAgentId(ui.scheduleName.value);
  if (ui.scheduleKind.value === 'cron') body.cron = when;
  else body.every_secs = Number(when);
  const response = state.editing
    ? await api(`/api/schedules/${encodeURIComponent(state.editing)}`, { method: 'PATCH', json: body })
    : await api('/api/schedules', { method: 'POST', json: body });
  if (!response.ok) {
    ui.scheduleError.textContent = await apiError(response);
    return;
  }
  resetScheduleForm();
  await loadSchedules();
}

/**
 * @param {Schedule} sc
 * @param {Record<string, unknown>} change
 */
async function changeSchedule(sc, change) {
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}`, { method: 'PATCH', json: change });
  if (!response.ok) ui.scheduleError.textContent = await apiError(response);
  await loadSchedules();
}

/** @param {Schedule} sc */
async function runSchedule(sc) {
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}/run`, { method: 'POST' });
  if (!response.ok) ui.scheduleError.textContent = await apiError(response);
  await loadSchedules();
  scheduleSessionsRefresh();
}

/** @param {Schedule} sc */
async function deleteSchedule(sc) {
  const sure = await ask({
    title: `Delete the schedule “${sc.name}”?`,
    text: 'No run of it starts any more; the conversations it started stay.',
    ok: 'Delete',
    danger: true,
  });
  if (sure === null) return;
  const response = await api(`/api/schedules/${encodeURIComponent(sc.id)}`, { method: 'DELETE' });
  if (!response.ok && response.status !== 404) ui.scheduleError.textContent = await apiError(response);
  if (state.editing === sc.id) resetScheduleForm();
  await loadSchedules();
}

ui.openSchedules.addEventListener('click', () => {
  resetScheduleForm();
  renderSchedules();
  ui.schedules.showModal();
  loadSchedules();
});
ui.schedulesClose.addEventListener('click', () => ui.schedules.close());
ui.scheduleReset.addEventListener('click', resetScheduleForm);
ui.scheduleAgent.addEventListener('change', () => renderTargetChoices('', ''));
ui.scheduleMode.addEventListener('change', renderProjectField);
ui.scheduleKind.addEventListener('change', () => {
  ui.scheduleWhen.placeholder = ui.scheduleKind.value === 'cron' ? '0 8 * * 1-5' : '3600';
});
ui.scheduleForm.addEventListener('submit', (event) => {
  event.preventDefault();
  saveSchedule();
});
