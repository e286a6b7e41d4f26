'use strict'

// `node bench/incident.js [--json] [--duration S] [--rate N] [--dns-delay-ms N]
//   [--ttl-s S] [--requests-per-connection N] [--warmup-s S] [--drain-s S]
//   [--move-at-s S | --no-move] [--labels floor,baseline,hand-fixed,io-hygiene]
//   [--await-kafka]`
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
//
// The endpoint moves mid-run, in every label (a run of its own per label
// would double the benchmark's time): the StatsD receiver and the upstream
// listen on OLD_ADDRESS, and a second pair, on the same ports, on
// NEW_ADDRESS. At --move-at-s (half the run by default) the DNS server
// answers the new address, with the same TTL, and the old receiver and
// upstream go away at once, as a redeployed load balancer's do: the upstream
// resets its connections and refuses new ones, and what is sent to the old
// StatsD address is lost. The old receiver's socket stays bound, but what
// arrives there from then on counts as lost, not delivered: a packet
// capture's view, with nothing slipping through between a close and a
// rebind (hot-shots' unconnected UDP socket cannot tell a socket nobody
// reads from none). Lost is the service's own count of increments less what
// both receivers got.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { option, childMessage } = require('./common')

const { LABELS, summarize, targets, notes, windowTable, charts } = require('./incident-report')

const WINDOW_S = 10
const HOSTS = { statsd: 'statsd.incident.test', upstream: 'upstream.incident.test', kafka: 'kafka.incident.test' }
// Inside the namespace's loopback (127.0.0.0/8 is all on lo); the DNS server
// is on a random 127.x address whose second byte is never 0.
const OLD_ADDRESS = '127.0.0.2'
const NEW_ADDRESS = '127.0.0.3'

function parameters (argv) {
  const i = argv.indexOf('--labels')
  const labels = i === -1 ? LABELS : argv[i + 1]?.split(',') ?? []
  if (labels.length === 0 || labels.some((l) => !LABELS.includes(l))) throw new TypeError(`--labels takes some of ${LABELS.join(',')}, got ${argv[i + 1]}`)
  const rate = option(argv, '--rate', 60)
  const durationS = option(argv, '--duration', 60)
  const moveAtS = argv.includes('--no-move') ? null : option(argv, '--move-at-s', durationS / 2, { integer: false })
  if (moveAtS !== null && moveAtS >= durationS) throw new TypeError(`--move-at-s must be under --duration (${durationS}), got ${moveAtS}`)
  return {
    labels: LABELS.filter((l) => labels.includes(l)),
    rate,
    durationS,
    windowS: WINDOW_S,
    moveAtS,
    dnsDelayMs: option(argv, '--dns-delay-ms', 40),
    ttlS: option(argv, '--ttl-s', 30),
    requestsPerConnection: option(argv, '--requests-per-connection', 20),
    uvThreadpoolSize: 4,
    oldAddress: OLD_ADDRESS,
    newAddress: NEW_ADDRESS,
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
  const { startKafka } = require('../test/helpers/kafka-broker')
  const { report } = require('./common')
  const p = parameters(argv)

  const closers = []
  try {
    const dns = await startDnsServer({ port: 53, address: nameserver })
    closers.push(() => dns.close())
    dns.set(HOSTS.kafka, { a: ['127.0.0.1'], ttl: p.ttlS })
    dns.delayMs = p.dnsDelayMs

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
      // Each label starts where the last one's endpoint was before its move.
      for (const host of [HOSTS.statsd, HOSTS.upstream]) dns.set(host, { a: [p.oldAddress], ttl: p.ttlS })
      const endpoints = await startEndpoints(p)
      try {
        const config = {
          label,
          statsdHost: HOSTS.statsd,
          statsdPort: endpoints.statsdPort,
          upstream: `http://${HOSTS.upstream}:${endpoints.upstreamPort}/`,
          brokers: [`${HOSTS.kafka}:${broker.port}`],
          topic: `incident-${run}-${label}`,
          awaitKafka: p.kafkaAwaited,
        }
        runs.push(await runLabel(label, config, p, { dns, endpoints, delivered }))
      } finally {
        await endpoints.close()
      }
    }
    const result = {
      bench: 'incident',
      node: process.version,
      parameters: p,
      scenarios: [{ name: 'incident', note: describe(p), runs }],
      notes: notes(runs, p),
      targets: targets(runs, p),
      charts: charts(runs, p),
    }
    report(result, argv)
    if (!argv.includes('--json')) {
      process.stdout.write(windowTable(runs, p))
      if (p.moveAtS !== null) {
        process.stdout.write(windowTable(runs, p, 'statsdLost', `StatsD lost (moved at ${p.moveAtS} s)`))
        process.stdout.write(windowTable(runs, p, 'upstreamErrors', 'upstream errors'))
      }
    }
  } finally {
    for (const close of closers.reverse()) await close().catch(() => {})
  }
}

function describe (p) {
  return `${p.rate} requests/s for ${p.durationS} s per label, windows of ${p.windowS} s; ` +
    `DNS answers after ${p.dnsDelayMs} ms, TTL ${p.ttlS} s; the upstream closes a connection after ${p.requestsPerConnection} requests; ` +
    (p.moveAtS === null ? 'the endpoint never moves; ' : `the StatsD receiver and the upstream move from ${p.oldAddress} to ${p.newAddress} at ${p.moveAtS} s (DNS answers the new address, the old ones go away); `) +
    `UV_THREADPOOL_SIZE ${p.uvThreadpoolSize}; Kafka send ${p.kafkaAwaited ? 'awaited' : 'not awaited'} in the request path; ` +
    `warm-up ${p.warmupS} s at ${p.warmupRate} requests/s, not counted; at most ${p.drainS} s for the last answers`
}

// A StatsD receiver that keeps each datagram's arrival as [ms from `origin`,
// lines]; once `gone`, its arrivals are kept apart: nobody reads them.
async function startReceiver (address, port) {
  const { bindUdp } = require('../test/helpers/udp')
  const receiver = {
    port: 0,
    lines: 0,
    origin: 0,
    gone: false,
    arrivals: [],
    goneArrivals: [],
    reset (origin) {
      this.origin = origin
      this.arrivals = []
      this.goneArrivals = []
    },
  }
  const socket = await bindUdp({
    address,
    port,
    recvBufferSize: 8 << 20,
    onMessage: (msg) => {
      let lines = 0
      for (const line of msg.toString('latin1').split('\n')) if (line !== '') lines++
      receiver.lines += lines
      ;(receiver.gone ? receiver.goneArrivals : receiver.arrivals).push([performance.now() - receiver.origin, lines])
    },
  })
  receiver.port = socket.address().port
  receiver.close = () => new Promise((resolve) => socket.close(resolve))
  return receiver
}

// The upstream: answers "ok", and closes a connection after its
// requestsPerConnection-th answer, as load balancers do.
async function startUpstream (address, port, requestsPerConnection) {
  const http = require('node:http')
  const server = http.createServer({ requestTimeout: 0, headersTimeout: 0 })
  server.keepAliveTimeout = 0 // no Keep-Alive hint, no idle close
  const sockets = new Set()
  const served = new WeakMap()
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  server.on('request', (req, res) => {
    const n = (served.get(req.socket) ?? 0) + 1
    served.set(req.socket, n)
    if (n >= requestsPerConnection) res.setHeader('connection', 'close')
    req.resume()
    req.on('end', () => res.end('ok'))
  })
  await new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, address, () => {
      server.off('error', reject)
      resolve()
    })
  })
  let closed = null
  return {
    port: server.address().port,
    // Gone at once: its connections reset, new ones refused.
    close: () => (closed ??= new Promise((resolve) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resolve())
    })),
  }
}

// The old and the new endpoint of the StatsD receiver and of the upstream,
// each pair on one port, as a load balancer redeployed elsewhere keeps its
// port.
async function startEndpoints (p) {
  for (let attempt = 1; ; attempt++) {
    const opened = []
    try {
      const oldStatsd = await startReceiver(p.oldAddress, 0)
      opened.push(oldStatsd)
      const newStatsd = await startReceiver(p.newAddress, oldStatsd.port)
      opened.push(newStatsd)
      const oldUpstream = await startUpstream(p.oldAddress, 0, p.requestsPerConnection)
      opened.push(oldUpstream)
      const newUpstream = await startUpstream(p.newAddress, oldUpstream.port, p.requestsPerConnection)
      opened.push(newUpstream)
      return {
        statsdPort: oldStatsd.port,
        upstreamPort: oldUpstream.port,
        oldStatsd,
        newStatsd,
        oldUpstream,
        close: async () => { for (const o of opened) await o.close() },
      }
    } catch (err) {
      for (const o of opened) await o.close()
      // The new address's port was taken by something else: another pair.
      if (err.code !== 'EADDRINUSE' || attempt === 5) throw err
    }
  }
}

// The redeploy: DNS answers the new address from now on; the old receiver
// goes away (what still arrives there is lost) and so does the old upstream.
function moveEndpoints (dns, endpoints, p) {
  for (const host of [HOSTS.statsd, HOSTS.upstream]) dns.set(host, { a: [p.newAddress], ttl: p.ttlS })
  endpoints.oldStatsd.gone = true
  endpoints.oldUpstream.close()
}

// One label: its service in a child process, the warm-up, the measured run
// with the move half way, then what arrived at the StatsD receivers and the
// broker.
async function runLabel (label, config, p, { dns, endpoints, delivered }) {
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
  const { oldStatsd, newStatsd } = endpoints
  try {
    const { port } = await childMessage(child, (m) => m.ready, 'ready', 90_000, () => stderr)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 })

    const warm = await openLoop({ port, agent, rate: p.warmupRate, durationS: p.warmupS, drainS: p.drainS, timeoutMs: p.requestTimeoutMs })
    // The warm-up's metrics and messages arrive before the clock starts (the
    // hand-fixed queue flushes each second).
    const warmed = warm.requests - warm.errors
    if (label !== 'floor') {
      await until(() => oldStatsd.lines >= warmed, 15_000)
      await until(async () => (await delivered(config.topic)) >= warmed, 15_000)
    }
    child.send('count')
    const { increments: sentBefore } = await childMessage(child, (m) => m.increments !== undefined, 'count', 10_000, () => stderr)
    const kafkaBefore = label === 'floor' ? 0 : await delivered(config.topic)

    const startEpochMs = performance.timeOrigin + performance.now()
    const start = performance.now()
    for (const receiver of [oldStatsd, newStatsd]) receiver.reset(start)
    let moveAtMs = null
    const events = p.moveAtS === null
      ? []
      : [{
          atMs: p.moveAtS * 1000,
          run: () => {
            moveEndpoints(dns, endpoints, p)
            moveAtMs = performance.now() - start
          },
        }]
    const measured = await openLoop({ port, agent, rate: p.rate, durationS: p.durationS, drainS: p.drainS, timeoutMs: p.requestTimeoutMs, start, events })
    agent.destroy()

    child.send('close')
    const closed = await childMessage(child, (m) => m.closed, 'closed', 30_000, () => stderr).catch(() => child.kill('SIGKILL'))
    await settle(() => oldStatsd.lines + newStatsd.lines, 300, 10_000)
    const kafkaDelivered = label === 'floor' ? 0 : (await delivered(config.topic)) - kafkaBefore
    // A service killed at the deadline reports nothing: what it sent is
    // then taken as what it was asked to send.
    const sent = closed?.increments === undefined ? (label === 'floor' ? 0 : measured.requests) : closed.increments - sentBefore
    const statsd = { sent, moveAtMs, old: oldStatsd.arrivals, gone: oldStatsd.goneArrivals, fresh: newStatsd.arrivals }
    return summarize(label, p, measured, { samples, alerts, startEpochMs, kafkaDelivered, statsd })
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    await exited
  }
}

// Requests to the service at `rate` a second for `durationS`, each due at its
// scheduled time; latency from that time. Resolves with every request's
// scheduled offset and latency (ms) once all answered or failed, or after
// `drainS` more seconds (what is left counts as errors, at their age then).
// A 502 is the service's answer when its upstream failed. `events` run at
// their `atMs` from `start`.
function openLoop ({ port, agent, rate, durationS, drainS, timeoutMs, start = performance.now(), events = [] }) {
  const http = require('node:http')
  const total = Math.round(rate * durationS)
  const intervalMs = 1000 / rate
  const latency = new Float64Array(total).fill(-1)
  const failed = new Uint8Array(total)
  const upstreamFailed = new Uint8Array(total)
  const pending = new Map()
  let issued = 0
  let settled = 0
  let errors = 0
  return new Promise((resolve) => {
    let timer = null
    let drainTimer = null
    const eventTimers = events.map(({ atMs, run }) => setTimeout(run, Math.max(0, start + atMs - performance.now())))
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
      for (const t of eventTimers) clearTimeout(t)
      // Still unanswered at the drain deadline: failed, at their age now.
      for (const [i, req] of pending) {
        finish(i, false)
        req.destroy()
      }
      resolve({ requests: total, errors, latency, failed, upstreamFailed, intervalMs })
    }
    const issue = (i) => {
      const req = http.get({ host: '127.0.0.1', port, path: '/', agent, signal: AbortSignal.timeout(timeoutMs) }, (res) => {
        res.resume()
        if (res.statusCode === 502) upstreamFailed[i] = 1
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

// Resolves once `count()` stayed the same for `quietMs`, or after `maxMs`.
async function settle (count, quietMs, maxMs) {
  const deadline = Date.now() + maxMs
  let last = -1
  while (count() !== last && Date.now() < deadline) {
    last = count()
    await new Promise((resolve) => setTimeout(resolve, quietMs))
  }
}

async function until (check, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return false
}
