'use strict'

const { isIP } = require('node:net')
const { channels } = require('../core/diagnostics')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { integer, timerMs, boolean, object, func, string, oneOf, nullable, resolve, defaultsOf } = require('../core/options')
const {
  ERR_IO_HYGIENE_INVALID_OPTION,
  ERR_IO_HYGIENE_OPTION_RANGE,
  ERR_IO_HYGIENE_CONFLICTING_OPTIONS,
  ERR_IO_HYGIENE_INVALID_ARGUMENT,
  ERR_IO_HYGIENE_MISSING_PEER,
  ERR_IO_HYGIENE_TIMEOUT,
  ERR_IO_HYGIENE_CLOSED,
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
const interval = integer(1, 2 ** 31 - 1)

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

// Defaults, and why, are in the README's statsd table; a test keeps the two equal.
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

// Live clients whose buffers are flushed when the process exits. One pair of
// listeners for all of them, removed when the last one closes.
const live = new Set()
let exiting = false

function onBeforeExit () {
  // The loop drained with metrics still buffered (the flush timer is unref'd):
  // send them; the loop runs again and the next beforeExit finds nothing.
  for (const state of live) state.flush()
}

function onExit () {
  // No more ticks will run: the lookups answer from the last known address
  // synchronously, and Node sends a UDP datagram synchronously when it can.
  exiting = true
  for (const state of live) state.flush()
}

function track (state) {
  live.add(state)
  if (live.size === 1) {
    process.on('beforeExit', onBeforeExit)
    process.on('exit', onExit)
  }
}

function untrack (state) {
  if (!live.delete(state) || live.size !== 0) return
  process.removeListener('beforeExit', onBeforeExit)
  process.removeListener('exit', onExit)
}

// What a client counts; `stats()` returns a copy.
function newCounters () {
  return {
    packets: 0,
    bytes: 0,
    droppedPackets: 0,
    errors: 0,
    errorsByCode: {},
    handlerErrors: 0,
    lookups: 0,
    lookupErrors: 0,
    lastKnownAddressUses: 0,
    closeTimeouts: 0,
    droppedAfterClose: 0,
  }
}

const TIMED_OUT = Symbol('timed out')

// Per-client state: counters, the error path, the exit flush and close().
class ClientState {
  client = null
  counters = newCounters()
  closing = null
  host
  port
  hostLookup
  #userHandler
  #closeTimeoutMs
  #shutdownTimeoutMs
  #originalClose
  // hot-shots hands the first error met while closing to close()'s callback,
  // and not to the errorHandler; these say whether a callback is waiting and
  // which error it gets.
  #closeCallbacks = 0
  #closeError
  #closeErrorTaken = false

  constructor ({ host, port, errorHandler, closeTimeoutMs, shutdownTimeoutMs, hostLookup = null }) {
    this.host = host
    this.port = port
    this.hostLookup = hostLookup
    this.#userHandler = errorHandler
    this.#closeTimeoutMs = closeTimeoutMs
    this.#shutdownTimeoutMs = shutdownTimeoutMs
  }

  // The errorHandler hot-shots gets: never throws, never prints.
  handleError = (error) => {
    this.#count(error)
    if (this.#userHandler === null) return
    try {
      this.#userHandler(error)
    } catch (handlerError) {
      this.counters.handlerErrors++
      this.publish(handlerError, 'errorHandler')
    }
  }

  #count (error) {
    const counters = this.counters
    counters.errors++
    const code = error?.code ?? 'UNKNOWN'
    counters.errorsByCode[code] = (counters.errorsByCode[code] ?? 0) + 1
    this.publish(error, 'client')
  }

  // An error met while closing: the first goes to close()'s callbacks if any
  // wait (counted and published all the same), the rest to the errorHandler.
  #closeFailed (error) {
    if (this.#closeCallbacks === 0 || this.#closeErrorTaken) return this.handleError(error)
    this.#closeErrorTaken = true
    this.#closeError = error
    this.#count(error)
  }

  publish (error, source) {
    if (channels.statsdError.hasSubscribers) {
      channels.statsdError.publish({ error, source, host: this.host, port: this.port })
    }
  }

  // Flush from a place that must not throw (timers, process events).
  flush () {
    try {
      this.client.flush()
    } catch (error) {
      this.handleError(error)
    }
  }

  attach (client, { flushOnExit, flushOnSignals }) {
    this.client = client
    this.#originalClose = client.close
    countPackets(client.socket, this.counters)
    Object.defineProperty(client, kStatsd, { value: this })
    Object.defineProperty(client, 'close', { value: this.close, writable: true, configurable: true })
    Object.defineProperty(client, 'stats', { value: this.stats, writable: true, configurable: true })
    if (flushOnExit) track(this)
    // On SIGTERM/SIGINT: close (flushing) within shutdownTimeoutMs, then the
    // signal does what it would have done without us (core/shutdown.js).
    if (flushOnSignals) {
      onShutdown(this, {
        close: () => this.#closeWithin(this.#shutdownTimeoutMs),
        flush: () => this.flush(),
      })
    }
  }

  stats = () => ({ ...this.counters, errorsByCode: { ...this.counters.errorsByCode } })

  // Resolves once buffered metrics were handed to the socket and the socket
  // closed, or at closeTimeoutMs; never rejects. A second call, even from the
  // errorHandler while the first runs, returns the first's promise. Takes
  // hot-shots' optional callback, which gets the first error met while closing.
  close = (callback) => {
    const withCallback = typeof callback === 'function'
    if (withCallback) this.#closeCallbacks++
    const closing = this.#closeWithin(this.#closeTimeoutMs)
    // Called outside the promise chain, so that what it throws is an
    // uncaughtException, as with hot-shots, not an unhandledRejection.
    if (withCallback) closing.then(() => process.nextTick(callback, this.#closeError))
    return closing
  }

  #closeWithin (timeoutMs) {
    if (this.closing === null) {
      // Set before any work: a flush failing synchronously reaches the
      // errorHandler, which may call close() again.
      let settle
      this.closing = new Promise((resolve) => { settle = resolve })
      this.#shutdown(timeoutMs).then(settle)
    }
    return this.closing
  }

  async #shutdown (timeoutMs) {
    untrack(this)
    offShutdown(this)
    const client = this.client
    let timer = null
    // Ref'd on purpose: the caller awaits this deadline, and an unref'd timer
    // could let the process exit before close() settles. It bounds the whole
    // close: a transport may never report back (a stream already destroyed
    // never emits 'close' again).
    const deadline = new Promise((resolve) => { timer = setTimeout(resolve, timeoutMs, TIMED_OUT) })
    try {
      const flushed = this.#step((done) => client.flush(done))
      let outcome = await Promise.race([flushed, deadline])
      if (outcome === TIMED_OUT) {
        // Sends still waiting for DNS fail now, so hot-shots' drain ends.
        this.hostLookup?.abort(new ERR_IO_HYGIENE_CLOSED('statsd client'))
      }
      const closed = this.#step((done) => this.#originalClose.call(client, done))
      // Past the deadline hot-shots may still be sending: its lookups need the cache.
      closed.then(() => this.hostLookup?.close())
      // hot-shots' close() has sent its last buffer synchronously.
      this.#refuseMetrics()
      if (outcome !== TIMED_OUT) outcome = await Promise.race([closed, deadline])
      if (outcome === TIMED_OUT) {
        this.counters.closeTimeouts++
        this.#closeFailed(new ERR_IO_HYGIENE_TIMEOUT('statsd close()', timeoutMs))
      }
    } finally {
      clearTimeout(timer)
    }
  }

  // One callback-taking step of close(): its error, thrown or passed, is a
  // close-time error; the promise always resolves.
  #step (start) {
    return new Promise((resolve) => {
      const done = (error) => {
        if (error) this.#closeFailed(error)
        resolve()
      }
      try {
        start(done)
      } catch (error) {
        done(error)
      }
    })
  }

  // After close(), hot-shots would buffer metrics that nothing sends: count
  // them instead. This client's own sends fail with a coded error in their
  // callback; its child clients share its buffer holder, whose writes are
  // counted (a wrapped child leaves its parent's holder alone).
  #refuseMetrics () {
    const client = this.client
    const counters = this.counters
    Object.defineProperty(client, '_send', {
      value: (message, callback) => {
        counters.droppedAfterClose++
        if (typeof callback === 'function') callback(new ERR_IO_HYGIENE_CLOSED('statsd client'))
      },
      writable: true,
      configurable: true,
    })
    const holder = client.bufferHolder
    if (client.isChild || holder === null || typeof holder !== 'object') return
    Object.defineProperty(holder, 'buffer', {
      get: () => '',
      set: (value) => { if (value !== '') counters.droppedAfterClose++ },
      configurable: true,
    })
  }
}

// Counts packets the transport sent (and their bytes), and apart from them
// those it failed to send.
function countPackets (transport, counters) {
  if (transport === null || transport === undefined) return
  const send = transport.send
  transport.send = function (buf, callback) {
    return send.call(this, buf, (error, bytes) => {
      if (error) {
        counters.droppedPackets++
      } else {
        counters.packets++
        counters.bytes += buf.length
      }
      if (callback) callback(error, bytes)
    })
  }
}

// The `lookup` hot-shots hands to dgram.createSocket. dgram calls it for
// every datagram as lookup(host, family, callback), with the socket's family,
// so a dual-stack name on a udp4 socket gets an IPv4 answer. Answers come from
// the TTL cache (one upstream lookup per TTL expiry, merged, served stale
// while DNS is down); if DNS still fails, the last good address is used.
class HostLookup {
  #cache
  #owned = null
  #counters
  #state
  #known = [null, null] // last good answer per family: [IPv4, IPv6]
  #pending = new Set()

  constructor (cache, counters, state) {
    this.#cache = cache
    this.#counters = counters
    this.#state = state
  }

  #currentCache () {
    // The installed cache closes on uninstall(); its lookup would then pass
    // every datagram to getaddrinfo, so use a private cache from there on.
    if (this.#cache === null || this.#cache.closed === true) {
      // One host: a small LRU (lru-cache allocates maxEntries slots up front).
      this.#cache = this.#owned = require('../dns').createDnsCache({ maxEntries: 16 })
    }
    return this.#cache
  }

  lookup = (hostname, family, callback) => {
    const ipFamily = isIP(hostname)
    // dgram asks for its bind address too; IP literals never touch DNS.
    if (ipFamily !== 0) return callback(null, hostname, ipFamily)
    const slot = family === 6 ? 1 : 0
    const known = this.#known[slot]
    if (exiting && known !== null) return callback(null, known.address, known.family)
    this.#counters.lookups++
    const pending = { callback, settled: false }
    this.#pending.add(pending)
    this.#currentCache().lookup(hostname, family, (error, address, answerFamily) => {
      if (pending.settled) return
      pending.settled = true
      this.#pending.delete(pending)
      if (error) {
        this.#counters.lookupErrors++
        const last = this.#known[slot]
        if (last === null) return callback(error)
        this.#counters.lastKnownAddressUses++
        this.#state.publish(error, 'dns')
        return callback(null, last.address, last.family)
      }
      if (known === null || known.address !== address) this.#known[slot] = { address, family: answerFamily }
      callback(null, address, answerFamily)
    })
  }

  // Fails the lookups still in flight (close() past its deadline).
  abort (error) {
    for (const pending of this.#pending) {
      pending.settled = true
      pending.callback(error)
    }
    this.#pending.clear()
  }

  close () {
    this.#owned?.close()
  }
}

// A hot-shots client configured for production; see the README's statsd
// section for every option and why its default is what it is.
function createStatsd (options) {
  const where = 'createStatsd()'
  const o = resolve(where, spec, options)
  checkConflicts(where, o)
  const Client = loadHotShots(where)

  const protocol = typeof o.protocol === 'string' ? o.protocol.toLowerCase() : 'udp'
  const hotShots = { ...o.hotShotsOptions }
  for (const key of HOT_SHOTS_OPTIONS) if (o[key] !== undefined) hotShots[key] = o[key]
  if (o.port !== undefined) hotShots.port = o.port
  if (o.sampleRate !== undefined) hotShots.sampleRate = o.sampleRate
  hotShots.maxBufferSize = o.maxBufferSize ?? (protocol === 'udp' ? UDP_PACKET_BYTES : AGENT_PACKET_BYTES)
  hotShots.bufferFlushInterval = o.bufferFlushInterval

  const state = new ClientState({
    host: o.host,
    port: o.port,
    errorHandler: o.errorHandler,
    closeTimeoutMs: o.closeTimeoutMs,
    shutdownTimeoutMs: o.shutdownTimeoutMs,
  })
  hotShots.errorHandler = state.handleError
  if (protocol === 'udp') {
    state.hostLookup = new HostLookup(o.dnsCache ?? require('../dns').currentCache(), state.counters, state)
    hotShots.udpSocketOptions = { ...o.udpSocketOptions, lookup: state.hostLookup.lookup }
  }

  const client = new Client(hotShots)
  state.host = client.host
  state.port = client.port
  state.attach(client, o)
  // Learn the address now: the first burst does not wait for DNS, and a
  // process.exit() right after start still has an address to flush to.
  if (state.hostLookup !== null && typeof o.host === 'string' && isIP(o.host) === 0 && !o.mock) {
    state.hostLookup.lookup(o.host, o.udpSocketOptions?.type === 'udp6' ? 6 : 4, () => {})
  }
  return client
}

let wrapWarned = false

// A client the application already built. What hot-shots lets us change
// later, we change; the rest is named in a one-time warning.
function wrapStatsd (client, options) {
  const where = 'wrapStatsd()'
  if (client === null || typeof client !== 'object' || typeof client.increment !== 'function' ||
      typeof client.flush !== 'function' || typeof client.close !== 'function') {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, 'client must be a hot-shots client (increment(), flush() and close())')
  }
  const o = resolve(where, wrapSpec, options)
  if (client[kStatsd] !== undefined) return client

  const state = new ClientState({
    host: client.host,
    port: client.port,
    errorHandler: typeof client.errorHandler === 'function' ? client.errorHandler : null,
    closeTimeoutMs: o.closeTimeoutMs,
    shutdownTimeoutMs: o.shutdownTimeoutMs,
  })
  // hot-shots reads errorHandler at each error; the socket listener it added
  // at construction (if any) is swapped for ours.
  const previous = client.errorHandler
  client.errorHandler = state.handleError
  if (client.socket && !client.isChild) {
    if (typeof previous === 'function') client.socket.removeListener('error', previous)
    client.socket.on('error', state.handleError)
  }
  // hot-shots reads maxBufferSize at each send, but starts its flush timer
  // only at construction when buffering was on; start it here, where hot-shots'
  // close() clears it.
  if (client.maxBufferSize === 0 && client.protocol === 'udp' && !client.mock) {
    client.maxBufferSize = UDP_PACKET_BYTES
    client.intervalHandle = setInterval(() => state.flush(), client.bufferFlushInterval)
    client.intervalHandle.unref()
  }
  state.attach(client, o)
  if (!wrapWarned) {
    wrapWarned = true
    process.emitWarning(WRAP_WARNING, { code: WRAP_WARNING_CODE, type: 'IoHygieneWarning' })
  }
  return client
}

const WRAP_WARNING_CODE = 'IO_HYGIENE_STATSD_WRAP'
const WRAP_WARNING = 'wrapStatsd() set the errorHandler, counters, close() and exit flush, and buffering if it was ' +
  'off; hot-shots fixes the rest when a client is constructed: (1) the UDP socket resolves "host" with the ' +
  'dns.lookup dgram captured at construction, once per datagram (io-hygiene\'s cache only if install() ran ' +
  'before the client was created); (2) the socket family (udp4/udp6); (3) cacheDns and its fixed cacheDnsTtl; ' +
  '(4) child clients created before wrapStatsd() keep their errorHandler and maxBufferSize; (5) on ' +
  'process.exit() buffered metrics are sent only if "host" is an IP literal. Create the client with ' +
  'createStatsd() to change these.'

module.exports = {
  createStatsd,
  wrapStatsd,
  spec,
  defaults,
  UDP_PACKET_BYTES,
  AGENT_PACKET_BYTES,
  WRAP_WARNING_CODE,
}
