'use strict'

// `node bench/shutdown.js [--json]`: SIGTERM in the middle of steady load, as
// a Kubernetes rollout sends it. A Fastify service (test/fixtures/
// shutdown-service.js) answers each request after a fetch upstream and an
// awaited Kafka send, with a StatsD increment and an HTTP sink record; eight
// clients keep requests in flight, SIGTERM arrives after a second, and the
// load goes on for a second after it, as a load balancer's does. Real
// servers on loopback: a Kafka broker, a UDP StatsD receiver, the upstream
// and the ingest endpoint. One label per way a service handles the signal:
//   none            no handler of its own
//   on, once        the usual hand-written shutdown (app.close(), then each
//                   client's own close) on process.on / process.once
//   recipe          docs/kubernetes.md's handler, as written (closeAll())
//   stalled-broker  no handler, the broker's JVM stopped (SIGSTOP) just
//                   before the signal, shutdownTimeoutMs 2000
//   stalled-ingest  no handler, the ingest endpoint stops answering just
//                   before the signal, shutdownTimeoutMs 2000
// Each row counts the requests answered 200 (requestsOk), the others
// (requestsFailed: refused or cut by the closing server, or failed), those
// that failed on a closed io-hygiene client (closedErrors), what arrived at
// each receiver, how the process ended and when (exitMs, from SIGTERM).
const { Kafka, logLevel } = require('kafkajs')
const { startKafka } = require('../test/helpers/kafka-broker')
const { startStatsdReceiver } = require('../test/helpers/statsd-receiver')
const { startHttpServer } = require('../test/helpers/http-server')
const { runService, startIngest } = require('../test/helpers/shutdown-load')
const { report } = require('./common')

const DEFAULT_DEADLINE_MS = 10_000 // every client's shutdownTimeoutMs default
const RECIPE_DEADLINE_MS = 20_000 // closeAll()'s timeoutMs in docs/kubernetes.md
const STALLED_DEADLINE_MS = 2_000
const FIELDS = ['requestsOk', 'requestsFailed', 'closedErrors', 'statsdDelivered', 'sinkDelivered', 'kafkaDelivered', 'exitCode', 'exitSignal', 'exitMs']

async function main () {
  const broker = await startKafka()
  const statsd = await startStatsdReceiver({ keep: true })
  const upstream = await startHttpServer()
  const ingest = await startIngest()
  const kafka = new Kafka({ brokers: broker.brokers, logLevel: logLevel.NOTHING })
  const common = { brokers: broker.brokers, statsd, upstream: upstream.url('/'), ingest, kafka }
  let stopped = false
  const resume = () => {
    if (stopped) process.kill(broker.pid, 'SIGCONT')
    stopped = false
  }
  const variants = [
    { label: 'none', handler: 'none', deadlineMs: DEFAULT_DEADLINE_MS },
    { label: 'on', handler: 'on', deadlineMs: DEFAULT_DEADLINE_MS },
    { label: 'once', handler: 'once', deadlineMs: DEFAULT_DEADLINE_MS },
    { label: 'recipe', handler: 'recipe', deadlineMs: RECIPE_DEADLINE_MS },
    {
      label: 'stalled-broker',
      handler: 'none',
      deadlineMs: STALLED_DEADLINE_MS,
      stalled: 'kafka',
      beforeSignal: async () => {
        process.kill(broker.pid, 'SIGSTOP')
        stopped = true
      },
      afterExit: async () => resume(),
    },
    {
      label: 'stalled-ingest',
      handler: 'none',
      deadlineMs: STALLED_DEADLINE_MS,
      stalled: 'sink',
      beforeSignal: async () => { ingest.stalled = true },
      afterExit: async () => { ingest.stalled = false },
    },
  ]
  const runs = []
  const targets = []
  try {
    for (const [i, v] of variants.entries()) {
      const r = await runService({
        ...common,
        handler: v.handler,
        topic: `bench-shutdown-${process.pid}-${i}`,
        shutdownTimeoutMs: v.stalled ? STALLED_DEADLINE_MS : DEFAULT_DEADLINE_MS,
        beforeSignal: v.beforeSignal,
        afterExit: v.afterExit,
      })
      const row = { label: v.label }
      for (const field of FIELDS) row[field] = r[field]
      runs.push(row)
      targets.push(...judge(v, r))
    }
  } finally {
    resume()
    await ingest.close()
    await upstream.close()
    await statsd.close()
    await broker.close()
  }
  report({
    bench: 'shutdown',
    node: process.version,
    scenarios: [{ name: 'sigterm-under-load', note: '8 clients, SIGTERM after 1 s of load, load for 1 s after it', runs }],
    notes: [
      'exitMs counts from SIGTERM to the exit of the process. Without a handler the service ends about half a second ' +
      "after the last request gave a client work (io-hygiene's quiet period), or at shutdownTimeoutMs when a server " +
      'stopped answering. A stalled broker can hold back messages it had already received: Kafka may hold more than was answered.',
    ],
    targets,
  })
}

// What each variant promises (docs/kubernetes.md), on this run's row.
function judge (v, r) {
  const out = []
  const name = (text) => `${v.label}: ${text}`
  const equal = (client, delivered) => out.push({
    name: name(`${client} delivered == requestsOk`),
    holds: delivered === r.requestsOk,
    measured: `${delivered} of ${r.requestsOk}`,
  })
  if (v.stalled !== 'kafka') equal('Kafka', r.kafkaDelivered)
  else out.push({ name: name('Kafka holds every acknowledged message (>= requestsOk)'), holds: r.kafkaDelivered >= r.requestsOk, measured: `${r.kafkaDelivered} of ${r.requestsOk}` })
  equal('StatsD', r.statsdDelivered)
  if (v.stalled !== 'sink') equal('the sink', r.sinkDelivered)
  out.push({ name: name('closedErrors 0'), holds: r.closedErrors === 0, measured: String(r.closedErrors) })
  if (v.handler !== 'none') {
    out.push({ name: name("the application's handler completes"), holds: r.handlerDone && r.exitCode === 0, measured: r.handlerDone ? `done, exit ${r.exitCode ?? r.exitSignal}` : `not done, exit ${r.exitCode ?? r.exitSignal}` })
  } else {
    out.push({ name: name('dies of SIGTERM, as without io-hygiene'), holds: r.exitSignal === 'SIGTERM', measured: String(r.exitSignal ?? r.exitCode) })
  }
  const most = v.deadlineMs + 2000
  out.push({ name: name(`exitMs <= ${v.stalled ? 'shutdownTimeoutMs' : 'the documented deadline'} + 2 s (${most} ms)`), holds: r.exitMs <= most, measured: `${r.exitMs} ms` })
  return out
}

main().catch((error) => {
  process.stderr.write(error.stack + '\n')
  process.exitCode = 1
})
