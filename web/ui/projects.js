// @ts-check
/**
 * @file "New session": the server's project directories and agents, the dialog that picks
 * one of each (and, in a git repository, whether to work in a worktree of its own), and the
 * Claude CLI sessions of a project, listed there and imported.
 */

import { api, apiError } from './api.js';
import { openSession, startSession } from './conversations.js';
import { button, el, ui } from './dom.js';
import { age, plainTitle } from './format.js';
import { renderPickers } from './settings.js';
import { fromApi, projectName, saveLocalSessions, scheduleSessionsRefresh } from './sidebar.js';
import { state } from './state.js';

/** @typedef {import('./state.js').ApiSession} ApiSession */
/** @typedef {import('./state.js').CliSession} CliSession */
/** @typedef {import('./state.js').Project} Project */

/**
 * "New session": when the server has project roots, asks in which project first (the list is
 * refreshed for next time meanwhile); without roots, starts one at once.
 */
export async function newSession() {
  // Both lists are loaded with the sidebar; only a click before that waits for them (an agent
  // that has not said what it offers yet is asked again later, not waited for).
  if (!state.projectsLoaded || !state.agentsListed) {
    await Promise.all([state.projectsLoaded || loadProjects(), state.agentsLoaded || loadAgents()]);
  }
  if (state.projects.length === 0 && state.agents.length <= 1) startSession();
  else chooseProject();
  loadProjects();
}

/** Loads the agents a conversation can run (none known when the server has no such API). */
export async function loadAgents() {
  try {
    const response = await api('/api/agents');
    if (!response.ok) return;
    /** @type {{default: string, agents: (import('./state.js').Agent & {supports?: {known?: boolean}})[]}} */
    const body = await response.json();
    // The built-in demo agent is offered only where it is the default: beside a real agent it
    // would turn every "New session" into a question nobody needs.
    state.agents = body.agents
      .filter((a) => a.name !== 'demo' || a.kind !== 'demo' || body.default === 'demo')
      .sort((a, b) => Number(b.name === body.default) - Number(a.name === body.default));
    // An ACP agent says what it offers (its modes) once it has run: asked again until then.
    state.agentsListed = true;
    state.agentsLoaded = body.agents.every((a) => a.supports?.known !== false);
    renderPickers(state.current ? state.sessions.get(state.current) : undefined);
  } catch {
    // Offline: the last list stays.
  }
}

/** Loads the server's project directories (none when it has no roots or no such API). */
export async function loadProjects() {
  try {
    const response = await api('/api/projects');
    if (!response.ok) return;
    /** @type {{projects: Project[]}} */
    const body = await response.json();
    state.projects = body.projects;
    state.projectsLoaded = true;
  } catch {
    // Offline: the last list stays.
  }
}

/**
 * The new-session dialog: pick a project (or none) and start, or list the project's CLI
 * sessions and import one.
 */
function chooseProject() {
  if (ui.projectDialog.open) return;
  const last = state.current ? state.sessions.get(state.current)?.cwd : null;
  ui.project.replaceChildren(
    ...state.projects.map((p) => {
      const option = new Option(`${p.name} \u2014 ${p.path}`, p.path);
      option.title = p.path;
      return option;
    }),
    new Option('No project (a workspace of its own)', ''),
  );
  // The project last used (a folder deeper in it too), else the most recently active one; a
  // root itself only when chosen.
  const within = last ? containing(last) : undefined;
  const recent = state.projects
    .filter((p) => !isRoot(p) && p.last_active_at)
    .sort((a, b) => (b.last_active_at ?? '').localeCompare(a.last_active_at ?? ''))[0];
  ui.project.value = within?.path ?? recent?.path ?? '';
  ui.subdir.value = within && last ? last.slice(within.path.replace(/\/$/, '').length + 1) : '';
  ui.projectField.hidden = state.projects.length === 0;
  ui.agent.replaceChildren(...state.agents.map((a) => new Option(`${a.name} (${a.kind})`, a.name)));
  ui.agentField.hidden = state.agents.length <= 1;
  projectChosen();
  ui.projectDialog.showModal();
  ui.project.focus();
}

/** The chosen project, if it is one of the server's. */
function chosenProject() {
  return state.projects.find((p) => p.path === ui.project.value);
}

/**
 * Whether a listed directory is a root itself (no other listed directory holds it).
 * @param {Project} project
 */
function isRoot(project) {
  return !state.projects.some((p) => p !== project && project.path.startsWith(`${p.path.replace(/\/$/, '')}/`));
}

/**
 * The listed directory that is `dir` or holds it most closely.
 * @param {string} dir
 */
function containing(dir) {
  return state.projects
    .filter((p) => dir === p.path || dir.startsWith(`${p.path.replace(/\/$/, '')}/`))
    .sort((a, b) => b.path.length - a.path.length)[0];
}

/** The directory chosen to work in: the project, and the folder inside it when one is typed. */
function chosenCwd() {
  const project = ui.project.value;
  const inside = ui.subdir.value.trim().replace(/^\/+|\/+$/g, '');
  if (!project || !inside) return project;
  return `${project.replace(/\/$/, '')}/${inside}`;
}

/**
 * A project was chosen: the worktree box is offered in a git repository, checked when its
 * root makes worktrees the default; the CLI sessions listed for another project go.
 */
function projectChosen() {
  const project = chosenProject();
  ui.worktreeField.hidden = !project?.git;
  ui.worktree.checked = !!project?.worktree_default;
  ui.cliSessions.hidden = true;
  ui.cliList.replaceChildren();
  ui.cliStatus.textContent = '';
  ui.projectCli.disabled = !ui.project.value;
  ui.projectCli.hidden = state.projects.length === 0;
  ui.subdir.disabled = !ui.project.value;
}

/** Lists the chosen project's CLI sessions in the dialog, each with an Import (or Open) button. */
async function showCliSessions() {
  const cwd = chosenCwd();
  if (!cwd) return;
  ui.cliSessions.hidden = false;
  ui.cliList.replaceChildren();
  ui.cliStatus.textContent = 'Loading…';
  try {
    const response = await api(`/api/projects/cli-sessions?cwd=${encodeURIComponent(cwd)}`);
    if (!response.ok) throw new Error(await apiError(response));
    /** @type {{sessions: CliSession[]}} */
    const body = await response.json();
    if (chosenCwd() !== cwd) return;
    const now = Date.now();
    ui.cliStatus.textContent = body.sessions.length
      ? `${body.sessions.length} Claude CLI session${body.sessions.length === 1 ? '' : 's'} in ${projectName(cwd)}`
      : `No Claude CLI state.sessions in ${projectName(cwd)}.`;
    ui.cliList.replaceChildren(
      ...body.sessions.map((cli) => {
        const title = plainTitle(cli.title ?? '') || cli.cli_session_id;
        const li = el('li');
        li.append(
          el('span', 'cli-title', title),
          el('span', 'cli-meta', `${cli.message_count} messages · ${age(cli.modified_at, now)}`),
        );
        const action = cli.imported_as
          ? button('Open', 'cli-open', () => {
              ui.projectDialog.close();
              openSession(/** @type {string} */ (cli.imported_as));
            })
          : button('Import', 'cli-import', () => importCliSession(cwd, cli, action));
        action.setAttribute('aria-label', `${cli.imported_as ? 'Open' : 'Import'} ${title}`);
        li.append(action);
        return li;
      }),
    );
  } catch (err) {
    ui.cliStatus.textContent = `Could not list the CLI state.sessions: ${/** @type {Error} */ (err).message}`;
  }
}

/**
 * Imports a CLI session as a conversation and opens it.
 * @param {string} cwd
 * @param {CliSession} cli
 * @param {HTMLButtonElement} action
 */
async function importCliSession(cwd, cli, action) {
  action.disabled = true;
  ui.cliStatus.textContent = 'Importing…';
  try {
    const response = await api('/api/projects/cli-sessions/import', {
      method: 'POST',
      json: { cwd, cli_session_id: cli.cli_session_id },
    });
    if (!response.ok) throw new Error(await apiError(response));
    /** @type {ApiSession} */
    const imported = await response.json();
    state.sessions.set(imported.agent_id, fromApi(imported));
    saveLocalSessions();
    ui.projectDialog.close();
    openSession(imported.agent_id);
    scheduleSessionsRefresh();
  } catch (err) {
    action.disabled = false;
    ui.cliStatus.textContent = `Not imported: ${/** @type {Error} */ (err).message}`;
  }
}

ui.newSession.addEventListener('click', newSession);
ui.project.addEventListener('change', () => {
  ui.subdir.value = '';
  projectChosen();
});
ui.projectCli.addEventListener('click', showCliSessions);
ui.projectCancel.addEventListener('click', () => ui.projectDialog.close());
ui.projectForm.addEventListener('submit', (event) => {
  event.preventDefault();
  const cwd = chosenCwd() || null;
  const agent = state.agents.length > 1 ? ui.agent.value || null : null;
  const worktree = chosenProject()?.git ? ui.worktree.checked : null;
  ui.projectDialog.close();
  startSession(cwd, agent, worktree);
});
