'use strict'

// The `events` scenario of the http benchmark: 50,000 small events shipped to
// an HTTP endpoint, in one run, two ways:
//   baseline    one fetch() POST per event, 500 in flight, Node's default
//               dispatcher, no io-hygiene
//   io-hygiene  install() + createHttpSink(): the same 50,000 pushes, 500 in
//               flight, batched into NDJSON requests
// The endpoint is a real HTTP server on 127.0.0.1 in this process, reached as
// `localhost`; each label runs in a child process of its own, so the server
// never shares the client's event loop and neither label inherits the other's
// sockets or dispatcher. The server counts what arrives.
// Fields: httpRequests (at the server), eventsPerSec (events over the time
// from the first send to the last settled), activeRequestsPeak (libuv
// requests in the client: connects, lookups, writes), lost (events the server
// never received).
//
//   const { events } = require('./http-events')
//   const scenario = await events({ host: 'localhost', count: 50_000, inFlight: 500 })
//   // { name: 'events', note, runs: [{ label: 'baseline', ... }, { label: 'io-hygiene', ... }] }
//
// `host` must resolve to 127.0.0.1 through the system resolver (/etc/hosts)
// in both children: the baseline has no io-hygiene DNS options.
// Standalone: `node bench/http-events.js [--json] [--events N] [--in-flight N]`.
const http = require('node:http')
const { spawn } = require('node:child_process')
const { round, option } = require('./common')

const LABELS = ['baseline', 'io-hygiene']
const CHILD_TIMEOUT_MS = 300_000

async function events ({ host = 'localhost', count = 50_000, inFlight = 500 } = {}) {
  const server = await startServer()
  const runs = []
  const failed = []
  try {
    for (const label of LABELS) {
      server.reset()
      const url = `http://${host}:${server.port}/ingest`
      const result = await runChild([__filename, '--child', label, url, String(count), String(inFlight)])
      runs.push({
        label,
        httpRequests: server.requests,
        eventsPerSec: Math.round(result.events / (result.wallMs / 1000)),
        activeRequestsPeak: result.activeRequestsPeak,
        lost: count - server.events,
      })
      const codes = Object.entries(result.failures).map(([code, n]) => `${n.toLocaleString('en-US')} ${code}`)
      if (codes.length > 0) failed.push(`${label} failed sends: ${codes.join(', ')}`)
    }
  } finally {
    await server.close()
  }
  const [base, ours] = runs
  const ratios = `io-hygiene: ${round(base.httpRequests / ours.httpRequests)}x fewer requests, ` +
    `${round(ours.eventsPerSec / base.eventsPerSec)}x the events/s`
  return {
    name: 'events',
    note: `${count.toLocaleString('en-US')} events, ${inFlight} in flight, to ${host}; ${ratios}` +
      (failed.length > 0 ? `; ${failed.join('; ')}` : ''),
    runs,
  }
}

// Counts requests and events: a line of an NDJSON body is one event, a JSON
// body of one object is one. Answers 200 with no body.
function startServer () {
  const state = { requests: 0, events: 0 }
  const server = http.createServer((req, res) => {
    state.requests++
    const ndjson = String(req.headers['content-type']).startsWith('application/x-ndjson')
    let lines = 0
    req.on('data', (chunk) => {
      if (!ndjson) return
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++
    })
    req.on('end', () => {
      state.events += ndjson ? lines : 1
      res.end()
    })
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({
      port: server.address().port,
      get requests () { return state.requests },
      get events () { return state.events },
      reset () {
        state.requests = 0
        state.events = 0
      },
      close: () => new Promise((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
    }))
  })
}

function runChild (args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      if (code !== 0) return reject(new Error(`${args[2]} child exited with ${code ?? signal}: ${stderr.slice(-2000)}`))
      resolve(JSON.parse(stdout.trim().split('\n').pop()))
    })
  })
}

// Keeps `inFlight` sends outstanding until `count` have settled; failures
// by code (fetch's TypeError carries undici's error as its cause).
async function drive (count, inFlight, send) {
  let next = 0
  const failures = {}
  async function worker () {
    while (next < count) {
      const i = next++
      try {
        await send(i)
      } catch (err) {
        const code = err.cause?.code ?? err.code ?? err.message
        failures[code] = (failures[code] ?? 0) + 1
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, worker))
  return failures
}

const event = (i) => ({ ts: 1_763_900_000_000 + i, level: 'info', service: 'checkout', msg: 'order placed', orderId: i })

async function child (label, url, count, inFlight) {
  const { requestSampler } = require('./common')
  let send
  let done = async () => {}
  if (label === 'baseline') {
    send = async (i) => {
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(event(i)) })
      await res.arrayBuffer()
      if (!res.ok) throw new Error(`HTTP ${res.status}`)
    }
  } else {
    const { install, createHttpSink } = require('..')
    install()
    const sink = createHttpSink({ url })
    send = (i) => sink.push(event(i))
    done = () => sink.close()
  }
  const sampler = requestSampler()
  const started = performance.now()
  const failures = await drive(count, inFlight, send)
  const wallMs = performance.now() - started
  const { activeRequestsPeak } = sampler.stop()
  await done()
  return { label, events: count, failures, wallMs, activeRequestsPeak }
}

if (require.main === module) {
  const argv = process.argv
  const run = argv[2] === '--child'
    ? child(argv[3], argv[4], Number(argv[5]), Number(argv[6])).then((result) => {
      process.stdout.write(JSON.stringify(result) + '\n')
      process.exit(0)
    })
    : events({ count: option(argv, '--events', 50_000), inFlight: option(argv, '--in-flight', 500) }).then((scenario) => {
      require('./common').report({ bench: 'http', scenarios: [scenario] }, argv)
    })
  run.catch((err) => {
    process.stderr.write(`${err.stack}\n`)
    process.exit(1)
  })
}

module.exports = { events }
