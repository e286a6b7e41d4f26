'use strict'

// A partition that keeps refusing holds back only its own later records
// (lib/kafka/lanes.js): the rest of the producer's sends go meanwhile, each
// partition keeps its order, and a batch that may have been written goes
// again exactly as it went. On kafkajs's internals with the brokers'
// answers scripted (helpers/scripted-kafka.js), which give on demand what a
// real cluster gives by chance; the same on three real nodes with one
// stopped is in kafka-cluster.test.js.
const t = require('tap')
const path = require('node:path')
const { scripted, wrapped, dir } = require('./helpers/scripted-kafka')

const { createErrorFromCode } = require(path.join(dir, 'src/protocol/error'))
const NOT_ENOUGH_REPLICAS = 19
const CLUSTER_AUTHORIZATION_FAILED = 31
const byKey = ({ message }) => Number(message.key)

// Each promise's name in the order they settle.
function tracker () {
  const settled = []
  const track = (name, promise) => promise.then(
    (value) => { settled.push(name); return value },
    (error) => { settled.push(name); throw error })
  return { settled, track }
}

const partitionsOf = (promise) => promise.then((r) => r.map((e) => e.partition), (e) => e)
const sentTo = (s, partition) => s.log.filter(([, p]) => p === partition).map(([, , , values]) => values)

t.test('a stuck partition whose batch is full (maxBatchItems) holds no other partition\'s sends', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { maxBatchItems: 4, retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 3000 } })
  const { settled, track } = tracker()
  const stuck = [0, 1, 2, 3].map((i) => track(`1-${i}`, producer.send({ topic: 't', messages: [{ key: '1', value: `1-${i}` }] })).catch((e) => e))
  await s.produced(([, p]) => p === 1)
  const healthy = await track('0-0', producer.send({ topic: 't', messages: [{ key: '0', value: '0-0' }] }))
  t.same(healthy.map((e) => e.partition), [0], 'partition 0 written')
  t.same(settled, ['0-0'], 'while partition 1\'s sends still wait')
  const errors = await Promise.all(stuck)
  t.ok(errors.every((e) => e.code === 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' && e.written === false), 'the stuck sends reject at their deadline, not written (every answer: nothing appended)')
  await producer.disconnect()
})

t.test('sends to a stuck partition pile up behind it; the other partition\'s sends are written meanwhile', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 3000 } })
  const { settled, track } = tracker()
  const stuck = [track('1-first', producer.send({ topic: 't', messages: [{ key: '1', value: '1-first' }] })).catch((e) => e)]
  await s.produced(([, p]) => p === 1)
  for (let i = 0; i < 499; i++) stuck.push(track(`1-${i}`, producer.send({ topic: 't', messages: [{ key: '1', value: `1-${i}` }] })).catch((e) => e))
  const a = await partitionsOf(track('0-a', producer.send({ topic: 't', messages: [{ key: '0', value: '0-a' }] })))
  const b = await partitionsOf(track('0-b', producer.send({ topic: 't', messages: [{ key: '0', value: '0-b' }] })))
  t.same([a, b], [[0], [0]], 'partition 0 written')
  t.same(settled, ['0-a', '0-b'], 'while partition 1\'s 500 sends still wait')
  t.ok(sentTo(s, 1).every((values) => values.length === 1 && values[0] === '1-first'), 'the later ones to partition 1 are never sent ahead of the first')
  await Promise.all(stuck)
  await producer.disconnect()
})

t.test('one stuck message holds no later message too large to share its batch', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { maxBatchBytes: 20_000, retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 3000 } })
  const { settled, track } = tracker()
  const stuck = track('1', producer.send({ topic: 't', messages: [{ key: '1', value: 'x'.repeat(12_000) }] })).catch((e) => e)
  await s.produced(([, p]) => p === 1)
  const healthy = await track('0', producer.send({ topic: 't', messages: [{ key: '0', value: 'y'.repeat(12_000) }] }))
  t.same(healthy.map((e) => e.partition), [0], 'partition 0 written')
  t.same(settled, ['0'], 'while partition 1\'s send still waits')
  await stuck
  await producer.disconnect()
})

// Partition 1 (broker 1) answers NOT_ENOUGH_REPLICAS until healed; while it
// waits, broker 2 (partition 2) fails every request for good.
function brokenBroker () {
  const state = { broken: false, healed: false }
  state.s = scripted({
    leaders: [1, 1, 2],
    script: (broker) => {
      if (broker.nodeId === 2 && state.broken) throw createErrorFromCode(CLUSTER_AUTHORIZATION_FAILED)
      if (broker.nodeId === 1 && !state.healed) return { errors: { 1: NOT_ENOUGH_REPLICAS } }
    },
  })
  return state
}

t.test('a record held back is not given the failure of a request it was not in', async (t) => {
  for (const beside of [true, false]) {
    // beside: a send to partition 0 (written) shares the failed request.
    const state = brokenBroker()
    const producer = wrapped(state.s, { partitioner: byKey, wrap: { retryBackoffMs: 200, maxRetryBackoffMs: 200, deliveryTimeoutMs: 5000 } })
    const held = partitionsOf(producer.send({ topic: 't', messages: [{ key: '1', value: '1a' }] }))
    await state.s.produced(([, p]) => p === 1)
    state.broken = true
    const written = beside ? partitionsOf(producer.send({ topic: 't', messages: [{ key: '0', value: '0a' }] })) : null
    const failed = await partitionsOf(producer.send({ topic: 't', messages: [{ key: '2', value: '2a' }] }))
    t.match(failed, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: { type: 'CLUSTER_AUTHORIZATION_FAILED' } }, 'the partition 2 send fails with its broker\'s error')
    if (beside) t.same(await written, [0], 'the partition 0 send beside it is written')
    t.equal(sentTo(state.s, 1).length, 1, 'the held send went once, before')
    state.healed = true
    t.same(await held, [1], 'the held send is written once its partition takes it')
    await producer.disconnect()
  }
})

t.test('sends to a stuck partition stay behind its earlier records; once it takes them, all are written in send order, each once', async (t) => {
  let healed = false
  const s = scripted({ leaders: [1, 1], script: () => healed ? undefined : { errors: { 1: NOT_ENOUGH_REPLICAS } } })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 200, maxRetryBackoffMs: 200, deliveryTimeoutMs: 20_000 } })
  const { settled, track } = tracker()
  const first = track('1-0', producer.send({ topic: 't', messages: [{ key: '1', value: '1-0' }] }))
  await track('0-0', producer.send({ topic: 't', messages: [{ key: '0', value: '0-0' }] }))
  // Two later batches, each with a record for partition 1 and one for 0.
  const later = []
  for (const n of [1, 2]) {
    later.push(track(`1-${n}`, producer.send({ topic: 't', messages: [{ key: '1', value: `1-${n}` }] })))
    await track(`0-${n}`, producer.send({ topic: 't', messages: [{ key: '0', value: `0-${n}` }] }))
  }
  t.same(settled, ['0-0', '0-1', '0-2'], 'partition 0\'s sends resolve while partition 1\'s wait')
  t.same(sentTo(s, 1), sentTo(s, 1).map(() => ['1-0']), 'only the first record is sent to partition 1 while it refuses')
  healed = true
  t.same(await Promise.all([first, ...later].map(partitionsOf)), [[1], [1], [1]], 'once it takes them, all resolve')
  const taken = sentTo(s, 1).slice(sentTo(s, 1).lastIndexOf(sentTo(s, 1).find((v) => v[0] === '1-0' && v.length === 1)))
  t.same(taken.flat().filter((v, i, all) => all.indexOf(v) === i), ['1-0', '1-1', '1-2'], 'in send order')
  t.same(sentTo(s, 0), [['0-0'], ['0-1'], ['0-2']], 'partition 0: each sent once')
  await producer.disconnect()
})

for (const how of ['an answer that leaves it out', 'a request timed out']) {
  t.test(`idempotent: a batch written but not answered (${how}) goes again exactly as it went, before anything newer to its partition`, async (t) => {
  // Broker 1 writes partition 1's first two requests without answering for
  // them: the producer cannot know.
    let unanswered = 2
    const s = scripted({
      leaders: [1, 1],
      idempotent: true,
      script: (broker, request) => {
        const toOne = request.topicData.some(({ partitions }) => partitions.some((p) => p.partition === 1))
        if (toOne && unanswered > 0) {
          unanswered--
          return how === 'a request timed out' ? { lost: true } : [0]
        }
      },
    })
    const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 100, maxRetryBackoffMs: 100 } })
    const sends = [producer.send({ topic: 't', messages: [{ key: '1', value: 'a' }, { key: '1', value: 'b' }, { key: '0', value: 'x' }] })]
    await s.produced(([, p]) => p === 1)
    // While it waits: newer records for both partitions.
    sends.push(producer.send({ topic: 't', messages: [{ key: '1', value: 'c' }] }))
    sends.push(producer.send({ topic: 't', messages: [{ key: '0', value: 'y' }] }))
    await Promise.all(sends)
    const one = s.log.filter(([, p]) => p === 1).map(([, , sequence, values]) => [sequence, values])
    t.same(one, [[0, ['a', 'b']], [0, ['a', 'b']], [0, ['a', 'b']], [2, ['c']]],
      'partition 1: the unanswered batch again with its sequence numbers (the broker drops the copy), until answered; then the newer record')
    const zero = s.log.filter(([, p]) => p === 0).map(([, , sequence, values]) => [sequence, values])
    t.same(zero.filter((entry, i) => i === 0 || entry[0] !== zero[i - 1][0]), [[0, ['x']], [1, ['y']]], 'partition 0: in order, a copy only with its own sequence number')
    await producer.disconnect()
  })
}

t.test('a topic not known yet holds back only its own later sends, which go in send order once it is known', async (t) => {
  const s = scripted({ leaders: [1, 1] })
  // "later" is being created: unknown to the cluster for its first asks.
  let unknown = 3
  s.cluster.addMultipleTargetTopics = async (topics) => {
    if (topics.includes('later') && unknown > 0) {
      unknown--
      throw createErrorFromCode(3)
    }
  }
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 50, maxRetryBackoffMs: 50, deliveryTimeoutMs: 5000 } })
  const first = producer.send({ topic: 'later', messages: [{ key: '0', value: 'l-0' }] })
  await producer.send({ topic: 't', messages: [{ key: '0', value: '0-0' }] })
  const second = producer.send({ topic: 'later', messages: [{ key: '0', value: 'l-1' }] })
  await producer.send({ topic: 't', messages: [{ key: '0', value: '0-1' }] })
  t.same(s.log.filter(([, , , values]) => values.includes('l-1')), [], 'not sent while its topic waits to be known')
  t.same(await Promise.all([first, second].map(partitionsOf)), [[0], [0]], 'the topic\'s sends resolve once it is known')
  const values = s.log.map(([, , , values]) => values).flat()
  t.ok(values.indexOf('l-0') < values.indexOf('l-1'), 'in send order')
  await producer.disconnect()
})

t.test('disconnect() with a timeout rejects a batch set aside to retry, saying why it waited', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 60_000, maxRetryBackoffMs: 60_000 } })
  const stuck = producer.send({ topic: 't', messages: [{ key: '1', value: 'stuck' }] })
  t.same(await partitionsOf(producer.send({ topic: 't', messages: [{ key: '0', value: 'ok' }] })), [0], 'the other partition is written meanwhile')
  await t.rejects(producer.disconnect({ timeoutMs: 50 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  await t.rejects(stuck, { code: 'ERR_IO_HYGIENE_TIMEOUT', written: false, cause: { type: 'NOT_ENOUGH_REPLICAS' } }, 'the stuck send, not written, with the broker\'s answer')
  t.equal(producer.stats().queued + producer.stats().inFlight, 0, 'nothing left behind')
})

t.test('a batch sent again with one record still held back: the other goes, and its own fate (written, or refused for good) is not the held one\'s', async (t) => {
  for (const second of ['written', 'refused']) {
    // Partition 1 (broker 1) refuses until healed; partition 2 (broker 2)
    // refuses its first request for a while, then writes or fails for good.
    let healed = false
    let calls = 0
    const s = scripted({
      leaders: [1, 1, 2],
      script: (broker) => {
        if (broker.nodeId === 1 && !healed) return { errors: { 1: NOT_ENOUGH_REPLICAS } }
        if (broker.nodeId === 2 && ++calls === 1) return { errors: { 2: NOT_ENOUGH_REPLICAS } }
        if (broker.nodeId === 2 && second === 'refused') throw createErrorFromCode(CLUSTER_AUTHORIZATION_FAILED)
      },
    })
    const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 10_000 } })
    const first = partitionsOf(producer.send({ topic: 't', messages: [{ key: '1', value: 'a1' }] }))
    await s.produced(([, p]) => p === 1)
    // One batch: b1 behind a1, b2 to the other broker.
    const b1 = partitionsOf(producer.send({ topic: 't', messages: [{ key: '1', value: 'b1' }] }))
    const b2 = partitionsOf(producer.send({ topic: 't', messages: [{ key: '2', value: 'b2' }] }))
    const other = await b2
    if (second === 'written') t.same(other, [2], 'b2 written at its second attempt, b1 still held')
    else t.match(other, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', cause: { type: 'CLUSTER_AUTHORIZATION_FAILED' } }, 'b2 refused for good at its second attempt')
    t.same(sentTo(s, 1).flat().filter((v) => v === 'b1'), [], `${second}: b1 never sent while a1 waits`)
    healed = true
    t.same(await Promise.all([first, b1]), [[1], [1]], `${second}: once partition 1 takes them, a1 and b1 are written`)
    t.same(sentTo(s, 1).flat().filter((v, i, all) => all.indexOf(v) === i), ['a1', 'b1'], `${second}: in send order`)
    await producer.disconnect()
  }
})
