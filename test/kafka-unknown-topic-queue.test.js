'use strict'

// With auto-creation asked (kafkajs's default), records to a topic the
// cluster does not know are asked for a few times before they reject, and a
// later batch's records to it wait in the topic's lane (in call order, for
// when it is created). Each ask counts for every record waiting there, so
// that a code path sending to a misspelled topic (once a second) gets each
// caller's rejection after its own asks, as plain kafkajs gives each call its
// own retries, and not after every earlier caller's: no queue builds up.
const t = require('tap')
const path = require('node:path')
const { scripted, wrapped, dir } = require('./helpers/scripted-kafka')

const { createErrorFromCode } = require(path.join(dir, 'src/protocol/error'))
const UNKNOWN_TOPIC_OR_PARTITION = 3

t.test('a send to a misspelled topic rejects after its own attempts, not after every earlier caller\'s', async (t) => {
  const s = scripted({ leaders: [1] })
  let asked = 0 // the cluster asked for the misspelled topic
  s.cluster.addMultipleTargetTopics = async (topics) => {
    if (topics.includes('evnets')) {
      asked++
      throw createErrorFromCode(UNKNOWN_TOPIC_OR_PARTITION)
    }
  }
  const producer = wrapped(s, { partitioner: () => 0, wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 60_000 } })
  const typos = []
  // Six callers, each sending to the misspelled topic beside a good send.
  for (let i = 0; i < 6; i++) {
    const sentAt = asked
    typos.push(producer.send({ topic: 'evnets', messages: [{ value: `typo-${i}` }] }).then(
      () => null, (error) => ({ error, attempts: asked - sentAt })))
    await producer.send({ topic: 'events', messages: [{ value: `good-${i}` }] })
  }
  const outcomes = await Promise.all(typos)
  t.ok(outcomes.every((o) => o?.error.cause?.type === 'UNKNOWN_TOPIC_OR_PARTITION'), 'each rejects as an unknown topic')
  const last = outcomes[outcomes.length - 1].attempts
  t.ok(last <= 10, `the last caller's rejection waits for about its own attempts (waited for ${last} asks of the topic; each caller gets 5)`)
  t.match(producer.stats(), { flushed: 6, rejected: 6 }, 'each counted once')
  await producer.disconnect()
})

t.test('a topic being created: the sends that waited behind the first, asked for with it, are written in call order', async (t) => {
  const s = scripted({ leaders: [1] })
  let unknown = 4 // asks answered "unknown" before the topic exists
  s.cluster.addMultipleTargetTopics = async (topics) => {
    if (topics.includes('later') && unknown > 0) {
      unknown--
      throw createErrorFromCode(UNKNOWN_TOPIC_OR_PARTITION)
    }
  }
  const producer = wrapped(s, { partitioner: () => 0, wrap: { retryBackoffMs: 5, maxRetryBackoffMs: 5, deliveryTimeoutMs: 60_000 } })
  const sends = []
  for (let i = 0; i < 3; i++) {
    sends.push(producer.send({ topic: 'later', messages: [{ value: `l-${i}` }] }))
    await producer.send({ topic: 'other', messages: [{ value: `o-${i}` }] })
  }
  t.match(await Promise.all(sends), [[{ partition: 0 }], [{ partition: 0 }], [{ partition: 0 }]], 'each written, none refused for the asks it waited through')
  const written = s.log.map(([, , , values]) => values).flat().filter((v) => v.startsWith('l-'))
  t.same(written, ['l-0', 'l-1', 'l-2'], 'in call order')
  await producer.disconnect()
})
