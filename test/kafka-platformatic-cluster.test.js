'use strict'

// wrapProducer() over an @platformatic/kafka producer on a three-node KRaft
// cluster while leaders move (test/kafka-cluster.test.js does the same for
// kafkajs): nothing may resolve that is not in the topic. Runs only with
// IO_HYGIENE_TEST_KAFKA_CLUSTER_PLATFORMATIC=1, and starts its cluster once:
// its six to seven minutes would take CI's legs past their half hour.
const t = require('tap')
const enabled = process.env.IO_HYGIENE_TEST_KAFKA_CLUSTER_PLATFORMATIC === '1'
const skip = enabled ? false : 'set IO_HYGIENE_TEST_KAFKA_CLUSTER_PLATFORMATIC=1 to run the @platformatic/kafka cluster tests'
// Three leader moves of up to a minute each and an outage of a few
// minutes, past tap's 180 s for a file.
if (enabled) t.setTimeout(900_000)

const { Kafka, logLevel } = require('kafkajs')
const { startKafkaCluster } = require('./helpers/kafka-broker')
const { leaderMoveAll, outageAll, MOVES } = require('./helpers/leader-move')
const { wrapProducer } = require('../lib/kafka')

let cluster = null
let platformatic = null
t.before(async () => {
  if (!enabled) return
  platformatic = await import('@platformatic/kafka')
  cluster = await startKafkaCluster()
})
t.teardown(() => cluster?.close())

// leader-move.js sends as kafkajs's send() does ({ topic, messages }, acks
// -1 by default): the same call, in @platformatic/kafka's shape, on the
// wrapped producer, answered as kafkajs would (one entry per partition).
// acks is said each time: @platformatic/kafka's send() defaults to 1 (the
// leader alone) and does not read the producer's option.
function asKafkajsSend (wrapped) {
  return {
    send: async ({ topic, messages }) => {
      const { offsets } = await wrapped.send({ acks: -1, messages: messages.map((m) => ({ topic, key: m.key, value: m.value })) })
      return offsets.map(({ partition, offset }) => ({ topicName: topic, partition, baseOffset: String(offset) }))
    },
  }
}

for (const move of ['restart', 'rolling', 'elect']) {
  t.test(`leaders moved by ${move}`, { skip }, async (t) => {
    // kafkajs only creates the topics, moves the leaders and reads back.
    const kafka = new Kafka({ clientId: 'io-hygiene-cluster', brokers: cluster.brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
    const producers = []
    const wrappedProducers = []
    for (const idempotent of [false, true]) {
      const raw = new platformatic.Producer({ clientId: 'io-hygiene-cluster', bootstrapBrokers: cluster.brokers, serializers: platformatic.stringSerializers, idempotent })
      const wrapped = wrapProducer(raw, { flushOnSignals: false })
      t.teardown(() => wrapped.close({ force: true }))
      wrappedProducers.push(wrapped)
      producers.push(asKafkajsSend(wrapped))
    }
    const results = await leaderMoveAll({ kafka, producers, moveLeaders: (topic) => MOVES[move](kafka, cluster, topic) })
    for (const [i, idempotent] of [false, true].entries()) {
      const r = results[i]
      t.test(`${idempotent ? 'idempotent' : 'default'} producer: every resolved send is in the topic`, async (t) => {
        t.comment(JSON.stringify(r))
        t.equal(r.ackedNotInTopic, 0, 'no send resolved that is not in the topic')
        t.equal(r.lost, 0, 'nothing missing that was not rejected')
        t.equal(r.rejected, 0, 'no send rejected before deliveryTimeoutMs')
        t.equal(r.rejectedNotWrittenInTopic, 0, 'no rejection said "not written" of a message in the topic')
        const stats = wrappedProducers[i].stats()
        t.equal(stats.queued + stats.inFlight + stats.waiting, 0, 'nothing left pending')
      })
    }
  })
}

// The outage (test/kafka-cluster.test.js runs it for kafkajs): the
// node leading most partitions stopped 4 s in and started 10 s later, each
// other restarted in turn, the preferred leaders elected back. A request that
// carried several partitions was retried whole to the node leading its first
// one, so the others were refused (NOT_LEADER_OR_FOLLOWER) until the leaders
// came back together: the idempotent producer, which retries without end,
// held its topic's callers for minutes. deliveryTimeoutMs 30 s, so that such
// a hold rejects callers; no leader move is a reason to reject one.
t.test('a node down for 10 s, then every other restarted and the preferred leaders elected: no caller held to its deadline, nothing acknowledged unwritten', { skip }, async (t) => {
  const kafka = new Kafka({ clientId: 'io-hygiene-cluster', brokers: cluster.brokers, logLevel: logLevel.NOTHING, connectionTimeout: 10_000, requestTimeout: 60_000, retry: { maxRetryTime: 2000 } })
  const producers = []
  const wrappedProducers = []
  for (const idempotent of [false, true]) {
    const raw = new platformatic.Producer({ clientId: 'io-hygiene-cluster', bootstrapBrokers: cluster.brokers, serializers: platformatic.stringSerializers, idempotent })
    const wrapped = wrapProducer(raw, { flushOnSignals: false, deliveryTimeoutMs: 30_000 })
    t.teardown(() => wrapped.close({ force: true }))
    wrappedProducers.push(wrapped)
    producers.push(asKafkajsSend(wrapped))
  }
  const results = await outageAll({ kafka, cluster, producers, callers: 100, deliveryTimeoutMs: 30_000 })
  for (const [i, idempotent] of [false, true].entries()) {
    const r = results[i]
    t.test(`${idempotent ? 'idempotent' : 'default'} producer`, async (t) => {
      t.comment(JSON.stringify(r))
      t.equal(r.ackedNotInTopic, 0, 'no send resolved that is not in the topic')
      t.equal(r.wrongMetadata, 0, 'every resolved send has the offset of its own partition')
      t.equal(r.lost, 0, 'every send settled')
      t.equal(r.rejected, 0, 'no send rejected')
      t.equal(r.outOfOrder, 0, 'call order kept for every key')
      if (idempotent) t.equal(r.duplicated, 0, 'no duplicate')
      const stats = wrappedProducers[i].stats()
      t.equal(stats.queued + stats.inFlight + stats.waiting, 0, 'nothing left pending')
    })
  }
})
