'use strict'

// A batch carries many callers, and each keeps its own fate: wrapProducer()
// against plain kafkajs on a real broker, the same calls made in the same
// tick on each (plain kafkajs sends each call in a request of its own; the
// wrapper sends them together), every topic read back. What one caller gets
// depends only on its own records: its topic, its partition, its record.
// The broker answers a Produce request partition by partition, as the Java
// producer reads it.
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { installKafkajsPatch } = require('../lib/kafka/kafkajs-patch')
const { startKafka } = require('./helpers/kafka-broker')

// The wrapper on the corrected kafkajs, as under install(); the oracle a
// pristine copy of the same kafkajs, loaded from elsewhere.
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

// Short kafkajs retries on both sides: plain kafkajs gives up on a
// retriable error sooner, the wrapper retries until deliveryTimeoutMs.
const RETRY = { retries: 2, initialRetryTime: 50, maxRetryTime: 200 }
let cases = 0

function outcomeOf (promise) {
  return promise.then((value) => ({ ok: true, value }), (error) => ({ ok: false, error }))
}

// Runs `calls(producer, names)` (an array of promises, made in one tick) on
// plain kafkajs and on the wrapper, each on topics of its own made from
// `topics` (name -> { numPartitions, config }), and reads every topic back.
// Returns { plain, wrapped }, each { outcomes, records: name -> records }.
async function differential (t, { topics, producer = {}, wrap = {}, partitioner, calls }) {
  const out = {}
  const id = ++cases
  for (const side of ['plain', 'wrapped']) {
    const K = side === 'plain' ? Plain.Kafka : Kafka
    const kafka = new K({ clientId: side, brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: RETRY })
    const admin = kafka.admin()
    await admin.connect()
    const names = {}
    for (const name of Object.keys(topics)) names[name] = `fate-${id}-${name}-${side}-${process.pid}`
    await createTopics(admin, Object.entries(topics).map(([name, { numPartitions = 1, config = {} }]) => ({
      topic: names[name],
      numPartitions,
      configEntries: Object.entries(config).map(([name, value]) => ({ name, value: String(value) })),
    })))
    const options = { ...producer }
    if (partitioner) options.createPartitioner = () => partitioner
    const raw = kafka.producer(options)
    await raw.connect()
    const p = side === 'plain' ? raw : wrapProducer(raw, { flushOnSignals: false, deliveryTimeoutMs: 20_000, ...wrap })
    const outcomes = await Promise.all(calls(p, names).map(outcomeOf))
    await p.disconnect()
    const records = await readBack(kafka, admin, names)
    await admin.disconnect()
    out[side] = { outcomes, records }
  }
  return out
}

// kafkajs's createTopics() polls the metadata for leaders, and fails when the
// broker has not heard of a topic yet (UNKNOWN_TOPIC_OR_PARTITION, which it
// does not retry): asked here instead until every partition has a leader.
async function createTopics (admin, topics) {
  await admin.createTopics({ topics }).catch((error) => {
    if (error.type !== 'UNKNOWN_TOPIC_OR_PARTITION') throw error
  })
  for (let attempt = 0; ; attempt++) {
    try {
      const metadata = await admin.fetchTopicMetadata({ topics: topics.map(({ topic }) => topic) })
      if (metadata.topics.every((topic) => topic.partitions.length > 0 && topic.partitions.every((p) => p.leader >= 0))) return
    } catch (error) {
      if (attempt >= 100) throw error
    }
    if (attempt >= 100) throw new Error('the topics have no leaders')
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

// Every record of each topic, by name: { partition, offset, key, value }.
async function readBack (kafka, admin, names) {
  const byTopic = new Map()
  let total = 0
  for (const [name, topic] of Object.entries(names)) {
    byTopic.set(topic, { name, records: [] })
    for (const { high, low } of await admin.fetchTopicOffsets(topic)) total += Number(high) - Number(low)
  }
  if (total > 0) {
    const consumer = kafka.consumer({ groupId: `fate-read-${++cases}-${process.pid}`, maxWaitTimeInMs: 100 })
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [...byTopic.keys()], fromBeginning: true })
      let seen = 0
      await new Promise((resolve) => {
        consumer.run({
          eachMessage: async ({ topic, partition, message }) => {
            byTopic.get(topic).records.push({ partition, offset: message.offset, key: message.key?.toString() ?? null, value: message.value?.toString() ?? null })
            if (++seen === total) resolve()
          },
        })
      })
    } finally {
      await consumer.disconnect()
    }
  }
  const out = {}
  for (const { name, records } of byTopic.values()) {
    records.sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset))
    out[name] = records
  }
  return out
}

const values = (records) => records.map((r) => r.value)
const sorted = (records) => values(records).sort()
const causeType = (error) => error?.cause?.type ?? error?.type
// A refused record's caller is told it was not written: `false`, or
// 'unknown' when an earlier request that carried it went unanswered (a
// request timing out on a loaded machine), which the broker's refusal
// cannot undo.
const notWritten = (error) => error.written === false || error.written === 'unknown'

t.test('a topic the cluster does not know fails only its own callers, well before deliveryTimeoutMs; the other topics of the batch are written', async (t) => {
  // Auto-creation off, as a producer asks for it.
  const { plain, wrapped } = await differential(t, {
    topics: { good: {} },
    producer: { allowAutoTopicCreation: false },
    calls: (p, names) => [
      p.send({ topic: `fate-missing-${process.pid}`, messages: [{ value: 'typo' }] }),
      ...[0, 1, 2].map((i) => p.send({ topic: names.good, messages: [{ value: `good-${i}` }] })),
    ],
  })
  t.equal(plain.outcomes[0].ok, false, 'plain kafkajs: the call to the missing topic rejects')
  t.equal(causeType(plain.outcomes[0].error), 'UNKNOWN_TOPIC_OR_PARTITION')
  t.same(plain.outcomes.slice(1).map((o) => o.ok), [true, true, true], 'and the good calls are written')
  t.match(wrapped.outcomes[0], { ok: false, error: { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } } },
    'the wrapper: that caller rejects with kafkajs\'s error as cause, not written (not at deliveryTimeoutMs: a delivery timeout would say so)')
  t.same(wrapped.outcomes.slice(1).map((o) => o.ok), [true, true, true], 'the good callers of the same batch resolve')
  t.same(values(wrapped.records.good), ['good-0', 'good-1', 'good-2'], 'and are written once each, in call order')
  t.same(sorted(plain.records.good), sorted(wrapped.records.good), 'as plain kafkajs wrote them')
})

t.test('a topic the producer never knew, with auto-creation not asked, rejects at the cluster\'s first answer; plain kafkajs asks again until its retries run out', async (t) => {
  const missing = `fate-never-${process.pid}`
  const counts = {}
  const outcomes = {}
  // Both in the same run, at the same moment, with kafkajs's default retry.
  await Promise.all(['plain', 'wrapped'].map(async (side) => {
    const K = side === 'plain' ? Plain.Kafka : Kafka
    const kafka = new K({ clientId: side, brokers: broker.brokers, logLevel: logLevel.NOTHING })
    const raw = kafka.producer({ allowAutoTopicCreation: false })
    await raw.connect()
    let metadata = 0
    raw.on(raw.events.REQUEST, ({ payload }) => { if (payload.apiName === 'Metadata') metadata++ })
    const p = side === 'plain' ? raw : wrapProducer(raw, { flushOnSignals: false, deliveryTimeoutMs: 60_000 })
    const before = metadata
    outcomes[side] = await outcomeOf(p.send({ topic: missing, messages: [{ value: 'x' }] }))
    counts[side] = metadata - before
    await p.disconnect()
  }))
  t.equal(causeType(outcomes.plain.error), 'UNKNOWN_TOPIC_OR_PARTITION', 'plain kafkajs rejects')
  t.match(outcomes.wrapped, { ok: false, error: { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } } }, 'the wrapper rejects, not written')
  // One attempt: the Metadata request that refused the topic, and the refresh
  // kafkajs makes before it partitions a call.
  t.ok(counts.wrapped <= 2, `the wrapper made one attempt (${counts.wrapped} Metadata requests)`)
  t.ok(counts.plain > counts.wrapped, `plain kafkajs asked ${counts.plain} times`)
})

t.test('a partition the topic does not have, or a partitioner that throws, fails only that caller, at once', async (t) => {
  // The partitioner: the partition a message names, none for key
  // "nowhere", an Error for key "boom", else by key.
  const partitioner = ({ message }) => {
    if (message.key === 'nowhere') return undefined
    if (message.key === 'boom') throw new Error('no partition for boom')
    return message.partition ?? Number(message.key)
  }
  const { plain, wrapped } = await differential(t, {
    topics: { t: { numPartitions: 3 } },
    partitioner,
    calls: (p, { t }) => [
      p.send({ topic: t, messages: [{ key: '0', value: 'a' }] }),
      p.send({ topic: t, messages: [{ key: '1', value: 'b', partition: 99 }] }),
      p.send({ topic: t, messages: [{ key: '1', value: 'c' }] }),
      p.send({ topic: t, messages: [{ key: 'nowhere', value: 'd' }] }),
      p.send({ topic: t, messages: [{ key: '2', value: 'e' }] }),
      p.send({ topic: t, messages: [{ key: 'boom', value: 'f' }] }),
      p.send({ topic: t, messages: [{ key: '0', value: 'g' }] }),
    ],
  })
  const good = [0, 2, 4, 6]
  t.same(good.map((i) => plain.outcomes[i].ok), [true, true, true, true], 'plain kafkajs writes the good calls')
  t.same([1, 3].map((i) => plain.outcomes[i].value), [[], []], 'and resolves a call it sent nowhere with no partition')
  t.match(plain.outcomes[5], { ok: false, error: { message: 'no partition for boom' } }, 'and rejects the call whose partitioner threw')
  t.same(good.map((i) => wrapped.outcomes[i].ok), [true, true, true, true], 'the wrapper writes the good callers of the batch')
  for (const i of [1, 3]) {
    t.match(wrapped.outcomes[i], { ok: false, error: { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', written: false } }, `call ${i}: rejected with a coded error, not written`)
  }
  t.match(wrapped.outcomes[5], { ok: false, error: { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { message: 'no partition for boom' } } }, 'the partitioner\'s error fails its own caller')
  t.same(wrapped.records.t.map((r) => [r.partition, r.value]), plain.records.t.map((r) => [r.partition, r.value]), 'the same records, in the same partitions')
})

t.test('each caller\'s RecordMetadata names its own partition and its own record\'s offset', async (t) => {
  const { plain, wrapped } = await differential(t, {
    topics: { t: { numPartitions: 2 } },
    calls: (p, { t }) => [
      ...Array.from({ length: 8 }, (_, i) => p.send({ topic: t, messages: [{ value: `one-${i}`, partition: 0 }] })),
      p.sendBatch({ topicMessages: [{ topic: t, messages: [{ value: 'two-a', partition: 1 }, { value: 'two-b', partition: 0 }, { value: 'two-c', partition: 1 }] }] }),
      ...Array.from({ length: 4 }, (_, i) => p.send({ topic: t, messages: [{ value: `three-${i}`, partition: 1 }] })),
    ],
  })
  for (const [side, { outcomes, records }] of [['plain kafkajs', plain], ['the wrapper', wrapped]]) {
    const at = new Map(records.t.map((r) => [`${r.partition}/${r.offset}`, r.value]))
    const firsts = outcomes.map((o) => o.value?.map((e) => `${e.partition}/${e.baseOffset}`).sort())
    const named = firsts.map((list) => list?.map((key) => at.get(key)))
    t.same(named, [
      ...Array.from({ length: 8 }, (_, i) => [`one-${i}`]),
      ['two-b', 'two-a'],
      ...Array.from({ length: 4 }, (_, i) => [`three-${i}`]),
    ], `${side}: each caller's entries point at its own first record in each partition`)
  }
})

for (const idempotent of [false, true]) {
  t.test(`a record the broker refuses fails only its caller; the rest of its partition is written once${idempotent ? ' (idempotent)' : ''}`, async (t) => {
    const { plain, wrapped } = await differential(t, {
      topics: {
        compacted: { config: { 'cleanup.policy': 'compact' } },
        bounded: { config: { 'message.timestamp.after.max.ms': 3_600_000 } },
        other: {},
      },
      producer: { idempotent },
      calls: (p, names) => {
        const out = []
        for (let i = 0; i < 24; i++) {
          out.push(p.send({ topic: names.compacted, messages: [{ key: `k${i}`, value: `c-${i}` }] }))
          if (i === 11) out.push(p.send({ topic: names.compacted, messages: [{ value: 'keyless' }] }))
          if (i % 3 === 0) out.push(p.send({ topic: names.bounded, messages: [{ value: `b-${i}` }] }))
          if (i === 13) out.push(p.send({ topic: names.bounded, messages: [{ value: 'future', timestamp: String(Date.now() + 2 * 86_400_000) }] }))
          if (i % 4 === 0) out.push(p.send({ topic: names.other, messages: [{ value: `o-${i}` }] }))
        }
        return out
      },
    })
    const plainRefused = plain.outcomes.map((o, i) => o.ok ? null : [i, causeType(o.error)]).filter(Boolean)
    t.same(plainRefused.map(([, type]) => type).sort(), ['INVALID_RECORD', 'INVALID_TIMESTAMP'], 'plain kafkajs refuses the keyless record and the one from the future')
    const refused = wrapped.outcomes.map((o, i) => o.ok ? null : i).filter((i) => i !== null)
    t.same(refused, plainRefused.map(([i]) => i), 'the wrapper refuses the same callers, and only them')
    for (const i of refused) {
      t.match(wrapped.outcomes[i].error, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED' })
      t.ok(notWritten(wrapped.outcomes[i].error), 'not written')
    }
    const expected = {
      compacted: Array.from({ length: 24 }, (_, i) => `c-${i}`),
      bounded: Array.from({ length: 8 }, (_, i) => `b-${3 * i}`),
      other: Array.from({ length: 6 }, (_, i) => `o-${4 * i}`),
    }
    for (const name of ['compacted', 'bounded', 'other']) {
      t.same(values(wrapped.records[name]), expected[name], `${name}: every good record, once, in call order`)
      t.same(sorted(plain.records[name]), sorted(wrapped.records[name]), `${name}: what plain kafkajs wrote`)
    }
  })

  t.test(`a batch too large for its topic is split, as the Java producer does, so that whatever plain kafkajs writes is written${idempotent ? ' (idempotent)' : ''}`, async (t) => {
    const { plain, wrapped } = await differential(t, {
      topics: { small: { config: { 'max.message.bytes': 2000 } }, medium: { config: { 'max.message.bytes': 5000 } } },
      producer: { idempotent },
      calls: (p, names) => {
        const out = []
        for (let i = 0; i < 20; i++) out.push(p.send({ topic: names.small, messages: [{ value: `s-${i}-`.padEnd(300, 'x') }] }))
        for (let i = 0; i < 10; i++) {
          out.push(p.send({ topic: names.medium, messages: [{ value: `m-${i}-`.padEnd(200, 'x') }] }))
          if (i === 4) out.push(p.send({ topic: names.medium, messages: [{ value: 'large-'.padEnd(8000, 'x') }] }))
        }
        return out
      },
    })
    t.same(plain.outcomes.map((o) => o.ok ? null : causeType(o.error)).filter(Boolean), ['MESSAGE_TOO_LARGE'], 'plain kafkajs refuses only the large record')
    t.same(wrapped.outcomes.map((o) => o.ok), plain.outcomes.map((o) => o.ok), 'the wrapper: each caller as plain kafkajs')
    t.match(wrapped.outcomes[25].error, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: { type: 'MESSAGE_TOO_LARGE' } })
    t.ok(notWritten(wrapped.outcomes[25].error), 'not written')
    const expected = {
      small: Array.from({ length: 20 }, (_, i) => `s-${i}-`.padEnd(300, 'x')),
      medium: Array.from({ length: 10 }, (_, i) => `m-${i}-`.padEnd(200, 'x')),
    }
    for (const name of ['small', 'medium']) {
      t.same(values(wrapped.records[name]), expected[name], `${name}: every good record, once, in call order`)
      t.same(sorted(plain.records[name]), sorted(wrapped.records[name]), `${name}: what plain kafkajs wrote`)
    }
  })
}
