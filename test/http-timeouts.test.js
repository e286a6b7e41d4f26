'use strict'

// Every timeout fires with undici's own error class and code, so callers
// that branch on them keep working.
const t = require('tap')
const undici = require('undici')
const ioHygiene = require('..')
const { installWithServer: setup } = require('./helpers/http-server')
const { eventually } = require('./helpers/wait')

const { ConnectTimeoutError, HeadersTimeoutError, BodyTimeoutError } = undici.errors

t.afterEach(() => ioHygiene.uninstall())

// Sends the head of a response and one chunk of its body, then nothing.
function stallBody (req, res) {
  res.writeHead(200, { 'content-length': '100' })
  res.write('first chunk')
}

t.test('connect: ConnectTimeoutError, UND_ERR_CONNECT_TIMEOUT', async (t) => {
  const { handle, dns } = await setup(t, { connectTimeoutMs: 100, maxRetries: 0 })
  dns.mode = 'blackhole' // the connection waits for a name that never resolves
  const err = await fetch('http://slow.test:8080/').catch((err) => err)
  t.ok(err.cause instanceof ConnectTimeoutError, err.cause?.name)
  t.equal(err.cause.code, 'UND_ERR_CONNECT_TIMEOUT')
  t.equal(handle.http.stats().timeouts.connect, 1)
})

t.test('headers: HeadersTimeoutError, UND_ERR_HEADERS_TIMEOUT', async (t) => {
  const { server, handle } = await setup(t, { headersTimeoutMs: 100 })
  server.handler = () => {} // accepts and never answers
  const err = await fetch(server.url('/')).catch((err) => err)
  t.ok(err.cause instanceof HeadersTimeoutError, err.cause?.name)
  t.equal(err.cause.code, 'UND_ERR_HEADERS_TIMEOUT')
  t.equal(handle.http.stats().timeouts.headers, 1)
  t.equal(server.counts.requests, 1, 'a headers timeout is not retried')
})

t.test('body idle: BodyTimeoutError, UND_ERR_BODY_TIMEOUT', async (t) => {
  const { server, handle } = await setup(t, { bodyTimeoutMs: 100 })
  server.handler = stallBody
  const res = await fetch(server.url('/'))
  const err = await res.text().catch((err) => err)
  t.ok(err.cause instanceof BodyTimeoutError, err.cause?.name)
  t.equal(err.cause.code, 'UND_ERR_BODY_TIMEOUT')
  const viaRequest = await undici.request(server.url('/'))
  const err2 = await viaRequest.body.text().catch((err) => err)
  t.ok(err2 instanceof BodyTimeoutError)
  t.equal(handle.http.stats().timeouts.body, 2)
})

t.test('the total deadline ends a request without a signal, with undici\'s classes', async (t) => {
  const { server, handle } = await setup(t, { requestTimeoutMs: 150 })
  server.handler = (req, res) => {
    if (req.url === '/body') stallBody(req, res)
    if (req.url === '/quick') res.end()
  }
  const quick = await fetch(server.url('/quick')).catch((err) => err)
  t.equal(await quick.text(), '', 'a request that ends in time clears its deadline')
  const err = await fetch(server.url('/headers')).catch((err) => err)
  t.ok(err.cause instanceof HeadersTimeoutError, 'before the response: a headers timeout')
  t.equal(err.cause.code, 'UND_ERR_HEADERS_TIMEOUT')
  t.match(err.cause.message, /requestTimeoutMs/)

  const res = await undici.request(server.url('/body'))
  const err2 = await res.body.text().catch((err) => err)
  t.ok(err2 instanceof BodyTimeoutError, 'during the body: a body timeout')
  t.equal(err2.code, 'UND_ERR_BODY_TIMEOUT')
  const stats = handle.http.stats()
  t.equal(stats.timeouts.deadline, 2)
  t.equal(stats.timeouts.headers + stats.timeouts.body, 0, 'counted as deadlines only')
})

t.test('a request with a signal of its own is left to it', async (t) => {
  const { server, handle } = await setup(t, { requestTimeoutMs: 100 })
  const waiting = []
  server.handler = (req, res) => waiting.push(res)
  const own = undici.request(server.url('/own'), { signal: new AbortController().signal })
  const bare = undici.request(server.url('/bare')).catch((err) => err)
  t.ok((await bare) instanceof HeadersTimeoutError, 'the one without a signal hit the deadline')
  await eventually(() => waiting.length === 2)
  for (const res of waiting) if (!res.destroyed) res.end('late')
  const res = await own
  t.equal(await res.body.text(), 'late', 'the one with a signal was still waiting, and got its answer')
  t.equal(handle.http.stats().timeouts.deadline, 1)
})

t.test('the deadline also ends a request still waiting for a connection or a retry', async (t) => {
  const { server, handle } = await setup(t, { requestTimeoutMs: 200, connections: 1, retryBaseDelayMs: 1, statusRetries: true })
  server.handler = (req, res) => {
    if (req.url === '/busy') return res.writeHead(503, { 'retry-after': '5' }).end()
    // /hold keeps the only connection
  }
  const hold = undici.request(server.url('/hold')).catch((err) => err)
  const queued = undici.request(server.url('/queued')).catch((err) => err)
  t.ok((await queued) instanceof HeadersTimeoutError, 'queued behind the cap')
  await hold
  const busy = await undici.request(server.url('/busy')).catch((err) => err)
  t.ok(busy instanceof HeadersTimeoutError, 'waiting out a Retry-After')
  t.equal(handle.http.stats().retries.status, 1)
})

t.test('the deadline also ends a request whose streamed body stalls, and destroys the body', async (t) => {
  const { Readable } = require('node:stream')
  const { server, handle } = await setup(t, { requestTimeoutMs: 100 })
  // A body that stalls after its first chunk: the deadline ends the request
  // and the body is destroyed, as undici destroys it (that the chunk goes
  // out as it comes is test/http-dropin.test.js's).
  const stalled = new Readable({ read () {} })
  stalled.push('half')
  const err = await undici.request(server.url('/'), { method: 'PUT', body: stalled, headers: { 'content-length': '8' } }).catch((err) => err)
  t.ok(err instanceof HeadersTimeoutError)
  await require('node:stream/promises').finished(stalled).catch(() => {})
  t.ok(stalled.destroyed)
  t.equal(handle.http.stats().timeouts.deadline, 1)
  // A body that fails before the deadline fails the request with its error.
  const broken = new Readable({ read () { this.destroy(new Error('no body')) } })
  const err2 = await undici.request(server.url('/'), { method: 'PUT', body: broken, headers: { 'content-length': '8' } }).catch((err) => err)
  t.equal(err2.message, 'no body')
})

t.test('a request waits at most headersTimeoutMs for a connection when the cap is reached', async (t) => {
  const { server, handle } = await setup(t, { connections: 1, headersTimeoutMs: 300 })
  server.handler = () => {} // hung: the only connection stays busy
  const hold = new AbortController()
  const held = undici.request(server.url('/hold'), { signal: hold.signal, headersTimeout: 60_000 }).catch((err) => err)
  const queued = await undici.request(server.url('/queued')).catch((err) => err)
  t.ok(queued instanceof HeadersTimeoutError, 'undici\'s class')
  t.equal(queued.code, 'UND_ERR_HEADERS_TIMEOUT')
  t.match(queued.message, /No connection within headersTimeoutMs/)
  t.equal(handle.http.stats().timeouts.queue, 1)
  hold.abort()
  t.equal((await held).name, 'AbortError')
  // undici still holds the timed-out request: on the freed connection it is
  // started, and ended at once, unsent.
  const pending = () => handle.http.dispatcher.stats[server.origin()]?.pending ?? 0
  t.ok(await eventually(() => pending() === 0), 'undici let go of it')
  t.equal(server.counts.requests, 1, 'the queued request was never sent')
})
