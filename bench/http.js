'use strict'

// `node bench/http.js [--json]`: outbound HTTP through Node's global fetch,
// with Node's default dispatcher (`baseline`, no io-hygiene) and after
// install() (`io-hygiene`), in one run. The servers run in a child process on
// 127.0.0.1, so that their sockets and CPU are not the client's, and are
// reached as `localhost` (a name, so that DNS is part of the work).
//   fetch-burst      5,000 fetches, 500 in flight
//   stale-keepalive  2,000 GETs and 2,000 POSTs in rounds one second apart,
//                    against a server that closes sockets idle for 1 s
//                    without a Keep-Alive hint
//   hung-upstream    200 fetches to a server that accepts and never answers
//                    (io-hygiene with headersTimeoutMs 2000 for the run)
//   events           bench/http-events.js: 50,000 events as 50,000 fetch POSTs
//                    against createHttpSink()
// `node bench/http.js --caps` instead runs fetch-burst through io-hygiene at
// several connection caps, without and with 20 ms of server latency: how the
// default cap was chosen.
// --no-events leaves the events scenario out (it runs two child processes of
// 50,000 events each).
const http = require('node:http')
const net = require('node:net')
const dns = require('node:dns')
const { fork } = require('node:child_process')
const { performance } = require('node:perf_hooks')

if (process.argv[2] === '--server') {
  serve()
} else {
  main().then(() => process.exit(0), (err) => {
    console.error(err)
    process.exit(1)
  })
}

// ---- the servers (child process) ----

function serve () {
  const counts = { connections: { fast: 0, stale: 0, hung: 0 }, posts: new Map(), idleCloses: 0 }
  const fast = http.createServer((req, res) => {
    const delayMs = Number(new URL(req.url, 'http://x').searchParams.get('delayMs') ?? 0)
    req.resume()
    req.on('end', () => delayMs > 0 ? setTimeout(() => res.end('ok'), delayMs) : res.end('ok'))
  })
  fast.keepAliveTimeout = 60_000 // burst rounds reuse what they opened, both labels alike
  fast.on('connection', () => counts.connections.fast++)

  // Closes a socket idle for 1 s after its last response, with no
  // `Keep-Alive: timeout=` hint (Node's own keepAliveTimeout sends one).
  const stale = http.createServer({ keepAliveTimeout: 0 }, (req, res) => {
    req.socket.setTimeout(0)
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      if (req.method === 'POST') {
        const id = Buffer.concat(chunks).toString()
        counts.posts.set(id, (counts.posts.get(id) ?? 0) + 1)
      }
      res.on('finish', () => { if (!req.socket.destroyed) req.socket.setTimeout(1000) })
      res.end('ok')
    })
  })
  stale.keepAliveTimeout = 0
  stale.on('connection', (socket) => {
    counts.connections.stale++
    socket.on('timeout', () => {
      counts.idleCloses++
      socket.destroy()
    })
  })

  const hungSockets = new Set()
  const hung = net.createServer((socket) => {
    counts.connections.hung++
    hungSockets.add(socket)
    socket.on('close', () => hungSockets.delete(socket))
    socket.on('error', () => {})
    socket.resume() // reads the request, never answers
  })

  let listening = 0
  const ports = {}
  for (const [name, server] of Object.entries({ fast, stale, hung })) {
    server.listen(0, '127.0.0.1', () => {
      ports[name] = server.address().port
      if (++listening === 3) process.send({ ports })
    })
  }
  process.on('message', (message) => {
    if (message === 'counts') {
      let duplicatePosts = 0
      for (const n of counts.posts.values()) if (n > 1) duplicatePosts += n - 1
      process.send({ connections: { ...counts.connections }, posts: counts.posts.size, duplicatePosts, idleCloses: counts.idleCloses })
    } else if (message === 'drop-hung') {
      for (const socket of hungSockets) socket.destroy()
      process.send({ dropped: true })
    } else if (message === 'exit') {
      process.exit(0)
    }
  })
}

// ---- the client (this process) ----

let lookups = 0
function countLookups () {
  // Counts every call that reaches the system resolver: net's own lookups
  // (baseline) and the io-hygiene cache's misses (it calls what dns.lookup
  // was when it installed).
  const original = dns.lookup
  dns.lookup = function lookup (...args) {
    lookups++
    return original.apply(this, args)
  }
}

function startServers () {
  const child = fork(__filename, ['--server'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const replies = []
  const waiting = []
  child.on('message', (message) => {
    const resolve = waiting.shift()
    if (resolve) resolve(message)
    else replies.push(message)
  })
  const next = () => new Promise((resolve) => replies.length ? resolve(replies.shift()) : waiting.push(resolve))
  const ask = (what) => {
    child.send(what)
    return next()
  }
  return next().then(({ ports }) => ({ ports, ask, stop: () => child.send('exit') }))
}

// Handles that keep the event loop alive (sockets, servers), sampled on an
// unref'd timer: libuv requests and timers are left out.
function handleSampler (everyMs = 5) {
  let peak = 0
  const sample = () => {
    let n = 0
    for (const name of process.getActiveResourcesInfo()) {
      if (name === 'TCPSocketWrap' || name === 'TCPWrap' || name === 'TLSWrap') n++
    }
    if (n > peak) peak = n
  }
  const timer = setInterval(sample, everyMs)
  timer.unref()
  return () => {
    clearInterval(timer)
    sample()
    return peak
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const codeOf = (err) => err?.cause?.code ?? err?.code ?? err?.name ?? 'unknown'

// `total` fetches of `url`, `inFlight` at a time; bounded in count.
async function burst (url, total, inFlight) {
  const latencies = new Float64Array(total)
  let next = 0
  let errors = 0
  const worker = async () => {
    while (next < total) {
      const i = next++
      const start = performance.now()
      try {
        const res = await fetch(url)
        await res.arrayBuffer()
      } catch {
        errors++
      }
      latencies[i] = performance.now() - start
    }
  }
  const start = performance.now()
  await Promise.all(Array.from({ length: inFlight }, worker))
  const wallMs = performance.now() - start
  const sorted = latencies.sort()
  const { percentile, round } = require('./common')
  return { reqPerSec: Math.round(total / wallMs * 1000), p99Ms: round(percentile(sorted, 99), 1), errors }
}

async function fetchBurst (servers, label, total = 5000, inFlight = 500) {
  // Warm the JIT on another origin (an IP literal: no DNS, other sockets).
  await burst(`http://127.0.0.1:${servers.ports.fast}/warm`, 1000, 100)
  const before = await servers.ask('counts')
  const lookupsBefore = lookups
  const stop = handleSampler()
  const result = await burst(`http://localhost:${servers.ports.fast}/burst`, total, inFlight)
  const activeHandlesPeak = stop()
  const after = await servers.ask('counts')
  return {
    label,
    dnsLookups: lookups - lookupsBefore,
    socketsOpened: after.connections.fast - before.connections.fast,
    activeHandlesPeak,
    ...result,
  }
}

// Rounds one second apart: in each, every lane sends one request at a random
// moment of a 100 ms window, so reused sockets have been idle for about the
// server's 1 s when they are written again. Bounded: rounds × lanes requests.
async function staleKeepalive (servers, label, handle, rounds = 10, lanes = 200, periodMs = 1000) {
  const url = `http://localhost:${servers.ports.stale}/`
  const before = await servers.ask('counts')
  let getErrors = 0
  let postErrors = 0
  const errors = {}
  const start = performance.now()
  for (let round = 0; round < rounds; round++) {
    const roundStart = start + round * periodMs
    const sends = []
    for (let lane = 0; lane < lanes; lane++) {
      for (const method of ['GET', 'POST']) {
        const at = roundStart + Math.random() * 100
        sends.push(sleep(Math.max(0, at - performance.now())).then(async () => {
          try {
            const res = await fetch(url, method === 'POST' ? { method, body: `${label}-${round}-${lane}` } : undefined)
            await res.arrayBuffer()
          } catch (err) {
            if (method === 'GET') getErrors++
            else postErrors++
            errors[codeOf(err)] = (errors[codeOf(err)] ?? 0) + 1
          }
        }))
      }
    }
    await Promise.all(sends)
    const wait = start + (round + 1) * periodMs - performance.now()
    if (wait > 0) await sleep(wait)
  }
  const after = await servers.ask('counts')
  const stats = handle?.http.stats()
  return {
    label,
    getErrors,
    postErrors,
    retries: stats ? stats.retries.staleSocket + stats.retries.connect + stats.retries.status : 0,
    duplicatePosts: after.duplicatePosts - before.duplicatePosts,
    socketsOpened: after.connections.stale - before.connections.stale,
    serverIdleCloses: after.idleCloses - before.idleCloses,
    errorCodes: describe(errors),
  }
}

// 200 fetches to a server that never answers; how many are still pending 5 s
// after the start. The ones left are aborted so that the run ends.
async function hungUpstream (servers, label, total = 200, deadlineMs = 5000) {
  const url = `http://localhost:${servers.ports.hung}/`
  const stop = handleSampler()
  const errors = {}
  let pending = total
  let measured = false
  const controllers = []
  const all = []
  for (let i = 0; i < total; i++) {
    const controller = new AbortController()
    controllers.push(controller)
    all.push(fetch(url, { signal: controller.signal }).then((res) => res.arrayBuffer(), (err) => {
      if (measured) return
      pending--
      errors[codeOf(err)] = (errors[codeOf(err)] ?? 0) + 1
    }))
  }
  await sleep(deadlineMs)
  measured = true
  const pendingAfterDeadline = pending
  const activeHandlesPeak = stop()
  for (const controller of controllers) controller.abort()
  await Promise.all(all)
  await servers.ask('drop-hung')
  return { label, pendingAfterDeadline, activeHandlesPeak, errors: describe(errors) }
}

// An { code: count } object that prints as `code: count` in the table.
function describe (counts) {
  return Object.defineProperty({ ...counts }, 'toString', {
    value () { return Object.entries(this).map(([k, v]) => `${k}: ${v}`).join(', ') || 'none' },
  })
}

async function main () {
  countLookups()
  const servers = await startServers()
  const { report } = require('./common')
  try {
    if (process.argv.includes('--caps')) return report(await caps(servers))
    const scenarios = []
    const ioHygiene = require('..')

    const burstRuns = [await fetchBurst(servers, 'baseline')]
    ioHygiene.install()
    burstRuns.push(await fetchBurst(servers, 'io-hygiene'))
    ioHygiene.uninstall()
    scenarios.push({ name: 'fetch-burst', note: '5,000 fetches, 500 in flight', runs: burstRuns })

    const staleRuns = [await staleKeepalive(servers, 'baseline', null)]
    staleRuns.push(await staleKeepalive(servers, 'io-hygiene', ioHygiene.install()))
    ioHygiene.uninstall()
    scenarios.push({ name: 'stale-keepalive', note: '2,000 GETs and 2,000 POSTs; the server closes sockets idle 1 s, no hint', runs: staleRuns })

    const hungRuns = [await hungUpstream(servers, 'baseline')]
    ioHygiene.install({ http: { headersTimeoutMs: 2000 } })
    hungRuns.push(await hungUpstream(servers, 'io-hygiene'))
    ioHygiene.uninstall()
    scenarios.push({ name: 'hung-upstream', note: '200 fetches, never answered; io-hygiene headersTimeoutMs 2000', runs: hungRuns })

    const events = loadEvents()
    if (events !== null && !process.argv.includes('--no-events')) scenarios.push(await events({ host: 'localhost' }))

    const [b, h] = burstRuns
    const [sb, sh] = staleRuns
    report({
      bench: 'http',
      scenarios,
      notes: [
        `fetch-burst: io-hygiene ${h.dnsLookups} lookups (baseline ${b.dnsLookups}), ${h.socketsOpened} sockets (baseline ${b.socketsOpened}), ` +
          `${(h.reqPerSec / b.reqPerSec).toFixed(2)}x the baseline's req/s, p99 ${(h.p99Ms / b.p99Ms).toFixed(2)}x.`,
        `stale-keepalive: GET errors ${sh.getErrors} (baseline ${sb.getErrors}), POST errors ${sh.postErrors} (baseline ${sb.postErrors}), duplicate POSTs ${sh.duplicatePosts}.`,
      ],
      targets: targets(scenarios),
    })
  } finally {
    servers.stop()
  }
}

// What the http module and the sink promise (docs/http.md, docs/http-sink.md,
// the README's results table), judged on this run's rows only: a scenario not
// run judges nothing.
function targets (scenarios) {
  const out = []
  const row = (name, label) => scenarios.find((s) => s.name === name)?.runs.find((r) => r.label === label)
  const burst = row('fetch-burst', 'io-hygiene')
  if (burst) {
    const base = row('fetch-burst', 'baseline')
    out.push({ name: 'fetch-burst: one DNS lookup for the origin', holds: burst.dnsLookups <= 1, measured: `${burst.dnsLookups}${base ? ` (baseline ${base.dnsLookups})` : ''}` })
    out.push({ name: 'fetch-burst: at most 128 sockets to the origin (the connections cap)', holds: burst.socketsOpened <= 128, measured: `${burst.socketsOpened}${base ? ` (baseline ${base.socketsOpened})` : ''}` })
  }
  const stale = row('stale-keepalive', 'io-hygiene')
  if (stale) {
    const base = row('stale-keepalive', 'baseline')
    out.push({ name: 'stale-keepalive: no GET fails (stale-socket failures retried, GETs are idempotent)', holds: stale.getErrors === 0, measured: `${stale.getErrors}${base ? ` (baseline ${base.getErrors})` : ''}` })
    out.push({ name: 'stale-keepalive: no POST sent twice', holds: stale.duplicatePosts === 0, measured: `${stale.duplicatePosts}` })
  }
  const hung = row('hung-upstream', 'io-hygiene')
  if (hung) {
    const base = row('hung-upstream', 'baseline')
    out.push({ name: 'hung-upstream: every hung request failed within the headers timeout (2 s; counted 5 s after the start)', holds: hung.pendingAfterDeadline === 0, measured: `${hung.pendingAfterDeadline} pending${base ? ` (baseline ${base.pendingAfterDeadline})` : ''}` })
  }
  const events = row('events', 'io-hygiene')
  if (events) {
    const base = row('events', 'baseline')
    out.push({ name: 'events: nothing lost', holds: events.lost === 0, measured: `${events.lost}` })
    if (base) out.push({ name: 'events: batched, fewer requests than one per event', holds: events.httpRequests < base.httpRequests, measured: `${events.httpRequests} vs ${base.httpRequests}` })
  }
  return out
}

// The events scenario is written in its own file; tolerated absent.
function loadEvents () {
  try {
    return require('./http-events').events
  } catch (err) {
    if (err.code !== 'MODULE_NOT_FOUND') throw err
    return null
  }
}

// fetch-burst through io-hygiene at several caps.
async function caps (servers) {
  const ioHygiene = require('..')
  const scenarios = []
  for (const delayMs of [0, 20]) {
    const runs = []
    for (const connections of [8, 16, 32, 64, 128, 256, 512]) {
      ioHygiene.install({ http: { connections } })
      const r = await burst(`http://localhost:${servers.ports.fast}/cap${connections}?delayMs=${delayMs}`, 5000, 500)
      runs.push({ label: `connections ${connections}`, ...r })
      ioHygiene.uninstall()
      await sleep(200)
    }
    scenarios.push({ name: `fetch-burst, server latency ${delayMs} ms`, runs })
  }
  return { bench: 'http-caps', scenarios }
}
