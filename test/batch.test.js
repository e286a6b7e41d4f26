'use strict'

const t = require('tap')
const dc = require('node:diagnostics_channel')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { setTimeout: sleep } = require('node:timers/promises')
const { createBatcher, spec, Retry } = require('../lib/batch')
const { histogram } = require('../lib/metrics/registry')
const { codes } = require('../lib/core/errors')

// A real sink holds a socket that keeps the process up while it works; the
// batcher's own timer is unref'd. Fake sinks hold nothing, so this stands in.
const keepAlive = setInterval(() => {}, 60_000)
t.teardown(() => clearInterval(keepAlive))

// A sink the test drives: each send() waits until the test settles it.
function manualSink () {
  const calls = []
  const send = (items, info) => new Promise((resolve, reject) => {
    calls.push({ items, info, resolve, reject })
  })
  return { calls, send }
}

// Polls a condition; bounded, so a broken batcher fails instead of hanging.
async function until (cond, what) {
  for (let i = 0; i < 4000; i++) {
    if (cond()) return
    await sleep(1)
  }
  throw new Error(`timed out waiting for ${what}`)
}

// Attaches a handler at once, so an early rejection is never unhandled.
const caught = (p) => p.then((value) => ({ value }), (err) => err)
const tick = () => new Promise((resolve) => setImmediate(resolve))
const len = (s) => s.length
const retriable = (message) => Object.assign(new Error(message), { retriable: true })

// An injected clock: the batcher reads performance.now(); the test moves it.
// Its timers still run on the real clock, so a test that moves the clock
// wakes the batcher itself (flush() does).
function fakeClock (t) {
  const now = performance.now
  const start = now.call(performance)
  let offset = 0
  performance.now = () => start + offset
  const restore = () => { performance.now = now }
  t.teardown(restore)
  return { set: (ms) => { offset = ms }, restore }
}

// Builds a batcher that the test's teardown closes.
function make (t, options) {
  const b = createBatcher({ sizeOf: len, ...options })
  t.teardown(() => b.close({ timeoutMs: 0 }).catch(() => {}))
  return b
}

t.test('the batcher, the HTTP sink and the Kafka wrapper spell each shared option one way', async (t) => {
  const sink = require('../lib/http/sink').spec
  const kafka = require('../lib/kafka').spec
  const shared = ['lingerMs', 'maxBatchItems', 'maxBatchBytes', 'maxQueuedItems', 'maxQueuedBytes', 'overflow',
    'maxQueueWaitMs', 'maxWaitingItems', 'maxWaitingBytes', 'deliveryTimeoutMs', 'retryBackoffMs', 'maxRetryBackoffMs',
    'flushOnSignals', 'shutdownTimeoutMs']
  for (const key of shared) {
    t.ok(Object.hasOwn(spec, key), `createBatcher() takes ${key}`)
    t.ok(Object.hasOwn(sink, key), `createHttpSink() takes ${key}`)
    t.ok(Object.hasOwn(kafka, key), `wrapProducer() takes ${key}`)
  }
})

t.test('options are validated by name, defaults are documented values', async (t) => {
  const send = async () => {}
  t.equal(spec.lingerMs.default, 5)
  t.equal(spec.maxBatchItems.default, 500)
  t.equal(spec.maxBatchBytes.default, 1_000_000)
  t.equal(spec.maxQueuedItems.default, 100_000)
  t.equal(spec.maxQueuedBytes.default, 33_554_432)
  t.equal(spec.overflow.default, 'wait')
  t.equal(spec.maxQueueWaitMs.default, 60_000)
  t.equal(spec.concurrency.default, 1)
  t.equal(spec.deliveryTimeoutMs.default, 120_000)
  t.equal(spec.retryBackoffMs.default, 100)
  t.equal(spec.maxRetryBackoffMs.default, 1_000)
  t.equal(spec.flushWhenIdle.default, true)
  t.equal(spec.flushOnSignals.default, false)
  t.equal(spec.shutdownTimeoutMs.default, 10_000)

  const b = createBatcher({ send })
  t.equal(b.name, 'batch')
  t.equal(b.closed, false)
  await b.close()
  t.equal(b.closed, true)

  t.throws(() => createBatcher({ send, flushIntervalMs: 5 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /"flushIntervalMs"/ }, 'the old name of lingerMs')
  t.throws(() => createBatcher({ send, maxWaitMs: 5 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /"maxWaitMs"/ }, 'the old name of maxQueueWaitMs')
  t.throws(() => createBatcher(null), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createBatcher(), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /"send"/ })
  t.throws(() => createBatcher({ send: 'x' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /"send"/ })
  t.throws(() => createBatcher({ send, lingerMs: '5' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /"lingerMs"/ })
  t.throws(() => createBatcher({ send, lingerMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => createBatcher({ send, deliveryTimeoutMs: 2 ** 31 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE', message: /"deliveryTimeoutMs"/ })
  t.throws(() => createBatcher({ send, maxBatchItems: 0 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => createBatcher({ send, overflow: 'drop' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /"overflow"/ })
  t.throws(() => createBatcher({ send, flushWhenIdle: 1 }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createBatcher({ send, name: '' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createBatcher({ send, sizeOf: null }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createBatcher({ send, groupOf: 'topic' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createBatcher({ send, maxBatchItems: 10, maxQueuedItems: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => createBatcher({ send, maxBatchBytes: 10, maxQueuedBytes: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => createBatcher({ send, retryBackoffMs: 10, maxRetryBackoffMs: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => createBatcher({ send, concurrency: 2 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', message: /groupOf/ })
  // With groupOf, concurrency 2 is accepted, and used: two groups in flight at once.
  const sink = manualSink()
  const parallel = make(t, { send: sink.send, concurrency: 2, groupOf: (x) => x })
  const both = [parallel.push('a'), parallel.push('b')]
  await until(() => sink.calls.length === 2, 'two batches at once')
  t.equal(parallel.stats().batchesInFlight, 2)
  for (const call of sink.calls) call.resolve()
  await Promise.all(both)

  const c = make(t, { send })
  await t.rejects(c.flush({ timeoutMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  await t.rejects(c.flush({ timeout: 1 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' })
  await t.rejects(c.close('soon'), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.equal(c.closed, false, 'a close() with bad options closes nothing')
  t.ok(codes.ERR_IO_HYGIENE_ITEM_TOO_LARGE && codes.ERR_IO_HYGIENE_INVALID_RESULT)
})

t.test('bad push input rejects at the call with a coded error', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, maxBatchBytes: 8, flushWhenIdle: false, lingerMs: 60_000 })
  t.teardown(() => b.close({ timeoutMs: 0 }).catch(() => {}))
  await t.rejects(b.push({ a: 1 }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', message: /sizeOf/ })
  await t.rejects(b.push('123456789'), { code: 'ERR_IO_HYGIENE_ITEM_TOO_LARGE', name: /^RangeError/ })
  const accepted = [b.push('abc'), b.push(Buffer.from('ab')), b.push(new Uint8Array(1)), b.push(new ArrayBuffer(2))]
  t.equal(b.stats().queuedBytes, 8, 'the default sizeOf measures strings, Buffers, typed arrays, ArrayBuffers')
  const flushed = b.flush()
  await until(() => sink.calls.length === 1, 'the flush')
  sink.calls[0].resolve()
  await flushed
  t.same(await Promise.all(accepted), [undefined, undefined, undefined, undefined])

  const boom = new Error('boom')
  const c = make(t, {
    send: sink.send,
    sizeOf: (x) => x.size,
    groupOf: (x) => {
      if (x.group === 'throw') throw boom
      return x.group
    },
  })
  await t.rejects(c.push({ size: -1 }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', message: /-1/ })
  await t.rejects(c.push({ size: 1.5 }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(c.push({ size: '1' }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(c.push({ size: 1, group: 'throw' }), boom, 'what groupOf throws passes through')
  await t.rejects(c.push(null), TypeError, 'what sizeOf throws passes through')
  t.match(c.stats(), { dropped: 5, queued: 0, rejected: 0 })
})

t.test('flushes when lingerMs passes', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 10 })
  const pushed = ['a', 'b', 'c'].map((x) => b.push(x))
  await until(() => sink.calls.length === 1, 'the interval flush')
  t.same(sink.calls[0].items, ['a', 'b', 'c'], 'one batch, in push order')
  t.same(sink.calls[0].info, { group: undefined, attempt: 1 })
  sink.calls[0].resolve(['A', 'B', 'C'])
  t.same(await Promise.all(pushed), ['A', 'B', 'C'], 'each push gets its own result')
  t.match(b.stats(), { flushed: 3, flushes: 1, queued: 0, inFlight: 0 })
})

t.test('a Retry result keeps its items for another attempt alone; the rest of the batch settles at once', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 10, retryBackoffMs: 1, maxRetryBackoffMs: 1, deliveryTimeoutMs: 60_000 })
  const pushed = ['a', 'b', 'c'].map((x) => caught(b.push(x)))
  await until(() => sink.calls.length === 1, 'the first batch')
  const why = retriable('partition b refused for a while')
  const again = new Retry(why)
  sink.calls[0].resolve(['A', again, 'C'])
  t.same([await pushed[0], await pushed[2]], [{ value: 'A' }, { value: 'C' }], 'a and c resolve, b still waits')
  const later = caught(b.push('d'))
  const flushed = b.flush()
  await until(() => sink.calls.length === 2, 'the retry')
  t.same(sink.calls[1].items, ['b'], 'b goes again alone, before anything pushed after it')
  t.equal(sink.calls[1].info.attempt, 2)
  sink.calls[1].resolve(['B'])
  t.same(await pushed[1], { value: 'B' })
  await until(() => sink.calls.length === 3, 'the next batch')
  t.same(sink.calls[2].items, ['d'])
  sink.calls[2].resolve(['D'])
  await flushed
  t.same(await later, { value: 'D' })
  t.match(b.stats(), { flushed: 4, retried: 1, queued: 0, inFlight: 0 })
})

t.test('an item retried by a Retry result rejects at its deadline with the Retry\'s error as cause', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 1, retryBackoffMs: 1, maxRetryBackoffMs: 1, deliveryTimeoutMs: 200 })
  const pushed = ['a', 'b'].map((x) => caught(b.push(x)))
  const why = retriable('still refused')
  const state = { done: false }
  pushed[1].then(() => { state.done = true })
  // Every attempt answered: a, then b refused again, until b's deadline.
  for (let n = 0; !state.done;) {
    await until(() => sink.calls.length > n || state.done, 'an attempt or the deadline')
    for (; n < sink.calls.length; n++) {
      const call = sink.calls[n]
      call.resolve(call.items.map((item) => item === 'a' ? 'A' : new Retry(why)))
    }
  }
  t.same(await pushed[0], { value: 'A' })
  t.match(await pushed[1], { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: why })
})

t.test('flushes when maxBatchItems is reached, without waiting for the interval', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 60_000, maxBatchItems: 3 })
  const pushed = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((x) => b.push(x))
  await until(() => sink.calls.length === 1, 'the count flush')
  t.same(sink.calls[0].items, ['a', 'b', 'c'])
  sink.calls[0].resolve()
  await until(() => sink.calls.length === 2, 'the second count flush')
  t.same(sink.calls[1].items, ['d', 'e', 'f'], 'a full batch goes as soon as the previous one is acknowledged')
  sink.calls[1].resolve()
  await tick()
  t.equal(sink.calls.length, 2, 'a partial batch lingers')
  t.match(b.stats(), { queued: 1, queuedBytes: 1 })
  const flushed = b.flush()
  await until(() => sink.calls.length === 3, 'flush()')
  t.same(sink.calls[2].items, ['g'])
  sink.calls[2].resolve()
  await flushed
  await Promise.all(pushed)
  t.match(b.stats(), { flushed: 7, flushes: 3 })
})

t.test('flushes when maxBatchBytes is reached; a batch never exceeds it', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 60_000, maxBatchBytes: 10 })
  const pushed = ['aaaa', 'bbbb', 'ccc'].map((x) => b.push(x))
  await until(() => sink.calls.length === 1, 'the bytes flush')
  t.same(sink.calls[0].items, ['aaaa', 'bbbb'], '4 + 4 + 3 bytes would exceed 10')
  sink.calls[0].resolve()
  pushed.push(b.push('dddddd'), b.push('e'))
  await until(() => sink.calls.length === 2, 'the next bytes flush')
  t.same(sink.calls[1].items, ['ccc', 'dddddd', 'e'])
  sink.calls[1].resolve()
  await Promise.all(pushed)
})

t.test('flushWhenIdle sends at once when nothing is in flight, and batches what arrives meanwhile', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, lingerMs: 60_000 })
  const first = [b.push('a'), b.push('b')]
  await until(() => sink.calls.length === 1, 'the idle flush')
  t.same(sink.calls[0].items, ['a', 'b'], 'a synchronous burst shares one batch')
  const second = [b.push('c'), b.push('d'), b.push('e')]
  await tick()
  t.equal(sink.calls.length, 1, 'one batch in flight at a time')
  sink.calls[0].resolve()
  await until(() => sink.calls.length === 2, 'the next batch')
  t.same(sink.calls[1].items, ['c', 'd', 'e'], 'no linger: the queue goes as soon as the sink is free')
  sink.calls[1].resolve()
  await Promise.all([...first, ...second])
})

t.test('flush() waits for everything pushed before it, and only that', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 60_000, maxBatchItems: 2, maxRetryBackoffMs: 0, retryBackoffMs: 0 })
  // An empty flush settles at once (before the next turn of the loop) and sends nothing.
  let empty = false
  b.flush().then(() => { empty = true })
  await tick()
  t.equal(empty, true, 'an empty flush resolves at once')
  t.equal(sink.calls.length, 0)
  const a = b.push('a')
  const flushed = b.flush()
  let done = false
  flushed.then(() => { done = true })
  await until(() => sink.calls.length === 1, 'flush')
  const later = b.push('b')
  sink.calls[0].reject(retriable('again'))
  await until(() => sink.calls.length === 2, 'the retry')
  t.same(sink.calls[1].items, ['a'], 'the retry is the same batch')
  t.equal(done, false)
  sink.calls[1].resolve()
  await flushed
  await a
  t.equal(b.stats().queued, 1, 'what was pushed after flush() still lingers')
  const f2 = b.flush()
  await until(() => sink.calls.length === 3, 'second flush')
  sink.calls[2].resolve()
  await Promise.all([later, f2])
})

t.test('flush() counts only what was pushed before it, also within one batch', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 60_000 })
  const a = b.push('a')
  const flushed = b.flush()
  const later = b.push('b') // joins a's batch, but is not flush()'s to wait for
  await until(() => sink.calls.length === 1, 'the batch')
  t.same(sink.calls[0].items, ['a', 'b'])
  const waiting = b.flush()
  sink.calls[0].resolve(['A', 'B'])
  await Promise.all([flushed, waiting])
  t.same(await Promise.all([a, later]), ['A', 'B'])
})

t.test('flush({ timeoutMs }) rejects with ERR_IO_HYGIENE_TIMEOUT and the items carry on', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, flushWhenIdle: false, lingerMs: 60_000 })
  const pushed = b.push('a')
  await tick()
  await t.rejects(b.flush({ timeoutMs: 5 }), { code: 'ERR_IO_HYGIENE_TIMEOUT', message: /flush\(\) did not finish within 5 ms/ })
  await until(() => sink.calls.length === 1, 'the send')
  const second = b.flush()
  const third = b.flush({ timeoutMs: 60_000 })
  sink.calls[0].resolve(['ok'])
  t.equal(await pushed, 'ok')
  await Promise.all([second, third])
})

t.test('close() drains, rejects later pushes, and is idempotent', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, flushWhenIdle: false, lingerMs: 60_000 })
  const pushed = [b.push('a'), b.push('b')]
  const closing = b.close()
  t.equal(b.close({ timeoutMs: 1 }), closing, 'a second close() returns the first one')
  t.equal(b.closed, true)
  await t.rejects(b.push('c'), { code: 'ERR_IO_HYGIENE_CLOSED', message: 'batcher "batch" is closed' })
  await until(() => sink.calls.length === 1, 'the close flush')
  sink.calls[0].resolve()
  await closing
  await Promise.all(pushed)
  await b.flush()
  t.match(b.stats(), { flushed: 2, dropped: 1 })
})

t.test('close({ timeoutMs }) rejects every leftover with ERR_IO_HYGIENE_TIMEOUT, none stays pending', async (t) => {
  const sink = manualSink()
  const b = createBatcher({
    send: sink.send,
    sizeOf: len,
    groupOf: (x) => x[0],
    concurrency: 1,
    maxQueuedItems: 3,
    maxBatchItems: 3,
    retryBackoffMs: 0,
    maxRetryBackoffMs: 0,
    isRetriable: () => true,
  })
  const inFlight = caught(b.push('a1'))
  await until(() => sink.calls.length === 1, 'first send')
  const queued = [b.push('a2'), b.push('b1')].map(caught)
  const waiting = caught(b.push('c1'))
  t.match(b.stats(), { inFlight: 1, queued: 2, waiting: 1 })
  sink.calls[0].reject(new Error('broker down'))
  await until(() => sink.calls.length === 2, 'the retry')
  t.equal(b.stats().retried, 1)
  const closing = b.close({ timeoutMs: 20 })
  await t.rejects(closing, { code: 'ERR_IO_HYGIENE_TIMEOUT', message: /close\(\) did not finish within 20 ms/ })
  const err = await inFlight
  t.match(err, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.equal(err.cause.message, 'broker down', 'the cause is the last error of the group')
  t.match(await queued[0], { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.equal((await queued[1]).cause, undefined, 'a group that never failed has no cause')
  t.match(await waiting, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.match(b.stats(), { queued: 0, inFlight: 0, waiting: 0, rejected: 3, dropped: 1 })
  // The sink answers after the deadline: nothing changes, nothing throws.
  sink.calls[1].resolve()
  await tick()
  t.match(b.stats(), { flushed: 0, rejected: 3 })
})

t.test('queue full with overflow "reject" rejects at once with ERR_IO_HYGIENE_QUEUE_FULL', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, overflow: 'reject', maxQueuedItems: 2, maxBatchItems: 2, maxQueuedBytes: 5, maxBatchBytes: 5 })
  const a = b.push('a')
  const bb = b.push('b')
  await t.rejects(b.push('c'), { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /holds 2 items/ })
  await until(() => sink.calls.length === 1, 'send')
  sink.calls[0].resolve()
  await Promise.all([a, bb])
  const big = b.push('xxxx')
  await t.rejects(b.push('yy'), { code: 'ERR_IO_HYGIENE_QUEUE_FULL' }, 'bytes count too')
  await until(() => sink.calls.length === 2, 'send')
  sink.calls[1].resolve()
  await big
  t.match(b.stats(), { dropped: 2, flushed: 3 })
})

t.test('pushAll(): with overflow "reject", items that do not all fit are refused together', async (t) => {
  const sink = manualSink()
  const seen = []
  const sub = (message) => seen.push(message)
  dc.subscribe('io-hygiene:batch:reject', sub)
  t.teardown(() => dc.unsubscribe('io-hygiene:batch:reject', sub))
  const b = make(t, { send: sink.send, overflow: 'reject', maxQueuedItems: 3, maxBatchItems: 3, maxQueuedBytes: 6, maxBatchBytes: 6, lingerMs: 60_000, flushWhenIdle: false })
  const first = b.pushAll(['a', 'b'])
  t.equal(first.length, 2)
  // One slot left: neither of two goes in, by count or by bytes.
  const byCount = b.pushAll(['c', 'd']).map(caught)
  const byBytes = b.pushAll(['eee', 'f']).map(caught)
  for (const result of await Promise.all([...byCount, ...byBytes])) {
    t.match(result, { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /no room for all 2 items of one call/ })
  }
  t.match(seen, [{ items: 2, stage: 'push' }, { items: 2, stage: 'push' }])
  // One fits on its own, as push() would take it.
  const single = b.pushAll(['g'])
  const flushed = b.flush()
  await until(() => sink.calls.length === 1, 'the flush')
  t.same(sink.calls.map((c) => c.items), [['a', 'b', 'g']])
  sink.calls[0].resolve()
  await Promise.all([...first, ...single, flushed])
  t.match(b.stats(), { dropped: 4, flushed: 3 })

  // sizeOf throwing for one refuses them all, with what it threw.
  const picky = make(t, { send: async () => {}, overflow: 'reject', sizeOf: (s) => { if (s === 'bad') throw new RangeError('no'); return 1 } })
  for (const result of await Promise.all(picky.pushAll(['good', 'bad']).map(caught))) t.match(result, { name: 'RangeError', message: 'no' })
  t.match(picky.stats(), { dropped: 2, queued: 0 })
  // Closed: each is refused as push() refuses it.
  await b.close()
  for (const result of await Promise.all(b.pushAll(['h', 'i']).map(caught))) t.match(result, { code: 'ERR_IO_HYGIENE_CLOSED' })
})

t.test('pushAll() with overflow "wait": all are admitted together once all fit, or expire together', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, maxQueuedItems: 3, maxBatchItems: 3, maxQueueWaitMs: 60_000 })
  const a = b.push('a')
  const b1 = b.push('b')
  await until(() => sink.calls.length === 1, 'the first batch')
  t.same(sink.calls[0].items, ['a', 'b'])
  // One slot free: the call of two waits whole, and a push after it waits
  // behind it rather than take the slot.
  const unit = b.pushAll(['c', 'd'])
  const after = b.push('e')
  t.match(b.stats(), { waiting: 3, queued: 0 })
  sink.calls[0].resolve()
  await Promise.all([a, b1])
  await until(() => sink.calls.length === 2, 'the unit, once two slots were free')
  t.same(sink.calls[1].items, ['c', 'd', 'e'], 'c and d went together, e after them')
  sink.calls[1].resolve()
  await Promise.all([...unit, after])

  // Never room for all: they wait out maxQueueWaitMs and are refused together,
  // none of them sent.
  const short = make(t, { send: sink.send, maxQueuedItems: 2, maxBatchItems: 2, maxQueueWaitMs: 20 })
  const held = short.push('x')
  await until(() => sink.calls.length === 3, 'x in flight')
  const refused = await Promise.all(short.pushAll(['y', 'z']).map(caught))
  for (const result of refused) t.match(result, { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /maxQueueWaitMs/ })
  sink.calls[2].resolve()
  await held
  t.equal(sink.calls.length, 3, 'neither y nor z was sent')
  t.match(short.stats(), { dropped: 2, flushed: 1 })
})

t.test('pushAll() with a call larger than the whole queue streams it through, in order', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, maxQueuedItems: 1, maxBatchItems: 1 })
  const pushes = b.pushAll(['a', 'b'])
  await until(() => sink.calls.length === 1, 'the first')
  sink.calls[0].resolve()
  await until(() => sink.calls.length === 2, 'the second, once there was room')
  sink.calls[1].resolve()
  await Promise.all(pushes)
  t.same(sink.calls.map((c) => c.items), [['a'], ['b']])
})

t.test('queue full with overflow "wait" waits for room in call order, within maxQueueWaitMs', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, maxQueuedItems: 2, maxBatchItems: 2, maxQueuedBytes: 6, maxBatchBytes: 6 })
  const order = []
  const track = (p) => p.then((v) => order.push(v))
  const first = [track(b.push('a')), track(b.push('b'))]
  await until(() => sink.calls.length === 1, 'send')
  const waited = [track(b.push('cccc')), track(b.push('d'))]
  t.match(b.stats(), { waiting: 2, queued: 0, inFlight: 2 })
  sink.calls[0].resolve(['a', 'b'])
  await until(() => sink.calls.length === 2, 'the waiting pushes')
  t.same(sink.calls[1].items, ['cccc', 'd'], 'admitted in call order')
  const blocked = track(b.push('eeeee'))
  const small = track(b.push('ff'))
  await tick()
  t.equal(b.stats().waiting, 2, 'a small push that would fit does not overtake a waiting one')
  sink.calls[1].resolve(['cccc', 'd'])
  await until(() => sink.calls.length === 3, 'bytes room')
  t.same(sink.calls[2].items, ['eeeee'], 'room in bytes admits the head only')
  sink.calls[2].resolve(['eeeee'])
  await until(() => sink.calls.length === 4, 'the last one')
  sink.calls[3].resolve(['ff'])
  await Promise.all([...first, ...waited, blocked, small])
  t.same(order, ['a', 'b', 'cccc', 'd', 'eeeee', 'ff'])

  const c = make(t, { send: sink.send, maxQueuedItems: 1, maxBatchItems: 1, maxQueueWaitMs: 10 })
  const held = c.push('x')
  const rejected = caught(c.push('y'))
  const behind = caught(c.push('z'))
  t.match(await rejected, { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /maxQueueWaitMs \(10 ms\)/ })
  t.match(await behind, { code: 'ERR_IO_HYGIENE_QUEUE_FULL' })
  t.match(c.stats(), { dropped: 2, waiting: 0 })
  await until(() => sink.calls.length === 5, 'send')
  sink.calls[4].resolve()
  await held
})

t.test('the next batch goes to the sink before the finished batch\'s callers are settled', async (t) => {
  const sink = manualSink()
  const settled = []
  const settledAtSend = []
  const send = (items, info) => {
    settledAtSend.push(settled.length)
    return sink.send(items, info)
  }
  const b = make(t, { send, maxBatchItems: 2 })
  const pushes = ['a', 'b', 'c', 'd'].map((item) => b.push(item).then(() => { settled.push(item) }))
  await until(() => sink.calls.length === 1, 'the first batch')
  t.same(sink.calls[0].items, ['a', 'b'])
  sink.calls[0].resolve()
  await until(() => sink.calls.length === 2, 'the second batch')
  // The second request went out before the first batch's callers were
  // settled, so their continuations run while it is at the server.
  t.same(sink.calls[1].items, ['c', 'd'])
  t.same(settledAtSend, [0, 0], 'nobody was settled when the second batch was sent')
  await Promise.all(pushes.slice(0, 2))
  t.same(settled, ['a', 'b'])
  sink.calls[1].resolve()
  await Promise.all(pushes)
  t.same(settled, ['a', 'b', 'c', 'd'])
  t.equal(b.stats().flushed, 4)
})

t.test('retriable failures are retried with backoff, in order, before anything pushed later', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, retryBackoffMs: 1, maxRetryBackoffMs: 4 })
  const first = [b.push('a'), b.push('b')]
  await until(() => sink.calls.length === 1, 'send')
  const later = [b.push('c'), b.push('d')]
  for (let i = 0; i < 4; i++) {
    await until(() => sink.calls.length === i + 1, `attempt ${i + 1}`)
    t.same(sink.calls[i].items, ['a', 'b'], `attempt ${i + 1} resends the failed batch`)
    t.equal(sink.calls[i].info.attempt, i + 1)
    sink.calls[i].reject(retriable(`failure ${i}`))
  }
  await until(() => sink.calls.length === 5, 'attempt 5')
  t.same(sink.calls[4].items, ['a', 'b'])
  sink.calls[4].resolve([1, 2])
  t.same(await Promise.all(first), [1, 2])
  await until(() => sink.calls.length === 6, 'the later batch')
  t.same(sink.calls[5].items, ['c', 'd'], 'what came after goes after')
  t.equal(sink.calls[5].info.attempt, 1)
  sink.calls[5].resolve([3, 4])
  t.same(await Promise.all(later), [3, 4])
  t.match(b.stats(), { retried: 4, flushes: 6, flushErrors: 4, flushed: 4, rejected: 0 })
})

t.test('past deliveryTimeoutMs each caller is rejected with ERR_IO_HYGIENE_DELIVERY_TIMEOUT, cause = last error', async (t) => {
  let attempts = 0
  const send = async () => {
    attempts++
    throw retriable(`down ${attempts}`)
  }
  const b = make(t, { send, deliveryTimeoutMs: 30, retryBackoffMs: 1, maxRetryBackoffMs: 2, maxBatchItems: 1 })
  const pushed = [b.push('a'), b.push('b')]
  const errors = await Promise.all(pushed.map((p) => p.catch((e) => e)))
  for (const err of errors) {
    t.match(err, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', message: /30 ms/ })
    t.match(err.cause, { retriable: true, message: /^down / }, 'the last error of the group')
  }
  t.ok(attempts > 1, 'it retried first')
  t.match(b.stats(), { rejected: 2, flushed: 0, queued: 0, inFlight: 0 })
})

t.test('an item past its deadline while waiting for a retry is rejected at the deadline', async (t) => {
  const sink = manualSink()
  // The deadline is far enough for the sink to fail first: the cause is its error.
  const b = make(t, { send: sink.send, deliveryTimeoutMs: 300, retryBackoffMs: 60_000, maxRetryBackoffMs: 60_000 })
  const p = caught(b.push('a'))
  await until(() => sink.calls.length === 1, 'send')
  sink.calls[0].reject(retriable('leader not available'))
  const err = await p
  t.match(err, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: { message: 'leader not available' } })
  t.equal(sink.calls.length, 1, 'no retry after the deadline')
})

t.test('an item in flight at its deadline is rejected then; the group waits for the sink before the next batch', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, deliveryTimeoutMs: 20 })
  const p = caught(b.push('a'))
  await until(() => sink.calls.length === 1, 'send')
  const err = await p
  t.match(err, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  t.equal(err.cause, undefined, 'no error yet: the sink never answered')
  const next = b.push('b')
  await tick()
  t.equal(sink.calls.length, 1, 'one request at a time per group, even after a deadline')
  sink.calls[0].reject(new Error('late failure'))
  await until(() => sink.calls.length === 2, 'the next batch')
  sink.calls[1].resolve(['b'])
  t.equal(await next, 'b')
  t.match(b.stats(), { flushed: 1, rejected: 1 })

  // Half a batch past its deadline: the rest is still answered. The clock
  // is the test's, so the retry never races the young item's deadline.
  const clock = fakeClock(t)
  const c = make(t, { send: sink.send, deliveryTimeoutMs: 200, flushWhenIdle: false, lingerMs: 60_000, retryBackoffMs: 0, maxRetryBackoffMs: 0 })
  const old = caught(c.push('old'))
  // The batcher reads the clock once per synchronous run of pushes.
  await tick()
  clock.set(120)
  const young = c.push('young')
  const flushed = c.flush()
  await until(() => sink.calls.length === 3, 'send')
  t.same(sink.calls[2].items, ['old', 'young'])
  clock.set(210)
  c.flush().catch(() => {}) // wakes the batcher: old is past its deadline, young is not
  t.match(await old, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  sink.calls[2].reject(retriable('then a failure'))
  await until(() => sink.calls.length === 4, 'the retry')
  t.same(sink.calls[3].items, ['young'], 'the retry resends only what is still alive')
  sink.calls[3].resolve(['y'])
  t.equal(await young, 'y')
  await flushed
  clock.restore()
})

t.test('deliveryTimeoutMs counts from the push() call, time spent waiting for room included', async (t) => {
  const sink = manualSink()
  // maxQueueWaitMs is a minute: only a deadline counted from the call ends the
  // wait of y (and of the pushAll() call behind it) well before that.
  const b = make(t, { send: sink.send, maxQueuedItems: 1, maxBatchItems: 1, maxQueueWaitMs: 60_000, deliveryTimeoutMs: 50 })
  const x = caught(b.push('x'))
  await until(() => sink.calls.length === 1, 'x in flight')
  const y = caught(b.push('y'))
  const unit = b.pushAll(['z1', 'z2']).map(caught)
  t.match(b.stats(), { waiting: 3 })
  const waited = await y
  t.match(waited, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', message: /50 ms/ })
  t.equal(waited.cause, undefined, 'it never reached the sink')
  for (const err of await Promise.all(unit)) t.match(err, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  t.match(await x, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' }, 'x, in flight, at its own deadline')
  const stats = b.stats()
  t.equal(stats.waiting + stats.queued + stats.inFlight, 0)
  t.equal(stats.dropped + stats.rejected, 4)
  sink.calls[0].resolve()
  await tick()
  t.equal(sink.calls.length, 1, 'none of the expired items was sent')
})

t.test('an item admitted after waiting for room keeps the deadline of its call (an injected clock)', async (t) => {
  const clock = fakeClock(t)
  const sink = manualSink()
  const b = make(t, { send: sink.send, maxQueuedItems: 1, maxBatchItems: 1, deliveryTimeoutMs: 50 })
  const x = b.push('x')
  await until(() => sink.calls.length === 1, 'x in flight')
  const y = caught(b.push('y'))
  // y waited 40 ms for room, then is sent; 20 ms later its call is 60 ms old.
  clock.set(40)
  sink.calls[0].resolve()
  await x
  await until(() => sink.calls.length === 2, 'y in flight')
  clock.set(60)
  let settled = null
  y.then((value) => { settled = value })
  b.flush().catch(() => {})
  await until(() => settled !== null, 'y rejected')
  t.match(settled, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' }, 'past 50 ms from its call, though 20 ms from its admission')
  clock.restore()
  sink.calls[1].resolve()
})

t.test('a flush() that finds queued items past their deadline rejects them, sends nothing', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, deliveryTimeoutMs: 5, flushWhenIdle: false, lingerMs: 60_000 })
  const clock = fakeClock(t)
  const p = caught(b.push('a'))
  await tick()
  // The clock passes the deadline before the timer runs: flush() comes first.
  clock.set(20)
  await b.flush()
  t.match(await p, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  t.equal(sink.calls.length, 0)
  t.match(b.stats(), { queued: 0, rejected: 1 })
})

t.test('a batch acknowledged after part of it expired in flight: the rest resolve, flush() counts each once', async (t) => {
  const clock = fakeClock(t)
  const sink = manualSink()
  const b = make(t, { send: sink.send, deliveryTimeoutMs: 200, flushWhenIdle: false, lingerMs: 60_000 })
  const old = caught(b.push('old'))
  await tick()
  clock.set(120)
  const young = b.push('young')
  let flushed = false
  b.flush().then(() => { flushed = true })
  await until(() => sink.calls.length === 1, 'send')
  clock.set(210)
  const late = b.flush()
  t.match(await old, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  t.equal(flushed, false, 'young is still in flight')
  sink.calls[0].resolve(['o', 'y'])
  t.equal(await young, 'y')
  await late
  await until(() => flushed, 'the first flush()')
  t.match(b.stats(), { flushed: 1, rejected: 1, inFlight: 0, queued: 0 })
  clock.restore()
})

t.test('queued items behind a failing batch expire too, carrying its error', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, deliveryTimeoutMs: 300, retryBackoffMs: 60_000, maxRetryBackoffMs: 60_000 })
  const head = caught(b.push('a'))
  await until(() => sink.calls.length === 1, 'send')
  const behind = caught(b.push('b'))
  sink.calls[0].reject(retriable('broker down'))
  t.match(await head, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  const err = await behind
  t.match(err, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: { message: 'broker down' } })

  // A group that only waits for a concurrency slot expires without a cause.
  const s2 = manualSink()
  const c = make(t, { send: s2.send, deliveryTimeoutMs: 30, groupOf: (x) => x[0] })
  const a = caught(c.push('a1'))
  await until(() => s2.calls.length === 1, 'send')
  const starved = caught(c.push('b1'))
  t.match(await starved, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: undefined })
  t.match(await a, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  s2.calls[0].resolve()
})

t.test('a non-retriable error rejects every caller at once with that very error', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send })
  const pushed = [b.push('a'), b.push('b')].map(caught)
  await until(() => sink.calls.length === 1, 'send')
  const fatal = Object.assign(new Error('MESSAGE_TOO_LARGE'), { retriable: false, type: 'MESSAGE_TOO_LARGE' })
  sink.calls[0].reject(fatal)
  for (const err of await Promise.all(pushed)) t.equal(err, fatal, 'passed through unchanged')
  t.match(b.stats(), { rejected: 2, retried: 0 })

  const boom = new Error('isRetriable bug')
  const c = make(t, {
    send: sink.send,
    isRetriable: () => { throw boom },
  })
  const p = c.push('x')
  await until(() => sink.calls.length === 2, 'send')
  const cause = retriable('would be retriable')
  sink.calls[1].reject(cause)
  t.equal(await p.catch((e) => e), cause, 'an isRetriable that throws means "do not retry"')

  const d = make(t, { send: () => { throw fatal } })
  t.equal(await d.push('x').catch((e) => e), fatal, 'a sink that throws synchronously fails its batch')
})

t.test('a sink result of the wrong shape rejects with ERR_IO_HYGIENE_INVALID_RESULT', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, maxBatchItems: 2 })
  const pushed = [b.push('a'), b.push('b')].map(caught)
  await until(() => sink.calls.length === 1, 'send')
  sink.calls[0].resolve(['only one'])
  for (const err of await Promise.all(pushed)) t.match(err, { code: 'ERR_IO_HYGIENE_INVALID_RESULT', message: /an array of 1/ })
  const q = b.push('c')
  await until(() => sink.calls.length === 2, 'send')
  sink.calls[1].resolve('ok')
  await t.rejects(q, { code: 'ERR_IO_HYGIENE_INVALID_RESULT', message: /got string/ })
})

t.test('with groupOf, groups flush in parallel up to concurrency, each in its own order', async (t) => {
  const sink = manualSink()
  const b = make(t, { send: sink.send, groupOf: (x) => x[0], concurrency: 2, maxBatchItems: 2, retryBackoffMs: 0, maxRetryBackoffMs: 0 })
  const pushed = ['a1', 'b1', 'c1', 'a2', 'a3', 'b2'].map((x) => b.push(x))
  await until(() => sink.calls.length === 2, 'two batches')
  await tick()
  t.equal(sink.calls.length, 2, 'never more than concurrency in flight')
  t.same(sink.calls.map((c) => c.items), [['a1', 'a2'], ['b1', 'b2']], 'one group per batch')
  t.same(sink.calls.map((c) => c.info.group), ['a', 'b'])
  t.equal(b.stats().batchesInFlight, 2)
  sink.calls[0].reject(retriable('a failed'))
  await until(() => sink.calls.length === 3, 'a free slot')
  t.same(sink.calls[2].items, ['c1'], 'round robin: the group that waited longest takes the free slot')
  sink.calls[1].resolve()
  await until(() => sink.calls.length === 4, 'the retry')
  t.same(sink.calls[3].items, ['a1', 'a2'], 'the retry resends the same batch')
  t.equal(sink.calls[3].info.attempt, 2)
  sink.calls[2].resolve()
  await tick()
  t.equal(sink.calls.length, 4, 'a3 waits while a1, a2 are retried')
  sink.calls[3].resolve()
  await until(() => sink.calls.length === 5, 'a3')
  t.same(sink.calls[4].items, ['a3'], 'a3 only after a1, a2 were acknowledged')
  sink.calls[4].resolve()
  await Promise.all(pushed)
  t.match(b.stats(), { flushed: 6, retried: 1 })
})

// Counts the steps of every Map iteration while `fn` runs. The batcher keeps
// its groups in a Map; a pump that walked them all would show here as
// groups x sends steps. Patching the builtin for the test's duration is the
// point (it counts without touching the batcher), so the lint rule is off here.
/* eslint-disable no-extend-native */
async function mapSteps (t, fn) {
  const values = Map.prototype.values
  let steps = 0
  Map.prototype.values = function () {
    const it = values.call(this)
    return { next: () => { steps++; return it.next() }, [Symbol.iterator] () { return this } }
  }
  t.teardown(() => { Map.prototype.values = values })
  try {
    await fn()
  } finally {
    Map.prototype.values = values
  }
  return steps
}
/* eslint-enable no-extend-native */

t.test('many groups: a send, a settle and a timer tick look at what is due, not at every group', async (t) => {
  const groups = 3000
  const sends = []
  const b = make(t, {
    send: (items, { group, attempt }) => {
      sends.push(group)
      // Every 7th group fails once: its retry comes due before the others'
      // deadlines, so it moves up the wake-up order.
      if (group % 7 === 0 && attempt === 1) return Promise.reject(retriable('once'))
      return new Promise((resolve) => setImmediate(resolve, items))
    },
    sizeOf: () => 1,
    groupOf: (x) => x.group,
    flushWhenIdle: false,
    lingerMs: 1,
    retryBackoffMs: 1,
    maxRetryBackoffMs: 1,
  })
  let results
  const steps = await mapSteps(t, async () => {
    // Two items per group, pushed group by group; each group lingers, then
    // flushes on its own timer tick, one batch at a time (concurrency 1).
    const pushed = []
    for (let g = 0; g < groups; g++) pushed.push(b.push({ group: g, n: 0 }), b.push({ group: g, n: 1 }))
    results = await Promise.all(pushed)
  })
  t.equal(sends.length, groups + Math.ceil(groups / 7), 'one batch per group, and one retry of every 7th')
  t.same(sends.slice(0, 5), [0, 1, 2, 3, 4], 'groups take turns in the order they became due')
  t.ok(results.every((r, i) => r.group === i >> 1 && r.n === (i & 1)), 'every push gets its own item back, in order')
  t.ok(steps < 10 * groups, `${steps} steps over the groups for ${groups} groups (a walk per send would be ~${groups * groups})`)
  t.match(b.stats(), { flushed: 2 * groups, retried: Math.ceil(groups / 7), queued: 0, inFlight: 0 })
})

t.test('a long queue is taken off in batches, in order, without loss', async (t) => {
  const seen = []
  const b = make(t, {
    send: async (items) => {
      seen.push(...items)
      return items
    },
    sizeOf: () => 1,
    maxBatchItems: 500,
    flushWhenIdle: false,
    lingerMs: 60_000,
    name: 'long-queue',
  })
  const flushed = histogram('batch.flush', { batcher: 'long-queue', outcome: 'ok' })
  const before = flushed.count
  const pushed = []
  for (let i = 0; i < 3000; i++) pushed.push(b.push(i))
  await b.flush()
  const results = await Promise.all(pushed)
  t.equal(seen.length, 3000)
  t.ok(seen.every((v, i) => v === i) && results.every((v, i) => v === i), 'every item once, in push order')
  const stats = b.stats()
  t.equal(stats.flushes, 6)
  t.equal(flushed.count - before, 6, 'one batch.flush sample per flush')
})

t.test('diagnostics channels report flushes and rejections', async (t) => {
  const flushes = []
  const rejects = []
  const onFlush = (m) => flushes.push(m)
  const onReject = (m) => rejects.push(m)
  dc.subscribe('io-hygiene:batch:flush', onFlush)
  dc.subscribe('io-hygiene:batch:reject', onReject)
  t.teardown(() => {
    dc.unsubscribe('io-hygiene:batch:flush', onFlush)
    dc.unsubscribe('io-hygiene:batch:reject', onReject)
  })
  const fatal = new Error('fatal')
  let fail = false
  const b = make(t, {
    name: 'kafka',
    send: async (items) => {
      if (fail) throw fatal
      return items
    },
  })
  await b.push('ab')
  fail = true
  await t.rejects(b.push('c'), fatal)
  await t.rejects(b.push({}), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  t.match(flushes, [
    { name: 'kafka', items: 1, bytes: 2, attempt: 1, error: null },
    { name: 'kafka', items: 1, bytes: 1, attempt: 1, error: fatal },
  ])
  t.ok(flushes.every((m) => typeof m.durationMs === 'number'))
  t.match(rejects, [
    { name: 'kafka', items: 1, error: fatal, stage: 'send' },
    { name: 'kafka', items: 1, error: { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, stage: 'push' },
  ])
})

t.test('flushOnSignals shares one listener set and removes it with the last batcher', async (t) => {
  const before = ['SIGTERM', 'SIGINT', 'beforeExit'].map((e) => process.listenerCount(e))
  const send = async () => {}
  const batchers = []
  for (let i = 0; i < 20; i++) batchers.push(createBatcher({ send, flushOnSignals: true }))
  const plain = createBatcher({ send })
  t.same(['SIGTERM', 'SIGINT', 'beforeExit'].map((e) => process.listenerCount(e)), before.map((n) => n + 1))
  await plain.close()
  for (const b of batchers.slice(1)) await b.close()
  t.same(['SIGTERM', 'SIGINT', 'beforeExit'].map((e) => process.listenerCount(e)), before.map((n) => n + 1))
  await batchers[0].close()
  t.same(['SIGTERM', 'SIGINT', 'beforeExit'].map((e) => process.listenerCount(e)), before)
})

// The process-wide behaviour runs in a child: exit code, signal and output.
function runFixture (t, mode, { signals = [], bare = false } = {}) {
  return new Promise((resolve, reject) => {
    const args = [path.join(__dirname, 'fixtures', 'batch-shutdown.js'), mode]
    const stdio = ['ignore', 'pipe', 'inherit']
    // tap re-adds its hooks (NODE_OPTIONS) to every spawn; a shell drops them.
    const child = bare
      ? spawn('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, ...args], { stdio })
      : spawn(process.execPath, args, { stdio })
    t.teardown(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    })
    let out = ''
    let sent = 0
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk) => {
      out += chunk
      // Each "ready" line asks for the next signal.
      while (sent < signals.length && out.split('ready\n').length - 1 > sent) child.kill(signals[sent++])
    })
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, lines: out.trim().split('\n') }))
  })
}

t.test('SIGTERM flushes every batcher, then the signal does what it would have done', async (t) => {
  const r = await runFixture(t, 'signal', { signals: ['SIGTERM'] })
  t.equal(r.signal, 'SIGTERM', 're-raised: the process dies of the signal')
  t.same(r.lines, ['ready', 'sent a,b', 'sent c', 'acked a', 'acked b', 'acked c'])
  // The same without tap's hooks, which load signal-exit into every child.
  const bare = await runFixture(t, 'signal', { signals: ['SIGTERM'], bare: true })
  t.equal(bare.signal, 'SIGTERM')
  t.same(bare.lines, r.lines)
})

t.test('with a listener of its own, the application decides; we only flush', async (t) => {
  const r = await runFixture(t, 'own-listener', { signals: ['SIGINT'] })
  t.equal(r.code, 0)
  t.equal(r.signal, null)
  t.same(r.lines, ['ready', 'app got SIGINT', 'sent a', 'acked a'])
})

t.test('signal-exit listeners, which only re-raise when alone, do not stop the re-raise', async (t) => {
  const r = await runFixture(t, 'signal-exit-v3', { signals: ['SIGTERM'] })
  t.equal(r.signal, 'SIGTERM')
  t.same(r.lines, ['ready', 'sent a', 'acked a'])
})

t.test('a second signal while draining exits at once', async (t) => {
  const r = await runFixture(t, 'hang', { signals: ['SIGINT', 'SIGINT'] })
  t.equal(r.signal, 'SIGINT')
  t.same(r.lines, ['ready', 'sent a', 'ready'])
})

t.test('shutdownTimeoutMs bounds the drain; leftovers are rejected, not lost', async (t) => {
  const r = await runFixture(t, 'shutdown-timeout', { signals: ['SIGTERM'] })
  t.equal(r.signal, 'SIGTERM')
  t.same(r.lines, ['ready', 'sent a', 'rejected a ERR_IO_HYGIENE_TIMEOUT'])
})

t.test('beforeExit sends what lingers behind the unref\'d timer', async (t) => {
  const r = await runFixture(t, 'before-exit')
  t.equal(r.code, 0)
  t.same(r.lines, ['sent a,b', 'acked a', 'acked b', 'exit'])
  const control = await runFixture(t, 'before-exit-off')
  t.same(control.lines, ['exit'], 'without flushOnSignals the lingering items are never sent')
})

t.test('a push whose first send fails keeps the process up through the retry backoff', async (t) => {
  const r = await runFixture(t, 'retry-then-end')
  t.equal(r.code, 0)
  t.same(r.lines, ['sent a', 'sent a', 'acked a', 'exit inFlight 0'])
})

t.test('a send that never answers holds the process until the delivery deadline rejects the push', async (t) => {
  const r = await runFixture(t, 'unanswered')
  t.equal(r.code, 0)
  t.same(r.lines, ['sent a', 'rejected a ERR_IO_HYGIENE_DELIVERY_TIMEOUT', 'exit'])
})

t.test('overflow "wait" bounds the pushes waiting for room, in items and in bytes', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, maxBatchItems: 1, maxQueuedItems: 2, maxWaitingItems: 3, maxWaitingBytes: 7 })
  t.teardown(() => b.close({ timeoutMs: 1 }).catch(() => {}))
  const held = ['a1', 'b1'].map((item) => caught(b.push(item)))
  const waiting = ['c1', 'd1', 'e1'].map((item) => caught(b.push(item)))
  const refused = await caught(b.push('f1'))
  t.match(refused, { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /maxWaitingItems 3/ }, 'refused at once, past the item bound')
  t.match(b.stats(), { waiting: 3, dropped: 1 })
  await until(() => sink.calls.length === 1, 'the first send')
  sink.calls[0].resolve()
  await until(() => b.stats().waiting === 2, 'a waiting push admitted')
  // 2 + 2 bytes wait; 4 more would pass maxWaitingBytes 7.
  t.match(await caught(b.push('g123')), { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /maxWaitingBytes 7/ })
  t.match(await caught(b.pushAll(['h', 'i'])[0]), { code: 'ERR_IO_HYGIENE_QUEUE_FULL' }, 'a call stands or falls whole')
  const fits = caught(b.push('j'))
  t.equal(b.stats().waiting, 3)
  for (let i = 1; i < 6; i++) {
    await until(() => sink.calls.length > i, `send ${i + 1}`)
    sink.calls[i].resolve()
  }
  t.same(await Promise.all([...held, ...waiting, fits]), [{}, {}, {}, {}, {}, {}].map(() => ({ value: undefined })))
})

t.test('with the default bounds a sink that never answers holds the queue plus the waiting bound, no more', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, maxBatchItems: 100, maxQueuedItems: 100 })
  t.teardown(() => b.close({ timeoutMs: 1 }).catch(() => {}))
  let refused = 0
  for (let i = 0; i < 10_300; i++) b.push('x').catch((err) => { if (err.code === 'ERR_IO_HYGIENE_QUEUE_FULL') refused++ })
  await tick()
  t.equal(b.stats().waiting, spec.maxWaitingItems.default)
  t.equal(refused, 10_300 - 100 - spec.maxWaitingItems.default)
})
