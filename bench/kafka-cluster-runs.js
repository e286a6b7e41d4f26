'use strict'

// `node bench/kafka-cluster-runs.js [--rounds N] [--json] [--callers N]
// [--labels a,b] [--fresh-cluster]`: how the Kafka cluster claims are checked
// (`--from <file>` prints the table of a saved --json run).
// A three-node KRaft cluster on 127.0.0.1 (6 partitions, 3 replicas,
// min.insync.replicas 2); per round, every label's producer sends at the same
// time, each to its own topic, while one outage moves the leaders: the node
// leading most partitions stopped and started 10 s later, then each other node
// restarted in turn once the topic is back in sync, then the preferred leaders
// elected back. Then every topic is read back whole and compared with what
// each send() said. Labels, by load order (one child process each, so each
// loads as a service would):
//   kafkajs plain default|idempotent            kafkajs as it ships (the reference)
//   install-first wrapped default|idempotent    install() before kafkajs, wrapProducer()
//   kafkajs-first wrapped default|idempotent    kafkajs loaded first, no install()
//                                               (the idempotent one refused at wrap time:
//                                               recorded as `refused`, nothing sent)
//   platformatic plain default|idempotent       @platformatic/kafka send() (its reference)
//   platformatic wrapped default|idempotent     wrapProducer() over it
// Per label per round: sent, acknowledged, acknowledged-but-absent,
// duplicates, rejected (by code), stuck (a producer with calls pending and
// none acknowledged for longer than --stuck-s, or calls still pending at the end).
// Not in `npm test` (minutes per round); bounded: at most 20 rounds, each
// given up after --round-timeout-s; every JVM and child stopped by PID.
const { fork } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { report, option, checkArgs, childMessage } = require('./common')
const { startKafkaCluster } = require('../test/helpers/kafka-broker')
const { outage, outageCount, createTopic } = require('../test/helpers/leader-move')

const argv = process.argv.slice(2)
checkArgs(argv, { flags: ['--json', '--fresh-cluster'], options: ['--rounds', '--callers', '--stuck-s', '--round-timeout-s', '--labels', '--from'] },
  'node bench/kafka-cluster-runs.js [--rounds N] [--json] [--callers N] [--labels a,b] [--fresh-cluster] [--stuck-s S] [--round-timeout-s S] | --from <file>')
const json = argv.includes('--json')
const rounds = option(argv, '--rounds', 5)
if (rounds > 20) throw new RangeError('--rounds must be at most 20')
const callers = option(argv, '--callers', 100)
const stuckMs = option(argv, '--stuck-s', 30) * 1000
const roundTimeoutMs = option(argv, '--round-timeout-s', 900) * 1000
const freshCluster = argv.includes('--fresh-cluster')
// The wrapper's default deliveryTimeoutMs, which no label changes: a call
// still pending this long after the last send began is stuck for good.
const DELIVERY_TIMEOUT_MS = 120_000

const ORDERS = {
  'kafkajs-first': ['kafkajs plain default', 'kafkajs plain idempotent', 'kafkajs-first wrapped default', 'kafkajs-first wrapped idempotent'],
  'install-first': ['install-first wrapped default', 'install-first wrapped idempotent'],
  platformatic: ['platformatic plain default', 'platformatic plain idempotent', 'platformatic wrapped default', 'platformatic wrapped idempotent'],
}
const ALL = Object.values(ORDERS).flat()
const labelsArg = argv.includes('--labels') ? argv[argv.indexOf('--labels') + 1].split(',') : ALL
for (const label of labelsArg) if (!ALL.includes(label)) throw new TypeError(`--labels: unknown label ${JSON.stringify(label)} (known: ${ALL.join(', ')})`)

// Progress on stderr, with --json too: a run takes minutes.
const log = (line) => process.stderr.write(line + '\n')

let cluster = null
const children = new Set()
async function stopAll () {
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL')
  await cluster?.close()
  cluster = null
}
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => stopAll().finally(() => process.exit(130)))

function admin () {
  const { Kafka, logLevel } = require('kafkajs')
  // Many producers on a shared machine: the moves' and read-back's client
  // waits longer for a connection and an answer.
  return new Kafka({ clientId: 'io-hygiene-cluster-runs', brokers: cluster.brokers, logLevel: logLevel.NOTHING, connectionTimeout: 10_000, requestTimeout: 60_000, retry: { maxRetryTime: 2000 } })
}

function forkOrder (order, labels, topics) {
  const settings = { brokers: cluster.brokers, labels, topics, callers, paceMs: 100, keys: 600, bytes: 100, settleMs: DELIVERY_TIMEOUT_MS + 30_000 }
  const child = fork(path.join(__dirname, 'kafka-cluster-producers.js'), [order, JSON.stringify(settings)], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    serialization: 'advanced',
  })
  children.add(child)
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr = (stderr + chunk).slice(-4000) })
  child.once('exit', () => children.delete(child))
  return { child, tail: () => stderr }
}

// One round: every label's flow through one outage; each label's counts.
async function round (kafka) {
  const started = Date.now()
  const topics = {}
  for (const label of labelsArg) topics[label] = await createTopic(kafka, 'runs')
  const groups = []
  for (const [order, labels] of Object.entries(ORDERS)) {
    const own = labels.filter((l) => labelsArg.includes(l))
    if (own.length > 0) groups.push({ order, ...forkOrder(order, own, topics) })
  }
  try {
    await Promise.all(groups.map((g) => childMessage(g.child, (m) => m.ready, `${g.order} ready`, 120_000, g.tail)))
    for (const g of groups) g.child.send('start')
    // The outage begins 4 s into the flows, and they stop 3 s after it ended.
    await sleep(4000)
    const moveStarted = Date.now()
    await outage(kafka, cluster, topics[labelsArg[0]])
    const moveMs = Date.now() - moveStarted
    await sleep(3000)
    const results = await Promise.all(groups.map(async (g) => {
      const done = childMessage(g.child, (m) => m.result, `${g.order} result`, DELIVERY_TIMEOUT_MS + 60_000, g.tail)
      g.child.send('stop')
      const { result } = await done
      g.child.disconnect()
      return result
    }))
    const rows = []
    for (const flow of results.flat()) rows.push(await countOf(kafka, flow, moveMs))
    rows.sort((a, b) => ALL.indexOf(a.label) - ALL.indexOf(b.label))
    return { roundMs: Date.now() - started, moveMs, rows }
  } finally {
    // Each child by its own PID, once it has had a moment to close its producers.
    await Promise.all(groups.map(async (g) => {
      if (g.child.exitCode === null) await Promise.race([new Promise((resolve) => g.child.once('exit', resolve)), sleep(20_000)])
      if (g.child.exitCode === null) g.child.kill('SIGKILL')
    }))
  }
}

async function countOf (kafka, flow, moveMs) {
  // Refused at wrap time (the idempotent producer of a kafkajs loaded
  // first): it sent nothing, so it acknowledged nothing unwritten.
  if (flow.refused) return { label: flow.label, refused: flow.refused, sent: 0, acknowledged: 0, ackedButAbsent: 0, duplicates: 0, rejected: 0, rejectedByCode: {}, unsettled: 0, maxStallMs: 0, stuck: false }
  const calls = []
  for (let n = 0; n < flow.sent; n++) {
    const partitions = flow.partitions[n]
    calls.push({
      key: `key-${n % 600}`,
      at: flow.at[n],
      settledAt: flow.settledAt[n] ?? 0,
      metadata: Array.isArray(partitions) ? partitions.map((partition) => ({ partition })) : null,
      error: flow.error[n],
    })
  }
  const r = await outageCount(kafka, { topic: flow.topic, sent: flow.sent, calls }, moveMs, DELIVERY_TIMEOUT_MS)
  return {
    label: flow.label,
    sent: r.sent,
    acknowledged: r.resolved,
    ackedButAbsent: r.ackedNotInTopic,
    duplicates: r.duplicated,
    rejected: r.rejected,
    rejectedByCode: r.rejectedByCode,
    rejectedNotWrittenInTopic: r.rejectedNotWrittenInTopic,
    wrongMetadata: r.wrongMetadata,
    outOfOrder: r.outOfOrder,
    unsettled: flow.unsettled,
    // Pending calls that nothing left in the process could settle.
    emptyLoop: flow.emptyLoop,
    maxStallMs: flow.maxStallMs,
    stuck: flow.unsettled > 0 || flow.maxStallMs > stuckMs,
  }
}

function codes (byCode) {
  const entries = Object.entries(byCode)
  return entries.length === 0 ? '' : entries.map(([code, n]) => `${code} ${n}`).join('; ')
}

async function main () {
  // `--from <file>`: the table of a saved --json run, nothing started.
  if (argv.includes('--from')) return print(JSON.parse(fs.readFileSync(argv[argv.indexOf('--from') + 1], 'utf8')))
  const out = { bench: 'kafka-cluster-runs', rounds, callers, stuckMs, labels: labelsArg, runs: [] }
  const startedAll = Date.now()
  try {
    for (let i = 0; i < rounds; i++) {
      if (cluster === null) {
        log('starting a three-node cluster...')
        cluster = await startKafkaCluster()
      }
      log(`round ${i + 1}/${rounds}...`)
      const kafka = admin()
      let timer
      const late = new Promise((resolve, reject) => { timer = setTimeout(reject, roundTimeoutMs, new Error(`round ${i + 1} took more than ${roundTimeoutMs / 1000} s`)) })
      try {
        const r = await Promise.race([round(kafka), late])
        out.runs.push({ round: i + 1, ...r })
        log(`  ${Math.round(r.roundMs / 1000)} s (outage ${Math.round(r.moveMs / 1000)} s)`)
        for (const row of r.rows) log(`  ${row.label}: ${JSON.stringify({ ...row, label: undefined })}`)
      } catch (error) {
        out.runs.push({ round: i + 1, failed: error.message })
        log(`  failed: ${error.message}`)
        await stopAll()
      } finally {
        clearTimeout(timer)
      }
      if (freshCluster) await stopAll()
    }
  } finally {
    await stopAll()
  }
  out.totalMs = Date.now() - startedAll
  print(out)
}

function print (out) {
  const rows = out.runs.flatMap((run) => (run.rows ?? []).map((row) => ({ round: run.round, ...row, rejectedByCode: codes(row.rejectedByCode) })))
  const held = ALL.filter((l) => out.labels.includes(l)).map((label) => {
    const own = rows.filter((r) => r.label === label)
    if (own.length > 0 && own.every((r) => r.refused)) return `${label}: refused at wrap time (${own[0].refused}) in ${own.length} runs`
    return `${label}: ${own.length} runs, acknowledged-but-absent ${own.map((r) => r.ackedButAbsent).join('/')}, duplicates ${own.map((r) => r.duplicates).join('/')}, stuck ${own.filter((r) => r.stuck).length}`
  })
  if (json) {
    process.stdout.write(JSON.stringify(out) + '\n')
  } else {
    const failed = out.runs.filter((r) => r.failed).map((r) => `round ${r.round}: ${r.failed}`)
    report({
      bench: `kafka-cluster-runs (${out.runs.length} rounds, ${Math.round(out.totalMs / 1000)} s; rounds ${out.runs.map((r) => r.roundMs === undefined ? 'failed' : `${Math.round(r.roundMs / 1000)} s`).join(', ')})`,
      scenarios: [{ name: 'leaders moved under load', note: `${out.callers} awaiting callers per label, stuck: sends pending and none acknowledged for > ${out.stuckMs / 1000} s, or unsettled at the end`, runs: rows }],
      notes: [...failed, ...held],
    })
  }
}

main().catch((error) => {
  process.stderr.write(error.stack + '\n')
  process.exitCode = 1
  return stopAll()
})
