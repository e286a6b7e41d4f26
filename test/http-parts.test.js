'use strict'

// The pieces of lib/http that need no server.
const t = require('tap')
const { Readable } = require('node:stream')
const { isReplayable, isIterable, readBody, headerValue, headerList } = require('../lib/http/replayable-body')
const { RetryBudget } = require('../lib/http/retry-budget')
const { OriginSockets, MIN_LEARNED_MS, RETIRE_FRACTION } = require('../lib/http/origin-sockets')

t.test('headerValue reads every header form undici accepts', async (t) => {
  t.equal(headerValue(null, 'idempotency-key'), undefined)
  t.equal(headerValue({ 'Idempotency-Key': 'a' }, 'idempotency-key'), 'a')
  t.equal(headerValue({ other: 'x' }, 'idempotency-key'), undefined)
  t.equal(headerValue(['Content-Length', '12', 'Idempotency-Key', Buffer.from('b')], 'idempotency-key'), 'b')
  t.equal(headerValue(['content-type', 'text/plain'], 'idempotency-key'), undefined)
  t.equal(headerValue([['Idempotency-Key', 'c']], 'idempotency-key'), 'c')
  t.equal(headerValue([['x', 'y']], 'idempotency-key'), undefined)
  t.equal(headerValue(headerList(new Map([['Idempotency-Key', 'd']])), 'idempotency-key'), 'd')
})

t.test('headerList reads a one-shot iterable once, and leaves other forms alone', async (t) => {
  const plain = { a: '1' }
  t.equal(headerList(plain), plain)
  const flat = ['a', '1']
  t.equal(headerList(flat), flat)
  t.equal(headerList(undefined), undefined)
  function * pairs () { yield ['a', '1'] }
  t.same(headerList(pairs()), [['a', '1']])
  t.same(headerList(new Headers({ a: '1' })), [['a', '1']])
})

t.test('bodies that can be sent again as they are, and iterables that must be read first', async (t) => {
  for (const body of [null, undefined, 'text', Buffer.from('x'), new Uint8Array(2), new ArrayBuffer(2), new Blob(['x'])]) {
    t.ok(isReplayable(body), `${Object.prototype.toString.call(body)} is replayable`)
  }
  t.notOk(isReplayable(Readable.from(['x'])))
  t.ok(isIterable(Readable.from(['x'])))
  t.notOk(isIterable('text'))
  t.same(await readBody(Readable.from(['ab', Buffer.from('cd')])), Buffer.from('abcd'))
})

t.test('the retry budget allows percent of recent requests plus its reserve, over 10 s', async (t) => {
  const budget = new RetryBudget(10, 0)
  let now = 1_000_000
  for (let i = 0; i < 9; i++) budget.request(now)
  t.notOk(budget.tryRetry(now), '9 requests: no retry at 10 %')
  budget.request(now)
  t.ok(budget.tryRetry(now), '10 requests: one')
  t.notOk(budget.tryRetry(now), 'and only one')
  now += 10_000
  for (let i = 0; i < 10; i++) budget.request(now)
  t.ok(budget.tryRetry(now), 'the old window is forgotten')
  const reserve = new RetryBudget(0, 1)
  t.ok(reserve.tryRetry(now), 'a reserve of 1 a second allows 10 retries per 10 s without requests')
  for (let i = 0; i < 9; i++) reserve.tryRetry(now)
  t.notOk(reserve.tryRetry(now))
})

t.test('an origin learns the shortest idle close it sees, never one too short to be a timer', async (t) => {
  const stats = { idleClosesLearned: 0, socketsRetired: 0 }
  const origin = new OriginSockets('http://a.test', stats, true)
  origin.learn(MIN_LEARNED_MS - 1)
  t.equal(origin.learnedIdleMs, null, 'a close right after a response is no idle timer')
  origin.learn(5000)
  t.equal(origin.learnedIdleMs, 5000)
  t.equal(origin.retireAfterMs, 5000 * RETIRE_FRACTION)
  origin.learn(6000)
  t.equal(origin.learnedIdleMs, 5000, 'a longer one says nothing new')
  origin.learn(1000)
  t.equal(origin.learnedIdleMs, 1000, 'a shorter one wins')
  t.equal(stats.idleClosesLearned, 2)
  const off = new OriginSockets('http://b.test', stats, false)
  off.learn(1000)
  t.equal(off.learnedIdleMs, null, 'learnIdleClose: false')
})
