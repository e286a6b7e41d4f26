'use strict'

// The idempotent producer's batches that may have been written
// (lib/kafka/sequences.js): each goes again under the producer id, epoch and
// sequence numbers it went with, and its sequence numbers are never given
// to another batch. On kafkajs's internals with the brokers' answers
// scripted (helpers/scripted-kafka.js) over a log that keeps each producer
// id's batches per partition as Kafka does. The reviewer's cases are in
// kafka-epoch-renewal.test.js and kafka-expired-sequence.test.js, and the
// batches that go again exactly as they went in kafka-idempotent-*.test.js.
const t = require('tap')
const path = require('node:path')
const { scripted, wrapped, ours, dir } = require('./helpers/scripted-kafka')

const { KafkaJSRequestTimeoutError } = require(path.join(dir, 'src/errors'))

const NOT_LEADER = 6
const REQUEST_TIMED_OUT = 7
const CORRUPT_MESSAGE = 2
const NOT_ENOUGH_REPLICAS = 19
const OUT_OF_ORDER = 45
const DUPLICATE = 46
const UNKNOWN_PRODUCER_ID = 59
const INVALID_RECORD = 87
const byKey = ({ message }) => Number(message.key)

// A partition's log as Kafka keeps a producer's batches: the same first and
// last sequence number is a copy; any other that does not follow the last is
// out of order; a producer id it has no batch of starts anywhere.
function kafkaLog () {
  const batches = new Map() // "producerId:topic:partition" -> [[first, last]]
  const written = [] // [topic, partition, value, producerId]
  function append (request, topic, p) {
    const key = `${request.producerId}:${topic}:${p.partition}`
    const list = batches.get(key) ?? []
    const last = p.firstSequence + p.messages.length - 1
    if (list.some(([a, b]) => a === p.firstSequence && b === last)) return DUPLICATE
    if (list.length > 0 && p.firstSequence !== list[list.length - 1][1] + 1) return OUT_OF_ORDER
    batches.set(key, [...list, [p.firstSequence, last]])
    for (const m of p.messages) written.push([topic, p.partition, String(m.value), request.producerId])
    return 0
  }
  const times = (value) => written.filter(([, , v]) => v === value).length
  return { append, written, times }
}

// The cluster's answers: `plan(topic, partition, request)` says what a
// partition's batch gets: undefined, appended and answered as the log says;
// a code, refused with it, nothing appended; { appended: code }, appended,
// then answered with the code; 'lose', appended and the answer lost;
// 'drop', the request lost before anything was appended; 'omit', appended
// and left out of the answer.
function brokers (log, leaders, plan) {
  return scripted({
    leaders,
    idempotent: true,
    script: (broker, request) => {
      const plans = request.topicData.flatMap(({ topic, partitions }) => partitions.map((p) => [topic, p, plan(topic, p.partition, request)]))
      if (plans.some(([, , what]) => what === 'drop')) throw new KafkaJSRequestTimeoutError('Request Produce timed out (scripted, nothing appended)')
      const errors = {}
      const appended = {}
      const omit = []
      let lost = false
      for (const [topic, p, what] of plans) {
        if (typeof what === 'number') {
          errors[p.partition] = what
          continue
        }
        const code = log.append(request, topic, p)
        if (code !== 0) errors[p.partition] = code
        if (what === 'lose') lost = true
        else if (what === 'omit') omit.push(p.partition)
        else if (what !== undefined) {
          errors[p.partition] = what.appended
          appended[p.partition] = '5'
        }
      }
      return lost ? { lost: true } : { errors, appended, omit }
    },
  })
}

// Whether `key` is seen for the first time.
function firsts () {
  const seen = new Set()
  return (key) => !seen.has(key) && seen.add(key) !== undefined
}

const values = (request) => request.topicMessages.flatMap(({ messages }) => messages.map((m) => String(m.value)))
const call = (partitions, tag, topics = ['t']) => ({ acks: -1, topicMessages: topics.map((topic) => ({ topic, messages: partitions.map((p) => ({ key: String(p), value: `${topic}${tag}${p}` })) })) })
const idsOf = (log, value) => log.written.filter(([, , v]) => v === value).map(([, , , id]) => id)

t.test('kafkajs\'s own call: after a call that gave up on a batch whose answer was lost, the partition\'s next batch goes under a fresh producer id', async (t) => {
  const log = kafkaLog()
  let losing = true
  const s = brokers(log, [1, 1], () => losing ? 'lose' : undefined)
  const send = s.make(ours, { retries: 2 })
  await t.rejects(send(call([1], 'x')), 'x: given up')
  losing = false
  await send(call([1], 'y'))
  t.equal(s.eos.initProducerIds, 1, 'a fresh producer id first')
  t.same([log.times('tx1'), log.times('ty1')], [1, 1], 'x written once (by its first request), y written: its sequence numbers were not x\'s')
  await send(call([1], 'z'))
  t.equal(s.eos.initProducerIds, 1, 'then the partition goes on under the fresh id')
  t.equal(log.times('tz1'), 1)
})

t.test('kafkajs\'s own call: a batch whose answer was lost under a producer id the producer no longer has holds no later batch of its partition', async (t) => {
  const log = kafkaLog()
  let losing = true
  const first = firsts()
  const s = brokers(log, [1, 2], (topic, partition) => {
    if (partition === 1 && losing) return 'lose'
    if (partition === 0 && first(0)) return OUT_OF_ORDER
  })
  const send = s.make(ours, { retries: 1 })
  await t.rejects(send(call([1], 'x')), 'x: given up')
  losing = false
  await send(call([0], 'y'))
  t.equal(s.eos.initProducerIds, 1, 'partition 0 renewed the producer id')
  await send(call([1], 'z'))
  t.equal(s.eos.initProducerIds, 1, 'partition 1\'s lost batch went under the old id: no renewal for it')
  t.same(['tx1', 'ty0', 'tz1'].map(log.times), [1, 1, 1])
})

t.test('wrapProducer(): batches of two topics going again under their first producer id share a request per broker, beside the new ones', async (t) => {
  const log = kafkaLog()
  const first = firsts()
  // Broker 1 leads partitions 0 to 2 of both topics, broker 2 partition 3.
  // x's first request: 0 and 1 appended, then timed out; 2 refused with
  // nothing appended. Then y, to 3: out of order under the first producer
  // id (a fresh one). x goes again: 0 and 1 under the first id (1 left out
  // of that answer once), 2 under the fresh one.
  const s = brokers(log, [1, 1, 1, 2], (topic, partition, request) => {
    if (partition === 3) return request.producerId === 7 ? OUT_OF_ORDER : undefined
    if (first(`${topic}${partition}`)) return [{ appended: REQUEST_TIMED_OUT }, { appended: REQUEST_TIMED_OUT }, NOT_ENOUGH_REPLICAS][partition]
    if (partition === 1 && request.producerId === 7 && first(`omit ${topic}`)) return 'omit'
  })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 50, maxRetryBackoffMs: 50 } })
  const batch = call([0, 1, 2], 'x', ['t', 'u'])
  const x = producer.sendBatch(batch)
  await s.produced(() => true)
  const y = producer.send({ topic: 't', messages: [{ key: '3', value: 'y' }] })
  t.equal((await x).length, 6, 'x written')
  t.same((await y)[0].partition, 3, 'y written')
  t.same(values(batch).map(log.times), new Array(6).fill(1), 'each record once')
  t.same(values(batch).map((v) => idsOf(log, v)[0]), [7, 7, 8, 7, 7, 8], 'each under the producer id of its first append')
  t.equal(s.eos.initProducerIds, 1)
  await producer.disconnect()
})

t.test('wrapProducer(): a refusal that appended nothing leaves the sequence numbers free; one that may have appended keeps them', async (t) => {
  const log = kafkaLog()
  const first = firsts()
  const s = brokers(log, [1, 1, 1, 1], (topic, partition) => first(partition) ? [CORRUPT_MESSAGE, { appended: NOT_LEADER }, NOT_ENOUGH_REPLICAS, INVALID_RECORD][partition] : undefined)
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 1, maxRetryBackoffMs: 1 } })
  const sends = [0, 1, 2, 3].map((p) => producer.send({ topic: 't', messages: [{ key: String(p), value: `v${p}` }] }).then((r) => r[0].partition, (e) => e))
  const [corrupt, moved, few, invalid] = await Promise.all(sends)
  t.match(corrupt, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false }, 'a corrupt message: refused, not written')
  t.match(invalid, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false }, 'an invalid record: refused, not written')
  t.same([moved, few], [1, 2], 'the others written')
  t.same(['v0', 'v1', 'v2', 'v3'].map(log.times), [0, 1, 1, 0], 'each once: the one its leader appended went again as it went, and the broker dropped the copy')
  t.equal(s.eos.initProducerIds, 0, 'no fresh producer id')
  await producer.disconnect()
})

t.test('wrapProducer(): part of a batch that may have been written (the rest expired) does not go as a batch of its own', async (t) => {
  const log = kafkaLog()
  const state = { lose: true, isrDown: false }
  const s = brokers(log, [1, 1], (topic, partition) => {
    if (state.isrDown) return NOT_ENOUGH_REPLICAS
    if (partition === 1 && state.lose) {
      state.lose = false
      state.isrDown = true
      return 'lose'
    }
  })
  // z keeps the producer's one request in flight while a, then b, queue
  // behind it: one batch, whose records' deadlines are apart by more than a
  // backoff.
  let release
  let started
  const holding = new Promise((resolve) => { release = resolve })
  const inFlight = new Promise((resolve) => { started = resolve })
  const broker = s.brokers.get(1)
  const produce = broker.produce
  broker.produce = async function (request) {
    if (this.calls === 0) {
      started()
      await holding
    }
    return produce.call(this, request)
  }
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 10, maxRetryBackoffMs: 10, deliveryTimeoutMs: 500 } })
  const z = producer.send({ topic: 't', messages: [{ key: '0', value: 'z' }] })
  await inFlight
  const a = producer.send({ topic: 't', messages: [{ key: '1', value: 'a' }] }).catch((e) => e)
  await new Promise((resolve) => setTimeout(resolve, 200))
  const b = producer.send({ topic: 't', messages: [{ key: '1', value: 'b' }] }).catch((e) => e)
  release()
  await z
  // a and b written, the answer lost; then too few replicas until a's deadline.
  t.match(await a, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' }, 'a: maybe written')
  state.isrDown = false
  // b alone under a and b's sequence numbers: the broker holds a and b, so
  // b is out of order there, and rejects (or its deadline came first).
  t.match(await b, { written: 'unknown' }, 'b rejects, maybe written')
  t.equal(log.times('b'), 1, 'b written once, by the batch it went in')
  t.same(await producer.send({ topic: 't', messages: [{ key: '1', value: 'c' }] }).then((r) => r[0].partition), 1, 'the next send to the partition resolves')
  t.equal(log.times('c'), 1, 'and is written')
  await producer.disconnect()
})

t.test('wrapProducer(): a batch going again under its first producer id, which the broker no longer knows, is not in the log: it goes as a new batch', async (t) => {
  const log = kafkaLog()
  const first = firsts()
  // Partition 1's first request lost before anything was appended; the
  // broker forgets producer id 7 on partition 1; partition 0 out of order once.
  const s = brokers(log, [1, 2], (topic, partition, request) => {
    if (partition === 1 && first(1)) return 'drop'
    if (partition === 0 && first(0)) return OUT_OF_ORDER
    if (partition === 1 && request.producerId === 7) return UNKNOWN_PRODUCER_ID
  })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 50, maxRetryBackoffMs: 50 } })
  const x = producer.send({ topic: 't', messages: [{ key: '1', value: 'x' }] })
  await s.produced(() => true)
  const y = producer.send({ topic: 't', messages: [{ key: '0', value: 'y' }] })
  t.same((await Promise.all([x, y])).map((r) => r[0].partition), [1, 0], 'both resolve')
  t.same(['x', 'y'].map(log.times), [1, 1], 'each written once')
  t.ok(idsOf(log, 'x')[0] > 7, 'x under a fresh producer id')
  await producer.disconnect()
})

t.test('keepAsWent(): a partition sends only the first batch of its messages that went under one, in order; a muted message is left alone', async (t) => {
  const { keepAsWent, EXCLUDED } = require('../lib/kafka/sequences')
  const first = { count: 2 }
  const second = { count: 1 }
  const messages = ['new', 'a', 'other', 'b', 'muted']
  const partitions = [0, 0, 0, 0, 1]
  const position = [0, 1, 2, 3, undefined]
  const perPartition = [messages.slice(0, 4), null]
  const sentAs = new Map([[1, first], [2, second], [3, first], [4, second]])
  const chosen = keepAsWent(sentAs, messages, perPartition, partitions, position)
  t.same(Array.from(chosen), [[0, first]], 'partition 0 goes as the first batch went')
  t.same(perPartition[0], ['a', 'b'], 'with its records only')
  t.same(position, [EXCLUDED, 0, EXCLUDED, 1, undefined], 'the others wait')
  t.equal(perPartition[1], null, 'a muted partition is left alone')
  t.equal(keepAsWent(new Map([[4, second]]), messages, perPartition, partitions, position), null, 'only muted: nothing goes again')
})
