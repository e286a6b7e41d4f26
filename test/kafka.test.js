'use strict'

// wrapProducer() against a real single-node Kafka, checked with a real
// consumer. The broker restart and the broker that never returns are in
// kafka-restart.test.js; edge cases with a fake producer in kafka-unit.test.js.
const t = require('tap')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { once } = require('node:events')
// In the documented order, on the corrected kafkajs (kafka-load-order.test.js
// has the others).
const { installKafkajsPatch } = require('../lib/kafka/kafkajs-patch')
t.teardown(installKafkajsPatch())
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')
const { startKafka, consumeAll } = require('./helpers/kafka-broker')
const { wrapProducer } = require('../lib/kafka')

let broker
let kafka
let admin

t.before(async () => {
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
  const topic = `t${++topics}-${process.pid}`
  await admin.createTopics({ topics: [{ topic, numPartitions }], waitForLeaders: true })
  return topic
}

// A kafkajs producer whose sendBatch() requests are recorded.
async function spiedProducer (t, config = {}) {
  const raw = kafka.producer(config)
  const requests = []
  const sendBatch = raw.sendBatch
  raw.sendBatch = (request) => {
    requests.push(request)
    return sendBatch(request)
  }
  await raw.connect()
  return { raw, requests }
}

t.test('every acknowledged message is in the topic exactly once, in call order per partition, keys and headers kept', async (t) => {
  const topic = await createTopic(3)
  const { raw, requests } = await spiedProducer(t, { idempotent: true })
  const producer = wrapProducer(raw)
  t.teardown(() => producer.disconnect())
  const total = 3000
  let next = 0
  const metadata = []
  // 200 concurrent senders, each awaiting its own send() like a request handler.
  const sender = async (id) => {
    while (next < total) {
      const n = next++
      const result = await producer.send({
        topic,
        messages: [{ key: `k${n % 17}`, value: String(n), headers: { sender: String(id), n: String(n) } }],
      })
      metadata.push(result)
    }
  }
  await Promise.all(Array.from({ length: 200 }, (_, id) => sender(id)))
  t.equal(metadata.length, total, 'every send resolved')
  t.ok(metadata.every((list) => list.length >= 1 && list.every((entry) => entry.topicName === topic && entry.errorCode === 0)),
    'each send resolves with RecordMetadata of its topic')
  t.ok(requests.length < total / 10, `batched into ${requests.length} Produce requests`)

  const consumed = await consumeAll(kafka, topic, total)
  t.equal(consumed.length, total, 'nothing lost, nothing duplicated')
  t.equal(new Set(consumed.map((m) => m.value)).size, total, 'each value once')
  const byPartition = new Map()
  for (const m of consumed) {
    t.equal(m.key, `k${Number(m.value) % 17}`, 'key kept')
    t.equal(m.headers.n, m.value, 'headers kept')
    const list = byPartition.get(m.partition) ?? []
    list.push(m)
    byPartition.set(m.partition, list)
  }
  let outOfOrder = 0
  for (const list of byPartition.values()) {
    list.sort((a, b) => a.offset - b.offset)
    for (let i = 1; i < list.length; i++) if (Number(list[i].value) < Number(list[i - 1].value)) outOfOrder++
  }
  t.equal(outOfOrder, 0, 'offsets follow call order in every partition')
  t.same(producer.stats().queued + producer.stats().inFlight, 0, 'nothing left pending')
})

t.test('records with different acks or compression never share a request', async (t) => {
  const topic = await createTopic()
  const { raw, requests } = await spiedProducer(t)
  const producer = wrapProducer(raw, { lingerMs: 20 })
  t.teardown(() => producer.disconnect())
  const kinds = [
    { acks: -1 },
    { acks: 1 },
    { acks: -1, compression: CompressionTypes.GZIP },
    { acks: 1, timeout: 5000 },
  ]
  const sends = []
  for (let i = 0; i < 40; i++) {
    const kind = kinds[i % kinds.length]
    sends.push(producer.send({ topic, ...kind, messages: [{ value: JSON.stringify(kind) }] }))
  }
  await Promise.all(sends)
  for (const request of requests) {
    const expected = JSON.stringify({ acks: request.acks, ...(request.compression !== undefined && { compression: request.compression }), ...(request.timeout !== undefined && { timeout: request.timeout }) })
    for (const { messages } of request.topicMessages) {
      for (const message of messages) t.equal(message.value, expected, 'one kind per request')
    }
  }
  t.ok(requests.length >= kinds.length, 'at least one request per kind')
  const consumed = await consumeAll(kafka, topic, 40)
  t.equal(consumed.length, 40)
})

t.test('one request carries several topics, grouped by topic', async (t) => {
  const a = await createTopic()
  const b = await createTopic()
  const { raw, requests } = await spiedProducer(t)
  const producer = wrapProducer(raw)
  t.teardown(() => producer.disconnect())
  const results = await Promise.all([
    producer.send({ topic: a, messages: [{ value: 'a1' }] }),
    producer.send({ topic: b, messages: [{ value: 'b1' }] }),
    producer.send({ topic: a, messages: [{ value: 'a2' }, { value: 'a3', partition: 0 }] }),
    producer.sendBatch({ topicMessages: [{ topic: b, messages: [{ value: 'b2' }] }, { topic: a, messages: [{ value: 'a4' }] }] }),
  ])
  t.equal(requests.length, 1, 'one Produce request')
  t.same(requests[0].topicMessages.map(({ topic, messages }) => [topic, messages.map((m) => m.value)]),
    [[a, ['a1', 'a2', 'a3', 'a4']], [b, ['b1', 'b2']]])
  t.same(results[0].map((e) => e.topicName), [a], 'send() gets its own topic')
  t.same(results[3].map((e) => e.topicName).sort(), [a, b].sort(), 'sendBatch() gets its topics')
  // One partition: a1 is at offset 0, so this call's own first record, a2, is at 1.
  t.same(results[2].map((e) => [e.topicName, e.partition, e.baseOffset]), [[a, 0, '1']], 'its own first record\'s offset')
})

t.test('flushes on the linger, on the message cap and on the byte cap', async (t) => {
  const topic = await createTopic()

  t.test('linger: what arrives while a request is in flight goes in the next one', async (t) => {
    const { raw, requests } = await spiedProducer(t)
    const producer = wrapProducer(raw, { lingerMs: 30 })
    t.teardown(() => producer.disconnect())
    const first = producer.send({ topic, messages: [{ value: 'first' }] })
    // The first send leaves at once (nothing was in flight); these wait for it.
    await new Promise(setImmediate)
    const rest = Array.from({ length: 10 }, (_, i) => producer.send({ topic, messages: [{ value: `rest${i}` }] }))
    await Promise.all([first, ...rest])
    t.same(requests.map((r) => r.topicMessages[0].messages.length), [1, 10])
  })

  t.test('message cap', async (t) => {
    const { raw, requests } = await spiedProducer(t)
    const producer = wrapProducer(raw, { maxBatchItems: 10 })
    t.teardown(() => producer.disconnect())
    await Promise.all(Array.from({ length: 35 }, (_, i) => producer.send({ topic, messages: [{ value: `m${i}` }] })))
    const sizes = requests.map((r) => r.topicMessages[0].messages.length)
    t.ok(sizes.every((n) => n <= 10), `requests of ${sizes}`)
    t.equal(sizes.reduce((a, b) => a + b), 35)
    t.ok(sizes.length >= 4)
  })

  t.test('byte cap', async (t) => {
    const { raw, requests } = await spiedProducer(t)
    const producer = wrapProducer(raw, { maxBatchBytes: 1000 })
    t.teardown(() => producer.disconnect())
    const value = 'x'.repeat(200)
    await Promise.all(Array.from({ length: 20 }, () => producer.send({ topic, messages: [{ value }] })))
    const sizes = requests.map((r) => r.topicMessages[0].messages.length)
    t.ok(sizes.every((n) => n <= 4), `requests of ${sizes}`)
    t.equal(sizes.reduce((a, b) => a + b), 20)
  })

  t.test('flush() sends without lingering and disconnect() flushes first', async (t) => {
    const { raw } = await spiedProducer(t)
    const producer = wrapProducer(raw, { lingerMs: 60_000 })
    const first = producer.send({ topic, messages: [{ value: 'flush-0' }] })
    await new Promise(setImmediate)
    const later = producer.send({ topic, messages: [{ value: 'flush-1' }] })
    await producer.flush()
    const ack = { topicName: topic, partition: 0, errorCode: 0, baseOffset: /^\d+$/ }
    t.match(await first, [ack], 'acknowledged: its topic and partition')
    t.match(await later, [ack])
    const unawaited = Array.from({ length: 50 }, (_, i) => producer.send({ topic, messages: [{ value: `close-${i}` }] }))
    await producer.disconnect()
    const results = await Promise.allSettled(unawaited)
    t.ok(results.every((r) => r.status === 'fulfilled'), 'every send before disconnect() was delivered')
    await t.rejects(producer.send({ topic, messages: [{ value: 'late' }] }), { code: 'ERR_IO_HYGIENE_CLOSED' })
  })
})

t.test('a full queue makes send() wait for room, or reject with overflow: "reject"', async (t) => {
  const topic = await createTopic()
  const { raw } = await spiedProducer(t)
  const waiting = wrapProducer(raw, { maxQueuedItems: 5, maxBatchItems: 5 })
  const results = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => waiting.send({ topic, messages: [{ value: `w${i}` }] })))
  t.ok(results.every((r) => r.status === 'fulfilled'), 'every waiting send was delivered')
  t.equal(waiting.stats().dropped, 0)
  await waiting.flush()

  const { raw: raw2 } = await spiedProducer(t)
  const rejecting = wrapProducer(raw2, { maxQueuedItems: 5, maxBatchItems: 5, overflow: 'reject' })
  t.teardown(() => Promise.all([waiting.disconnect(), rejecting.disconnect()]))
  const settled = await Promise.allSettled(Array.from({ length: 40 }, (_, i) => rejecting.send({ topic, messages: [{ value: `r${i}` }] })))
  const rejected = settled.filter((r) => r.status === 'rejected')
  t.ok(rejected.length > 0, 'some sends found the queue full')
  t.ok(rejected.every((r) => r.reason.code === 'ERR_IO_HYGIENE_QUEUE_FULL'))
  const consumed = await consumeAll(kafka, topic, 80 - rejected.length)
  t.equal(consumed.length, 80 - rejected.length, 'exactly the accepted messages were written')
})

t.test('transactions are not batched: one begins at once, what is queued goes unlingered, its sends go straight to kafkajs', async (t) => {
  const topic = await createTopic()
  const raw = kafka.producer({ transactionalId: `txn-${process.pid}`, maxInFlightRequests: 1, idempotent: true })
  await raw.connect()
  const producer = wrapProducer(raw, { lingerMs: 60_000 })
  t.teardown(() => producer.disconnect())
  const before = producer.send({ topic, messages: [{ value: 'before' }] })
  const queued = producer.send({ topic, messages: [{ value: 'queued' }] })
  const aborted = await producer.transaction()
  // Not waited for by transaction(), and not held for the minute's linger:
  // awaited here, so that the transaction's records follow them.
  const ack = { topicName: topic, partition: 0, errorCode: 0 }
  t.match(await before, [ack])
  t.match(await queued, [ack])
  await aborted.send({ topic, messages: [{ value: 'aborted' }] })
  await aborted.abort()
  const committed = await producer.transaction()
  await committed.send({ topic, messages: [{ value: 'committed' }] })
  await committed.commit()
  await producer.send({ topic, messages: [{ value: 'after' }] })
  const consumed = await consumeAll(kafka, topic, 4)
  t.same(consumed.map((m) => m.value), ['before', 'queued', 'committed', 'after'], 'read_committed sees no aborted message, in order')
})

t.test('acks=0: kafkajs answers [] without waiting for the broker, and the message is written', async (t) => {
  const topic = await createTopic()
  const { raw, requests } = await spiedProducer(t)
  const producer = wrapProducer(raw)
  t.teardown(() => producer.disconnect())
  const direct = await raw.send({ topic, acks: 0, messages: [{ value: 'direct' }] })
  t.same(direct, [], 'what kafkajs itself answers')
  const results = await Promise.all(['a', 'b'].map((value) => producer.send({ topic, acks: 0, messages: [{ value }] })))
  t.same(results, [[], []], 'each wrapped send answers as kafkajs does')
  t.equal(requests.at(-1).acks, 0)
  const consumed = await consumeAll(kafka, topic, 3)
  t.same(consumed.map((m) => m.value).sort(), ['a', 'b', 'direct'])
})

t.test('the wrapper keeps the kafkajs producer surface', async (t) => {
  const raw = kafka.producer()
  const producer = wrapProducer(raw)
  const connects = []
  producer.on(producer.events.CONNECT, (event) => connects.push(event.type))
  await producer.connect()
  t.equal(producer.isIdempotent(), false)
  t.equal(typeof producer.logger().info, 'function')
  t.same(await producer.send({ topic: await createTopic(), messages: [] }), [], 'no messages, nothing sent')
  await producer.disconnect()
  t.same(connects, ['producer.connect'])
})

// A child process with messages queued behind a long linger, sent `signal`
// once it says "ready": its exit and its lines.
function runSignalFixture (t, topic, mode, signal = 'SIGTERM') {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'kafka-signal.js'), broker.brokers.join(','), topic, mode], { stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    })
    let out = ''
    let signalled = false
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', (chunk) => {
      out += chunk
      if (!signalled && out.includes('ready')) {
        signalled = true
        child.kill(signal)
      }
    })
    child.on('error', reject)
    child.on('close', (code, sig) => resolve({ code, signal: sig, lines: out.trim().split('\n') }))
  })
}

t.test('SIGTERM (a Kubernetes stop): every queued message is acknowledged, then the process dies of the signal', async (t) => {
  const topic = await createTopic()
  const r = await runSignalFixture(t, topic, 'default')
  t.same(r.lines, ['ready 100', 'acked 100'], '100 messages queued at the signal, all 100 acknowledged')
  t.equal(r.signal, 'SIGTERM', 'with no handler of its own, the process dies of SIGTERM')
  const consumed = await consumeAll(kafka, topic, 101)
  t.equal(consumed.length, 101, 'the first and the 100 queued are in the topic, once each')
})

t.test('SIGTERM with a handler of the application\'s own: drained, and the application decides', async (t) => {
  const topic = await createTopic()
  const r = await runSignalFixture(t, topic, 'own-handler')
  t.same(r.lines, ['ready 100', 'app got SIGTERM', 'acked 100'])
  t.equal(r.code, 0, 'not killed: it exits once the application has disconnected the producer')
  t.equal(r.signal, null)
})

t.test('flushOnSignals: false leaves SIGTERM alone: the queued messages are lost with the process', async (t) => {
  const topic = await createTopic()
  const r = await runSignalFixture(t, topic, 'off')
  t.same(r.lines, ['ready 100'])
  t.equal(r.signal, 'SIGTERM')
})

t.test('beforeExit sends what lingers: the loop ran dry with messages behind the unref\'d linger', async (t) => {
  const topic = await createTopic()
  const producer = wrapProducer(kafka.producer(), { lingerMs: 60_000 })
  await producer.connect()
  t.teardown(() => producer.disconnect())
  // The first send goes at once; the second waits out the linger behind it.
  const first = producer.send({ topic, messages: [{ value: 'first' }] })
  await new Promise(setImmediate)
  const second = producer.send({ topic, messages: [{ value: 'second' }] })
  await first
  t.equal(producer.stats().queued, 1, 'the second is still lingering')
  process.emit('beforeExit', 0)
  const [meta] = await second
  t.equal(meta.topicName, topic, 'acknowledged without waiting for the linger')
})

t.test('send() after disconnect() names the producer, not its batcher', async (t) => {
  const topic = await createTopic()
  const producer = wrapProducer(kafka.producer())
  await producer.connect()
  await producer.disconnect()
  await t.rejects(producer.send({ topic, messages: [{ value: 'late' }] }), { code: 'ERR_IO_HYGIENE_CLOSED', message: 'send(): the kafka producer is closed' })
  await t.rejects(producer.sendBatch({ topicMessages: [{ topic, messages: [{ value: 'late' }] }] }), { code: 'ERR_IO_HYGIENE_CLOSED', message: 'sendBatch(): the kafka producer is closed' })
})

t.test('io-hygiene\'s record encoder in kafkajs: every key, value and header reads back as sent, gzip too', async (t) => {
  const topic = await createTopic(1)
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'kafka-records.js'), broker.brokers.join(','), topic], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += chunk })
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const [code] = await once(child, 'close')
  t.equal(code, 0, stderr)
  const { status, encoder, sent } = JSON.parse(stdout)
  t.equal(status, 'patched', 'kafkajs runs corrected')
  t.equal(encoder, 'Record', 'its records go through io-hygiene\'s encoder')
  const consumed = await consumeAll(kafka, topic, sent.length)
  const read = (list) => list.map(({ key, value, headers }) => JSON.stringify({ key, value, headers })).sort()
  t.same(read(consumed), read(sent), `${sent.length} records, each as sent`)
})
