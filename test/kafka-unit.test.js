'use strict'

// wrapProducer() with a fake kafkajs producer: option and argument checks,
// error classification, results, and what no real broker does on cue.
const t = require('tap')
const { wrapProducer, isRetriable, spec } = require('../lib/kafka')
const { kafkajsPatchStatus } = require('../lib/kafka/kafkajs-patch')
const { getSlot } = require('../lib/core/global-slot')

// The loggers of producers made by the corrected kafkajs: a fake joins them
// unless it stands for a kafkajs io-hygiene has not corrected.
kafkajsPatchStatus()
const correctedLoggers = getSlot(Symbol.for('io-hygiene.kafkajs.patch.v1')).loggers

function fakeProducer ({ idempotent = false, sendBatch, corrected = true } = {}) {
  const calls = { requests: [], disconnects: 0, transactions: 0, on: [] }
  const logger = { info () {} }
  if (corrected) correctedLoggers.add(logger)
  // A connected kafkajs producer holds sockets that keep the process alive;
  // this stands in for them (the batcher's own timer is unref'd).
  const sockets = setInterval(() => {}, 1000)
  const producer = {
    events: { CONNECT: 'producer.connect' },
    calls,
    connect: async () => {},
    disconnect: async () => {
      calls.disconnects++
      clearInterval(sockets)
    },
    isIdempotent: () => idempotent,
    on: (name, listener) => { calls.on.push(name); return () => {} },
    logger: () => logger,
    transaction: async () => { calls.transactions++; return { send: async () => [] } },
    sendBatch: async (request) => {
      calls.requests.push(request)
      if (sendBatch) return sendBatch(request)
      return request.topicMessages.flatMap(({ topic, messages }) =>
        [...new Set(messages.map((m) => m.partition ?? 0))].map((partition) => ({ topicName: topic, partition, errorCode: 0, baseOffset: '0' })))
    },
  }
  return producer
}

t.test('options are validated by name', async (t) => {
  const producer = fakeProducer()
  t.throws(() => wrapProducer(producer, { linger: 5 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' }, 'a misspelt option throws')
  t.throws(() => wrapProducer(producer, { lingerMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => wrapProducer(producer, { lingerMs: '5' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => wrapProducer(producer, { overflow: 'drop' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => wrapProducer(producer, { maxBatchMessages: 10 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' }, 'the old name of maxBatchItems')
  t.throws(() => wrapProducer(producer, { maxBatchItems: 10, maxQueuedItems: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => wrapProducer(producer, { maxBatchBytes: 10, maxQueuedBytes: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => wrapProducer(producer, { retryBackoffMs: 10, maxRetryBackoffMs: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => wrapProducer(null), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  t.throws(() => wrapProducer({}), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  const wrapped = wrapProducer(producer)
  t.throws(() => wrapProducer(wrapped), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, 'wrapping twice')
  t.throws(() => wrapProducer(producer, { flushOnSignals: 'yes' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /flushOnSignals/ })
  t.throws(() => wrapProducer(producer, { shutdownTimeoutMs: 0 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE', message: /shutdownTimeoutMs/ })
  t.same(Object.keys(spec).sort(), ['deliveryTimeoutMs', 'flushOnSignals', 'lingerMs', 'maxBatchBytes', 'maxBatchItems', 'maxQueueWaitMs', 'maxQueuedBytes', 'maxQueuedItems', 'maxRetryBackoffMs', 'maxWaitingBytes', 'maxWaitingItems', 'overflow', 'retryBackoffMs', 'shutdownTimeoutMs'])
  t.equal(spec.flushOnSignals.default, true, 'nothing queued is lost on a Kubernetes SIGTERM')
  t.equal(spec.shutdownTimeoutMs.default, 10_000)
  await wrapped.disconnect()
})

t.test('bad calls reject before anything is queued', async (t) => {
  const producer = fakeProducer({ idempotent: true })
  const wrapped = wrapProducer(producer)
  t.teardown(() => wrapped.disconnect())
  const invalid = { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }
  await t.rejects(wrapped.send(null), invalid)
  await t.rejects(wrapped.sendBatch(null), invalid)
  await t.rejects(wrapped.sendBatch({}), invalid)
  await t.rejects(wrapped.send({ topic: 't', messages: [{ value: 'v' }], acks: 2 }), invalid)
  await t.rejects(wrapped.send({ topic: 't', messages: [{ value: 'v' }], acks: 1 }), invalid, 'idempotent needs acks=-1')
  await t.rejects(wrapped.send({ topic: 'bad topic', messages: [{ value: 'v' }] }), invalid)
  const forged = await wrapped.send({ topic: 'x\n\u202eFORGED\u2028', messages: [{ value: 'v' }] }).catch((err) => err)
  t.match(forged, { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', message: /got "x\\n\\u202eFORGED\\u2028"$/ }, 'a topic is shown escaped, never raw')
  await t.rejects(wrapped.sendBatch({ topicMessages: [null] }), invalid)
  await t.rejects(wrapped.send({ topic: 't', messages: 'v' }), invalid)
  await t.rejects(wrapped.send({ topic: 't', messages: [{ key: 'k' }] }), invalid)
  await t.rejects(wrapped.send({ topic: 't', messages: [null] }), invalid)
  t.same(await wrapped.sendBatch({ topicMessages: [] }), [])
  t.equal(producer.calls.requests.length, 0)
})

t.test('results: each call gets its topics, and only its partitions when it named them', async (t) => {
  const producer = fakeProducer()
  const wrapped = wrapProducer(producer, { maxBatchItems: 2 })
  t.teardown(() => wrapped.disconnect())
  const [split, named, other] = await Promise.all([
    // Three messages over two requests: one entry per partition, the first's.
    wrapped.send({ topic: 'a', messages: [{ value: 'a1' }, { value: 'a2' }, { value: 'a3' }] }),
    wrapped.send({ topic: 'a', messages: [{ value: 'a4', partition: 1 }] }),
    wrapped.send({ topic: 'b', messages: [{ value: Buffer.from('b1'), key: '7', headers: { one: 'x', many: ['y', Buffer.from('z')] } }], timeout: 1000, compression: 1 }),
  ])
  // kafkajs partitions inside sendBatch: a call that let it choose gets every
  // partition of its topic that its requests wrote (a4's partition 1 too).
  t.same(split.map((e) => [e.topicName, e.partition]), [['a', 0], ['a', 1]])
  t.same(named.map((e) => [e.topicName, e.partition]), [['a', 1]])
  t.same(other.map((e) => e.topicName), ['b'])
  // Found by topic: which group's request goes last depends on the linger.
  const withB = producer.calls.requests.find((request) => request.topicMessages.some((entry) => entry.topic === 'b'))
  t.equal(withB.timeout, 1000)
  t.equal(withB.compression, 1)
  t.equal(wrapped.isIdempotent(), false)
})

t.test('a request answered with no metadata (acks=0: kafkajs answers []) resolves each call with []', async (t) => {
  const producer = fakeProducer({ sendBatch: async () => [] })
  const wrapped = wrapProducer(producer)
  t.teardown(() => wrapped.disconnect())
  const results = await Promise.all([
    wrapped.send({ topic: 't', acks: 0, messages: [{ value: 'v' }] }),
    wrapped.sendBatch({ acks: 0, topicMessages: [{ topic: 't', messages: [{ value: 'w' }, { value: 'x', partition: 1 }] }] }),
  ])
  t.same(results, [[], []])
  t.equal(producer.calls.requests.length, 1)
  t.equal(producer.calls.requests[0].acks, 0)
})

t.test('one request\'s callers share one read-only RecordMetadata array per topic, not a copy each', async (t) => {
  const producer = fakeProducer()
  const wrapped = wrapProducer(producer)
  t.teardown(() => wrapped.disconnect())
  const [a, b, named, several] = await Promise.all([
    wrapped.send({ topic: 't', messages: [{ value: 'a' }] }),
    wrapped.send({ topic: 't', messages: [{ value: 'b' }] }),
    wrapped.send({ topic: 't', messages: [{ value: 'c', partition: 0 }] }),
    wrapped.send({ topic: 't', messages: [{ value: 'd' }, { value: 'e' }] }),
  ])
  t.equal(producer.calls.requests.length, 1)
  t.equal(a, b, 'the same array for two callers of one request')
  t.ok(Object.isFrozen(a) && a.every(Object.isFrozen), 'frozen, entries too: no caller can change what another sees')
  t.throws(() => a.push({}), TypeError)
  t.ok(Object.isFrozen(named) && Object.isFrozen(several))
  t.same(several, a)
})

t.test('a duck-typed producer that answers with no array: each call resolves with []', async (t) => {
  const wrapped = wrapProducer(fakeProducer({ sendBatch: async () => undefined }))
  t.teardown(() => wrapped.disconnect())
  t.same(await wrapped.send({ topic: 't', messages: [{ value: 'v' }] }), [])
})

t.test('retriable errors are retried, others reject each caller with a coded error of its own, kafkajs\'s as its cause', async (t) => {
  let failures = 2
  const transient = Object.assign(new Error('Connection error'), { name: 'KafkaJSNonRetriableError', retriable: false, cause: Object.assign(new Error('ECONNREFUSED'), { name: 'KafkaJSConnectionError', retriable: true }) })
  const retrying = wrapProducer(fakeProducer({ sendBatch: async () => { if (failures-- > 0) throw transient; return [] } }), { retryBackoffMs: 1, maxRetryBackoffMs: 1 })
  t.same(await retrying.send({ topic: 't', messages: [{ value: 'v' }] }), [])
  t.equal(retrying.stats().retried, 2)
  await retrying.disconnect()

  const fatal = Object.assign(new Error('message too large'), { name: 'KafkaJSProtocolError', retriable: false })
  const failing = wrapProducer(fakeProducer({ sendBatch: async () => { throw fatal } }))
  const errors = await Promise.all([1, 2].map(() => failing.send({ topic: 't', messages: [{ value: 'v' }] }).catch((e) => e)))
  for (const error of errors) t.match(error, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: fatal, written: 'unknown', message: /message too large/ })
  t.not(errors[0], errors[1], 'one error per caller, so that each says what became of its own messages')
  t.equal(fatal.written, undefined, 'kafkajs\'s error is left as it was')
  await failing.disconnect()
})

t.test('isRetriable follows kafkajs: the flag, retries exhausted, or a retriable cause', async (t) => {
  t.equal(isRetriable(null), false)
  t.equal(isRetriable('boom'), false)
  t.equal(isRetriable({ retriable: true }), true)
  t.equal(isRetriable({ name: 'KafkaJSNumberOfRetriesExceeded', retriable: false }), true)
  t.equal(isRetriable({ retriable: false, cause: { retriable: true } }), true)
  t.equal(isRetriable({ retriable: false, cause: { retriable: false } }), false)
  const loop = { retriable: false }
  loop.cause = loop
  t.equal(isRetriable(loop), false, 'a cause cycle ends')
})

t.test('disconnect() with a deadline rejects what is still pending, and disconnects anyway', async (t) => {
  const producer = fakeProducer({ sendBatch: () => new Promise(() => {}) })
  const wrapped = wrapProducer(producer)
  const pending = wrapped.send({ topic: 't', messages: [{ value: 'v' }] })
  await new Promise(setImmediate)
  let reads = 0
  await t.rejects(wrapped.disconnect({ get timeoutMs () { reads++; return 20 } }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.equal(reads, 1, 'the deadline is read once')
  await t.rejects(pending, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.equal(producer.calls.disconnects, 1)
  await t.rejects(wrapped.send({ topic: 't', messages: [{ value: 'v' }] }), { code: 'ERR_IO_HYGIENE_CLOSED' })
})

t.test('the producer surface passes through', async (t) => {
  const producer = fakeProducer()
  delete producer.isIdempotent
  const wrapped = wrapProducer(producer)
  t.equal(wrapped.events, producer.events)
  t.equal(wrapped.isIdempotent(), false, 'a producer without isIdempotent() is not idempotent')
  wrapped.on('producer.connect', () => {})
  t.same(producer.calls.on, ['producer.connect'])
  t.equal(typeof wrapped.logger().info, 'function')
  await wrapped.connect()
  await wrapped.transaction()
  t.equal(producer.calls.transactions, 1)
  await wrapped.flush()
  await wrapped.disconnect()
})

t.test('a call with one message too large for any batch is refused whole, and the next send still goes at once', async (t) => {
  const producer = fakeProducer()
  const w = wrapProducer(producer, { maxBatchBytes: 1000, lingerMs: 60_000 })
  await w.connect()
  await t.rejects(w.send({ topic: 't', messages: [{ value: 'small' }, { value: Buffer.alloc(2000) }] }), {
    code: 'ERR_IO_HYGIENE_ITEM_TOO_LARGE',
    message: /send\(\) message for topic "t": an item of \d+ bytes/,
  })
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(producer.calls.requests.length, 0, 'not even the small message was sent')
  // With a 60 s linger, only the idle path can send this one now.
  const result = await w.send({ topic: 't', messages: [{ value: 'next' }] })
  t.equal(result[0].topicName, 't')
  t.equal(producer.calls.requests.length, 1)
  await w.disconnect()
})

t.test('with overflow "reject", a call that does not fit whole is refused whole, none of it sent', async (t) => {
  let release
  const gate = new Promise((resolve) => { release = resolve })
  const producer = fakeProducer({
    sendBatch: async (request) => {
      await gate
      return request.topicMessages.map(({ topic }) => ({ topicName: topic, partition: 0, errorCode: 0, baseOffset: '0' }))
    },
  })
  const wrapped = wrapProducer(producer, { overflow: 'reject', maxQueuedItems: 4, maxBatchItems: 4 })
  t.teardown(() => wrapped.disconnect())
  const first = wrapped.send({ topic: 't', messages: [{ value: 'a' }, { value: 'b' }] })
  // Two held, two free: a call of three is refused before any of it is queued.
  await t.rejects(wrapped.send({ topic: 't', messages: [{ value: 'c' }, { value: 'd' }, { value: 'e' }] }), { code: 'ERR_IO_HYGIENE_QUEUE_FULL' })
  const fits = wrapped.send({ topic: 't', messages: [{ value: 'f' }, { value: 'g' }] })
  release()
  await Promise.all([first, fits])
  const sent = producer.calls.requests.flatMap((r) => r.topicMessages.flatMap((tm) => tm.messages.map((m) => m.value)))
  t.same(sent, ['a', 'b', 'f', 'g'], 'nothing of the refused call went out')
  t.match(wrapped.stats(), { dropped: 3, flushed: 4 })
})

t.test('a request that failed in part: the written messages resolve with the batch, the rest go again to the same partitions', async (t) => {
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      if (++calls === 1) {
        // As the corrected kafkajs reports it: 'a' written to partition 0,
        // 'b' and 'c' assigned partitions 1 and 2 but not acknowledged.
        const error = Object.assign(new Error('not leader'), { name: 'KafkaJSNumberOfRetriesExceeded' })
        throw partialFailure(error, request, [[0, 1, 2]], [1, 2], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '10' }])
      }
      if (calls === 2) {
        // Again in part: 'b' written this time, 'c' not.
        const error = Object.assign(new Error('not leader'), { name: 'KafkaJSNumberOfRetriesExceeded' })
        throw partialFailure(error, request, [[1, 2]], [2], [{ topicName: 't', partition: 1, errorCode: 0, baseOffset: '15' }])
      }
      return request.topicMessages[0].messages.map((m) => ({ topicName: 't', partition: m.partition, errorCode: 0, baseOffset: '20' }))
    },
  })
  const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
  const results = await Promise.all(['a', 'b', 'c'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.equal(calls, 3)
  t.same(producer.calls.requests[1].topicMessages[0].messages.map((m) => [m.value, m.partition]), [['b', 1], ['c', 2]], 'only the unwritten, to their partitions')
  t.same(producer.calls.requests[2].topicMessages[0].messages.map((m) => [m.value, m.partition]), [['c', 2]])
  t.same(results[0].map((e) => [e.partition, e.baseOffset]), [[0, '10']], 'each written one: the entries of the attempt that wrote it')
  t.same(results[1].map((e) => [e.partition, e.baseOffset]), [[1, '15']])
  t.same(results[2].map((e) => [e.partition, e.baseOffset]), [[2, '20']])
  t.equal(wrapped.stats().retried, 2)
  await wrapped.disconnect()
})

t.test('every rejection says whether the call\'s messages may have been written', async (t) => {
  const producer = fakeProducer({ idempotent: true })
  const wrapped = wrapProducer(producer, { maxBatchBytes: 100, flushOnSignals: false })
  const refused = [
    wrapped.send(null),
    wrapped.sendBatch({}),
    wrapped.send({ topic: 't', messages: [{ value: 'v' }], acks: 1 }),
    wrapped.send({ topic: 'bad topic', messages: [{ value: 'v' }] }),
    wrapped.send({ topic: 't', messages: [{ key: 'k' }] }),
    wrapped.send({ topic: 't', messages: [{ value: 'x'.repeat(200) }] }),
  ]
  for (const pending of refused) t.match(await pending.catch((e) => e), { code: /^ERR_IO_HYGIENE_/, written: false })
  await wrapped.disconnect()
  t.match(await wrapped.send({ topic: 't', messages: [{ value: 'v' }] }).catch((e) => e), { code: 'ERR_IO_HYGIENE_CLOSED', written: false })

  // A full queue refuses before anything is queued.
  const stuck = wrapProducer(fakeProducer({ sendBatch: () => new Promise(() => {}) }), { overflow: 'reject', maxQueuedItems: 1, maxBatchItems: 1, deliveryTimeoutMs: 200, flushOnSignals: false })
  const inFlight = stuck.send({ topic: 't', messages: [{ value: 'a' }] })
  await new Promise(setImmediate)
  t.match(await stuck.send({ topic: 't', messages: [{ value: 'b' }] }).catch((e) => e), { code: 'ERR_IO_HYGIENE_QUEUE_FULL', written: false })
  // Out of time in flight: the request may have been written.
  t.match(await inFlight.catch((e) => e), { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  await stuck.disconnect({ timeoutMs: 10 }).catch(() => {})
})

t.test('callers of one batch out of time: each gets its own error, saying the request may have been written', async (t) => {
  const wrapped = wrapProducer(fakeProducer({ sendBatch: () => new Promise(() => {}) }), { deliveryTimeoutMs: 100, flushOnSignals: false })
  // One send and one call of two messages, in one batch handed to kafkajs.
  const one = wrapped.send({ topic: 't', messages: [{ value: 'a' }] })
  const two = wrapped.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'b' }, { value: 'c' }] }] })
  const [e1, e2] = await Promise.all([one.catch((e) => e), two.catch((e) => e)])
  t.match(e1, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  t.match(e2, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  await wrapped.disconnect({ timeoutMs: 10 }).catch(() => {})
})

t.test('out of time behind a request in flight: never handed to kafkajs, so not written', async (t) => {
  const wrapped = wrapProducer(fakeProducer({ sendBatch: () => new Promise(() => {}) }), { deliveryTimeoutMs: 100, flushOnSignals: false })
  // Handled from the start: its deadline may pass before the other's.
  const first = wrapped.send({ topic: 't', messages: [{ value: 'a' }] }).catch((e) => e)
  await new Promise(setImmediate)
  const queued = wrapped.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'b' }, { value: 'c' }] }] })
  t.match(await queued.catch((e) => e), { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: false })
  t.match(await first, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  await wrapped.disconnect({ timeoutMs: 10 }).catch(() => {})
})

// As the corrected kafkajs reports a request that wrote some partitions and
// then failed: `partitions`, each topic's messages' partitions by position;
// `pending`, the partitions of topic 't' not acknowledged.
function partialFailure (error, request, partitions, pending, entries) {
  const { kOutcome } = require('../lib/kafka/send-messages')
  error[kOutcome] = {
    assigned: new Map(request.topicMessages.map(({ messages }, i) => [messages, partitions[i]])),
    pending: new Set(pending.map((p) => `t\0${p}`)),
    entries,
  }
  return error
}

t.test('a request that wrote some partitions, then failed with an error not retried: the written messages resolve, the others reject', async (t) => {
  const fatal = Object.assign(new Error('topic authorization failed'), { name: 'KafkaJSProtocolError', retriable: false })
  const producer = fakeProducer({
    sendBatch: (request) => {
      // 'a' and 'c' written to partition 0; 'b' (partition 1) refused.
      throw partialFailure(fatal, request, [[0, 1, 0]], [1], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '7' }])
    },
  })
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  const [a, b, c] = await Promise.allSettled(['a', 'b', 'c'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.equal(producer.calls.requests.length, 1, 'not retried')
  t.equal(a.status, 'fulfilled', 'a written message resolves')
  t.same(a.value.map((e) => [e.partition, e.baseOffset]), [[0, '7']])
  t.equal(c.status, 'fulfilled')
  t.match(b.reason, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: fatal, written: 'unknown' })
  t.match(wrapped.stats(), { flushed: 2, rejected: 1 })
  await wrapped.disconnect()
})

t.test('a call of several messages, some written and the rest failed for good: it rejects saying some were written', async (t) => {
  const fatal = Object.assign(new Error('not authorized'), { name: 'KafkaJSProtocolError', retriable: false })
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      if (++calls > 1) throw Object.assign(new Error('not authorized'), { name: 'KafkaJSProtocolError', retriable: false })
      throw partialFailure(fatal, request, [[0, 1], [0]], [1], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '3' }, { topicName: 'u', partition: 0, errorCode: 0, baseOffset: '4' }])
    },
  })
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  const error = await wrapped.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'a' }, { value: 'b' }] }, { topic: 'u', messages: [{ value: 'c' }] }] }).catch((e) => e)
  t.match(error, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: fatal, written: true })
  t.match(await wrapped.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'd' }, { value: 'e' }] }] }).catch((e) => e), { written: 'unknown' }, 'none known written')
  await wrapped.disconnect()
})

t.test('written by a request that failed, then out of time while the rest is retried: the written message resolves', async (t) => {
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      if (++calls === 1) {
        throw partialFailure(Object.assign(new Error('not leader'), { name: 'KafkaJSNumberOfRetriesExceeded' }), request, [[0, 1]], [1], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '5' }])
      }
      return new Promise(() => {})
    },
  })
  const wrapped = wrapProducer(producer, { retryBackoffMs: 1, deliveryTimeoutMs: 150, flushOnSignals: false })
  const [a, b] = await Promise.allSettled(['a', 'b'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.equal(a.status, 'fulfilled', 'acknowledged by the first attempt')
  t.same(a.value.map((e) => e.baseOffset), ['5'])
  t.match(b.reason, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  await wrapped.disconnect({ timeoutMs: 10 }).catch(() => {})
})

t.test('a request that fails to encode, or that the broker refuses as malformed, fails only the caller at fault', async (t) => {
  for (const [name, failure] of [
    ['an encoder TypeError', () => new TypeError('cannot encode')],
    ['INVALID_RECORD', () => Object.assign(new Error('This record has failed the validation on broker'), { name: 'KafkaJSProtocolError', type: 'INVALID_RECORD', retriable: false })],
  ]) {
    const producer = fakeProducer({
      sendBatch: async (request) => {
        if (request.topicMessages.some(({ messages }) => messages.some((m) => m.value === 'poison'))) throw failure()
        return request.topicMessages.map(({ topic }) => ({ topicName: topic, partition: 0, errorCode: 0, baseOffset: '0' }))
      },
    })
    const wrapped = wrapProducer(producer, { flushOnSignals: false })
    const calls = []
    for (let i = 0; i < 40; i++) {
      calls.push(wrapped.send({ topic: 't', messages: [{ value: `good-${i}` }] }))
      if (i === 17) calls.push(wrapped.send({ topic: 't', messages: [{ value: 'poison' }] }))
    }
    const outcomes = await Promise.allSettled(calls)
    const rejected = outcomes.filter((o) => o.status === 'rejected')
    t.equal(rejected.length, 1, `${name}: one caller rejected`)
    t.equal(outcomes[18].status, 'rejected', `${name}: the caller at fault`)
    t.match(outcomes[18].reason, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: failure() }, `${name}: not written, the failure as cause`)
    t.equal(wrapped.stats().rejected, 1, `${name}: counted once`)
    await wrapped.disconnect()
  }
})

t.test('an outcome that is not of this attempt\'s messages marks none of them written', async (t) => {
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      if (++calls === 1) {
        // Arrays of some other request: says nothing of these messages.
        const other = { topicMessages: [{ topic: 't', messages: [{ value: 'a' }, { value: 'b' }] }] }
        throw partialFailure(Object.assign(new Error('not leader'), { retriable: true }), other, [[0, 1]], [1], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '1' }])
      }
      return request.topicMessages[0].messages.map((m, i) => ({ topicName: 't', partition: i, errorCode: 0, baseOffset: '2' }))
    },
  })
  const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
  await Promise.all(['a', 'b'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.same(producer.calls.requests[1].topicMessages[0].messages.map((m) => [m.value, m.partition]), [['a', undefined], ['b', undefined]], 'both sent again, as they were')
  await wrapped.disconnect()
})

t.test('a result that does not cover a message\'s partition does not resolve it: that message goes again', async (t) => {
  const { kOutcome } = require('../lib/kafka/send-messages')
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      const messages = request.topicMessages[0].messages
      const entries = [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: String(++calls) }]
      // 'b' assigned partition 1 the first time, and no entry for it.
      const partitions = calls === 1 ? [0, 1] : messages.map((m) => m.partition ?? 0)
      if (calls > 1) entries.push({ topicName: 't', partition: 1, errorCode: 0, baseOffset: String(calls) })
      Object.defineProperty(entries, kOutcome, { value: { assigned: new Map([[messages, partitions]]), pending: new Set(), entries } })
      return entries
    },
  })
  const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
  const [a, b] = await Promise.all(['a', 'b'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.equal(calls, 2)
  t.same(producer.calls.requests[1].topicMessages[0].messages.map((m) => [m.value, m.partition]), [['b', 1]], 'only b, to its partition')
  t.same(a.map((e) => [e.partition, e.baseOffset]), [[0, '1']])
  t.same(b.map((e) => [e.partition, e.baseOffset]), [[1, '2']])
  await wrapped.disconnect()
})

t.test('the Kafka test helper says at once that kafkajs is missing, instead of waiting out its start deadline', async (t) => {
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const { execFile } = require('node:child_process')
  // A copy of the helper where no node_modules is reachable.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-no-kafkajs-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.copyFileSync(path.join(__dirname, 'helpers', 'kafka-broker.js'), path.join(dir, 'kafka-broker.js'))
  const script = "require('./kafka-broker.js').startKafka().then(() => process.exit(1), (e) => { process.stdout.write(e.message); process.exit(3) })"
  const { code, stdout } = await new Promise((resolve) => {
    execFile(process.execPath, ['-e', script], { cwd: dir, env: { ...process.env, NODE_PATH: '' } }, (error, stdout) => resolve({ code: error?.code ?? 0, stdout }))
  })
  t.equal(code, 3, 'it fails')
  t.match(stdout, /^kafkajs is not installed/, 'saying why')
})

t.test('a producer of a kafkajs not corrected: each call in a request of its own, none waiting for another', async (t) => {
  let release
  const held = new Promise((resolve) => { release = resolve })
  const producer = fakeProducer({
    corrected: false,
    sendBatch: async (request) => {
      await held
      return request.topicMessages.map(({ topic }) => ({ topicName: topic, partition: 0, errorCode: 0, baseOffset: '0' }))
    },
  })
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  t.teardown(() => wrapped.disconnect())
  t.equal(wrapped.stats().batching, false)
  const sends = [
    wrapped.send({ topic: 't', messages: [{ value: 'a' }] }),
    wrapped.send({ topic: 't', messages: [{ value: 'b' }, { value: 'c' }] }),
    wrapped.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 'd' }] }, { topic: 'u', messages: [{ value: 'e' }] }] }),
  ]
  // All three are in flight at once, as plain kafkajs sends them.
  while (producer.calls.requests.length < 3) await new Promise((resolve) => setImmediate(resolve))
  release()
  await Promise.all(sends)
  t.same(producer.calls.requests.map((r) => r.topicMessages.map(({ topic, messages }) => [topic, messages.map((m) => m.value)])),
    [[['t', ['a']]], [['t', ['b', 'c']]], [['t', ['d']], ['u', ['e']]]], 'each call whole, alone')
})

t.test('an idempotent producer of a kafkajs not corrected is refused at wrap time, saying how to fix the order', async (t) => {
  t.not(kafkajsPatchStatus(), 'off', 'the correction was not turned off on purpose')
  const producer = fakeProducer({ idempotent: true, corrected: false })
  t.teardown(() => producer.disconnect())
  t.throws(() => wrapProducer(producer, { flushOnSignals: false }), {
    code: 'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER',
    name: 'TypeError',
    message: /idempotent retry can acknowledge messages that were never written.*-r io-hygiene\/register.*install\(\) before kafkajs is first required/,
  })
  t.equal(producer.calls.requests.length, 0, 'nothing sent')
  const corrected = fakeProducer({ idempotent: true })
  const wrapped = wrapProducer(corrected, { flushOnSignals: false })
  t.teardown(() => wrapped.disconnect())
  t.equal(wrapped.stats().batching, true, 'one of the corrected kafkajs is wrapped and batched')
})

t.test('a timestamp past 2^52 fills a request alone, in its place in call order', async (t) => {
  const producer = fakeProducer()
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  t.teardown(() => wrapped.disconnect())
  const values = ['a', 'b', 'c', 'd', 'e']
  const timestamps = [1_600_000_000_123, 2 ** 60, 1_600_000_000_124, 1_600_000_000_125, '1600000000123456789']
  await Promise.all(values.map((value, i) => wrapped.send({ topic: 't', messages: [{ value, timestamp: timestamps[i] }] })))
  t.same(producer.calls.requests.map((r) => r.topicMessages[0].messages.map((m) => m.value)), [['a'], ['b'], ['c', 'd'], ['e']])
})

// A thrown outcome of the corrected kafkajs that also says which partitions
// the broker refused (refused: "topic\0partition" -> its error).
function refusedFailure (error, request, partitions, refused, entries = []) {
  partialFailure(error, request, partitions, [], entries)
  const { kOutcome } = require('../lib/kafka/send-messages')
  error[kOutcome].refused = new Map(Object.entries(refused).map(([p, e]) => [`t\0${p}`, e]))
  return error
}

t.test('a refused partition\'s message says it may have been written only when an earlier attempt went unanswered', async (t) => {
  const denied = () => Object.assign(new Error('not authorized'), { name: 'KafkaJSProtocolError', type: 'TOPIC_AUTHORIZATION_FAILED', retriable: false })
  let calls = 0
  const producer = fakeProducer({
    sendBatch: (request) => {
      calls++
      // The first call's first attempt: no answer at all, retried.
      if (calls === 1) throw Object.assign(new Error('request timed out'), { retriable: true })
      throw refusedFailure(denied(), request, [[0]], { 0: denied() })
    },
  })
  const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
  t.teardown(() => wrapped.disconnect())
  t.match(await wrapped.send({ topic: 't', messages: [{ value: 'a' }] }).catch((e) => e), { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: 'unknown' }, 'sent twice, the first unanswered')
  t.match(await wrapped.send({ topic: 't', messages: [{ value: 'b' }] }).catch((e) => e), { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false }, 'refused at its only send')
  t.equal(calls, 3)
})

t.test('a failed request whose partition batches were refused for a record: each half again to its partition, the second after the first', async (t) => {
  const tooLarge = () => Object.assign(new Error('too large'), { name: 'KafkaJSProtocolError', type: 'MESSAGE_TOO_LARGE', retriable: false })
  const notLeader = () => Object.assign(new Error('not leader'), { name: 'KafkaJSNumberOfRetriesExceeded' })
  for (const firstHalf of ['written', 'written in part']) {
    let calls = 0
    const producer = fakeProducer({
      sendBatch: (request) => {
        // 'a' and 'b' to partition 0, 'c' and 'd' to 1: both refused whole
        // for what they hold.
        if (++calls === 1) throw refusedFailure(notLeader(), request, [[0, 0, 1, 1]], { 0: tooLarge(), 1: tooLarge() })
        // The first half ('a', 'c'): only partition 0 written this time.
        if (calls === 2 && firstHalf === 'written in part') throw partialFailure(notLeader(), request, [[0, 1]], [1], [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: '50' }])
        return [...new Set(request.topicMessages[0].messages.map((m) => m.partition))].map((partition) => ({ topicName: 't', partition, errorCode: 0, baseOffset: String(calls * 10) }))
      },
    })
    const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
    const results = await Promise.all(['a', 'b', 'c', 'd'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
    const sent = producer.calls.requests.map((r) => r.topicMessages[0].messages.map((m) => [m.value, m.partition]))
    const first = [['a', undefined], ['b', undefined], ['c', undefined], ['d', undefined]]
    if (firstHalf === 'written') {
      t.same(sent, [first, [['a', 0], ['c', 1]], [['b', 0], ['d', 1]]], `${firstHalf}: each half to its partitions, in order`)
      t.same(results.map((r) => r[0].baseOffset), ['20', '30', '20', '30'], `${firstHalf}: each the entry of the request that wrote it`)
    } else {
      // 'c' still to send: the second half waits, and goes with it, in order.
      t.same(sent, [first, [['a', 0], ['c', 1]], [['b', 0], ['c', 1], ['d', 1]]], `${firstHalf}: the second half not before the rest of the first`)
      t.same(results.map((r) => r[0].baseOffset), ['50', '30', '30', '30'], `${firstHalf}: each the entry of the request that wrote it`)
    }
    await wrapped.disconnect()
  }
})

t.test('a batch retried after its encoding failure\'s halves wrote some of it: what a half wrote is not sent again', async (t) => {
  const { kOutcome } = require('../lib/kafka/send-messages')
  const poison = () => new TypeError('cannot encode')
  for (const retried of ['answered', 'answered with an outcome', 'fails to encode again']) {
    let calls = 0
    const producer = fakeProducer({
      sendBatch: (request) => {
        const messages = request.topicMessages[0].messages
        calls++
        // The batch fails to encode; its first half ('a') is written; the
        // second ('b') fails for a while: the batch is retried.
        if (calls === 1) throw poison()
        if (calls === 3) throw Object.assign(new Error('connection closed'), { retriable: true })
        if (calls === 4 && retried === 'fails to encode again') throw poison()
        const entries = [{ topicName: 't', partition: 0, errorCode: 0, baseOffset: String(calls) }]
        if (calls === 4 && retried === 'answered with an outcome') {
          Object.defineProperty(entries, kOutcome, { value: { assigned: new Map([[messages, [0]]]), pending: new Set(), entries } })
        }
        return entries
      },
    })
    const wrapped = wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false })
    const [a, b] = await Promise.all(['a', 'b'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
    const sent = producer.calls.requests.map((r) => r.topicMessages[0].messages.map((m) => m.value))
    t.same(sent, retried === 'fails to encode again' ? [['a', 'b'], ['a'], ['b'], ['b'], ['b']] : [['a', 'b'], ['a'], ['b'], ['b']], `${retried}: 'a' never again once written`)
    t.same(a.map((e) => e.baseOffset), ['2'], `${retried}: 'a' resolves with the request that wrote it`)
    t.same(b.map((e) => e.baseOffset), [String(calls)], `${retried}: 'b' with its own`)
    t.equal(wrapped.stats().rejected, 0)
    await wrapped.disconnect()
  }
})

t.test('an error of io-hygiene\'s own (a TypeError) is not taken for an encoding failure: the batch is not split', async (t) => {
  const { isEncodingFailure } = require('../lib/kafka/message')
  const { ERR_IO_HYGIENE_INVALID_ARGUMENT } = require('../lib/core/errors')
  const ours = new ERR_IO_HYGIENE_INVALID_ARGUMENT('a kafka send()', 'a message names partition 9, which the topic does not have')
  t.equal(ours.name, 'TypeError')
  t.equal(isEncodingFailure(ours), false)
  t.equal(isEncodingFailure(new TypeError('cannot encode')), true)
  const producer = fakeProducer({ sendBatch: () => { throw ours } })
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  t.teardown(() => wrapped.disconnect())
  const outcomes = await Promise.allSettled(['a', 'b'].map((value) => wrapped.send({ topic: 't', messages: [{ value }] })))
  t.equal(producer.calls.requests.length, 1, 'one request, not sent again apart')
  for (const o of outcomes) t.match(o.reason, { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', message: ours.message }, 'each caller rejects with it')
})

t.test('a record\'s own offset past 2^53 is exact, and an offset the broker did not give stays -1', async (t) => {
  const { atPosition } = require('../lib/kafka/outcomes')
  const own = (baseOffset) => Object.freeze([Object.freeze({ topicName: 't', partition: 0, errorCode: 0, baseOffset })])
  t.equal(atPosition(own('9007199254740990'), 5)[0].baseOffset, '9007199254740995')
  t.equal(atPosition(own('12'), 3)[0].baseOffset, '15')
  t.equal(atPosition(own('-1'), 3)[0].baseOffset, '-1')
})
