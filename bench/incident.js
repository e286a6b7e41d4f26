'use strict'

// `node bench/incident.js [--json] [--duration S] [--rate N] [--dns-delay-ms N]
//   [--ttl-s S] [--requests-per-connection N] [--warmup-s S] [--drain-s S]
//   [--labels floor,baseline,hand-fixed,io-hygiene] [--await-kafka]`
//
// The incident io-hygiene exists for, replayed: the same service under the
// same steady load, its p99 over time, with and without io-hygiene.
//
// A Fastify service in a child process (bench/incident-service.js). Per
// request: a StatsD increment to statsd.incident.test, one Kafka message to a
// real broker (bootstrap kafka.incident.test), a fetch to
// upstream.incident.test; then the reply. Every name is answered by a real DNS
// server this benchmark runs, after --dns-delay-ms (a busy cluster DNS), with
// a TTL of --ttl-s; the service asks it through the system resolver
// (getaddrinfo), as in production: everything runs inside a private network
// and mount namespace (root, `unshare -nm`) whose /etc/resolv.conf names that
// server, with loopback and an IPv4-only interface (as a pod has), so the
// broker, the servers and the service all live in there. The upstream closes
// each connection after --requests-per-connection requests (as load
// balancers do), so new connections, and so new lookups, happen all along.
//
// Why the baseline queues: each getaddrinfo holds a libuv thread for the DNS
// delay, and libuv lets slow I/O such as getaddrinfo take at most half its
// pool ((UV_THREADPOOL_SIZE 4 + 1) / 2 = 2 threads). hot-shots without
// cacheDns resolves per metric, so rate x delay (60/s x 40 ms = 2.4 threads
// busy, by default) exceeds them: the queue of lookups grows all run long,
// and every new upstream connection's lookup waits behind it.
//
// Load is open-loop at a fixed arrival rate: request i is due at i / rate
// seconds whether or not earlier ones have answered, and its latency counts
// from that time, so a stall is never hidden (no coordinated omission). Each
// label runs --duration seconds (bounded: rate x duration requests, then at
// most --drain-s for the last answers) after a --warmup-s warm-up at a
// quarter of the rate, which every label's DNS keeps up with, not counted.
//
// Labels, one after the other in one run (all at once, each with its own
// service and load, were measured too: on two shared cores, five busy
// processes at once made every label's p99 the machine's, not its own):
//   floor       the same service with no outbound I/O: the limit
//   baseline    hot-shots without cacheDns, kafkajs send() per request,
//               fetch with Node's defaults
//   hand-fixed  hot-shots cacheDns: true, a queue flushed to kafkajs each
//               second (what the incident's team wrote by hand), fetch as
//               the baseline
//   io-hygiene  install(), createStatsd(), wrapProducer()
// The Kafka send is not awaited in the request path (a service counts an
// event and answers); --await-kafka awaits it in baseline and io-hygiene
// (hand-fixed's queue has nothing to await).
// io-hygiene's monitor runs in every label with its default conditions; its
// samples give each window's active requests by type (the most of each type
// in the window's samples), and its first alert on GetAddrInfoReqWrap is
// `alertAtS`.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { option, childMessage } = require('./common')

const LABELS = ['floor', 'baseline', 'hand-fixed', 'io-hygiene']
const WINDOW_S = 10
const HOSTS = { statsd: 'statsd.incident.test', upstream: 'upstream.incident.test', kafka: 'kafka.incident.test' }
const COLORS = { floor: '#7f7f7f', baseline: '#d62728', 'hand-fixed': '#ff7f0e', 'io-hygiene': '#2ca02c' }

function parameters (argv) {
  const i = argv.indexOf('--labels')
  const labels = i === -1 ? LABELS : argv[i + 1]?.split(',') ?? []
  if (labels.length === 0 || labels.some((l) => !LABELS.includes(l))) throw new TypeError(`--labels takes some of ${LABELS.join(',')}, got ${argv[i + 1]}`)
  const rate = option(argv, '--rate', 60)
  return {
    labels: LABELS.filter((l) => labels.includes(l)),
    rate,
    durationS: option(argv, '--duration', 60),
    windowS: WINDOW_S,
    dnsDelayMs: option(argv, '--dns-delay-ms', 40),
    ttlS: option(argv, '--ttl-s', 30),
    requestsPerConnection: option(argv, '--requests-per-connection', 20),
    uvThreadpoolSize: 4,
    kafkaAwaited: argv.includes('--await-kafka'),
    warmupS: option(argv, '--warmup-s', 10),
    warmupRate: Math.max(1, Math.round(rate / 4)),
    drainS: option(argv, '--drain-s', 30),
    requestTimeoutMs: 60_000,
  }
}

if (process.env.IO_HYGIENE_BENCH_NAMESERVER === undefined) {
  outside(process.argv).catch((err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
} else {
  main(process.env.IO_HYGIENE_BENCH_NAMESERVER, process.argv).then(() => process.exit(0), (err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
}

// Outside the namespace: check it can be made, fetch Kafka's jars (the
// namespace has no route out), then run this file again inside it.
async function outside (argv) {
  parameters(argv) // a bad flag fails here, before anything starts
  const { ipv4OnlySupport, randomLoopback, writeResolverFiles, spawnInNamespace } = require('../test/helpers/namespace')
  const support = ipv4OnlySupport()
  if (support !== true) {
    process.stderr.write(`bench/incident.js: skipped, ${support}\n`)
    if (argv.includes('--json')) process.stdout.write(JSON.stringify({ bench: 'incident', skipped: support, scenarios: [] }) + '\n')
    return
  }
  await require('../test/helpers/kafka-broker').fetchKafka({ log: (line) => process.stderr.write(line + '\n') })
  const nameserver = randomLoopback()
  // The machine's own name too: the JVM asks for it, and the namespace's DNS
  // server would not know it.
  const hosts = `127.0.0.1 localhost ${os.hostname()}\n::1 localhost\n`
  // The resolver's own defaults (timeout 5 s, 2 attempts): what a service has.
  const files = writeResolverFiles({ nameserver, hosts, options: null })
  const child = spawnInNamespace(files, [__filename, ...argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, IO_HYGIENE_BENCH_NAMESERVER: nameserver },
  }, { ipv4Only: true })
  const forward = (signal) => child.kill(signal)
  process.on('SIGINT', forward)
  process.on('SIGTERM', forward)
  child.on('exit', (code, signal) => {
    fs.rmSync(files.dir, { recursive: true, force: true })
    process.exitCode = code ?? (signal ? 1 : 0)
    process.off('SIGINT', forward)
    process.off('SIGTERM', forward)
  })
}

async function main (nameserver, argv) {
  const { startDnsServer } = require('../test/helpers/dns-server')
  const { startStatsdReceiver } = require('../test/helpers/statsd-receiver')
  const { startHttpServer } = require('../test/helpers/http-server')
  const { startKafka } = require('../test/helpers/kafka-broker')
  const { report } = require('./common')
  const p = parameters(argv)

  const closers = []
  try {
    const dns = await startDnsServer({ port: 53, address: nameserver })
    closers.push(() => dns.close())
    for (const host of Object.values(HOSTS)) dns.set(host, { a: ['127.0.0.1'], ttl: p.ttlS })
    dns.delayMs = p.dnsDelayMs

    const receiver = await startStatsdReceiver({ keep: false })
    closers.push(() => receiver.close())

    // Every requestsPerConnection-th answer on a connection closes it.
    const upstream = await startHttpServer({ hostname: HOSTS.upstream })
    closers.push(() => upstream.close())
    const served = new WeakMap()
    upstream.handler = (req, res) => {
      const n = (served.get(req.socket) ?? 0) + 1
      served.set(req.socket, n)
      if (n >= p.requestsPerConnection) res.setHeader('connection', 'close')
      req.resume()
      req.on('end', () => res.end('ok'))
    }

    const broker = await startKafka({ heapMb: 384 })
    closers.push(() => broker.close())
    const { Kafka, logLevel } = require('kafkajs')
    const kafka = new Kafka({ clientId: 'incident-bench', brokers: broker.brokers, logLevel: logLevel.NOTHING })
    const admin = kafka.admin()
    await admin.connect()
    closers.push(() => admin.disconnect())
    const run = Date.now().toString(36)
    await admin.createTopics({ waitForLeaders: true, topics: p.labels.map((label) => ({ topic: `incident-${run}-${label}`, numPartitions: 1 })) })
    const delivered = async (topic) => {
      const offsets = await admin.fetchTopicOffsets(topic)
      return offsets.reduce((sum, o) => sum + Number(o.high), 0)
    }

    const runs = []
    for (const label of p.labels) {
      process.stderr.write(`incident: ${label}, ${p.durationS} s at ${p.rate} requests/s\n`)
      const config = {
        label,
        statsdHost: HOSTS.statsd,
        statsdPort: receiver.port,
        upstream: upstream.url('/', HOSTS.upstream),
        brokers: [`${HOSTS.kafka}:${broker.port}`],
        topic: `incident-${run}-${label}`,
        awaitKafka: p.kafkaAwaited,
      }
      runs.push(await runLabel(label, config, p, { receiver, delivered }))
    }
    const result = {
      bench: 'incident',
      node: process.version,
      parameters: p,
      scenarios: [{ name: 'incident', note: describe(p), runs }],
      notes: [],
      targets: targets(runs),
      charts: charts(runs, p),
    }
    report(result, argv)
    if (!argv.includes('--json')) process.stdout.write(windowTable(runs, p))
  } finally {
    for (const close of closers.reverse()) await close().catch(() => {})
  }
}

function describe (p) {
  return `${p.rate} requests/s for ${p.durationS} s per label, windows of ${p.windowS} s; ` +
    `DNS answers after ${p.dnsDelayMs} ms, TTL ${p.ttlS} s; the upstream closes a connection after ${p.requestsPerConnection} requests; ` +
    `UV_THREADPOOL_SIZE ${p.uvThreadpoolSize}; Kafka send ${p.kafkaAwaited ? 'awaited' : 'not awaited'} in the request path; ` +
    `warm-up ${p.warmupS} s at ${p.warmupRate} requests/s, not counted; at most ${p.drainS} s for the last answers`
}

// One label: its service in a child process, the warm-up, the measured run,
// then what arrived at the StatsD receiver and the broker.
async function runLabel (label, config, p, { receiver, delivered }) {
  const { fork } = require('node:child_process')
  const http = require('node:http')
  const child = fork(path.join(__dirname, 'incident-service.js'), [JSON.stringify(config)], {
    // libuv's default pool, whatever the caller's environment says.
    env: { ...process.env, UV_THREADPOOL_SIZE: String(p.uvThreadpoolSize) },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  })
  let stderr = ''
  child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000) })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const samples = []
  const alerts = []
  child.on('message', (msg) => {
    if (msg.sample) samples.push(msg.sample)
    else if (msg.alert) alerts.push(msg.alert)
  })
  try {
    const { port } = await childMessage(child, (m) => m.ready, 'ready', 90_000, () => stderr)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 })

    receiver.reset()
    const warm = await openLoop({ port, agent, rate: p.warmupRate, durationS: p.warmupS, drainS: p.drainS, timeoutMs: p.requestTimeoutMs })
    // The warm-up's metrics and messages arrive before the clock starts (the
    // hand-fixed queue flushes each second).
    const warmed = warm.requests - warm.errors
    if (label !== 'floor') {
      await receiver.waitFor(warmed, 15_000)
      await until(async () => (await delivered(config.topic)) >= warmed, 15_000)
    }
    const statsdBefore = receiver.lines
    const kafkaBefore = label === 'floor' ? 0 : await delivered(config.topic)

    const startEpochMs = performance.timeOrigin + performance.now()
    const measured = await openLoop({ port, agent, rate: p.rate, durationS: p.durationS, drainS: p.drainS, timeoutMs: p.requestTimeoutMs })
    agent.destroy()

    child.send('close')
    await childMessage(child, (m) => m.closed, 'closed', 30_000, () => stderr).catch(() => child.kill('SIGKILL'))
    await receiver.settle(300, 10_000)
    const statsdDelivered = receiver.lines - statsdBefore
    const kafkaDelivered = label === 'floor' ? 0 : (await delivered(config.topic)) - kafkaBefore
    return summarize(label, p, measured, { samples, alerts, startEpochMs, statsdDelivered, kafkaDelivered })
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  }
}

// Requests to the service at `rate` a second for `durationS`, each due at its
// scheduled time; latency from that time. Resolves with every request's
// scheduled offset and latency (ms) once all answered or failed, or after
// `drainS` more seconds (what is left counts as errors, at their age then).
function openLoop ({ port, agent, rate, durationS, drainS, timeoutMs }) {
  const http = require('node:http')
  const total = Math.round(rate * durationS)
  const intervalMs = 1000 / rate
  const latency = new Float64Array(total).fill(-1)
  const failed = new Uint8Array(total)
  const pending = new Map()
  let issued = 0
  let settled = 0
  let errors = 0
  return new Promise((resolve) => {
    const start = performance.now()
    let timer = null
    let drainTimer = null
    const finish = (i, ok) => {
      if (latency[i] !== -1) return
      latency[i] = performance.now() - (start + i * intervalMs)
      pending.delete(i)
      if (!ok) {
        failed[i] = 1
        errors++
      }
      if (++settled === total) done()
    }
    const done = () => {
      clearTimeout(timer)
      clearTimeout(drainTimer)
      // Still unanswered at the drain deadline: failed, at their age now.
      for (const [i, req] of pending) {
        finish(i, false)
        req.destroy()
      }
      resolve({ requests: total, errors, latency, failed, intervalMs })
    }
    const issue = (i) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/', agent, signal: AbortSignal.timeout(timeoutMs) }, (res) => {
        res.resume()
        res.on('end', () => finish(i, res.statusCode === 200))
        res.on('error', () => finish(i, false))
      })
      req.on('error', () => finish(i, false))
      pending.set(i, req)
    }
    const tick = () => {
      const due = Math.min(total, Math.floor((performance.now() - start) / intervalMs) + 1)
      while (issued < due) issue(issued++)
      if (issued < total) {
        timer = setTimeout(tick, Math.max(0, start + issued * intervalMs - performance.now()))
      } else {
        drainTimer = setTimeout(done, drainS * 1000)
      }
    }
    tick()
  })
}

function percentile (sorted, p) {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

const ms = (n) => Math.round(n * 10) / 10

function summarize (label, p, measured, { samples, alerts, startEpochMs, statsdDelivered, kafkaDelivered }) {
  const { latency, intervalMs, requests, errors } = measured
  const all = Float64Array.from(latency).sort()
  const count = Math.ceil(p.durationS / p.windowS)
  const windows = []
  for (let w = 0; w < count; w++) {
    const from = Math.ceil((w * p.windowS * 1000) / intervalMs)
    const to = Math.min(requests, Math.ceil(((w + 1) * p.windowS * 1000) / intervalMs))
    const sorted = latency.slice(from, to).sort()
    const byType = {}
    for (const s of samples) {
      const at = (s.t - startEpochMs) / 1000
      if (at < w * p.windowS || at >= (w + 1) * p.windowS) continue
      for (const [type, n] of Object.entries(s.requestsByType)) byType[type] = Math.max(byType[type] ?? 0, n)
    }
    windows.push({ p50Ms: ms(percentile(sorted, 50)), p99Ms: ms(percentile(sorted, 99)), maxMs: ms(sorted[sorted.length - 1] ?? 0), activeRequestsByType: byType })
  }
  const alert = alerts.find((a) => a.metric === 'GetAddrInfoReqWrap')
  return {
    label,
    rate: p.rate,
    durationS: p.durationS,
    requests,
    errors,
    p50Ms: ms(percentile(all, 50)),
    p99Ms: ms(percentile(all, 99)),
    p999Ms: ms(percentile(all, 99.9)),
    maxMs: ms(all[all.length - 1] ?? 0),
    worstWindowP99Ms: Math.max(...windows.map((w) => w.p99Ms)),
    alertAtS: alert ? Math.round((alert.t - startEpochMs) / 100) / 10 : null,
    statsdDelivered,
    kafkaDelivered,
    windows,
  }
}

// What the incident benchmark promises, judged on this run's rows.
function targets (runs) {
  const out = []
  const row = (label) => runs.find((r) => r.label === label)
  const ratio = (a, b) => b === 0 ? (a === 0 ? 0 : Infinity) : Math.round((a / b) * 100) / 100
  const [floor, base, hand, ours] = ['floor', 'baseline', 'hand-fixed', 'io-hygiene'].map(row)
  if (ours && floor) {
    out.push({ name: "io-hygiene's worst window p99 <= 2x floor's", holds: ours.worstWindowP99Ms <= 2 * floor.worstWindowP99Ms, measured: `${ours.worstWindowP99Ms} ms vs ${floor.worstWindowP99Ms} ms (${ratio(ours.worstWindowP99Ms, floor.worstWindowP99Ms)}x)` })
  }
  if (ours && hand) {
    out.push({ name: "io-hygiene's worst window p99 <= hand-fixed's", holds: ours.worstWindowP99Ms <= hand.worstWindowP99Ms, measured: `${ours.worstWindowP99Ms} ms vs ${hand.worstWindowP99Ms} ms (${ratio(ours.worstWindowP99Ms, hand.worstWindowP99Ms)}x)` })
  }
  if (ours && base) {
    out.push({ name: "baseline's worst window p99 >= 10x io-hygiene's (the incident reproduced)", holds: base.worstWindowP99Ms >= 10 * ours.worstWindowP99Ms, measured: `${base.worstWindowP99Ms} ms vs ${ours.worstWindowP99Ms} ms (${ratio(base.worstWindowP99Ms, ours.worstWindowP99Ms)}x)` })
  }
  if (ours) {
    out.push({ name: 'io-hygiene: no errors', holds: ours.errors === 0, measured: `${ours.errors} of ${ours.requests}` })
    out.push({
      name: "io-hygiene: every request's StatsD increment and Kafka message delivered",
      holds: ours.statsdDelivered === ours.requests && ours.kafkaDelivered === ours.requests,
      measured: `StatsD ${ours.statsdDelivered}, Kafka ${ours.kafkaDelivered} of ${ours.requests}`,
    })
    out.push({ name: "io-hygiene: the monitor's GetAddrInfoReqWrap alert stays silent", holds: ours.alertAtS === null, measured: ours.alertAtS === null ? 'silent' : `fired at ${ours.alertAtS} s` })
  }
  if (base) {
    const worst = base.windows.findIndex((w) => w.p99Ms === base.worstWindowP99Ms)
    const worstAtS = worst * WINDOW_S
    out.push({
      name: "baseline: the monitor's GetAddrInfoReqWrap alert fires before the worst window",
      holds: base.alertAtS !== null && base.alertAtS <= worstAtS,
      measured: `${base.alertAtS === null ? 'silent' : `fired at ${base.alertAtS} s`}; worst window from ${worstAtS} s`,
    })
  }
  return out
}

// The per-window p99 of each label, for the readable output (--json has it
// in each label's `windows`).
function windowTable (runs, p) {
  const ends = Array.from({ length: Math.max(0, ...runs.map((r) => r.windows.length)) }, (_, w) => `${Math.min(p.durationS, (w + 1) * p.windowS)} s`)
  const rows = [['p99 (ms) by window end', ...ends], ...runs.map((r) => [r.label, ...r.windows.map((w) => w.p99Ms.toLocaleString('en-US'))])]
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i] ?? '').length)))
  const line = (row) => '| ' + widths.map((w, i) => String(row[i] ?? '').padEnd(w)).join(' | ') + ' |'
  return [line(rows[0]), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.slice(1).map(line)].join('\n') + '\n\n'
}

// The two pictures of the incident, as data: bench/markdown.js draws them.
function charts (runs, p) {
  const base = runs.find((r) => r.label === 'baseline')
  const count = Math.max(0, ...runs.map((r) => r.windows.length))
  const x = Array.from({ length: count }, (_, w) => Math.min(p.durationS, (w + 1) * p.windowS))
  const out = [{
    title: `p99 latency per ${p.windowS} s window (ms)`,
    xLabel: 'seconds into the run (end of window)',
    yLabel: 'p99 (ms)',
    x,
    series: runs.map((r) => ({ name: r.label, color: COLORS[r.label], values: r.windows.map((w) => w.p99Ms) })),
  }]
  // The same without the baseline, whose seconds flatten the others' lines.
  const rest = runs.filter((r) => r.label !== 'baseline')
  if (base && rest.length > 0) {
    out.push({ ...out[0], title: `p99 latency per ${p.windowS} s window without the baseline (ms)`, series: out[0].series.filter((s) => s.name !== 'baseline') })
  }
  if (base) {
    const totals = {}
    for (const w of base.windows) for (const [type, n] of Object.entries(w.activeRequestsByType)) totals[type] = (totals[type] ?? 0) + n
    const types = Object.keys(totals).sort((a, b) => totals[b] - totals[a]).slice(0, 4)
    out.push({
      title: `baseline: active requests by type, the most in each ${p.windowS} s window`,
      xLabel: 'seconds into the run (end of window)',
      yLabel: 'active requests',
      x,
      series: types.map((type) => ({ name: type, values: base.windows.map((w) => w.activeRequestsByType[type] ?? 0) })),
    })
  }
  return out
}

async function until (check, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return false
}
