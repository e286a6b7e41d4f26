'use strict'

// `node bench/overhead.js --soak [MINUTES] [--json] [--soak-rate N]`:
// a service with io-hygiene installed runs for MINUTES (default 60;
// fractions allowed, so `--soak 1.5` is a smoke test) in a child process,
// doing at a steady rate each of (--soak-rate per second, default 100):
//   - dns.lookup of one of 200 names with 1-5 s TTLs, answered by a real DNS
//     server on 127.0.0.1 (the dns module in servers mode);
//   - a fetch to a local HTTP upstream by one of those names;
//   - a Kafka send through wrapProducer to a real broker, which this process
//     restarts half way through;
//   - a StatsD increment through createStatsd to a real UDP receiver whose
//     host is one of those names too.
// Each minute (or each tenth of the run, if shorter) the child samples heap,
// RSS, active requests and handles by type, the Kafka queue depth and the
// event-loop delay p99. A least-squares slope over the second half of the
// samples flags any upward trend; at the end every Kafka message is counted
// at the broker (its topic's offsets) and every StatsD line at the receiver.
const { fork } = require('node:child_process')
const http = require('node:http')

const NAMES = 200
const SERIES = ['heapUsedMb', 'rssMb', 'activeRequests', 'activeHandles', 'kafkaQueued', 'httpInFlight', 'eventLoopDelayP99Ms']
// A trend is flagged when the fitted rise over the second half exceeds both
// an absolute floor (noise) and 5% of the series' mean there.
const FLOORS = { heapUsedMb: 2, rssMb: 4, activeRequests: 2, activeHandles: 2, kafkaQueued: 50, httpInFlight: 2, eventLoopDelayP99Ms: 5 }
const MAX_IN_FLIGHT = 200

const names = Array.from({ length: NAMES }, (_, i) => `svc-${i}.soak.test`)

if (require.main === module && process.argv[2] === '--child') {
  child(JSON.parse(process.argv[3])).then((totals) => {
    process.send({ done: true, totals }, () => process.exit(0))
  }, (err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
}

// Least-squares slope of ys against xs.
function slope (xs, ys) {
  const n = xs.length
  if (n < 2) return 0
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let num = 0
  let den = 0
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my)
    den += (xs[i] - mx) ** 2
  }
  return den === 0 ? 0 : num / den
}

function trends (samples) {
  const half = samples.slice(Math.floor(samples.length / 2)).filter((s) => !s.restart)
  const xs = half.map((s) => s.minute)
  const span = xs.length > 1 ? xs[xs.length - 1] - xs[0] : 0
  return SERIES.map((series) => {
    const ys = half.map((s) => s[series])
    const mean = ys.reduce((a, b) => a + b, 0) / (ys.length || 1)
    const perMinute = slope(xs, ys)
    const rise = perMinute * span
    return {
      series,
      mean: round(mean, 2),
      slopePerMinute: round(perMinute, 3),
      riseOverSecondHalf: round(rise, 2),
      upward: rise > Math.max(FLOORS[series], 0.05 * mean),
    }
  })
}

function round (n, digits) {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

async function soak (minutes, argv) {
  const { report } = require('./common')
  const { startDnsServer } = require('../test/helpers/dns-server')
  const { startStatsdReceiver } = require('../test/helpers/statsd-receiver')
  const { startKafka } = require('../test/helpers/kafka-broker')
  const { Kafka, logLevel } = require('kafkajs')
  const rate = argv.includes('--soak-rate') ? Number(argv[argv.indexOf('--soak-rate') + 1]) : 100
  if (!(Number.isInteger(rate) && rate > 0 && rate <= 1000)) throw new TypeError('--soak-rate must be an integer in 1..1000')
  const log = argv.includes('--json') ? () => {} : (line) => process.stderr.write(`soak: ${line}\n`)
  const durationMs = Math.round(minutes * 60_000)
  const sampleMs = Math.max(1000, Math.min(60_000, Math.floor(durationMs / 10)))

  const dns = await startDnsServer()
  names.forEach((name, i) => dns.set(name, { a: ['127.0.0.1'], ttl: 1 + (i % 5) }))
  let upstreamRequests = 0
  const upstream = http.createServer((req, res) => {
    upstreamRequests++
    res.end('ok')
  })
  await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  const receiver = await startStatsdReceiver({ keep: false })
  log('starting a Kafka broker...')
  const broker = await startKafka({})
  const topic = 'soak'
  let childProcess = null
  let restart = null
  let restartTimer = null
  try {
    const config = {
      dnsServer: dns.server,
      upstreamPort: upstream.address().port,
      statsdPort: receiver.port,
      brokers: broker.brokers,
      topic,
      durationMs,
      sampleMs,
      rate,
    }
    childProcess = fork(__filename, ['--child', JSON.stringify(config)], { execArgv: ['--expose-gc'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] })
    let stderr = ''
    childProcess.stderr.on('data', (d) => { stderr = (stderr + d).slice(-4000) })
    const samples = []
    const restartInfo = {}
    let restarting = 0 // 2 while the broker is down, 1 until the next sample
    const done = new Promise((resolve, reject) => {
      childProcess.on('message', (msg) => {
        if (msg.sample) {
          // Samples taken while the broker restarts, and the first after it,
          // show the outage (queue depth, reconnects, the JVM's start-up
          // taking the CPU): they are printed but not fitted for trends.
          msg.sample.restart = restarting > 0
          if (restarting === 1) restarting = 0
          samples.push(msg.sample)
          log(`minute ${msg.sample.minute.toFixed(2)}: heap ${msg.sample.heapUsedMb} MB, rss ${msg.sample.rssMb} MB, ` +
            `active requests ${msg.sample.activeRequests}, handles ${msg.sample.activeHandles}, kafka queued ${msg.sample.kafkaQueued}, ` +
            `delay p99 ${msg.sample.eventLoopDelayP99Ms} ms`)
        } else if (msg.done) {
          resolve(msg.totals)
        }
      })
      childProcess.on('exit', (code, signal) => reject(new Error(`soak child exited (${code ?? signal}): ${stderr}`)))
    })
    // The broker restart, half way through the load.
    restartTimer = setTimeout(() => {
      log('restarting the broker')
      const started = Date.now()
      restarting = 2
      restart = broker.restart().then(() => {
        restarting = 1
        restartInfo.restartMs = Date.now() - started
        log(`broker back after ${restartInfo.restartMs} ms`)
      })
    }, durationMs / 2)
    // Bounded: the run, then the delivery timeout for what is still queued.
    const deadline = setTimeout(() => childProcess.kill('SIGKILL'), durationMs + 300_000)
    const totals = await done
    clearTimeout(deadline)
    await restart

    // Every message the broker holds: the topic's offsets (a new topic).
    const admin = new Kafka({ clientId: 'soak-check', brokers: broker.brokers, logLevel: logLevel.NOTHING }).admin()
    await admin.connect()
    const offsets = await admin.fetchTopicOffsets(topic)
    await admin.disconnect()
    const written = offsets.reduce((sum, p) => sum + Number(p.high) - Number(p.low), 0)
    await receiver.settle(200, 5_000)

    const found = trends(samples)
    const kafka = {
      sent: totals.kafka.sent,
      acked: totals.kafka.acked,
      rejected: totals.kafka.rejected,
      written,
      lost: Math.max(0, totals.kafka.sent - written),
      duplicated: Math.max(0, written - totals.kafka.acked),
    }
    const statsd = { sent: totals.statsd.sent, received: receiver.lines, lost: Math.max(0, totals.statsd.sent - receiver.lines) }
    const result = {
      bench: 'overhead',
      node: process.version,
      scenarios: [
        { name: 'soak', note: `${minutes} min at ${rate}/s each of lookups, fetches, Kafka sends and StatsD increments; broker restarted at ${minutes / 2} min`, runs: samples },
        { name: 'soak-trend', note: 'least-squares slope over the second half, samples during the broker restart left out; upward = rise above max(floor, 5% of mean)', runs: found },
        {
          name: 'soak-totals',
          runs: [
            { kind: 'kafka', ...kafka, restartMs: restartInfo.restartMs },
            { kind: 'statsd', sent: statsd.sent, written: statsd.received, lost: statsd.lost },
            { kind: 'http', sent: totals.http.sent, acked: totals.http.ok, errors: totals.http.errors, skipped: totals.http.skipped, written: upstreamRequests },
            { kind: 'dns', sent: totals.dns.sent, acked: totals.dns.ok, errors: totals.dns.errors, upstreamQueries: dns.queries },
          ],
        },
      ],
      targets: [
        { name: 'soak: flat heap, RSS, active requests and handles (no upward trend)', holds: found.every((t) => !t.upward), measured: found.filter((t) => t.upward).map((t) => t.series).join(', ') || 'none upward' },
        { name: 'soak: 0 messages lost', holds: kafka.lost === 0 && kafka.duplicated === 0 && kafka.rejected === 0 && statsd.lost === 0, measured: `kafka lost ${kafka.lost}, rejected ${kafka.rejected}, duplicated ${kafka.duplicated}; statsd lost ${statsd.lost}` },
      ],
    }
    result.notes = result.targets.map((t) => `target ${t.holds ? 'holds' : 'MISSED'}: ${t.name} (measured ${t.measured})`)
    report(result, argv)
  } finally {
    clearTimeout(restartTimer)
    if (childProcess && childProcess.exitCode === null && childProcess.signalCode === null) childProcess.kill('SIGKILL')
    await restart?.catch(() => {})
    await broker.close()
    await receiver.close()
    await dns.close()
    await new Promise((resolve) => upstream.close(resolve))
  }
}

// The service under soak.
async function child (config) {
  const { monitorEventLoopDelay } = require('node:perf_hooks')
  const { isRequest } = require('../lib/monitor/resource-types')
  const dnsModule = require('node:dns')
  const ioh = require('io-hygiene')
  const dnsOptions = { servers: [config.dnsServer] }
  let handle
  try {
    handle = ioh.install({ dns: dnsOptions, monitor: true })
  } catch (err) {
    // The monitor module has not landed in this tree: every other module on.
    if (err.code !== 'ERR_IO_HYGIENE_UNKNOWN_OPTION') throw err
    handle = ioh.install({ dns: dnsOptions })
  }
  const { Kafka, logLevel } = require('kafkajs')
  const kafka = new Kafka({ clientId: 'soak', brokers: config.brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
  const producer = ioh.wrapProducer(kafka.producer({ idempotent: true }))
  await producer.connect()
  const statsd = ioh.createStatsd({ host: names[0], port: config.statsdPort, prefix: 'soak.' })

  const totals = {
    dns: { sent: 0, ok: 0, errors: 0 },
    http: { sent: 0, ok: 0, errors: 0, skipped: 0 },
    kafka: { sent: 0, acked: 0, rejected: 0 },
    statsd: { sent: 0 },
  }
  const pending = new Set()
  let httpInFlight = 0
  let n = 0
  const tick = () => {
    const name = names[n++ % NAMES]
    totals.dns.sent++
    dnsModule.lookup(name, (err) => { if (err) totals.dns.errors++; else totals.dns.ok++ })
    if (httpInFlight < MAX_IN_FLIGHT) {
      totals.http.sent++
      httpInFlight++
      fetch(`http://${name}:${config.upstreamPort}/`)
        .then((res) => res.text().then(() => { if (res.ok) totals.http.ok++; else totals.http.errors++ }))
        .catch(() => { totals.http.errors++ })
        .finally(() => { httpInFlight-- })
    } else {
      totals.http.skipped++
    }
    totals.kafka.sent++
    const sent = producer.send({ topic: config.topic, messages: [{ key: name, value: String(n) }] })
      .then(() => { totals.kafka.acked++ }, () => { totals.kafka.rejected++ })
    pending.add(sent)
    sent.finally(() => pending.delete(sent))
    totals.statsd.sent++
    statsd.increment('requests')
  }

  // `rate` ticks per second on a schedule: a late timer catches up, by at
  // most one second's worth at once.
  const started = Date.now()
  let ticks = 0
  const load = setInterval(() => {
    const due = Math.min(Math.floor((Date.now() - started) * config.rate / 1000) - ticks, config.rate)
    for (let i = 0; i < due; i++) tick()
    ticks += Math.max(due, 0)
  }, 10)

  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  const sample = () => {
    // The live heap, not the garbage that happens to be uncollected.
    globalThis.gc()
    const byType = {}
    let activeRequests = 0
    let activeHandles = 0
    for (const type of process.getActiveResourcesInfo()) {
      byType[type] = (byType[type] ?? 0) + 1
      if (isRequest(type)) activeRequests++
      else activeHandles++
    }
    const mem = process.memoryUsage()
    process.send({
      sample: {
        minute: round((Date.now() - started) / 60_000, 3),
        heapUsedMb: round(mem.heapUsed / 2 ** 20, 1),
        rssMb: round(mem.rss / 2 ** 20, 1),
        activeRequests,
        activeHandles,
        kafkaQueued: producer.stats().queued + producer.stats().inFlight,
        httpInFlight,
        eventLoopDelayP99Ms: round(delay.percentile(99) / 1e6, 2),
        byType: Object.entries(byType).map(([t, c]) => `${t}:${c}`).join(' '),
      },
    })
    delay.reset()
  }
  const sampler = setInterval(sample, config.sampleMs)
  await new Promise((resolve) => setTimeout(resolve, config.durationMs))
  clearInterval(load)
  clearInterval(sampler)
  // Everything still queued is delivered (or rejected) within the producer's
  // delivery timeout; then the clients close.
  await Promise.allSettled([...pending])
  await producer.disconnect()
  await statsd.close()
  // Fetches end by their own timeouts; this bounds the wait regardless.
  const inFlight = () => httpInFlight
  for (let i = 0; i < 3000 && inFlight() > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
  delay.disable()
  handle.uninstall()
  return totals
}

module.exports = { soak, slope, trends }
