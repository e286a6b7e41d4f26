'use strict'

// The server under test for bench/overhead.js, forked once per run:
//   node bench/overhead-server.js LABEL HANDLER CONFIG_JSON
// LABEL is baseline | io-hygiene | dd-trace, HANDLER hello | realistic.
// It loads its label's tooling first (as a service would, before anything
// else), then Fastify, and answers the parent over IPC:
//   'start' -> resets its CPU and event-loop counters, replies { started }
//   'stop'  -> replies { cpuUs, requests, eventLoopDelayMaxMs, ... }
//   'exit'  -> closes everything and exits 0
const [label, handlerKind, configJson] = process.argv.slice(2)
const config = JSON.parse(configJson)

// What the label brings, loaded before Fastify.
let installed = null
if (label === 'io-hygiene') {
  const { install } = require('io-hygiene')
  // OVERHEAD_INSTALL_OPTIONS (JSON) replaces the options, to find which
  // module costs what: '{"http":false}'.
  const options = process.env.OVERHEAD_INSTALL_OPTIONS ? JSON.parse(process.env.OVERHEAD_INSTALL_OPTIONS) : { monitor: true }
  try {
    installed = install(options)
  } catch (err) {
    // The monitor module has not landed in this tree: every other module on.
    if (err.code !== 'ERR_IO_HYGIENE_UNKNOWN_OPTION') throw err
    installed = install()
  }
} else if (label === 'dd-trace') {
  // No agent: traces go to a closed loopback port; every feature that would
  // reach the network on its own is off, so what is measured is the tracer.
  require('dd-trace').init({
    hostname: '127.0.0.1',
    port: config.closedPort,
    service: 'overhead-bench',
    startupLogs: false,
    runtimeMetrics: false,
    profiling: false,
    remoteConfig: { enabled: false },
    telemetry: { enabled: false },
    logLevel: 'error',
  })
} else if (label !== 'baseline') {
  throw new Error(`unknown label ${label}`)
}

const { monitorEventLoopDelay } = require('node:perf_hooks')
const fastify = require('fastify')({ logger: false })

let requests = 0
let statsd = null
let producer = null
const upstream = `http://localhost:${config.upstreamPort}/`

if (handlerKind === 'hello') {
  fastify.get('/', async () => {
    requests++
    return { hello: 'world' }
  })
} else if (handlerKind === 'realistic') {
  // What a real handler does besides answering: ask an upstream service by
  // name, count the request in StatsD, and (with --kafka) produce an event.
  fastify.get('/', async () => {
    requests++
    const res = await fetch(upstream)
    await res.text()
    statsd.increment('requests')
    if (producer) await producer.send({ topic: 'overhead', messages: [{ value: 'request' }] })
    return { hello: 'world' }
  })
} else {
  throw new Error(`unknown handler ${handlerKind}`)
}

async function setUp () {
  if (handlerKind !== 'realistic') return
  const options = { host: 'localhost', port: config.statsdPort, prefix: 'bench.' }
  if (label === 'io-hygiene') {
    statsd = require('io-hygiene').createStatsd(options)
  } else {
    const StatsD = require('hot-shots')
    statsd = new StatsD({ ...options, errorHandler: () => {} })
  }
  if (config.brokers) {
    const { Kafka, logLevel } = require('kafkajs')
    const kafka = new Kafka({ clientId: 'overhead', brokers: config.brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
    producer = label === 'io-hygiene'
      ? require('io-hygiene').wrapProducer(kafka.producer({ idempotent: true }))
      : kafka.producer()
    await producer.connect()
  }
}

const delay = monitorEventLoopDelay({ resolution: 10 })
let cpuStart = null
let requestsStart = 0

process.on('message', (msg) => {
  if (msg === 'start') {
    delay.reset()
    delay.enable()
    requestsStart = requests
    cpuStart = process.cpuUsage()
    process.send({ started: true })
  } else if (msg === 'stop') {
    const cpu = process.cpuUsage(cpuStart)
    delay.disable()
    process.send({
      cpuUs: cpu.user + cpu.system,
      requests: requests - requestsStart,
      eventLoopDelayMaxMs: delay.max / 1e6,
    })
  } else if (msg === 'exit') {
    close().then(() => process.exit(0), (err) => {
      process.stderr.write(`${err.stack}\n`)
      process.exit(1)
    })
  }
})

async function close () {
  await fastify.close()
  if (producer) await producer.disconnect()
  if (statsd) await new Promise((resolve) => statsd.close(resolve))
  installed?.uninstall()
}

setUp()
  .then(() => fastify.listen({ port: 0, host: '127.0.0.1' }))
  .then(() => {
    const modules = installed
      ? require('../lib/install').modules.map((m) => m.name).filter((name) => installed[name])
      : []
    process.send({ ready: true, port: fastify.server.address().port, modules })
  }, (err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
