// @ts-check
/**
 * @file Schedules: the dialog that lists them (with their next and last run) and creates,
 * edits, pauses, runs and deletes them over the REST API; and which schedule started a
 * conversation, for its mark in the sidebar.
 */

import { api, apiError } from './api.js';
import { ask } from './dialogs.js';
import { button, el, ui } from './dom.js';
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

function resetScheduleForm() {
  state.editing = null;
  ui.scheduleForm.reset();
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = 'New schedule';
  ui.scheduleSave.textContent = 'Create';
  ui.scheduleAgent.disabled = false;
}

/** @param {Schedule} sc */
function editSchedule(sc) {
  state.editing = sc.id;
  ui.scheduleError.textContent = '';
  ui.scheduleFormTitle.textContent = `Edit “${sc.name}”`;
  ui.scheduleSave.textContent = 'Save';
  ui.scheduleName.value = sc.name;
  ui.scheduleAgent.value = sc.agent_id;
  ui.scheduleContent.value = sc.content;
  ui.scheduleKind.value = sc.cron ? 'cron' : 'every';
  ui.scheduleWhen.value = sc.cron ?? String(sc.every_secs);
  ui.scheduleMode.value = sc.mode;
  ui.scheduleName.focus();
}

async function saveSchedule() {
  const when = ui.scheduleWhen.value.trim();
  /** @type {Record<string, unknown>} */
  const body = {
    name: ui.scheduleName.value,
    agent_id: ui.scheduleAgent.value.trim(),
    content: ui.scheduleContent.value,
    mode: ui.scheduleMode.value,
  };
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
ui.scheduleKind.addEventListener('change', () => {
  ui.scheduleWhen.placeholder = ui.scheduleKind.value === 'cron' ? '0 8 * * 1-5' : '3600';
});
ui.scheduleForm.addEventListener('submit', (event) => {
  event.preventDefault();
  saveSchedule();
});
