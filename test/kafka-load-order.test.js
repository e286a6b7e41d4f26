'use strict'

// Every order a service may load kafkajs and io-hygiene in, on a real
// broker, each in a child process: kafkajs required first without
// install(), ES module imports in that order, the patch turned off. A
// producer io-hygiene has not corrected keeps kafkajs's retry, which can
// acknowledge the unwritten part of a request that spans brokers: the
// wrapper then sends each call in a request of its own, never merging two
// callers (kafka-cluster.test.js moves leaders under it). An idempotent one
// is refused at wrap time, unless the patch was turned off on purpose: its
// sequence numbers can acknowledge unwritten sends however calls are sent.
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
    if (idempotent && order.status !== 'off') continue
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

for (const order of ORDERS.filter((o) => o.status !== 'off')) {
  t.test(`${order.name}, idempotent: refused at wrap time with a coded error that says how to fix the order, and nothing sent`, async (t) => {
    const topic = `load-order-${process.pid}-refused-${order.file.slice(-3)}`
    const out = await child(order.file, [JSON.stringify([broker.brokers, topic, true])], order.env)
    t.equal(out.refused?.code, 'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER', 'refused with a coded error')
    t.equal(out.refused?.name, 'TypeError')
    t.match(out.refused?.message, /^wrapProducer\(\): an idempotent producer of a kafkajs that io-hygiene has not corrected/, 'says which producer')
    t.match(out.refused?.message, /acknowledge messages that were never written when partition leaders move/, 'says why')
    t.match(out.refused?.message, /-r io-hygiene\/register.*install\(\) before kafkajs is first required/, 'says how to fix the order')
    t.match(out.refused?.message, /loaded-too-early/, 'says what io-hygiene found')
    t.ok(out.warnings.length <= 1, 'at most the one warning of finding kafkajs loaded')
    t.same(out.requests, [], 'nothing sent')
  })
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
