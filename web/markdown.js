// @ts-check
/**
 * @file A small Markdown subset rendered safely: the text is parsed into a tree and the tree
 * is built with `createElement` and `textContent`, so no HTML in model output (or anywhere
 * else) is ever interpreted. Links are kept only for http(s) and mailto URLs.
 *
 * Blocks: paragraphs (single newlines kept), `#` headings, fenced code (highlighted by
 * highlight.js, with its language and a Copy button), `>` quotes, `-`/`*`/`1.` lists, `---`
 * rules. Inline: `code`, **strong**, *em*, ~~strike~~, [links](https://…), bare https:// URLs.
 */

import { highlight } from './highlight.js';

/**
 * @typedef {{type: 'text', text: string}
 *   | {type: 'code', text: string}
 *   | {type: 'br'}
 *   | {type: 'strong' | 'em' | 'del', children: Inline[]}
 *   | {type: 'link', href: string, children: Inline[]}} Inline
 */

/**
 * @typedef {{type: 'paragraph', children: Inline[]}
 *   | {type: 'heading', level: number, children: Inline[]}
 *   | {type: 'code', lang: string, text: string}
 *   | {type: 'quote', children: Block[]}
 *   | {type: 'list', ordered: boolean, items: Inline[][]}
 *   | {type: 'rule'}} Block
 */

const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+-]*)\s*$/;
const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s*[-*+]\s+(.*)$/;
const NUMBERED = /^\s*\d{1,9}[.)]\s+(.*)$/;
const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^\s*>\s?(.*)$/;

/**
 * Parses Markdown text into blocks.
 * @param {string} text
 * @returns {Block[]}
 */
export function parseMarkdown(text) {
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  /** @type {Block[]} */
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) {
        body.push(lines[i]);
        i += 1;
      }
      i += 1;
      blocks.push({ type: 'code', lang: fence[2], text: body.join('\n') });
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      blocks.push({ type: 'heading', level: heading[1].length, children: parseInline(heading[2]) });
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      blocks.push({ type: 'rule' });
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      let m;
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i += 1;
      }
      blocks.push({ type: 'quote', children: parseMarkdown(body.join('\n')) });
      continue;
    }
    const ordered = NUMBERED.test(line);
    if (ordered || BULLET.test(line)) {
      const pattern = ordered ? NUMBERED : BULLET;
      /** @type {Inline[][]} */
      const items = [];
      let m;
      while (i < lines.length && (m = pattern.exec(lines[i]))) {
        items.push(parseInline(m[1]));
        i += 1;
      }
      blocks.push({ type: 'list', ordered, items });
      continue;
    }
    const body = [];
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) {
      body.push(lines[i]);
      i += 1;
    }
    /** @type {Inline[]} */
    const children = [];
    body.forEach((l, n) => {
      if (n > 0) children.push({ type: 'br' });
      children.push(...parseInline(l));
    });
    blocks.push({ type: 'paragraph', children });
  }
  return blocks;
}

/** @param {string} line */
function startsBlock(line) {
  return [FENCE, HEADING, BULLET, NUMBERED, RULE, QUOTE].some((re) => re.test(line));
}

/**
 * One inline rule: where it matches in the text and what it makes of the match.
 * @typedef {{re: RegExp, make: (m: RegExpExecArray) => Inline}} InlineRule
 */

/** @type {InlineRule[]} */
const INLINE = [
  { re: /`([^`]+)`/, make: (m) => ({ type: 'code', text: m[1] }) },
  { re: /\*\*(?=\S)([\s\S]*?\S)\*\*/, make: (m) => ({ type: 'strong', children: parseInline(m[1]) }) },
  { re: /__(?=\S)([\s\S]*?\S)__/, make: (m) => ({ type: 'strong', children: parseInline(m[1]) }) },
  { re: /~~(?=\S)([\s\S]*?\S)~~/, make: (m) => ({ type: 'del', children: parseInline(m[1]) }) },
  {
    re: /(?<![\w*])\*(?=[^\s*])([^*]*?[^\s*])\*(?![\w*])/,
    make: (m) => ({ type: 'em', children: parseInline(m[1]) }),
  },
  {
    re: /(?<!\w)_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/,
    make: (m) => ({ type: 'em', children: parseInline(m[1]) }),
  },
  {
    re: /\[([^\]]+)\]\(\s*([^)\s]+)\s*\)/,
    make: (m) =>
      safeHref(m[2])
        ? { type: 'link', href: m[2], children: parseInline(m[1]) }
        : { type: 'text', text: m[0] },
  },
  {
    re: /\bhttps?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/,
    make: (m) => ({ type: 'link', href: m[0], children: [{ type: 'text', text: m[0] }] }),
  },
];

/**
 * Parses inline markup: the earliest match of any rule wins, text around it stays text.
 * @param {string} text
 * @returns {Inline[]}
 */
export function parseInline(text) {
  /** @type {Inline[]} */
  const out = [];
  let rest = text;
  while (rest) {
    /** @type {{m: RegExpExecArray, rule: InlineRule} | null} */
    let best = null;
    for (const rule of INLINE) {
      const m = rule.re.exec(rest);
      if (m && (!best || m.index < best.m.index)) best = { m, rule };
    }
    if (!best) {
      out.push({ type: 'text', text: rest });
      break;
    }
    if (best.m.index > 0) out.push({ type: 'text', text: rest.slice(0, best.m.index) });
    out.push(best.rule.make(best.m));
    rest = rest.slice(best.m.index + best.m[0].length);
  }
  return out;
}

/**
 * Whether a link target is safe to follow: http(s) and mailto only.
 * @param {string} href
 */
export function safeHref(href) {
  return /^(https?:\/\/|mailto:)/i.test(href);
}

/**
 * Renders Markdown text as DOM nodes.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  for (const block of parseMarkdown(text)) fragment.append(renderBlock(block));
  return fragment;
}

/**
 * @param {Block} block
 * @returns {Node}
 */
function renderBlock(block) {
  switch (block.type) {
    case 'paragraph':
      return withInline(document.createElement('p'), block.children);
    case 'heading':
      return withInline(document.createElement(`h${block.level}`), block.children);
    case 'code':
      return codeBlock(block.text, block.lang);
    case 'quote': {
      const quote = document.createElement('blockquote');
      for (const child of block.children) quote.append(renderBlock(child));
      return quote;
    }
    case 'list': {
      const list = document.createElement(block.ordered ? 'ol' : 'ul');
      for (const item of block.items) list.append(withInline(document.createElement('li'), item));
      return list;
    }
    case 'rule':
      return document.createElement('hr');
  }
}

/**
 * A fenced code block: a head with its language and a Copy button, then the highlighted code.
 * @param {string} text
 * @param {string} lang
 * @returns {HTMLElement}
 */
export function codeBlock(text, lang) {
  const box = document.createElement('div');
  box.className = 'code-block';
  const head = box.appendChild(document.createElement('div'));
  head.className = 'code-head';
  const label = head.appendChild(document.createElement('span'));
  label.className = 'code-lang';
  label.textContent = lang || 'text';
  const copy = head.appendChild(document.createElement('button'));
  copy.type = 'button';
  copy.className = 'code-copy';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', `Copy ${lang || 'code'}`);
  copy.addEventListener('click', () => {
    copyText(text).then(
      () => (copy.textContent = 'Copied'),
      () => (copy.textContent = 'Copy failed'),
    );
    setTimeout(() => (copy.textContent = 'Copy'), 2000);
  });
  const pre = box.appendChild(document.createElement('pre'));
  const code = pre.appendChild(document.createElement('code'));
  if (lang) code.dataset.lang = lang;
  code.append(highlight(text, lang));
  return box;
}

/**
 * Puts text on the clipboard: the Clipboard API where the page may use it, else a selection.
 * @param {string} text
 * @returns {Promise<void>}
 */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.append(area);
  area.select();
  const ok = document.execCommand('copy');
  area.remove();
  if (!ok) throw new Error('copy refused');
}

/**
 * @template {HTMLElement} E
 * @param {E} element
 * @param {Inline[]} inlines
 * @returns {E}
 */
function withInline(element, inlines) {
  for (const inline of inlines) element.append(renderInline(inline));
  return element;
}

/**
 * @param {Inline} inline
 * @returns {Node}
 */
function renderInline(inline) {
  switch (inline.type) {
    case 'text':
      return document.createTextNode(inline.text);
    case 'br':
      return document.createElement('br');
    case 'code': {
      const code = document.createElement('code');
      code.textContent = inline.text;
      return code;
    }
    case 'strong':
    case 'em':
    case 'del':
      return withInline(document.createElement(inline.type), inline.children);
    case 'link': {
      const a = withInline(document.createElement('a'), inline.children);
      a.href = inline.href;
      a.rel = 'noopener noreferrer';
      a.target = '_blank';
      return a;
    }
  }
}
