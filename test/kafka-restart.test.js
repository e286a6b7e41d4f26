'use strict'

// wrapProducer() through a broker outage: stopped mid-stream until kafkajs
// has given up on requests and the wrapper has retried them, then started
// again on the same port and data; and a broker stopped for good.
const t = require('tap')
const { setTimeout: sleep } = require('node:timers/promises')
// In the documented order, on the corrected kafkajs (kafka-load-order.test.js
// has the others).
const { installKafkajsPatch } = require('../lib/kafka/kafkajs-patch')
t.teardown(installKafkajsPatch())
const { Kafka, logLevel } = require('kafkajs')
const { startKafka, consumeAll } = require('./helpers/kafka-broker')
const { eventually } = require('./helpers/wait')
const { wrapProducer } = require('../lib/kafka')

// Bounded: a condition that never holds fails the test instead of hanging it.
async function until (check, what, ms = 120_000) {
  if (!await eventually(check, ms)) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
}

let broker
t.before(async () => {
  broker = await startKafka()
})
t.teardown(() => broker?.close())

// kafkajs's own backoff grows to 30 s between attempts by default; capped at
// 2 s it reconnects soon after the broker is back, which keeps this test short.
function client () {
  return new Kafka({ clientId: 'io-hygiene-restart', brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
}

t.test('a broker stopped and restarted mid-stream: nothing rejected, lost, duplicated or left pending', async (t) => {
  const kafka = client()
  const admin = kafka.admin()
  await admin.connect()
  const topic = `restart-${process.pid}`
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true })
  await admin.disconnect()

  const raw = kafka.producer({ idempotent: true })
  await raw.connect()
  const producer = wrapProducer(raw, { deliveryTimeoutMs: 90_000 })
  t.teardown(() => producer.disconnect())

  const total = 4000
  let next = 0
  let acked = 0
  const rejected = []
  const sender = async () => {
    while (next < total) {
      const n = next++
      try {
        await producer.send({ topic, messages: [{ key: `k${n % 7}`, value: String(n) }] })
        acked++
      } catch (error) {
        rejected.push(error)
      }
      // Paced, so that the stream is still running when the broker goes away.
      await sleep(5)
    }
  }
  const senders = Promise.all(Array.from({ length: 50 }, sender))
  await until(() => acked >= 500, '500 acknowledged sends')
  await broker.stop()
  const stoppedAt = acked
  // Down until kafkajs has given up on a request twice and the wrapper has
  // retried it (kafkajs alone would have rejected its callers): the outage
  // outlasts the client's own retries, however long that takes here.
  await until(() => producer.stats().retried >= 2, 'the wrapper to retry twice')
  t.ok(acked - stoppedAt < 100, 'sends stalled while the broker was down')
  await broker.start()
  await senders

  t.same(rejected, [], 'no send rejected')
  t.equal(acked, total, 'every send acknowledged')
  const stats = producer.stats()
  t.equal(stats.queued + stats.inFlight + stats.waiting, 0, 'nothing left pending')
  t.ok(stats.retried > 0, 'requests were retried')

  const consumed = await consumeAll(kafka, topic, total)
  const values = consumed.map((m) => m.value)
  t.equal(new Set(values).size, total, 'none lost')
  t.equal(values.length, total, 'none duplicated')
  let outOfOrder = 0
  for (const partition of [0, 1]) {
    const list = consumed.filter((m) => m.partition === partition).sort((a, b) => a.offset - b.offset)
    for (let i = 1; i < list.length; i++) if (Number(list[i].value) < Number(list[i - 1].value)) outOfOrder++
  }
  t.equal(outOfOrder, 0, 'call order kept in every partition')
})

t.test('a broker that never returns: every caller is rejected after deliveryTimeoutMs, none hangs', async (t) => {
  const kafka = client()
  const admin = kafka.admin()
  await admin.connect()
  const topic = `gone-${process.pid}`
  await admin.createTopics({ topics: [{ topic }], waitForLeaders: true })
  await admin.disconnect()
  // kafkajs without the idempotent producer gives up after its own retries
  // (kept short here); the wrapper retries until each message's deadline.
  const raw = new Kafka({ clientId: 'io-hygiene-gone', brokers: broker.brokers, logLevel: logLevel.NOTHING, retry: { retries: 2, maxRetryTime: 500 } }).producer()
  await raw.connect()
  const producer = wrapProducer(raw, { deliveryTimeoutMs: 4000 })
  await producer.send({ topic, messages: [{ value: 'before' }] })
  await broker.stop()

  const sends = Array.from({ length: 200 }, (_, i) => producer.send({ topic, messages: [{ value: String(i) }] }))
  const results = await Promise.allSettled(sends)
  t.ok(results.every((r) => r.status === 'rejected' && r.reason.code === 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT'),
    'every send rejected with ERR_IO_HYGIENE_DELIVERY_TIMEOUT')
  t.ok(results.some((r) => r.reason.cause), 'with the last kafkajs error as the cause')
  const stats = producer.stats()
  t.equal(stats.queued + stats.inFlight + stats.waiting, 0, 'nothing left pending')
  await producer.disconnect({ timeoutMs: 1000 })
})
