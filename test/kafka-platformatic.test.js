'use strict'

// wrapProducer() over an @platformatic/kafka producer, against a real
// single-node Kafka, checked with a real consumer and against plain send().
const t = require('tap')
const { Kafka, logLevel } = require('kafkajs')
const { startKafka, consumeAll } = require('./helpers/kafka-broker')
const { random: seeded } = require('./helpers/random')
const { wrapProducer } = require('../lib/kafka')

let broker
let kafka
let admin
let Producer

t.before(async () => {
  ({ Producer } = await import('@platformatic/kafka'))
  broker = await startKafka()
  kafka = new Kafka({ clientId: 'io-hygiene-test', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  admin = kafka.admin()
  await admin.connect()
})

t.teardown(async () => {
  await admin?.disconnect()
  await broker?.close()
})

let topics = 0
async function createTopic (numPartitions = 1) {
  const topic = `p${++topics}-${process.pid}`
  await admin.createTopics({ topics: [{ topic, numPartitions }], waitForLeaders: true })
  return topic
}

// An @platformatic/kafka producer whose send() requests are recorded.
function spiedProducer (t, options = {}) {
  const raw = new Producer({ clientId: 'io-hygiene-test', bootstrapBrokers: broker.brokers, retries: 1, retryDelay: 100, ...options })
  const requests = []
  const send = raw.send
  raw.send = function (request, callback) {
    requests.push(request)
    return send.call(this, request, callback)
  }
  t.teardown(() => raw.close(true))
  return { raw, requests }
}

t.test('each send() resolves with its own messages\' offsets, as read back from the topic, in fewer requests', async (t) => {
  const topic = await createTopic(3)
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const count = 300
  const sends = []
  for (let i = 0; i < count; i++) {
    const messages = i % 3 === 0
      ? [{ topic, key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) }, { topic, key: Buffer.from(`k${i}b`), value: Buffer.from(`v${i}b`), headers: new Map([[Buffer.from('h'), Buffer.from(`x${i}`)]]) }]
      : [{ topic, key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) }]
    sends.push(producer.send({ messages }).then((result) => ({ messages, result })))
  }
  const results = await Promise.all(sends)
  const total = results.reduce((n, { messages }) => n + messages.length, 0)
  t.ok(requests.length < count / 5, `${count} calls in ${requests.length} requests`)
  const read = await consumeAll(kafka, topic, total)
  t.equal(read.length, total, 'every message is in the topic once')
  const at = new Map(read.map((m) => [`${m.partition}:${m.offset}`, m]))
  for (const { messages, result } of results) {
    const partitions = new Set(result.offsets.map((o) => o.partition))
    t.equal(partitions.size, result.offsets.length, 'one offset per partition')
    // Each offset is its call's first message in that partition.
    for (const { partition, offset } of result.offsets) {
      const found = at.get(`${partition}:${offset}`)
      t.ok(found && messages.some((m) => m.value.toString() === found.value), `${messages[0].value} at ${partition}:${offset}`)
      t.equal(typeof offset, 'bigint')
    }
  }
  t.same(read.find((m) => m.value === 'v0b').headers, { h: 'x0' }, 'headers kept')
  t.equal(producer.stats().flushed, total)
  await producer.close()
})

t.test('a topic the cluster does not know fails only its own callers, saying nothing was written', async (t) => {
  const topic = await createTopic(1)
  const { raw } = spiedProducer(t, { autocreateTopics: false })
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const missing = `missing-${process.pid}`
  const good = []
  const bad = []
  for (let i = 0; i < 20; i++) {
    good.push(producer.send({ messages: [{ topic, value: Buffer.from(`g${i}`) }] }))
    if (i % 5 === 0) bad.push(producer.send({ messages: [{ topic: missing, value: Buffer.from(`b${i}`) }] }))
  }
  const results = await Promise.all(good)
  t.equal(results.length, 20, 'every send to the known topic resolves')
  for (const sent of bad) {
    await t.rejects(sent, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { message: /Unknown topic/ } })
  }
  t.equal((await consumeAll(kafka, topic, 20)).length, 20)
  t.match(producer.stats(), { flushed: 20, rejected: 4 })
  await producer.close()
})

t.test('deadlines: a send no broker takes rejects at deliveryTimeoutMs, and close() keeps its own', async (t) => {
  // Nothing listens on port 1: every attempt fails with a network error,
  // which is retried until the deadline.
  const raw = new Producer({ clientId: 'io-hygiene-test', bootstrapBrokers: ['127.0.0.1:1'], retries: 0, retryDelay: 50 })
  t.teardown(() => raw.close(true))
  const producer = wrapProducer(raw, { flushOnSignals: false, deliveryTimeoutMs: 1000 })
  const first = producer.send({ messages: [{ topic: 'somewhere', value: Buffer.from('x') }] })
  await t.rejects(first, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: false })
  const several = producer.send({ messages: [{ topic: 'somewhere', value: Buffer.from('a') }, { topic: 'somewhere', value: Buffer.from('b') }] })
  await t.rejects(several, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: false }, 'a call of several')
  const second = producer.send({ messages: [{ topic: 'somewhere', value: Buffer.from('y') }] })
  await t.rejects(producer.close({ timeoutMs: 200 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'close() rejects at its deadline')
  await t.rejects(second, { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'and so does what it could not send')
  await t.rejects(producer.send({ messages: [{ topic: 'x', value: Buffer.from('x') }] }), { code: 'ERR_IO_HYGIENE_CLOSED', written: false })
  t.equal(producer.closed, true)
})

t.test('a send() that never calls back is given up on at deliveryTimeoutMs, and its topic goes on', async (t) => {
  // A server that takes connections and never answers: with its own
  // request timeout at ten minutes, @platformatic/kafka waits that long.
  const sockets = new Set()
  const server = require('node:net').createServer((socket) => { sockets.add(socket) })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
    server.close()
  })
  const raw = new Producer({ clientId: 'io-hygiene-test', bootstrapBrokers: [`127.0.0.1:${server.address().port}`], retries: 0, timeout: 600_000 })
  t.teardown(() => raw.close(true))
  const spied = { calls: 0 }
  const send = raw.send
  raw.send = function (...args) {
    spied.calls++
    return send.apply(this, args)
  }
  const producer = wrapProducer(raw, { flushOnSignals: false, deliveryTimeoutMs: 300 })
  await t.rejects(producer.send({ messages: [{ topic: 'silent', value: Buffer.from('x') }] }), { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' })
  // Sends queued behind the one that never called back expire unsent, until
  // it is given up on; then the next one is sent (bounded: 50 tries).
  let last
  for (let i = 0; i < 50 && spied.calls < 2; i++) {
    last = await producer.send({ messages: [{ topic: 'silent', value: Buffer.from(`y${i}`) }] }).catch((error) => error)
  }
  t.equal(spied.calls, 2, 'a later send() went out')
  t.match(last, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' }, 'and says it may have been written')
  await producer.close({ timeoutMs: 5000 })
  t.equal(producer.stats().batchesInFlight, 0, 'nothing holds the topic')
})

t.test('what plain send() refuses is refused for its own call only', async (t) => {
  const topic = await createTopic(1)
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false, maxBatchBytes: 1000, maxQueuedBytes: 10000 })
  const ok = producer.send({ messages: [{ topic, value: Buffer.from('ok') }] })
  await t.rejects(producer.send({ messages: [{ topic: 'bad topic', value: Buffer.from('x') }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', written: false })
  await t.rejects(producer.send({ messages: [{ topic }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', written: false }, 'no value')
  await t.rejects(producer.send({ messages: [{ topic, value: Buffer.from('x'), timestamp: 5 }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, 'a timestamp that is not a bigint')
  await t.rejects(producer.send({ messages: [{ topic, value: Buffer.from('x') }], lingerMs: 5 }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, 'an option plain send() does not know')
  await t.rejects(producer.send(null), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(producer.send({ messages: [{ topic, value: Buffer.alloc(2000) }] }), { code: 'ERR_IO_HYGIENE_ITEM_TOO_LARGE', written: false }, 'larger than maxBatchBytes')
  await producer.send({ messages: [{ topic, value: Buffer.from('u') }], acks: undefined })
  t.equal((await ok).offsets.length, 1)
  t.equal(requests.length, 2, 'only the good calls were sent')
  await producer.close()
})

t.test('acks 0 resolves as plain send() does, and acks never share a request', async (t) => {
  const topic = await createTopic(1)
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const [zero, one, all] = await Promise.all([
    producer.send({ messages: [{ topic, value: Buffer.from('a0') }], acks: 0 }),
    producer.send({ messages: [{ topic, value: Buffer.from('a1') }], acks: 1 }),
    producer.send({ messages: [{ topic, value: Buffer.from('a-1') }], acks: -1 }),
  ])
  t.same(zero, { unwritableNodes: [] })
  t.equal(one.offsets.length, 1)
  t.equal(all.offsets.length, 1)
  t.equal(requests.length, 3, 'one request per acks')
  t.same(requests.map((r) => r.acks), [0, 1, -1])
  t.equal((await consumeAll(kafka, topic, 3)).length, 3)
  await producer.close()
})

t.test('the callback form, and a wrapped producer is not wrapped twice', async (t) => {
  const topic = await createTopic(1)
  const { raw } = spiedProducer(t)
  // flushOnSignals on (the default) until close().
  const producer = wrapProducer(raw)
  t.throws(() => wrapProducer(producer), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  const result = await new Promise((resolve, reject) => producer.send({ messages: [{ topic, value: Buffer.from('cb') }] }, (err, r) => err ? reject(err) : resolve(r)))
  t.equal(result.offsets[0].offset, 0n)
  await producer.close()
})

// Differential: fuzzed calls, plain send() one after another on one topic,
// wrapped all at once on a second: each call's result is the same.
t.test('each caller gets what plain send() gives it', async (t) => {
  const next = seeded(40)
  const random = { int: (n) => Math.floor(next() * n) }
  const calls = []
  for (let i = 0; i < 60; i++) {
    const messages = []
    const n = 1 + random.int(3)
    for (let m = 0; m < n; m++) {
      const message = { value: Buffer.from(`v${i}.${m}`) }
      if (random.int(3) > 0) message.key = Buffer.from(`key${random.int(20)}`)
      if (random.int(4) === 0) message.partition = random.int(3)
      if (random.int(4) === 0) message.headers = new Map([[Buffer.from('h'), Buffer.from(`h${i}`)]])
      messages.push(message)
    }
    calls.push(messages)
  }
  const plainTopic = await createTopic(3)
  const wrappedTopic = await createTopic(3)
  const { raw: plain } = spiedProducer(t)
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const expected = []
  for (const messages of calls) {
    // Round-robin is the same only for keyed or placed messages, so the
    // fuzz keys every message that has no partition when comparing.
    const result = await plain.send({ messages: messages.map((m) => ({ key: Buffer.from('rr'), ...m, topic: plainTopic })) })
    expected.push(result.offsets.map((o) => ({ partition: o.partition, offset: o.offset })))
  }
  const actual = await Promise.all(calls.map((messages) =>
    producer.send({ messages: messages.map((m) => ({ key: Buffer.from('rr'), ...m, topic: wrappedTopic })) })
      .then((r) => r.offsets.map((o) => ({ partition: o.partition, offset: o.offset })))))
  const sort = (list) => list.sort((a, b) => a.partition - b.partition)
  t.same(actual.map(sort), expected.map(sort), 'the same partitions and offsets, call by call')
  t.ok(requests.length < calls.length, `${calls.length} calls in ${requests.length} requests`)
  await producer.close()
})

t.test('a message the encoder cannot take fails alone: the rest of its request is sent again without it', async (t) => {
  const topic = await createTopic(2)
  const { raw } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const sends = []
  for (let i = 0; i < 12; i++) sends.push(producer.send({ messages: [{ topic, key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) }] }))
  // A header name as a string: without serializers, plain send() cannot encode it.
  const bad = producer.send({ messages: [{ topic, key: Buffer.from('k'), value: Buffer.from('bad'), headers: { name: Buffer.from('x') } }] })
  const mixed = producer.send({
    messages: [
      { topic, key: Buffer.from('m1'), value: Buffer.from('m1') },
      { topic, key: Buffer.from('m2'), value: Buffer.from('m2'), headers: { name: Buffer.from('x') } },
    ],
  })
  for (let i = 12; i < 24; i++) sends.push(producer.send({ messages: [{ topic, key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) }] }))
  t.equal((await Promise.all(sends)).length, 24, 'every other caller resolves')
  await t.rejects(bad, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false })
  await t.rejects(mixed, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: true }, 'a call of which one message was written says so')
  const read = await consumeAll(kafka, topic, 25)
  t.equal(read.length, 25)
  t.notOk(read.some((m) => m.value === 'bad' || m.value === 'm2'))
  t.match(producer.stats(), { flushed: 25, rejected: 2 })
  await producer.close()
})

t.test('a partition the broker refuses for good (its batch too large for the topic) fails only there: the other partitions are written once, the batch is split', async (t) => {
  const topic = `p${++topics}-${process.pid}`
  await admin.createTopics({ topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '2000' }] }], waitForLeaders: true })
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const value = Buffer.alloc(300, 'x')
  const sends = []
  for (let i = 0; i < 12; i++) sends.push(producer.send({ messages: [{ topic, partition: 0, value }] }))
  sends.push(producer.send({ messages: [{ topic, partition: 1, value: Buffer.from('one') }] }))
  // Too large alone: the broker refuses it, and no rejection can prove a
  // refusal from a broker unwritten.
  const huge = Buffer.alloc(2500, 'y')
  const refused = producer.send({ messages: [{ topic, partition: 1, value: huge }, { topic, partition: 1, value: huge }] })
  const results = await Promise.all(sends)
  await t.rejects(refused, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: 'unknown', cause: { message: /Producing messages failed/ } }, 'a call the broker refused')
  t.same(results.map((r) => r.offsets[0].partition), [...Array(12).fill(0), 1])
  t.same(results.slice(0, 12).map((r) => r.offsets[0].offset), Array.from({ length: 12 }, (_, i) => BigInt(i)), 'partition 0 in call order')
  t.ok(requests.length > 2, `split into ${requests.length} requests`)
  const read = await consumeAll(kafka, topic, 13)
  t.equal(read.length, 13, 'each message once: partition 1 was not sent again')
  await producer.close()
})

t.test('the rest of the surface: flush(), close(force), streams, metadata, events, a partitioner, serializers, transactions', async (t) => {
  const topic = await createTopic(2)
  const raw = new Producer({
    clientId: 'io-hygiene-test',
    bootstrapBrokers: broker.brokers,
    idempotent: true,
    serializers: { value: (v) => Buffer.from(JSON.stringify(v)) },
  })
  t.teardown(() => raw.close(true))
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const events = []
  const listener = (...args) => events.push(args)
  t.equal(producer.on('client:metadata', listener), producer)
  t.equal(producer.off('client:metadata', listener), producer)
  t.equal(producer.once('client:metadata', listener), producer)
  const sent = producer.send({ messages: [{ topic, value: { a: 1 } }, { topic, value: { b: 2 } }], partitioner: () => 1 })
  await producer.flush()
  const result = await sent
  t.same(result.offsets.map((o) => o.partition), [1], 'the call\'s partitioner chose')
  t.equal(events.length, 1, 'the producer\'s events')
  const metadata = await producer.metadata({ topics: [topic] })
  t.equal(metadata.topics.get(topic).partitionsCount, 2)
  await t.rejects(producer.send({ messages: [{ topic, value: 1 }], partitioner: 'first' }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(producer.send({ messages: [{ topic, value: 1, partition: -1 }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(producer.send({ messages: [{ topic, value: 1 }], partitioner: () => { throw new Error('no') } }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', cause: { message: 'no' } })
  await t.rejects(producer.send({ messages: [{ topic, value: Uint8Array.of(1), headers: 'h' }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(producer.send({ messages: [7] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  t.same(await producer.send({ messages: [] }), { offsets: [] })
  // A transaction: what was queued before is written before it begins.
  let settled = false
  producer.send({ messages: [{ topic, value: 'before', timestamp: 1n, metadata: 'm' }] }).then(() => { settled = true })
  const transaction = await producer.beginTransaction()
  t.ok(settled, 'flushed before the transaction began')
  await transaction.send({ messages: [{ topic, value: 'inside' }] })
  await transaction.commit()
  const stream = producer.asStream({ batchSize: 2 })
  stream.write({ topic, value: 'streamed' })
  stream.end()
  await new Promise((resolve) => stream.once('close', resolve))
  await t.rejects(producer.close('now'), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await producer.close(true)
  t.equal((await consumeAll(kafka, topic, 5)).length, 5)
})

t.test('a call of several messages at acks 0 resolves as plain send() does', async (t) => {
  const topic = await createTopic(1)
  const { raw } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  t.same(await producer.send({ messages: [{ topic, value: Buffer.from('a') }, { topic, value: Buffer.from('b') }], acks: 0 }), { unwritableNodes: [] })
  await t.rejects(producer.close({ timeoutMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  await producer.close({ force: true })
})

t.test('isRetriable() follows @platformatic/kafka\'s own canRetry, network errors and timeouts retried', async (t) => {
  const { isRetriable } = require('../lib/kafka/platformatic')
  const { NetworkError, TimeoutError, UserError, MultipleErrors, ProtocolError } = await import('@platformatic/kafka')
  t.equal(isRetriable(new NetworkError('down')), true)
  t.equal(isRetriable(new TimeoutError('late')), true, 'a request timeout')
  t.equal(isRetriable(new ProtocolError('NOT_LEADER_OR_FOLLOWER')), true)
  t.equal(isRetriable(new ProtocolError('MESSAGE_TOO_LARGE')), false)
  t.equal(isRetriable(new UserError('bad')), false)
  t.equal(isRetriable(new MultipleErrors('all', [new NetworkError('a'), new ProtocolError('NOT_LEADER_OR_FOLLOWER')])), true)
  t.equal(isRetriable(new MultipleErrors('mixed', [new NetworkError('a'), new UserError('b')])), false)
  t.equal(isRetriable(new Error('plain')), false)
  t.equal(isRetriable(null), false)
  const loop = new Error('loop', { cause: new NetworkError('a') })
  loop.cause.cause = loop
  t.equal(isRetriable(loop), true, 'a cycle of causes ends')
})
