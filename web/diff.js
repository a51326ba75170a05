// @ts-check
/**
 * @file File edits as line diffs: what an `Edit`, `MultiEdit` or `Write` tool call changes,
 * computed from its input (old and new text), and the files of a unified diff as `git diff`
 * writes it; rendered with `textContent` only.
 */

/**
 * One line of a diff: kept (`' '`), removed (`'-'`) or added (`'+'`).
 * @typedef {{op: ' ' | '-' | '+', text: string}} DiffLine
 */

/** Largest table the line-by-line comparison builds; larger edits show as remove-all, add-all. */
const MAX_CELLS = 4_000_000;
/** Unchanged lines kept around each change. */
const CONTEXT = 3;

/**
 * Lines of `before` and `after`, compared by longest common subsequence.
 * @param {string} before
 * @param {string} after
 * @returns {DiffLine[]}
 */
export function diffLines(before, after) {
  const a = before === '' ? [] : before.split('\n');
  const b = after === '' ? [] : after.split('\n');
  // Common head and tail first: most edits touch a few lines in the middle.
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  /** @type {DiffLine[]} */
  const middle = [];
  if ((x.length + 1) * (y.length + 1) > MAX_CELLS) {
    for (const text of x) middle.push({ op: '-', text });
    for (const text of y) middle.push({ op: '+', text });
  } else {
    // lengths[i][j]: longest common subsequence of x[i..] and y[j..].
    const w = y.length + 1;
    const lengths = new Uint32Array((x.length + 1) * w);
    for (let i = x.length - 1; i >= 0; i -= 1) {
      for (let j = y.length - 1; j >= 0; j -= 1) {
        lengths[i * w + j] =
          x[i] === y[j] ? lengths[(i + 1) * w + j + 1] + 1 : Math.max(lengths[(i + 1) * w + j], lengths[i * w + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < x.length || j < y.length) {
      if (i < x.length && j < y.length && x[i] === y[j]) {
        middle.push({ op: ' ', text: x[i] });
        i += 1;
        j += 1;
      } else if (j < y.length && (i === x.length || lengths[i * w + j + 1] > lengths[(i + 1) * w + j])) {
        middle.push({ op: '+', text: y[j] });
        j += 1;
      } else {
        middle.push({ op: '-', text: x[i] });
        i += 1;
      }
    }
  }
  return [
    ...a.slice(0, head).map((text) => /** @type {DiffLine} */ ({ op: ' ', text })),
    ...middle,
    ...a.slice(a.length - tail).map((text) => /** @type {DiffLine} */ ({ op: ' ', text })),
  ];
}

/**
 * Drops unchanged lines far from any change, leaving `null` where lines were skipped.
 * @param {DiffLine[]} lines
 * @returns {(DiffLine | null)[]}
 */
export function withContext(lines) {
  const near = new Uint8Array(lines.length);
  lines.forEach((line, n) => {
    if (line.op === ' ') return;
    for (let k = Math.max(0, n - CONTEXT); k <= Math.min(lines.length - 1, n + CONTEXT); k += 1) near[k] = 1;
  });
  /** @type {(DiffLine | null)[]} */
  const out = [];
  lines.forEach((line, n) => {
    if (near[n]) out.push(line);
    else if (out[out.length - 1] !== null) out.push(null);
  });
  return out;
}

/**
 * What a file-editing tool call changes, or null for other tools.
 * @param {string} name tool name
 * @param {unknown} input its input
 * @returns {{path: string, lines: DiffLine[]} | null}
 */
export function toolDiff(name, input) {
  const fields = /** @type {Record<string, unknown>} */ (input && typeof input === 'object' ? input : {});
  const path = typeof fields.file_path === 'string' ? fields.file_path : '';
  const str = (/** @type {unknown} */ v) => (typeof v === 'string' ? v : '');
  if (name === 'Edit') return { path, lines: diffLines(str(fields.old_string), str(fields.new_string)) };
  if (name === 'Write') return { path, lines: diffLines('', str(fields.content)) };
  if (name === 'MultiEdit' && Array.isArray(fields.edits)) {
    /** @type {DiffLine[]} */
    const lines = [];
    for (const edit of fields.edits) {
      const e = /** @type {Record<string, unknown>} */ (edit && typeof edit === 'object' ? edit : {});
      if (lines.length) lines.push({ op: ' ', text: '…' });
      lines.push(...diffLines(str(e.old_string), str(e.new_string)));
    }
    return { path, lines };
  }
  return null;
}

/**
 * Renders diff lines as a `<div class="diff">` of one element per line.
 * @param {DiffLine[]} lines
 * @returns {HTMLElement}
 */
export function renderDiff(lines) {
  const box = document.createElement('div');
  box.className = 'diff';
  box.setAttribute('role', 'group');
  box.setAttribute('aria-label', 'Changes');
  for (const line of withContext(lines)) {
    const row = document.createElement('div');
    if (line === null) {
      row.className = 'diff-line diff-skip';
      row.textContent = '⋯';
    } else {
      row.className = `diff-line ${line.op === '+' ? 'diff-add' : line.op === '-' ? 'diff-del' : 'diff-ctx'}`;
      row.textContent = `${line.op} ${line.text}`;
    }
    box.append(row);
  }
  return box;
}

/**
 * `+3 −1`: how many lines were added and removed.
 * @param {number} added
 * @param {number} removed
 */
export function lineStat(added, removed) {
  return `+${added} −${removed}`;
}

/**
 * {@link lineStat} of diff lines.
 * @param {DiffLine[]} lines
 */
export function diffStat(lines) {
  return lineStat(lines.filter((l) => l.op === '+').length, lines.filter((l) => l.op === '-').length);
}

/**
 * The files of a unified diff as `git diff` writes it without renames, each with the lines of
 * its hunks (a `…` line between two hunks), keyed by the old side's name in its
 * `diff --git` line, unquoted (`a/src/x.js`: the server always asks git for these prefixes). A
 * binary file has no lines; a diff cut short ends with what it has.
 * @param {string} text
 * @returns {Map<string, DiffLine[]>}
 */
export function gitDiffFiles(text) {
  /** @type {Map<string, DiffLine[]>} */
  const files = new Map();
  /** @type {DiffLine[] | null} */
  let lines = null;
  let inHunk = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('diff --git ')) {
      // `a/P b/P`: both sides name the same file, so the old side is the first half.
      const names = line.slice('diff --git '.length);
      const old = names.slice(0, (names.length - 1) / 2);
      lines = [];
      inHunk = false;
      files.set(old.startsWith('"') ? unquote(old) : old, lines);
    } else if (lines && line.startsWith('@@')) {
      if (lines.length) lines.push({ op: ' ', text: '…' });
      inHunk = true;
    } else if (lines && inHunk && (line[0] === ' ' || line[0] === '+' || line[0] === '-')) {
      lines.push({ op: /** @type {DiffLine['op']} */ (line[0]), text: line.slice(1) });
    }
  }
  return files;
}

/** The characters git writes after a backslash in a quoted name. */
const ESCAPES = /** @type {Record<string, number>} */ ({ a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, '\\': 92 });

/**
 * A name git quoted (`"caf\303\251.txt"`): its escapes and octal bytes decoded as UTF-8.
 * @param {string} quoted
 */
function unquote(quoted) {
  const inner = quoted.slice(1, -1);
  const encoder = new TextEncoder();
  /** @type {number[]} */
  const bytes = [];
  let i = 0;
  while (i < inner.length) {
    const slash = inner.indexOf('\\', i);
    bytes.push(...encoder.encode(inner.slice(i, slash < 0 ? inner.length : slash)));
    if (slash < 0) break;
    const octal = /^[0-7]{3}/.exec(inner.slice(slash + 1, slash + 4));
    if (octal) {
      bytes.push(parseInt(octal[0], 8));
      i = slash + 4;
    } else {
      bytes.push(ESCAPES[inner[slash + 1]] ?? inner.charCodeAt(slash + 1));
      i = slash + 2;
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}
