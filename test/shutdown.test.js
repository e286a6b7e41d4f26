'use strict'

// SIGTERM under load, in a child process against real servers: an HTTP
// upstream, a UDP StatsD receiver, an HTTP ingest endpoint and a Kafka
// broker. Requests are in flight when the signal arrives and keep coming
// for a second after it. Judged by exit code, output and the counts at the
// receivers: what every answered request sent arrived, no request failed
// because a client was closed under it, the application's handler ran to
// its end, and the process was gone long before kafkajs's own 30 s.
const t = require('tap')
const { Kafka, logLevel } = require('kafkajs')
const { startKafka } = require('./helpers/kafka-broker')
const { startStatsdReceiver } = require('./helpers/statsd-receiver')
const { startHttpServer } = require('./helpers/http-server')
const { runService, startIngest } = require('./helpers/shutdown-load')

// Well inside Kubernetes' 30 s grace period, and shorter than kafkajs's
// requestTimeout, which a stalled broker would make a disconnect wait out.
const MAX_MS = 25_000

let servers
t.before(async () => {
  const broker = await startKafka()
  t.teardown(() => broker.close())
  const statsd = await startStatsdReceiver()
  t.teardown(() => statsd.close())
  const upstream = await startHttpServer()
  t.teardown(() => upstream.close())
  const ingest = await startIngest()
  t.teardown(() => ingest.close())
  const kafka = new Kafka({ brokers: broker.brokers, logLevel: logLevel.NOTHING })
  servers = { broker, statsd, upstream: upstream.url('/'), ingest, kafka, brokers: broker.brokers }
})

let topics = 0
function run (options) {
  const { statsd, upstream, ingest, kafka, brokers } = servers
  return runService({ statsd, upstream, ingest, kafka, brokers, topic: `shutdown-${process.pid}-${topics++}`, maxMs: MAX_MS, ...options })
}

// What every variant keeps: nothing an answered request sent is lost, and
// no request fails because a client was closed under it.
function delivered (t, r, { sink = true } = {}) {
  t.ok(r.inFlightAtSignal > 0, 'requests were in flight when SIGTERM arrived')
  t.match(r.output, /^kafkajs patched$/m, 'installed before kafkajs loads, as the docs say')
  t.ok(r.requestsOk > 0, 'requests were answered')
  t.equal(r.closedErrors, 0, 'no request failed on a closed client')
  t.equal(r.statsdDelivered, r.requestsOk, 'StatsD counted every answered request')
  t.equal(r.kafkaDelivered, r.requestsOk, 'Kafka holds every answered request')
  if (sink) t.equal(r.sinkDelivered, r.requestsOk, 'the ingest endpoint got every answered request')
}

t.test('no handler: the clients serve until idle, then the process dies of the signal', async (t) => {
  const r = await run({ handler: 'none' })
  t.equal(r.exitSignal, 'SIGTERM', r.output)
  delivered(t, r)
})

for (const handler of ['on', 'once']) {
  t.test(`process.${handler}: the application's handler runs to its end`, async (t) => {
    const r = await run({ handler })
    t.ok(r.handlerDone, `the handler finished: ${r.output}`)
    t.equal(r.exitSignal, null, 'not killed by a signal')
    t.equal(r.exitCode, 0)
    delivered(t, r)
  })
}

t.test('process.exit() at once: what StatsD and Kafka got stays; the sink loses what it still held', async (t) => {
  const r = await run({ handler: 'exit' })
  t.equal(r.exitCode, 0, r.output)
  t.equal(r.closedErrors, 0)
  // At least: a request cut by the exit may have sent before its answer.
  t.ok(r.statsdDelivered >= r.requestsOk, "StatsD's exit flush sent every answered request's metric")
  t.ok(r.kafkaDelivered >= r.requestsOk, 'each answered request awaited its send')
  t.ok(r.sinkDelivered <= r.requestsOk)
  t.comment(`sink: ${r.sinkDelivered} of ${r.requestsOk}`)
})

t.test("docs/kubernetes.md's handler, as written: server first, then every client", async (t) => {
  const r = await run({ handler: 'recipe' })
  t.ok(r.handlerDone, r.output)
  t.equal(r.exitCode, 0)
  delivered(t, r)
})

t.test('a stalled broker: gone at shutdownTimeoutMs, kafkajs\'s disconnect() included', async (t) => {
  const pid = servers.broker.pid
  let stopped = false
  const resume = () => {
    if (stopped) process.kill(pid, 'SIGCONT')
    stopped = false
  }
  t.teardown(resume)
  const r = await run({
    handler: 'none',
    shutdownTimeoutMs: 2000,
    beforeSignal: async () => {
      process.kill(pid, 'SIGSTOP')
      stopped = true
    },
    afterExit: async () => resume(),
  })
  t.match(r.output, /^kafkajs patched$/m, 'the corrected producer, as the docs install it')
  t.equal(r.exitSignal, 'SIGTERM', `died of the signal, not of the test's SIGKILL: ${r.output}`)
  t.equal(r.closedErrors, 0)
  t.equal(r.statsdDelivered, r.requestsOk)
  t.equal(r.sinkDelivered, r.requestsOk)
  t.ok(r.kafkaDelivered >= r.requestsOk, 'every acknowledged message is in Kafka')
})

t.test('a stalled ingest endpoint: gone at shutdownTimeoutMs, the request in flight ended', async (t) => {
  const r = await run({
    handler: 'none',
    shutdownTimeoutMs: 2000,
    beforeSignal: async () => { servers.ingest.stalled = true },
  })
  servers.ingest.stalled = false
  t.equal(r.exitSignal, 'SIGTERM', `died of the signal, not of the test's SIGKILL: ${r.output}`)
  delivered(t, r, { sink: false })
  t.ok(r.sinkDelivered <= r.requestsOk)
})
