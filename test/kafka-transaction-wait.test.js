'use strict'

// transaction() waits for no send (the Java producer's beginTransaction()
// neither): kafkajs's transaction writes under a producer id of its own, so
// the broker orders nothing between its records and the wrapped producer's.
// Waiting for the queue would make one caller's transaction wait for another
// caller's records held behind a stuck partition, up to deliveryTimeoutMs
// (120 s by default), where plain kafkajs begins at once.
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19
const byKey = ({ message }) => Number(message.key)

t.test('a stuck partition does not hold another caller\'s transaction()', async (t) => {
  const s = scripted({ leaders: [1, 1], script: () => ({ errors: { 1: NOT_ENOUGH_REPLICAS } }) })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 3000 } })
  const settled = []
  const stuck = producer.send({ topic: 'other', messages: [{ key: '1', value: 'stuck' }] })
    .finally(() => settled.push('stuck')).catch((e) => e)
  await s.produced(([, p]) => p === 1)
  await producer.transaction()
  settled.push('transaction')
  t.same(settled[0], 'transaction', 'the transaction began before the stuck send settled')
  t.match(await stuck, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' }, 'the stuck send keeps its own fate')
  await producer.disconnect()
})

t.test('transaction() sends what is queued at once, without lingering', async (t) => {
  let release
  const held = new Promise((resolve) => { release = resolve })
  const s = scripted({ leaders: [1], script: (broker, request, call) => call === 1 ? held : undefined })
  // A linger longer than the test's timeout: without transaction(), the
  // queued send would not go before it.
  const producer = wrapped(s, { partitioner: () => 0, wrap: { lingerMs: 3_600_000 } })
  const first = producer.send({ topic: 'a', messages: [{ value: 'first' }] })
  // Made while the first is in flight: it lingers.
  await new Promise((resolve) => setImmediate(resolve))
  const queued = producer.send({ topic: 'a', messages: [{ value: 'queued' }] })
  await producer.transaction()
  release()
  await first
  t.match(await queued, [{ partition: 0, errorCode: 0 }], 'written once the request before it answered, not a linger later')
  t.same(s.log.map(([, , , values]) => values), [['first'], ['queued']])
  await producer.disconnect()
})
