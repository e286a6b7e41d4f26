'use strict'

// A batch held back is not a flush: stats().flushes and
// io-hygiene:batch:flush follow the requests sent while a partition is
// stuck, not a cycle per held batch per backoff (that would show a flush
// rate climbing and flush latency falling during an outage).
const t = require('tap')
const dc = require('node:diagnostics_channel')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19
const byKey = ({ message }) => Number(message.key)

t.test('only attempts that send something count as flushes', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 60_000 } })
  const stuck = []
  for (let i = 0; i < 50; i++) {
    stuck.push(producer.send({ topic: 't', messages: [{ key: '1', value: `1-${i}` }] }).catch((e) => e))
    await producer.send({ topic: 't', messages: [{ key: '0', value: `0-${i}` }] })
  }
  let published = 0
  const onFlush = (message) => { if (message.name === 'kafka') published++ }
  dc.subscribe('io-hygiene:batch:flush', onFlush)
  t.teardown(() => dc.unsubscribe('io-hygiene:batch:flush', onFlush))
  const requests = () => s.brokers.get(1).calls
  const from = requests()
  const flushes = producer.stats().flushes
  await s.produced(() => requests() >= from + 5)
  const sent = requests() - from
  t.ok(producer.stats().flushes - flushes <= sent + 2, `stats().flushes follows the requests (${producer.stats().flushes - flushes} for ${sent} requests)`)
  t.ok(published <= sent + 2, `batch:flush follows the requests (${published} for ${sent} requests)`)
  await t.rejects(producer.disconnect({ timeoutMs: 50 }))
  await Promise.all(stuck)
})
