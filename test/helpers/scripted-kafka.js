'use strict'

// kafkajs's producer internals around the corrected sendMessages, with the
// brokers' answers scripted: what a real broker gives only by chance (one
// partition of a request refused, a request written but not answered), on
// demand, in the order a test needs.
const path = require('node:path')
const { createSendMessagesFactory } = require('../../lib/kafka/send-messages')

const dir = path.dirname(require.resolve('kafkajs'))
const createRetry = require(path.join(dir, 'src/retry'))
const { KafkaJSRequestTimeoutError } = require(path.join(dir, 'src/errors'))
const ours = createSendMessagesFactory(dir)

// A cluster of brokers 1..3 whose leaders are `leaders[partition]`. Each
// broker answers produce() through `script(broker, request, call)`, which may
// throw a protocol error, or return the partitions to answer for (all by
// default), or { lost: true } (written, then timed out); `onRefresh` runs on a metadata refresh (where a move shows).
// `{ errors, appended }`: `appended`, the base offset of a partition answered
// with an error after its leader appended the batch. `read(broker, request)`,
// when given, is each broker's fetch(): the records it answers (or throws).
function scripted ({ leaders, script = () => undefined, onRefresh = () => {}, idempotent = false, transactional = false, read }) {
  const log = [] // [nodeId, partition, firstSequence, messages]
  const waiters = new Set() // produced()'s
  const inFlight = new Map()
  let maxInFlight = 0
  const brokers = new Map([1, 2, 3].map((nodeId) => [nodeId, {
    nodeId,
    calls: 0,
    async produce (request) {
      const call = ++this.calls
      inFlight.set(nodeId, (inFlight.get(nodeId) ?? 0) + 1)
      maxInFlight = Math.max(maxInFlight, [...inFlight.values()].reduce((a, b) => a + b, 0))
      try {
        await new Promise((resolve) => setImmediate(resolve))
        const answer = await script(this, request, call)
        for (const { partitions } of request.topicData) {
          for (const p of partitions) log.push([nodeId, p.partition, p.firstSequence, p.messages.map((m) => m.value)])
        }
        for (const waiter of waiters) waiter()
        // Written, and the answer lost on the way back.
        if (answer?.lost === true) throw new KafkaJSRequestTimeoutError('Request Produce timed out (scripted)')
        // An array: the partitions answered; { errors }: every partition
        // answered, these with an error code.
        const errors = new Map(Object.entries(Array.isArray(answer) ? {} : answer?.errors ?? {}).map(([p, code]) => [Number(p), code]))
        const appended = answer?.appended ?? {}
        // { errors, omit }: these partitions left out of the answer.
        const answered = Array.isArray(answer) ? answer : undefined
        const omitted = answer?.omit ?? []
        return {
          topics: request.topicData.map(({ topic, partitions }) => ({
            topicName: topic,
            partitions: partitions.filter((p) => answered === undefined || answered.includes(p.partition))
              .filter((p) => !omitted.includes(p.partition))
              .map((p) => ({ partition: p.partition, errorCode: errors.get(p.partition) ?? 0, baseOffset: errors.has(p.partition) ? appended[p.partition] ?? '-1' : '0', logAppendTime: '-1', logStartOffset: '0' })),
          })),
        }
      } finally {
        inFlight.set(nodeId, inFlight.get(nodeId) - 1)
      }
    },
    ...(read === undefined
      ? {}
      : {
          reads: [],
          waits: [],
          async fetch (request) {
            const { topic, partitions: [{ partition, fetchOffset }] } = request.topics[0]
            this.reads.push([partition, fetchOffset])
            this.waits.push(request.maxWaitTime)
            const messages = await read(this, request)
            return { responses: messages === undefined ? [] : [{ topicName: topic, partitions: [{ partition, errorCode: 0, highWatermark: '100', messages }] }] }
          },
        }),
  }]))
  const cluster = {
    targetTopics: new Set(),
    refreshes: 0,
    connected: true,
    async addMultipleTargetTopics () {},
    async refreshMetadataIfNecessary () {},
    async refreshMetadata () {
      this.refreshes++
      onRefresh(leaders)
    },
    findTopicPartitionMetadata: () => leaders.map((leader, partitionId) => ({ partitionId, leader })),
    findLeaderForPartitions (topic, partitions) {
      const out = {}
      for (const p of partitions) (out[leaders[Number(p)]] ??= []).push(Number(p))
      return out
    },
    findBroker: async ({ nodeId }) => brokers.get(Number(nodeId)),
    isConnected () { return this.connected },
    async connect () { this.connected = true },
    removeBroker () {},
  }
  let sequences = {}
  // A fresh producer id, as InitProducerId gives, at each renewal.
  let producerId = 7
  const eos = {
    initProducerIds: 0,
    added: [],
    isTransactional: () => transactional,
    async addPartitionsToTransaction (topicData) { this.added.push(topicData.map(({ topic, partitions }) => [topic, partitions.map((p) => p.partition)])) },
    isInitialized: () => idempotent,
    getProducerId: () => idempotent ? producerId : -1,
    getProducerEpoch: () => 0,
    getTransactionalId: () => 'tx',
    getSequence: (topic, partition) => sequences[`${topic}:${partition}`] ?? 0,
    updateSequence (topic, partition, n) {
      if (idempotent) sequences[`${topic}:${partition}`] = this.getSequence(topic, partition) + n
    },
    async acquireBrokerLock () {},
    async releaseBrokerLock () {},
    async initProducerId () {
      this.initProducerIds++
      producerId++
      sequences = {}
    },
  }
  const logger = { debug () {}, info () {}, warn () {}, error () {} }
  const make = (factory, retry = { retries: 5 }) => factory({
    logger,
    cluster,
    eosManager: eos,
    partitioner: ({ message }) => message.partition ?? Number(message.key),
    retrier: createRetry({ initialRetryTime: 1, maxRetryTime: 5, factor: 0, multiplier: 1, ...retry }),
  })
  // Resolves once a request the brokers took has logged an entry that
  // passes `check`.
  const produced = (check) => new Promise((resolve) => {
    const waiter = () => {
      if (!log.some(check)) return
      waiters.delete(waiter)
      resolve()
    }
    waiters.add(waiter)
    waiter()
  })
  return { make, log, cluster, eos, brokers, produced, maxInFlight: () => maxInFlight }
}

// wrapProducer() on the corrected sendMessages itself, with the scripted
// cluster underneath: what each caller of a batch gets when a request fails
// in part. `partitioner` decides each message's partition; `factory`, the
// corrected sendMessages (createSendMessagesFactory()'s).
function wrapped (s, { partitioner, retry = { retries: 1 }, wrap, factory = ours } = {}) {
  const { wrapProducer } = require('../../lib/kafka')
  const { kafkajsPatchStatus } = require('../../lib/kafka/kafkajs-patch')
  const logger = { debug () {}, info () {}, warn () {}, error () {} }
  // A producer of the corrected kafkajs, as wrapProducer() tells them: by its logger.
  kafkajsPatchStatus()
  require('../../lib/core/global-slot').getSlot(Symbol.for('io-hygiene.kafkajs.patch.v1')).loggers.add(logger)
  const sendMessages = factory({
    logger,
    cluster: s.cluster,
    eosManager: s.eos,
    partitioner,
    retrier: createRetry({ initialRetryTime: 1, maxRetryTime: 5, factor: 0, multiplier: 1, ...retry }),
  })
  const producer = {
    events: {},
    connect: async () => {},
    disconnect: async () => {},
    isIdempotent: () => false,
    on: () => () => {},
    logger: () => logger,
    transaction: async () => ({}),
    // As kafkajs's producer: its topicMessages (one entry per topic) to sendMessages.
    sendBatch: ({ acks = -1, timeout, compression, topicMessages }) => sendMessages({ acks, timeout, compression, topicMessages }),
  }
  return wrapProducer(producer, { retryBackoffMs: 1, flushOnSignals: false, ...wrap })
}

// A partition's log as Kafka keeps an idempotent producer's batches: the
// same first and last sequence number is a copy (DUPLICATE_SEQUENCE_NUMBER);
// any other that does not follow the last is out of order; a producer id
// with no batch there starts anywhere. times(value): how often it was written.
function kafkaLog () {
  const batches = new Map() // "producerId:topic:partition" -> [[first, last]]
  const written = []
  function append (request, topic, p) {
    const key = `${request.producerId}:${topic}:${p.partition}`
    const list = batches.get(key) ?? []
    const last = p.firstSequence + p.messages.length - 1
    if (list.some(([a, b]) => a === p.firstSequence && b === last)) return 46
    if (list.length > 0 && p.firstSequence !== list[list.length - 1][1] + 1) return 45
    batches.set(key, [...list, [p.firstSequence, last]])
    for (const m of p.messages) written.push(String(m.value))
    return 0
  }
  return { append, times: (v) => written.filter((w) => w === v).length }
}

module.exports = { scripted, wrapped, dir, ours, createRetry, kafkaLog }
