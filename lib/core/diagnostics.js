'use strict'

const dc = require('node:diagnostics_channel')
const util = require('node:util')

// Every channel is created once, here. Publishers check `hasSubscribers`
// first, so nobody pays for an event that nobody listens to.
const channels = {
  dnsLookup: dc.channel('io-hygiene:dns:lookup'),
  dnsRefresh: dc.channel('io-hygiene:dns:refresh'),
  dnsError: dc.channel('io-hygiene:dns:error'),
  dnsSearch: dc.channel('io-hygiene:dns:search'),
  batchFlush: dc.channel('io-hygiene:batch:flush'),
  batchReject: dc.channel('io-hygiene:batch:reject'),
  statsdError: dc.channel('io-hygiene:statsd:error'),
  httpRetry: dc.channel('io-hygiene:http:retry'),
  httpBudget: dc.channel('io-hygiene:http:budget'),
  httpIdleClose: dc.channel('io-hygiene:http:idle-close'),
  monitorAlert: dc.channel('io-hygiene:monitor:alert'),
  monitorSample: dc.channel('io-hygiene:monitor:sample'),
}

// debuglog is a subscriber, attached only when NODE_DEBUG enables it, so the
// hot path never formats a log line.
function attachDebug (section, channel, format) {
  // Without NODE_DEBUG nothing can be enabled; asking debuglog would still
  // cost every process a few parses at start.
  if (!process.env.NODE_DEBUG) return
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
attachDebug('io-hygiene:dns', channels.dnsSearch,
  (m) => `${m.hostname} is answered as ${m.fqdn} after ${m.triedBefore} search domain(s) without it (ndots:${m.ndots}); ` +
    `every getaddrinfo of it asks those first: spell it "${m.fqdn}." to skip them`)
attachDebug('io-hygiene:batch', channels.batchFlush,
  (m) => `flush ${m.name} items=${m.items} bytes=${m.bytes}${m.error ? ' error=' + (m.error.code || m.error.message) : ''}`)
attachDebug('io-hygiene:batch', channels.batchReject,
  (m) => `reject ${m.name} items=${m.items} reason=${m.error && (m.error.code || m.error.message)}`)
attachDebug('io-hygiene:monitor', channels.monitorAlert,
  (m) => `alert ${m.name}: ${m.metric}=${m.value}${m.fix ? ' fix: ' + m.fix : ''}`)
attachDebug('io-hygiene:statsd', channels.statsdError,
  (m) => `error ${m.error && (m.error.code || m.error.message)}`)
attachDebug('io-hygiene:http', channels.httpRetry,
  (m) => `retry ${m.method} ${m.origin}${m.path} reason=${m.reason} attempt=${m.attempt} in ${m.delayMs} ms${m.statusCode ? ' status=' + m.statusCode : ''}${m.error ? ' error=' + (m.error.code || m.error.message) : ''}`)
attachDebug('io-hygiene:http', channels.httpBudget,
  (m) => `retry budget spent: ${m.method} ${m.origin}${m.path} not retried (${m.reason})`)
attachDebug('io-hygiene:http', channels.httpIdleClose,
  (m) => `${m.origin} closes idle sockets after ${m.idleMs} ms; retiring ours after ${m.retireAfterMs} ms`)

module.exports = { channels }
