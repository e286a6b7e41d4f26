'use strict'

// A lane lets go of its records once they are written: after a stuck
// partition heals, nothing of its records stays reachable from the
// producer, also when it never sends to that topic again.
const t = require('tap')
const v8 = require('node:v8')
const vm = require('node:vm')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc')
const NOT_ENOUGH_REPLICAS = 19
const byKey = ({ message }) => Number(message.key)

t.test('records written after their partition healed are not kept by its lane', async (t) => {
  let healed = false
  const s = scripted({ leaders: [1, 1], script: () => healed ? undefined : { errors: { 1: NOT_ENOUGH_REPLICAS } } })
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 20_000 } })
  const refs = []
  const sends = []
  // A tenant's topic: its partition 1 stuck for a moment, with records
  // waiting behind the first.
  sends.push(producer.send({ topic: 'tenant-a', messages: [{ key: '1', value: 'first' }] }))
  await s.produced(([, p]) => p === 1)
  for (let i = 0; i < 200; i++) {
    const value = Buffer.alloc(64 * 1024, i)
    refs.push(new WeakRef(value))
    sends.push(producer.send({ topic: 'tenant-a', messages: [{ key: '1', value }] }))
  }
  // Once they have waited behind the first (and joined its lane).
  await producer.send({ topic: 'tenant-a', messages: [{ key: '0', value: 'x' }] })
  await producer.send({ topic: 'tenant-a', messages: [{ key: '0', value: 'x' }] })
  healed = true
  await Promise.all(sends)
  // The producer goes on with other topics only.
  for (let i = 0; i < 20; i++) await producer.send({ topic: 'tenant-b', messages: [{ key: '0', value: 'y' }] })
  s.log.length = 0
  await new Promise((resolve) => setImmediate(resolve))
  gc()
  await new Promise((resolve) => setImmediate(resolve))
  gc()
  const kept = refs.filter((ref) => ref.deref() !== undefined).length
  // (One is held elsewhere: the same when the producer goes on sending to
  // tenant-a, whose lane then lets go of its records.)
  t.ok(kept <= 1, `no written record's value is still held by its lane (held: ${kept} of ${refs.length})`)
  await producer.disconnect()
})
