// Unit tests of the code highlighter's tokenizer, the line diffs of file edits and the files of git's diffs.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { diffLines, diffStat, gitDiffFiles, lineStat, toolDiff, withContext } from '../diff.js';
import { languageOf, tokenize } from '../highlight.js';

/** @param {ReturnType<typeof tokenize>} tokens @param {string} kind */
const of = (tokens, kind) => tokens.filter((t) => t.kind === kind).map((t) => t.text);

test('tokens of common languages; the text is kept exactly', () => {
  const cases = [
    ['ts', 'const a: number = 1; // one\nlet s = `x${a}`;', { keyword: ['const', 'let'], comment: ['// one'], number: ['1'] }],
    ['rust', 'fn main() { let v: Vec<u8> = vec![]; println!("{}", 0x1f); }', { keyword: ['fn', 'let'], type: ['Vec'], function: ['vec!', 'println!'], string: ['"{}"'] }],
    ['py', 'def f(x):\n    return None  # done', { keyword: ['def', 'return'], literal: ['None'], comment: ['# done'] }],
    ['sh', 'if [ -f "$HOME/x" ]; then echo $USER; fi # c', { keyword: ['if', 'then', 'echo', 'fi'], comment: ['# c'] }],
    ['json', '{"k": [1, true, "v"]}', { key: ['"k"'], number: ['1'], literal: ['true'], string: ['"v"'] }],
    ['html', '<a href="x">t</a>', { keyword: ['<a', '>', '</a', '>'], key: ['href'], string: ['"x"'] }],
    ['css', 'a { color: #fff; margin: 2px; }', { key: ['color', 'margin'], number: ['#fff', '2px'] }],
    ['diff', '--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new', { meta: ['--- a\n', '+++ b\n'], hunk: ['@@ -1 +1 @@\n'], removed: ['-old\n'], added: ['+new'] }],
  ];
  for (const [lang, code, kinds] of cases) {
    const tokens = tokenize(code, lang);
    assert.equal(tokens.map((t) => t.text).join(''), code, lang);
    for (const [kind, texts] of Object.entries(kinds)) assert.deepEqual(of(tokens, kind), texts, `${lang} ${kind}`);
  }
});

test('unknown languages, unclosed strings and hostile text stay plain and whole', () => {
  assert.deepEqual(tokenize('<script>alert(1)</script>', 'brainfuck'), [{ text: '<script>alert(1)</script>', kind: '' }]);
  assert.equal(languageOf('TypeScript'), 'js');
  assert.equal(languageOf('nope'), '');
  for (const code of ['"unclosed', '/* never ends', "r#\"raw", '`tpl ${', '\\', '\u0000\u202e', 'x'.repeat(200_000)]) {
    for (const lang of ['js', 'rust', 'python', 'bash', 'json', 'html', 'css', 'diff']) {
      assert.equal(tokenize(code, lang).map((t) => t.text).join(''), code, `${lang}: ${code.slice(0, 20)}`);
    }
  }
});

test('line diffs of Edit, MultiEdit and Write', () => {
  assert.deepEqual(diffLines('a\nb\nc', 'a\nB\nc'), [
    { op: ' ', text: 'a' },
    { op: '-', text: 'b' },
    { op: '+', text: 'B' },
    { op: ' ', text: 'c' },
  ]);
  const edit = toolDiff('Edit', { file_path: 'f.rs', old_string: 'x', new_string: 'y\nz' });
  assert.equal(edit?.path, 'f.rs');
  assert.equal(diffStat(edit?.lines ?? []), '+2 −1');
  assert.equal(diffStat(toolDiff('Write', { file_path: 'n', content: '1\n2\n3' })?.lines ?? []), '+3 −0');
  const multi = toolDiff('MultiEdit', { file_path: 'm', edits: [{ old_string: 'a', new_string: 'b' }, { old_string: 'c', new_string: 'd' }] });
  assert.equal(diffStat(multi?.lines ?? []), '+2 −2');
  assert.equal(toolDiff('Bash', { command: 'ls' }), null);
  // Wrong shapes do not throw.
  assert.deepEqual(toolDiff('Edit', null)?.lines, []);
  assert.deepEqual(toolDiff('MultiEdit', { edits: [null, 5, { old_string: 3 }] })?.lines, []);
  // Far from a change, unchanged lines are skipped.
  const long = Array.from({ length: 50 }, (_, i) => `l${i}`);
  const changed = long.map((l, i) => (i === 25 ? 'X' : l));
  const shown = withContext(diffLines(long.join('\n'), changed.join('\n')));
  assert.equal(shown.filter((l) => l === null).length, 2);
  assert.equal(shown.filter((l) => l !== null).length, 8);
  // Huge edits fall back to remove-all, add-all instead of a quadratic table.
  const big = Array.from({ length: 5000 }, (_, i) => `a${i}`).join('\n');
  const other = Array.from({ length: 5000 }, (_, i) => `b${i}`).join('\n');
  assert.equal(diffStat(diffLines(big, other)), '+5000 −5000');
});

test("the files of git's unified diff, quoted names and binary files among them", () => {
  const diff = [
    'diff --git a/src/a b.txt b/src/a b.txt',
    'index 5626abf..f719efd 100644',
    '--- a/src/a b.txt',
    '+++ b/src/a b.txt',
    '@@ -1,2 +1,2 @@',
    ' one',
    '-two',
    '+TWO',
    '@@ -9 +9,2 @@ fn x()',
    ' nine',
    '+ten',
    '\\ No newline at end of file',
    'diff --git "a/caf\\303\\251\\t.txt" "b/caf\\303\\251\\t.txt"',
    'new file mode 100644',
    '--- /dev/null',
    '+++ "b/caf\\303\\251\\t.txt"',
    '@@ -0,0 +1 @@',
    '+-- not a header',
    'diff --git a/img.png b/img.png',
    'Binary files a/img.png and b/img.png differ',
    'diff --git a/cut.txt b/cut.txt',
    '@@ -1,3 +1,3 @@',
    ' a',
    '-b',
    '',
  ].join('\n');
  const files = gitDiffFiles(diff);
  assert.deepEqual([...files.keys()], ['a/src/a b.txt', 'a/café\t.txt', 'a/img.png', 'a/cut.txt']);
  assert.deepEqual(files.get('a/src/a b.txt'), [
    { op: ' ', text: 'one' },
    { op: '-', text: 'two' },
    { op: '+', text: 'TWO' },
    { op: ' ', text: '…' },
    { op: ' ', text: 'nine' },
    { op: '+', text: 'ten' },
  ]);
  assert.deepEqual(files.get('a/café\t.txt'), [{ op: '+', text: '-- not a header' }]);
  assert.deepEqual(files.get('a/img.png'), []);
  assert.equal(diffStat(files.get('a/cut.txt') ?? []), '+0 −1');
  assert.equal(lineStat(12, 3), '+12 −3');
});
