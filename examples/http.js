'use strict'

// `node examples/http.js`: io-hygiene's dispatcher in front of a local server
// that closes idle sockets after 1 s without saying so, and sometimes answers
// 503. Node's fetch, unchanged, gets every answer; stats() says what it took.
const http = require('node:http')
const { install } = require('..')

async function main () {
  let requests = 0
  const server = http.createServer({ keepAliveTimeout: 0 }, (req, res) => {
    requests++
    req.socket.setTimeout(0)
    res.on('finish', () => req.socket.setTimeout(1000)) // idle close, no Keep-Alive hint
    if (requests % 10 === 3) {
      res.writeHead(503, { 'retry-after': '1' })
      return res.end('busy')
    }
    res.end('ok')
  })
  server.keepAliveTimeout = 0
  server.on('connection', (socket) => socket.on('timeout', () => socket.destroy()))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://localhost:${server.address().port}/`

  // This server's 503 means "not now, nothing done": status retries are on.
  const installation = install({ http: { statusRetries: true } })
  const statuses = {}
  for (let round = 0; round < 3; round++) {
    // Ten requests at once, then a pause as long as the server's idle close.
    const results = await Promise.all(Array.from({ length: 10 }, () => fetch(url).then(async (res) => {
      await res.text()
      return res.status
    }, (err) => err.cause?.code ?? err.message)))
    for (const status of results) statuses[status] = (statuses[status] ?? 0) + 1
    await new Promise((resolve) => setTimeout(resolve, 1000))
  }
  const stats = installation.http.stats()
  const failed = Object.entries(statuses).filter(([status]) => status !== '200').reduce((n, [, count]) => n + count, 0)
  console.log(`30 fetches: ${statuses[200] ?? 0} answered 200, ${failed} failed; ` +
    `${stats.retries.status} retried after a 503, ${stats.retries.staleSocket} after a stale socket; ` +
    `idle close learned: ${stats.idleClosesLearned === 1 ? 'yes' : 'no'}; ${installation.dns.stats().upstreamLookups} getaddrinfo call`)
  console.log('http stats:', stats)
  installation.uninstall()
  server.close()
}

main()
