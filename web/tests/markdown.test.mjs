// Unit tests of the Markdown subset's parser (the DOM side is covered by the browser tests).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseInline, parseMarkdown } from '../markdown.js';

test('blocks: paragraphs, headings, fenced code, lists, quotes, rules', () => {
  const blocks = parseMarkdown('# Title\nline one\nline two\n\n```js\nlet a = 1;\n```\n- a\n- b\n1. x\n> quoted\n---');
  assert.deepEqual(
    blocks.map((b) => b.type),
    ['heading', 'paragraph', 'code', 'list', 'list', 'quote', 'rule'],
  );
  assert.deepEqual(blocks[1].children.map((c) => c.type), ['text', 'br', 'text']);
  assert.deepEqual(blocks[2], { type: 'code', lang: 'js', text: 'let a = 1;' });
  assert.equal(blocks[3].ordered, false);
  assert.equal(blocks[4].ordered, true);
});

test('inline: code, strong, em, links; unsafe links stay text', () => {
  assert.deepEqual(parseInline('a `<b>` **c** *d*'), [
    { type: 'text', text: 'a ' },
    { type: 'code', text: '<b>' },
    { type: 'text', text: ' ' },
    { type: 'strong', children: [{ type: 'text', text: 'c' }] },
    { type: 'text', text: ' ' },
    { type: 'em', children: [{ type: 'text', text: 'd' }] },
  ]);
  assert.deepEqual(parseInline('[x](https://example.com/a)'), [
    { type: 'link', href: 'https://example.com/a', children: [{ type: 'text', text: 'x' }] },
  ]);
  const unsafe = parseInline('[x](javascript:alert(1))');
  assert.ok(unsafe.every((n) => n.type === 'text'), JSON.stringify(unsafe));
  assert.equal(unsafe.map((n) => n.text).join(''), '[x](javascript:alert(1))');
  assert.deepEqual(parseInline('2 * 3 * 4'), [{ type: 'text', text: '2 * 3 * 4' }]);
  assert.deepEqual(parseInline('snake_case_name'), [{ type: 'text', text: 'snake_case_name' }]);
});
