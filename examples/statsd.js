'use strict'

// `node examples/statsd.js`: send metrics through createStatsd() and watch
// them arrive. With no STATSD_HOST set, it starts a tiny StatsD receiver on
// 127.0.0.1 in this process and prints every datagram it gets; with
// STATSD_HOST (and STATSD_PORT, default 8125) it sends to your agent instead.
//
// Needs hot-shots, io-hygiene's optional peer dependency: npm install hot-shots
const dgram = require('node:dgram')
const dc = require('node:diagnostics_channel')
const { createStatsd } = require('io-hygiene')

async function startReceiver () {
  const socket = dgram.createSocket('udp4')
  socket.on('message', (msg) => {
    console.log(`receiver: one datagram of ${msg.length} bytes:\n  ${msg.toString().split('\n').join('\n  ')}`)
  })
  await new Promise((resolve) => socket.bind(0, '127.0.0.1', resolve))
  return socket
}

async function main () {
  const receiver = process.env.STATSD_HOST ? null : await startReceiver()
  const host = process.env.STATSD_HOST ?? 'localhost'
  const port = receiver ? receiver.address().port : Number(process.env.STATSD_PORT ?? 8125)

  // Errors never throw or print: they are counted in stats() and published here.
  dc.subscribe('io-hygiene:statsd:error', ({ error, source }) => {
    console.log(`statsd error (${source}): ${error.code ?? error.message}`)
  })

  const statsd = createStatsd({
    host, // resolved through io-hygiene's TTL cache, with the socket's family
    port,
    prefix: 'example.',
    globalTags: { service: 'checkout' },
    // maxBufferSize: 1432 and bufferFlushInterval: 1000 are the defaults
  })

  statsd.increment('requests')
  statsd.increment('requests', 3, ['route:/pay'])
  statsd.gauge('queue.depth', 17)
  statsd.timing('db.query', 12.5)
  statsd.histogram('payload.bytes', 2048)
  statsd.distribution('latency', 87)
  statsd.set('users', 'alice')

  // close() flushes the buffer (all of the above fit one datagram) and
  // resolves once the socket is closed.
  await statsd.close()
  console.log('client counters:', statsd.stats())

  if (receiver) {
    await new Promise((resolve) => setTimeout(resolve, 100)) // let the datagram land
    receiver.close()
  } else {
    console.log(`sent to ${host}:${port}`)
  }
}

main()
