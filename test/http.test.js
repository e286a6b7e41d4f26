'use strict'

// install({ http }): one undici Agent as the global dispatcher, reached by
// Node's global fetch (undici 6 on Node 20, 7 on Node 24), undici.fetch and
// undici.request, with the dns cache underneath.
const t = require('tap')
const undici = require('undici')
const ioHygiene = require('..')
const { optionsFromEnv } = require('../lib/env')
const { modules } = require('../lib/install')
const { spec } = require('../lib/http/options')
const { installWithServer: setup } = require('./helpers/http-server')

t.afterEach(() => ioHygiene.uninstall())

t.test('global fetch, undici.fetch and undici.request all go through our dispatcher and the dns cache', async (t) => {
  const before = undici.getGlobalDispatcher()
  const { server, handle, dns } = await setup(t)
  t.equal(undici.getGlobalDispatcher(), handle.http.dispatcher, 'ours is the global dispatcher')
  t.not(handle.http.dispatcher, before)

  const viaFetch = await fetch(server.url('/fetch'))
  t.equal(await viaFetch.text(), 'ok')
  const viaUndiciFetch = await undici.fetch(server.url('/undici-fetch'))
  t.equal(await viaUndiciFetch.text(), 'ok')
  const viaRequest = await undici.request(server.url('/request'))
  t.equal(await viaRequest.body.text(), 'ok')
  const posted = await fetch(server.url('/post'), { method: 'POST', body: 'hello' })
  t.equal(posted.status, 200)
  await posted.arrayBuffer()

  t.equal(server.counts.requests, 4)
  const stats = handle.http.stats()
  t.equal(stats.requests, 4, 'every request was counted by our interceptor')
  t.equal(stats.connectionsOpened, server.counts.connections, 'every connection was opened by our agent')
  const dnsStats = handle.dns.stats()
  t.equal(dnsStats.hits + dnsStats.misses + dnsStats.coalesced, stats.connectionsOpened, 'one cache lookup per connection')
  t.equal(dnsStats.misses, 1, 'api.test, which only our DNS server knows, was resolved once')
  t.equal(dns.count('api.test', 'A'), 1, 'one query reached the DNS server')
})

t.test('uninstall() restores the previous dispatcher and closes ours; it leaves one set after ours', async (t) => {
  const before = undici.getGlobalDispatcher()
  const { server } = await setup(t)
  await (await fetch(server.url())).text()
  t.equal(server.counts.open, 1)
  const [socket] = server.sockets
  const closed = new Promise((resolve) => socket.once('close', resolve))
  t.equal(ioHygiene.uninstall(), true)
  t.equal(undici.getGlobalDispatcher(), before, 'the previous dispatcher is back')
  await closed
  t.pass('our idle socket was closed')

  ioHygiene.install({ dns: false })
  const other = new undici.Agent()
  t.teardown(() => other.close())
  undici.setGlobalDispatcher(other)
  t.equal(ioHygiene.uninstall(), false, 'someone set a dispatcher after ours: not ours to undo')
  t.equal(undici.getGlobalDispatcher(), other, 'theirs stays')
  undici.setGlobalDispatcher(before)
})

t.test('http: false leaves the dispatcher alone', async (t) => {
  const before = undici.getGlobalDispatcher()
  const handle = ioHygiene.install({ dns: false, http: false })
  t.equal(handle.http, null)
  t.equal(undici.getGlobalDispatcher(), before)
})

t.test('options are validated before anything is touched', async (t) => {
  const before = undici.getGlobalDispatcher()
  t.throws(() => ioHygiene.install({ http: { connection: 10 } }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' })
  t.throws(() => ioHygiene.install({ http: { connections: 0 } }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => ioHygiene.install({ http: { requestTimeoutMs: '5s' } }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install({ http: { learnIdleClose: 1 } }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install({ http: { retryBaseDelayMs: 500, maxRetryDelayMs: 100 } }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.equal(undici.getGlobalDispatcher(), before)
  const handle = ioHygiene.install({ dns: false, http: { requestTimeoutMs: 5000 } })
  t.type(handle.http.stats, 'function')
})

t.test('IO_HYGIENE_HTTP_* variables set every option', async (t) => {
  t.same(optionsFromEnv(modules, { IO_HYGIENE_HTTP: '0' }).http, false)
  t.same(optionsFromEnv(modules, {
    IO_HYGIENE_HTTP_CONNECTIONS: '16',
    IO_HYGIENE_HTTP_REQUEST_TIMEOUT_MS: '60000',
    IO_HYGIENE_HTTP_LEARN_IDLE_CLOSE: '0',
  }).http, { connections: 16, requestTimeoutMs: 60000, learnIdleClose: false })
  for (const key of Object.keys(spec)) t.ok(spec[key].check.expects, `${key} can come from the environment`)
})

t.test('the per-origin connection cap holds under a burst', async (t) => {
  const { server, handle } = await setup(t, { connections: 8 })
  let inFlight = 0
  let peak = 0
  server.handler = (req, res) => {
    inFlight++
    if (inFlight > peak) peak = inFlight
    req.resume()
    setImmediate(() => {
      inFlight--
      res.end('ok')
    })
  }
  const bodies = await Promise.all(Array.from({ length: 300 }, (_, i) =>
    fetch(server.url(`/${i}`)).then((res) => res.text())))
  t.equal(bodies.filter((b) => b === 'ok').length, 300)
  t.ok(server.counts.connections <= 8, `${server.counts.connections} connections at the server`)
  t.ok(server.counts.peakOpen <= 8, `at most ${server.counts.peakOpen} open at once`)
  t.ok(peak > 1, 'requests did run in parallel')
  t.equal(handle.http.stats().connectionsOpened, server.counts.connections)
})

t.test('an upgrade passes through untouched, and its socket is never retired as idle', async (t) => {
  const { server, handle } = await setup(t)
  server.server.on('upgrade', (req, socket) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n')
    socket.pipe(socket)
  })
  await (await undici.request(server.url('/warm'))).body.text()
  await new Promise(setImmediate) // its socket is idle again: the upgrade takes it
  const { socket } = await undici.upgrade(server.url('/echo'), { upgrade: 'echo' })
  t.teardown(() => socket.destroy())
  socket.write('ping')
  const [echo] = await Promise.all([new Promise((resolve) => socket.once('data', resolve))])
  t.equal(String(echo), 'ping')
  t.equal(server.counts.connections, 1, 'on the reused socket')
  t.equal(handle.http.stats().requests, 2)
})

t.test('an abort while the response is awaited ends the request', async (t) => {
  const { server, handle } = await setup(t)
  server.handler = () => {} // never answers
  const controller = new AbortController()
  server.server.once('request', () => controller.abort())
  const err = await fetch(server.url('/'), { signal: controller.signal }).catch((err) => err)
  t.equal(err.name, 'AbortError')
  const viaRequest = new AbortController()
  server.server.once('request', () => viaRequest.abort())
  const err2 = await undici.request(server.url('/'), { signal: viaRequest.signal }).catch((err) => err)
  t.equal(err2.name, 'AbortError')
  t.equal(handle.http.stats().retries.staleSocket + handle.http.stats().retries.connect, 0)
})

t.test('a large response flows with backpressure', async (t) => {
  const { server } = await setup(t)
  const chunk = Buffer.alloc(64 * 1024, 'x')
  server.handler = (req, res) => {
    let n = 0
    const write = () => {
      while (n < 160) {
        n++
        if (!res.write(chunk)) return res.once('drain', write)
      }
      res.end()
    }
    write()
  }
  const res = await undici.request(server.url('/big'))
  await new Promise(setImmediate) // let undici's buffer fill, so it pauses us
  let bytes = 0
  for await (const part of res.body) bytes += part.length
  t.equal(bytes, 160 * chunk.length)
  const viaFetch = await fetch(server.url('/big'))
  t.equal((await viaFetch.arrayBuffer()).byteLength, 160 * chunk.length)
})

t.test('a handler of undici\'s own API dispatched on ours sees one controller for the whole request', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true })
  let calls = 0
  server.handler = (req, res) => {
    req.resume()
    if (++calls === 1) return res.writeHead(503).end()
    res.writeHead(200, { 'x-attempt': String(calls) })
    res.write('o')
    res.addTrailers({ done: '1' })
    res.end('k')
  }
  const seen = await new Promise((resolve, reject) => {
    const seen = { starts: 0, body: '' }
    handle.http.dispatcher.dispatch({ origin: new URL(server.origin()), path: '/', method: 'GET' }, {
      onRequestStart (controller) {
        seen.starts++
        seen.controller = controller
        seen.aborted = controller.aborted
        seen.reason = controller.reason
      },
      onResponseStart (controller, statusCode, headers) {
        seen.statusCode = statusCode
        seen.rawHeaders = controller.rawHeaders.map(String)
        seen.paused = controller.paused
      },
      onResponseData (controller, chunk) { seen.body += chunk },
      onResponseEnd (controller) {
        seen.rawTrailers = controller.rawTrailers.map(String)
        resolve(seen)
      },
      onResponseError (controller, err) { reject(err) },
    })
  })
  t.equal(seen.starts, 1, 'one start for two attempts')
  t.equal(seen.statusCode, 200)
  t.equal(seen.body, 'ok')
  t.equal(seen.aborted, false)
  t.equal(seen.reason, null)
  t.equal(seen.paused, false)
  t.ok(seen.rawHeaders.includes('x-attempt') && seen.rawHeaders.includes('2'), 'the raw headers of the last attempt')
  t.same(seen.rawTrailers, ['done', '1'])
  seen.controller.abort(new Error('too late')) // after the end: nothing happens
  t.equal(seen.controller.aborted, true)
})

t.test('FormData and Blob bodies are sent; a Blob can be sent again', async (t) => {
  const { server } = await setup(t)
  const bodies = []
  server.handler = (req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString())
      res.end('ok')
    })
  }
  const form = new undici.FormData()
  form.append('a', 'form value')
  const viaForm = await undici.request(server.url('/form'), { method: 'POST', body: form })
  t.equal(await viaForm.body.text(), 'ok')
  t.match(bodies[0], /form value/)
  const viaBlob = await undici.request(server.url('/blob'), { method: 'PUT', body: new Blob(['blob value']) })
  t.equal(await viaBlob.body.text(), 'ok')
  t.equal(bodies[1], 'blob value')
})

t.test('with no global dispatcher set yet, undici is loaded and ours made on first use', async (t) => {
  const { execFile } = require('node:child_process')
  const fixture = require('node:path').join(__dirname, 'fixtures', 'http-lazy.js')
  const run = (mode) => new Promise((resolve, reject) => {
    execFile(process.execPath, [fixture, mode], (err, stdout) => err ? reject(err) : resolve(JSON.parse(stdout)))
  })
  t.same(await run('fetch'), {
    loadedAtInstall: false, body: 'ok', loadedAfterFetch: true, requests: 1, isGlobal: true, restored: true, previousBack: true,
  }, 'the first fetch made it, and went through it')
  t.same(await run('unused'), { loadedAtInstall: false, restored: true, slotEmpty: true }, 'never used: never loaded, and the slot is empty again')
  t.same(await run('replaced'), { loadedAtInstall: false, dispatcher: null, global: false, warning: 'IO_HYGIENE_HTTP_NOT_GLOBAL', restored: false, theirsStays: true }, 'someone set theirs first: said once, in a warning and in stats')
  const refused = { global: false, restored: false, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] }
  t.same(await run('read-only'), refused, 'a slot that cannot be written: said once')
  t.same(await run('require-undici'), { loadedAtInstall: false, isGlobal: true, body: 'ok', requests: 1, restored: true, previousBack: true }, 'require(\'undici\') made it')
  t.same(await run('handle'), { loadedAtInstall: false, loadedByHandle: true, isGlobal: true, restored: true }, 'handle.http.dispatcher makes it too')
})
