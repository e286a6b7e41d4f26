'use strict'

const dc = require('node:diagnostics_channel')
const util = require('node:util')

// Every channel is created once, here. Publishers check `hasSubscribers`
// first, so nobody pays for an event that nobody listens to.
const channels = {
  dnsLookup: dc.channel('io-hygiene:dns:lookup'),
  dnsRefresh: dc.channel('io-hygiene:dns:refresh'),
  dnsError: dc.channel('io-hygiene:dns:error'),
  batchFlush: dc.channel('io-hygiene:batch:flush'),
  batchReject: dc.channel('io-hygiene:batch:reject'),
  statsdError: dc.channel('io-hygiene:statsd:error'),
}

// debuglog is a subscriber, attached only when NODE_DEBUG enables it, so the
// hot path never formats a log line.
function attachDebug (section, channel, format) {
  const log = util.debuglog(section)
  if (!log.enabled) return
  channel.subscribe((message) => log(format(message)))
}

attachDebug('io-hygiene:dns', channels.dnsLookup,
  (m) => `lookup ${m.hostname} family=${m.family} ${m.source}${m.error ? ' error=' + m.error.code : ''}`)
attachDebug('io-hygiene:dns', channels.dnsError,
  (m) => `upstream error ${m.hostname} family=${m.family} ${m.error.code}${m.refresh ? ' (refresh; serving stale if allowed)' : ''}`)
attachDebug('io-hygiene:dns', channels.dnsRefresh,
  (m) => `refresh ${m.hostname} ${m.error ? 'failed: ' + m.error.code : 'ok'}`)
attachDebug('io-hygiene:batch', channels.batchFlush,
  (m) => `flush ${m.name} items=${m.items} bytes=${m.bytes}${m.error ? ' error=' + (m.error.code || m.error.message) : ''}`)
attachDebug('io-hygiene:batch', channels.batchReject,
  (m) => `reject ${m.name} items=${m.items} reason=${m.error && (m.error.code || m.error.message)}`)
attachDebug('io-hygiene:statsd', channels.statsdError,
  (m) => `error ${m.error && (m.error.code || m.error.message)}`)

module.exports = { channels }
