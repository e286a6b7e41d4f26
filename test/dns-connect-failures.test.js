'use strict'

// A redeployed upstream: DNS now answers a new address, and the old one
// refuses connections. A failed connection to an address the cache gave out
// makes the cache resolve the name again before it hands the address out
// again, so the next connection (undici's connect retry, or the
// application's next request) goes to the new address instead of the dead
// one until the TTL runs out. Real DNS server, real HTTP servers on
// 127.0.0.2 (before) and 127.0.0.3 (after), on one port.
const t = require('tap')
const http = require('node:http')
const net = require('node:net')
const path = require('node:path')
const { spawn } = require('node:child_process')
const ioHygiene = require('..')
const { startDnsServer } = require('./helpers/dns-server')
const { startHttpServer } = require('./helpers/http-server')
const { cacheWithServer } = require('./helpers/dns-cache')

t.afterEach(() => ioHygiene.uninstall())

const OLD = '127.0.0.2'
const NEW = '127.0.0.3'
const NAME = 'svc.test'
const HOUR_S = 3600

async function dnsServer (t) {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set(NAME, { a: [OLD], ttl: HOUR_S })
  return server
}

// The endpoint before and after the move: one port, two addresses, each
// answering with its own name and closing the connection after each
// response (no keep-alive socket to the old address outlives its server).
async function endpoints (t) {
  const named = (body) => (req, res) => {
    req.resume()
    req.on('end', () => res.writeHead(200, { connection: 'close' }).end(body))
  }
  const before = await startHttpServer({ address: OLD })
  before.handler = named('before')
  t.teardown(() => before.close())
  const after = await startHttpServer({ address: NEW, port: before.port })
  after.handler = named('after')
  t.teardown(() => after.close())
  return { before, after, url: `http://${NAME}:${before.port}/` }
}

// A port on OLD where nothing listens.
async function deadPort () {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, OLD, resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

function get (url) {
  return new Promise((resolve, reject) => {
    http.get(url, { agent: false }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve(body))
    }).on('error', reject)
  })
}

function connect (port, host = NAME) {
  return new Promise((resolve) => {
    const socket = net.connect(port, host)
    socket.on('connect', () => {
      socket.destroy()
      resolve({ connected: true })
    })
    socket.on('error', (err) => resolve({ connected: false, code: err.code, address: err.address }))
  })
}

t.test('fetch() after the endpoint moved gets the new address through its connect retry, long before the TTL runs out', async (t) => {
  const dns = await dnsServer(t)
  const { before, url } = await endpoints(t)
  const handle = ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null } })

  t.equal(await (await fetch(url)).text(), 'before')
  await before.close()
  dns.set(NAME, { a: [NEW], ttl: HOUR_S })

  const res = await fetch(url)
  t.equal(await res.text(), 'after', 'the retry connected to the new address')
  t.equal(handle.http.stats().retries.connect, 1, 'one connect retry: the refused attempt')
  t.match(handle.dns.stats(), { connectFailures: 1, requeries: 1 })
  t.equal(await (await fetch(url)).text(), 'after', 'and so does every request after it')
  t.equal(dns.count(NAME, 'A'), 2, 'the first answer, and the one the refused connection asked for')
})

t.test('a connect timeout to the old address (it drops the handshake) moves fetch() on to the new one too', async (t) => {
  const dns = await dnsServer(t)
  // The old address: a server that no longer accepts, its queue filled
  // (backlog 1: the kernel holds two), so the next handshake gets no answer.
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'unaccepting-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] })
  // Its loop is blocked: only SIGKILL is not left to a handler that never runs.
  t.teardown(() => child.kill('SIGKILL'))
  const port = Number(await new Promise((resolve) => child.stdout.once('data', resolve)))
  const after = await startHttpServer({ address: NEW, port })
  t.teardown(() => after.close())
  after.handler = (req, res) => res.end('after')
  const handle = ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null }, http: { connectTimeoutMs: 200 } })
  // Connections by name, as fetch() makes them: the cache holds the old
  // address, and the old server's queue is full.
  const fill = []
  t.teardown(() => fill.forEach((s) => s.destroy()))
  for (let i = 0; i < 2; i++) {
    const socket = net.connect(port, NAME)
    fill.push(socket)
    await new Promise((resolve) => socket.once('connect', resolve))
    t.equal(socket.remoteAddress, OLD)
  }
  dns.set(NAME, { a: [NEW], ttl: HOUR_S })

  const res = await fetch(`http://${NAME}:${port}/`)
  t.equal(await res.text(), 'after', 'the retry connected to the new address')
  t.equal(handle.http.stats().timeouts.connect, 1, 'after one connect timeout')
  t.match(handle.dns.stats(), { connectFailures: 1, requeries: 1 })
})

t.test('plain http.get(): after one refused connection, the next request asks DNS again', async (t) => {
  const dns = await dnsServer(t)
  const { before, url } = await endpoints(t)
  const handle = ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null }, http: false })

  t.equal(await get(url), 'before')
  await before.close()
  dns.set(NAME, { a: [NEW], ttl: HOUR_S })

  // Node's http has no retry: the request that meets the dead address fails.
  await t.rejects(get(url), { code: 'ECONNREFUSED', address: OLD })
  t.equal(await get(url), 'after', 'the next one reaches the new address')
  t.match(handle.dns.stats(), { connectFailures: 1, requeries: 1 })
})

t.test('an address that stays the answer and keeps refusing costs one resolution per minTtlMs, and works again once it listens', async (t) => {
  const dns = await dnsServer(t)
  const port = await deadPort()
  const handle = ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null, minTtlMs: HOUR_S * 1000, maxTtlMs: HOUR_S * 1000 }, http: false })

  // The cache's first answer: sockets are watched from then on (this one's
  // answer is as new as a re-resolution's would be).
  t.match(await connect(port), { connected: false, code: 'ECONNREFUSED', address: OLD })
  t.match(handle.dns.stats(), { connectFailures: 0, requeries: 0 })
  // The first of these resolves the name again; the others wait for that
  // answer or come after it, and keep meeting the same refusal.
  const burst = await Promise.all(Array.from({ length: 10 }, () => connect(port)))
  for (let i = 0; i < 5; i++) burst.push(await connect(port))
  t.same(new Set(burst.map((r) => `${r.code} ${r.address}`)), new Set([`ECONNREFUSED ${OLD}`]), 'every attempt went to the address DNS still gives')
  t.equal(dns.count(NAME, 'A'), 2, 'one resolution for the first answer, one for the refusals, however many')
  t.match(handle.dns.stats(), { connectFailures: 15, requeries: 1 })
  t.match(await connect(port, 'gone.test'), { connected: false, code: 'ENOTFOUND' }, 'a name that does not resolve makes no attempt to report')

  const server = await startHttpServer({ address: OLD, port })
  t.teardown(() => server.close())
  t.same(await connect(port), { connected: true }, 'the address works again when something listens')
})

t.test('connectFailed(): lookups made while the name is resolved again wait for that one answer', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t)
  server.set(NAME, { a: [OLD], ttl: HOUR_S })
  t.same(await lookup(NAME, { family: 4 }), { address: OLD, family: 4 })
  t.same(await lookup(NAME, { family: 4 }), { address: OLD, family: 4 }, 'a hit')

  t.equal(cache.connectFailed(NAME, NEW), false, 'an address the cache never gave out changes nothing')
  t.equal(cache.connectFailed('other.test', OLD), false, 'nor does a name it does not hold')
  t.equal(server.count(NAME, 'A'), 1)

  server.set(NAME, { a: [NEW], ttl: HOUR_S })
  server.hold()
  t.equal(cache.connectFailed(NAME.toUpperCase(), OLD), true, 'names compare as DNS compares them')
  const waiting = Promise.all(Array.from({ length: 5 }, () => lookup(NAME, { family: 4 })))
  t.equal(cache.connectFailed(NAME, OLD), true, 'a second failure joins the resolution in flight')
  server.release()
  t.same(await waiting, Array(5).fill({ address: NEW, family: 4 }), 'every waiting lookup gets the new address')
  t.equal(server.count(NAME, 'A'), 2, 'in one query')
  t.match(cache.stats(), { connectFailures: 2, requeries: 1, coalesced: 5 })
  t.equal(cache.connectFailed(NAME, OLD), false, 'the old address is no longer the answer')
})

t.test('connectFailed(): when the new resolution fails, the waiting lookups get the last good answer', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t)
  server.set(NAME, { a: [OLD], ttl: HOUR_S })
  t.same(await lookup(NAME, { family: 4 }), { address: OLD, family: 4 })
  server.mode = 'servfail'
  t.equal(cache.connectFailed(NAME, OLD), true)
  t.same(await lookup(NAME, { family: 4 }), { address: OLD, family: 4 }, 'serve-stale, as for any refresh')
  t.equal(cache.connectFailed(NAME, OLD), false, 'not again within minTtlMs')
  t.equal(cache.connectFailed(NAME, 1), false, 'an address that is not a string is not ours')
  cache.close()
  t.equal(cache.connectFailed(NAME, OLD), false, 'a closed cache does nothing')
})

t.test('sockets are watched from the installed cache\'s first answer until uninstall(); a cache of createDnsCache() never watches them', async (t) => {
  const dns = await dnsServer(t)
  const channel = require('node:diagnostics_channel').channel('net.client.socket')
  t.equal(channel.hasSubscribers, false, 'nobody watches before')
  const { cache, lookup } = await cacheWithServer(t)
  await lookup('missing.test').catch(() => {})
  t.equal(channel.hasSubscribers, false, 'not for a cache that dns.lookup does not answer from')
  cache.close()

  ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null }, http: false })
  t.equal(channel.hasSubscribers, false, 'nothing to doubt before the first answer')
  await require('node:dns').promises.lookup(NAME)
  t.equal(channel.hasSubscribers, true, 'watched once an address was given out')
  ioHygiene.uninstall()
  t.equal(channel.hasSubscribers, false, 'and no longer after uninstall()')
})

t.test('a connected socket carries none of the watcher\'s listeners: a keep-alive socket holds nothing for hours', async (t) => {
  const dns = await dnsServer(t)
  const server = net.createServer((socket) => socket.end())
  await new Promise((resolve) => server.listen(0, OLD, resolve))
  t.teardown(() => server.close())
  ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null }, http: false })
  await require('node:dns').promises.lookup(NAME) // the watcher starts here
  const socket = net.connect(server.address().port, NAME)
  t.teardown(() => socket.destroy())
  await new Promise((resolve) => socket.once('connect', resolve))
  await new Promise((resolve) => setImmediate(resolve))
  const counts = {}
  for (const event of ['lookup', 'connectionAttempt', 'connectionAttemptFailed', 'connect', 'close']) counts[event] = socket.listenerCount(event)
  t.same(counts, { lookup: 0, connectionAttempt: 0, connectionAttemptFailed: 0, connect: 0, close: 0 }, 'as plain Node leaves it')
})

t.test('a socket connected again and again (a client that reuses its Socket) gathers no listeners and no MaxListenersExceededWarning', async (t) => {
  const dns = await dnsServer(t)
  const port = await deadPort()
  ioHygiene.install({ dns: { servers: [dns.server], hostsFile: null }, http: false })
  await require('node:dns').promises.lookup(NAME)
  const warnings = []
  const onWarning = (warning) => warnings.push(warning.name)
  process.on('warning', onWarning)
  t.teardown(() => process.removeListener('warning', onWarning))
  const socket = new net.Socket()
  socket.on('error', () => {})
  let closes = 0
  await new Promise((resolve) => {
    socket.on('close', () => {
      if (++closes < 15) socket.connect(port, NAME)
      else setImmediate(resolve) // after the watcher's own 'close' listener
    })
    socket.connect(port, NAME)
  })
  t.equal(socket.listenerCount('connectionAttempt'), 0)
  t.equal(socket.listenerCount('connectionAttemptFailed'), 0)
  t.equal(socket.listenerCount('connect'), 0)
  t.equal(socket.listenerCount('close'), 1, 'the test\'s own')
  // A warning is emitted on the next tick: let it come, if it would.
  await new Promise((resolve) => setImmediate(resolve))
  t.same(warnings, [])
})
