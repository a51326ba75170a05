// @ts-check
/** @file Plain text for the page: ages, titles, sizes, costs and a turn's summary line. */

import { parseInline } from '../markdown.js';

/** @typedef {import('../markdown.js').Inline} Inline */
/** @typedef {import('./view.js').ResultMessage} ResultMessage */

/**
 * @param {string} iso
 * @param {number} now
 */
export function age(iso, now) {
  const seconds = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (!Number.isFinite(seconds) || seconds < 45) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h`;
  return `${Math.round(hours / 24)} d`;
}

/**
 * A title as one line of plain text: no Markdown markers, no line breaks.
 * @param {string} title
 */
export function plainTitle(title) {
  const lines = title
    .split(/\r?\n/)
    .filter((line) => !/^\s*(`{3,}|~{3,})/.test(line))
    .map((line) => line.replace(/^\s*(#{1,6}\s+|>\s?|[-*+]\s+|\d{1,9}[.)]\s+)/, ''));
  /** @param {Inline[]} nodes @returns {string} */
  const flat = (nodes) =>
    nodes
      .map((n) => (n.type === 'text' || n.type === 'code' ? n.text : n.type === 'br' ? ' ' : flat(n.children)))
      .join('');
  return flat(parseInline(lines.join(' '))).replace(/\s+/g, ' ').trim();
}

/** Input fields that say best what a tool call does, most telling first. */
const TOOL_HINTS = ['command', 'file_path', 'path', 'pattern', 'url', 'query', 'description'];

/**
 * `Bash: ls -la`: the tool's name and the most telling field of its input.
 * @param {string} name
 * @param {unknown} input
 */
export function toolSummary(name, input) {
  const fields = /** @type {Record<string, unknown>} */ (input && typeof input === 'object' ? input : {});
  const hint = TOOL_HINTS.map((key) => fields[key]).find((v) => typeof v === 'string');
  if (typeof hint !== 'string') return name;
  const line = hint.split('\n')[0];
  return `${name}: ${line.length > 80 ? `${line.slice(0, 79)}…` : line}`;
}

/**
 * `12.3 kB`: the size of a text in UTF-8.
 * @param {string} text
 */
export function size(text) {
  const bytes = new TextEncoder().encode(text).length;
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1_000_000) return `${(bytes / 1000).toFixed(1)} kB`;
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}

/**
 * @param {number} usd
 */
export function dollars(usd) {
  return `$${usd.toFixed(4)}`;
}

/**
 * @param {ResultMessage} result
 * @param {number | undefined} cost this turn's own cost
 * @param {string} model
 */
export function resultSummary(result, cost, model) {
  const parts = [];
  if (!result.is_error) parts.push('Done');
  else if (result.terminal_reason?.startsWith('aborted')) parts.push('Interrupted');
  else if (result.terminal_reason === 'server_restart') parts.push('Stopped by a server restart');
  else if (result.terminal_reason === 'node_lost') parts.push('Stopped: the node running it was lost');
  else parts.push(`Error (${result.subtype ?? 'unknown'})`);
  if (typeof cost === 'number') parts.push(dollars(cost));
  const usage = result.usage;
  if (usage) {
    const input =
      (usage.input_tokens ?? 0) +
      (usage.cache_read_input_tokens ?? 0) +
      (usage.cache_creation_input_tokens ?? 0);
    parts.push(`${input} in / ${usage.output_tokens ?? 0} out tokens`);
  }
  if (typeof result.duration_ms === 'number') parts.push(duration(result.duration_ms));
  if (model) parts.push(model);
  return parts.join(' · ');
}

/** @param {number} ms */
function duration(ms) {
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}
