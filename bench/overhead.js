'use strict'

// `node bench/overhead.js [--json] [--only http-overhead|startup]
//   [--blocks N] [--cycles N] [--duration S] [--warmup S] [--connections N]
//   [--kafka] [--scale-blocks N]
//   [--labels io-hygiene,dd-trace] [--handlers hello,realistic]
//   [--startup-runs N] [--startup-scale-runs N] [--startup-timed-runs N] [--soak [MINUTES]]`
//
// What io-hygiene costs a service, measured the way APM-overhead studies and
// dd-trace's sirun do it: a control and enabled variants, alternated, many
// iterations, CPU and event-loop delay as well as throughput.
//
//   http-overhead  A Fastify server per label in a child process
//                  (bench/overhead-server.js), loaded by autocannon from
//                  another (bench/overhead-load.js, --connections 10).
//                  --blocks 6 blocks, each of fresh servers, warmed for
//                  --warmup 1 s, then --cycles 5 cycles of one --duration 2 s
//                  window per label, the order rotated each cycle:
//                    baseline    no io-hygiene
//                    io-hygiene  install() with every module, and the monitor
//                    dd-trace    the tracer with no agent running, for scale,
//                                against baseline in --scale-blocks 1 block
//                                of its own
//                  Two handlers: `hello` answers at once; `realistic` also
//                  fetches from a local upstream by hostname and sends one
//                  StatsD increment to a local UDP receiver (plus, with
//                  --kafka, one awaited Kafka send to a local broker) per
//                  request. Per label: medians of the windows, and the
//                  medians of each window's ratio to the same cycle's
//                  baseline window.
//   startup        `node -e ""` (baseline) against `node -e
//                  "require('io-hygiene').install()"`, `-r io-hygiene/register`,
//                  `-r bench/empty.js` (the floor under register) and
//                  dd-trace's init() (the first --startup-scale-runs 20
//                  rounds): wall ms of --startup-runs 150 rounds, the labels
//                  alternated in each; added ms: the median of each round's
//                  difference to its baseline run. The first
//                  --startup-timed-runs 40 rounds also time install() inside
//                  a process of their own.
//   soak           Only with --soak [MINUTES] (default 60; fractions allowed):
//                  see bench/overhead-soak.js.
const { fork, spawnSync } = require('node:child_process')
const http = require('node:http')
const net = require('node:net')
const path = require('node:path')
const { report, round, option, childMessage } = require('./common')

const LABELS = ['baseline', 'io-hygiene', 'dd-trace']
const HANDLERS = ['hello', 'realistic']
const ROOT = path.resolve(__dirname, '..')
const CHILD_TIMEOUT_MS = 60_000
// What install() and `-r io-hygiene/register` may add to a bare start: the
// configuration's modules loaded, nothing this process will not use.
const STARTUP_LIMIT_MS = 5

// dd-trace, told to stay off the network (no agent in these runs).
const DD_ENV = {
  DD_TRACE_STARTUP_LOGS: 'false',
  DD_REMOTE_CONFIGURATION_ENABLED: 'false',
  DD_INSTRUMENTATION_TELEMETRY_ENABLED: 'false',
  DD_RUNTIME_METRICS_ENABLED: 'false',
  DD_PROFILING_ENABLED: 'false',
  DD_TRACE_LOG_LEVEL: 'error',
}

// A comma-separated subset of `all`, in `all`'s order; baseline always runs.
function list (argv, name, all) {
  const i = argv.indexOf(name)
  if (i === -1) return all
  const picked = argv[i + 1]?.split(',') ?? []
  const unknown = picked.filter((x) => !all.includes(x))
  if (picked.length === 0 || unknown.length > 0) throw new TypeError(`${name} takes some of ${all.join(',')}, got ${argv[i + 1]}`)
  return all.filter((x) => x === 'baseline' || picked.includes(x))
}

function median (values) {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return null
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

// A loopback port nothing listens on: where dd-trace sends its traces.
function closedPort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

// The upstream that the realistic handler fetches from; counts connections.
async function startUpstream () {
  const server = http.createServer((req, res) => res.end('ok'))
  server.connections = 0
  server.on('connection', () => { server.connections++ })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return server
}

function once (child, predicate, what, timeoutMs = CHILD_TIMEOUT_MS) {
  return childMessage(child, predicate, what, timeoutMs, () => child.stderrTail)
}

function startServer (label, handler, config) {
  const child = fork(path.join(__dirname, 'overhead-server.js'), [label, handler, JSON.stringify(config)], {
    cwd: ROOT,
    // OVERHEAD_SERVER_ARGS: node flags for the server alone, to profile it:
    // '--cpu-prof --cpu-prof-dir=/tmp/prof'.
    execArgv: process.env.OVERHEAD_SERVER_ARGS ? process.env.OVERHEAD_SERVER_ARGS.split(' ') : [],
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: { ...process.env, ...(label === 'dd-trace' ? DD_ENV : {}) },
  })
  child.stderrTail = ''
  child.stderr.on('data', (d) => { child.stderrTail = (child.stderrTail + d).slice(-4000) })
  return child
}

async function stopChild (child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  child.send('exit')
  await exited
  clearTimeout(timer)
}

// The load generator (bench/overhead-load.js), one process for the run.
function startLoader () {
  const child = fork(path.join(__dirname, 'overhead-load.js'), [], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe', 'ipc'] })
  child.stderrTail = ''
  child.stderr.on('data', (d) => { child.stderrTail = (child.stderrTail + d).slice(-4000) })
  let id = 0
  return {
    async run (port, seconds, connections) {
      const mine = ++id
      child.send({ id: mine, port, seconds, connections })
      const reply = await once(child, (m) => m.id === mine, 'load result', (seconds + 30) * 1000)
      if (reply.error) throw new Error(`autocannon failed: ${reply.error}`)
      return reply
    },
    close: () => stopChild(child),
  }
}

// One measured window: the server's CPU and requests from 'start' to 'stop',
// around a load of `seconds`.
async function measure (label, server, env) {
  const connections = env.upstream.connections
  const packets = env.receiver.packets
  server.child.send('start')
  await once(server.child, (m) => m.started, 'start')
  const load = await env.loader.run(server.port, env.durationS, env.connections)
  server.child.send('stop')
  const stats = await once(server.child, (m) => m.cpuUs !== undefined, 'stop')
  return {
    label,
    reqPerSec: load.requests / load.seconds,
    p99Ms: load.p99Ms,
    serverCpuUsPerReq: stats.cpuUs / stats.requests,
    eventLoopDelayMaxMs: stats.eventLoopDelayMaxMs,
    errors: load.errors,
    statsdPacketsPerReq: (env.receiver.packets - packets) / stats.requests,
    upstreamConnections: env.upstream.connections - connections,
  }
}

// A block: a fresh server per label, each warmed, then `cycles` cycles of one
// window per label, the order rotated each cycle (A B, B A, ...), so a pair
// of windows is seconds apart and sees the same load on the machine.
async function block (labels, handler, env, cycles) {
  const servers = new Map()
  try {
    for (const label of labels) servers.set(label, { child: startServer(label, handler, env.config) })
    for (const server of servers.values()) {
      const ready = await once(server.child, (m) => m.ready, 'ready')
      server.port = ready.port
      server.modules = ready.modules
    }
    for (const server of servers.values()) await env.loader.run(server.port, env.warmupS, env.connections)
    const out = []
    for (let c = 0; c < cycles; c++) {
      const cycle = {}
      for (let i = 0; i < labels.length; i++) {
        const label = labels[(i + c) % labels.length]
        cycle[label] = await measure(label, servers.get(label), env)
        env.progress(handler, label, cycle[label])
      }
      out.push(cycle)
    }
    return { cycles: out, modules: Object.fromEntries([...servers].map(([label, server]) => [label, server.modules])) }
  } finally {
    for (const server of servers.values()) await stopChild(server.child)
  }
}

const METRICS = ['reqPerSec', 'p99Ms', 'serverCpuUsPerReq', 'eventLoopDelayMaxMs']

// dd-trace runs in blocks of its own; the other cycles are the ones
// io-hygiene's windows are paired with, and baseline's row and spread use them.
const outsideDdTrace = (cycle) => cycle['dd-trace'] === undefined

// Per label: medians of its windows, the median of its paired ratios to the
// same cycle's baseline window, and the median paired difference in CPU per
// request.
function summarise (cycles, labels, handler, modules) {
  return labels.map((label) => {
    const theirs = cycles.filter((c) => label === 'baseline' ? outsideDdTrace(c) : c[label] !== undefined)
    const mine = theirs.map((c) => c[label])
    const run = { handler, label, windows: mine.length }
    for (const m of METRICS) run[m] = round(median(mine.map((x) => x[m])), 2)
    if (label !== 'baseline') {
      const base = theirs.map((c) => c.baseline)
      run.addedCpuUsPerReq = round(median(mine.map((x, i) => x.serverCpuUsPerReq - base[i].serverCpuUsPerReq)), 2)
      for (const m of METRICS) run[`${m}Ratio`] = round(median(mine.map((x, i) => x[m] / base[i][m])), 3)
    }
    run.errors = mine.reduce((sum, x) => sum + x.errors, 0)
    if (handler === 'realistic') {
      run.statsdPacketsPerReq = round(median(mine.map((x) => x.statsdPacketsPerReq)), 3)
      run.upstreamConnections = median(mine.map((x) => x.upstreamConnections))
    }
    if (modules[label]?.length > 0) run.modules = modules[label].join('+')
    return run
  })
}

async function httpOverhead (argv, scenarios, notes, targets) {
  const { startStatsdReceiver } = require('../test/helpers/statsd-receiver')
  // Many short windows in tight alternation rather than a few long runs:
  // the machine's load drifts over seconds, and two windows next to each
  // other see the same drift. Fresh servers per block, so that no one
  // process's luck (its heap layout, its JIT's choices) decides the result.
  const blocks = option(argv, '--blocks', 6)
  const cycles = option(argv, '--cycles', 5)
  const durationS = option(argv, '--duration', 2)
  // dd-trace is there for scale, and one block gives its scale.
  const scaleBlocks = option(argv, '--scale-blocks', 1)
  const warmupS = option(argv, '--warmup', 1)
  const connections = option(argv, '--connections', 10)
  const labels = list(argv, '--labels', LABELS)
  const handlers = list(argv, '--handlers', HANDLERS)
  const upstream = await startUpstream()
  const receiver = await startStatsdReceiver({ keep: false })
  const loader = startLoader()
  let broker = null
  try {
    const config = { upstreamPort: upstream.address().port, statsdPort: receiver.port, closedPort: await closedPort() }
    if (argv.includes('--kafka')) {
      const { startKafka } = require('../test/helpers/kafka-broker')
      broker = await startKafka({})
      config.brokers = broker.brokers
    }
    const progress = (handler, label, r) => {
      if (argv.includes('--json')) return
      process.stderr.write(`${handler} ${label}: ${Math.round(r.reqPerSec)} req/s, ${r.serverCpuUsPerReq.toFixed(1)} us CPU/req, p99 ${r.p99Ms} ms\n`)
    }
    const env = { config, upstream, receiver, loader, durationS, warmupS, connections, progress }
    // One scenario, `http-overhead`, with a row per handler and label.
    const scenario = {
      name: 'http-overhead',
      note: `hello: Fastify hello-world; realistic: + fetch by hostname + StatsD increment${broker ? ' + Kafka send' : ''} per request; ` +
        `autocannon -c ${connections}; ${blocks} blocks of fresh servers, each ${cycles} cycles of one ${durationS} s window per label, the order rotated ` +
        `(dd-trace: ${scaleBlocks} block${scaleBlocks === 1 ? '' : 's'} of its own with baseline); medians of the windows; ratios paired with the same cycle's baseline`,
      runs: [],
      cycles: {},
    }
    scenarios.push(scenario)
    for (const handler of handlers) {
      const all = []
      const modules = {}
      const measured = labels.filter((label) => label !== 'dd-trace')
      const plan = []
      for (let b = 0; b < blocks; b++) plan.push(measured)
      if (labels.includes('dd-trace')) for (let b = 0; b < scaleBlocks; b++) plan.push(['baseline', 'dd-trace'])
      for (const these of plan) {
        const result = await block(these, handler, env, cycles)
        all.push(...result.cycles)
        Object.assign(modules, result.modules)
      }
      const runs = summarise(all, labels, handler, modules)
      scenario.runs.push(...runs)
      scenario.cycles[handler] = all.map((c) => labels.filter((label) => c[label] !== undefined).map((label) => c[label]))
      // How steady the machine was: the same baseline, window after window.
      const baseRps = all.filter(outsideDdTrace).map((c) => c.baseline.reqPerSec)
      const spread = Math.max(...baseRps) / Math.min(...baseRps)
      notes.push(`http-overhead (${handler}): baseline req/s ranged ${Math.round(Math.min(...baseRps))}-${Math.round(Math.max(...baseRps))} ` +
        `over the windows (${round(spread, 2)}x)${spread > 1.2 ? ': a busy machine, where ratios of a few percent are noise' : ''}.`)
      const ioh = runs.find((r) => r.label === 'io-hygiene')
      if (!ioh) continue // not asked for (--labels): no targets to check
      if (!ioh.modules?.includes('monitor')) {
        notes.push(`http-overhead (${handler}): io-hygiene ran without the monitor (${ioh.modules ?? 'no modules'}): not in this tree, or OVERHEAD_INSTALL_OPTIONS.`)
      }
      if (handler === 'hello') {
        targets.push(target('hello: io-hygiene adds <= 1 us server CPU per request', ioh.addedCpuUsPerReq <= 1, `${ioh.addedCpuUsPerReq} us`))
        targets.push(target('hello: server CPU per request ratio <= 1.05', ioh.serverCpuUsPerReqRatio <= 1.05, `${ioh.serverCpuUsPerReqRatio}x`))
        targets.push(target('hello: req/s >= 0.98x baseline', ioh.reqPerSecRatio >= 0.98, `${ioh.reqPerSecRatio}x`))
      } else {
        targets.push(target('realistic: io-hygiene faster than baseline (req/s ratio > 1)', ioh.reqPerSecRatio > 1, `${ioh.reqPerSecRatio}x`))
      }
    }
  } finally {
    await broker?.close()
    await loader.close()
    await receiver.close()
    await new Promise((resolve) => upstream.close(resolve))
  }
}

function target (name, holds, measured) {
  return { name, holds, measured }
}

// How long require() and install() take inside the process: a number the
// machine's noise moves far less than a 100 ms start does. Its own variant,
// so that the io-hygiene label runs exactly the command the issue names.
// fs.writeSync, not process.stdout, which would cost the run its own set-up.
const TIMED_INSTALL = "const s = process.hrtime.bigint(); require('io-hygiene').install(); " +
  "require('node:fs').writeSync(1, String(Number(process.hrtime.bigint() - s) / 1e6))"

// Wall time of a fresh `node` process, per variant, alternated.
function startup (argv, scenarios, notes, targets) {
  // A start takes about 100 ms and the machine's noise moves one by tens of
  // ms: it takes many rounds to pin a difference of a few ms. dd-trace is
  // there for scale, and a few rounds give its scale.
  const runs = option(argv, '--startup-runs', 150)
  const scaleRuns = Math.min(runs, option(argv, '--startup-scale-runs', 20))
  const timedRuns = Math.min(runs, option(argv, '--startup-timed-runs', 40))
  // `rounds`: the first rounds a variant runs in (all when absent).
  const variants = [
    { label: 'baseline', args: ['-e', ''] },
    { label: 'io-hygiene', args: ['-e', "require('io-hygiene').install()"] },
    { label: 'register', args: ['-r', 'io-hygiene/register', '-e', ''] },
    { label: 'preload-floor', args: ['-r', path.join(__dirname, 'empty.js'), '-e', ''] },
    { label: 'dd-trace', args: ['-e', "require('dd-trace').init({ hostname: '127.0.0.1', port: 9 })"], env: DD_ENV, rounds: scaleRuns },
    { label: 'timed', args: ['-e', TIMED_INSTALL], rounds: timedRuns },
  ]
  const times = new Map(variants.filter((v) => v.label !== 'timed').map((v) => [v.label, []]))
  const inProcess = []
  for (let i = 0; i < runs; i++) {
    const these = variants.filter((v) => v.rounds === undefined || i < v.rounds)
    for (let j = 0; j < these.length; j++) {
      const v = these[(i + j) % these.length]
      const started = process.hrtime.bigint()
      const result = spawnSync(process.execPath, v.args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'], timeout: 30_000, env: { ...process.env, ...v.env } })
      const ms = Number(process.hrtime.bigint() - started) / 1e6
      if (result.status !== 0) throw new Error(`startup ${v.label} failed (${result.status ?? result.signal ?? result.error})`)
      if (v.label === 'timed') inProcess.push(Number(result.stdout))
      else times.get(v.label).push(ms)
    }
  }
  // Each round's runs are next to each other: the added time is the median
  // of each round's difference to its own baseline run, which the machine's
  // drifting load shifts far less than a difference of medians.
  const base = times.get('baseline')
  const floor = times.get('preload-floor')
  const out = [...times.keys()].map((label) => {
    const mine = times.get(label)
    const paired = label === 'baseline' ? null : mine.map((ms, i) => ms - base[i])
    return {
      label,
      runs: mine.length,
      wallMs: round(median(mine), 1),
      addedMs: paired === null ? undefined : round(median(paired), 1),
      ratio: round(median(mine.map((ms, i) => ms / base[i])), 3),
      inProcessMs: label === 'io-hygiene' ? round(median(inProcess), 1) : undefined,
      // Over Node's own -r of an empty file: what register itself adds.
      overFloorMs: label === 'register' ? round(median(mine.map((ms, i) => ms - floor[i])), 1) : undefined,
    }
  })
  scenarios.push({
    name: 'startup',
    note: `median wall ms of ${runs} rounds of a fresh node per label (dd-trace: the first ${scaleRuns}), alternated; added ms and ratio: medians of each round's difference and ratio to its baseline run; ` +
      `inProcessMs: require() and install() timed inside a process of their own (the first ${timedRuns} rounds); preload-floor: node -r of an empty file; overFloorMs: register over it`,
    runs: out,
  })
  for (const label of ['io-hygiene', 'register']) {
    const run = out.find((r) => r.label === label)
    targets.push(target(`startup: ${label} adds <= ${STARTUP_LIMIT_MS} ms`, run.addedMs <= STARTUP_LIMIT_MS, `${run.addedMs} ms, ${run.ratio}x a ${out[0].wallMs} ms bare start`))
  }
  const ioh = out.find((r) => r.label === 'io-hygiene')
  const register = out.find((r) => r.label === 'register')
  notes.push(`startup: require('io-hygiene').install() took ${ioh.inProcessMs} ms inside the process; Node's own -r of an empty file adds ` +
    `${out.find((r) => r.label === 'preload-floor').addedMs} ms, and register ${register.overFloorMs} ms over that.`)
}

async function main (argv) {
  if (argv.includes('--soak')) {
    const i = argv.indexOf('--soak')
    const minutes = argv[i + 1] !== undefined && !argv[i + 1].startsWith('--') ? option(argv, '--soak', 60, { integer: false }) : 60
    return require('./overhead-soak').soak(minutes, argv)
  }
  const only = argv.includes('--only') ? argv[argv.indexOf('--only') + 1] : null
  if (only !== null && only !== 'http-overhead' && only !== 'startup') throw new TypeError(`--only takes http-overhead or startup, got ${only}`)
  const scenarios = []
  const notes = []
  const targets = []
  if (only === null || only === 'startup') startup(argv, scenarios, notes, targets)
  if (only === null || only === 'http-overhead') await httpOverhead(argv, scenarios, notes, targets)
  for (const t of targets) notes.push(`target ${t.holds ? 'holds' : 'MISSED'}: ${t.name} (measured ${t.measured})`)
  report({ bench: 'overhead', node: process.version, scenarios, targets, notes }, argv)
}

main(process.argv).catch((err) => {
  process.stderr.write(`${err.stack}\n`)
  process.exit(1)
})
