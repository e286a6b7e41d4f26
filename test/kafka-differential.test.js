'use strict'

// wrapProducer() against plain kafkajs on a real broker, message shape by
// message shape (fuzzed: every type for key, value, header name and value,
// timestamp and partition; getters, Proxies, frozen and reused objects,
// prototypes). Plain kafkajs sends each shape in a call of its own; the
// wrapper sends all of them at once, among good calls to another topic.
// Each caller must get what plain kafkajs gave (the same record, or a
// refusal), and no good call may fail.
const t = require('tap')
const { random } = require('./helpers/random')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { installKafkajsPatch } = require('../lib/kafka/kafkajs-patch')
const { startKafka, consumeAll } = require('./helpers/kafka-broker')

// The wrapper runs on the corrected kafkajs, as under install(); the oracle
// is a pristine copy of the same kafkajs, loaded from elsewhere (the patch
// is put in place for the one directory, so it does not watch for others).
const undo = installKafkajsPatch({ dir: path.dirname(require.resolve('kafkajs')) })
const { Kafka, logLevel } = require('kafkajs')
const { wrapProducer } = require('../lib/kafka')
const pristineDir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafkajs-'))
fs.cpSync(path.dirname(require.resolve('kafkajs/package.json')), path.join(pristineDir, 'kafkajs'), { recursive: true })
const Plain = require(path.join(pristineDir, 'kafkajs'))

let broker
t.before(async () => {
  broker = await startKafka()
})
t.teardown(async () => {
  await broker?.close()
  undo()
  fs.rmSync(pristineDir, { recursive: true, force: true })
})

const NOW = Date.now()
const BYTES = [
  () => 'plain', () => '', () => 'héllo ✓', () => '\ud800 lone', () => Buffer.from('buf'), () => Buffer.alloc(0),
  () => new Uint8Array([53]), () => new Uint8Array([1, 2, 3]), () => new Uint8Array(0), () => new ArrayBuffer(4),
  () => new DataView(new ArrayBuffer(2)), () => 42, () => 0, () => -1.5, () => NaN, () => true, () => false,
  () => ({}), () => ({ toString: () => 'x' }), () => [], () => ['a'], () => Symbol('s'), () => 10n, () => () => 'f',
]
const NULLS = [() => null, () => undefined]
const TIMESTAMPS = [
  () => undefined, () => null, () => 0, () => NOW - 3_600_000, () => String(NOW - 60_000), () => 'abc', () => '',
  () => 1.5, () => NaN, () => -5, () => BigInt(NOW - 1000), () => 0n, () => ({}), () => ({ valueOf: () => NOW - 5000 }),
  () => true, () => false, () => Infinity, () => Symbol('t'), () => ' 12345 ', () => '0x10', () => NOW + 86_400_000,
  // Past 2^52: kafkajs's floating-point deltas would move their neighbours' timestamps.
  () => 2 ** 60, () => String(2n ** 60n), () => 1_600_000_000_123_456_789n, () => -(2 ** 61), () => 2 ** 53 - 1,
]
const PARTITIONS = [
  () => undefined, () => null, () => 0, () => '0', () => [0], () => '00', () => -1, () => 0.5, () => NaN, () => 'a',
  () => Symbol('p'), () => true, () => ({}), () => -0,
]

function generate (next) {
  const pick = (list) => list[Math.floor(next() * list.length)]()
  // Mostly what services send, so that many shapes are written.
  const field = () => pick(next() < 0.2 ? NULLS : next() < 0.7 ? BYTES.slice(0, 6) : BYTES)
  const message = {}
  if (next() < 0.6) message.key = field()
  message.value = next() < 0.1 ? pick(NULLS) : field()
  if (next() < 0.5) {
    const r = next()
    if (r < 0.05) message.headers = null
    else if (r < 0.1) message.headers = 'ab'
    else if (r < 0.15) message.headers = ['x']
    else if (r < 0.2) message.headers = 7
    else {
      message.headers = {}
      for (let h = Math.floor(next() * 3); h >= 0; h--) {
        const name = pick([() => 'n', () => 'ünï', () => '', () => String(h), () => `h${h}`])
        const value = () => pick(next() < 0.7 ? BYTES.slice(0, 6) : BYTES)
        message.headers[name] = next() < 0.25 ? [value(), value()].slice(0, 1 + Math.floor(next() * 2)) : next() < 0.1 ? pick(NULLS) : value()
      }
    }
  }
  if (next() < 0.3) message.timestamp = pick(TIMESTAMPS)
  if (next() < 0.2) message.partition = pick(PARTITIONS)
  return message
}

// How a message is handed over: as is, frozen, behind a getter (stable),
// through a Proxy, or with its fields on a prototype.
function dress (message, next) {
  const r = next()
  if (r < 0.4) return message
  if (r < 0.55) return Object.freeze(message)
  if (r < 0.7) {
    const out = {}
    for (const name of Object.keys(message)) {
      Object.defineProperty(out, name, { enumerable: true, get: () => message[name] })
    }
    return out
  }
  if (r < 0.85) return new Proxy(message, {})
  const proto = {}
  const out = Object.create(proto)
  for (const name of Object.keys(message)) {
    if (next() < 0.5) proto[name] = message[name]
    else out[name] = message[name]
  }
  return out
}

// Every record of `topic` (one partition), in order, as comparable data.
async function readAll (kafka, topic, count) {
  const out = []
  if (count === 0) return out
  const consumer = kafka.consumer({ groupId: `diff-${topic}`, maxWaitTimeInMs: 100 })
  await consumer.connect()
  try {
    await consumer.subscribe({ topic, fromBeginning: true })
    await new Promise((resolve) => {
      consumer.run({
        eachMessage: async ({ message }) => {
          const headers = {}
          for (const [name, value] of Object.entries(message.headers)) {
            headers[name] = Array.isArray(value) ? value.map((v) => v.toString('hex')) : [value.toString('hex')]
          }
          // The timestamp as kafkajs reads it, a string: exact past 2^53.
          out.push({ key: message.key?.toString('hex') ?? null, value: message.value?.toString('hex') ?? null, headers, timestamp: message.timestamp })
          if (out.length === count) resolve()
        },
      })
    })
  } finally {
    await consumer.disconnect()
  }
  return out
}

function outcomeOf (promise) {
  return promise.then((value) => ({ ok: true, value }), (error) => ({ ok: false, error }))
}

t.test('each caller gets what plain kafkajs gives it, and no other caller is affected', async (t) => {
  const plainKafka = new Plain.Kafka({ clientId: 'plain', brokers: broker.brokers, logLevel: Plain.logLevel.NOTHING })
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const topics = ['plain', 'wrapped', 'good'].map((name) => `diff-${name}-${process.pid}`)
  await admin.createTopics({ topics: topics.map((topic) => ({ topic, numPartitions: 1 })), waitForLeaders: true })
  const [plainTopic, wrappedTopic, goodTopic] = topics

  const next = random(32)
  const runs = 300
  const shapes = []
  let reused = null
  for (let i = 0; i < runs; i++) {
    // Some objects are sent twice (reused), as a heartbeat is.
    if (reused !== null && next() < 0.05) {
      shapes.push(reused)
      continue
    }
    const message = generate(next)
    shapes.push(message)
    if (next() < 0.1) reused = message
  }
  const dressed = shapes.map((message) => dress(message, next))

  // Plain kafkajs: one call per shape, one after the other.
  const plain = plainKafka.producer()
  await plain.connect()
  const expected = []
  for (const message of dressed) {
    const outcome = await outcomeOf(plain.send({ topic: plainTopic, messages: [message] }))
    // Resolved with no partition written (a partition kafkajs cannot
    // place): nothing was produced, so the wrapper may refuse it.
    expected.push(outcome.ok && outcome.value.length === 1)
  }
  await plain.disconnect()

  // The wrapper: every shape at once, each among good calls.
  const raw = kafka.producer()
  await raw.connect()
  const producer = wrapProducer(raw, { flushOnSignals: false })
  t.teardown(() => producer.disconnect())
  const calls = []
  const good = []
  for (const message of dressed) {
    for (let g = 0; g < 2; g++) good.push(producer.send({ topic: goodTopic, messages: [{ key: 'k', value: `good-${good.length}` }] }))
    calls.push(outcomeOf(producer.send({ topic: wrappedTopic, messages: [message] })))
  }
  const outcomes = await Promise.all(calls)
  const goodOutcomes = await Promise.all(good.map(outcomeOf))
  t.equal(goodOutcomes.filter((o) => !o.ok).length, 0, `all ${good.length} good calls written`)

  let differ = 0
  for (let i = 0; i < runs; i++) {
    const outcome = outcomes[i]
    if (outcome.ok !== expected[i]) {
      differ++
      if (differ <= 3) t.fail(`shape ${i} (seed 32): plain kafkajs ${expected[i] ? 'wrote it' : 'refused it'}, the wrapper ${outcome.ok ? 'wrote it' : `refused it (${outcome.error.message})`}`)
    } else if (!outcome.ok && (outcome.error.code !== 'ERR_IO_HYGIENE_INVALID_ARGUMENT' || outcome.error.written !== false)) {
      differ++
      t.fail(`shape ${i}: refused at send(), saying not written`, { error: outcome.error })
    }
  }
  t.equal(differ, 0, `${runs} shapes: each call as plain kafkajs (${expected.filter(Boolean).length} written, the rest refused)`)

  // What was written is the same, record for record.
  const written = expected.filter(Boolean).length
  const [plainRecords, wrappedRecords] = await Promise.all([readAll(kafka, plainTopic, written), readAll(kafka, wrappedTopic, written)])
  let mismatches = 0
  for (let i = 0; i < written; i++) {
    const a = plainRecords[i]
    const b = wrappedRecords[i]
    // "Now" is each request's own clock: compared only for set timestamps.
    const now = (r) => Math.abs(r.timestamp - Date.now()) < 600_000 && Math.abs(r.timestamp - NOW) < 600_000
    const same = a.key === b.key && a.value === b.value && JSON.stringify(a.headers) === JSON.stringify(b.headers) &&
      (a.timestamp === b.timestamp || (now(a) && now(b)))
    if (!same) {
      mismatches++
      if (mismatches <= 3) t.same(b, a, `record ${i} as plain kafkajs wrote it`)
    }
  }
  t.equal(mismatches, 0, `${written} records, the same bytes`)
})

t.test('by default, every message a default broker accepts is sent (alone if it must), and one it refuses is refused at send()', async (t) => {
  const plainKafka = new Plain.Kafka({ clientId: 'plain', brokers: broker.brokers, logLevel: Plain.logLevel.NOTHING, retry: { retries: 0 } })
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const topic = `large-${process.pid}`
  await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true })
  const plain = plainKafka.producer()
  await plain.connect()
  t.teardown(() => plain.disconnect())
  const raw = kafka.producer()
  await raw.connect()
  const producer = wrapProducer(raw, { flushOnSignals: false })
  t.teardown(() => producer.disconnect())

  // A record batch of one record with a value of n bytes is n + 72 bytes:
  // the broker's default message.max.bytes (1,048,588) takes n = 1,048,516.
  const largest = 1_048_516
  for (const [n, accepted] of [[1_000_000, true], [largest, true], [largest + 1, false]]) {
    const value = Buffer.alloc(n, 1)
    const theirs = await outcomeOf(plain.send({ topic, messages: [{ value }] }))
    t.equal(theirs.ok, accepted, `plain kafkajs: a value of ${n} bytes ${accepted ? 'written' : 'refused by the broker'}`)
    // Among small calls: those go on, the large one alone.
    const small = Array.from({ length: 5 }, (_, i) => producer.send({ topic, messages: [{ value: `small-${i}` }] }))
    const ours = await outcomeOf(producer.send({ topic, messages: [{ value }] }))
    small.push(...Array.from({ length: 5 }, (_, i) => producer.send({ topic, messages: [{ value: `small-${5 + i}` }] })))
    t.equal(ours.ok, accepted, `the wrapper: a value of ${n} bytes ${accepted ? 'written' : 'refused'}`)
    if (!accepted) t.match(ours.error, { code: 'ERR_IO_HYGIENE_ITEM_TOO_LARGE', written: false })
    t.equal((await Promise.allSettled(small)).filter((o) => o.status === 'rejected').length, 0, 'every small call written')
  }
})

// kafkajs writes each record's timestamp as a difference from its batch's
// first, in floating point: a timestamp past 2^53 beside others shifted them.
t.test('each record has the timestamp its own caller gave, whatever another caller in the batch gave', async (t) => {
  const plainKafka = new Plain.Kafka({ clientId: 'plain', brokers: broker.brokers, logLevel: Plain.logLevel.NOTHING })
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const [plainTopic, wrappedTopic] = ['plain', 'wrapped'].map((name) => `diff-ts-${name}-${process.pid}`)
  await admin.createTopics({ topics: [plainTopic, wrappedTopic].map((topic) => ({ topic, numPartitions: 1 })), waitForLeaders: true })
  const base = 1_600_000_000_123
  const timestamps = [
    base, 2 ** 60, base + 1, String(2n ** 60n), base + 2, 1_600_000_000_123_456_789n, String(1_600_000_000_123_456_789n),
    undefined, String(-(2n ** 61n)), -(2 ** 61), base + 3, 2 ** 52, 2 ** 52 + 1, 2 ** 53 - 1, -(2 ** 53 - 1), '0', -5, NOW,
    String(2n ** 63n - 1n), String(-(2n ** 63n)), base + 4,
  ]
  const messages = timestamps.map((timestamp, i) => timestamp === undefined ? { value: `m${i}` } : { value: `m${i}`, timestamp })
  // Plain kafkajs: each message in a call of its own.
  const plain = plainKafka.producer()
  await plain.connect()
  const expected = []
  for (const message of messages) expected.push((await outcomeOf(plain.send({ topic: plainTopic, messages: [message] }))).ok)
  await plain.disconnect()
  // The wrapper: all at once, so that they share a batch.
  const raw = kafka.producer()
  await raw.connect()
  const producer = wrapProducer(raw, { flushOnSignals: false })
  t.teardown(() => producer.disconnect())
  const outcomes = await Promise.all(messages.map((message) => outcomeOf(producer.send({ topic: wrappedTopic, messages: [message] }))))
  t.same(outcomes.map((o) => o.ok), expected, 'each call written or refused as plain kafkajs')
  const written = expected.filter(Boolean).length
  const [plainRecords, wrappedRecords] = await Promise.all([readAll(kafka, plainTopic, written), readAll(kafka, wrappedTopic, written)])
  const byValue = (records) => new Map(records.map((r) => [Buffer.from(r.value, 'hex').toString(), r.timestamp]))
  const theirs = byValue(plainRecords)
  const ours = byValue(wrappedRecords)
  for (const [i, timestamp] of timestamps.entries()) {
    if (!expected[i]) continue
    const value = `m${i}`
    // "Now" is each request's own clock.
    if (timestamp === undefined) t.ok(Math.abs(Number(ours.get(value)) - Date.now()) < 600_000, `${value}: now`)
    else t.equal(ours.get(value), theirs.get(value), `${value} (${typeof timestamp} ${timestamp}): ${theirs.get(value)}`)
  }
})

// A compressed request is what the broker sizes: what plain kafkajs writes
// compressed, the wrapper writes, and what the broker refuses fails its own
// caller alone.
t.test('compressed: each message written or refused as plain kafkajs, the others beside it written', async (t) => {
  const { CompressionTypes } = require('kafkajs')
  const plainKafka = new Plain.Kafka({ clientId: 'plain', brokers: broker.brokers, logLevel: Plain.logLevel.NOTHING })
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const [plainTopic, wrappedTopic] = ['plain', 'wrapped'].map((name) => `diff-gzip-${name}-${process.pid}`)
  await admin.createTopics({ topics: [plainTopic, wrappedTopic].map((topic) => ({ topic, numPartitions: 1 })), waitForLeaders: true })
  const next = random(39)
  const noise = (n) => {
    const out = Buffer.allocUnsafe(n)
    for (let i = 0; i < n; i++) out[i] = Math.floor(next() * 256)
    return out
  }
  const values = [
    Buffer.alloc(2 * 1024 * 1024, 'x'), // 2 MiB that compresses to a few KiB
    Buffer.from(JSON.stringify({ log: 'a'.repeat(1_500_000) })), // a 1.5 MB log line
    noise(1_048_000), // does not compress, still fits alone
    noise(1_100_000), // does not compress, too large: the broker refuses it
    'small-0', 'small-1', 'small-2', noise(300_000), noise(400_000), noise(500_000),
  ]
  const plain = plainKafka.producer()
  await plain.connect()
  const expected = []
  for (const value of values) expected.push((await outcomeOf(plain.send({ topic: plainTopic, compression: CompressionTypes.GZIP, messages: [{ value }] }))).ok)
  await plain.disconnect()
  t.same(expected, [true, true, true, false, true, true, true, true, true, true], 'plain kafkajs: all but the incompressible 1.1 MB')

  const raw = kafka.producer()
  await raw.connect()
  const producer = wrapProducer(raw, { flushOnSignals: false })
  t.teardown(() => producer.disconnect())
  const outcomes = await Promise.all(values.map((value) => outcomeOf(producer.send({ topic: wrappedTopic, compression: CompressionTypes.GZIP, messages: [{ value }] }))))
  t.same(outcomes.map((o) => o.ok), expected, 'the wrapper, all at once: each as plain kafkajs')
  t.match(outcomes[3].error, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: { type: 'MESSAGE_TOO_LARGE' } }, 'refused by the broker, for its caller alone')
  const records = await readAll(kafka, wrappedTopic, expected.filter(Boolean).length)
  const digest = (v) => require('node:crypto').createHash('sha1').update(v).digest('hex')
  t.same(records.map((r) => digest(Buffer.from(r.value, 'hex'))).sort(), values.filter((_, i) => expected[i]).map((v) => digest(Buffer.from(v))).sort(), 'each written once, as sent')
})

// kafkajs's idempotent producer makes its lock per broker as
// `locks[nodeId] || new Lock()`: a moment's Object.prototype[nodeId] was
// stored as the lock, and every later send of the wrapped producer failed
// (plain kafkajs fails before it makes the lock, and recovers): the calls
// made after the pollution is gone must be written, as plain kafkajs's are.
t.test('Object.prototype polluted for a moment under an idempotent producer: the calls made after it are written', async (t) => {
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const admin = kafka.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const topics = ['plain', 'wrapped'].map((name) => `diff-polluted-${name}-${process.pid}`)
  await admin.createTopics({ topics: topics.map((topic) => ({ topic, numPartitions: 3 })), waitForLeaders: true })
  const { execFile } = require('node:child_process')
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(__dirname, 'fixtures', 'kafka-polluted.js'), JSON.stringify([broker.brokers, topics]), path.join(pristineDir, 'kafkajs')],
      { timeout: 120_000 }, (error, stdout, stderr) => error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(JSON.parse(stdout)))
  })
  t.comment(JSON.stringify(out))
  t.same(out.wrapped.after, ['fulfilled', 'fulfilled', 'fulfilled'], 'the first calls after the pollution: written')
  t.same(out.wrapped.again, ['fulfilled', 'fulfilled', 'fulfilled'], 'and every later one')
  const records = await consumeAll(kafka, topics[1], 6)
  t.same(records.map((r) => r.value).filter((v) => v !== 'during').sort(), ['after', 'after', 'after', 'again', 'again', 'again'], 'in the topic, once each')
})

// A second copy of kafkajs, as a dependency of a dependency brings: io-hygiene
// has not corrected it (the patch is in place for the other), so the wrapper
// sends each call alone (kafka-load-order.test.js has the load orders).
t.test('a producer of a second copy of kafkajs, not corrected: each call sent alone', async (t) => {
  const plainKafka = new Plain.Kafka({ clientId: 'plain', brokers: broker.brokers, logLevel: Plain.logLevel.NOTHING })
  const producer = wrapProducer(plainKafka.producer(), { flushOnSignals: false })
  t.teardown(() => producer.disconnect())
  t.equal(producer.stats().batching, false, 'not batched')
  const kafka = new Kafka({ clientId: 'wrapped', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const ours = wrapProducer(kafka.producer(), { flushOnSignals: false })
  t.teardown(() => ours.disconnect())
  t.equal(ours.stats().batching, true, 'a producer of the corrected copy is batched')
})
