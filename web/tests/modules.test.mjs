// The UI's modules: each is served as the page needs it (its type, the strict CSP, revalidated),
// the page loads all of them from the server and nothing from elsewhere, and the state that
// changes while the page lives is in one module, not in variables scattered over the others.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import ts from 'typescript';

import { REPO, browserTests, openUi } from './helpers.mjs';

const { server, context } = browserTests();

const WEB = join(REPO, 'web');

/** The page's modules, as paths under `web/` (and under `/assets/`); not the service worker. */
function modules() {
  return [
    ...readdirSync(WEB).filter((name) => name.endsWith('.js') && name !== 'sw.js'),
    ...readdirSync(join(WEB, 'ui'))
      .filter((name) => name.endsWith('.js'))
      .map((name) => `ui/${name}`),
  ];
}

test('every module is served as it is in the repository, with the UI CSP and no stale copies', async () => {
  const s = await server();
  const csp = (await fetch(`${s.url}/`)).headers.get('content-security-policy');
  assert.ok(csp);
  for (const name of modules()) {
    const response = await fetch(`${s.url}/assets/${name}`);
    assert.equal(response.status, 200, name);
    assert.equal(response.headers.get('content-type'), 'text/javascript; charset=utf-8', name);
    assert.equal(response.headers.get('content-security-policy'), csp, name);
    assert.equal(response.headers.get('cache-control'), 'no-cache', name);
    assert.equal(await response.text(), readFileSync(join(WEB, name), 'utf8'), name);
  }
  assert.equal((await fetch(`${s.url}/assets/ui/nope.js`)).status, 404);
  assert.equal((await fetch(`${s.url}/assets/ui/`)).status, 404);
});

test('the page loads its modules from the server and nothing from elsewhere', async () => {
  const s = await server();
  const { requests, problems } = await openUi(await context(), s.url);
  const origin = new URL(s.url).origin;
  assert.deepEqual(
    requests.filter((url) => new URL(url).origin !== origin),
    [],
  );
  const loaded = new Set(requests.map((url) => new URL(url).pathname));
  for (const name of modules()) assert.ok(loaded.has(`/assets/${name}`), `${name} was not loaded`);
  assert.deepEqual(problems, []);
});

test('only ui/state.js holds state: no other module declares a top-level let or var', () => {
  /** @type {string[]} */
  const found = [];
  for (const name of modules()) {
    if (name === 'ui/state.js') continue;
    const source = ts.createSourceFile(name, readFileSync(join(WEB, name), 'utf8'), ts.ScriptTarget.Latest);
    for (const statement of source.statements) {
      if (!ts.isVariableStatement(statement)) continue;
      if (statement.declarationList.flags & ts.NodeFlags.Const) continue;
      for (const d of statement.declarationList.declarations) found.push(`${name}: ${d.name.getText(source)}`);
    }
  }
  assert.deepEqual(found, []);
});
