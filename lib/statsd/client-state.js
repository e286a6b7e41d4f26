'use strict'

const { channels } = require('../core/diagnostics')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { ERR_IO_HYGIENE_TIMEOUT, ERR_IO_HYGIENE_CLOSED } = require('../core/errors')
const { kStatsd } = require('./options')

// Live clients whose buffers are flushed when the process exits. One pair of
// listeners for all of them, removed when the last one closes.
const live = new Set()
let exiting = false

// Whether the process is in its 'exit' event: no more ticks will run.
function isExiting () {
  return exiting
}

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

// On a client: background(fn) sends what fn sends as background work (the
// monitor's samples): in packets of their own, not counted as work a
// shutdown's drain waits for, and not at all once close() has begun.
// Returns whether fn ran. Symbol.for, so another copy's monitor finds it.
const kBackground = Symbol.for('io-hygiene.statsd.background.v1')

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
  // While true, what the transport is handed is background work; packets
  // (sent or dropped) of it are counted apart, so a drain does not see them.
  #quiet = false
  #quietPackets = 0

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

  #count = (error) => {
    const counters = this.counters
    counters.errors++
    const code = error?.code ?? 'UNKNOWN'
    counters.errorsByCode[code] = (counters.errorsByCode[code] ?? 0) + 1
    this.publish(error, 'client')
  }

  // An error met while closing: the first goes to close()'s callbacks if any
  // wait (counted and published all the same), the rest to the errorHandler.
  #closeFailed = (error) => {
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
    this.#countPackets(client.socket)
    Object.defineProperty(client, kStatsd, { value: this })
    Object.defineProperty(client, kBackground, { value: this.#background })
    Object.defineProperty(client, 'close', { value: this.close, writable: true, configurable: true })
    Object.defineProperty(client, 'stats', { value: this.stats, writable: true, configurable: true })
    if (flushOnExit) track(this)
    // On SIGTERM/SIGINT: flush while the application still sends, then
    // close within shutdownTimeoutMs unless the application handles the
    // signal itself (core/shutdown.js).
    if (flushOnSignals) {
      onShutdown(this, {
        timeoutMs: this.#shutdownTimeoutMs,
        close: (timeoutMs) => this.#closeWithin(timeoutMs),
        flush: () => this.flush(),
        hurry: () => this.flush(),
        mark: () => this.counters.packets + this.counters.droppedPackets - this.#quietPackets,
        busy: () => this.#buffered(),
      })
    }
  }

  // Whether metrics wait in hot-shots' buffer (its bufferHolder, shared with
  // child clients).
  #buffered () {
    const buffer = this.client.bufferHolder?.buffer
    return typeof buffer === 'string' && buffer.length > 0
  }

  // The application's buffered lines go first, as its own work; then fn's
  // lines, flushed at once, so the buffer a drain looks at holds none of them.
  #background = (fn) => {
    if (this.closing !== null) return false
    this.flush()
    this.#quiet = true
    try {
      fn()
      this.flush()
    } finally {
      this.#quiet = false
    }
    return true
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
      const flushed = this.#step((done) => client.flush(done), this.#closeFailed)
      let outcome = await Promise.race([flushed, deadline])
      if (outcome === TIMED_OUT) {
        // Sends still waiting for DNS fail now, so hot-shots' drain ends.
        this.hostLookup?.abort(new ERR_IO_HYGIENE_CLOSED('statsd client'))
      }
      // hot-shots' close() answers a failed last flush at once with its
      // error, and goes no further; so does this one. The transport still
      // closes, in the background: a broken one (a destroyed stream, a TCP
      // socket refused) may never say so, and what it says is counted, not
      // handed to the errorHandler, which plain hot-shots never troubles.
      const failed = outcome instanceof Error
      const closed = this.#step((done) => this.#originalClose.call(client, done), failed ? this.#count : this.#closeFailed)
      // Past the deadline hot-shots may still be sending: its lookups need the cache.
      closed.then(() => this.hostLookup?.close())
      // hot-shots' close() has sent its last buffer synchronously.
      this.#refuseMetrics()
      if (failed) return
      if (outcome !== TIMED_OUT) outcome = await Promise.race([closed, deadline])
      if (outcome === TIMED_OUT) {
        this.counters.closeTimeouts++
        this.#closeFailed(new ERR_IO_HYGIENE_TIMEOUT('statsd close()', timeoutMs))
      }
    } finally {
      clearTimeout(timer)
    }
  }

  // One callback-taking step of close(): its error, thrown or passed, goes to
  // `failed`; the promise always resolves, with that error if there was one.
  #step (start, failed) {
    return new Promise((resolve) => {
      const done = (error) => {
        if (error) failed(error)
        resolve(error instanceof Error ? error : undefined)
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
    // Until hot-shots' close() reaches the socket (_close, once what is in
    // flight has drained), a metric still goes out, unbuffered, and its
    // close() waits for it, as it does for plain hot-shots' unbuffered
    // sends: a send's callback may send again (hot-shots' own tests do).
    const closeSocket = client._close
    let socketClosing = typeof closeSocket !== 'function'
    if (!socketClosing) {
      Object.defineProperty(client, '_close', {
        value: function (callback) {
          socketClosing = true
          return closeSocket.call(this, callback)
        },
        writable: true,
        configurable: true,
      })
    }
    Object.defineProperty(client, '_send', {
      value: (message, callback) => {
        if (!socketClosing) return client.sendMessage(message, callback)
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

  // Counts packets the transport sent (and their bytes), and apart from them
  // those it failed to send.
  #countPackets (transport) {
    if (transport === null || transport === undefined) return
    const send = transport.send
    const counters = this.counters
    const quiet = () => this.#quiet
    const quietPacket = () => this.#quietPackets++
    transport.send = function (buf, callback) {
      const background = quiet()
      let called = false
      return send.call(this, buf, (error, bytes) => {
        // A transport that calls back twice is counted, and passed on, once.
        if (called) return
        called = true
        if (error) {
          counters.droppedPackets++
        } else {
          counters.packets++
          counters.bytes += buf.length
        }
        if (background) quietPacket()
        if (callback) callback(error, bytes)
      })
    }
  }
}

module.exports = { ClientState, isExiting }
