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
  const second = producer.send({ messages: [{ topic: 'somewhere', value: Buffer.from('y') }] })
  await t.rejects(producer.close({ timeoutMs: 200 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'close() rejects at its deadline')
  await t.rejects(second, { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'and so does what it could not send')
  await t.rejects(producer.send({ messages: [{ topic: 'x', value: Buffer.from('x') }] }), { code: 'ERR_IO_HYGIENE_CLOSED', written: false })
  t.equal(producer.closed, true)
})

t.test('what plain send() refuses is refused for its own call only', async (t) => {
  const topic = await createTopic(1)
  const { raw, requests } = spiedProducer(t)
  const producer = wrapProducer(raw, { flushOnSignals: false })
  const ok = producer.send({ messages: [{ topic, value: Buffer.from('ok') }] })
  await t.rejects(producer.send({ messages: [{ topic: 'bad topic', value: Buffer.from('x') }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', written: false })
  await t.rejects(producer.send({ messages: [{ topic }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', written: false }, 'no value')
  await t.rejects(producer.send({ messages: [{ topic, value: Buffer.from('x'), timestamp: 5 }] }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, 'a timestamp that is not a bigint')
  await t.rejects(producer.send({ messages: [{ topic, value: Buffer.from('x') }], lingerMs: 5 }), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, 'an option plain send() does not know')
  await t.rejects(producer.send(null), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  t.equal((await ok).offsets.length, 1)
  t.equal(requests.length, 1, 'only the good call was sent')
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
  const producer = wrapProducer(raw, { flushOnSignals: false })
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
