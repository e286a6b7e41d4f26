'use strict'

// Records held behind a stuck partition's first batch cost nothing while it
// waits: a held batch is not sent again at each backoff (it waits for a
// wake, or for the deadline of what holds it), so the producer's healthy
// sends do not wait behind cycles of held batches, and the cost does not
// grow with the records held (the Java producer drains nothing from a muted
// partition).
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19
const byKey = ({ message }) => Number(message.key)

t.test('held sends to a stuck partition cost a cycle each per backoff, and a healthy send waits behind them', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 60_000 } })
  const stuck = []
  // A service sending to both partitions: each batch leaves its partition-1
  // record behind the first.
  for (let i = 0; i < 300; i++) {
    stuck.push(producer.send({ topic: 't', messages: [{ key: '1', value: `1-${i}` }] }).catch((e) => e))
    await producer.send({ topic: 't', messages: [{ key: '0', value: `0-${i}` }] })
  }
  const head = () => s.log.filter(([, p]) => p === 1).length
  // Attempts during five retries of the stuck partition's head.
  const from = head()
  const before = producer.stats().retried
  await s.produced(() => head() >= from + 5)
  const perHeadRetry = (producer.stats().retried - before) / 5
  t.ok(perHeadRetry < 20, `batches cycled per retry of the stuck head stay bounded (got ${perHeadRetry} with 300 held batches)`)
  // A healthy send now: how many attempts go before it.
  const at = producer.stats().retried
  await producer.send({ topic: 't', messages: [{ key: '0', value: 'last' }] })
  const waited = producer.stats().retried - at
  t.ok(waited < 20, `a healthy send waits for few held batches to cycle (got ${waited})`)
  await t.rejects(producer.disconnect({ timeoutMs: 50 }))
  await Promise.all(stuck)
})
