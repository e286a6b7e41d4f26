'use strict'

// With idempotent: true, one send, no batch-mates: its first attempt is
// refused with nothing appended (NOT_ENOUGH_REPLICAS), its second appended
// and its answer lost. It may be written, so it must go again under the
// producer id and sequence numbers of that second attempt: written once. A
// guard: a change that marked what a batch went under on the message copy
// an attempt sends wrote it twice here (the third attempt copied the caller's
// message afresh, without the marks, and went under a fresh producer id).
// Plain kafkajs (by its code): gives the sequence numbers back and retries
// under the same producer id, so the broker drops the copy: written once.
const t = require('tap')
const { scripted, wrapped, kafkaLog } = require('./helpers/scripted-kafka')

const NOT_ENOUGH_REPLICAS = 19

function brokers (log) {
  let request = 0
  return scripted({
    leaders: [1],
    idempotent: true,
    script: (broker, req) => {
      request++
      if (request === 1) return { errors: { 0: NOT_ENOUGH_REPLICAS } }
      const errors = {}
      for (const { topic, partitions } of req.topicData) {
        for (const p of partitions) {
          const code = log.append(req, topic, p)
          if (code !== 0) errors[p.partition] = code
        }
      }
      return request === 2 ? { lost: true } : { errors }
    },
  })
}

t.test('idempotent wrapProducer(): a record whose second attempt may have been written is written once', async (t) => {
  const log = kafkaLog()
  const s = brokers(log)
  const producer = wrapped(s, { partitioner: () => 0, wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 3000 } })
  const x = await producer.send({ topic: 't', messages: [{ key: 'k', value: 'x' }] }).then((r) => r, (e) => e)
  t.ok(Array.isArray(x) || x.written !== false, 'x resolves, or says it may be written')
  t.equal(log.times('x'), 1, 'x written once')
  t.equal(s.eos.initProducerIds, 0, 'no fresh producer id')
  await producer.disconnect()
})
