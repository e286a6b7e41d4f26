'use strict'

// The application's own dispatcher (a proxy for egress, client certificates
// for mTLS) is built on, never dropped: set before install(), io-hygiene's
// retries and deadlines are composed onto it; set after, it stays and
// io-hygiene says it is not global. Real proxy, real TLS, on loopback.
const t = require('tap')
const https = require('node:https')
const path = require('node:path')
const { execFile } = require('node:child_process')
const undici = require('undici')
const ioHygiene = require('..')
const { startHttpServer } = require('./helpers/http-server')
const { startHttpProxy } = require('./helpers/http-proxy')
const { makeCertificates } = require('./helpers/mtls')
const { withWarnings } = require('./helpers/with-warnings')

const original = undici.getGlobalDispatcher()
t.afterEach(() => {
  ioHygiene.uninstall()
  undici.setGlobalDispatcher(original)
})

async function servers (t) {
  const server = await startHttpServer()
  const proxy = await startHttpProxy()
  t.teardown(() => Promise.all([server.close(), proxy.close()]))
  return { server, proxy }
}

t.test('a ProxyAgent set before install(): requests go through the proxy and through our retries', async (t) => {
  const { server, proxy } = await servers(t)
  const theirs = new undici.ProxyAgent(proxy.url)
  t.teardown(() => theirs.close())
  undici.setGlobalDispatcher(theirs)
  const handle = ioHygiene.install({ dns: false, http: { statusRetries: true } })
  let calls = 0
  server.handler = (req, res) => {
    req.resume()
    res.writeHead(++calls === 1 ? 503 : 200).end('ok')
  }
  t.equal(await (await fetch(server.url('/fetch'))).text(), 'ok', 'a 503, then a retry')
  t.equal(await (await undici.request(server.url('/request'))).body.text(), 'ok')
  t.same(proxy.seen, [`GET ${server.url('/fetch')}`, `GET ${server.url('/fetch')}`, `GET ${server.url('/request')}`], 'every attempt went through the proxy')
  t.ok(undici.getGlobalDispatcher() instanceof undici.ProxyAgent, 'still a ProxyAgent to whoever asks')
  t.match(handle.http.stats(), {
    requests: 2,
    retries: { status: 1 },
    composed: true,
    global: true,
    connectionsOpened: null,
    idleClosesLearned: null,
    socketsRetired: null,
    timeouts: { queue: null },
  }, 'what our interceptor cannot see is null, not 0')
  t.equal(handle.http.dispatcher, undici.getGlobalDispatcher())

  t.equal(ioHygiene.uninstall(), true)
  t.equal(undici.getGlobalDispatcher(), theirs, 'theirs is back, not closed')
  t.equal(await (await undici.request(server.url('/after'))).body.text(), 'ok')
  t.equal(proxy.seen.length, 4)
})

t.test('a tunnelling ProxyAgent: CONNECT through the proxy, and a deadline of ours on top', async (t) => {
  const { server, proxy } = await servers(t)
  const theirs = new undici.ProxyAgent({ uri: proxy.url, proxyTunnel: true })
  t.teardown(() => theirs.close())
  undici.setGlobalDispatcher(theirs)
  const handle = ioHygiene.install({ dns: false, http: { requestTimeoutMs: 200 } })
  t.equal(await (await fetch(server.url('/'))).text(), 'ok')
  t.same(proxy.seen, [`CONNECT localhost:${server.port}`])
  server.handler = () => {} // never answers
  const err = await undici.request(server.url('/hung')).catch((err) => err)
  t.equal(err.code, 'UND_ERR_HEADERS_TIMEOUT')
  t.match(handle.http.stats(), { timeouts: { deadline: 1 }, composed: true })
})

t.test('a ProxyAgent set after install() stays the global dispatcher; ours says it is not', async (t) => {
  const { server, proxy } = await servers(t)
  const handle = ioHygiene.install({ dns: false })
  const theirs = new undici.ProxyAgent(proxy.url)
  t.teardown(() => theirs.close())
  undici.setGlobalDispatcher(theirs)
  t.equal(await (await fetch(server.url('/'))).text(), 'ok')
  t.same(proxy.seen, [`GET ${server.url('/')}`])
  t.equal(handle.http.stats().global, false)
  t.equal(ioHygiene.uninstall(), false, 'not ours to undo')
  t.equal(undici.getGlobalDispatcher(), theirs)
})

// A class named Agent, not undici's, that counts what it dispatches; with
// undici's private symbols of the given descriptions, if any.
function ownAgent (symbols = []) {
  return class Agent {
    dispatched = 0

    constructor () {
      for (const description of symbols) this[Symbol(description)] = {}
    }

    dispatch (opts, handler) {
      this.dispatched++
      return original.dispatch(opts, handler)
    }
  }
}

t.test('undici\'s default Agent is replaced by ours; an Agent with anything of the application\'s is built on', async (t) => {
  const { server } = await servers(t)
  undici.setGlobalDispatcher(new undici.Agent())
  let handle = ioHygiene.install({ dns: false })
  await (await fetch(server.url('/'))).text()
  t.match(handle.http.stats(), { composed: false, connectionsOpened: 1 }, 'a default Agent carries nothing: ours takes its place')
  ioHygiene.uninstall()

  const kinds = {
    'options of its own': () => new undici.Agent({ connections: 3 }),
    'interceptors composed onto it': () => new undici.Agent().compose((dispatch) => (opts, handler) => dispatch(opts, handler)),
    'a listener': () => new undici.Agent().on('connect', () => {}),
    'a subclass': () => new (class MyAgent extends undici.Agent {})(),
    'an object with dispatch()': () => ({ dispatch: (opts, handler) => original.dispatch(opts, handler) }),
    'a class named Agent that needs its options': () => new (class Agent {
      constructor (options) {
        this.inner = options.inner
      }

      dispatch (opts, handler) { return this.inner.dispatch(opts, handler) }
    })({ inner: original }),
    // Made with no arguments, as undici's own is: only undici's private
    // options and factory tell a default Agent apart.
    'a class named Agent of its own': () => new (ownAgent())(),
    'a class named Agent with an options symbol and no factory': () => new (ownAgent(['options']))(),
  }
  for (const [kind, make] of Object.entries(kinds)) {
    const theirs = make()
    undici.setGlobalDispatcher(theirs)
    handle = ioHygiene.install({ dns: false })
    t.equal(await (await fetch(server.url('/'))).text(), 'ok', kind)
    t.match(handle.http.stats(), { requests: 1, composed: true, global: true }, `${kind}: built on`)
    if (theirs.dispatched !== undefined) t.equal(theirs.dispatched, 1, `${kind}: the request went through it`)
    t.equal(ioHygiene.uninstall(), true)
    t.equal(undici.getGlobalDispatcher(), theirs, `${kind}: put back`)
  }
})

t.test('a dispatcher of undici 6 alone, in the slot Node 22\'s fetch reads, is left in place and said so', async (t) => {
  const fixture = path.join(__dirname, 'fixtures', 'http-legacy-slot.js')
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, [fixture], { env: withWarnings() }, (err, stdout, stderr) => err ? reject(new Error(stderr)) : resolve(JSON.parse(stdout)))
  })
  t.same(out, { dispatcher: null, global: false, composed: false, restored: false, theirsStays: true, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] })
})

t.test('on an application\'s dispatcher a socket error is never retried: whether the server saw the request is unknown', async (t) => {
  const { server } = await servers(t)
  const theirs = new undici.Agent({ connections: 4 })
  t.teardown(() => theirs.close())
  undici.setGlobalDispatcher(theirs)
  const handle = ioHygiene.install({ dns: false })
  const seen = []
  const drop = [true, false, true, false] // per request the server reads, in turn
  server.handler = (req, res) => {
    seen.push(req.method)
    if (drop[seen.length - 1]) return req.socket.destroy()
    req.resume()
    res.end('ok')
  }
  const get = await undici.request(server.url('/')).catch((err) => err)
  t.equal(get.code, 'UND_ERR_SOCKET', 'a GET: the server read it, so the caller gets the error')
  t.equal(await (await undici.request(server.url('/'))).body.text(), 'ok')
  const keyed = await undici.request(server.url('/'), { method: 'POST', body: 'x', headers: new Map([['Idempotency-Key', 'k']]) }).catch((err) => err)
  t.equal(keyed.code, 'UND_ERR_SOCKET', 'a POST with an Idempotency-Key: not sent twice either')
  t.same(seen, ['GET', 'GET', 'POST'], 'the server saw each request once')
  t.equal(handle.http.stats().retries.staleSocket, 0)
})

t.test('an Agent with client certificates (mTLS), set before install() and after', async (t) => {
  const certs = makeCertificates(t)
  const server = https.createServer({ cert: certs.serverCert, key: certs.serverKey, ca: certs.ca, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    res.end(req.socket.getPeerCertificate().subject.CN)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => {
    server.closeAllConnections()
    server.close(resolve)
  }))
  const url = `https://localhost:${server.address().port}/`
  const mtls = () => new undici.Agent({ connect: { ca: certs.ca, cert: certs.clientCert, key: certs.clientKey } })

  for (const order of ['before', 'after']) {
    const theirs = mtls()
    if (order === 'before') undici.setGlobalDispatcher(theirs)
    const handle = ioHygiene.install({ dns: false })
    if (order === 'after') undici.setGlobalDispatcher(theirs)
    t.equal(await (await fetch(url)).text(), 'io-hygiene client', `${order}: the client certificate was sent`)
    t.equal(await (await undici.request(url)).body.text(), 'io-hygiene client')
    t.match(handle.http.stats(), order === 'before' ? { requests: 2, composed: true, global: true } : { requests: 0, global: false })
    ioHygiene.uninstall()
    t.equal(undici.getGlobalDispatcher(), theirs, `${order}: theirs is the global dispatcher after uninstall()`)
    undici.setGlobalDispatcher(original)
    await theirs.close()
  }
})

t.test('EnvHttpProxyAgent with HTTP_PROXY and NO_PROXY, set before install() and after', async (t) => {
  const { server, proxy } = await servers(t)
  const fixture = path.join(__dirname, 'fixtures', 'http-env-proxy.js')
  const run = (order) => new Promise((resolve, reject) => {
    const env = withWarnings({ ...process.env, HTTP_PROXY: proxy.url, NO_PROXY: '127.0.0.1' })
    execFile(process.execPath, [fixture, order, server.url('/proxied'), server.url('/direct', '127.0.0.1')], { env }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message} ${stderr}`))
      resolve(JSON.parse(stdout))
    })
  })
  t.same(await run('before'), {
    proxied: 'ok', direct: 'ok', requests: 2, composed: true, global: true, restored: true, theirsBack: true, warnings: [],
  }, 'built on: both requests counted, theirs back after uninstall()')
  t.same(proxy.seen, [`GET ${server.url('/proxied')}`], 'NO_PROXY was honoured')
  t.same(await run('after'), {
    proxied: 'ok', direct: 'ok', requests: 0, composed: false, global: false, restored: false, theirsBack: true, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'],
  }, 'left in place, and said so')
  t.equal(proxy.seen.length, 2)
})
