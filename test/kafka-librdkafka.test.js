'use strict'

// wrapProducer() refuses the producers of clients built on librdkafka, which
// batch themselves. Their packages need a native build that this suite does
// not make: the shapes below are their classes' own members, as published
// (@confluentinc/kafka-javascript 1.x lib/kafkajs/_producer.js, node-rdkafka
// 3.x lib/producer.js and lib/client.js); where a package is installed, its
// real classes are checked too.
const t = require('tap')
const { wrapProducer } = require('../lib/kafka')
const { codes } = require('../lib/core/errors')

// @confluentinc/kafka-javascript's KafkaJS-compatible producer: kafkajs's
// methods, and its own.
class ConfluentKafkaJSProducer {
  _getInternalClient () { return null }
  dependentAdmin () {}
  async connect () {}
  async disconnect () {}
  async transaction () {}
  async send () {}
  async sendBatch () {}
  async flush () {}
  isActive () { return false }
  logger () {}
  setSaslCredentials () {}
}

// node-rdkafka's Producer (an EventEmitter), and its HighLevelProducer.
class RdKafkaProducer {
  connect () {}
  disconnect () {}
  getClient () {}
  isConnected () { return false }
  getMetadata () {}
  produce () {}
  poll () {}
  setPollInterval () {}
  flush () {}
  initTransactions () {}
}
class RdKafkaHighLevelProducer extends RdKafkaProducer {
  setKeySerializer () {}
  setValueSerializer () {}
}

const refusal = {
  code: 'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER',
  name: 'TypeError',
  message: /librdkafka.*batches.*linger\.ms/,
}

t.test('a librdkafka producer is refused with a coded TypeError that says what to do', async (t) => {
  for (const Producer of [ConfluentKafkaJSProducer, RdKafkaProducer, RdKafkaHighLevelProducer]) {
    t.throws(() => wrapProducer(new Producer(), { flushOnSignals: false }), refusal, Producer.name)
  }
  t.throws(() => wrapProducer(new ConfluentKafkaJSProducer()), { message: /@confluentinc\/kafka-javascript's KafkaJS producer/ }, 'named')
  t.throws(() => wrapProducer(new RdKafkaHighLevelProducer()), { message: /node-rdkafka's HighLevelProducer/ }, 'named')
  t.ok(codes.ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER, 'registered with every code')
})

t.test('options are still checked first, and a kafkajs producer is not taken for one', async (t) => {
  t.throws(() => wrapProducer(new RdKafkaProducer(), { lingerMS: 5 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' })
  const { Kafka } = require('kafkajs')
  const producer = new Kafka({ brokers: ['127.0.0.1:1'], logLevel: 0 }).producer()
  const wrapped = wrapProducer(producer, { flushOnSignals: false })
  t.equal(typeof wrapped.send, 'function', 'kafkajs is wrapped')
})

// The real classes, where their package (and its native addon) is installed.
for (const name of ['@confluentinc/kafka-javascript', 'node-rdkafka']) {
  let pkg = null
  try {
    pkg = require(name)
  } catch {}
  t.test(`${name}'s real producers are refused`, { skip: pkg === null && `${name} is not installed (it needs a native build)` }, async (t) => {
    if (pkg.KafkaJS) {
      const producer = new pkg.KafkaJS.Kafka({ kafkaJS: { brokers: ['127.0.0.1:1'] } }).producer()
      t.throws(() => wrapProducer(producer, { flushOnSignals: false }), refusal, 'its KafkaJS producer')
    }
    for (const Class of [pkg.Producer, pkg.HighLevelProducer]) {
      t.throws(() => wrapProducer(Object.create(Class.prototype), { flushOnSignals: false }), refusal, Class.name)
    }
  })
}
