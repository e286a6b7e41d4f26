'use strict'

// The retries that are always safe, against real servers on 127.0.0.1.
const t = require('tap')
const dc = require('node:diagnostics_channel')
const path = require('node:path')
const { execFile } = require('node:child_process')
const undici = require('undici')
const ioHygiene = require('..')
const { startHttpServer, testDns, installWithServer: setup } = require('./helpers/http-server')
const { eventually, sleep } = require('./helpers/wait')

t.afterEach(() => ioHygiene.uninstall())

// Messages published on an io-hygiene:http:* channel during the test.
function listen (t, name, onMessage = () => {}) {
  const seen = []
  const listener = (message) => {
    seen.push(message)
    onMessage(message)
  }
  dc.subscribe(`io-hygiene:http:${name}`, listener)
  t.teardown(() => dc.unsubscribe(`io-hygiene:http:${name}`, listener))
  return seen
}

// Per-socket bookkeeping at the server: requests served and when the last
// response finished.
function track (req) {
  const s = req.socket
  s.served ??= 0
  s.served++
  return s
}

// A GET whose socket is idle again when it resolves (undici frees it right
// after the body ends), so that the next request reuses it.
async function warm (url) {
  await (await undici.request(url)).body.text()
  await new Promise(setImmediate)
}

const answer = (req, res, status = 200, headers = {}, body = 'ok') => {
  req.resume()
  req.on('end', () => {
    res.writeHead(status, headers)
    res.end(body)
  })
}

t.test('a GET that meets a server closing its idle socket is retried on a fresh connection, and the idle close is learned', async (t) => {
  const { server, handle } = await setup(t)
  const idleCloseMs = 1000
  // The race a server's idle timer makes, made certain: a request arriving
  // on a socket idle for 1 s meets the close (no response, no hint).
  server.handler = (req, res) => {
    const s = track(req)
    if (s.lastFinish !== undefined && Date.now() - s.lastFinish >= idleCloseMs) {
      s.destroy()
      return
    }
    res.on('finish', () => { s.lastFinish = Date.now() })
    answer(req, res)
  }
  const retries = listen(t, 'retry')
  const learned = listen(t, 'idle-close')

  const first = await undici.request(server.url('/1'))
  t.equal(await first.body.text(), 'ok')
  await sleep(idleCloseMs + 50) // the idle time is the input of this test

  const second = await undici.request(server.url('/2'))
  t.equal(await second.body.text(), 'ok', 'the GET did not fail')
  const stats = handle.http.stats()
  t.equal(stats.retries.staleSocket, 1, 'its retry is counted')
  t.equal(server.counts.requests, 3, 'written twice: once on the closed socket, once on a fresh one')
  t.equal(server.counts.connections, 2)
  t.match(retries, [{ reason: 'staleSocket', method: 'GET', path: '/2', attempt: 1, delayMs: 0 }])
  t.equal(learned.length, 1)
  t.ok(learned[0].idleMs >= idleCloseMs && learned[0].retireAfterMs < idleCloseMs, `learned ${learned[0].idleMs} ms, retiring after ${learned[0].retireAfterMs} ms`)

  // From now on our idle sockets of this origin close before the server's;
  // one that is used again before that stays open.
  await new Promise(setImmediate)
  const reused = await undici.request(server.url('/2b'))
  t.equal(await reused.body.text(), 'ok')
  t.equal(server.counts.connections, 2, 'the armed idle socket was used again')
  const [fresh] = server.sockets
  const closedAfterMs = await new Promise((resolve) => fresh.once('end', () => resolve(Date.now() - fresh.lastFinish)))
  t.ok(closedAfterMs < idleCloseMs, `the client closed its idle socket after ${closedAfterMs} ms, before the server's ${idleCloseMs} ms`)
  await eventually(() => handle.http.stats().socketsRetired === 1)
  t.equal(handle.http.stats().socketsRetired, 1)
  const third = await undici.request(server.url('/3'))
  t.equal(await third.body.text(), 'ok')
  t.equal(handle.http.stats().retries.staleSocket, 1, 'no further retry was needed')
})

t.test('an idle close seen as the server\'s FIN is learned too, and later sockets are retired before it', async (t) => {
  const { server, handle } = await setup(t, {}, { idleCloseMs: 300 })
  const res = await fetch(server.url('/1'))
  await res.text()
  await eventually(() => server.counts.idleCloses === 1 && handle.http.stats().idleClosesLearned === 1)
  t.equal(handle.http.stats().idleClosesLearned, 1, 'learned from the FIN on an idle socket')
  t.equal(handle.http.stats().retries.staleSocket, 0)

  const again = await fetch(server.url('/2'))
  await again.text()
  await eventually(() => server.counts.open === 0)
  t.equal(server.counts.idleCloses, 1, 'the second socket was closed by us, before the server\'s timer')
  t.equal(handle.http.stats().socketsRetired, 1)
})

t.test('an idle close learned while other sockets are idle retires the old ones at once and arms the rest', async (t) => {
  const { server, handle } = await setup(t, { connections: 4 })
  // Three sockets: /a and /b answered at once, /c 400 ms later.
  const arrived = []
  const socketOf = {}
  server.handler = (req, res) => {
    socketOf[req.url] = req.socket
    arrived.push(() => answer(req, res))
    if (arrived.length < 3) return
    arrived[0]()
    arrived[1]()
    setTimeout(arrived[2], 400)
  }
  const [a, b, c] = await Promise.all(['/a', '/b', '/c'].map((p) => undici.request(server.url(p))))
  await Promise.all([a, b, c].map((res) => res.body.text()))
  t.equal(server.counts.connections, 3)
  // The server closes the socket of /a: idle ~400 ms, so sockets idle longer
  // than 3/4 of that (the /b one) go now, the /c one (just idle) later.
  socketOf['/a'].destroy()
  await eventually(() => handle.http.stats().socketsRetired === 2 && server.counts.open === 0)
  const stats = handle.http.stats()
  t.equal(stats.idleClosesLearned, 1)
  t.equal(stats.socketsRetired, 2, 'the other two sockets were closed by us')
})

t.test('a POST that the server read and then reset is not sent again', async (t) => {
  const { server, handle } = await setup(t)
  const posts = new Map()
  server.handler = (req, res) => {
    const s = track(req)
    if (req.method === 'POST' && s.served === 2) {
      const key = req.headers['idempotency-key'] ?? 'none'
      posts.set(key, (posts.get(key) ?? 0) + 1)
      req.resume()
      req.on('end', () => s.destroy())
      return
    }
    answer(req, res)
  }
  await warm(server.url('/warm'))
  const err = await undici.request(server.url('/order'), { method: 'POST', body: 'buy one' }).catch((err) => err)
  t.match(err, { code: /^(UND_ERR_SOCKET|ECONNRESET)$/ }, 'the caller gets the error')
  t.equal(posts.get('none'), 1, 'the server saw the POST once')
  t.equal(handle.http.stats().retries.staleSocket, 0)

  await warm(server.url('/warm'))
  const keyed = await undici.request(server.url('/order'), { method: 'POST', body: 'buy two', headers: { 'Idempotency-Key': 'k1' } })
  t.equal(await keyed.body.text(), 'ok', 'with an Idempotency-Key it may be sent again')
  t.equal(posts.get('k1'), 1, 'and the server saw it reset once, then answered it')
  t.equal(handle.http.stats().retries.staleSocket, 1)
})

t.test('a GET whose socket fails on its first request, or after the response began, is not sent again', async (t) => {
  const { server, handle } = await setup(t)
  server.handler = (req, res) => {
    const s = track(req)
    if (req.url === '/fresh') return s.destroy()
    if (req.url === '/partial') return s.end('HTTP/1.1 200 OK\r\nContent-Le')
    answer(req, res)
  }
  // No idle close raced it: the server took the request and went away.
  const fresh = await undici.request(server.url('/fresh')).catch((err) => err)
  t.match(fresh, { code: /^(UND_ERR_SOCKET|ECONNRESET)$/ }, 'a fresh socket: the caller gets the error')
  t.equal(server.counts.requests, 1, 'the server saw it once')

  // A reused socket, but the server had begun to answer: it ran the request.
  await warm(server.url('/warm'))
  const partial = await undici.request(server.url('/partial')).catch((err) => err)
  t.match(partial, { code: /^(UND_ERR_SOCKET|ECONNRESET)$/ }, 'part of a response: the caller gets the error')
  t.equal(server.counts.connections, 2, 'it was written on the warm socket')
  t.equal(server.counts.requests, 3, 'the server saw it once')
  t.equal(handle.http.stats().retries.staleSocket, 0)
})

t.test('fetch bodies are buffered up to maxReplayBodyBytes so that they can be replayed', async (t) => {
  const { server, handle } = await setup(t, { maxReplayBodyBytes: 16 })
  const bodies = []
  server.handler = (req, res) => {
    const s = track(req)
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString())
      if (req.method === 'PUT' && s.served > 1) return s.destroy()
      res.end('ok')
    })
  }
  const put = async (body) => {
    await warm(server.url('/warm'))
    return fetch(server.url('/doc'), { method: 'PUT', body, duplex: 'half' })
  }
  const small = await put('small body')
  t.equal(await small.text(), 'ok', 'a small PUT body was replayed')
  t.same(bodies.slice(-2), ['small body', 'small body'])
  const big = await put('a body longer than sixteen bytes').catch((err) => err)
  t.match(big, { cause: { code: /^(UND_ERR_SOCKET|ECONNRESET)$/ } }, 'a bigger one is not kept, so not replayed')
  t.equal(handle.http.stats().retries.staleSocket, 1)
})

t.test('a body longer than its content-length is never read past it', async (t) => {
  const { server } = await setup(t)
  let pulled = 0
  let ended = false
  // Bounded, but far more than maxReplayBodyBytes: 4,096 chunks of 64 KiB.
  async function * endless () {
    try {
      for (; pulled < 4096; pulled++) yield Buffer.alloc(65_536, 120)
    } finally {
      ended = true
    }
  }
  const err = await undici.request(server.url('/upload'), {
    method: 'POST', body: endless(), headers: { 'content-length': '10' },
  }).catch((err) => err)
  t.equal(err.code, 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH', 'as a plain Agent fails it')
  t.ok(pulled <= 1, `${pulled + 1} chunk(s) read, not the whole body`)
  t.ok(ended, 'the body was ended')
  t.equal(server.counts.requests, 0)
})

t.test('with statusRetries, 503 with Retry-After is honoured for a GET, never for a POST', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true })
  let calls = 0
  let retryAfter = '1'
  server.handler = (req, res) => {
    calls++
    if (calls % 2 === 1) return answer(req, res, 503, { 'retry-after': retryAfter }, 'busy')
    answer(req, res)
  }
  const retries = listen(t, 'retry')
  const get = await fetch(server.url('/get'))
  t.equal(get.status, 200)
  t.equal(await get.text(), 'ok')
  t.equal(calls, 2)
  t.match(retries, [{ reason: 'status', statusCode: 503, delayMs: 1000 }])

  // An HTTP date (whole seconds): 2-3 s ahead, well past any backoff's wait.
  retryAfter = new Date(Date.now() + 3000).toUTCString()
  const dated = await undici.request(server.url('/date'))
  t.equal(dated.statusCode, 200)
  await dated.body.dump()
  t.ok(retries[1].delayMs > 1000 && retries[1].delayMs <= 3000, `waited ${retries[1].delayMs} ms for an HTTP date`)
  t.equal(calls, 4)

  const post = await fetch(server.url('/post'), { method: 'POST', body: 'x' })
  t.equal(post.status, 503, 'a POST gets the 503')
  t.equal(await post.text(), 'busy')
  t.equal(calls, 5)
  t.equal(handle.http.stats().retries.status, 2)
})

t.test('a Retry-After longer than maxRetryDelayMs returns the response; 429 without it backs off', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true, maxRetryDelayMs: 500, retryBaseDelayMs: 10 })
  let calls = 0
  const seen = {}
  server.handler = (req, res) => {
    calls++
    seen[req.url] = (seen[req.url] ?? 0) + 1
    if (req.url === '/long') return answer(req, res, 503, { 'retry-after': '60' }, 'later')
    if (req.url === '/garbage' && seen[req.url] === 1) return answer(req, res, 502, { 'retry-after': 'soon' })
    if (req.url === '/throttled' && seen[req.url] === 1) return answer(req, res, 429)
    answer(req, res)
  }
  const long = await undici.request(server.url('/long'))
  t.equal(long.statusCode, 503)
  t.equal(await long.body.text(), 'later')
  t.equal(calls, 1)
  t.equal((await undici.request(server.url('/garbage'))).statusCode, 200, 'an unreadable Retry-After is a backoff')
  t.equal((await undici.request(server.url('/throttled'))).statusCode, 200)
  t.equal(calls, 5)
  t.equal(handle.http.stats().retries.status, 2)
})

t.test('an idempotent request is retried on connect errors, a POST is not', async (t) => {
  const dns = await testDns(t)
  const handle = ioHygiene.install({ dns: dns.options, http: { retryBaseDelayMs: 5 } })
  const gone = await startHttpServer()
  await gone.close() // nothing listens on its port now
  const url = `http://api.test:${gone.port}/`
  const retries = listen(t, 'retry')
  const err = await fetch(url).catch((err) => err)
  t.match(err, { cause: { code: 'ECONNREFUSED' } })
  t.equal(handle.http.stats().retries.connect, 2, 'maxRetries times')
  t.match(retries, [{ reason: 'connect', attempt: 1 }, { reason: 'connect', attempt: 2 }])
  const post = await fetch(url, { method: 'POST', body: 'x' }).catch((err) => err)
  t.match(post, { cause: { code: 'ECONNREFUSED' } })
  t.equal(handle.http.stats().retries.connect, 2, 'the POST was not retried')
})

t.test('the retry budget stops retries from multiplying an outage', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true, retryBudgetMinPerSecond: 0, retryBudgetPercent: 10, retryBaseDelayMs: 1 })
  server.handler = (req, res) => answer(req, res, 503)
  const refused = listen(t, 'budget')
  for (let i = 0; i < 20; i++) {
    const res = await undici.request(server.url(`/${i}`))
    t.equal(res.statusCode, 503)
    await res.body.dump()
  }
  const stats = handle.http.stats()
  t.ok(stats.retries.status <= 2, `${stats.retries.status} retries for 20 requests`)
  t.ok(stats.retries.status >= 1, 'the budget did allow some')
  t.equal(server.counts.requests, 20 + stats.retries.status)
  t.ok(stats.budgetRefusals >= 18, `${stats.budgetRefusals} retries refused`)
  t.match(refused[0], { reason: 'status', method: 'GET' })
})

t.test('an abort during the backoff ends the request at once', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true })
  server.handler = (req, res) => answer(req, res, 503, { 'retry-after': '5' })
  const controller = new AbortController()
  listen(t, 'retry', () => setImmediate(() => controller.abort()))
  const err = await fetch(server.url('/'), { signal: controller.signal }).catch((err) => err)
  t.equal(err.name, 'AbortError')
  t.equal(handle.http.stats().retries.status, 1, 'it was waiting to retry')

  const viaRequest = new AbortController()
  listen(t, 'retry', () => setImmediate(() => viaRequest.abort()))
  const err2 = await undici.request(server.url('/'), { signal: viaRequest.signal }).catch((err) => err)
  t.equal(err2.name, 'AbortError')
  t.equal(server.counts.requests, 2, 'neither was sent again')
})

// The caller awaits a retry's wait: a script whose only work left is that
// request exits when its promise settles, never before.
function runBackoffFixture (mode, url, env = {}) {
  const fixture = path.join(__dirname, 'fixtures', 'http-backoff-exit.js')
  return new Promise((resolve) => {
    execFile(process.execPath, [fixture, mode, url], { timeout: 60_000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      resolve({ code: err?.code ?? 0, stdout: stdout.trim(), stderr })
    })
  })
}

t.test('a retry backoff after a refused connection keeps the process up until the request fails', async (t) => {
  const gone = await startHttpServer()
  await gone.close()
  const r = await runBackoffFixture('refused', gone.url('/'))
  t.equal(r.stdout, 'failed ECONNREFUSED after 2 retries (refused)', r.stderr)
  t.equal(r.code, 1, 'the exit code the script set when its promise rejected')
})

t.test('a Retry-After wait (status retries on from the environment) keeps the process up until the retried request answers', async (t) => {
  const server = await startHttpServer()
  t.teardown(() => server.close())
  server.handler = (req, res) => server.counts.requests === 1
    ? answer(req, res, 503, { 'retry-after': '1' })
    : answer(req, res, 200)
  const r = await runBackoffFixture('retry-after', server.url('/'), { IO_HYGIENE_HTTP_STATUS_RETRIES: '1' })
  t.equal(r.stdout, 'settled 200 after 1 retries', r.stderr)
  t.equal(r.code, 0)
  t.equal(server.counts.requests, 2)
})

t.test('a response that says Connection: close teaches nothing when its socket closes', async (t) => {
  const { server, handle } = await setup(t)
  server.handler = (req, res) => answer(req, res, 200, { connection: 'close' })
  const res = await undici.request(server.url('/'))
  t.equal(await res.body.text(), 'ok')
  await eventually(() => server.counts.open === 0)
  await new Promise(setImmediate)
  t.equal(handle.http.stats().idleClosesLearned, 0)
})

t.test('an abort made before the connection failed is honoured when the retry would start', async (t) => {
  const dns = await testDns(t)
  const handle = ioHygiene.install({ dns: dns.options, http: { retryBaseDelayMs: 5 } })
  const gone = await startHttpServer()
  await gone.close()
  // A handler that aborts as soon as it is started, as undici 7's request()
  // did with an abort that came while connecting (undici 8 ends the attempt
  // at once): the first start it sees is the retry's.
  const err = await new Promise((resolve) => {
    handle.http.dispatcher.dispatch({ origin: `http://api.test:${gone.port}`, path: '/', method: 'GET' }, {
      onRequestStart (controller) { controller.abort(new Error('aborted by the caller')) },
      onResponseStart () {},
      onResponseData () {},
      onResponseEnd () { resolve(null) },
      onResponseError (controller, err) { resolve(err) },
    })
  })
  t.match(err, { message: 'aborted by the caller' })
  t.equal(handle.http.stats().retries.connect, 1, 'it got as far as the first retry, and no further')
})
