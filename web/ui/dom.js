// @ts-check
/** @file The page's elements by role ({@link ui}) and helpers that build new ones. */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * A button with a visible label (also its accessible name).
 * @param {string} label
 * @param {string} [className]
 * @param {() => void} [onClick]
 */
export function button(label, className, onClick) {
  const b = el('button', className, label);
  b.type = 'button';
  if (onClick) b.addEventListener('click', onClick);
  return b;
}

/**
 * @param {string} id
 * @returns {HTMLElement}
 */
function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`missing #${id}`);
  return node;
}

export const ui = {
  sidebar: byId('sidebar'),
  sessions: byId('sessions'),
  search: /** @type {HTMLInputElement} */ (byId('search')),
  searchEmpty: byId('search-empty'),
  newSession: byId('new-session'),
  toggleSidebar: byId('toggle-sidebar'),
  title: byId('title'),
  totals: byId('totals'),
  branch: byId('branch'),
  changesOpen: /** @type {HTMLButtonElement} */ (byId('changes-open')),
  changesCount: byId('changes-count'),
  changes: /** @type {HTMLDialogElement} */ (byId('changes')),
  changesBranch: byId('changes-branch'),
  changesStatus: byId('changes-status'),
  changesError: byId('changes-error'),
  changesFiles: byId('changes-files'),
  changesCommit: /** @type {HTMLButtonElement} */ (byId('changes-commit')),
  changesStrategy: /** @type {HTMLSelectElement} */ (byId('changes-strategy')),
  changesMerge: /** @type {HTMLButtonElement} */ (byId('changes-merge')),
  changesDiscard: /** @type {HTMLButtonElement} */ (byId('changes-discard')),
  changesClose: byId('changes-close'),
  rename: /** @type {HTMLButtonElement} */ (byId('rename')),
  share: /** @type {HTMLButtonElement} */ (byId('share')),
  sharedBy: byId('shared-by'),
  viewers: byId('viewers'),
  shareDialog: /** @type {HTMLDialogElement} */ (byId('share-dialog')),
  shareForm: /** @type {HTMLFormElement} */ (byId('share-form')),
  sharePrincipal: /** @type {HTMLInputElement} */ (byId('share-principal')),
  shareRole: /** @type {HTMLSelectElement} */ (byId('share-role')),
  shareError: byId('share-error'),
  shareList: byId('share-list'),
  shareEmpty: byId('share-empty'),
  shareClose: byId('share-close'),
  linkRole: /** @type {HTMLSelectElement} */ (byId('link-role')),
  linkExpiry: /** @type {HTMLSelectElement} */ (byId('link-expiry')),
  makeLink: /** @type {HTMLButtonElement} */ (byId('make-link')),
  linkUrl: /** @type {HTMLInputElement} */ (byId('link-url')),
  linkList: byId('link-list'),
  linkError: byId('link-error'),
  exportButton: /** @type {HTMLButtonElement} */ (byId('export')),
  deleteButton: /** @type {HTMLButtonElement} */ (byId('delete')),
  main: byId('main'),
  conn: byId('conn'),
  messages: byId('messages'),
  composer: /** @type {HTMLFormElement} */ (byId('composer')),
  input: /** @type {HTMLTextAreaElement} */ (byId('input')),
  attachments: byId('attachments'),
  attach: /** @type {HTMLButtonElement} */ (byId('attach')),
  imageFile: /** @type {HTMLInputElement} */ (byId('image-file')),
  model: /** @type {HTMLSelectElement} */ (byId('model')),
  permissionMode: /** @type {HTMLSelectElement} */ (byId('permission-mode')),
  stop: /** @type {HTMLButtonElement} */ (byId('stop')),
  send: /** @type {HTMLButtonElement} */ (byId('send')),
  theme: /** @type {HTMLButtonElement} */ (byId('theme')),
  notify: /** @type {HTMLButtonElement} */ (byId('notify')),
  pushOpen: byId('push-open'),
  push: /** @type {HTMLDialogElement} */ (byId('push')),
  pushEvents: byId('push-events'),
  pushStatus: byId('push-status'),
  pushToggle: /** @type {HTMLButtonElement} */ (byId('push-toggle')),
  pushTest: /** @type {HTMLButtonElement} */ (byId('push-test')),
  pushClose: byId('push-close'),
  help: byId('help'),
  dialog: /** @type {HTMLDialogElement} */ (byId('dialog')),
  dialogForm: /** @type {HTMLFormElement} */ (byId('dialog-form')),
  dialogTitle: byId('dialog-title'),
  dialogText: byId('dialog-text'),
  dialogInput: /** @type {HTMLInputElement} */ (byId('dialog-input')),
  dialogOk: /** @type {HTMLButtonElement} */ (byId('dialog-ok')),
  dialogCancel: byId('dialog-cancel'),
  shortcuts: /** @type {HTMLDialogElement} */ (byId('shortcuts')),
  shortcutsClose: byId('shortcuts-close'),
  projectDialog: /** @type {HTMLDialogElement} */ (byId('project-dialog')),
  projectForm: /** @type {HTMLFormElement} */ (byId('project-form')),
  project: /** @type {HTMLSelectElement} */ (byId('project')),
  subdir: /** @type {HTMLInputElement} */ (byId('subdir')),
  projectField: byId('project-field'),
  agent: /** @type {HTMLSelectElement} */ (byId('agent')),
  agentField: byId('agent-field'),
  worktree: /** @type {HTMLInputElement} */ (byId('worktree')),
  worktreeField: byId('worktree-field'),
  projectCli: /** @type {HTMLButtonElement} */ (byId('project-cli')),
  projectCancel: byId('project-cancel'),
  cliSessions: byId('cli-sessions'),
  cliStatus: byId('cli-status'),
  cliList: byId('cli-list'),
  openSchedules: byId('open-schedules'),
  importButton: byId('import'),
  importFile: /** @type {HTMLInputElement} */ (byId('import-file')),
  openAccount: byId('open-account'),
  schedules: /** @type {HTMLDialogElement} */ (byId('schedules')),
  scheduleList: byId('schedule-list'),
  schedulesEmpty: byId('schedules-empty'),
  schedulesClose: byId('schedules-close'),
  scheduleForm: /** @type {HTMLFormElement} */ (byId('schedule-form')),
  scheduleFormTitle: byId('schedule-form-title'),
  scheduleName: /** @type {HTMLInputElement} */ (byId('schedule-name')),
  scheduleAgent: /** @type {HTMLSelectElement} */ (byId('schedule-agent')),
  scheduleProjectField: byId('schedule-project-field'),
  scheduleProject: /** @type {HTMLSelectElement} */ (byId('schedule-project')),
  scheduleModel: /** @type {HTMLSelectElement} */ (byId('schedule-model')),
  schedulePermission: /** @type {HTMLSelectElement} */ (byId('schedule-permission')),
  scheduleContent: /** @type {HTMLTextAreaElement} */ (byId('schedule-content')),
  scheduleKind: /** @type {HTMLSelectElement} */ (byId('schedule-kind')),
  scheduleWhen: /** @type {HTMLInputElement} */ (byId('schedule-when')),
  scheduleMode: /** @type {HTMLSelectElement} */ (byId('schedule-mode')),
  scheduleError: byId('schedule-error'),
  scheduleReset: byId('schedule-reset'),
  scheduleSave: /** @type {HTMLButtonElement} */ (byId('schedule-save')),
  signIn: /** @type {HTMLFormElement} */ (byId('sign-in')),
  signOut: byId('sign-out'),
  token: /** @type {HTMLInputElement} */ (byId('token')),
  signInError: byId('sign-in-error'),
};

/** A touch screen: its keyboard's Enter makes a new line, Send sends. */
export const touch = window.matchMedia('(pointer: coarse)');

/** The message box's own placeholder: short on a touch screen, whose Enter makes a new line. */
export function messagePlaceholder() {
  return touch.matches ? 'Message' : 'Message (Enter sends, Shift+Enter for a new line, Esc stops)';
}
