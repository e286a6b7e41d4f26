'use strict'

// The corrected produce retry (lib/kafka/send-messages.js) against kafkajs's own,
// on kafkajs's real retrier and response parsing with a scripted cluster: a
// leader that moves to a broker that already answered, a request still in
// flight when another fails, a broker that lost the producer's sequence
// state. The same on a real cluster: kafka-cluster.test.js.
const t = require('tap')
const path = require('node:path')
const { kOutcome, createSendMessagesFactory } = require('../lib/kafka/send-messages')

const dir = path.dirname(require.resolve('kafkajs'))
const original = require(path.join(dir, 'src/producer/sendMessages.js'))
const { createErrorFromCode } = require(path.join(dir, 'src/protocol/error'))
const { scripted, wrapped, ours, createRetry } = require('./helpers/scripted-kafka')

const NOT_LEADER = 6
const OUT_OF_ORDER = 45
const MESSAGE_TOO_LARGE = 10
const NOT_ENOUGH_REPLICAS = 19
const INVALID_RECORD = 87

const request = (partitions = [0, 1], acks = -1) => ({
  acks,
  topicMessages: [{ topic: 't', messages: partitions.flatMap((p) => [{ key: String(p), value: `${p}a` }, { key: String(p), value: `${p}b` }]) }],
})
const covered = (result) => result.map((e) => e.partition).sort()

t.test('a partition whose leader moved to a broker that already answered is sent again, not acknowledged unwritten', async (t) => {
  // Partition 1's leader, broker 2, says it no longer leads: it moved to
  // broker 1, which had answered for partition 0.
  const setup = () => scripted({
    leaders: [1, 2],
    script: (broker, _, call) => {
      if (broker.nodeId === 2 && call === 1) throw createErrorFromCode(NOT_LEADER)
    },
    onRefresh: (leaders) => { leaders[1] = 1 },
  })
  const theirs = setup()
  const acked = await theirs.make(original)(request())
  t.same(covered(acked), [0], 'kafkajs 2.2.4 resolves without partition 1 (tulios/kafkajs#1798)')
  t.notOk(theirs.log.some(([, p]) => p === 1), 'and never wrote it')

  const fixed = setup()
  const result = await fixed.make(ours)(request())
  t.same(covered(result), [0, 1], 'the result covers every partition')
  t.same(fixed.log.map(([node, p, , values]) => [node, p, values]), [[1, 0, ['0a', '0b']], [1, 1, ['1a', '1b']]], 'each written once, partition 1 by its new leader')
})

t.test('a retry waits for every request of the attempt: nothing is sent twice while in flight', async (t) => {
  // Broker 1 answers late; broker 2 fails at once.
  const setup = () => scripted({
    leaders: [1, 2],
    script: async (broker, _, call) => {
      if (broker.nodeId === 1 && call === 1) await new Promise((resolve) => setTimeout(resolve, 50))
      if (broker.nodeId === 2 && call === 1) throw createErrorFromCode(NOT_LEADER)
    },
  })
  const theirs = setup()
  await theirs.make(original)(request())
  // Its first request to broker 1 is still in flight when the call resolves.
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.equal(theirs.log.filter(([, p]) => p === 0).length, 2, 'kafkajs 2.2.4 writes partition 0 twice')
  const fixed = setup()
  const result = await fixed.make(ours)(request())
  t.same(covered(result), [0, 1])
  t.equal(fixed.log.filter(([, p]) => p === 0).length, 1, 'partition 0 written once')
})

t.test('partitions are assigned once: a retry sends each message to the same partition', async (t) => {
  let counter = 0
  const s = scripted({
    leaders: [1, 2],
    script: (broker, _, call) => {
      if (broker.nodeId === 2 && call === 1) throw createErrorFromCode(NOT_LEADER)
    },
  })
  // A round robin, as kafkajs's for keyless messages.
  const send = ours({
    logger: { debug () {}, error () {}, warn () {} },
    cluster: s.cluster,
    eosManager: s.eos,
    partitioner: () => counter++ % 2,
    retrier: createRetry({ initialRetryTime: 1, maxRetryTime: 5, retries: 3 }),
  })
  await send({ acks: -1, topicMessages: [{ topic: 't', messages: ['a', 'b', 'c', 'd'].map((value) => ({ value })) }] })
  t.same(s.log.map(([, p, , values]) => [p, values]), [[0, ['a', 'c']], [1, ['b', 'd']]], 'b and d kept partition 1')
})

t.test('an idempotent producer whose sequence state broke gets a fresh producer id and goes on', async (t) => {
  for (const code of [OUT_OF_ORDER, 59]) {
    const s = scripted({
      idempotent: true,
      leaders: [1, 2],
      script: (broker, _, call) => {
        if (broker.nodeId === 2 && call === 1) throw createErrorFromCode(code)
      },
    })
    const result = await s.make(ours)(request())
    t.same(covered(result), [0, 1], `error ${code}: every partition written`)
    t.equal(s.eos.initProducerIds, 1, 'one fresh producer id')
    t.same(s.log.find(([node]) => node === 2).slice(2, 3), [0], 'sequence numbers start again at 0')
  }
})

t.test('a response that does not cover a partition of its request: that partition is sent again', async (t) => {
  const s = scripted({ leaders: [1, 1], script: (broker, _, call) => call === 1 ? [1] : undefined })
  const result = await s.make(ours)(request())
  t.same(covered(result), [0, 1])
  t.same(s.log.map(([, p]) => p), [0, 1, 0], 'partition 0 once more')
})

t.test('giving up: the error says which messages were not acknowledged, and their partitions', async (t) => {
  const s = scripted({ leaders: [1, 2], script: (broker) => { if (broker.nodeId === 2) throw createErrorFromCode(NOT_LEADER) } })
  const req = request()
  const error = await s.make(ours, { retries: 2 })(req).catch((e) => e)
  t.equal(error.name, 'KafkaJSNumberOfRetriesExceeded')
  const { assigned, pending, entries } = error[kOutcome]
  t.same(assigned.get(req.topicMessages[0].messages), [0, 0, 1, 1], 'each message\'s partition, by position')
  t.same([...pending.keys()], ['t\u00001'], 'the partition not acknowledged')
  t.same(entries.map((e) => e.partition), [0], 'what was written')
  t.equal(s.cluster.refreshes, 3, 'metadata refreshed after each failed attempt')
})

t.test('an error a caller must see is not retried', async (t) => {
  const s = scripted({ leaders: [1, 2], script: (broker) => { if (broker.nodeId === 2) throw createErrorFromCode(MESSAGE_TOO_LARGE) } })
  const error = await s.make(ours)(request()).catch((e) => e)
  t.equal(error.type, 'MESSAGE_TOO_LARGE')
  t.equal(s.brokers.get(2).calls, 1, 'sent once')
  t.same([...error[kOutcome].pending.keys()], ['t\u00001'])
})

t.test('acks=0: done when sent, no results', async (t) => {
  const s = scripted({ leaders: [1, 2] })
  t.same(await s.make(ours)(request([0, 1], 0)), [])
  t.equal(s.log.length, 2)
})

t.test('no metadata yet, a disconnected cluster, a closed connection: retried as kafkajs does', async (t) => {
  const s = scripted({ leaders: [1, 2] })
  let calls = 0
  const find = s.cluster.findTopicPartitionMetadata
  s.cluster.findTopicPartitionMetadata = (topic) => ++calls === 1 ? [] : find(topic)
  t.same(covered(await s.make(ours)(request())), [0, 1], 'after KafkaJSMetadataNotLoaded')

  const d = scripted({
    leaders: [1, 2],
    script: (broker, _, call) => {
      if (broker.nodeId === 1 && call === 1) {
        d.cluster.connected = false
        throw Object.assign(new Error('closed'), { name: 'KafkaJSConnectionClosedError', retriable: true, host: '127.0.0.1', port: 1 })
      }
    },
  })
  let removed = 0
  d.cluster.removeBroker = () => { removed++ }
  t.same(covered(await d.make(ours)(request())), [0, 1], 'after a reconnect')
  t.equal(removed, 1, 'the closed broker removed')
  t.ok(d.cluster.connected)

  const r = scripted({
    leaders: [1, 2],
    script: (broker, _, call) => {
      if (call === 1) throw Object.assign(new Error('odd'), { retriable: true })
    },
  })
  t.same(covered(await r.make(ours)(request())), [0, 1], 'any retriable error')
})

t.test('in a transaction: partitions added to it before they are written; a broken sequence is the caller\'s to see', async (t) => {
  const s = scripted({ leaders: [1, 2], transactional: true, idempotent: true })
  t.same(covered(await s.make(ours)(request())), [0, 1])
  t.same(s.eos.added.sort(), [[['t', [0]]], [['t', [1]]]])
  const broken = scripted({
    leaders: [1, 2],
    transactional: true,
    idempotent: true,
    script: (broker) => { if (broker.nodeId === 2) throw createErrorFromCode(OUT_OF_ORDER) },
  })
  const error = await broken.make(ours)(request()).catch((e) => e)
  t.equal(error.type, 'OUT_OF_ORDER_SEQUENCE_NUMBER', 'no fresh producer id: that would abandon the transaction')
  t.equal(broken.eos.initProducerIds, 0)
})

t.test('the grouping and the partitions read own properties only: a polluted Object.prototype sends nothing astray', async (t) => {
  const { groupMessagesPerPartition } = require('../lib/kafka/kafkajs-known')
  const polluted = []
  Object.prototype[0] = polluted // eslint-disable-line no-extend-native
  t.teardown(() => { delete Object.prototype[0] })
  const partitionMetadata = [{ partitionId: 0, leader: 1 }, { partitionId: 1, leader: 2 }]
  const messages = [{ key: '0', value: 'a' }, { key: '1', value: 'b' }]
  const grouped = groupMessagesPerPartition({ topic: 't', partitionMetadata, messages, partitioner: ({ message }) => Number(message.key) })
  t.same(Object.keys(grouped), ['0', '1'], 'every partition an own key')
  t.same(grouped[0], [messages[0]])
  const s = scripted({ leaders: [1, 2] })
  const result = await s.make(ours)(request())
  t.same(covered(result), [0, 1], 'every partition acknowledged')
  t.same(s.log.map(([node, p]) => [node, p]).sort(), [[1, 0], [2, 1]], 'partition 0 written too')
  t.same(polluted, [], 'nothing went into the prototype\'s array')
})

t.test('one message object sent twice, one copy refused at first: each copy written once, each call with its own partition', async (t) => {
  // Broker 2, partition 1's leader, fails until kafkajs gives up once.
  const s = scripted({
    leaders: [1, 2],
    script: (broker, _, call) => {
      if (broker.nodeId === 2 && call <= 2) throw createErrorFromCode(NOT_LEADER)
    },
  })
  let counter = 0
  // A round robin, as kafkajs's for keyless messages: the copies go to partitions 0 and 1.
  const producer = wrapped(s, { partitioner: ({ message }) => message.partition ?? counter++ % 2 })
  const heartbeat = { value: 'heartbeat' }
  const results = await Promise.all([producer.send({ topic: 't', messages: [heartbeat] }), producer.send({ topic: 't', messages: [heartbeat] })])
  t.same(s.log.map(([, p, , values]) => [p, values]), [[0, ['heartbeat']], [1, ['heartbeat']]], 'written twice, once per send')
  t.same(results.map((r) => r.map((e) => e.partition)), [[0], [1]], 'each send resolves with its own partition')
  await producer.disconnect()
})

t.test('each send of a batch resolves with its own partition\'s RecordMetadata, as kafkajs\'s send() does', async (t) => {
  const s = scripted({ leaders: [1, 2] })
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key) })
  const results = await Promise.all(['0', '1', '1'].map((key) => producer.send({ topic: 't', messages: [{ key, value: key }] })))
  t.same(results.map((r) => r.map((e) => e.partition)), [[0], [1], [1]])
  t.ok(Object.isFrozen(results[1]) && Object.isFrozen(results[2][0]), 'frozen, entries too')
  t.same(results.map((r) => r[0].baseOffset), ['0', '0', '1'], 'each caller its own record\'s offset: the partition batch\'s base offset + its place in the batch')
  const both = await producer.sendBatch({ topicMessages: [{ topic: 't', messages: [{ key: '1', value: 'x' }, { key: '0', value: 'y' }] }] })
  t.same(both.map((e) => e.partition), [1, 0], 'a call of several: the partitions of its messages')
  const blind = await Promise.all(['0', '1'].map((key) => producer.send({ topic: 't', acks: 0, messages: [{ key, value: key }] })))
  t.same(blind, [[], []], 'acks=0: no RecordMetadata, once the request went out')
  t.equal(s.log.flatMap(([, , , values]) => values).length, 7, 'every message written')
  await producer.disconnect()
})

t.test('an error kafkajs throws again carries nothing of an earlier call: no message taken for written on its word', async (t) => {
  // Not retried by kafkajs, retried by wrapProducer() (its cause is
  // retriable); thrown again by the next call before it assigns anything,
  // as kafkajs hands one connection error to every request in flight.
  const shared = createErrorFromCode(MESSAGE_TOO_LARGE)
  shared.cause = { retriable: true }
  let failures = 0
  const s = scripted({
    leaders: [1, 2],
    script: (broker) => {
      if (broker.nodeId === 2 && failures++ === 0) throw shared
    },
  })
  let calls = 0
  const refresh = s.cluster.refreshMetadataIfNecessary
  s.cluster.refreshMetadataIfNecessary = async function () {
    if (++calls === 2) throw shared
    return refresh.call(this)
  }
  const producer = wrapped(s, { partitioner: ({ message }) => message.partition ?? Number(message.key) })
  const results = await Promise.all(['0', '1'].map((key) => producer.send({ topic: 't', messages: [{ key, value: key }] })))
  t.same(s.log.map(([, p, , values]) => [p, values]), [[0, ['0']], [1, ['1']]], 'partition 1 written, by the third call')
  t.same(results.map((r) => r.map((e) => e.partition)), [[0], [1]])
  await producer.disconnect()
})

t.test('a partition without a leader (an election under way) waits, with fresh metadata, for the next attempt', async (t) => {
  const s = scripted({ leaders: [1, -1], onRefresh: (leaders) => { leaders[1] = 2 } })
  const result = await s.make(ours)(request())
  t.same(covered(result), [0, 1])
  t.same(s.log.map(([node, p]) => [node, p]), [[1, 0], [2, 1]], 'partition 1 sent once it had a leader')
  t.equal(s.cluster.refreshes, 1)
})

t.test('the result lists the partitions in kafkajs\'s order, whichever broker answers first', async (t) => {
  // Partitions 0..2 led by brokers 3, 1, 2; broker 1 answers last.
  const setup = () => scripted({
    leaders: [3, 1, 2],
    script: async (broker) => {
      if (broker.nodeId === 1) await new Promise((resolve) => setTimeout(resolve, 20))
    },
  })
  const theirs = await setup().make(original)(request([0, 1, 2]))
  const result = await setup().make(ours)(request([0, 1, 2]))
  t.same(result.map((e) => e.partition), theirs.map((e) => e.partition), 'by leader node id, as kafkajs 2.2.4')
})

// The lock kafkajs's idempotent producer made from a polluted
// Object.prototype (kafka-differential.test.js has the real one): a fresh
// producer id, and the attempt retried; anything else is kafkajs's to say.
t.test('a broker lock that is not a lock: a retriable error, then a fresh producer id before the next lock; any other failure unchanged', async (t) => {
  const { unpoisoned } = require('../lib/kafka/unpoisoned')
  const make = ({ transactional = false, errors }) => {
    const calls = { inits: 0, acquired: 0 }
    const eos = {
      calls,
      isInitialized: () => true,
      isTransactional: () => transactional,
      initProducerId: async () => { calls.inits++ },
      acquireBrokerLock: async () => {
        const error = errors.shift()
        if (error) throw error
        calls.acquired++
      },
      releaseBrokerLock () { return this.isInitialized() },
    }
    return eos
  }
  const poisoned = make({ errors: [new TypeError('brokerMutexLocks[broker.nodeId].acquire is not a function')] })
  const guarded = unpoisoned(poisoned, dir)
  await t.rejects(guarded.acquireBrokerLock({ nodeId: 1 }), { name: 'KafkaJSError', retriable: true, cause: { name: 'TypeError' } })
  t.equal(poisoned.calls.inits, 0, 'not while the attempt\'s other requests may hold locks')
  await Promise.all([guarded.acquireBrokerLock({ nodeId: 1 }), guarded.acquireBrokerLock({ nodeId: 2 })])
  t.same(poisoned.calls, { inits: 1, acquired: 2 }, 'the next attempt: one fresh producer id, before any lock')
  t.equal(guarded.releaseBrokerLock({ nodeId: 1 }), true, 'the rest is kafkajs\'s own')
  for (const [what, eos] of [['a lock timeout', make({ errors: [new Error('lock timeout')] })], ['a transactional producer', make({ transactional: true, errors: [new TypeError('x')] })]]) {
    const own = unpoisoned(eos, dir)
    await t.rejects(own.acquireBrokerLock({ nodeId: 1 }), { message: /lock timeout|x/ }, `${what}: its own error`)
    await own.acquireBrokerLock({ nodeId: 1 })
    t.equal(eos.calls.inits, 0, `${what}: no fresh producer id`)
  }
})

t.test('a response is read partition by partition: one written is never sent again, one refused for a while goes again alone, with its own sequence numbers', async (t) => {
  // Both partitions led by broker 1; its first answer refuses partition 1
  // (too few in-sync replicas, retriable) and writes partition 0.
  for (const idempotent of [false, true]) {
    const s = scripted({
      leaders: [1, 1],
      idempotent,
      script: (broker, _, call) => call === 1 ? { errors: { 1: NOT_ENOUGH_REPLICAS } } : undefined,
    })
    const result = await s.make(ours)(request())
    t.same(covered(result), [0, 1], 'the call resolves once both are written')
    t.same(s.log.map(([node, p, seq, values]) => [p, idempotent ? seq : 0, values]), [
      [0, 0, ['0a', '0b']], [1, 0, ['1a', '1b']],
      [1, 0, ['1a', '1b']],
    ], `partition 0 sent once; partition 1 again alone${idempotent ? ', with the sequence numbers the broker refused' : ''}`)
    if (idempotent) t.same([s.eos.getSequence('t', 0), s.eos.getSequence('t', 1)], [2, 2], 'each partition\'s next sequence is past its own records')
  }
})

t.test('a partition refused for what it holds fails alone: the others are written, and wrapProducer() is told which', async (t) => {
  const s = scripted({ leaders: [1, 1], idempotent: true, script: (broker, _, call) => call === 1 ? { errors: { 1: INVALID_RECORD } } : undefined })
  const error = await s.make(ours)(request()).catch((e) => e)
  t.equal(error.type, 'INVALID_RECORD', 'kafkajs\'s own callers: the call fails with the partition\'s error')
  t.same(s.log.map(([, p]) => p), [0, 1], 'nothing sent twice')
  t.same(error[kOutcome].entries.map((e) => e.partition), [0], 'partition 0 written')
  t.same([...error[kOutcome].refused.keys()], ['t\u00001'], 'partition 1 refused, alone')
  t.same([s.eos.getSequence('t', 0), s.eos.getSequence('t', 1)], [2, 0], 'the refused batch\'s sequence numbers given back')
})

t.test('wrapProducer(): a partition refused for a while holds none of its batch-mates, and goes again alone', async (t) => {
  // Both partitions led by broker 1; partition 1 has too few in-sync
  // replicas until `healed`.
  let healed = false
  const s = scripted({ leaders: [1, 1], script: () => healed ? undefined : { errors: { 1: NOT_ENOUGH_REPLICAS } } })
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key) })
  const settled = []
  const sends = ['0', '1', '0'].map((key, i) => producer.send({ topic: 't', messages: [{ key, value: `${key}-${i}` }] })
    .then((value) => { settled.push(i); return value }))
  await Promise.race(sends)
  await Promise.all([sends[0], sends[2]])
  t.same(settled, [0, 2], 'the callers of partition 0 resolve while partition 1 is still refused')
  healed = true
  const result = await sends[1]
  t.same(result.map((e) => e.partition), [1], 'partition 1\'s caller resolves once it is written')
  const writes = s.log.map(([, p, , values]) => [p, values])
  t.same(writes.filter(([p]) => p === 0), [[0, ['0-0', '0-2']]], 'partition 0 sent once')
  t.same(writes.filter(([p]) => p === 1).at(-1), [1, ['1-1']], 'partition 1 sent again alone')
  await producer.disconnect()
})

t.test('wrapProducer()\'s calls: a topic the cluster refuses fails only its own messages, alone or among others', async (t) => {
  const { createErrorFromCode: fromCode } = require(path.join(dir, 'src/protocol/error'))
  const s = scripted({ leaders: [1, 1] })
  // The cluster refuses topic "missing", and fails once for a reason of its own.
  let hiccup = true
  s.cluster.addMultipleTargetTopics = async (topics) => {
    if (hiccup && topics.includes('other')) {
      hiccup = false
      throw Object.assign(new Error('metadata hiccup'), { name: 'KafkaJSConnectionError', retriable: true })
    }
    if (topics.includes('missing')) throw fromCode(3)
  }
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key) })
  const [missing, good] = await Promise.allSettled([
    producer.send({ topic: 'missing', messages: [{ key: '0', value: 'm' }] }),
    producer.send({ topic: 't', messages: [{ key: '0', value: 'g' }] }),
  ])
  t.match(missing.reason, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } })
  t.equal(good.status, 'fulfilled', 'the other topic of the batch is written')
  await t.rejects(producer.send({ topic: 'missing', messages: [{ key: '0', value: 'alone' }] }), { written: false, cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } }, 'alone in its batch')
  t.same(await producer.send({ topic: 'other', messages: [{ key: '1', value: 'o' }] }).then((r) => r.map((e) => e.partition)), [1], 'a metadata error of another kind is retried')
  t.same(s.log.map(([, , , values]) => values), [['g'], ['o']], 'nothing sent for the missing topic')
  await producer.disconnect()
})

t.test('the Produce request goes through the broker\'s own connection pool; a closed connection disconnects the broker, as kafkajs does', async (t) => {
  const s = scripted({ leaders: [0] })
  const { KafkaJSConnectionClosedError } = require(path.join(dir, 'src/errors'))
  let disconnects = 0
  let sends = 0
  const real = {
    nodeId: 0,
    lookupRequest: (apiKey, definition) => definition.protocol({ version: 7 }),
    connectionPool: {
      async send ({ request, response }) {
        if (++sends === 1) throw new KafkaJSConnectionClosedError('closed', { host: '127.0.0.1', port: 1 })
        t.equal(request.apiVersion, 7)
        return response.parse({ topics: [{ topicName: 't', partitions: [{ partition: 0, errorCode: 0, baseOffset: '5', logAppendTime: '-1', logStartOffset: '0' }] }] })
      },
    },
    async disconnect () { disconnects++ },
  }
  s.cluster.findBroker = async () => real
  const result = await s.make(ours)({ acks: -1, topicMessages: [{ topic: 't', messages: [{ key: '0', value: 'x' }] }] })
  t.same(result.map((e) => [e.partition, e.baseOffset]), [[0, '5']])
  t.equal(disconnects, 1, 'the broker disconnected after the closed connection, then sent again')
})

t.test('wrapProducer()\'s calls: a topic the producer has had metadata for is not refused when a node says it does not know it (yet): retried', async (t) => {
  const { createErrorFromCode: fromCode } = require(path.join(dir, 'src/protocol/error'))
  const s = scripted({ leaders: [1, 1] })
  s.cluster.targetTopics.add('t')
  // A node restarted a moment ago: it has not heard of "t" yet, once.
  let fresh = true
  s.cluster.addMultipleTargetTopics = async () => {
    if (fresh) {
      fresh = false
      throw fromCode(3)
    }
  }
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key) })
  const result = await producer.send({ topic: 't', messages: [{ key: '0', value: 'x' }] })
  t.same(result.map((e) => e.partition), [0], 'written once the node knows it')
  await producer.disconnect()
})

t.test('wrapProducer()\'s calls: a topic refused stays aside on the next attempts, and a failure of another kind while finding it is retried', async (t) => {
  const { createErrorFromCode: fromCode } = require(path.join(dir, 'src/protocol/error'))
  // Partition 0's leader is not the leader, once: a second attempt.
  const s = scripted({ leaders: [1, 1], script: (broker, request, call) => call === 1 ? { errors: { 0: NOT_LEADER } } : undefined })
  const asked = []
  let hiccup = true
  s.cluster.addMultipleTargetTopics = async (topics) => {
    asked.push(topics)
    // Asked for "missing" alone, the cluster fails once for a reason of its own.
    if (hiccup && topics.length === 1 && topics[0] === 'missing') {
      hiccup = false
      throw Object.assign(new Error('metadata hiccup'), { name: 'KafkaJSConnectionError', retriable: true })
    }
    if (topics.includes('missing')) throw fromCode(3)
  }
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key), retry: { retries: 5 } })
  const [missing, good] = await Promise.allSettled([
    producer.send({ topic: 'missing', messages: [{ key: '0', value: 'm' }] }),
    producer.send({ topic: 't', messages: [{ key: '0', value: 'g' }] }),
  ])
  t.match(missing.reason, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED', written: false, cause: { type: 'UNKNOWN_TOPIC_OR_PARTITION' } })
  t.same(good.value.map((e) => e.partition), [0], 'the other topic of the batch is written')
  // One attempt per call for wrapProducer(): the hiccup ends the first, and
  // the wrapper's next attempt asks again.
  t.same(asked.slice(0, 5), [['missing', 't'], ['missing'], ['missing', 't'], ['missing'], ['t']], 'the hiccup taken for no refusal: asked again; once refused, "missing" is set aside for the rest of the attempt')
  t.same(s.log.map(([, partition, , values]) => [partition, values]), [[0, ['g']], [0, ['g']]], 'only "t" sent, again after the refusal')
  await producer.disconnect()
})

t.test('wrapProducer()\'s calls: a topic refused before an attempt failed is not asked for again on the next', async (t) => {
  const { createErrorFromCode: fromCode } = require(path.join(dir, 'src/protocol/error'))
  const s = scripted({ leaders: [1, 1] })
  const asked = []
  s.cluster.addMultipleTargetTopics = async (topics) => {
    asked.push(topics)
    throw fromCode(29)
  }
  // The attempt fails after the refusal, before anything is assigned.
  let hiccup = true
  s.cluster.refreshMetadataIfNecessary = async () => {
    if (hiccup) {
      hiccup = false
      throw Object.assign(new Error('metadata hiccup'), { name: 'KafkaJSConnectionError', retriable: true })
    }
  }
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key), retry: { retries: 5 } })
  await t.rejects(producer.send({ topic: 'missing', messages: [{ key: '0', value: 'm' }] }), { written: false, cause: { type: 'TOPIC_AUTHORIZATION_FAILED' } })
  t.equal(hiccup, false, 'a second attempt')
  t.same(asked, [['missing']], 'asked once')
  t.same(s.log, [], 'nothing sent')
  await producer.disconnect()
})

t.test('kafkajs\'s own calls: a partitioner that throws fails the call, nothing sent; acks unset is acks -1; an answer for a partition not asked is not a result', async (t) => {
  const s = scripted({ leaders: [1, 2], script: (broker, request) => { acks.push(request.acks) } })
  const acks = []
  // The scripted partitioner reads the key as a number: a Symbol throws.
  for (const factory of [original, ours]) {
    await t.rejects(s.make(factory)({ acks: -1, topicMessages: [{ topic: 't', messages: [{ key: Symbol('k'), value: 'x' }] }] }), TypeError, factory === ours ? 'ours' : 'kafkajs\'s')
  }
  t.same(s.log, [], 'nothing sent')
  // Broker 1 answers for partition 0, and for a partition 7 it was not sent.
  const broker = s.brokers.get(1)
  const produce = broker.produce
  broker.produce = async function (request) {
    const response = await produce.call(this, request)
    response.topics[0].partitions.push({ partition: 7, errorCode: 0, baseOffset: '9', logAppendTime: '-1', logStartOffset: '0' })
    return response
  }
  const result = await s.make(ours)({ topicMessages: request().topicMessages })
  t.same(acks, [-1, -1], 'acks -1, as kafkajs sends it')
  t.same(covered(result), [0, 1], 'only the partitions sent')
})

// A record as kafkajs's fetch() decodes it.
function record (offset, value, { key = null, headers = {}, timestamp = '1600000000000', isControlRecord = false } = {}) {
  return { offset: String(offset), key: key === null ? null : Buffer.from(key), value: Buffer.from(value), headers, timestamp, isControlRecord }
}

// Broker 1 leads both partitions; its first answer says partition 1 is no
// longer its own after it appended the batch at offset 40 (a leader that
// moved while the batch waited for its replicas): the batch may be in the log.
const appendedThenMoved = (broker, _, call) => call === 1 ? { errors: { 1: NOT_LEADER }, appended: { 1: '40' } } : undefined
const partition1 = (s) => s.log.filter(([, p]) => p === 1).map(([, , , values]) => values)

t.test('a batch its leader appended, then answered with a retriable error, is looked for at its offset before it goes again', async (t) => {
  const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read: () => [record(40, '1a', { key: '1' }), record(41, '1b', { key: '1' })] })
  const result = await s.make(ours)(request())
  t.same(partition1(s), [['1a', '1b']], 'found there: not sent twice')
  t.same(s.brokers.get(1).reads, [[1, '40']], 'read from the partition\'s leader at the batch\'s offset')
  t.ok(s.brokers.get(1).waits[0] > 0 && s.brokers.get(1).waits[0] <= 3000, 'the read waits at the broker for it to be committed, up to 3 s from the answer')
  t.same(result.map((e) => [e.partition, e.errorCode, e.baseOffset]).sort(), [[0, 0, '0'], [1, 0, '40']], 'the call resolves with the offset it was found at')

  const idempotent = scripted({ leaders: [1, 1], idempotent: true, script: appendedThenMoved, read: () => t.fail('not read') })
  await idempotent.make(ours)(request())
  t.same(partition1(idempotent), [['1a', '1b'], ['1a', '1b']], 'idempotent: sent again with the same sequence numbers (the broker drops a copy it holds)')
})

t.test('what the leader holds at the offset decides: something else, or a log that ends before it, and the batch goes again; not visible yet, it waits (up to a bounded time)', async (t) => {
  const { KafkaJSOffsetOutOfRange } = require(path.join(dir, 'src/errors'))
  const cases = [
    ['another batch there', () => [record(40, 'x', { key: '1' }), record(41, '1b', { key: '1' })], 2],
    ['a control record there', () => [record(40, '1a', { key: '1', isControlRecord: true }), record(41, '1b', { key: '1' })], 2],
    ['another key', () => [record(40, '1a', { key: '2' }), record(41, '1b', { key: '1' })], 2],
    ['the log ends before it', () => { throw new KafkaJSOffsetOutOfRange('out of range', { topic: 't', partition: 1 }) }, 2],
    ['half of it visible, then all', (broker) => broker.reads.length === 1 ? [record(40, '1a', { key: '1' })] : [record(40, '1a', { key: '1' }), record(41, '1b', { key: '1' })], 1],
    ['an answer without the partition, then the batch', (broker) => broker.reads.length === 1 ? undefined : [record(40, '1a', { key: '1' }), record(41, '1b', { key: '1' })], 1],
    ['a failed read, then the batch', (broker) => { if (broker.reads.length === 1) throw new Error('connection closed'); return [record(40, '1a', { key: '1' }), record(41, '1b', { key: '1' })] }, 1],
  ]
  for (const [name, read, sends] of cases) {
    const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read })
    const result = await s.make(ours, { retries: 12 })(request())
    t.equal(partition1(s).length, sends, `${name}: ${sends === 1 ? 'taken as written' : 'sent again'}`)
    t.same(covered(result), [0, 1], `${name}: the call resolves`)
  }

  // Never visible: looked for until confirmWaitMs is over, then sent again.
  const never = scripted({ leaders: [1, 1], script: appendedThenMoved, read: () => [] })
  const result = await never.make(createSendMessagesFactory(dir, { confirmWaitMs: 20 }), { retries: 1000 })(request())
  t.same(covered(result), [0, 1], 'never visible: the call resolves')
  t.equal(partition1(never).length, 2, 'never visible: sent again once the wait is over')
  t.ok(never.brokers.get(1).reads.length > 1, 'looked for until then')

  // No leader for the partition when it is to be looked for: it waits.
  let refreshes = 0
  const leaderless = scripted({ leaders: [1, 1], script: appendedThenMoved, onRefresh: (leaders) => { leaders[1] = ++refreshes === 1 ? -1 : 1 }, read: () => [record(40, '1a', { key: '1' }), record(41, '1b', { key: '1' })] })
  await leaderless.make(ours, { retries: 12 })(request())
  t.same(partition1(leaderless), [['1a', '1b']], 'no leader for a while: looked for once it has one, not sent twice')

  // A broker that cannot be read from: sent again.
  const unreadable = scripted({ leaders: [1, 1], script: appendedThenMoved })
  await unreadable.make(ours)(request())
  t.equal(partition1(unreadable).length, 2, 'a broker without fetch(): sent again')
})

t.test('a record read back is the same only with the same key, value, headers and own timestamp', async (t) => {
  const messages = [
    { partition: 0, value: 'a' },
    { partition: 0, key: Buffer.from('k'), value: Buffer.from('b'), headers: { h: 'x', many: ['1', Buffer.from('2')] } },
    { partition: 0, value: 'c', timestamp: '1600000000123' },
  ]
  const same = [
    record(40, 'a'),
    record(41, 'b', { key: 'k', headers: { h: Buffer.from('x'), many: [Buffer.from('1'), Buffer.from('2')] } }),
    record(42, 'c', { timestamp: '1600000000123' }),
  ]
  const variants = [
    ['the same', same, 1],
    ['a timestamp of its own that differs', [same[0], same[1], record(42, 'c', { timestamp: '1600000000124' })], 2],
    ['a header fewer', [same[0], record(41, 'b', { key: 'k', headers: { h: Buffer.from('x') } }), same[2]], 2],
    ['a header value fewer', [same[0], record(41, 'b', { key: 'k', headers: { h: Buffer.from('x'), many: Buffer.from('1') } }), same[2]], 2],
    ['a header value that differs', [same[0], record(41, 'b', { key: 'k', headers: { h: Buffer.from('y'), many: [Buffer.from('1'), Buffer.from('2')] } }), same[2]], 2],
    ['a key where there was none', [record(40, 'a', { key: 'k' }), same[1], same[2]], 2],
  ]
  for (const [name, records, sends] of variants) {
    const s = scripted({ leaders: [1], script: (broker, _, call) => call === 1 ? { errors: { 0: NOT_LEADER }, appended: { 0: '40' } } : undefined, read: () => records })
    await s.make(ours, { retries: 12 })({ acks: -1, topicMessages: [{ topic: 't', messages }] })
    t.equal(s.log.length, sends, `${name}: ${sends === 1 ? 'found' : 'sent again'}`)
  }
})

t.test('wrapProducer()\'s retry: a partition batch that may be written is looked for where the failed request left it, each caller with its own offset', async (t) => {
  // Partition 0 written; partitions 1 and 2 appended (at 40 and 70), then
  // refused by a leader that moved: kafkajs gives up on them at once, and the
  // wrapper's own retry looks for them first.
  const s = scripted({
    leaders: [1, 1, 1],
    script: (broker, _, call) => call === 1 ? { errors: { 1: NOT_LEADER, 2: NOT_LEADER }, appended: { 1: '40', 2: '70' } } : undefined,
    read: (broker, request) => {
      const { partition } = request.topics[0].partitions[0]
      return partition === 1 ? [record(40, '1-1', { key: '1' }), record(41, '1-3', { key: '1' })] : [record(70, '2-2', { key: '2' })]
    },
  })
  const producer = wrapped(s, { partitioner: ({ message }) => Number(message.key), retry: { retries: 0 } })
  const results = await Promise.all(['0', '1', '2', '1'].map((key, i) => producer.send({ topic: 't', messages: [{ key, value: `${key}-${i}` }] })))
  t.same(results.map(([e]) => [e.partition, e.baseOffset]), [[0, '0'], [1, '40'], [2, '70'], [1, '41']], 'each caller its own record\'s offset')
  t.same(s.log.map(([, p]) => p), [0, 1, 2], 'each partition sent once')
  t.same(s.brokers.get(1).reads.map(([p, offset]) => [p, offset]).sort(), [[1, '40'], [2, '70']], 'looked for where the failed request left them')
  await producer.disconnect()
})
