'use strict'

// A service under steady load when SIGTERM arrives, as a Kubernetes rollout
// does it: requests in flight at the signal, and the load balancer sending
// for about a second after it. Used by test/shutdown.test.js and
// bench/shutdown.js, against real servers the caller starts:
//
//   const ingest = await startIngest()                 // the HTTP sink's endpoint
//   const r = await runService({ handler: 'none', brokers, topic, statsd, upstream, ingest, kafka })
//   // r: { requestsOk, requestsFailed, closedErrors, statsdDelivered, sinkDelivered,
//   //      kafkaDelivered, exitCode, exitSignal, exitMs, handlerDone, output }
//
// Every loop is bounded in count and time; the child is killed (by its PID)
// if it outlives `maxMs`.
const http = require('node:http')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { setTimeout: sleep } = require('node:timers/promises')
const { startHttpServer } = require('./http-server')

const SERVICE = path.join(__dirname, '..', 'fixtures', 'shutdown-service.js')
const MAX_REQUESTS = 100_000

// An ingest endpoint that counts the records it acknowledged; `stalled`
// makes it take requests and never answer them.
async function startIngest () {
  const server = await startHttpServer()
  const ingest = {
    records: 0,
    stalled: false,
    url: server.url('/events'),
    close: () => server.close(),
  }
  server.handler = (req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (chunk) => { body += chunk })
    req.on('end', () => {
      if (ingest.stalled) return
      ingest.records += body.split('\n').filter(Boolean).length
      res.end()
    })
  }
  return ingest
}

function waitForReady (child) {
  return new Promise((resolve, reject) => {
    let out = ''
    const onData = (chunk) => {
      out += chunk
      const ready = /ready (\d+)\n/.exec(out)
      const failed = /failed ([\s\S]*)/.exec(out)
      if (ready) resolve(Number(ready[1]))
      else if (failed) reject(new Error(`the service failed to start: ${failed[1]}`))
    }
    child.stdout.on('data', onData)
    child.once('exit', (code, signal) => reject(new Error(`the service exited before it was ready (${code ?? signal}): ${out}`)))
  })
}

function get (agent, port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/work', agent, timeout: 30_000 }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, body }))
      res.on('error', () => resolve({ status: 0, body }))
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve({ status: 0, body: '' }))
  })
}

// kafkaDelivered: the topic's high watermarks (an idempotent producer writes
// each acknowledged message once).
async function countKafka (kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const offsets = await admin.fetchTopicOffsets(topic)
    return offsets.reduce((sum, p) => sum + Number(p.high), 0)
  } catch {
    return 0
  } finally {
    await admin.disconnect()
  }
}

async function createTopic (kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    await admin.createTopics({ topics: [{ topic }], waitForLeaders: true })
  } finally {
    await admin.disconnect()
  }
}

async function runService ({
  handler, brokers, topic, statsd, upstream, ingest, kafka,
  shutdownTimeoutMs = 10_000, concurrency = 8, loadMs = 1000, afterMs = 1000, maxMs = 60_000,
  beforeSignal = async () => {}, afterExit = async () => {},
}) {
  statsd.reset()
  ingest.records = 0
  // Created first, so that the load does not start with the topic's creation.
  await createTopic(kafka, topic)
  const cfg = { handler, upstream, statsdPort: statsd.port, ingest: ingest.url, brokers, topic, shutdownTimeoutMs }
  const child = spawn(process.execPath, [SERVICE, JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  const killer = setTimeout(() => child.kill('SIGKILL'), maxMs)
  let exitAt = 0
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => {
    exitAt = performance.now()
    clearTimeout(killer)
    resolve({ code, signal })
  }))
  let port
  try {
    port = await waitForReady(child)
  } catch (error) {
    child.kill('SIGKILL')
    await exited
    throw error
  }

  const counts = { requestsOk: 0, requestsFailed: 0, closedErrors: 0 }
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency })
  const load = { stop: false }
  let sent = 0
  let inFlight = 0
  const loop = async () => {
    while (!load.stop && sent < MAX_REQUESTS) {
      sent++
      inFlight++
      const { status, body } = await get(agent, port)
      inFlight--
      if (status === 200) counts.requestsOk++
      else counts.requestsFailed++
      if (body.includes('ERR_IO_HYGIENE_CLOSED')) counts.closedErrors++
      // Refused (the server closed): a load balancer would try another pod.
      if (status === 0) await sleep(10)
    }
  }
  const loops = Array.from({ length: concurrency }, loop)
  await sleep(loadMs)
  await beforeSignal()
  const inFlightAtSignal = inFlight
  const signalAt = performance.now()
  child.kill('SIGTERM')
  await sleep(afterMs)
  load.stop = true
  await Promise.all(loops)
  agent.destroy()
  const { code, signal } = await exited
  await afterExit()
  await statsd.settle(100, 2000)
  return {
    ...counts,
    statsdDelivered: statsd.find('svc.requests').length,
    sinkDelivered: ingest.records,
    kafkaDelivered: await countKafka(kafka, topic),
    exitCode: code,
    exitSignal: signal,
    exitMs: Math.round(exitAt - signalAt),
    handlerDone: output.includes('handler done\n'),
    inFlightAtSignal,
    output,
  }
}

module.exports = { runService, startIngest }
