'use strict'

// What the batcher offers the sinks built on it in lib/ (not its public
// surface): a push()'s promise settled by the sink's own fate hooks, records
// that are the sink's own items, and sendNow().
const t = require('tap')
const { createBatcher, Retry, Pending } = require('../lib/batch')

const keepAlive = setInterval(() => {}, 60_000)
t.teardown(() => clearInterval(keepAlive))

const caught = (p) => p.then((value) => ({ value }), (err) => err)
const len = (s) => s.length

// A sink the test drives: each send() waits until the test settles it.
function manualSink () {
  const calls = []
  let wake = null
  const send = (items) => new Promise((resolve, reject) => {
    calls.push({ items, resolve, reject })
    wake?.()
  })
  const next = () => calls.length > 0 ? Promise.resolve() : new Promise((resolve) => { wake = resolve })
  return { calls, send, next }
}

const fate = {
  resolved: (item, result) => {
    if (result instanceof Error) throw result
    return `${item}:${result}`
  },
  rejected: (item, error) => {
    if (item === 'keep') return 'kept'
    throw Object.assign(new Error(`${item}: ${error.message}`), { cause: error })
  },
}

t.test('fate hooks settle each push() with what they return or throw', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, lingerMs: 0 }, fate)
  const ok = caught(b.push('a'))
  const bad = caught(b.push('b'))
  await sink.next()
  sink.calls[0].resolve(['one', new Error('refused')])
  t.same(await ok, { value: 'a:one' })
  const err = await bad
  t.equal(err.message, 'refused')
  t.equal(b.stats().flushed, 2, 'the batcher counts what the sink answered')
  await b.close()
})

t.test('a rejection goes through the hook: the sink failing, a full queue, a closed batcher', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, lingerMs: 0, maxQueuedItems: 2, overflow: 'reject', maxBatchItems: 2 }, fate)
  const first = caught(b.push('x'))
  const kept = caught(b.push('keep'))
  const full = await caught(b.push('y'))
  t.match(full, { message: 'y: ' + full.cause.message, cause: { code: 'ERR_IO_HYGIENE_QUEUE_FULL' } })
  await sink.next()
  sink.calls[0].reject(new Error('down'))
  t.match(await first, { message: 'x: down' })
  t.same(await kept, { value: 'kept' }, 'a hook may resolve a rejected push')
  await b.close()
  t.match(await caught(b.push('z')), { message: /^z: /, cause: { code: 'ERR_IO_HYGIENE_CLOSED' } })
})

t.test('pushAll() promises settle raw, as without hooks', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, lingerMs: 0 }, fate)
  const all = b.pushAll(['c', 'd']).map(caught)
  await sink.next()
  sink.calls[0].resolve(['three', 'four'])
  t.same(await Promise.all(all), [{ value: 'three' }, { value: 'four' }])
  await b.close()
})

t.test('an item that extends Pending is its own record, and a Retry sends it again', async (t) => {
  class Own extends Pending {
    constructor (name) {
      super(null, 0, undefined, 0, 0)
      this.item = this
      this.name = name
    }
  }
  const seen = []
  let attempt = 0
  const b = createBatcher({
    send: async (items) => {
      seen.push(items.map((item) => item.name))
      return attempt++ === 0 ? [new Retry(new Error('again')), 'written'] : ['written']
    },
    sizeOf: (item) => item.name.length,
    lingerMs: 0,
    retryBackoffMs: 1,
  })
  const items = [new Own('first'), new Own('second')]
  const results = await Promise.all(items.map((item) => b.push(item)))
  t.same(results, ['written', 'written'])
  t.same(seen, [['first', 'second'], ['first']])
  t.equal(items[0].seq, 1, 'numbered as a record of its own would be')
  await b.close()
})

t.test('sendNow() sends what lingers at once and keeps no waiter', async (t) => {
  const sink = manualSink()
  const b = createBatcher({ send: sink.send, sizeOf: len, lingerMs: 60_000, flushWhenIdle: false })
  b.sendNow() // nothing held: nothing to do
  const p = caught(b.push('e'))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(sink.calls.length, 0, 'lingering')
  b.sendNow()
  await sink.next()
  t.same(sink.calls[0].items, ['e'])
  sink.calls[0].resolve(['done'])
  t.same(await p, { value: 'done' })
  await b.close()
})
