'use strict'

// bench/kafka-cluster-runs.js's child: one load order's producers, each
// sending to its own topic while the parent moves the cluster's leaders.
// `node bench/kafka-cluster-producers.js <order> <settings JSON>`, forked with
// an IPC channel (advanced serialization). <order> decides what loads first,
// so it is read before anything else is required:
//   install-first  install() before kafkajs (the documented order)
//   kafkajs-first  kafkajs, then io-hygiene without install(); also plain kafkajs
//   platformatic   @platformatic/kafka, plain and wrapped
// Messages: 'ready' once every producer is connected; on 'start' each
// producer's callers send until 'stop', then 'result' (every call's outcome).
const order = process.argv[2]
const settings = JSON.parse(process.argv[3])

const { setTimeout: sleep } = require('node:timers/promises')

// Each label: { label, send(topic, key, value) -> partition, close() }, or
// { label, refused: code } for a producer wrapProducer() refused.
async function producersOf () {
  const { brokers } = settings
  const kafkajsSettings = { clientId: `io-hygiene-${order}`, brokers, retry: { maxRetryTime: 2000 } }
  const kafkajsSend = (producer) => async (topic, key, value) => {
    const metadata = await producer.send({ topic, messages: [{ key, value }] })
    return metadata.map((m) => m.partition)
  }
  const out = []
  if (order === 'install-first') {
    require('..').install()
    const { Kafka, logLevel } = require('kafkajs')
    const { wrapProducer } = require('..')
    const kafka = new Kafka({ ...kafkajsSettings, logLevel: logLevel.NOTHING })
    for (const idempotent of [false, true]) {
      const raw = kafka.producer({ idempotent })
      await raw.connect()
      const producer = wrapProducer(raw, { flushOnSignals: false })
      out.push({ label: `install-first wrapped ${idempotent ? 'idempotent' : 'default'}`, send: kafkajsSend(producer), close: () => producer.disconnect({ timeoutMs: 10_000 }) })
    }
  } else if (order === 'kafkajs-first') {
    const { Kafka, logLevel } = require('kafkajs')
    const { wrapProducer } = require('..')
    const kafka = new Kafka({ ...kafkajsSettings, logLevel: logLevel.NOTHING })
    for (const wrapped of [false, true]) {
      for (const idempotent of [false, true]) {
        const raw = kafka.producer({ idempotent })
        await raw.connect()
        const label = `${wrapped ? 'kafkajs-first wrapped' : 'kafkajs plain'} ${idempotent ? 'idempotent' : 'default'}`
        let producer = raw
        try {
          if (wrapped) producer = wrapProducer(raw, { flushOnSignals: false })
        } catch (error) {
          // The idempotent producer of an uncorrected kafkajs is refused at
          // wrap time: recorded, and it sends nothing.
          if (error.code !== 'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER') throw error
          out.push({ label, refused: error.code, send: null, close: () => raw.disconnect() })
          continue
        }
        out.push({
          label,
          send: kafkajsSend(producer),
          close: () => wrapped ? producer.disconnect({ timeoutMs: 10_000 }) : producer.disconnect(),
        })
      }
    }
  } else if (order === 'platformatic') {
    const { Producer, stringSerializers } = await import('@platformatic/kafka')
    const { wrapProducer } = require('..')
    for (const wrapped of [false, true]) {
      for (const idempotent of [false, true]) {
        const raw = new Producer({ clientId: 'io-hygiene-platformatic', bootstrapBrokers: brokers, serializers: stringSerializers, idempotent })
        const producer = wrapped ? wrapProducer(raw, { flushOnSignals: false }) : raw
        out.push({
          label: `platformatic ${wrapped ? 'wrapped' : 'plain'} ${idempotent ? 'idempotent' : 'default'}`,
          // acks said each time: its send() defaults to 1 and does not read
          // the producer's; -1 as kafkajs's default.
          send: async (topic, key, value) => {
            const { offsets } = await producer.send({ acks: -1, messages: [{ topic, key, value }] })
            return offsets.map((o) => o.partition)
          },
          close: () => wrapped ? producer.close({ force: true, timeoutMs: 10_000 }) : producer.close(true),
        })
      }
    }
  } else {
    throw new TypeError(`unknown order ${order}`)
  }
  return out.filter((p) => settings.labels.includes(p.label))
}

// A flow: one producer's callers, each awaiting one send() of one message
// at a time. Outcomes in flat arrays (one entry per call) for the parent.
function flowOf (producer, topic) {
  const flow = {
    producer,
    topic,
    sent: 0,
    endAt: Infinity,
    pending: 0,
    lastAckAt: 0,
    // The longest time with calls pending and none acknowledged: rejections
    // are no progress (a producer that rejects every call is stuck too).
    maxStallMs: 0,
    at: [],
    settledAt: [],
    // -1 unsettled; else the partitions of its metadata (resolved) or null.
    partitions: [],
    error: [],
    senders: null,
  }
  const { callers, paceMs, keys, bytes } = settings
  const sender = async () => {
    while (flow.sent < flow.endAt) {
      const n = flow.sent++
      const key = `key-${n % keys}`
      flow.at[n] = Date.now()
      flow.partitions[n] = -1
      flow.error[n] = null
      flow.pending++
      try {
        flow.partitions[n] = await producer.send(topic, key, String(n).padStart(bytes - key.length, '0'))
        flow.lastAckAt = Date.now()
      } catch (error) {
        flow.partitions[n] = null
        // kafkajs's own errors carry a numeric protocol code and the name in `type`.
        flow.error[n] = { by: typeof error.code === 'string' ? error.code : String(error.type ?? error.name), cause: error.cause?.type ?? error.cause?.code ?? error.cause?.name, written: error.written }
      }
      flow.pending--
      flow.settledAt[n] = Date.now()
      if (paceMs > 0) await sleep(paceMs)
    }
  }
  flow.lastAckAt = Date.now()
  flow.senders = producer.refused ? Promise.resolve() : Promise.all(Array.from({ length: callers }, sender))
  return flow
}

function stallOf (flow, now) {
  if (flow.pending === 0) return 0
  return now - flow.lastAckAt
}

async function main () {
  const producers = await producersOf()
  process.send({ ready: producers.map((p) => p.label) })
  await new Promise((resolve) => process.once('message', resolve))
  const flows = producers.map((p) => flowOf(p, settings.topics[p.label]))
  const watch = setInterval(() => {
    const now = Date.now()
    for (const flow of flows) flow.maxStallMs = Math.max(flow.maxStallMs, stallOf(flow, now))
  }, 250)
  await new Promise((resolve) => process.once('message', resolve))
  for (const flow of flows) flow.endAt = flow.sent
  // Bounded: a call still pending after `settleMs` is reported unsettled.
  // `emptyLoop`: at some point nothing left in the process (no socket, no
  // ref'd timer) could settle the pending calls: a service would have exited
  // with its sends unsettled. The wait then goes on, ref'd, to the bound.
  const settled = Promise.all(flows.map((f) => f.senders))
  const until = Date.now() + settings.settleMs
  let emptyLoop = false
  const onEmpty = new Promise((resolve) => process.once('beforeExit', resolve))
  const first = await Promise.race([settled, onEmpty.then(() => 'empty'), sleep(settings.settleMs, null, { ref: false })])
  if (first === 'empty') {
    emptyLoop = true
    await Promise.race([settled, sleep(Math.max(0, until - Date.now()))])
  }
  clearInterval(watch)
  const now = Date.now()
  const result = flows.map((flow) => ({
    label: flow.producer.label,
    refused: flow.producer.refused ?? null,
    topic: flow.topic,
    sent: flow.sent,
    maxStallMs: Math.max(flow.maxStallMs, stallOf(flow, now)),
    unsettled: flow.pending,
    emptyLoop,
    at: flow.at,
    settledAt: flow.settledAt,
    partitions: flow.partitions,
    error: flow.error,
  }))
  process.channel.ref()
  await new Promise((resolve) => process.send({ result }, resolve))
  // The parent disconnects once it has read the result: a child's exit can
  // reach it before the last message does.
  const released = new Promise((resolve) => process.once('disconnect', resolve))
  await Promise.allSettled(producers.map((p) => Promise.race([p.close(), sleep(15_000)])))
  await released
}

main().catch((error) => {
  process.stderr.write(error.stack + '\n')
  process.exitCode = 1
  process.disconnect?.()
})
