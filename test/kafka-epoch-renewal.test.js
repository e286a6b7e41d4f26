'use strict'

// Review 2: with idempotent: true, a batch that may have been written (its
// answer lost) is set aside while the producer's other sends go on. If one
// of those gets OUT_OF_ORDER_SEQUENCE_NUMBER, the producer takes a fresh
// producer id and every sequence starts again at 0: the set-aside batch then
// goes again under the new id, and the broker cannot tell it is a copy. It
// is written twice. (Before parking, the batch went again before anything
// newer, under the id that wrote it, and the broker dropped the copy.)
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const OUT_OF_ORDER_SEQUENCE_NUMBER = 45
const DUPLICATE_SEQUENCE_NUMBER = 46
const byKey = ({ message }) => Number(message.key)

t.test('idempotent: a batch whose answer was lost is not written twice when another partition renews the producer id', async (t) => {
  // A broker that keeps each producer id's next sequence per partition, as
  // Kafka does: a copy of what it wrote is answered DUPLICATE_SEQUENCE_NUMBER.
  const next = new Map() // "pid:partition" -> next sequence
  const written = [] // [partition, value]
  let loseOne = true // partition 1's first request: written, its answer lost
  let refuseOne = false // partition 0: OUT_OF_ORDER_SEQUENCE_NUMBER once
  const s = scripted({
    leaders: [1, 2],
    idempotent: true,
    script: (broker, request) => {
      const errors = {}
      let lost = false
      for (const { partitions } of request.topicData) {
        for (const p of partitions) {
          if (p.partition === 0 && refuseOne) {
            refuseOne = false
            errors[0] = OUT_OF_ORDER_SEQUENCE_NUMBER
            continue
          }
          const key = `${request.producerId}:${p.partition}`
          const expected = next.get(key) ?? 0
          if (p.firstSequence < expected) {
            errors[p.partition] = DUPLICATE_SEQUENCE_NUMBER
            continue
          }
          next.set(key, expected + p.messages.length)
          for (const m of p.messages) written.push([p.partition, String(m.value)])
          if (p.partition === 1 && loseOne) {
            loseOne = false
            lost = true
          }
        }
      }
      return lost ? { lost: true } : { errors }
    },
  })
  let pid = 7
  s.eos.getProducerId = () => pid
  const renew = s.eos.initProducerId
  s.eos.initProducerId = async function () {
    pid++
    return renew.call(this)
  }
  const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 300, maxRetryBackoffMs: 300, deliveryTimeoutMs: 20_000 } })
  const x = producer.send({ topic: 't', messages: [{ key: '1', value: 'x' }] })
  await s.produced(([, p]) => p === 1)
  // While x waits out its backoff: a send to partition 0, refused once as
  // out of order.
  refuseOne = true
  const y = producer.send({ topic: 't', messages: [{ key: '0', value: 'y' }] })
  const outcomes = await Promise.allSettled([x, y])
  t.same(outcomes.map((o) => o.status), ['fulfilled', 'fulfilled'], 'both resolve')
  t.same(written.filter(([, v]) => v === 'x').length, 1, 'x written once')
  t.same(written.filter(([, v]) => v === 'y').length, 1, 'y written once')
  await producer.disconnect()
})
