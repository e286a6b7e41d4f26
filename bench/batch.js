'use strict'

// `node bench/batch.js [--json] [--quick]`: the batcher with many groups
// (one item per groupOf key: a tenant, a host, a partition), in one process:
//   io-hygiene   items arriving 1,000 per event-loop turn, each in a group
//                of its own, through createBatcher({ groupOf }) to a sink
//                that answers after one setImmediate (an instant network)
//   one-group    the reference: the same items and the same number of sink
//                calls (maxBatchItems 1), all in one group
// Scenario `groups`: 12,500, 25,000, 50,000 and 100,000 groups (--quick: a
// tenth). Linear means cpuUsPerItem (and usPerItem, on a quiet machine)
// stays flat as the groups grow; the event loop must keep turning
// (eventLoopDelayMaxMs, target < 50 ms at 100,000).
// Every label runs 3 times, rotated; each reports its median-wall run.
const { monitorEventLoopDelay } = require('node:perf_hooks')
const v8 = require('node:v8')
const vm = require('node:vm')
const { round, report } = require('./common')
const { createBatcher } = require('../lib/batch')

const quick = process.argv.includes('--quick')
const COUNTS = [12_500, 25_000, 50_000, 100_000].map((n) => (quick ? n / 10 : n))
const PER_TURN = 1_000
const REPEATS = 3
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc')

const nextTurn = () => new Promise((resolve) => setImmediate(resolve))
const sink = () => new Promise((resolve) => setImmediate(resolve))

async function run (label, items) {
  const grouped = label === 'io-hygiene'
  const batcher = createBatcher({
    send: sink,
    sizeOf: () => 1,
    maxQueuedItems: items,
    ...(grouped ? { groupOf: (item) => item } : { maxBatchItems: 1 }),
  })
  gc()
  const loop = monitorEventLoopDelay({ resolution: 1 })
  loop.enable()
  const cpu = process.cpuUsage()
  const started = performance.now()
  // Settlements are counted, not collected: the benchmark holds no array
  // of 100,000 promises for the collector to walk.
  let settled = 0
  let done
  const all = new Promise((resolve) => { done = resolve })
  const count = () => { if (++settled === items) done() }
  for (let first = 0; first < items; first += PER_TURN) {
    for (let i = first; i < first + PER_TURN && i < items; i++) batcher.push(i).then(count)
    await nextTurn()
  }
  await all
  const wallMs = performance.now() - started
  const used = process.cpuUsage(cpu)
  loop.disable()
  const stats = batcher.stats()
  await batcher.close()
  return {
    label,
    groups: grouped ? items : 1,
    items,
    settled,
    sends: stats.flushes,
    wallMs: round(wallMs),
    usPerItem: round((wallMs * 1000) / items, 2),
    cpuUsPerItem: round((used.user + used.system) / items, 2),
    eventLoopDelayMaxMs: round(loop.max / 1e6),
  }
}

async function main () {
  const labels = ['io-hygiene', 'one-group']
  const runs = []
  for (const items of COUNTS) {
    const byLabel = new Map(labels.map((label) => [label, []]))
    for (let rep = 0; rep < REPEATS; rep++) {
      for (let i = 0; i < labels.length; i++) {
        const label = labels[(i + rep) % labels.length]
        byLabel.get(label).push(await run(label, items))
      }
    }
    for (const label of labels) {
      const all = byLabel.get(label).sort((a, b) => a.wallMs - b.wallMs)
      runs.push(all[Math.floor(all.length / 2)])
    }
  }
  const of = (label, items) => runs.find((r) => r.label === label && r.items === items)
  const small = of('io-hygiene', COUNTS[0])
  const large = of('io-hygiene', COUNTS.at(-1))
  const reference = of('one-group', COUNTS.at(-1))
  report({
    bench: 'batch',
    scenarios: [{ name: 'groups', note: `${PER_TURN} items per event-loop turn, a sink answering after one setImmediate, median of ${REPEATS}`, runs }],
    notes: [
      `Node ${process.version}. Linear if the cost per item stays flat as the groups grow ${COUNTS.at(-1) / COUNTS[0]}x (quadratic: it would grow as much): ` +
        `io-hygiene CPU per item at ${large.groups} groups / at ${small.groups}: ${round(large.cpuUsPerItem / small.cpuUsPerItem, 2)}x, wall per item ${round(large.usPerItem / small.usPerItem, 2)}x ` +
        '(on a shared machine wall time includes what other processes take; CPU time does not).',
      `At ${large.groups} groups: wall ${round(large.wallMs / reference.wallMs, 2)}x one group with as many sends; event-loop delay max ${large.eventLoopDelayMaxMs} ms (target < 50 ms).`,
    ],
    targets: [
      { name: `groups: event-loop delay max < 50 ms at ${large.groups} groups`, holds: large.eventLoopDelayMaxMs < 50, measured: `${large.eventLoopDelayMaxMs} ms` },
    ],
  })
}

main().catch((error) => {
  process.stderr.write(error.stack + '\n')
  process.exitCode = 1
})
