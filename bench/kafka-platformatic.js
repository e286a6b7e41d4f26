'use strict'

// bench/kafka.js's `platformatic` scenario: the throughput workload (same
// broker, messages, value size, sends in flight and partitions as kafkajs's
// rows) on @platformatic/kafka, three ways, labels rotated over the rounds:
//   platformatic-send     its send(), one awaited call per message
//   platformatic-stream   its asStream() with its defaults (batches of 100,
//                         10 ms), every message written at once: no result
//                         per message, so a message's latency runs from its
//                         write() to the flush that carried it
//   platformatic-wrapped  the same send() calls through wrapProducer()
// All on one producer configuration (acks -1, not idempotent). Skipped, with a
// line saying so, when @platformatic/kafka is not installed.
const { once } = require('node:events')
const { setTimeout: sleep } = require('node:timers/promises')
const { percentile, round } = require('./common')
const { wrapProducer } = require('../lib/kafka')

const LABELS = ['platformatic-send', 'platformatic-stream', 'platformatic-wrapped']

async function loadPlatformatic () {
  try {
    return await import('@platformatic/kafka')
  } catch {
    return null
  }
}

// `drive` and `value` are bench/kafka.js's: the same callers and messages.
async function platformaticScenario ({ kafka, broker, repeats, messages, inFlight, partitions, warmUpMessages, settleMs, drive, value, gc, log }) {
  const platformatic = await loadPlatformatic()
  if (platformatic === null) {
    log('platformatic: skipped, @platformatic/kafka is not installed (npm install @platformatic/kafka)\n')
    return null
  }
  const byLabel = new Map(LABELS.map((label) => [label, []]))
  for (let rep = 0; rep < repeats; rep++) {
    for (let i = 0; i < LABELS.length; i++) {
      const label = LABELS[(i + rep) % LABELS.length]
      log(`platformatic ${label} (${rep + 1}/${repeats})...\n`)
      const result = await runOne({ platformatic, label, kafka, broker, rep, messages, inFlight, partitions, warmUpMessages, settleMs, drive, value, gc })
      byLabel.get(label).push(result)
      log(`  ${result.msgPerSec} msg/s, ${result.produceRequests} requests\n`)
    }
  }
  const msgPerSecByRound = Object.fromEntries(LABELS.map((label) => [label, byLabel.get(label).map((r) => r.msgPerSec)]))
  const runs = LABELS.map((label) => {
    const all = byLabel.get(label).slice().sort((a, b) => a.msgPerSec - b.msgPerSec)
    return all[Math.floor(all.length / 2)]
  })
  return { name: 'platformatic', repeats, runs, msgPerSecByRound }
}

async function runOne ({ platformatic, label, kafka, broker, rep, messages, inFlight, partitions, warmUpMessages, settleMs, drive, value, gc }) {
  const topic = `bench-platformatic-${label}-${rep}-${process.pid}`
  const warmTopic = `${topic}-warm-up`
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [topic, warmTopic].map((name) => ({ topic: name, numPartitions: partitions })), waitForLeaders: true })
  await admin.disconnect()
  const raw = new platformatic.Producer({ clientId: 'io-hygiene-bench', bootstrapBrokers: broker.brokers, acks: -1 })
  // Every send() is one Produce request on a single broker, the stream's
  // batches included: counted on the instance.
  let requests = 0
  const send = raw.send
  raw.send = function (options, callback) {
    requests++
    return send.call(this, options, callback)
  }
  const producer = label === 'platformatic-wrapped' ? wrapProducer(raw, { flushOnSignals: false }) : raw
  const messageOf = (t, i) => ({ topic: t, value: Buffer.from(value(i)) })
  const sendPlan = (t) => ({ chunk: 1, callers: inFlight, sendChunk: (i) => producer.send({ acks: -1, messages: [messageOf(t, i)] }) })
  const runStream = label === 'platformatic-stream'
  await (runStream ? streamRun(raw, warmTopic, warmUpMessages, messageOf) : drive({ ...sendPlan(warmTopic), messages: warmUpMessages }))
  requests = 0
  gc()
  await sleep(settleMs)
  const cpu = process.cpuUsage()
  const started = performance.now()
  const result = runStream ? await streamRun(raw, topic, messages, messageOf) : await drive(sendPlan(topic))
  const elapsedMs = performance.now() - started
  const cpuUsed = process.cpuUsage(cpu)
  const produceRequests = requests
  if (producer !== raw) await producer.close()
  else await raw.close()
  // What the topic holds, from its high watermarks: nothing acknowledged lost.
  const check = kafka.admin()
  await check.connect()
  const offsets = await check.fetchTopicOffsets(topic)
  await check.disconnect()
  const inTopic = offsets.reduce((n, { high }) => n + Number(high), 0)
  const latencies = result.latencies.sort((a, b) => a - b)
  return {
    label,
    msgPerSec: Math.round(result.acked / (elapsedMs / 1000)),
    produceRequests,
    ackP50Ms: round(percentile(latencies, 50)),
    ackP99Ms: round(percentile(latencies, 99)),
    cpuUsPerMsg: round((cpuUsed.user + cpuUsed.system) / Math.max(1, result.acked), 1),
    rejected: result.rejected,
    ackedNotInTopic: Math.max(0, result.acked - inTopic),
  }
}

// asStream() with its defaults, written as a new user writes it: every
// message at once, then end(), and 'finish' once every batch was sent.
// (Waiting for 'drain' at its default highWaterMark, 16, would cap its
// batches at 16 messages; no result per message lets awaiting callers drive it.)
// Each 'flush' acknowledges the oldest messages written, in order.
async function streamRun (producer, topic, messages, messageOf) {
  const stream = producer.asStream({ acks: -1 })
  const writtenAt = new Float64Array(messages)
  const latencies = []
  let acked = 0
  stream.on('flush', ({ count }) => {
    const now = performance.now()
    for (let i = acked; i < acked + count; i++) latencies.push(now - writtenAt[i])
    acked += count
  })
  // One error destroys the stream: what it had not flushed is lost.
  stream.on('error', () => {})
  try {
    for (let i = 0; i < messages && !stream.destroyed; i++) {
      writtenAt[i] = performance.now()
      stream.write(messageOf(topic, i))
    }
    stream.end()
    await once(stream, 'finish')
  } catch {}
  return { acked, rejected: messages - acked, latencies }
}

// msg/s of `a` over `b`, the median of the ratios within each round.
function pairedRatio (scenario, a, b) {
  const rounds = scenario.msgPerSecByRound
  const ratios = rounds[a].map((v, i) => v / rounds[b][i]).sort((x, y) => x - y)
  return round(percentile(ratios, 50), 2)
}

function platformaticTargets (scenario) {
  if (!scenario) return []
  const wrapped = scenario.runs.find((r) => r.label === 'platformatic-wrapped')
  const send = pairedRatio(scenario, 'platformatic-wrapped', 'platformatic-send')
  const stream = pairedRatio(scenario, 'platformatic-wrapped', 'platformatic-stream')
  return [
    { name: 'platformatic: wrapped msg/s >= 8x its plain send()', holds: send >= 8, measured: `${send}x` },
    { name: 'platformatic: wrapped msg/s >= 0.8x its own asStream()', holds: stream >= 0.8, measured: `${stream}x` },
    { name: 'platformatic: nothing acknowledged that is not in the topic', holds: wrapped.ackedNotInTopic === 0, measured: `${wrapped.ackedNotInTopic}` },
  ]
}

function platformaticNote (scenario) {
  if (!scenario) return []
  return [`platformatic ratios (paired within rounds): wrapped/send() ${pairedRatio(scenario, 'platformatic-wrapped', 'platformatic-send')}x, ` +
    `wrapped/asStream() ${pairedRatio(scenario, 'platformatic-wrapped', 'platformatic-stream')}x; acks -1, not idempotent, the stream with its defaults.`]
}

module.exports = { platformaticScenario, platformaticTargets, platformaticNote }
