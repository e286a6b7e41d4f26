'use strict'

// `node bench/monitor.js [--json] [--only sample-cost|record-cost|flood|delay-sampling]`
//
// What the monitor costs and how fast it sees a flood, in one run:
//   sample-cost  CPU of one sample with 100, 10,000 and 50,000 active libuv
//                requests, against one scrape of prom-client's
//                collectDefaultMetrics registry in the same process, on the
//                same resources. The requests are fs.open() calls on a FIFO
//                nobody writes to: 4 block the thread pool's threads, the rest
//                wait in its queue, so no other thread burns CPU while the
//                main thread is measured (process.cpuUsage() counts them all).
//                Each of --samples (20) rounds waits 20 ms first, so the
//                event-loop delay histogram has a window to read, as in use.
//                Median CPU per call. Beside them, the OpenTelemetry pair,
//                each with its own MeterProvider and an in-process reader:
//                io-hygiene-otel is one sample plus one collection through the
//                SDK; otel-runtime-node one collection of
//                @opentelemetry/instrumentation-runtime-node.
//   record-cost  ns per histogram record (20M records of varied values):
//                io-hygiene's Histogram vs perf_hooks.createHistogram().
//   flood        examples/monitor.js's flood of uncached dns.lookup calls
//                (localhost, from /etc/hosts) with the monitor on its own
//                250 ms timer and `GetAddrInfoReqWrap > 100 for 3 samples`:
//                time from the flood's start to the alert (detectMs), and
//                which sample raised it; then the same flood with the dns
//                module installed (no alert expected).
//   delay-sampling  Node >= 26.5's monitorEventLoopDelay({ samplePerIteration })
//                against the timer-based histogram the monitor reads (10 ms
//                resolution), each alone. Accuracy: 30 busy-waits of 2, 20 and
//                50 ms, one per 15 ms timer: the longest block each reports
//                (the timer's interval less its resolution, as the sampler
//                reads it), and what each reports over an idle second. Cost: CPU ns per loop iteration over --iterations
//                (200,000) setImmediate turns, against no histogram; and
//                wakeups in an idle second.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const dc = require('node:diagnostics_channel')
const { execFileSync } = require('node:child_process')
const { performance, createHistogram } = require('node:perf_hooks')
const { report, round } = require('./common')
const { createMonitor, Histogram, install, uninstall } = require('..')
const { flood } = require('../examples/monitor')

const argv = process.argv
const only = argv.includes('--only') ? argv[argv.indexOf('--only') + 1] : null
const SAMPLES = argv.includes('--samples') ? Number(argv[argv.indexOf('--samples') + 1]) : 20
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

function cpuUs (since) {
  const used = process.cpuUsage(since)
  return used.user + used.system
}

// The two OpenTelemetry contenders, each on a provider of its own: a
// collection runs only its callbacks.
function otelPair () {
  const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics')
  const { RuntimeNodeInstrumentation } = require('@opentelemetry/instrumentation-runtime-node')
  class Reader extends MetricReader {
    async onForceFlush () {}
    async onShutdown () {}
  }
  const ourReader = new Reader()
  const ourProvider = new MeterProvider({ readers: [ourReader] })
  const monitor = createMonitor({ intervalMs: 2 ** 31 - 1, meterProvider: ourProvider })
  const theirReader = new Reader()
  const theirProvider = new MeterProvider({ readers: [theirReader] })
  const runtime = new RuntimeNodeInstrumentation()
  runtime.setMeterProvider(theirProvider)
  runtime.enable()
  return {
    ours: async () => { monitor.sample(); await ourReader.collect() },
    theirs: () => theirReader.collect(),
    async close () {
      runtime.disable()
      await monitor.close()
      await Promise.all([ourProvider.shutdown(), theirProvider.shutdown()])
    },
  }
}

async function sampleCost () {
  const { Registry, collectDefaultMetrics } = require('prom-client')
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const monitor = createMonitor({ intervalMs: 2 ** 31 - 1 })
  const otel = otelPair()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-bench-monitor-'))
  const fifo = path.join(dir, 'fifo')
  execFileSync('mkfifo', [fifo])
  const runs = []
  let opened = 0
  let settled = 0
  try {
    for (const target of [100, 10_000, 50_000]) {
      const before = monitor.sample().requests
      for (let i = before; i < target; i++) {
        opened++
        fs.open(fifo, 'r', (error, fd) => {
          settled++
          if (!error) fs.closeSync(fd)
        })
      }
      const resources = process.getActiveResourcesInfo().length
      for (let i = 0; i < 3; i++) { monitor.sample(); await registry.metrics(); await otel.ours(); await otel.theirs() } // warm up
      const ours = { cpu: [], wall: [] }
      const theirs = { cpu: [], wall: [] }
      const otelOurs = { cpu: [], wall: [] }
      const otelTheirs = { cpu: [], wall: [] }
      const measure = async (into, fn) => {
        await sleep(20)
        const cpu = process.cpuUsage()
        const wall = performance.now()
        await fn()
        into.wall.push((performance.now() - wall) * 1000)
        into.cpu.push(cpuUs(cpu))
      }
      for (let i = 0; i < SAMPLES; i++) {
        await measure(ours, () => monitor.sample())
        await measure(theirs, () => registry.metrics())
        await measure(otelOurs, otel.ours)
        await measure(otelTheirs, otel.theirs)
      }
      const requests = monitor.sample().requests
      const row = (label, m) => ({ label, activeRequests: requests, activeResources: resources, cpuUsPerSample: median(m.cpu), wallUsPerSample: round(median(m.wall)) })
      runs.push({ ...row('io-hygiene', ours), vsPromClient: round(median(ours.cpu) / median(theirs.cpu), 3) })
      runs.push(row('prom-client', theirs))
      runs.push({ ...row('io-hygiene-otel', otelOurs), vsOtelRuntimeNode: round(median(otelOurs.cpu) / median(otelTheirs.cpu), 3) })
      runs.push(row('otel-runtime-node', otelTheirs))
    }
  } finally {
    // A writer lets every blocked and queued open() through.
    const writer = fs.openSync(fifo, fs.constants.O_RDWR)
    for (;;) {
      if (settled >= opened) break // the callbacks count up between sleeps
      await sleep(10)
    }
    fs.closeSync(writer)
    fs.rmSync(dir, { recursive: true, force: true })
    await monitor.close()
    await otel.close()
  }
  return { name: 'sample-cost', note: `median of ${SAMPLES}; CPU µs per sample or scrape`, runs }
}

function recordCost () {
  const N = 20_000_000
  const ms = new Float64Array(4096)
  const ns = new Array(4096)
  for (let i = 0; i < ms.length; i++) {
    ms[i] = 0.001 + Math.random() * 100 // 1 µs to 100 ms
    ns[i] = Math.max(1, Math.round(ms[i] * 1e6))
  }
  const ours = new Histogram()
  const theirs = createHistogram()
  const time = (fn) => {
    fn(N / 10) // warm up
    const start = process.hrtime.bigint()
    fn(N)
    return Number(process.hrtime.bigint() - start) / N
  }
  const runs = []
  for (let round = 0; round < 3; round++) {
    runs.push(['io-hygiene', time((n) => { for (let i = 0; i < n; i++) ours.record(ms[i & 4095]) })])
    runs.push(['perf_hooks', time((n) => { for (let i = 0; i < n; i++) theirs.record(ns[i & 4095]) })])
  }
  const best = (label) => Math.min(...runs.filter((r) => r[0] === label).map((r) => r[1]))
  const a = best('io-hygiene')
  const b = best('perf_hooks')
  return {
    name: 'record-cost',
    note: 'best of 3 runs of 20M records, ns per record including the loop',
    runs: [
      { label: 'io-hygiene', nsPerRecord: round(a, 2), vsPerfHooks: round(a / b, 3) },
      { label: 'perf_hooks', nsPerRecord: round(b, 2) },
    ],
  }
}

async function floodRun (label) {
  const intervalMs = 250
  const monitor = createMonitor({ intervalMs, cooldownMs: 3_600_000, conditions: ['GetAddrInfoReqWrap > 100 for 3 samples'] })
  let peak = 0
  let samples = 0
  let detectedAtSample = null
  const onSample = (s) => {
    samples++
    peak = Math.max(peak, s.requestsByType.GetAddrInfoReqWrap ?? 0)
  }
  const onAlert = () => { detectedAtSample ??= samples }
  dc.subscribe('io-hygiene:monitor:sample', onSample)
  dc.subscribe('io-hygiene:monitor:alert', onAlert)
  const { issued, detectMs } = await flood({ label, durationMs: 2_000 })
  dc.unsubscribe('io-hygiene:monitor:sample', onSample)
  dc.unsubscribe('io-hygiene:monitor:alert', onAlert)
  const costUs = monitor.stats()
  await monitor.close()
  return {
    label,
    lookups: issued,
    intervalMs,
    samples,
    getAddrInfoPeak: peak,
    detectMs: detectMs === null ? null : round(detectMs, 1),
    detectedAtSample,
    alerts: costUs.alerts,
  }
}

async function floodScenario () {
  const runs = [await floodRun('dns-off')]
  install({ dns: true })
  try {
    runs.push(await floodRun('dns-on'))
  } finally {
    uninstall()
  }
  return { name: 'flood', note: 'examples/monitor.js flood for 2 s; target: detected within 3 samples', runs }
}

// What each scenario promises, judged on its own rows.
function targets (scenarios) {
  const out = []
  const of = (name) => scenarios.find((s) => s.name === name)?.runs ?? []
  // The row sampled at (about) 10,000 active requests.
  const sample = of('sample-cost').filter((r) => r.label === 'io-hygiene').sort((a, b) => Math.abs(a.activeRequests - 10_000) - Math.abs(b.activeRequests - 10_000))[0]
  if (sample) out.push({ name: 'sample-cost: a sample costs < 1x a prom-client scrape at 10,000 active requests', holds: sample.vsPromClient < 1, measured: `${sample.vsPromClient}x` })
  for (const row of of('sample-cost').filter((r) => r.label === 'io-hygiene-otel')) {
    out.push({ name: `sample-cost: a sample plus its OpenTelemetry collection < 1x one instrumentation-runtime-node collection at ${row.activeRequests} active requests`, holds: row.vsOtelRuntimeNode < 1, measured: `${row.vsOtelRuntimeNode}x` })
  }
  const record = of('record-cost').find((r) => r.label === 'io-hygiene')
  if (record) out.push({ name: 'record-cost: record() < 50 ns, loop included', holds: record.nsPerRecord < 50, measured: `${record.nsPerRecord} ns, ${record.vsPerfHooks}x perf_hooks` })
  const [off, on] = ['dns-off', 'dns-on'].map((label) => of('flood').find((r) => r.label === label))
  if (off) out.push({ name: 'flood: named within 3 samples', holds: off.detectedAtSample !== null && off.detectedAtSample <= 3, measured: `sample ${off.detectedAtSample ?? 'never'}` })
  if (on) out.push({ name: 'flood: no GetAddrInfoReqWrap in flight with the dns module on', holds: on.getAddrInfoPeak === 0, measured: `peak ${on.getAddrInfoPeak}` })
  return out
}

function busy (ms) {
  const end = performance.now() + ms
  while (performance.now() < end);
}

// The histogram each way of sampling makes; null where Node lacks the option.
function delayHistogram (mode) {
  const { monitorEventLoopDelay } = require('node:perf_hooks')
  if (mode === 'timer') return monitorEventLoopDelay({ resolution: 10 })
  const h = monitorEventLoopDelay({ samplePerIteration: true })
  // Older lines ignore the unknown option and make a timer histogram.
  return typeof h.count === 'number' && perIterationSupported() ? h : null
}

function perIterationSupported () {
  const [major, minor] = process.versions.node.split('.').map(Number)
  return major > 26 || (major === 26 && minor >= 5)
}

async function delaySampling () {
  const ITERATIONS = argv.includes('--iterations') ? Number(argv[argv.indexOf('--iterations') + 1]) : 200_000
  const blocksMs = [2, 20, 50]
  const turns = async (n) => {
    let left = n
    await new Promise((resolve) => {
      const next = () => (--left > 0 ? setImmediate(next) : resolve())
      setImmediate(next)
    })
  }
  const cpuPerIteration = async (mode) => {
    const h = mode === 'none' ? null : delayHistogram(mode)
    h?.enable()
    await turns(ITERATIONS / 10) // warm up
    const since = process.cpuUsage()
    await turns(ITERATIONS)
    const ns = (cpuUs(since) * 1000) / ITERATIONS
    h?.disable()
    return ns
  }
  const runs = []
  for (const mode of ['timer', 'per-iteration']) {
    const h = delayHistogram(mode)
    if (h === null) {
      runs.push({ label: mode, supported: false })
      continue
    }
    h.enable()
    for (let i = 0; i < 30; i++) {
      await sleep(15)
      busy(blocksMs[i % blocksMs.length])
    }
    await sleep(15)
    h.disable()
    const offsetNs = mode === 'timer' ? 10e6 : 0
    const seenMaxMs = Math.max(0, h.max - offsetNs) / 1e6
    const p50Ms = Math.max(0, h.percentile(50) - offsetNs) / 1e6
    // An idle second, nothing blocking: a delay reported here is no delay;
    // the samples taken are the process's wakeups at rest.
    const idle = delayHistogram(mode)
    idle.enable()
    await sleep(1_000)
    idle.disable()
    runs.push({
      label: mode,
      supported: true,
      samples: h.count,
      longestBlockMs: 50,
      seenMaxMs: round(seenMaxMs, 2),
      p50Ms: round(p50Ms, 2),
      idleMaxMs: round(Math.max(0, idle.max - offsetNs) / 1e6, 2),
      idleSamplesPerSecond: idle.count,
    })
  }
  // Cost, alternated over three rounds; the median of each.
  const costs = { none: [], timer: [], 'per-iteration': [] }
  for (let round = 0; round < 3; round++) {
    for (const mode of Object.keys(costs)) {
      if (mode === 'per-iteration' && !perIterationSupported()) continue
      costs[mode].push(await cpuPerIteration(mode))
    }
  }
  const base = median(costs.none)
  for (const run of runs) {
    if (!run.supported) continue
    const ns = median(costs[run.label])
    run.nsPerIteration = round(ns, 1)
    run.addedNsPerIteration = round(ns - base, 1)
  }
  runs.push({ label: 'none', nsPerIteration: round(base, 1) })
  return { name: 'delay-sampling', note: `30 blocks of 2/20/50 ms; cost: median of 3 runs of ${ITERATIONS} loop turns, CPU ns per turn`, runs }
}

async function main () {
  const scenarios = []
  if (!only || only === 'sample-cost') scenarios.push(await sampleCost())
  if (!only || only === 'record-cost') scenarios.push(recordCost())
  if (!only || only === 'flood') scenarios.push(await floodScenario())
  if (!only || only === 'delay-sampling') scenarios.push(await delaySampling())
  report({ bench: 'monitor', node: process.version, scenarios, targets: targets(scenarios) })
}

main()
