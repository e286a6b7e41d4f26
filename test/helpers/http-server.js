'use strict'

const http = require('node:http')

// A real HTTP server on 127.0.0.1 for tests and benchmarks.
//
//   const server = await startHttpServer({ idleCloseMs: 1000 })
//   server.handler = (req, res) => res.end('ok')   // per test; the default answers 200 "ok"
//   server.url('/path')                             // http://localhost:<port>/path (any hostname)
//   server.counts                                   // { connections, open, peakOpen, requests }
//   await server.close()                            // closes every socket it accepted
//
// idleCloseMs closes a keep-alive socket that stayed idle that long after a
// response, the way Node, Apache or a load balancer do, but without the
// `Keep-Alive: timeout=` hint (Node's own server.keepAliveTimeout sends one).
// `address` and `port`: where it listens (127.0.0.2 and 127.0.0.3 are loopback
// too: two servers on one port stand for an endpoint before and after a move).
async function startHttpServer ({ idleCloseMs = null, hostname = 'localhost', address = '127.0.0.1', port = 0 } = {}) {
  const counts = { connections: 0, open: 0, peakOpen: 0, requests: 0, idleCloses: 0 }
  const sockets = new Set()
  const server = http.createServer({ keepAliveTimeout: 0, requestTimeout: 0, headersTimeout: 0 })
  server.keepAliveTimeout = 0 // no hint header, and the idle timer below is ours

  const self = {
    server,
    counts,
    sockets,
    port: 0,
    handler: (req, res) => {
      req.resume()
      req.on('end', () => res.end('ok'))
    },
    url: (path = '/', host = hostname) => `http://${host}:${self.port}${path}`,
    origin: (host = hostname) => `http://${host}:${self.port}`,
    close: () => new Promise((resolve) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resolve())
    }),
  }

  server.on('connection', (socket) => {
    counts.connections++
    counts.open++
    if (counts.open > counts.peakOpen) counts.peakOpen = counts.open
    sockets.add(socket)
    socket.on('close', () => {
      counts.open--
      sockets.delete(socket)
    })
    if (idleCloseMs !== null) {
      socket.on('timeout', () => {
        counts.idleCloses++
        socket.destroy()
      })
    }
  })

  server.on('request', (req, res) => {
    counts.requests++
    if (idleCloseMs !== null) {
      req.socket.setTimeout(0)
      res.on('finish', () => {
        if (!req.socket.destroyed) req.socket.setTimeout(idleCloseMs)
      })
    }
    self.handler(req, res)
  })

  await new Promise((resolve) => server.listen(port, address, resolve))
  self.port = server.address().port
  return self
}

// A real DNS server on 127.0.0.1 that answers `name` with 127.0.0.1, and the
// install() dns options that resolve through it alone: a name only the
// io-hygiene cache can resolve, so a request that reaches the server went
// through the cache, and the DNS server counts its queries.
async function testDns (t, name = 'api.test') {
  const { startDnsServer } = require('./dns-server')
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set(name, { a: ['127.0.0.1'], ttl: 60 })
  return { server, options: { servers: [server.server], hostsFile: null } }
}

// A server reached as api.test, and io-hygiene installed with `http` over a
// cache that resolves that name through the test DNS server alone.
async function installWithServer (t, http = {}, serverOptions = {}) {
  const server = await startHttpServer({ hostname: 'api.test', ...serverOptions })
  t.teardown(() => server.close())
  const dns = await testDns(t)
  const handle = require('../..').install({ dns: dns.options, http })
  return { server, handle, dns: dns.server }
}

module.exports = { startHttpServer, testDns, installWithServer }
