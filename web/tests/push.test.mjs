// The installable app and Web Push in Chromium: a valid manifest with its icons, a service
// worker that keeps the shell (the page opens offline and says it is reconnecting), the page
// telling the server which conversation is in view (that one is not pushed), and a push
// (delivered through the DevTools protocol, as no push service is reachable here) shown as a
// notification with Allow and Deny, whose Allow answers the waiting tool.

import assert from 'node:assert/strict';
import { createDecipheriv, createECDH, hkdfSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { REPO, WAIT_MS, browserTests, connection, currentAgent, openUi, storedResults } from './helpers.mjs';

const { server, context } = browserTests();

/**
 * Asks `check` every 100 ms until it answers something, for at most {@link WAIT_MS}.
 * @template T
 * @param {string} what
 * @param {() => Promise<T | undefined>} check
 * @returns {Promise<T>}
 */
async function until(what, check) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const found = await check();
    if (found !== undefined) return found;
    assert.ok(Date.now() < deadline, `timed out: ${what}`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

/** Waits until the page is controlled by the service worker. */
async function controlled(/** @type {import('playwright-core').Page} */ page) {
  await page.waitForFunction(() => navigator.serviceWorker.controller !== null, null, { timeout: WAIT_MS });
}

test('the app installs: its manifest, icons and worker are served, and it opens offline', async () => {
  const s = await server();
  const ctx = await context();
  const { page, problems } = await openUi(ctx, s.url);
  const cdp = await ctx.newCDPSession(page);
  const { url, errors, data } = await cdp.send('Page.getAppManifest');
  assert.equal(new URL(url).pathname, '/manifest.webmanifest');
  assert.deepEqual(errors, []);
  const manifest = JSON.parse(data ?? '');
  assert.equal(manifest.display, 'standalone');
  assert.equal(manifest.start_url, '/');
  assert.ok(manifest.icons.some((/** @type {any} */ i) => i.sizes === '512x512' && i.type === 'image/png'));
  for (const icon of manifest.icons) {
    const response = await fetch(new URL(icon.src, s.url));
    assert.equal(response.status, 200, icon.src);
    assert.equal(response.headers.get('content-type'), icon.type, icon.src);
  }
  const worker = await fetch(`${s.url}/sw.js`);
  assert.equal(worker.headers.get('content-type'), 'text/javascript; charset=utf-8');
  assert.ok((await worker.text()).endsWith(readFileSync(join(REPO, 'web/sw.js'), 'utf8')));

  await controlled(page);
  assert.deepEqual(problems, []);
  await ctx.setOffline(true);
  await page.reload();
  await connection(page, 'Reconnecting…').waitFor();
  assert.equal(await page.title(), 'agentmux');
  await page.getByRole('button', { name: 'New session', exact: true }).waitFor();
  await ctx.setOffline(false);
  await connection(page, 'Connected').waitFor();
});

/**
 * Decrypts an RFC 8291 (aes128gcm) push body with the subscriber's key pair and secret.
 * @param {Buffer} body
 * @param {import('node:crypto').ECDH} ecdh
 * @param {Buffer} auth
 */
function decrypt(body, ecdh, auth) {
  const salt = body.subarray(0, 16);
  const idlen = body[20];
  const serverKey = body.subarray(21, 21 + idlen);
  const sealed = body.subarray(21 + idlen);
  const info = Buffer.concat([Buffer.from('WebPush: info\0'), ecdh.getPublicKey(), serverKey]);
  const ikm = Buffer.from(hkdfSync('sha256', ecdh.computeSecret(serverKey), auth, info, 32));
  const key = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const decipher = createDecipheriv('aes-128-gcm', key, nonce);
  decipher.setAuthTag(sealed.subarray(-16));
  const plain = Buffer.concat([decipher.update(sealed.subarray(0, -16)), decipher.final()]);
  let end = plain.length - 1;
  while (plain[end] === 0) end -= 1;
  return JSON.parse(plain.subarray(0, end).toString());
}

/** A push service on loopback: resolves `next()` with each body posted to it. */
async function fakePushService() {
  /** @type {Buffer[]} */
  const bodies = [];
  /** @type {((body: Buffer) => void)[]} */
  const waiting = [];
  const service = createServer((request, response) => {
    /** @type {Buffer[]} */
    const chunks = [];
    request.on('data', (c) => chunks.push(c));
    request.on('end', () => {
      response.writeHead(201).end();
      const body = Buffer.concat(chunks);
      const next = waiting.shift();
      if (next) next(body);
      else bodies.push(body);
    });
  });
  await new Promise((done) => service.listen(0, '127.0.0.1', () => done(undefined)));
  const address = /** @type {import('node:net').AddressInfo} */ (service.address());
  return {
    endpoint: `http://127.0.0.1:${address.port}/push/phone`,
    /** Bodies that arrived and were not taken. */
    pending: () => bodies.length,
    /** @returns {Promise<Buffer>} */
    next: () => (bodies.length ? Promise.resolve(/** @type {Buffer} */ (bodies.shift())) : new Promise((done) => waiting.push(done))),
    close: () => service.close(),
  };
}

/**
 * Subscribes a device (whose keys the test holds) to `service` over REST.
 * @param {string} base
 * @param {{endpoint: string}} service
 */
async function subscribeDevice(base, service) {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  const auth = randomBytes(16);
  const subscribed = await fetch(`${base}/api/push/subscriptions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      endpoint: service.endpoint,
      keys: { p256dh: ecdh.getPublicKey().toString('base64url'), auth: auth.toString('base64url') },
    }),
  });
  assert.equal(subscribed.status, 201);
  return { ecdh, auth };
}

/**
 * Sends a turn over REST and waits until it has ended.
 * @param {string} base
 * @param {string} agentId
 * @param {string} content
 */
async function turn(base, agentId, content) {
  const before = (await storedResults(base, agentId).catch(() => [])).length;
  const chat = await fetch(`${base}/api/sessions/${agentId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content }),
  });
  assert.equal(chat.status, 202);
  await until(`the turn of ${agentId} ended`, async () =>
    (await storedResults(base, agentId)).length > before ? true : undefined,
  );
}

test('the conversation the page shows is not pushed; another one is', async () => {
  const s = await server({ config: '[push]\nallow_insecure_endpoints = true\n', delayMs: 0 });
  const service = await fakePushService();
  try {
    const { ecdh, auth } = await subscribeDevice(s.url, service);
    const { page, problems } = await openUi(await context(), `${s.url}/#seen`);
    await turn(s.url, 'seen', 'hello');
    await turn(s.url, 'other', 'hello');
    const news = decrypt(await service.next(), ecdh, auth);
    assert.equal(news.agent_id, 'other');
    assert.equal(news.kind, 'turn');
    assert.equal(service.pending(), 0, 'nothing about the conversation in view');
    assert.equal(await currentAgent(page), 'seen');
    assert.deepEqual(problems, []);
  } finally {
    service.close();
  }
});

test('a pushed permission prompt shows Allow and Deny, and Allow runs the tool', async () => {
  const s = await server({ fakeClaude: true, config: '[push]\nallow_insecure_endpoints = true\n' });
  const service = await fakePushService();
  try {
    const { ecdh, auth } = await subscribeDevice(s.url, service);

    const ctx = await context();
    await ctx.grantPermissions(['notifications'], { origin: s.url });
    const { page, problems } = await openUi(ctx, s.url);
    await controlled(page);
    const cdp = await ctx.newCDPSession(page);
    /** @type {Promise<string>} */
    const registrationId = new Promise((done) => {
      cdp.on('ServiceWorker.workerRegistrationUpdated', ({ registrations }) => {
        const ours = registrations.find((r) => r.scopeURL === `${s.url}/` && !r.isDeleted);
        if (ours) done(ours.registrationId);
      });
    });
    await cdp.send('ServiceWorker.enable');

    // Another conversation than the page's asks for a tool: the page does not show it.
    const chat = await fetch(`${s.url}/api/sessions/elsewhere/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ content: 'please run TOOL:touch_y' }),
    });
    assert.equal(chat.status, 202);
    const news = decrypt(await service.next(), ecdh, auth);
    assert.equal(news.kind, 'permission');
    assert.equal(news.agent_id, 'elsewhere');

    await cdp.send('ServiceWorker.deliverPushMessage', {
      origin: s.url,
      registrationId: await registrationId,
      data: JSON.stringify(news),
    });
    const shown = await until('the notification shows', () =>
      page.evaluate(async () => {
        const notes = await (await navigator.serviceWorker.ready).getNotifications();
        return notes.map((n) => ({ title: n.title, body: n.body, actions: n.actions.map((a) => a.title) }))[0];
      }),
    );
    assert.deepEqual(shown, {
      title: 'please run TOOL:touch_y',
      body: news.body,
      actions: ['Allow', 'Deny'],
    });

    // The user taps Allow: the worker gets the click, as the system would hand it over.
    const [worker] = ctx.serviceWorkers();
    await worker.evaluate(async () => {
      const scope = /** @type {ServiceWorkerGlobalScope} */ (/** @type {unknown} */ (self));
      const [notification] = await scope.registration.getNotifications();
      scope.dispatchEvent(new NotificationEvent('notificationclick', { notification, action: 'allow' }));
    });
    await until('the turn ended', async () => ((await storedResults(s.url, 'elsewhere')).length ? true : undefined));
    const messages = await (await fetch(`${s.url}/api/sessions/elsewhere/messages`)).json();
    const resolved = messages.messages.find((/** @type {any} */ m) => m.message_type === 'permission_resolved');
    assert.equal(resolved.outcome, 'allowed');
    assert.ok(JSON.stringify(messages).includes('ran: touch_y'), 'the tool ran');
    assert.deepEqual(problems, []);
  } finally {
    service.close();
  }
});
