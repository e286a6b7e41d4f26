'use strict'

// createHttpSink against a real HTTP server on 127.0.0.1, reached as
// localhost: what the server received is what the assertions read.
const t = require('tap')
const path = require('node:path')
const zlib = require('node:zlib')
const { execFile } = require('node:child_process')
const { startHttpServer } = require('./helpers/http-server')
const { eventually } = require('./helpers/wait')
const { createHttpSink, retryAfterMs } = require('../lib/http/sink')

// An ingest endpoint. `answer(entry, req, res)` decides each reply: a status,
// { status, headers, body }, 'reset' (the socket is destroyed unanswered) or
// 'hang' (never answered). `seen` lists every request with its parsed records.
async function ingest (t, answer = () => 200) {
  const server = await startHttpServer()
  t.teardown(() => server.close())
  const seen = []
  server.handler = async (req, res) => {
    const chunks = []
    for await (const chunk of req) chunks.push(chunk)
    let raw = Buffer.concat(chunks)
    if (req.headers['content-encoding'] === 'gzip') raw = zlib.gunzipSync(raw)
    const text = raw.toString()
    const records = text.startsWith('[')
      ? JSON.parse(text)
      : text.split('\n').slice(0, -1).map((line) => JSON.parse(line))
    const entry = { headers: req.headers, text, records, status: 0 }
    seen.push(entry)
    let reply = answer(entry, req)
    if (reply === 'reset') return req.socket.destroy()
    if (reply === 'hang') return
    if (typeof reply === 'number') reply = { status: reply }
    entry.status = reply.status
    res.writeHead(reply.status, reply.headers)
    res.end(reply.body ?? '')
  }
  const delivered = () => seen.filter((e) => e.status >= 200 && e.status < 300).flatMap((e) => e.records)
  return { server, seen, delivered, url: server.url('/ingest') }
}

function sinkFor (t, options) {
  const sink = createHttpSink(options)
  t.teardown(() => sink.close({ timeoutMs: 1000 }).catch(() => {}))
  return sink
}

const range = (n, from = 0) => Array.from({ length: n }, (_, i) => ({ n: String(from + i).padStart(5, '0') }))

t.test('a burst of pushes is a few NDJSON requests, each push resolved by its 2xx', async (t) => {
  const { seen, delivered, url } = await ingest(t)
  const sink = sinkFor(t, { url })
  const records = range(2500)
  const results = await Promise.all(records.map((r) => sink.push(r)))
  t.same(results, records.map(() => undefined))
  t.ok(seen.length <= 5, `${seen.length} requests for 2,500 records`)
  t.same(delivered(), records, 'every record once, in order')
  for (const entry of seen) {
    t.equal(entry.headers['content-type'], 'application/x-ndjson')
    t.ok(entry.text.endsWith('\n'))
    t.ok(entry.records.length <= 1000, 'maxBatchItems holds')
  }
  await sink.flush()
  const stats = sink.stats()
  t.match(stats, { pushed: 2500, delivered: 2500, rejected: 0, requests: seen.length, retries: 0, queued: 0, inFlight: 0 })
})

t.test('JSON-array bodies, gzip, and the caller\'s headers', async (t) => {
  const { seen, delivered, url } = await ingest(t)
  const sink = sinkFor(t, {
    url: new URL(url),
    format: 'json',
    compression: 'gzip',
    headers: Object.assign(Object.create(null), { Authorization: 'Bearer s3cret', 'Content-Type': 'application/json; charset=utf-8' }),
    method: 'PUT',
  })
  const records = range(300)
  await Promise.all(records.map((r) => sink.push(r)))
  t.same(delivered(), records)
  t.equal(seen[0].headers['content-encoding'], 'gzip')
  t.equal(seen[0].headers.authorization, 'Bearer s3cret')
  t.equal(seen[0].headers['content-type'], 'application/json; charset=utf-8', 'a caller\'s content-type wins')
  t.ok(seen[0].text.startsWith('['), 'a JSON array')
  const stats = sink.stats()
  const plainBytes = seen.reduce((sum, e) => sum + Buffer.byteLength(e.text), 0)
  t.ok(stats.bytesSent < plainBytes, `gzip sent ${stats.bytesSent} bytes for ${plainBytes}`)
})

t.test('429 and 503 with Retry-After are retried, then the push resolves', async (t) => {
  const replies = [
    { status: 429, headers: { 'retry-after': '0' } },
    { status: 503, headers: { 'retry-after': '1' } },
  ]
  const { seen, delivered, url } = await ingest(t, () => replies.shift() ?? 200)
  const sink = sinkFor(t, { url, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
  const records = range(10)
  const pushed = records.map((r) => sink.push(r))
  await sink.flush() // the Retry-After wait is awaited: the process may not exit under it
  await Promise.all(pushed)
  t.same(seen.map((e) => e.status), [429, 503, 200])
  for (const entry of seen) t.same(entry.records, records, 'each attempt carries the same records, in order')
  t.same(delivered(), records)
  t.match(sink.stats(), { retries: 2, delivered: 10, requests: 3 })
})

t.test('Retry-After is honoured up to the delivery deadline, then the push rejects with it as the cause', async (t) => {
  const { seen, url } = await ingest(t, () => ({
    status: 429,
    headers: { 'retry-after': new Date(Date.now() + 3_600_000).toUTCString() },
    body: 'slow down',
  }))
  // Without Retry-After, a 1 ms backoff would have retried many times.
  const sink = sinkFor(t, { url, deliveryTimeoutMs: 1000, retryBackoffMs: 1, maxRetryBackoffMs: 1 })
  await t.rejects(sink.push({ a: 1 }), {
    code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT',
    cause: { code: 'ERR_IO_HYGIENE_HTTP_STATUS', status: 429, body: 'slow down' },
  })
  t.equal(seen.length, 1, 'no request before Retry-After')
})

t.test('a flush() begun during a Retry-After wait keeps the process up to its end', async (t) => {
  // In a child whose only work left is the flush(): the test runner keeps
  // this process alive whatever the sink does, a child exits without it.
  const replies = [{ status: 503, headers: { 'retry-after': '1' } }]
  const { delivered, url } = await ingest(t, () => replies.shift() ?? 200)
  const script = `
    const { createHttpSink } = require(${JSON.stringify(path.join(__dirname, '..'))})
    const sink = createHttpSink({ url: ${JSON.stringify(url)}, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
    sink.push({ a: 1 }).then(() => process.stdout.write('delivered '))
    const poll = setInterval(() => {
      if (sink.stats().retries < 1) return
      clearInterval(poll) // waiting on Retry-After now, on an unref'd timer
      sink.flush().then(() => process.stdout.write('flushed'))
    }, 5)
  `
  const child = await new Promise((resolve) => {
    execFile(process.execPath, ['-e', script], { timeout: 30_000 }, (error, stdout, stderr) => resolve({ error, stdout, stderr }))
  })
  t.error(child.error, child.stderr)
  t.equal(child.stdout, 'delivered flushed', 'the child stayed up until the retry was delivered')
  t.same(delivered(), [{ a: 1 }])
})

function runSinkFixture (url) {
  const fixture = path.join(__dirname, 'fixtures', 'http-sink-exit.js')
  return new Promise((resolve) => {
    execFile(process.execPath, [fixture, url], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err?.code ?? 0, stdout: stdout.trim(), stderr })
    })
  })
}

t.test('a push waiting out Retry-After keeps a script up until it is delivered, without close()', async (t) => {
  const replies = [{ status: 503, headers: { 'retry-after': '1' } }]
  const { delivered, url } = await ingest(t, () => replies.shift() ?? 200)
  const r = await runSinkFixture(url)
  t.equal(r.stdout, 'delivered after 2 requests', r.stderr)
  t.equal(r.code, 0)
  t.same(delivered(), [{ a: 1 }])
})

t.test('a push to a refused port keeps a script up until its delivery deadline rejects it', async (t) => {
  const gone = await startHttpServer()
  await gone.close()
  const r = await runSinkFixture(gone.url('/ingest'))
  t.equal(r.stdout, 'rejected ERR_IO_HYGIENE_DELIVERY_TIMEOUT (ECONNREFUSED)', r.stderr)
  t.equal(r.code, 1)
})

t.test('close() during a long Retry-After wait rejects what is held and ends the wait', async (t) => {
  const { seen, url } = await ingest(t, () => ({ status: 503, headers: { 'retry-after': '3600' } }))
  const sink = createHttpSink({ url, deliveryTimeoutMs: 7_200_000 })
  const pushed = sink.push({ a: 1 })
  t.ok(await eventually(() => sink.stats().retries === 1), 'waiting on Retry-After')
  await t.rejects(sink.flush({ timeoutMs: 1 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'a flush cannot outwait it')
  await t.rejects(sink.close({ timeoutMs: 1 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  await t.rejects(pushed, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.equal(seen.length, 1, 'no retry')
})

t.test('a 413 splits the batch in halves down to what the server takes, in order, and is learnt', async (t) => {
  const limit = 3
  const { seen, delivered, url } = await ingest(t, (entry) => entry.records.length > limit ? 413 : 200)
  const sink = sinkFor(t, { url, format: 'json' })
  const first = range(10)
  await Promise.all(first.map((r) => sink.push(r)))
  t.same(delivered(), first, 'every record once, in order')
  const refused = seen.filter((e) => e.status === 413).length
  t.ok(refused >= 1)
  t.ok(sink.stats().splits >= 2)
  const second = range(10, 10)
  await Promise.all(second.map((r) => sink.push(r)))
  t.same(delivered(), [...first, ...second])
  t.equal(seen.filter((e) => e.status === 413).length, refused, 'a batch as large as a refused one is split before it is sent')
})

t.test('the delivered half of a split batch stays resolved when the rest times out', async (t) => {
  const { delivered, url } = await ingest(t, (entry) => {
    if (entry.records.length > 2) return 413
    return delivered().length === 0 ? 200 : 503
  })
  const sink = sinkFor(t, { url, deliveryTimeoutMs: 1000, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
  const records = range(4)
  const settled = await Promise.allSettled(records.map((r) => sink.push(r)))
  t.same(settled.map((s) => s.status), ['fulfilled', 'fulfilled', 'rejected', 'rejected'])
  t.match(settled[2].reason, { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: { status: 503 } })
  t.same(delivered(), records.slice(0, 2))
  t.match(sink.stats(), { delivered: 2, rejected: 2 })
})

t.test('a single record refused with 413 rejects with the status; the rest go on', async (t) => {
  const { delivered, url } = await ingest(t, (entry) => entry.text.includes('big') ? { status: 413, body: 'too large' } : 200)
  const sink = sinkFor(t, { url })
  const big = sink.push({ big: 'x'.repeat(100) })
  const small = sink.push({ small: 1 })
  await t.rejects(big, { code: 'ERR_IO_HYGIENE_HTTP_STATUS', status: 413, body: 'too large' })
  await small
  t.same(delivered(), [{ small: 1 }])
  t.match(sink.stats(), { delivered: 1, rejected: 1 })
})

t.test('a 400 rejects its batch with the status and an excerpt of the body, and later batches go on', async (t) => {
  const long = 'invalid record: ' + 'x'.repeat(2000)
  let first = true
  const { delivered, url } = await ingest(t, () => {
    if (!first) return 200
    first = false
    return { status: 400, body: long }
  })
  const sink = sinkFor(t, { url })
  const bad = [sink.push({ a: 1 }), sink.push({ a: 2 })]
  for (const p of bad) {
    const err = await p.catch((e) => e)
    t.match(err, { code: 'ERR_IO_HYGIENE_HTTP_STATUS', status: 400, message: /answered 400: invalid record: x+\.\.\.$/ })
    t.ok(long.startsWith(err.body.slice(0, -3)) && err.body.length < 600, 'an excerpt')
  }
  await sink.push({ a: 3 })
  t.same(delivered(), [{ a: 3 }])
  t.match(sink.stats(), { delivered: 1, rejected: 2, retries: 0 })
})

t.test('order is kept and nothing is lost across 503s, resets and 413s', async (t) => {
  let n = 0
  const { delivered, url } = await ingest(t, (entry) => {
    n++
    if (entry.records.length > 40) return 413
    if (n % 5 === 0) return 'reset'
    if (n % 3 === 0) return 503
    return 200
  })
  const sink = sinkFor(t, { url, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
  const records = range(600)
  const pushed = []
  for (let i = 0; i < records.length; i += 50) {
    for (const r of records.slice(i, i + 50)) pushed.push(sink.push(r))
    await new Promise((resolve) => setImmediate(resolve))
  }
  const settled = await Promise.allSettled(pushed)
  t.same(settled.filter((s) => s.status !== 'fulfilled'), [], 'every push resolved')
  t.same(delivered(), records, 'received once each, in push order')
  const stats = sink.stats()
  t.ok(stats.retries > 0 && stats.splits > 0)
  t.match(stats, { pushed: 600, delivered: 600, rejected: 0 })
})

// Deadlines here leave room for a first answer on a loaded machine: the cause
// asserted is the failure of a try that completed.
t.test('past the delivery deadline a push rejects with the last failure as the cause', async (t) => {
  const { url } = await ingest(t, () => 503)
  const sink = sinkFor(t, { url, deliveryTimeoutMs: 1000, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
  await t.rejects(sink.push({ a: 1 }), {
    code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT',
    cause: { code: 'ERR_IO_HYGIENE_HTTP_STATUS', status: 503 },
  })
  const server = await startHttpServer()
  const closed = server.url('/')
  await server.close()
  const down = sinkFor(t, { url: closed, deliveryTimeoutMs: 1000, retryBackoffMs: 1, maxRetryBackoffMs: 5 })
  await t.rejects(down.push({ a: 1 }), { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', cause: { code: 'ECONNREFUSED' } })
})

t.test('a last try cut short by the delivery deadline keeps the failure before it as the cause', async (t) => {
  const { server, seen, url } = await ingest(t, () => seen.length === 1 ? 503 : 'hang')
  const sink = sinkFor(t, { url, deliveryTimeoutMs: 1000, retryBackoffMs: 1, maxRetryBackoffMs: 1 })
  await t.rejects(sink.push({ a: 1 }), {
    code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT',
    cause: { code: 'ERR_IO_HYGIENE_HTTP_STATUS', status: 503 },
  })
  t.ok(await eventually(() => server.counts.open === 0), 'the hung try was aborted')
  // The hung try is cut just before the deadline; on a loaded machine the
  // batcher may still start one more, cut the same way.
  t.ok(seen.length >= 2, 'the 503, then the hung try')
})

t.test('a request to a hung server is abandoned at the delivery deadline', async (t) => {
  const { server, url } = await ingest(t, () => 'hang')
  const sink = sinkFor(t, { url, deliveryTimeoutMs: 300 })
  await t.rejects(sink.push({ a: 1 }), { code: 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT' })
  t.ok(await eventually(() => server.counts.open === 0), 'the request was aborted, its socket closed')
})

t.test('close() flushes what lingers; later pushes are refused', async (t) => {
  const { seen, delivered, url } = await ingest(t)
  const sink = createHttpSink({ url, lingerMs: 60_000 })
  const records = range(5)
  const pushed = records.map((r) => sink.push(r))
  t.equal(seen.length, 0)
  await sink.close()
  await Promise.all(pushed)
  t.same(delivered(), records)
  t.ok(sink.closed)
  await t.rejects(sink.push({ late: true }), { code: 'ERR_IO_HYGIENE_CLOSED' })
})

t.test('close() at its deadline rejects what is left and aborts the request in flight', async (t) => {
  const { server, seen, url } = await ingest(t, () => 'hang')
  const sink = createHttpSink({ url })
  const pushed = sink.push({ a: 1 })
  t.ok(await eventually(() => seen.length === 1))
  await t.rejects(sink.close({ timeoutMs: 50 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  await t.rejects(pushed, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  t.ok(await eventually(() => server.counts.open === 0), 'the request was aborted')
})

t.test('a close() refused for its options leaves the sink open', async (t) => {
  const { delivered, url } = await ingest(t)
  const sink = sinkFor(t, { url })
  await t.rejects(sink.close({ timeoutMs: 'soon' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.notOk(sink.closed)
  await sink.push({ a: 1 })
  t.same(delivered(), [{ a: 1 }])
})

t.test('flushOnSignals joins the shutdown listeners until close()', async (t) => {
  const { url } = await ingest(t)
  const before = process.listenerCount('SIGTERM')
  const sink = createHttpSink({ url, flushOnSignals: true })
  t.equal(process.listenerCount('SIGTERM'), before + 1)
  await sink.close()
  t.equal(process.listenerCount('SIGTERM'), before)
})

t.test('with flushOnSignals, SIGTERM sends what lingers before the process dies of it', async (t) => {
  const { spawn } = require('node:child_process')
  const { delivered, url } = await ingest(t)
  const code = `
    const { createHttpSink } = require(${JSON.stringify(require.resolve('../lib/http/sink'))})
    const sink = createHttpSink({ url: process.argv[1], flushOnSignals: true, lingerMs: 60000 })
    for (let i = 0; i < 3; i++) sink.push({ i }).then(() => process.stdout.write('delivered ' + i + '\\n'))
    setInterval(() => {}, 1000) // the service's own work keeps it up
    process.stdout.write('ready\\n')`
  const child = spawn(process.execPath, ['-e', code, url], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => child.kill('SIGKILL'))
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  t.ok(await eventually(() => out.includes('ready')), 'the child pushed')
  t.same(delivered(), [], 'nothing sent yet: it lingers')
  child.kill('SIGTERM')
  t.same(await exited, { code: null, signal: 'SIGTERM' }, 'it dies of the signal, after the flush')
  t.same(delivered(), [{ i: 0 }, { i: 1 }, { i: 2 }])
  t.match(out, /delivered 0\ndelivered 1\ndelivered 2\n/)
})

t.test('requests go through the global dispatcher', async (t) => {
  const { delivered, url } = await ingest(t)
  const sink = sinkFor(t, { url })
  const { Agent, getGlobalDispatcher, setGlobalDispatcher } = require('undici')
  const previous = getGlobalDispatcher()
  const origins = []
  const agent = new Agent().compose((dispatch) => (opts, handler) => {
    origins.push(String(opts.origin))
    return dispatch(opts, handler)
  })
  setGlobalDispatcher(agent)
  t.teardown(() => {
    setGlobalDispatcher(previous)
    return agent.close()
  })
  await sink.push({ a: 1 })
  t.same(origins, [new URL(url).origin])
  t.same(delivered(), [{ a: 1 }])
})

t.test('after install(), batches go through io-hygiene\'s dispatcher and its DNS cache', async (t) => {
  const { install, uninstall } = require('..')
  const { testDns } = require('./helpers/http-server')
  const dns = await testDns(t, 'ingest.test')
  const handle = install({ dns: dns.options })
  t.teardown(() => uninstall())
  const { server, delivered } = await ingest(t)
  const sink = sinkFor(t, { url: server.url('/ingest', 'ingest.test') })
  const records = range(300)
  await Promise.all(records.map((r) => sink.push(r)))
  t.same(delivered(), records)
  t.equal(handle.http.stats().requests, sink.stats().requests, 'every request went through our dispatcher')
  t.equal(handle.dns.stats().misses, 1, 'the host was resolved once, through the cache')
})

t.test('pushes that cannot be sent are refused at the call', async (t) => {
  const { url } = await ingest(t)
  const sink = sinkFor(t, { url, maxBatchBytes: 100, maxQueuedItems: 1, maxBatchItems: 1, overflow: 'reject', lingerMs: 60_000 })
  const circular = {}
  circular.self = circular
  await t.rejects(sink.push(circular), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', cause: TypeError })
  await t.rejects(sink.push(10n), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  await t.rejects(sink.push(undefined), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT', message: /got undefined/ })
  await t.rejects(sink.push('x'.repeat(200)), { code: 'ERR_IO_HYGIENE_ITEM_TOO_LARGE' })
  const queued = sink.push({ a: 1 })
  await t.rejects(sink.push({ a: 2 }), { code: 'ERR_IO_HYGIENE_QUEUE_FULL' })
  t.match(sink.stats(), { pushed: 6, rejected: 5 })
  await sink.flush()
  await queued
})

t.test('every option is validated with a coded error', async (t) => {
  const url = 'http://localhost:1/'
  const bad = [
    [undefined, 'ERR_IO_HYGIENE_INVALID_OPTION', /"url"/],
    [{}, 'ERR_IO_HYGIENE_INVALID_OPTION', /"url"/],
    [{ url, maxTTL: 1 }, 'ERR_IO_HYGIENE_UNKNOWN_OPTION'],
    [{ url: 'ftp://x/' }, 'ERR_IO_HYGIENE_INVALID_OPTION', /got a URL of scheme ftp:$/],
    [{ url: 'not a url' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url: 5 }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, format: 'xml' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, compression: 'br' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, method: 'GET' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, headers: 'x' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, headers: [] }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, headers: new Headers({ authorization: 'x' }) }, 'ERR_IO_HYGIENE_INVALID_OPTION', /a plain object/],
    [{ url: 'http://user:secret@localhost/' }, 'ERR_IO_HYGIENE_INVALID_OPTION', /without credentials.*got a URL with credentials$/],
    [{ url, headers: { 'bad name': 'x' } }, 'ERR_IO_HYGIENE_INVALID_OPTION', /"headers" must be an object whose keys are valid header names/],
    [{ url, headers: { 'Content-Length': '5' } }, 'ERR_IO_HYGIENE_INVALID_OPTION', /the sink sets those/],
    [{ url, headers: { 'x-a': 5 } }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, headers: { 'x-a': 'a\r\nb' } }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, lingerMs: -1 }, 'ERR_IO_HYGIENE_OPTION_RANGE'],
    [{ url, maxBatchBytes: 1 }, 'ERR_IO_HYGIENE_OPTION_RANGE'],
    [{ url, requestTimeoutMs: 0 }, 'ERR_IO_HYGIENE_OPTION_RANGE'],
    [{ url, flushOnSignals: 'yes' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, name: '' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ url, maxBatchItems: 20, maxQueuedItems: 10 }, 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', /maxBatchItems/],
    [{ url, maxBatchBytes: 20, maxQueuedBytes: 10 }, 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', /maxBatchBytes/],
    [{ url, retryBackoffMs: 20, maxRetryBackoffMs: 10 }, 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', /retryBackoffMs/],
  ]
  for (const [options, code, message] of bad) {
    t.throws(() => createHttpSink(options), { code, message: message ?? /./ }, JSON.stringify(options) ?? 'no options')
  }
})

t.test('a refused option never shows its value: a URL\'s password or key, a header\'s token', async (t) => {
  const secrets = ['hunter2', 'sk_live_123', 'Bearer tok3n', 'bad name']
  const refused = [
    { url: 'http://user:hunter2@localhost/?api_key=sk_live_123' },
    { url: 'ht tp://user:hunter2@localhost/?api_key=sk_live_123' },
    { url: 'ftp://user:hunter2@localhost/?api_key=sk_live_123' },
    { url: 'http://localhost/', headers: { authorization: 'Bearer tok3n\n' } },
    { url: 'http://localhost/', headers: { authorization: ['Bearer tok3n'] } },
    { url: 'http://localhost/', headers: { authorization: null } },
    { url: 'http://localhost/', headers: { 'bad name': 'Bearer tok3n' } },
    { url: 'http://localhost/', headers: new Map([['authorization', 'Bearer tok3n']]) },
  ]
  for (const options of refused) {
    const err = t.throws(() => createHttpSink(options), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
    for (const secret of secrets) t.notOk(err.message.includes(secret), `${err.message} hides ${secret}`)
  }
})

t.test('Retry-After reads delay-seconds and HTTP-dates', async (t) => {
  const now = Date.parse('2026-01-01T00:00:00Z')
  t.equal(retryAfterMs('2', now), 2000)
  t.equal(retryAfterMs([' 3 ', '9'], now), 3000)
  t.equal(retryAfterMs('Thu, 01 Jan 2026 00:00:05 GMT', now), 5000)
  t.equal(retryAfterMs('Wed, 31 Dec 2025 00:00:00 GMT', now), 0, 'a date in the past')
  t.equal(retryAfterMs('soon', now), 0)
  t.equal(retryAfterMs(undefined, now), 0)
  t.ok(retryAfterMs('Thu, 01 Jan 2099 00:00:00 GMT') > 0)
})

t.test('the pushes waiting for room are bounded, as the batcher bounds them', async (t) => {
  const { seen, url } = await ingest(t, () => 'hang')
  const sink = createHttpSink({ url, maxBatchItems: 1, maxQueuedItems: 1, maxWaitingItems: 1, requestTimeoutMs: 60_000 })
  const held = sink.push({ a: 1 })
  held.catch(() => {})
  t.ok(await eventually(() => seen.length === 1), 'the first is in flight')
  const waits = sink.push({ a: 2 })
  waits.catch(() => {})
  await t.rejects(sink.push({ a: 3 }), { code: 'ERR_IO_HYGIENE_QUEUE_FULL', message: /maxWaitingItems 1/ })
  t.match(sink.stats(), { waiting: 1, rejected: 1 })
  await t.rejects(sink.close({ timeoutMs: 1 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  await t.rejects(waits, { code: 'ERR_IO_HYGIENE_TIMEOUT' })
})

t.test('redactUrl() keeps no credentials, query or fragment; printable() escapes controls', async (t) => {
  const { redactUrl, printable } = require('../lib/core/errors')
  t.equal(redactUrl('https://user:pw@h.test:8443/a/b?api_key=1#frag'), 'https://<redacted>@h.test:8443/a/b?<redacted>')
  t.equal(redactUrl('http://h.test/'), 'http://h.test/')
  t.equal(redactUrl('not a url'), '<invalid URL>')
  t.equal(printable('a\nb\u001b[2J\u202e'), 'a\\u000ab\\u001b[2J\\u202e')
})

t.test('an error answer forges no log line and shows no query string; its body stays on err.body', async (t) => {
  const hostile = 'bad record\r\n2026-01-01 INFO all good \u001b[2J\u202eevil'
  const { url } = await ingest(t, () => ({ status: 400, body: hostile }))
  const sink = sinkFor(t, { url: `${url}?api_key=s3cret&x=1` })
  const err = await sink.push({ a: 1 }).catch((err) => err)
  t.equal(err.code, 'ERR_IO_HYGIENE_HTTP_STATUS')
  t.equal(err.body, hostile, 'the excerpt, raw, for code that reads it')
  // eslint-disable-next-line no-control-regex -- the point of the test
  t.notMatch(err.message, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e]/, 'no control character in the message')
  t.match(err.message, 'bad record\\u000d\\u000a2026-01-01 INFO', 'shown escaped')
  t.notMatch(err.message, 's3cret')
  t.match(err.message, `POST ${url}?<redacted> answered 400`)
})
