'use strict'

const { isIP } = require('node:net')
const { resolve } = require('../core/options')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT } = require('../core/errors')
const { kStatsd, UDP_PACKET_BYTES, AGENT_PACKET_BYTES, HOT_SHOTS_OPTIONS, spec, wrapSpec, defaults, loadHotShots, checkConflicts } = require('./options')
const { ClientState } = require('./client-state')
const { HostLookup } = require('./host-lookup')

// A hot-shots client configured for production; see docs/statsd.md's
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
  'off; hot-shots fixes the rest when a client is constructed: (1) on Node 22 the UDP socket resolves "host" with the ' +
  'dns.lookup dgram captured at construction, once per datagram (io-hygiene\'s cache only if install() ran ' +
  'before the client was created; Node 24 and later read dns.lookup at each send); (2) the socket family (udp4/udp6); (3) cacheDns and its fixed cacheDnsTtl; ' +
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
