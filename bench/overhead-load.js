'use strict'

// The load generator for bench/overhead.js, forked once per run so that no
// measured window waits for autocannon to start:
//   { id, port, connections, seconds } -> { id, requests, seconds, p99Ms, errors }
//   'exit'                             -> exits 0
const autocannon = require('autocannon')

process.on('message', (msg) => {
  if (msg === 'exit') return process.disconnect()
  const url = `http://127.0.0.1:${msg.port}/`
  autocannon({ url, connections: msg.connections, duration: msg.seconds }).then((r) => {
    process.send({
      id: msg.id,
      requests: r.requests.total,
      seconds: r.duration,
      p99Ms: r.latency.p99,
      errors: r.errors + r.timeouts + r.non2xx,
    })
  }, (err) => {
    process.send({ id: msg.id, error: err.stack })
  })
})
