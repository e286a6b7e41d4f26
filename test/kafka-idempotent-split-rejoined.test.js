'use strict'

// With idempotent: true, a partition batch refused for one record
// (INVALID_RECORD: a keyless record on a compacted topic) is sent again in
// halves. A half written whose answer was lost may have been written: it
// must go again under the producer id and sequence numbers it went with, so
// that the broker drops the copy; each record written once. A guard: a
// change that marked what a batch went under on the message copies an
// attempt sends wrote a and b twice here (the next attempt copied the
// callers' messages afresh and went as a new batch under a fresh producer id).
// Plain kafkajs: each call its own request (no halves), a lost answer retried
// under the same producer id and sequence numbers: written once.
const t = require('tap')
const { scripted, wrapped, kafkaLog } = require('./helpers/scripted-kafka')

const INVALID_RECORD = 87

t.test('idempotent: records split from an invalid one, written with their answer lost, are written once', async (t) => {
  const log = kafkaLog()
  let loseOnce = true
  const s = scripted({
    leaders: [1],
    idempotent: true,
    script: (broker, request) => {
      const errors = {}
      let lost = false
      for (const { topic, partitions } of request.topicData) {
        for (const p of partitions) {
          // A compacted topic: a batch with a keyless record is refused whole.
          if (p.messages.some((m) => m.key == null)) {
            errors[p.partition] = INVALID_RECORD
            continue
          }
          const code = log.append(request, topic, p)
          if (code !== 0) errors[p.partition] = code
          else if (loseOnce) {
            loseOnce = false
            lost = true
          }
        }
      }
      return lost ? { lost: true } : { errors }
    },
  })
  const producer = wrapped(s, { partitioner: () => 0, wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 3000 } })
  const send = (message) => producer.send({ topic: 't', messages: [message] }).then((r) => r, (e) => e)
  const [a, b, c, d] = await Promise.all([
    send({ key: 'a', value: 'a' }),
    send({ key: 'b', value: 'b' }),
    send({ key: 'c', value: 'c' }),
    send({ value: 'd' }),
  ])
  t.match(d, { code: 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED' }, 'the keyless record is refused')
  t.ok(Array.isArray(c), `c resolves (got ${c.code ?? ''} ${c.cause?.type ?? ''} written: ${c.written})`)
  t.equal(log.times('c'), 1, 'c written once')
  t.same(['a', 'b'].map(log.times), [1, 1], 'a and b written once')
  t.ok([a, b].every((r) => Array.isArray(r)), 'a and b (written) resolve')
  await producer.disconnect()
})
