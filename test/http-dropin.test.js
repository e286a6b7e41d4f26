'use strict'

// Drop-in: the server sees exactly the requests the application made, when
// it made them, against real servers on 127.0.0.1.
const t = require('tap')
const { once } = require('node:events')
const undici = require('undici')
const ioHygiene = require('..')
const { installWithServer: setup } = require('./helpers/http-server')

t.afterEach(() => ioHygiene.uninstall())

const unavailable = (req, res) => {
  req.resume()
  req.on('end', () => res.writeHead(503, { 'content-type': 'text/plain' }).end('busy'))
}

t.test('a GET answered 503 reaches the server once by default, and the caller gets the 503 at once', async (t) => {
  const { server, handle } = await setup(t, { retryBaseDelayMs: 1 })
  server.handler = unavailable
  const res = await fetch(server.url('/fetch'))
  t.equal(res.status, 503)
  t.equal(await res.text(), 'busy')
  const viaRequest = await undici.request(server.url('/request'))
  t.equal(viaRequest.statusCode, 503)
  await viaRequest.body.dump()
  t.equal(server.counts.requests, 2, 'each request once')
  t.equal(handle.http.stats().retries.status, 0)
})

t.test('with statusRetries, a GET answered 503 reaches the server maxRetries + 1 times', async (t) => {
  const { server, handle } = await setup(t, { statusRetries: true, retryBaseDelayMs: 1, maxRetries: 3 })
  server.handler = unavailable
  const res = await fetch(server.url('/'))
  t.equal(res.status, 503, 'the last answer')
  await res.text()
  t.equal(server.counts.requests, 4)
  t.equal(handle.http.stats().retries.status, 3)
})

t.test('statusRetries is validated, and IO_HYGIENE_HTTP_STATUS_RETRIES sets it', async (t) => {
  t.throws(() => ioHygiene.install({ http: { statusRetries: 1 } }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install({ http: { statusRetry: true } }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /statusRetries/ })
  const { optionsFromEnv } = require('../lib/env')
  const modules = [{ name: 'http', spec: () => require('../lib/http/options').spec }]
  t.same(optionsFromEnv(modules, { IO_HYGIENE_HTTP_STATUS_RETRIES: '1' }), { http: { statusRetries: true } })
  t.throws(() => optionsFromEnv(modules, { IO_HYGIENE_HTTP_STATUS_RETRY: '1' }), { code: 'ERR_IO_HYGIENE_UNKNOWN_ENV', message: /IO_HYGIENE_HTTP_STATUS_RETRIES/ })
})

// A server that answers as soon as a request body's first chunk arrives, and
// ends its answer with the body it got once the body ends.
function answerEarly (server) {
  server.handler = (req, res) => {
    const chunks = []
    req.once('data', () => {
      res.writeHead(200)
      res.flushHeaders()
    })
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => res.end(Buffer.concat(chunks)))
  }
}

// Guards, not measures: a body held back hangs the request forever.
const guard = { timeout: 20_000 }

t.test('a small streamed body that sends its rest only after the response starts completes', guard, async (t) => {
  const { server } = await setup(t)
  answerEarly(server)
  let responded
  const response = new Promise((resolve) => { responded = resolve })
  async function * body () {
    yield 'first|'
    await response
    yield 'rest'
  }
  const res = await undici.request(server.url('/'), { method: 'POST', body: body(), headers: { 'content-length': '10' } })
  responded()
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'first|rest')

  // The same through fetch, with a ReadableStream.
  let pull = 0
  let fetched
  const started = new Promise((resolve) => { fetched = resolve })
  const stream = new ReadableStream({
    async pull (controller) {
      if (pull++ === 0) return controller.enqueue(new TextEncoder().encode('first|'))
      await started
      controller.enqueue(new TextEncoder().encode('rest'))
      controller.close()
    },
  })
  const viaFetch = await fetch(server.url('/'), { method: 'PUT', body: stream, duplex: 'half', headers: { 'content-length': '10' } })
  fetched()
  t.equal(await viaFetch.text(), 'first|rest')
})

t.test('the server gets a streamed body\'s first chunk before the body has ended', guard, async (t) => {
  const { server } = await setup(t)
  const arrived = []
  let onArrival = () => {}
  server.handler = (req, res) => {
    req.on('data', (chunk) => {
      arrived.push(chunk.toString())
      onArrival()
    })
    req.on('end', () => res.end(arrived.join('')))
  }
  const serverGot = () => new Promise((resolve) => { onArrival = resolve })
  // Each chunk waits for the server to have the one before: upload progress.
  async function * body () {
    for (const part of ['a', 'b', 'c', 'd']) {
      const got = serverGot()
      yield part
      await got
    }
  }
  for (const method of ['PUT', 'POST']) {
    arrived.length = 0
    const res = await undici.request(server.url('/'), { method, body: body(), headers: { 'content-length': '4' } })
    t.equal(await res.body.text(), 'abcd', method)
    t.same(arrived, ['a', 'b', 'c', 'd'], `${method}: four chunks, each before the next was made`)
  }
})

t.test('a streamed body that a stale socket interrupts is sent whole again from its copy', async (t) => {
  const { server, handle } = await setup(t)
  const bodies = []
  let served = 0
  server.handler = (req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    if (++served === 2) {
      // The second request, on the reused socket: the socket goes with its first chunk.
      req.once('data', () => req.socket.destroy())
      return
    }
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString())
      res.end('ok')
    })
  }
  await (await undici.request(server.url('/warm'))).body.text()
  await new Promise(setImmediate)
  let gave = 0
  async function * body () {
    for (const part of ['one|', 'two|', 'three']) {
      gave++
      yield part
      if (part === 'one|') await once(server.server, 'connection') // the retry's fresh socket
    }
  }
  const res = await undici.request(server.url('/doc'), { method: 'PUT', body: body(), headers: { 'content-length': '13' } })
  t.equal(await res.body.text(), 'ok')
  t.same(bodies, ['', 'one|two|three'], 'the retry carried the whole body')
  t.equal(gave, 3, 'the source was read once')
  t.equal(handle.http.stats().retries.staleSocket, 1)
})

const runFixture = (name, mode) => new Promise((resolve, reject) => {
  const fixture = require('node:path').join(__dirname, 'fixtures', name)
  require('node:child_process').execFile(process.execPath, [fixture, mode], (err, stdout, stderr) => {
    if (err) return reject(new Error(`${mode}: ${err.message} ${stderr}`))
    resolve(JSON.parse(stdout))
  })
})

t.test('uninstall() leaves an empty global dispatcher slot empty again', async (t) => {
  t.same(await runFixture('http-empty-slot.js', 'handle'), {
    before: [false, false], answer: 'ok', global: true, uninstalled: true, after: [false, false], oursStays: false,
  }, 'only our handle used it: both slots absent, as before install()')
  // What Node's fetch sets in empty slots without io-hygiene: both, but
  // the legacy one only on Node 22 (undici 6).
  const { after } = await runFixture('http-empty-slot.js', 'plain')
  t.same(await runFixture('http-empty-slot.js', 'fetch'), {
    before: [false, false], answer: 'ok', global: true, uninstalled: true, after, oursStays: false, fetchAfter: 'ok',
  }, 'Node\'s fetch read it while ours was there, and set no default of its own: undici\'s default is put back where it would have set it')
  t.same(await runFixture('http-empty-slot.js', 'theirs-after'), {
    before: [false, false], answer: 'ok', global: false, uninstalled: false, after: [true, true], oursStays: false, theirsStays: true,
  }, 'undici set its own over ours: not ours to undo')
})

// Records each request's body at the server; answers `statuses` in turn, then 200.
function recordBodies (server, statuses = []) {
  const bodies = []
  server.handler = (req, res) => {
    const chunks = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString())
      res.writeHead(statuses[bodies.length - 1] ?? 200).end()
    })
  }
  return bodies
}

async function * parts (...list) {
  for (const part of list) yield part
}

t.test('on an application\'s dispatcher, with statusRetries, a streamed PUT answered 503 is sent whole again', async (t) => {
  const { startHttpServer } = require('./helpers/http-server')
  const server = await startHttpServer()
  t.teardown(() => server.close())
  const original = undici.getGlobalDispatcher()
  const theirs = new undici.Agent({ connections: 4 })
  undici.setGlobalDispatcher(theirs)
  t.teardown(async () => {
    ioHygiene.uninstall()
    undici.setGlobalDispatcher(original)
    await theirs.close()
  })
  const handle = ioHygiene.install({ dns: false, http: { statusRetries: true, retryBaseDelayMs: 1 } })
  t.equal(handle.http.stats().composed, true)
  const bodies = recordBodies(server, [503])
  const res = await undici.request(server.url('/'), { method: 'PUT', body: parts('one|', 'two'), headers: { 'content-length': '7' } })
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.same(bodies, ['one|two', 'one|two'])
  // A POST is never sent again for a status: its body is not copied.
  const post = await undici.request(server.url('/'), { method: 'POST', body: parts('x'), headers: { 'content-length': '1' } })
  t.equal(post.statusCode, 200)
  await post.body.dump()
  t.same(bodies, ['one|two', 'one|two', 'x'])
})

t.test('with maxRetries: 0, a streamed body goes through untouched and is sent once', async (t) => {
  const { server, handle } = await setup(t, { maxRetries: 0, statusRetries: true })
  const bodies = recordBodies(server, [503])
  const res = await undici.request(server.url('/'), { method: 'PUT', body: parts('a', 'b'), headers: { 'content-length': '2' } })
  t.equal(res.statusCode, 503)
  await res.body.dump()
  t.same(bodies, ['ab'])
  t.equal(handle.http.stats().retries.status, 0)
})

t.test('a FormData of another copy of undici is sent as that copy sends it through its own Agent', async (t) => {
  const undici7 = require('undici7')
  const { server } = await setup(t)
  let received = null
  server.handler = (req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      received = { type: req.headers['content-type'], body: Buffer.concat(chunks).toString() }
      res.end('ok')
    })
  }
  const form = new undici7.FormData()
  form.append('name', 'value')
  form.append('file', new Blob(['file content']), 'a.txt')
  const own = new undici.FormData()
  for (const [name, value] of form) own.append(name, value)
  for (const [client, body] of [[undici7, form], [undici, own]]) {
    const res = await client.request(server.url('/form'), { method: 'POST', body })
    t.equal(res.statusCode, 200)
    await res.body.text()
    t.match(received.type, /^multipart\/form-data; boundary=/)
    t.match(received.body, /name="name"\r\n\r\nvalue\r\n/, 'the field')
    t.match(received.body, /name="file"; filename="a.txt"\r\nContent-Type: application\/octet-stream\r\n\r\nfile content\r\n/, 'the file')
  }
})

t.test('an interceptor of the application may assign the controller\'s raw headers, as on undici\'s own controller', async (t) => {
  const { server } = await setup(t)
  server.handler = (req, res) => res.writeHead(200, { 'x-a': '1' }).end('ok')
  // What undici's decompress interceptor does in some releases.
  const assigning = (dispatch) => (opts, handler) => dispatch(opts, {
    ...handler,
    onRequestStart: (controller, context) => handler.onRequestStart?.(controller, context),
    onResponseStart (controller, statusCode, headers, statusMessage) {
      controller.rawHeaders = controller.rawHeaders.filter((_, i, all) => String(all[i - (i % 2)]).toLowerCase() !== 'x-a')
      return handler.onResponseStart?.(controller, statusCode, headers, statusMessage)
    },
    onResponseData: (controller, chunk) => handler.onResponseData?.(controller, chunk),
    onResponseEnd (controller, trailers) {
      controller.rawTrailers = []
      return handler.onResponseEnd?.(controller, trailers)
    },
    onResponseError: (controller, error) => handler.onResponseError?.(controller, error),
  })
  const res = await undici.request(server.url('/'), { dispatcher: undici.getGlobalDispatcher().compose(assigning) })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'ok')
})

t.test('an aborted request destroys its small streamed body with the abort, as a plain Agent does', guard, async (t) => {
  const { server, handle } = await setup(t)
  // The server reads the start and never answers: the caller aborts.
  let arrived = () => {}
  server.handler = (req) => req.once('data', () => arrived())
  const { Readable } = require('node:stream')
  const { finished } = require('node:stream/promises')
  async function run (dispatcher) {
    let pushed = 0
    const body = new Readable({ read () { if (pushed++ === 0) this.push('start') } })
    const controller = new AbortController()
    const got = new Promise((resolve) => { arrived = resolve })
    const request = undici.request(server.url('/'), {
      dispatcher, method: 'PUT', body, headers: { 'content-length': '10' }, signal: controller.signal,
    })
    await got
    controller.abort()
    await t.rejects(request, { name: 'AbortError' })
    // What a pipeline() feeding the body would be told.
    return finished(body).then(() => 'finished', (err) => err.name)
  }
  const plain = new undici.Agent()
  t.teardown(() => plain.close())
  t.equal(await run(plain), 'AbortError', 'plain undici destroys it with the abort')
  t.equal(await run(handle.http.dispatcher), 'AbortError', 'and so does io-hygiene')
})

t.test('a small streamed body that fails before its request is written fails the request, not the process, as with a plain Agent', guard, async (t) => {
  const { server, handle } = await setup(t)
  server.handler = (req, res) => {
    req.resume()
    req.on('end', () => res.end('ok'))
  }
  const { Readable } = require('node:stream')
  async function run (dispatcher) {
    const body = new Readable({ read () {} })
    const request = undici.request(server.url('/'), { dispatcher, method: 'PUT', body, headers: { 'content-length': '4' } })
    // While the request waits for its connection: nobody reads the body yet.
    body.destroy(new Error('the source failed'))
    return request.then((res) => res.body.text(), (err) => err.message)
  }
  const plain = new undici.Agent()
  t.teardown(() => plain.close())
  t.equal(await run(plain), 'the source failed', 'plain undici rejects the request')
  t.equal(await run(handle.http.dispatcher), 'the source failed', 'and so does io-hygiene')
})
