'use strict'

// Review 2: with idempotent: true, a batch the broker wrote whose answer was
// lost, or answered REQUEST_TIMED_OUT (the leader appended it, its replicas
// were late), and that then expires at its deadline leaves its sequence
// numbers given back; the next record to its partition is sent with them,
// and the broker answers DUPLICATE_SEQUENCE_NUMBER: the new caller resolves,
// though its record was never written. (The Java producer treats an expired
// batch that was sent as an unresolved sequence and renews the producer id
// before the partition sends again.)
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19
const OUT_OF_ORDER_SEQUENCE_NUMBER = 45
const DUPLICATE_SEQUENCE_NUMBER = 46
const byKey = ({ message }) => Number(message.key)

const REQUEST_TIMED_OUT = 7

for (const how of ['its answer lost', 'answered REQUEST_TIMED_OUT (acks=all, the replicas late)']) {
  t.test(`idempotent: a send after an expired batch written but ${how} resolves only if written`, async (t) => {
  // A broker that keeps each producer id's batches per partition, as Kafka
  // does: the same first and last sequence is a copy; a gap is out of order.
    const batches = new Map() // "pid:partition" -> [[first, last]]
    const written = []
    const state = { lose: true, isrDown: false }
    const s = scripted({
      leaders: [1, 1],
      idempotent: true,
      script: (broker, request) => {
        const errors = {}
        let lost = false
        for (const { partitions } of request.topicData) {
          for (const p of partitions) {
            if (state.isrDown) {
              errors[p.partition] = NOT_ENOUGH_REPLICAS
              continue
            }
            const key = `${request.producerId}:${p.partition}`
            const list = batches.get(key) ?? []
            batches.set(key, list)
            const last = p.firstSequence + p.messages.length - 1
            if (list.some(([a, b]) => a === p.firstSequence && b === last)) {
              errors[p.partition] = DUPLICATE_SEQUENCE_NUMBER
              continue
            }
            const expected = list.length === 0 ? 0 : list[list.length - 1][1] + 1
            if (p.firstSequence !== expected) {
              errors[p.partition] = OUT_OF_ORDER_SEQUENCE_NUMBER
              continue
            }
            list.push([p.firstSequence, last])
            for (const m of p.messages) written.push(String(m.value))
            if (state.lose) {
            // Written; the answer lost, then the in-sync replicas shrink.
              state.lose = false
              state.isrDown = true
              lost = true
            }
          }
        }
        if (lost && how !== 'its answer lost') errors[1] = REQUEST_TIMED_OUT
        return lost && how === 'its answer lost' ? { lost: true } : { errors }
      },
    })
    const producer = wrapped(s, { partitioner: byKey, wrap: { retryBackoffMs: 20, maxRetryBackoffMs: 20, deliveryTimeoutMs: 500 } })
    const x = await producer.send({ topic: 't', messages: [{ key: '1', value: 'x' }] }).catch((e) => e)
    t.match(x, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', written: 'unknown' }, 'x rejects at its deadline, maybe written')
    state.isrDown = false
    const y = await producer.send({ topic: 't', messages: [{ key: '1', value: 'y' }] }).then((r) => r, (e) => e)
    if (Array.isArray(y)) t.ok(written.includes('y'), 'y resolved, so y is in the log')
    else t.pass(`y rejected (${y.code})`)
    await producer.disconnect()
  })
}
