'use strict'

// kafkajs chooses a message's partition anew at every retry of a call: with
// its default partitioner, a message without a key that met a partition
// refusing it (too few in-sync replicas) goes to the next one and is
// written. So does the wrapper's, for a message no attempt may have written
// (held back behind a muted partition, or answered "nothing appended"); one
// that may have been written goes again where it went.
const t = require('tap')
const path = require('node:path')
const { scripted, wrapped, dir, createRetry } = require('./helpers/scripted-kafka')

const createDefaultPartitioner = require(path.join(dir, 'src/producer/partitioners/default'))
const createPlainSendMessages = require(path.join(dir, 'src/producer/sendMessages'))
const NOT_ENOUGH_REPLICAS = 19
const COUNT = 9

// Partition 1 of three refuses every request; the other two write.
const stuckOne = () => scripted({ leaders: [1, 1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })

t.test('keyless messages, one partition of three stuck: plain kafkajs writes each (the reference)', async (t) => {
  const s = stuckOne()
  const logger = { debug () {}, info () {}, warn () {}, error () {} }
  const sendMessages = createPlainSendMessages({
    logger,
    cluster: s.cluster,
    eosManager: s.eos,
    partitioner: createDefaultPartitioner(),
    retrier: createRetry({ retries: 5, initialRetryTime: 1, maxRetryTime: 5, factor: 0, multiplier: 1 }),
  })
  const outcomes = []
  for (let i = 0; i < COUNT; i++) {
    outcomes.push(await sendMessages({ acks: -1, topicMessages: [{ topic: 't', messages: [{ value: `m${i}` }] }] }).then(() => 'written', (e) => e.name))
  }
  t.same(outcomes, outcomes.map(() => 'written'), 'every keyless send written (a retry goes to the next partition)')
})

t.test('keyless messages, one partition of three stuck: wrapped writes each', async (t) => {
  const s = stuckOne()
  const producer = wrapped(s, { partitioner: createDefaultPartitioner(), wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 1000 } })
  const outcomes = []
  for (let i = 0; i < COUNT; i++) {
    outcomes.push(producer.send({ topic: 't', messages: [{ value: `m${i}` }] }).then(() => 'written', (e) => e.code))
    // Each its own batch, as calls spread over time are.
    await new Promise((resolve) => setImmediate(resolve))
  }
  const settled = await Promise.all(outcomes)
  t.same(settled, settled.map(() => 'written'), 'every keyless send written')
  await producer.disconnect()
})
