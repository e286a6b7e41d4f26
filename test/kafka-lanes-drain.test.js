'use strict'

// Once a stuck partition takes records again, the batches held behind its
// first one go one after another as each before it is written (the lane
// wakes the next: Lanes#settled), not each at its own backoff: a batch held
// back spends no attempt and waits for no timer. Without the wake, 100 sends
// held during a 3 s stall drained at about 2.5 a second and most rejected
// at their deadline with the partition healthy.
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19
const byKey = ({ message }) => Number(message.key)

t.test('once a stalled partition takes records again, the sends held behind it are written before their deadline', async (t) => {
  let healed = false
  const s = scripted({ leaders: [1, 1], script: () => healed ? undefined : { errors: { 1: NOT_ENOUGH_REPLICAS } } })
  // The defaults' backoff (100 ms to 1 s); a deadline of 10 s.
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 100, maxRetryBackoffMs: 1000, deliveryTimeoutMs: 10_000 } })
  const held = []
  for (let i = 0; i < 60; i++) {
    held.push(producer.send({ topic: 't', messages: [{ key: '1', value: `1-${i}` }] }).then(() => 'written', (e) => e.code))
    await producer.send({ topic: 't', messages: [{ key: '0', value: `0-${i}` }] })
  }
  // A stall of a few tries of the head (its backoff up to 1 s), then healed.
  await s.produced(() => s.log.filter(([, p]) => p === 1).length >= 5)
  healed = true
  const outcomes = await Promise.all(held)
  const written = outcomes.filter((o) => o === 'written').length
  t.equal(written, held.length, `every held send written once its partition took records (${written} of ${held.length})`)
  await producer.disconnect()
})
