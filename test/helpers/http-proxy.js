'use strict'

const http = require('node:http')
const net = require('node:net')

// A real HTTP proxy on 127.0.0.1, as egress proxies are: absolute-form
// requests are forwarded (what undici's ProxyAgent sends for http: targets),
// CONNECT opens a tunnel (for https:, or with proxyTunnel: true).
//
//   const proxy = await startHttpProxy()
//   proxy.url                       // http://127.0.0.1:<port>
//   proxy.seen                      // ['GET http://localhost:1234/x', 'CONNECT localhost:443', ...]
//   await proxy.close()             // closes every socket it holds
async function startHttpProxy () {
  const seen = []
  const sockets = new Set()
  const track = (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
  }
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`)
    const target = new URL(req.url)
    const headers = { ...req.headers }
    delete headers['proxy-connection']
    const upstream = http.request({ host: target.hostname, port: target.port, path: target.pathname + target.search, method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers)
      answer.pipe(res)
    })
    upstream.on('error', () => res.writeHead(502).end())
    req.pipe(upstream)
  })
  server.on('connection', track)
  server.on('connect', (req, socket, head) => {
    seen.push(`CONNECT ${req.url}`)
    const [host, port] = req.url.split(':')
    const upstream = net.connect(Number(port), host, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      upstream.write(head)
      upstream.pipe(socket)
      socket.pipe(upstream)
    })
    track(upstream)
    upstream.on('error', () => socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n'))
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    server,
    seen,
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resolve())
    }),
  }
}

module.exports = { startHttpProxy }
