// @ts-check
/**
 * @file The composer: the message being written (a draft per conversation), images attached
 * to it (pasted, dropped or picked), sending it with the chosen settings, and Stop.
 */

import { imageBlock } from '../images.js';
import { client } from './api.js';
import { startSession } from './conversations.js';
import { button, el, messagePlaceholder, touch, ui } from './dom.js';
import { DRAFT_PREFIX, state } from './state.js';
import { imageElement, notice } from './view.js';

/** @typedef {import('../protocol').ChatOptions} ChatOptions */

/**
 * Base64 characters of images one message may carry: the server's default frame limit is
 * 1 MiB, and the text and JSON around the images need room too.
 */
const IMAGE_BUDGET = 900_000;

function renderAttachments() {
  ui.attachments.replaceChildren(
    ...state.attachments.map((image, i) => {
      const item = el('div', 'attachment');
      item.append(
        imageElement(image, `Attached image ${i + 1}`),
        button('Remove image', 'remove-image', () => {
          state.attachments.splice(i, 1);
          renderAttachments();
        }),
      );
      return item;
    }),
  );
  ui.attachments.hidden = state.attachments.length === 0;
}

/**
 * Adds the images among `files` to the composer, scaled to fit what is left of the budget.
 * @param {Iterable<File>} files
 */
export async function attach(files) {
  if (!state.current) startSession();
  const agentId = /** @type {string} */ (state.current);
  for (const file of files) {
    const used = state.attachments.reduce((sum, a) => sum + a.source.data.length, 0);
    try {
      if (used >= IMAGE_BUDGET * 0.9) throw new Error('no room for more images in this message');
      state.attachments.push(await imageBlock(file, IMAGE_BUDGET - used));
    } catch (err) {
      notice(agentId, `Not attached: ${/** @type {Error} */ (err).message}`);
    }
    renderAttachments();
  }
}

/** @param {string} agentId */
export function saveDraft(agentId) {
  const text = ui.input.value;
  if (text) localStorage.setItem(DRAFT_PREFIX + agentId, text);
  else localStorage.removeItem(DRAFT_PREFIX + agentId);
}

export function send() {
  const text = ui.input.value;
  if (!text.trim() && state.attachments.length === 0) return;
  if (!state.current) startSession();
  const agentId = /** @type {string} */ (state.current);
  const images = state.attachments;
  const content = images.length
    ? [...(text.trim() ? [{ type: /** @type {const} */ ('text'), text }] : []), ...images]
    : text;
  state.attachments = [];
  renderAttachments();
  ui.input.value = '';
  localStorage.removeItem(DRAFT_PREFIX + agentId);
  autosize();
  /** @type {ChatOptions} */
  const options = {};
  if (ui.model.value) options.model = ui.model.value;
  if (ui.permissionMode.value) options.permission_mode = ui.permissionMode.value;
  // A new conversation names its project, agent and worktree; the server keeps them from then on.
  const chosen = state.newOptions.get(agentId);
  if (chosen && client.lastSeq(agentId) === 0) {
    if (chosen.cwd) options.cwd = chosen.cwd;
    if (chosen.agent) options.agent = chosen.agent;
    if (chosen.cwd && chosen.worktree !== null) options.worktree = chosen.worktree;
  }
  const hasOptions = Object.keys(options).length > 0;
  client.chat(agentId, content, hasOptions ? { options } : {}).catch((err) => {
    notice(agentId, `Not sent: ${err.message}`);
    // Refused: nothing was stored, so what was typed comes back to be fixed and sent again
    // (unless something else was typed meanwhile). Cut off, it may have been stored: the
    // conversation's frames tell.
    if (err.code === 'disconnected') return;
    if (state.current === agentId && !ui.input.value && state.attachments.length === 0) {
      ui.input.value = text;
      state.attachments = images;
      renderAttachments();
      autosize();
      saveDraft(agentId);
    } else if (state.current !== agentId && !localStorage.getItem(DRAFT_PREFIX + agentId)) {
      localStorage.setItem(DRAFT_PREFIX + agentId, text);
    }
  });
}

export function interrupt() {
  if (state.current && state.views.get(state.current)?.busy) client.interrupt(state.current);
}

export function autosize() {
  ui.input.style.height = 'auto';
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 240)}px`;
}

ui.composer.addEventListener('submit', (event) => {
  event.preventDefault();
  send();
});
function renderPlaceholder() {
  ui.input.placeholder = messagePlaceholder();
}
renderPlaceholder();
touch.addEventListener('change', renderPlaceholder);

ui.input.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && !event.shiftKey && !event.isComposing && !touch.matches) {
    event.preventDefault();
    send();
  }
});
ui.input.addEventListener('input', () => {
  autosize();
  if (state.current) saveDraft(state.current);
});
ui.input.addEventListener('paste', (event) => {
  const files = [...(event.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
  if (files.length === 0) return;
  event.preventDefault();
  attach(files);
});
ui.composer.addEventListener('dragover', (event) => {
  if (event.dataTransfer?.types.includes('Files')) event.preventDefault();
});
ui.composer.addEventListener('drop', (event) => {
  if (!event.dataTransfer?.files.length) return;
  event.preventDefault();
  attach(event.dataTransfer.files);
});
ui.attach.addEventListener('click', () => ui.imageFile.click());
ui.imageFile.addEventListener('change', () => {
  attach([...(ui.imageFile.files ?? [])]);
  ui.imageFile.value = '';
});

ui.stop.addEventListener('click', interrupt);
