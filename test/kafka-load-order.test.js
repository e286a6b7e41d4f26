'use strict'

// Every order a service may load kafkajs and io-hygiene in, on a real
// broker, each in a child process: kafkajs required first without
// install(), ES module imports in that order, the patch turned off. A
// producer io-hygiene has not corrected keeps kafkajs's retry, which can
// acknowledge the unwritten part of a request that spans brokers: the
// wrapper then sends each call in a request of its own, never merging two
// callers (kafka-cluster.test.js moves leaders under it).
const t = require('tap')
const path = require('node:path')
const { execFile } = require('node:child_process')
const { Kafka, logLevel } = require('kafkajs')
const { startKafka, consumeAll } = require('./helpers/kafka-broker')
const { withWarnings } = require('./helpers/with-warnings')

let broker
t.before(async () => {
  broker = await startKafka({ partitions: 3 })
})
t.teardown(() => broker?.close())

function child (file, args, env = {}) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [path.join(__dirname, 'fixtures', file), ...args], { env: withWarnings({ ...process.env, ...env }), timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} failed: ${error.message}\n${stderr}`))
      else resolve(JSON.parse(stdout))
    })
  })
}

const ORDERS = [
  { name: 'kafkajs required first, no install()', file: 'kafka-load-order.js', status: 'loaded-too-early' },
  { name: 'ES module imports, kafkajs first', file: 'kafka-load-order.mjs', status: 'loaded-too-early' },
  { name: 'the patch turned off (IO_HYGIENE_KAFKAJS=0)', file: 'kafka-load-order.js', status: 'off', env: { IO_HYGIENE_KAFKAJS: '0' } },
]

for (const idempotent of [false, true]) {
  for (const order of ORDERS) {
    t.test(`${order.name}${idempotent ? ', idempotent' : ''}: each call in a request of its own, every one written`, async (t) => {
      const kafka = new Kafka({ clientId: 'load-order-check', brokers: broker.brokers, logLevel: logLevel.NOTHING })
      const topic = `load-order-${process.pid}-${t.name.length}-${idempotent}-${order.status}-${order.file.slice(-3)}`
      const admin = kafka.admin()
      await admin.connect()
      await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true }).finally(() => admin.disconnect())
      const out = await child(order.file, [JSON.stringify([broker.brokers, topic, idempotent])], order.env)
      t.equal(out.status, order.status, `stats().kafkajsPatch is '${order.status}'`)
      t.equal(out.batching, false, 'stats().batching is false')
      t.same(out.rejected, [], 'no call rejected')
      // Each request carries one call: the 30 single-message calls one each,
      // the call of three whole.
      t.equal(out.requests.length, 31, 'one kafkajs request per call')
      t.ok(out.requests.every((values) => values.length === 1 || values.join() === 'm0,m1,m2'), 'no request carries two callers\' messages')
      const expectWarning = order.status === 'off' ? [] : ['IO_HYGIENE_KAFKAJS_NOT_PATCHED']
      t.same(out.warnings, expectWarning, order.status === 'off' ? 'no warning: the operator chose it' : 'one warning, saying how to fix the order')
      const records = await consumeAll(kafka, topic, 33)
      t.same(records.map((r) => r.value).sort(), out.written.slice().sort(), 'every resolved message is in the topic, once')
    })
  }
}

t.test('installed first: calls share requests, on the corrected kafkajs', async (t) => {
  const kafka = new Kafka({ clientId: 'load-order-check', brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const topic = `load-order-${process.pid}-installed`
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true }).finally(() => admin.disconnect())
  const out = await child('kafka-load-order.js', [JSON.stringify([broker.brokers, topic, false]), 'install'])
  t.equal(out.status, 'patched')
  t.equal(out.batching, true)
  t.ok(out.requests.length < 31, `${out.requests.length} requests for 31 calls`)
  t.same(out.warnings, [])
  const records = await consumeAll(kafka, topic, 33)
  t.equal(records.length, 33, 'every message in the topic')
})
