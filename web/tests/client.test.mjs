// Unit tests of client.js against a scripted in-memory WebSocket: resubscribe by `seq` after a
// reconnect, de-duplication, acks and errors, heartbeats.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { AgentmuxClient, ClientError } from '../client.js';

/** A WebSocket stand-in: records what the client sends and lets the test play the server. */
class FakeSocket {
  static OPEN = 1;
  /** @type {FakeSocket[]} */
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    this.onopen = null;
    this.onmessage = null;
    this.onclose = null;
    FakeSocket.all.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {
    this.readyState = 3;
  }
  /** The server accepts the connection. */
  accept() {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }
  /** The server sends a frame. */
  push(frame) {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  /** The connection drops. */
  drop() {
    this.readyState = 3;
    this.onclose?.();
  }
}

function client(options = {}) {
  FakeSocket.all = [];
  const c = new AgentmuxClient({ url: 'ws://test/ws', WebSocket: /** @type {any} */ (FakeSocket), minBackoffMs: 1, maxBackoffMs: 2, ...options });
  c.connect();
  return c;
}

const stored = (seq, text) => ({
  message_type: 'assistant', agent_id: 'a', session_id: 's', seq, timestamp: 't',
  message: { type: 'assistant', message: { content: [{ type: 'text', text }] } },
});

/** The `count`th socket the client opened; fails after 5 s rather than waiting forever. */
const nextSocket = (count) =>
  new Promise((done, fail) => {
    const deadline = Date.now() + 5_000;
    const poll = () => {
      if (FakeSocket.all.length >= count) done(FakeSocket.all[count - 1]);
      else if (Date.now() > deadline) fail(new Error(`the client opened ${FakeSocket.all.length} socket(s), not ${count}`));
      else setTimeout(poll, 1);
    };
    poll();
  });

test('subscribes from 0, drops replayed frames, resubscribes from the last seq after a reconnect', async () => {
  const c = client();
  const states = [];
  c.onState((s) => states.push(s));
  const seen = [];
  c.open('a', (f) => seen.push(f.seq ?? f.message_type));
  const first = FakeSocket.all[0];
  first.accept();
  assert.deepEqual(first.sent, [
    { type: 'subscribe', agent_id: 'a', since_seq: 0 },
    { type: 'ping', ts: { replayed: 'a' } },
  ]);
  first.push(stored(1, 'one'));
  first.push(stored(2, 'two'));
  first.push(stored(2, 'two again'));
  first.push({ message_type: 'stream_event', agent_id: 'a', session_id: 's', timestamp: 't', message: {} });
  first.drop();
  const second = await nextSocket(2);
  second.accept();
  assert.deepEqual(second.sent, [
    { type: 'subscribe', agent_id: 'a', since_seq: 2 },
    { type: 'ping', ts: { replayed: 'a' } },
  ]);
  second.push(stored(2, 'two, replayed'));
  second.push(stored(3, 'three'));
  assert.deepEqual(seen, [1, 2, 'stream_event', 3]);
  assert.equal(c.lastSeq('a'), 3);
  assert.deepEqual(states, ['open', 'reconnecting', 'open']);
  c.close();
  assert.equal(c.state, 'closed');
});

test('chat resolves with its ack, rejects with its error, and waits for the socket', async () => {
  const c = client();
  const acked = c.chat('a', 'hi', { clientMsgId: 'm1' });
  const refused = c.chat('a', 'hi', { clientMsgId: 'm2' });
  const socket = FakeSocket.all[0];
  socket.accept();
  assert.deepEqual(socket.sent.map((f) => f.client_msg_id), ['m1', 'm2']);
  socket.push({ message_type: 'ack', agent_id: 'a', session_id: 's', timestamp: 't', client_msg_id: 'm1', seq: 1, queue_position: 0 });
  socket.push({ message_type: 'error', timestamp: 't', code: 'limit_exceeded', error: 'full', agent_id: 'a', client_msg_id: 'm2' });
  assert.equal((await acked).seq, 1);
  await assert.rejects(refused, (err) => err instanceof ClientError && err.code === 'limit_exceeded');
  const lost = c.chat('a', 'hi');
  socket.drop();
  await assert.rejects(lost, (err) => err instanceof ClientError && err.code === 'disconnected');
  c.close();
});

test('pings on schedule and reconnects when nothing answers', async () => {
  const c = client({ pingIntervalMs: 5 });
  const socket = FakeSocket.all[0];
  socket.accept();
  const second = await nextSocket(2);
  assert.ok(socket.sent.some((f) => f.type === 'ping'), 'a ping was sent');
  assert.notEqual(second, socket);
  c.close();
});

test('a url function is asked before every attempt, and its failure is retried', async () => {
  FakeSocket.all = [];
  let calls = 0;
  const c = new AgentmuxClient({
    url: async () => {
      calls += 1;
      if (calls === 1) throw new Error('no ticket yet');
      return `ws://test/ws?ticket=t${calls}`;
    },
    WebSocket: /** @type {any} */ (FakeSocket),
    minBackoffMs: 1,
    maxBackoffMs: 2,
  });
  c.connect();
  const first = await nextSocket(1);
  assert.equal(first.url, 'ws://test/ws?ticket=t2');
  first.accept();
  first.drop();
  const second = await nextSocket(2);
  assert.equal(second.url, 'ws://test/ws?ticket=t3');
  c.close();
});

test('onReplayed fires when the pong after a subscribe comes back, once per subscription', () => {
  const c = client();
  const events = [];
  c.open('a', (f) => events.push(f.seq), { onReplayed: () => events.push('replayed') });
  const socket = FakeSocket.all[0];
  socket.accept();
  socket.push(stored(1, 'one'));
  socket.push({ message_type: 'pong', timestamp: 't', ts: { replayed: 'a' } });
  socket.push({ message_type: 'pong', timestamp: 't', ts: 12 });
  socket.push(stored(2, 'two'));
  assert.deepEqual(events, [1, 'replayed', 2]);
  c.close();
});

test('a conversation that did not exist is asked for again, and before this client chats to it', async () => {
  const c = client();
  const seen = [];
  c.open('a', (f) => seen.push(f.seq ?? f.code));
  const socket = FakeSocket.all[0];
  socket.accept();
  socket.sent.length = 0;
  socket.push({ message_type: 'error', timestamp: 't', code: 'unknown_agent', error: 'no', agent_id: 'a' });
  // Another client starts it; this one chats: its history is asked for before the chat goes out.
  c.chat('a', 'me too', { clientMsgId: 'm1' }).catch(() => {});
  assert.deepEqual(socket.sent.map((f) => f.type), ['subscribe', 'ping', 'chat']);
  assert.equal(socket.sent[0].since_seq, 0);
  socket.push(stored(1, 'one'));
  socket.sent.length = 0;
  c.chat('a', 'again', { clientMsgId: 'm2' }).catch(() => {});
  assert.deepEqual(socket.sent.map((f) => f.type), ['chat'], 'a known conversation is not asked for again');

  // Without a chat, it is asked for again after a pause.
  c.open('b', () => {});
  socket.push({ message_type: 'error', timestamp: 't', code: 'unknown_agent', error: 'no', agent_id: 'b' });
  socket.sent.length = 0;
  await new Promise((done) => setTimeout(done, 1300));
  assert.deepEqual(socket.sent.filter((f) => f.type === 'subscribe'), [{ type: 'subscribe', agent_id: 'b', since_seq: 0 }]);
  assert.deepEqual(seen, ['unknown_agent', 1]);
  c.close();
});

test('open with warm asks the server to start the agent once, not again on a reconnect', async () => {
  const c = client();
  c.open('w', () => {}, { warm: true });
  const first = FakeSocket.all[0];
  first.accept();
  assert.deepEqual(first.sent[0], { type: 'subscribe', agent_id: 'w', since_seq: 0, warm: true });
  first.drop();
  const second = await nextSocket(2);
  second.accept();
  assert.deepEqual(second.sent[0], { type: 'subscribe', agent_id: 'w', since_seq: 0 });
  c.close();
});

test('watchActivity watches once, again after a reconnect, and its lines never move a conversation on', async () => {
  const c = client();
  const lines = [];
  const seen = [];
  const stop = c.watchActivity((f) => lines.push(`${f.agent_id}:${f.activity}:${f.seq}`));
  c.open('a', (f) => seen.push(f.seq));
  const first = FakeSocket.all[0];
  first.accept();
  assert.deepEqual(first.sent[0], { type: 'watch' });
  first.push(stored(1, 'one'));
  // An activity line about `a` with a later seq: not one of `a`'s frames.
  first.push({ message_type: 'activity', agent_id: 'a', session_id: 's', timestamp: 't', activity: 'turn_ended', seq: 5, is_error: false });
  first.push(stored(2, 'two'));
  assert.deepEqual(seen, [1, 2]);
  assert.deepEqual(lines, ['a:turn_ended:5']);
  first.drop();
  const second = await nextSocket(2);
  second.accept();
  assert.deepEqual(second.sent.filter((f) => f.type === 'watch'), [{ type: 'watch' }]);
  stop();
  assert.deepEqual(second.sent.at(-1), { type: 'unwatch' });
  c.close();
});
