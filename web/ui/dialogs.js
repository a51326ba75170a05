// @ts-check
/** @file Modal dialogs: the question asked before renaming or deleting, and the keyboard shortcuts. */

import { ui } from './dom.js';

/**
 * Asks the user in a modal dialog; resolves with the entered text (or `''` without an input
 * field) on OK, null on Cancel or Esc.
 * @param {{title: string, text?: string, ok: string, value?: string, danger?: boolean}} question
 * @returns {Promise<string | null>}
 */
export function ask({ title, text = '', ok, value, danger = false }) {
  ui.dialogTitle.textContent = title;
  ui.dialogText.textContent = text;
  ui.dialogText.hidden = !text;
  ui.dialogOk.textContent = ok;
  ui.dialogOk.classList.toggle('danger', danger);
  const withInput = value !== undefined;
  ui.dialogInput.hidden = !withInput;
  ui.dialogInput.value = value ?? '';
  return new Promise((resolve) => {
    /** @param {string | null} answer */
    const finish = (answer) => {
      ui.dialogForm.removeEventListener('submit', onSubmit);
      ui.dialogCancel.removeEventListener('click', onCancel);
      ui.dialog.removeEventListener('close', onCancel);
      if (ui.dialog.open) ui.dialog.close();
      resolve(answer);
    };
    /** @param {Event} event */
    const onSubmit = (event) => {
      event.preventDefault();
      finish(withInput ? ui.dialogInput.value : '');
    };
    const onCancel = () => finish(null);
    ui.dialogForm.addEventListener('submit', onSubmit);
    ui.dialogCancel.addEventListener('click', onCancel);
    ui.dialog.addEventListener('close', onCancel);
    ui.dialog.showModal();
    if (withInput) {
      ui.dialogInput.focus();
      ui.dialogInput.select();
    } else {
      ui.dialogOk.focus();
    }
  });
}

ui.help.addEventListener('click', () => ui.shortcuts.showModal());
ui.shortcutsClose.addEventListener('click', () => ui.shortcuts.close());
