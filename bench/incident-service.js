'use strict'

// The service under test for bench/incident.js, forked once per label:
//   node bench/incident-service.js CONFIG_JSON
// CONFIG: { label, statsdHost, statsdPort, upstream, brokers, topic, awaitKafka }.
// LABEL is floor | baseline | hand-fixed | io-hygiene. It loads its label's
// tooling first, as a service would, then Fastify, and talks to the parent
// over IPC:
//   -> { ready, port }                  listening
//   -> { sample: { t, requestsByType } } each monitor sample (every second)
//   -> { alert: { t, metric } }          each monitor alert
//   'count' -> { increments }            StatsD increments asked for so far
//   'close' -> flushes and closes what it holds, replies { closed, increments, ... }
// Per request: one StatsD increment, one Kafka message, one fetch to the
// upstream by name; then the reply. The floor does none of these.
const dc = require('node:diagnostics_channel')
const config = JSON.parse(process.argv[2])
const { label } = config

let installed = null
if (label === 'io-hygiene') {
  // First, before kafkajs loads: install() corrects kafkajs's producer as it loads.
  installed = require('..').install()
} else if (!['floor', 'baseline', 'hand-fixed'].includes(label)) {
  throw new Error(`unknown label ${label}`)
}

// The monitor runs in every label, as an operator would run it: its default
// conditions, one sample a second. Its samples and alerts go to the parent.
const { createMonitor } = require('..')
dc.subscribe('io-hygiene:monitor:sample', (sample) => {
  process.send({ sample: { t: sample.timestamp, requestsByType: sample.requestsByType } })
})
dc.subscribe('io-hygiene:monitor:alert', (alert) => {
  process.send({ alert: { t: alert.timestamp, metric: alert.metric } })
})
const monitor = createMonitor({ warnOnAlert: false })

const fastify = require('fastify')({ logger: false })

let statsd = null
let producer = null
let queue = null // hand-fixed: messages waiting for the next flush
let flushTimer = null
let kafkaErrors = 0
let upstreamErrors = 0
let increments = 0
const message = { topic: config.topic, messages: [{ value: 'request' }] }

function produce () {
  if (queue !== null) {
    queue.push({ value: 'request' })
    return
  }
  const sent = producer.send(message)
  if (config.awaitKafka) return sent
  sent.catch(() => { kafkaErrors++ })
}

if (label === 'floor') {
  fastify.get('/', async () => ({ ok: true }))
} else {
  fastify.get('/', async (request, reply) => {
    statsd.increment('requests')
    increments++
    const sent = produce()
    try {
      const res = await fetch(config.upstream)
      await res.text()
      if (sent) await sent
    } catch {
      upstreamErrors++
      reply.code(502)
      return { ok: false }
    }
    return { ok: true }
  })
}

async function setUp () {
  if (label === 'floor') return
  const statsdOptions = { host: config.statsdHost, port: config.statsdPort, prefix: 'incident.' }
  const { Kafka, logLevel } = require('kafkajs')
  const kafka = new Kafka({ clientId: `incident-${label}`, brokers: config.brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
  if (label === 'io-hygiene') {
    const io = require('..')
    statsd = io.createStatsd(statsdOptions)
    producer = io.wrapProducer(kafka.producer({ idempotent: true }))
  } else {
    const StatsD = require('hot-shots')
    // baseline: hot-shots as most services create it (one datagram, and one
    // lookup, per metric); hand-fixed: the incident team's fix, cacheDns.
    statsd = new StatsD({ ...statsdOptions, cacheDns: label === 'hand-fixed', errorHandler: () => {} })
    producer = kafka.producer()
  }
  await producer.connect()
  if (label === 'hand-fixed') {
    // A queue flushed to kafkajs each second, written by hand.
    queue = []
    flushTimer = setInterval(() => {
      if (queue.length === 0) return
      const messages = queue
      queue = []
      producer.send({ topic: config.topic, messages }).catch(() => { kafkaErrors += messages.length })
    }, 1000)
  }
}

async function close () {
  await monitor.close()
  await fastify.close()
  if (flushTimer !== null) {
    clearInterval(flushTimer)
    if (queue.length > 0) await producer.send({ topic: config.topic, messages: queue }).catch(() => { kafkaErrors += queue.length })
  }
  if (producer) await producer.disconnect()
  if (statsd) await new Promise((resolve) => statsd.close(resolve))
  installed?.uninstall()
}

process.on('message', (msg) => {
  if (msg === 'count') process.send({ increments })
  if (msg !== 'close') return
  close().then(() => {
    process.send({ closed: true, increments, kafkaErrors, upstreamErrors }, () => process.exit(0))
  }, (err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
})

setUp()
  .then(() => fastify.listen({ port: 0, host: '127.0.0.1' }))
  .then(() => process.send({ ready: true, port: fastify.server.address().port }), (err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
