// @ts-check
/**
 * @file Syntax highlighting for code blocks: a small tokenizer for common languages (js/ts,
 * rust, python, bash/sh, json, diff, html/xml, css). It only splits text into tokens; the page
 * builds `<span>`s from them with `textContent`, so highlighted code is never parsed as HTML.
 */

/**
 * One token: its text and its kind (`''` for plain text).
 * @typedef {{text: string, kind: string}} Token
 */

/**
 * A rule: a sticky regular expression and the kind of what it matches; `kind` may be a
 * function of the match (e.g. a word that is a keyword or not).
 * @typedef {[RegExp, string | ((m: RegExpExecArray) => string)]} Rule
 */

/** @param {string} words */
const set = (words) => new Set(words.split(' '));

const JS_KEYWORDS = set(
  'as async await break case catch class const continue debugger default delete do else enum export extends finally for from function get if implements import in instanceof interface let new of package private protected public readonly return set static super switch this throw try type typeof var void while with yield keyof declare namespace abstract satisfies',
);
const JS_LITERALS = set('true false null undefined NaN Infinity');
const RUST_KEYWORDS = set(
  'as async await break const continue crate dyn else enum extern fn for if impl in let loop match mod move mut pub ref return self Self static struct super trait type unsafe use where while',
);
const RUST_LITERALS = set('true false None Some Ok Err');
const PY_KEYWORDS = set(
  'and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case',
);
const PY_LITERALS = set('True False None self');
const SH_KEYWORDS = set(
  'if then else elif fi for in do done while until case esac function return local export readonly unset set shift exit source alias sudo cd echo',
);

/**
 * @param {Set<string>} keywords
 * @param {Set<string>} literals
 * @returns {Rule}
 */
function words(keywords, literals) {
  return [
    /[A-Za-z_$][\w$]*/y,
    (m) => {
      if (keywords.has(m[0])) return 'keyword';
      if (literals.has(m[0])) return 'literal';
      return /^[A-Z][a-z]/.test(m[0]) ? 'type' : '';
    },
  ];
}

const NUMBER = /** @type {Rule} */ ([/\b(?:0x[\da-fA-F_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)[a-z\d]*\b/y, 'number']);
const DQ = /** @type {Rule} */ ([/"(?:[^"\\\n]|\\.)*"?/y, 'string']);
const SQ = /** @type {Rule} */ ([/'(?:[^'\\\n]|\\.)*'?/y, 'string']);

/** @type {Record<string, Rule[]>} */
const LANGUAGES = {
  js: [
    [/\/\/.*/y, 'comment'],
    [/\/\*[\s\S]*?(?:\*\/|$)/y, 'comment'],
    [/`(?:[^`\\]|\\[\s\S])*`?/y, 'string'],
    DQ,
    SQ,
    NUMBER,
    words(JS_KEYWORDS, JS_LITERALS),
  ],
  rust: [
    [/\/\/.*/y, 'comment'],
    [/\/\*[\s\S]*?(?:\*\/|$)/y, 'comment'],
    [/b?r#*"[\s\S]*?"#*/y, 'string'],
    [/b?"(?:[^"\\]|\\[\s\S])*"?/y, 'string'],
    [/'(?:\\.|[^'\\\n])'/y, 'string'],
    [/'[A-Za-z_]\w*/y, 'literal'],
    [/[A-Za-z_]\w*!/y, 'function'],
    [/#!?\[[^\]\n]*\]/y, 'meta'],
    NUMBER,
    words(RUST_KEYWORDS, RUST_LITERALS),
  ],
  python: [
    [/#.*/y, 'comment'],
    [/[rbfu]{0,2}("""|''')[\s\S]*?(?:\1|$)/y, 'string'],
    [/[rbfu]{0,2}"(?:[^"\\\n]|\\.)*"?/y, 'string'],
    [/[rbfu]{0,2}'(?:[^'\\\n]|\\.)*'?/y, 'string'],
    [/@[\w.]+/y, 'meta'],
    NUMBER,
    words(PY_KEYWORDS, PY_LITERALS),
  ],
  bash: [
    [/(?<![^\s;|&(])#.*/y, 'comment'],
    DQ,
    [/'[^']*'?/y, 'string'],
    [/\$(?:\{[^}\n]*\}?|\(|[\w@#?$!*-])/y, 'literal'],
    [/(?<![\w-])--?[A-Za-z][\w-]*/y, 'meta'],
    NUMBER,
    [/[A-Za-z_][\w-]*/y, (m) => (SH_KEYWORDS.has(m[0]) ? 'keyword' : '')],
  ],
  json: [
    [/"(?:[^"\\\n]|\\.)*"(?=\s*:)/y, 'key'],
    DQ,
    [/-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y, 'number'],
    [/\b(?:true|false|null)\b/y, 'literal'],
  ],
  html: [
    [/<!--[\s\S]*?(?:-->|$)/y, 'comment'],
    [/<\/?[A-Za-z][\w:-]*|\/?>/y, 'keyword'],
    [/[A-Za-z_:][\w:.-]*(?==)/y, 'key'],
    DQ,
    SQ,
  ],
  css: [
    [/\/\*[\s\S]*?(?:\*\/|$)/y, 'comment'],
    [/@[\w-]+/y, 'keyword'],
    [/[\w-]+(?=\s*:[^{;]*[;}])/y, 'key'],
    DQ,
    SQ,
    [/#[\da-fA-F]{3,8}\b/y, 'number'],
    [/-?\d*\.?\d+(?:%|[a-z]+)?/y, 'number'],
  ],
};

/** Names a code fence may use, each mapped to one of {@link LANGUAGES} (or `diff`). */
const ALIASES = /** @type {Record<string, string>} */ ({
  js: 'js', javascript: 'js', jsx: 'js', mjs: 'js', cjs: 'js', ts: 'js', typescript: 'js', tsx: 'js',
  rust: 'rust', rs: 'rust',
  python: 'python', py: 'python',
  bash: 'bash', sh: 'bash', shell: 'bash', zsh: 'bash', console: 'bash', shellsession: 'bash',
  json: 'json', jsonc: 'json', jsonl: 'json',
  diff: 'diff', patch: 'diff',
  html: 'html', xml: 'html', svg: 'html', htm: 'html',
  css: 'css', scss: 'css',
});

/** Longest code highlighted; longer code is shown plain (the tokenizer is linear, but DOM is not free). */
const MAX_CHARS = 100_000;

/**
 * The language a fence name stands for, or `''` when it is not one this module knows.
 * @param {string} lang
 */
export function languageOf(lang) {
  return ALIASES[lang.toLowerCase()] ?? '';
}

/**
 * Splits code into tokens. Unknown languages (and very long code) give one plain token.
 * @param {string} code
 * @param {string} lang a fence name, e.g. `ts`, `rust`, `sh`
 * @returns {Token[]}
 */
export function tokenize(code, lang) {
  const language = languageOf(lang);
  if (!language || code.length > MAX_CHARS) return [{ text: code, kind: '' }];
  if (language === 'diff') return diffTokens(code);
  const rules = LANGUAGES[language];
  /** @type {Token[]} */
  const out = [];
  let plain = '';
  let i = 0;
  while (i < code.length) {
    let matched = false;
    for (const [re, kind] of rules) {
      re.lastIndex = i;
      const m = re.exec(code);
      if (!m || m[0].length === 0) continue;
      const k = typeof kind === 'function' ? kind(m) : kind;
      if (k) {
        if (plain) out.push({ text: plain, kind: '' });
        plain = '';
        out.push({ text: m[0], kind: k });
      } else {
        plain += m[0];
      }
      i += m[0].length;
      matched = true;
      break;
    }
    if (!matched) {
      plain += code[i];
      i += 1;
    }
  }
  if (plain) out.push({ text: plain, kind: '' });
  return out;
}

/**
 * A unified diff, line by line.
 * @param {string} code
 * @returns {Token[]}
 */
function diffTokens(code) {
  return code.split('\n').map((line, n, lines) => {
    const text = n < lines.length - 1 ? `${line}\n` : line;
    let kind = '';
    if (/^(\+\+\+|---|diff |index )/.test(line)) kind = 'meta';
    else if (line.startsWith('@@')) kind = 'hunk';
    else if (line.startsWith('+')) kind = 'added';
    else if (line.startsWith('-')) kind = 'removed';
    return { text, kind };
  });
}

/**
 * Renders highlighted code as DOM nodes (text nodes and `<span class="tok-…">`).
 * @param {string} code
 * @param {string} lang
 * @returns {DocumentFragment}
 */
export function highlight(code, lang) {
  const fragment = document.createDocumentFragment();
  for (const token of tokenize(code, lang)) {
    if (!token.kind) {
      fragment.append(document.createTextNode(token.text));
      continue;
    }
    const span = document.createElement('span');
    span.className = `tok-${token.kind}`;
    span.textContent = token.text;
    fragment.append(span);
  }
  return fragment;
}
