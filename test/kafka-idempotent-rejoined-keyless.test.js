'use strict'

// With idempotent: true, a batch that may have been written (appended, then
// answered REQUEST_TIMED_OUT) goes again as it went, under its sequence
// numbers. A keyless record of the same wrapped batch that was refused
// elsewhere with nothing appended (NOT_LEADER) leaves its partition and is
// partitioned anew (as kafkajs does), and the partitioner can put it in that
// maybe-written partition batch. It must not change that batch: a batch
// going again with more records than it went with is either refused out of
// order (the keyless caller rejects for another caller's batch) or, taken
// as a new one under a fresh producer id, writes the old record twice.
// Both orders (the keyless record after or before the maybe-written one)
// are checked: the keyless record waits, the batch goes as it went, and
// each is written once. A guard: the reverted sequence change read what a
// batch went under from its first message only and failed both.
// Plain kafkajs (its own sendMessages on the same scripted brokers, the two
// calls concurrent): a written once, but x resolves unwritten (its retry
// reuses a's given-back sequence numbers and is taken for a copy).
const t = require('tap')
const { scripted, wrapped } = require('./helpers/scripted-kafka')

const NOT_LEADER = 6
const REQUEST_TIMED_OUT = 7
const OUT_OF_ORDER = 45
const DUPLICATE = 46

// Kafka's per-producer-id batches of a partition (as kafka-sequences.test.js).
function kafkaLog () {
  const batches = new Map()
  const written = []
  function append (request, topic, p) {
    const key = `${request.producerId}:${topic}:${p.partition}`
    const list = batches.get(key) ?? []
    const last = p.firstSequence + p.messages.length - 1
    if (list.some(([a, b]) => a === p.firstSequence && b === last)) return DUPLICATE
    if (list.length > 0 && p.firstSequence !== list[list.length - 1][1] + 1) return OUT_OF_ORDER
    batches.set(key, [...list, [p.firstSequence, last]])
    for (const m of p.messages) written.push(String(m.value))
    return 0
  }
  return { append, times: (v) => written.filter((w) => w === v).length }
}

for (const order of ['keyed first', 'keyless first']) {
  t.test(`idempotent: a keyless record repartitioned into a maybe-written batch (${order})`, async (t) => {
    const log = kafkaLog()
    let first = true
    const s = scripted({
      leaders: [1, 1],
      idempotent: true,
      script: (broker, request) => {
        const errors = {}
        const appended = {}
        for (const { topic, partitions } of request.topicData) {
          for (const p of partitions) {
            if (first && p.partition === 0) {
              errors[0] = NOT_LEADER // nothing appended
              continue
            }
            const code = log.append(request, topic, p)
            if (code !== 0) errors[p.partition] = code
            else if (first && p.partition === 1) {
              errors[1] = REQUEST_TIMED_OUT // appended, replicas late
              appended[1] = '0'
            }
          }
        }
        first = false
        return { errors, appended }
      },
    })
    // kafkajs's default partitioner: a key's hash, round robin for none.
    let next = 0
    const partitioner = ({ message }) => message.key == null ? next++ % 2 : Number(message.key)
    const producer = wrapped(s, { partitioner, wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 3000 } })
    const keyed = () => producer.send({ topic: 't', messages: [{ key: '1', value: 'a' }] }).then((r) => r, (e) => e)
    const keyless = () => producer.send({ topic: 't', messages: [{ value: 'x' }] }).then((r) => r, (e) => e)
    let a, x
    if (order === 'keyed first') {
      a = keyed()
      x = keyless()
    } else {
      next = 0
      x = keyless()
      a = keyed()
    }
    const [ra, rx] = await Promise.all([a, x])
    t.ok(Array.isArray(rx), `the keyless caller resolves (got ${rx.code ?? ''} ${rx.cause?.type ?? ''})`)
    t.equal(log.times('x'), 1, 'x written once')
    t.equal(log.times('a'), 1, 'a written once')
    t.ok(Array.isArray(ra) || ra.written !== false, 'a resolves or says it may be written')
    await producer.disconnect()
  })
}
