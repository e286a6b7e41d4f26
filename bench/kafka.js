'use strict'

// `node bench/kafka.js [--json] [--quick]`: one real Kafka broker (started
// here), the same producer workload three ways, in one process run:
//   baseline      raw kafkajs, one awaited send() per message
//   io-hygiene    the same send() calls through wrapProducer()
//   hand-batched  kafkajs sendBatch() of 500 messages (the ceiling)
//   hand-batched-idempotent  the same on kafkajs's idempotent producer (the
//                 one io-hygiene uses), whose per-broker lock lets one
//                 request be in flight; its two callers race to that lock,
//                 so it does not keep their order
// and, only when KAFKA_BENCH_LABELS names them:
//   hand-batched-ordered  one caller, sendBatch() of 1,000 awaited one at a
//                 time on the idempotent producer: what keeps call order
//                 across retries by hand, as io-hygiene does (kafkajs rolls a
//                 failed request's sequence numbers back, so a second request
//                 handed over meanwhile could be written first)
//   io-hygiene@lingerMs=0+maxBatchItems=500  wrapProducer() options, to
//                 compare settings in one run
// Scenarios: `wrapper-cost` (no broker: the wrapper's own CPU per message,
// see wrapperCost()), `throughput` (50,000 messages of ~100 bytes, acks=-1,
// 1,000 sends in flight) and `restart` (the same, with the broker stopped
// for 15 s and started again after a fifth of the messages were
// acknowledged).
// Each label first sends 5,000 messages to a topic of its own (not counted),
// then its heap is collected and the broker left idle for a second.
// throughput runs 7 times with the labels rotated; each label reports its run
// of median msg/s (one run of each swings by ±20% on a shared machine).
// --quick (or KAFKA_BENCH_MESSAGES / KAFKA_BENCH_OUTAGE_MS) shrinks the
// workload for a fast look; the default is the workload.
const { monitorEventLoopDelay } = require('node:perf_hooks')
const { setTimeout: sleep } = require('node:timers/promises')
const v8 = require('node:v8')
const vm = require('node:vm')
// KAFKA_BENCH_LINEAR_GROUPING=1, an experiment: kafkajs 2.2.4 groups a
// request's messages by partition copying the partition's array for every
// message (O(n^2) per request; tulios/kafkajs#1576, unmerged). This puts a
// linear grouping with the same result in its place, for every label, to
// measure what that costs each of them.
if (process.env.KAFKA_BENCH_LINEAR_GROUPING === '1') linearGrouping()
const { Kafka, logLevel } = require('kafkajs')
const { requestSampler, percentile, round, report } = require('./common')
const { startKafka, consumeAll } = require('../test/helpers/kafka-broker')
const { wrapProducer } = require('../lib/kafka')

const quick = process.argv.includes('--quick')
const MESSAGES = Number(process.env.KAFKA_BENCH_MESSAGES ?? (quick ? 10_000 : 50_000))
const OUTAGE_MS = Number(process.env.KAFKA_BENCH_OUTAGE_MS ?? (quick ? 5_000 : 15_000))
// KAFKA_BENCH_SCENARIOS=throughput runs a subset, for quicker iterations.
const SCENARIOS = (process.env.KAFKA_BENCH_SCENARIOS ?? 'wrapper-cost,throughput,restart').split(',')
const LABELS = (process.env.KAFKA_BENCH_LABELS ?? 'baseline,io-hygiene,hand-batched,hand-batched-idempotent').split(',')
// wrapper-cost: sends per run, and runs per label (rotated, median).
const COST_MESSAGES = Number(process.env.KAFKA_BENCH_COST_MESSAGES ?? (quick ? 50_000 : 200_000))
const COST_REPEATS = quick ? 3 : 7
const KINDS = ['baseline', 'io-hygiene', 'hand-batched', 'hand-batched-idempotent', 'hand-batched-ordered']
const json = process.argv.includes('--json')
const IN_FLIGHT = 1_000
const HAND_BATCH = 500
const PARTITIONS = 3
const VALUE_BYTES = 100
// Repetitions of the throughput scenario (KAFKA_BENCH_REPEATS).
const REPEATS = Number(process.env.KAFKA_BENCH_REPEATS ?? (quick ? 1 : 7))
const WARM_UP_MESSAGES = Math.min(5_000, MESSAGES)
const SETTLE_MS = 1_000
// A run that has not finished by then stops sending; what is left is reported.
const RUN_DEADLINE_MS = 240_000
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc')
// What the run in progress has done so far, for the progress lines on stderr.
let progressOf = () => ({})

function linearGrouping () {
  const Module = require('node:module')
  const file = require.resolve('kafkajs/src/producer/groupMessagesPerPartition')
  const mod = new Module(file, module)
  mod.filename = file
  mod.loaded = true
  mod.exports = ({ topic, partitionMetadata, messages, partitioner }) => {
    const result = {}
    if (partitionMetadata.length === 0) return result
    for (const message of messages) {
      const partition = partitioner({ topic, partitionMetadata, message })
      const list = result[partition]
      if (list === undefined) result[partition] = [message]
      else list.push(message)
    }
    return result
  }
  require.cache[file] = mod
}

function range (first, end) {
  return Array.from({ length: end - first }, (_, k) => first + k)
}

// 'io-hygiene@lingerMs=0+maxBatchItems=500' ->
// { kind: 'io-hygiene', options: { lingerMs: 0, maxBatchItems: 500 } }.
// A misspelt kind throws here; a misspelt option throws in wrapProducer().
function parseLabel (label) {
  const [kind, settings] = label.split('@')
  if (!KINDS.includes(kind)) throw new Error(`KAFKA_BENCH_LABELS: unknown label "${kind}"; known: ${KINDS.join(', ')}`)
  const options = settings === undefined
    ? undefined
    : Object.fromEntries(settings.split('+').map((pair) => {
      const [name, setting] = pair.split('=')
      return [name, Number(setting)]
    }))
  return { kind, options }
}

function value (n) {
  const head = `${n}:`
  return head + 'x'.repeat(Math.max(0, VALUE_BYTES - head.length))
}

// Produce requests and how many were in flight at once, from kafkajs's
// instrumentation (one REQUEST event per finished request).
function requestCounter (producer) {
  const spans = []
  producer.on(producer.events.REQUEST, ({ payload }) => {
    if (payload.apiName !== 'Produce') return
    spans.push([payload.createdAt, payload.createdAt + payload.pendingDuration + payload.duration])
  })
  const counter = () => {
    const edges = []
    for (const [start, end] of spans) edges.push([start, 1], [end, -1])
    edges.sort((a, b) => a[0] - b[0] || a[1] - b[1])
    let current = 0
    let peak = 0
    for (const [, delta] of edges) {
      current += delta
      if (current > peak) peak = current
    }
    return { produceRequests: spans.length, inFlightRequestsPeak: peak }
  }
  counter.reset = () => { spans.length = 0 }
  return counter
}

// Runs `callers` async callers until `messages` are settled.
// `sendChunk(first, end)` sends messages first..end-1 and resolves when they
// are acknowledged. The bookkeeping per message is kept to two array writes,
// since it runs on the same thread as the producer being measured.
async function drive ({ sendChunk, chunk, callers, onProgress, messages = MESSAGES }) {
  let next = 0
  let acked = 0
  let rejected = 0
  const latencies = new Float64Array(messages)
  const ackedFlags = new Uint8Array(messages)
  const deadline = Date.now() + RUN_DEADLINE_MS
  progressOf = () => ({ sent: next, acked, rejected })
  const caller = async () => {
    while (next < messages && Date.now() < deadline) {
      const first = next
      const end = Math.min(messages, next + chunk)
      next = end
      const started = performance.now()
      try {
        await sendChunk(first, end)
        const ms = performance.now() - started
        for (let i = first; i < end; i++) {
          latencies[i] = ms
          ackedFlags[i] = 1
        }
        acked += end - first
      } catch {
        rejected += end - first
      }
      onProgress?.(acked)
    }
  }
  // Bounded: sends still unsettled a minute past the deadline are reported
  // as pending instead of holding the benchmark forever.
  let watchdog
  const bound = new Promise((resolve) => { watchdog = setTimeout(resolve, RUN_DEADLINE_MS + 60_000) })
  await Promise.race([Promise.all(Array.from({ length: callers }, caller)), bound])
  clearTimeout(watchdog)
  const settled = acked + rejected
  const ackedLatencies = []
  for (let i = 0; i < messages; i++) if (ackedFlags[i] === 1) ackedLatencies.push(latencies[i])
  return { acked, rejected, latencies: ackedLatencies, ackedFlags, unsent: messages - next, pending: next - settled }
}

async function run ({ label, kafka, broker, scenario, rep }) {
  const { kind, options } = parseLabel(label)
  const topic = `bench-${scenario}-${label.replace(/[^a-zA-Z0-9-]/g, '_')}-${rep}-${process.pid}`
  const warmTopic = `${topic}-warm-up`
  // A fresh admin each run: one that lived through a broker restart may
  // hold a dead connection.
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [topic, warmTopic].map((name) => ({ topic: name, numPartitions: PARTITIONS })), waitForLeaders: true })
  await admin.disconnect()
  // io-hygiene uses the idempotent producer (what makes its retries safe);
  // baseline and hand-batched are kafkajs's default producer, as most
  // services use it; the other hand-batched labels the idempotent one.
  const idempotent = kind === 'io-hygiene' || kind === 'hand-batched-idempotent' || kind === 'hand-batched-ordered'
  const raw = kafka.producer(idempotent ? { idempotent: true } : {})
  const counter = requestCounter(raw)
  await raw.connect()
  const producer = kind === 'io-hygiene' ? wrapProducer(raw, options) : raw
  const message = (i) => ({ value: value(i) })
  const chunk = kind === 'hand-batched-ordered' ? IN_FLIGHT : HAND_BATCH
  const planFor = (topic) => kind.startsWith('hand-batched')
    ? { chunk, callers: IN_FLIGHT / chunk, sendChunk: (first, end) => producer.sendBatch({ acks: -1, topicMessages: [{ topic, messages: range(first, end).map(message) }] }) }
    : { chunk: 1, callers: IN_FLIGHT, sendChunk: (i) => producer.send({ topic, acks: -1, messages: [message(i)] }) }
  // Every label starts alike: its code paths warmed up on a topic of their
  // own, then a collected heap and an idle broker, so that no run pays for
  // the garbage or the backlog of the one before it.
  await drive({ ...planFor(warmTopic), messages: WARM_UP_MESSAGES })
  await producer.flush?.()
  counter.reset()
  gc()
  await sleep(SETTLE_MS)
  const plan = planFor(topic)

  let restart = null
  if (scenario === 'restart') {
    plan.onProgress = (acked) => {
      if (restart === null && acked >= MESSAGES / 5) {
        restart = (async () => {
          await broker.stop()
          await sleep(OUTAGE_MS)
          await broker.start()
        })()
      }
    }
  }

  const loop = monitorEventLoopDelay({ resolution: 10 })
  const sampler = requestSampler(5)
  loop.enable()
  const cpu = process.cpuUsage()
  const started = performance.now()
  const result = await drive(plan)
  const elapsedMs = performance.now() - started
  const cpuUsed = process.cpuUsage(cpu)
  loop.disable()
  const active = sampler.stop()
  if (restart !== null) await restart
  await producer.disconnect()
  const requests = counter()

  const consumed = await consumeAll(kafka, topic, result.acked, { timeoutMs: 30_000 })
  const seen = new Map()
  let outOfOrder = 0
  const last = new Map()
  for (const m of consumed.sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
    const n = Number(m.value.slice(0, m.value.indexOf(':')))
    seen.set(n, (seen.get(n) ?? 0) + 1)
    const previous = last.get(m.partition)
    if (previous !== undefined && n < previous) outOfOrder++
    last.set(m.partition, Math.max(n, previous ?? -1))
  }
  let duplicated = 0
  for (const count of seen.values()) duplicated += count - 1
  let lost = 0
  for (let i = 0; i < result.ackedFlags.length; i++) if (result.ackedFlags[i] === 1 && !seen.has(i)) lost++
  const latencies = result.latencies.sort((a, b) => a - b)
  const out = {
    label,
    msgPerSec: Math.round(result.acked / (elapsedMs / 1000)),
    produceRequests: requests.produceRequests,
    ...active,
    inFlightRequestsPeak: requests.inFlightRequestsPeak,
    ackP50Ms: round(percentile(latencies, 50)),
    ackP99Ms: round(percentile(latencies, 99)),
    eventLoopDelayMaxMs: round(loop.max / 1e6),
    cpuUsPerMsg: round((cpuUsed.user + cpuUsed.system) / Math.max(1, result.acked), 1),
    outOfOrder,
  }
  if (scenario === 'restart') Object.assign(out, { rejected: result.rejected, lost, duplicated })
  if (result.unsent > 0) out.unsent = result.unsent
  if (result.pending > 0) out.pending = result.pending
  return out
}

// A kafkajs producer double that answers every sendBatch() at once with one
// RecordMetadata entry per partition, as kafkajs does. It isolates our own
// code: the one place in the benchmarks where a double is right.
function producerDouble () {
  const metadata = Array.from({ length: PARTITIONS }, (_, partition) => ({ topicName: 'cost', partition, errorCode: 0, baseOffset: '0', logAppendTime: '-1', logStartOffset: '0' }))
  const noop = async () => {}
  return {
    events: {},
    connect: noop,
    disconnect: noop,
    isIdempotent: () => true,
    on: () => () => {},
    logger: () => ({}),
    transaction: noop,
    sendBatch: async () => metadata,
  }
}

// The floor: what any batching wrapper must do. Each caller awaits one
// promise per message, batches go to the same double one at a time, and each
// caller is resolved with its own copy of the metadata.
function floorProducer (producer) {
  let resolvers = []
  let messages = []
  let busy = false
  const flush = async () => {
    busy = true
    while (messages.length > 0) {
      const batch = resolvers
      const sent = messages
      resolvers = []
      messages = []
      const metadata = await producer.sendBatch({ acks: -1, topicMessages: [{ topic: 'cost', messages: sent }] })
      for (let i = 0; i < batch.length; i++) batch[i](metadata.slice())
    }
    busy = false
  }
  return {
    send: (record) => new Promise((resolve) => {
      resolvers.push(resolve)
      messages.push(record.messages[0])
      if (!busy && messages.length === 1) queueMicrotask(flush)
    }),
    disconnect: async () => {},
  }
}

// wrapper-cost: COST_MESSAGES one-message send() calls, IN_FLIGHT callers
// each awaiting its own, through wrapProducer() or the floor, over the double.
async function wrapperCost (label) {
  const producer = label === 'io-hygiene' ? wrapProducer(producerDouble(), { flushOnSignals: false }) : floorProducer(producerDouble())
  const value = 'x'.repeat(VALUE_BYTES)
  const run = async (messages) => {
    let next = 0
    const caller = async () => {
      while (next < messages) {
        next++
        await producer.send({ topic: 'cost', acks: -1, messages: [{ value }] })
      }
    }
    await Promise.all(Array.from({ length: IN_FLIGHT }, caller))
  }
  await run(COST_MESSAGES / 4) // warm up
  gc()
  const cpu = process.cpuUsage()
  const started = performance.now()
  await run(COST_MESSAGES)
  const elapsedMs = performance.now() - started
  const used = process.cpuUsage(cpu)
  await producer.disconnect()
  return {
    label,
    messages: COST_MESSAGES,
    msgPerSec: Math.round(COST_MESSAGES / (elapsedMs / 1000)),
    cpuUsPerMsg: round((used.user + used.system) / COST_MESSAGES, 2),
  }
}

function costNote (cost) {
  const [ioh, floor] = ['io-hygiene', 'floor'].map((label) => cost.runs.find((r) => r.label === label))
  return `wrapper-cost (Node ${process.version}): io-hygiene ${ioh.cpuUsPerMsg} us CPU/msg, floor ${floor.cpuUsPerMsg}: ` +
    `${round(ioh.cpuUsPerMsg - floor.cpuUsPerMsg, 2)} us more (target <= 1.0; ${COST_MESSAGES} sends, ${IN_FLIGHT} awaiting callers, a producer double answering at once, median of ${COST_REPEATS}).`
}

function costTarget (cost) {
  const [ioh, floor] = ['io-hygiene', 'floor'].map((label) => cost.runs.find((r) => r.label === label))
  const added = round(ioh.cpuUsPerMsg - floor.cpuUsPerMsg, 2)
  return { name: 'wrapper-cost: io-hygiene adds <= 1.0 us CPU per message over the floor', holds: added <= 1.0, measured: `${added} us` }
}

async function costScenario () {
  const labels = ['io-hygiene', 'floor']
  const byLabel = new Map(labels.map((label) => [label, []]))
  for (let rep = 0; rep < COST_REPEATS; rep++) {
    for (let i = 0; i < labels.length; i++) {
      const label = labels[(i + rep) % labels.length]
      byLabel.get(label).push(await wrapperCost(label))
    }
  }
  const runs = labels.map((label) => {
    const all = byLabel.get(label).sort((a, b) => a.cpuUsPerMsg - b.cpuUsPerMsg)
    return all[Math.floor(all.length / 2)]
  })
  return { name: 'wrapper-cost', repeats: COST_REPEATS, runs }
}

async function main () {
  // Before the broker starts: a misspelt label fails at once.
  for (const label of LABELS) parseLabel(label)
  // No broker needed, and none running yet to share the CPU with.
  const cost = SCENARIOS.includes('wrapper-cost') ? await costScenario() : null
  if (SCENARIOS.every((name) => name === 'wrapper-cost')) {
    report({ bench: 'kafka', scenarios: [cost], notes: [costNote(cost)], targets: [costTarget(cost)] })
    return
  }
  const broker = await startKafka({ partitions: PARTITIONS })
  // Ctrl-C or a CI timeout: take the broker down with us.
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => broker.kill().finally(() => process.exit(130)))
  }
  const kafka = new Kafka({ clientId: 'io-hygiene-bench', brokers: broker.brokers, logLevel: process.env.KAFKA_BENCH_LOG ? logLevel.ERROR : logLevel.NOTHING })
  const scenarios = cost === null ? [] : [cost]
  // Every throughput run's msg/s, lowest first: how far one run could be off.
  let spread = ''
  try {
    for (const scenario of SCENARIOS.filter((name) => name !== 'wrapper-cost')) {
      // throughput is repeated with the labels rotated, and each label
      // reports its run of median msg/s: on a shared machine one run of each
      // compares whatever moments they happened to get. restart is about
      // what is lost, and runs once.
      const repeats = scenario === 'throughput' ? REPEATS : 1
      const byLabel = new Map(LABELS.map((label) => [label, []]))
      for (let rep = 0; rep < repeats; rep++) {
        for (let i = 0; i < LABELS.length; i++) {
          const label = LABELS[(i + rep) % LABELS.length]
          const progress = setInterval(() => process.stderr.write(`  ${label}: ${JSON.stringify(progressOf())}\n`), 10_000).unref()
          if (!json) process.stderr.write(`${scenario} ${label} (${rep + 1}/${repeats})...\n`)
          const result = await run({ label, kafka, broker, scenario, rep })
          byLabel.get(label).push(result)
          if (!json) process.stderr.write(`  ${result.msgPerSec} msg/s, ${result.cpuUsPerMsg} µs CPU/msg\n`)
          clearInterval(progress)
        }
      }
      const sorted = LABELS.map((label) => byLabel.get(label).sort((a, b) => a.msgPerSec - b.msgPerSec))
      const runs = sorted.map((all) => all[Math.floor(all.length / 2)])
      scenarios.push({ name: scenario, repeats, runs })
      if (repeats > 1) spread = LABELS.map((label, k) => `${label} ${sorted[k].map((r) => r.msgPerSec).join(', ')}`).join('; ')
    }
  } finally {
    await broker.close()
  }
  // A subset of labels (KAFKA_BENCH_LABELS) leaves some ratios NaN.
  const throughput = scenarios.find((s) => s.name === 'throughput') ?? { runs: [] }
  const of = (label) => throughput.runs.find((r) => r.label === label) ?? { msgPerSec: NaN, produceRequests: NaN, cpuUsPerMsg: NaN }
  const [base, ioh, hand, handIdem] = ['baseline', 'io-hygiene', 'hand-batched', 'hand-batched-idempotent'].map(of)
  report({
    bench: 'kafka',
    messages: MESSAGES,
    inFlight: IN_FLIGHT,
    outageMs: OUTAGE_MS,
    scenarios,
    notes: [
      `${MESSAGES} messages of ~${VALUE_BYTES} bytes, acks=-1, ${IN_FLIGHT} sends in flight, ${PARTITIONS} partitions, Node ${process.version}; ` +
        `throughput: each label's run of median msg/s out of ${REPEATS}, labels rotated.`,
      ...(cost === null ? [] : [costNote(cost)]),
      `throughput ratios: io-hygiene/hand-batched-idempotent msg/s ${round(ioh.msgPerSec / handIdem.msgPerSec, 2)}x, io-hygiene/hand-batched ${round(ioh.msgPerSec / hand.msgPerSec, 2)}x, ` +
        `io-hygiene/baseline ${round(ioh.msgPerSec / base.msgPerSec, 2)}x, cpuUsPerMsg io-hygiene/hand-batched ${round(ioh.cpuUsPerMsg / hand.cpuUsPerMsg, 2)}x, ` +
        `produce requests io-hygiene/baseline ${round(ioh.produceRequests / base.produceRequests, 4)}.`,
      ...(spread === '' ? [] : [`throughput msg/s of every run, lowest first: ${spread}.`]),
    ],
    targets: cost === null ? [] : [costTarget(cost)],
  })
}

main().catch((error) => {
  process.stderr.write(error.stack + '\n')
  process.exitCode = 1
})
