'use strict'

const { integer, timerMs, boolean, object, func, string, oneOf, nullable, defaultsOf } = require('../core/options')
const {
  ERR_IO_HYGIENE_INVALID_OPTION,
  ERR_IO_HYGIENE_OPTION_RANGE,
  ERR_IO_HYGIENE_CONFLICTING_OPTIONS,
  ERR_IO_HYGIENE_MISSING_PEER,
} = require('../core/errors')

// Marks a client we configured (createStatsd) or decorated (wrapStatsd), so a
// second wrap, or a second copy of io-hygiene, leaves it alone.
const kStatsd = Symbol.for('io-hygiene.statsd.v1')

// 1432 bytes of StatsD payload per UDP datagram: a 1500-byte Ethernet MTU
// minus the IPv6 (40) and UDP (8) headers leaves 1452, and 20 more bytes of
// headroom cover tunnels and IP options. A datagram that needs fragmenting is
// lost whole when any fragment is, and many networks drop fragments outright.
// It is also the size the StatsD project recommends for intranets. Other
// transports have no MTU; 8192 is the Datadog Agent's default read buffer
// (dogstatsd_buffer_size), beyond which it truncates or drops a packet.
const UDP_PACKET_BYTES = 1432
const AGENT_PACKET_BYTES = 8192
const MAX_UDP_PAYLOAD_BYTES = 65507 // 65535 - 20 (IPv4) - 8 (UDP): the kernel's limit

// A string that may be empty (a prefix of '' is hot-shots' default).
function text () {
  const check = (where, key, value) => {
    if (typeof value !== 'string') throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'a string', value)
    return value
  }
  check.expects = 'string'
  return check
}

// A value one of the predicates accepts; `expected` describes them in the error.
function either (expected, ...checks) {
  return (where, key, value) => {
    for (const accepts of checks) if (accepts(value)) return value
    throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, expected, value)
  }
}

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value)
const tags = () => either('an object of tags or an array of "key:value" strings', isObject,
  (v) => Array.isArray(v) && v.every((tag) => typeof tag === 'string'))
const interval = timerMs(1)

// hot-shots' own constructor options (17.x), aliases included, each with the
// type hot-shots reads: it would otherwise take `host: 123` and drop every
// metric, or throw its own uncoded TypeError at the first `prefix: 5` metric.
// Anything else is a misspelling until proven otherwise (a newer hot-shots
// option goes in `hotShotsOptions`). A test reads the names from the installed
// hot-shots' source and fails when one is missing here.
const HOT_SHOTS_CHECKS = {
  host: string(),
  prefix: text(),
  suffix: text(),
  tagPrefix: text(),
  tagSeparator: text(),
  globalize: boolean(),
  mock: boolean(),
  globalTags: tags(),
  global_tags: tags(), // hot-shots' older spelling of globalTags
  includeDataDogTags: boolean(),
  telegraf: boolean(),
  protocol: either('one of "udp", "tcp", "uds", "stream"', (v) => typeof v === 'string' && ['udp', 'tcp', 'uds', 'stream'].includes(v.toLowerCase())),
  path: string(),
  stream: either('a writable stream', (v) => v !== null && typeof v === 'object' && typeof v.write === 'function'),
  udsRetryOptions: object(),
  tcpGracefulErrorHandling: boolean(),
  tcpGracefulRestartRateLimit: interval,
  udsGracefulErrorHandling: boolean(),
  udsGracefulRestartRateLimit: interval,
  closingFlushInterval: interval,
  includeDatadogTelemetry: boolean(),
  telemetryFlushInterval: interval,
  datadog: boolean(),
  originDetection: boolean(),
  containerID: string(),
  cardinality: oneOf('none', 'low', 'orchestrator', 'high'),
  aggregation: either('a boolean or an options object', (v) => typeof v === 'boolean', isObject),
  useDefaultRoute: boolean(),
}
const HOT_SHOTS_OPTIONS = Object.keys(HOT_SHOTS_CHECKS)

// hot-shots replaces a bad port, sampleRate or interval with its default and
// prints; these are checked here instead, so a typo fails at the call.
function sampleRate () {
  const check = (where, key, value) => {
    if (typeof value !== 'number' || Number.isNaN(value)) {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'a number', value)
    }
    if (!(value > 0 && value <= 1)) throw new ERR_IO_HYGIENE_OPTION_RANGE(where, key, 'a number in (0, 1]', value)
    return value
  }
  check.expects = 'number'
  return check
}

function dnsCache () {
  const check = (where, key, value) => {
    if (value === null || typeof value !== 'object' || typeof value.lookup !== 'function') {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'an object with a dns.lookup-compatible lookup() (createDnsCache())', value)
    }
    return value
  }
  check.expects = 'object'
  return check
}

const passThrough = { default: undefined, check: (where, key, value) => value }

// Defaults, and why, are in docs/statsd.md's options table; a test keeps the two equal.
const ownSpec = {
  dnsCache: { default: null, check: nullable(dnsCache()) },
  flushOnExit: { default: true, check: boolean() },
  flushOnSignals: { default: true, check: boolean() },
  closeTimeoutMs: { default: 2_000, check: timerMs(1) },
  shutdownTimeoutMs: { default: 10_000, check: timerMs(1) },
  hotShotsOptions: { default: null, check: nullable(object()) },
}
const wrapSpec = {
  flushOnExit: ownSpec.flushOnExit,
  flushOnSignals: ownSpec.flushOnSignals,
  closeTimeoutMs: ownSpec.closeTimeoutMs,
  shutdownTimeoutMs: ownSpec.shutdownTimeoutMs,
}
const spec = {
  ...ownSpec,
  // hot-shots options with a production default or a strict check.
  maxBufferSize: { default: null, check: nullable(integer(1, MAX_UDP_PAYLOAD_BYTES)) },
  bufferFlushInterval: { default: 1_000, check: timerMs(1) },
  port: { default: undefined, check: integer(1, 65535) },
  sampleRate: { default: undefined, check: sampleRate() },
  errorHandler: { default: null, check: nullable(func()) },
  udpSocketOptions: { default: null, check: nullable(object()) },
  cacheDns: passThrough,
  cacheDnsTtl: passThrough,
  ...Object.fromEntries(HOT_SHOTS_OPTIONS.map((key) => [key, { default: undefined, check: HOT_SHOTS_CHECKS[key] }])),
}
// maxBufferSize null means: UDP_PACKET_BYTES for UDP, AGENT_PACKET_BYTES otherwise.
const defaults = defaultsOf({
  ...ownSpec,
  maxBufferSize: spec.maxBufferSize,
  bufferFlushInterval: spec.bufferFlushInterval,
  errorHandler: spec.errorHandler,
})

let HotShots = null
function loadHotShots (where) {
  if (HotShots === null) {
    try {
      HotShots = require('hot-shots')
    } catch (cause) {
      throw new ERR_IO_HYGIENE_MISSING_PEER(where, 'hot-shots', { cause })
    }
  }
  return HotShots
}

// Options that contradict what createStatsd() guarantees.
function checkConflicts (where, o) {
  if (o.cacheDns === true || o.cacheDnsTtl !== undefined) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, 'cacheDns/cacheDnsTtl replace the host lookup with hot-shots\' own cache ' +
      '(a fixed TTL, one lookup per send while it is pending, no family, no stale answer); createStatsd() resolves the host ' +
      'through io-hygiene\'s TTL cache instead: remove cacheDns and cacheDnsTtl')
  }
  if (o.globalTags !== undefined && o.global_tags !== undefined) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, 'global_tags is hot-shots\' older name for globalTags, and hot-shots ' +
      'ignores it when globalTags is set: pass one of them')
  }
  if (o.udpSocketOptions !== null && o.udpSocketOptions.lookup !== undefined) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, 'udpSocketOptions.lookup is how createStatsd() resolves the host ' +
      'through io-hygiene\'s TTL cache; pass your cache as dnsCache (an object with a dns.lookup-compatible lookup()) instead')
  }
  if (o.hotShotsOptions !== null) {
    for (const key of Object.keys(o.hotShotsOptions)) {
      if (Object.hasOwn(spec, key)) {
        throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `hotShotsOptions.${key}: "${key}" is an option createStatsd() ` +
          'knows; pass it directly (hotShotsOptions is only for hot-shots options newer than io-hygiene)')
      }
    }
  }
}

module.exports = {
  kStatsd,
  UDP_PACKET_BYTES,
  AGENT_PACKET_BYTES,
  HOT_SHOTS_OPTIONS,
  spec,
  wrapSpec,
  defaults,
  loadHotShots,
  checkConflicts,
}
