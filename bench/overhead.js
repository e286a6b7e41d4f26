'use strict'

// `node bench/overhead.js [--json] [--only http-overhead|startup]
//   [--reps N] [--duration S] [--warmup S] [--connections N] [--kafka]
//   [--scale-rounds N]
//   [--labels io-hygiene,dd-trace] [--handlers hello,realistic]
//   [--startup-runs N] [--soak [MINUTES]]`
//
// What io-hygiene costs a service, measured the way APM-overhead studies and
// dd-trace's sirun do it: a control and enabled variants, alternated, many
// iterations, CPU and event-loop delay as well as throughput.
//
//   http-overhead  A Fastify server in a child process (bench/overhead-server.js),
//                  loaded by autocannon from another process (--connections
//                  10 for --duration 4 s after a --warmup 1 s), --reps 10
//                  rounds with the labels rotated in each (dd-trace in the
//                  first --scale-rounds 3 only):
//                    baseline    no io-hygiene
//                    io-hygiene  install() with every module, and the monitor
//                    dd-trace    the tracer with no agent running, for scale
//                  Two handlers: `hello` answers at once; `realistic` also
//                  fetches from a local upstream by hostname and sends one
//                  StatsD increment to a local UDP receiver (plus, with
//                  --kafka, one awaited Kafka send to a local broker) per
//                  request. Per label: medians of the rounds, and the medians
//                  of each round's ratio to that round's baseline.
//   startup        `node -e ""` (baseline) against require('io-hygiene').install(),
//                  `-r io-hygiene/register` and dd-trace's init(): wall ms of
//                  --startup-runs (40) rounds, the labels alternated in each;
//                  added ms: the median of each round's difference to its
//                  baseline run.
//   soak           Only with --soak [MINUTES] (default 60; fractions allowed):
//                  see bench/overhead-soak.js.
const { fork, spawn, spawnSync } = require('node:child_process')
const http = require('node:http')
const net = require('node:net')
const path = require('node:path')
const { report, round, option } = require('./common')

const LABELS = ['baseline', 'io-hygiene', 'dd-trace']
const HANDLERS = ['hello', 'realistic']
const ROOT = path.resolve(__dirname, '..')
const CHILD_TIMEOUT_MS = 60_000

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

function once (child, predicate, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`server child: no ${what} within ${CHILD_TIMEOUT_MS} ms`))
    }, CHILD_TIMEOUT_MS)
    const onMessage = (msg) => {
      if (!predicate(msg)) return
      cleanup()
      resolve(msg)
    }
    const onExit = (code, signal) => {
      cleanup()
      reject(new Error(`server child exited (${code ?? signal}) before ${what}: ${child.stderrTail}`))
    }
    const cleanup = () => {
      clearTimeout(timer)
      child.off('message', onMessage)
      child.off('exit', onExit)
    }
    child.on('message', onMessage)
    child.on('exit', onExit)
  })
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

async function stopServer (child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  child.send('exit')
  await exited
  clearTimeout(timer)
}

// autocannon in its own process; resolves with its JSON result.
function load (port, seconds, connections) {
  return new Promise((resolve, reject) => {
    const args = [require.resolve('autocannon/autocannon'), '--json', '-c', String(connections), '-d', String(seconds), `http://127.0.0.1:${port}/`]
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000) })
    const timer = setTimeout(() => child.kill('SIGKILL'), (seconds + 30) * 1000)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      if (code !== 0) return reject(new Error(`autocannon failed (${code ?? signal}): ${stderr}`))
      resolve(JSON.parse(stdout))
    })
  })
}

async function runOnce (label, handler, env) {
  const child = startServer(label, handler, env.config)
  try {
    const ready = await once(child, (m) => m.ready, 'ready')
    await load(ready.port, env.warmupS, env.connections)
    const connections = env.upstream.connections
    const packets = env.receiver.packets
    child.send('start')
    await once(child, (m) => m.started, 'start')
    const result = await load(ready.port, env.durationS, env.connections)
    child.send('stop')
    const server = await once(child, (m) => m.cpuUs !== undefined, 'stop')
    return {
      label,
      reqPerSec: result.requests.average,
      p99Ms: result.latency.p99,
      serverCpuUsPerReq: server.cpuUs / server.requests,
      eventLoopDelayMaxMs: server.eventLoopDelayMaxMs,
      errors: result.errors + result.timeouts + result.non2xx,
      statsdPacketsPerReq: (env.receiver.packets - packets) / server.requests,
      upstreamConnections: env.upstream.connections - connections,
      modules: ready.modules,
    }
  } finally {
    await stopServer(child)
  }
}

const METRICS = ['reqPerSec', 'p99Ms', 'serverCpuUsPerReq', 'eventLoopDelayMaxMs']

// Per label: medians of its rounds, the median of its paired ratios to the
// same round's baseline, and the median paired difference in CPU per request.
function summarise (rounds, labels, handler) {
  return labels.map((label) => {
    const theirs = rounds.filter((r) => r[label] !== undefined) // dd-trace runs in the first rounds only
    const mine = theirs.map((r) => r[label])
    const run = { handler, label, rounds: mine.length }
    for (const m of METRICS) run[m] = round(median(mine.map((x) => x[m])), 2)
    if (label !== 'baseline') {
      const base = theirs.map((r) => r.baseline)
      run.addedCpuUsPerReq = round(median(mine.map((x, i) => x.serverCpuUsPerReq - base[i].serverCpuUsPerReq)), 2)
      for (const m of METRICS) run[`${m}Ratio`] = round(median(mine.map((x, i) => x[m] / base[i][m])), 3)
    }
    run.errors = mine.reduce((sum, x) => sum + x.errors, 0)
    if (handler === 'realistic') {
      run.statsdPacketsPerReq = round(median(mine.map((x) => x.statsdPacketsPerReq)), 3)
      run.upstreamConnections = median(mine.map((x) => x.upstreamConnections))
    }
    if (mine[0].modules.length > 0) run.modules = mine[0].modules.join('+')
    return run
  })
}

async function httpOverhead (argv, scenarios, notes, targets) {
  const { startStatsdReceiver } = require('../test/helpers/statsd-receiver')
  // Many short rounds rather than a few long ones: the machine's load drifts,
  // and a pair of runs next to each other sees the same drift.
  const reps = option(argv, '--reps', 10)
  const durationS = option(argv, '--duration', 4)
  // dd-trace is there for scale, and a few rounds give its scale.
  const scaleRounds = option(argv, '--scale-rounds', 3)
  const warmupS = option(argv, '--warmup', 1)
  const connections = option(argv, '--connections', 10)
  const labels = list(argv, '--labels', LABELS)
  const handlers = list(argv, '--handlers', HANDLERS)
  const upstream = await startUpstream()
  const receiver = await startStatsdReceiver({ keep: false })
  let broker = null
  try {
    const config = { upstreamPort: upstream.address().port, statsdPort: receiver.port, closedPort: await closedPort() }
    if (argv.includes('--kafka')) {
      const { startKafka } = require('../test/helpers/kafka-broker')
      broker = await startKafka({})
      config.brokers = broker.brokers
    }
    const env = { config, upstream, receiver, durationS, warmupS, connections }
    // One scenario, `http-overhead`, with a row per handler and label.
    const scenario = {
      name: 'http-overhead',
      note: `hello: Fastify hello-world; realistic: + fetch by hostname + StatsD increment${broker ? ' + Kafka send' : ''} per request; ` +
        `autocannon -c ${connections} -d ${durationS}; medians of ${reps} rotated rounds (dd-trace: the first ${Math.min(scaleRounds, reps)}); ratios paired with each round's baseline`,
      runs: [],
      rounds: {},
    }
    scenarios.push(scenario)
    for (const handler of handlers) {
      const rounds = []
      for (let rep = 0; rep < reps; rep++) {
        const round = {}
        const these = labels.filter((label) => label !== 'dd-trace' || rep < scaleRounds)
        for (let i = 0; i < these.length; i++) {
          const label = these[(i + rep) % these.length]
          round[label] = await runOnce(label, handler, env)
          if (!argv.includes('--json')) {
            const r = round[label]
            process.stderr.write(`${handler} round ${rep + 1}/${reps} ${label}: ${Math.round(r.reqPerSec)} req/s, ` +
              `${r.serverCpuUsPerReq.toFixed(1)} us CPU/req, p99 ${r.p99Ms} ms\n`)
          }
        }
        rounds.push(round)
      }
      const runs = summarise(rounds, labels, handler)
      scenario.runs.push(...runs)
      scenario.rounds[handler] = rounds.map((r) => labels.filter((label) => r[label] !== undefined).map((label) => ({ ...r[label], modules: undefined })))
      // How steady the machine was: the same baseline, round after round.
      const baseRps = rounds.map((r) => r.baseline.reqPerSec)
      const spread = Math.max(...baseRps) / Math.min(...baseRps)
      notes.push(`http-overhead (${handler}): baseline req/s ranged ${Math.round(Math.min(...baseRps))}-${Math.round(Math.max(...baseRps))} ` +
        `over the rounds (${round(spread, 2)}x)${spread > 1.2 ? ': a busy machine, where ratios of a few percent are noise' : ''}.`)
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
    await receiver.close()
    await new Promise((resolve) => upstream.close(resolve))
  }
}

function target (name, holds, measured) {
  return { name, holds, measured }
}

// Wall time of a fresh `node` process, per variant, alternated.
function startup (argv, scenarios, targets) {
  const runs = option(argv, '--startup-runs', 40)
  const variants = [
    { label: 'baseline', args: ['-e', ''] },
    { label: 'io-hygiene', args: ['-e', "require('io-hygiene').install()"] },
    { label: 'register', args: ['-r', 'io-hygiene/register', '-e', ''] },
    { label: 'dd-trace', args: ['-e', "require('dd-trace').init({ hostname: '127.0.0.1', port: 9 })"], env: DD_ENV },
  ]
  const times = new Map(variants.map((v) => [v.label, []]))
  for (let i = 0; i < runs; i++) {
    for (let j = 0; j < variants.length; j++) {
      const v = variants[(i + j) % variants.length]
      const started = process.hrtime.bigint()
      const result = spawnSync(process.execPath, v.args, { cwd: ROOT, stdio: 'ignore', timeout: 30_000, env: { ...process.env, ...v.env } })
      const ms = Number(process.hrtime.bigint() - started) / 1e6
      if (result.status !== 0) throw new Error(`startup ${v.label} failed (${result.status ?? result.signal ?? result.error})`)
      times.get(v.label).push(ms)
    }
  }
  // Each round's runs are next to each other: the added time is the median
  // of each round's difference to its own baseline run, which the machine's
  // drifting load shifts far less than a difference of medians.
  const base = times.get('baseline')
  const out = variants.map(({ label }) => {
    const mine = times.get(label)
    const paired = label === 'baseline' ? null : mine.map((ms, i) => ms - base[i])
    return {
      label,
      wallMs: round(median(mine), 1),
      addedMs: paired === null ? undefined : round(median(paired), 1),
      ratio: round(median(mine.map((ms, i) => ms / base[i])), 3),
    }
  })
  scenarios.push({ name: 'startup', note: `median wall ms of ${runs} rounds of a fresh node per label, alternated; added ms and ratio: medians of each round's difference and ratio to its baseline run`, runs: out })
  for (const label of ['io-hygiene', 'register']) {
    const run = out.find((r) => r.label === label)
    targets.push(target(`startup: ${label} adds <= 10 ms`, run.addedMs <= 10, `${run.addedMs} ms`))
  }
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
  if (only === null || only === 'startup') startup(argv, scenarios, targets)
  if (only === null || only === 'http-overhead') await httpOverhead(argv, scenarios, notes, targets)
  for (const t of targets) notes.push(`target ${t.holds ? 'holds' : 'MISSED'}: ${t.name} (measured ${t.measured})`)
  report({ bench: 'overhead', node: process.version, scenarios, targets, notes }, argv)
}

main(process.argv).catch((err) => {
  process.stderr.write(`${err.stack}\n`)
  process.exit(1)
})
