'use strict'

// `node examples/dns.js`: install io-hygiene, make 200 HTTP requests to a
// local server by name, and see what the cache saved. Every request resolves
// `localhost` through dns.lookup; with io-hygiene, one of them asks the
// system resolver and the rest are answered from the cache.
const http = require('node:http')
const { install } = require('io-hygiene')

async function main () {
  const { dns } = install()

  const server = http.createServer((req, res) => res.end('ok'))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()

  const get = () => new Promise((resolve, reject) => {
    // agent: false opens a new connection, and so a new lookup, per request.
    http.get({ host: 'localhost', port, family: 4, agent: false }, (res) => {
      res.resume()
      res.on('end', resolve)
    }).on('error', reject)
  })
  for (let i = 0; i < 200; i++) await get()
  await fetch(`http://localhost:${port}/`).then((res) => res.text())

  const stats = dns.stats()
  // http.get asked for IPv4 and fetch for any family: two answers for one name
  // (stats().entries counts names), so two lookups.
  console.log(`201 requests: ${stats.upstreamLookups} getaddrinfo calls, ${stats.hits} cache hits`)
  console.log(stats)
  server.close()
}

main()
