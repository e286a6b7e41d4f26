'use strict'

// createHttpSink({ url, ... }): events POSTed to an HTTP endpoint in batches,
// on the core batcher (lib/batch/), through undici's request() and so the
// global dispatcher (io-hygiene's when installed, with the DNS cache under it).
//
//   push(record) -> Promise<void>: resolves when a request carrying the
//     record got a 2xx; rejects with the status error (400 and other
//     non-retriable answers, or 413 for a record alone), with the batcher's
//     coded error (queue full, closed, delivery deadline with its cause), or
//     at once for a record that is not JSON.
//
// A batch is one request, except after a 413: then it is sent in halves, in
// order, down to single records, and batches of at least the refused size
// are split before they are sent. Network errors, 429 and 5xx fail the
// batch's undelivered rest; the batcher retries it (backoff with jitter,
// after the Retry-After wait) before anything newer, so order is kept, until
// the delivery deadline. Records delivered by an earlier part of the batch
// were settled at once and are not sent again.
const zlib = require('node:zlib')
const { promisify } = require('node:util')
const { createBatcher, checkLimits, queueOptions, drainHooks } = require('../batch')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { parseRetryAfter } = require('./headers')
const { integer, timerMs, boolean, oneOf, string, nullable, resolve } = require('../core/options')
const {
  ERR_IO_HYGIENE_INVALID_OPTION,
  ERR_IO_HYGIENE_INVALID_ARGUMENT,
  ERR_IO_HYGIENE_TIMEOUT,
  ERR_IO_HYGIENE_CLOSED,
  ERR_IO_HYGIENE_DELIVERY_TIMEOUT,
  ERR_IO_HYGIENE_HTTP_STATUS,
  redactUrl,
  withheld,
} = require('../core/errors')

const gzip = promisify(zlib.gzip)
const where = 'createHttpSink()'
// Characters of an error response kept on the error (`body`) and its message.
const EXCERPT_CHARS = 512
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
// Set by the sink (framing, body, encoding) or refused by undici.
const RESERVED_HEADERS = new Set(['content-length', 'content-encoding', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'expect'])
const CONTENT_TYPES = { ndjson: 'application/x-ndjson', json: 'application/json' }

// Refusals say what kind of value was refused, never the value: a URL may
// carry a password or an API key, a header a token (read from a file with its
// trailing newline, say), as Node's http, undici and new URL leave them out.
function httpUrl () {
  const check = (where, key, value) => {
    let url = null
    if (typeof value === 'string' || value instanceof URL) {
      try {
        url = new URL(value)
      } catch {}
    }
    let refused = null
    if (url === null) {
      refused = typeof value === 'string' || value instanceof URL ? 'a string that is not a URL' : kindOf(value)
    } else if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      // The URL parser allows only [a-z0-9+.-] in a scheme: safe to show.
      refused = `a URL of scheme ${url.protocol}`
    } else if (url.username !== '' || url.password !== '') {
      // undici would drop credentials in the URL without a word: they go in headers.
      refused = 'a URL with credentials'
    }
    if (refused !== null) {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'an http: or https: URL without credentials (send them in headers)', withheld(refused))
    }
    return url.href
  }
  check.expects = 'string | URL'
  return check
}

function kindOf (value) {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`
}

function headerObject () {
  const check = (where, key, value) => {
    // A Headers or Map instance has no own keys: its headers would be lost.
    const proto = value !== null && typeof value === 'object' ? Object.getPrototypeOf(value) : undefined
    if (proto !== Object.prototype && proto !== null) {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'a plain object of header names to strings', withheld(kindOf(value)))
    }
    const out = {}
    for (const name of Object.keys(value)) {
      const lower = name.toLowerCase()
      const v = value[name]
      if (!TOKEN.test(name)) {
        throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'an object whose keys are valid header names', withheld('a key that is not one'))
      }
      // A valid name is a token: no space, quote or control can forge a message.
      if (RESERVED_HEADERS.has(lower)) {
        throw new ERR_IO_HYGIENE_INVALID_OPTION(where, `${key}["${name}"]`, `a header not among ${[...RESERVED_HEADERS].join(', ')} (the sink sets those)`, withheld('one of them'))
      }
      if (typeof v !== 'string') {
        throw new ERR_IO_HYGIENE_INVALID_OPTION(where, `${key}["${name}"]`, 'a string without CR, LF or NUL', withheld(kindOf(v)))
      }
      if (/[\r\n\0]/.test(v)) {
        throw new ERR_IO_HYGIENE_INVALID_OPTION(where, `${key}["${name}"]`, 'a string without CR, LF or NUL', withheld('a string with one (a trailing newline, say)'))
      }
      out[lower] = v
    }
    return Object.freeze(out)
  }
  check.expects = 'object'
  return check
}

// Defaults, and why, are in docs/http-sink.md's options table; a test keeps the two equal.
const spec = {
  url: { default: null, check: nullable(httpUrl()) },
  name: { default: 'http-sink', check: string() },
  method: { default: 'POST', check: oneOf('POST', 'PUT') },
  format: { default: 'ndjson', check: oneOf('ndjson', 'json') },
  compression: { default: 'none', check: oneOf('none', 'gzip') },
  headers: { default: null, check: nullable(headerObject()) },
  lingerMs: { default: 0, check: timerMs(0) },
  maxBatchItems: { default: 1000, check: integer(1) },
  maxBatchBytes: { default: 5_000_000, check: integer(2) },
  maxQueuedItems: { default: 10_000, check: integer(1) },
  maxQueuedBytes: { default: 33_554_432, check: integer(2) },
  overflow: { default: 'wait', check: oneOf('wait', 'reject') },
  maxQueueWaitMs: { default: 60_000, check: timerMs(0) },
  maxWaitingItems: { default: 10_000, check: integer(0) },
  maxWaitingBytes: { default: 8_388_608, check: integer(0) },
  requestTimeoutMs: { default: 30_000, check: timerMs(1) },
  deliveryTimeoutMs: { default: 120_000, check: timerMs(1) },
  retryBackoffMs: { default: 1000, check: timerMs(0) },
  maxRetryBackoffMs: { default: 5000, check: timerMs(0) },
  // Drained on SIGTERM and SIGINT like the other clients (core/shutdown.js):
  // a record pushed during a rollout is delivered, not lost with the pod.
  flushOnSignals: { default: true, check: boolean() },
  shutdownTimeoutMs: { default: 10_000, check: timerMs(0) },
}

// A pushed record, serialised once. `bytes` counts its separator too, so the
// batcher's byte count is the body's (a JSON array adds one byte: below).
class Event {
  constructor (json, at) {
    this.json = json
    this.bytes = Buffer.byteLength(json) + 1
    this.at = at
    this.done = false
    this.resolve = null
    this.reject = null
  }
}

const sizeOf = (event) => event.bytes
// The sink settles what it can itself (a split batch's delivered part, a
// 400); it throws only for what is worth another try.
const isRetriable = () => true

// Retry-After in ms; 0 when absent or invalid.
function retryAfterMs (value, now) {
  return parseRetryAfter(value, now) ?? 0
}

async function excerptOf (body) {
  body.setEncoding('utf8')
  let text = ''
  for await (const chunk of body) {
    text += chunk
    if (text.length > EXCERPT_CHARS) break // the rest is not read: the socket is closed
  }
  return text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}...` : text
}

class HttpSink {
  #options
  #url
  #shownUrl // in messages: no query string
  #request
  #headers
  #batcher
  #refusedBytes = Infinity // the smallest body that got a 413
  #lastFailure = null // of a request to be tried again, until a 2xx
  #sleeps = new Map() // Retry-After timers -> what ends their wait
  #requests = new Set() // AbortControllers of requests in flight
  #counters = {
    pushed: 0,
    delivered: 0,
    rejected: 0,
    requests: 0,
    retries: 0,
    splits: 0,
    bytesSent: 0,
  }

  constructor (options, request) {
    this.#options = options
    this.#url = options.url
    this.#shownUrl = redactUrl(options.url)
    this.#request = request
    this.#headers = { 'content-type': CONTENT_TYPES[options.format], ...options.headers }
    if (options.compression === 'gzip') this.#headers['content-encoding'] = 'gzip'
    const json = options.format === 'json'
    this.#batcher = createBatcher({
      ...queueOptions(options),
      name: options.name,
      send: (events) => this.#send(events),
      // lingerMs 0: a push while nothing is in flight goes at once, and what
      // arrives during a request is the next batch (one request in flight).
      flushWhenIdle: options.lingerMs === 0,
      // '[' and ']' around records that each count one separator.
      maxBatchBytes: options.maxBatchBytes - (json ? 1 : 0),
      concurrency: 1,
      sizeOf,
      isRetriable,
    })
    // The sink registers itself, not its batcher: its close() also ends the
    // request in flight and a Retry-After wait.
    if (options.flushOnSignals) onShutdown(this, drainHooks(this.#batcher, options.shutdownTimeoutMs, (timeoutMs) => this.close({ timeoutMs })))
  }

  get closed () {
    return this.#batcher.closed
  }

  push (record) {
    this.#counters.pushed++
    let json
    try {
      json = JSON.stringify(record)
    } catch (cause) {
      return this.#refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(`${this.#options.name} push()`, 'the record must serialise to JSON', { cause }))
    }
    if (typeof json !== 'string') {
      return this.#refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(`${this.#options.name} push()`, `the record must serialise to JSON, got ${typeof record}`))
    }
    const event = new Event(json, performance.now())
    const promise = new Promise((resolve, reject) => {
      event.resolve = resolve
      event.reject = reject
    })
    // The batcher rejects what the sink did not settle: queue full, closed,
    // the delivery deadline.
    this.#batcher.push(event).catch((err) => this.#fail(event, err))
    return promise
  }

  flush (options) {
    return this.#batcher.flush(options)
  }

  // Sends everything held; at timeoutMs, what is left is rejected with
  // ERR_IO_HYGIENE_TIMEOUT. Then nothing of the sink is left running: a
  // request still in flight is aborted and a Retry-After wait ended.
  close (options) {
    const closing = this.#batcher.close(options)
    // Still drained on signals if the options were refused.
    if (this.#batcher.closed) offShutdown(this)
    return closing.finally(() => {
      if (!this.#batcher.closed) return
      for (const controller of this.#requests) controller.abort(new ERR_IO_HYGIENE_CLOSED(this.#options.name))
      for (const [timer, wake] of this.#sleeps) {
        clearTimeout(timer)
        wake()
      }
      this.#sleeps.clear()
    })
  }

  stats () {
    const { queued, queuedBytes, waiting, inFlight } = this.#batcher.stats()
    return { queued, queuedBytes, waiting, inFlight, ...this.#counters }
  }

  #refuse (err) {
    this.#counters.rejected++
    return Promise.reject(err)
  }

  #ok (events) {
    for (const event of events) {
      // Rejected by the batcher (its deadline, or close()'s) while the 2xx
      // was on its way, before the abort: a race of timers no test can order.
      /* c8 ignore next */
      if (event.done) continue
      event.done = true
      this.#counters.delivered++
      event.resolve()
    }
  }

  #fail (event, err) {
    if (event.done) return
    event.done = true
    this.#counters.rejected++
    event.reject(err)
  }

  // A Retry-After wait is ref'd: the pushes of the batch await it, and a
  // script must not exit with them unsettled (the delivery deadline bounds it).
  #sleep (delay) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#sleeps.delete(timer)
        resolve()
      }, delay)
      this.#sleeps.set(timer, resolve)
    })
  }

  // The batcher's send(): what an earlier attempt settled is not sent again.
  async #send (events) {
    const live = events.filter((event) => !event.done)
    if (live.length > 0) await this.#deliver(live)
  }

  async #deliver (events) {
    if (events.length > 1 && this.#bodyBytes(events) >= this.#refusedBytes) return this.#split(events)
    const { status, headers, excerpt, bytes } = await this.#post(events)
    if (status >= 200 && status < 300) {
      this.#lastFailure = null
      return this.#ok(events)
    }
    if (status === 413 && events.length > 1) {
      this.#refusedBytes = Math.min(this.#refusedBytes, bytes)
      return this.#split(events)
    }
    const o = this.#options
    const err = new ERR_IO_HYGIENE_HTTP_STATUS(`${o.method} ${this.#shownUrl}`, status, excerpt)
    err.status = status
    err.body = excerpt
    if (status === 429 || status >= 500) {
      this.#counters.retries++
      this.#lastFailure = err
      // Honoured: no retry sooner. A record whose deadline comes first could
      // not be delivered in time, so it is rejected now, with this cause.
      const wait = retryAfterMs(headers['retry-after'])
      if (wait > 0) {
        const retryAt = performance.now() + wait
        for (const event of events) {
          if (event.at + o.deliveryTimeoutMs <= retryAt) this.#fail(event, new ERR_IO_HYGIENE_DELIVERY_TIMEOUT(o.deliveryTimeoutMs, { cause: err }))
        }
        if (!events[events.length - 1].done) await this.#sleep(wait)
      }
      throw err
    }
    for (const event of events) this.#fail(event, err)
  }

  // Halves, in order; a failure of the first stops the second, and the
  // batcher retries both (minus what was delivered).
  async #split (events) {
    this.#counters.splits++
    const half = Math.ceil(events.length / 2)
    await this.#deliver(events.slice(0, half))
    await this.#deliver(events.slice(half))
  }

  #bodyBytes (events) {
    let bytes = this.#options.format === 'json' ? 1 : 0
    for (const event of events) bytes += event.bytes
    return bytes
  }

  // One request, its response read within requestTimeoutMs and never past
  // the oldest record's delivery deadline.
  async #post (events) {
    const o = this.#options
    const jsons = events.map((event) => event.json)
    let body = o.format === 'ndjson' ? jsons.join('\n') + '\n' : '[' + jsons.join(',') + ']'
    if (o.compression === 'gzip') body = await gzip(body)
    const bytes = this.#bodyBytes(events)
    const left = events[0].at + o.deliveryTimeoutMs - performance.now()
    const capped = left < o.requestTimeoutMs
    // Cut a millisecond early, so that the try's failure reaches the batcher
    // before its own deadline timer does.
    const timeoutMs = capped ? Math.max(1, Math.floor(left) - 1) : o.requestTimeoutMs
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(new ERR_IO_HYGIENE_TIMEOUT(`${o.method} ${this.#shownUrl}`, timeoutMs)), timeoutMs)
    timer.unref() // the request's socket keeps the process alive
    this.#requests.add(controller)
    this.#counters.requests++
    this.#counters.bytesSent += typeof body === 'string' ? bytes : body.length
    let res
    let excerpt = ''
    try {
      res = await this.#request(this.#url, { method: o.method, headers: this.#headers, body, signal: controller.signal })
      if (res.statusCode >= 200 && res.statusCode < 300) await res.body.dump()
      else excerpt = await excerptOf(res.body)
    } catch (err) {
      this.#counters.retries++ // the batcher tries again, within the deadline
      // A try cut short by the delivery deadline: the failure before it is
      // why the records were not delivered (the batcher's cause).
      if (capped && controller.signal.aborted && this.#lastFailure !== null) throw this.#lastFailure
      this.#lastFailure = err
      throw err
    } finally {
      clearTimeout(timer)
      this.#requests.delete(controller)
    }
    return { status: res.statusCode, headers: res.headers, excerpt, bytes }
  }
}

function createHttpSink (options) {
  const o = resolve(where, spec, options)
  if (o.url === null) throw new ERR_IO_HYGIENE_INVALID_OPTION(where, 'url', 'an http: or https: URL', undefined)
  checkLimits(where, o)
  // Loaded here, not with io-hygiene: undici is large. Its request() uses
  // the global dispatcher at each call, so an install() made later counts.
  const { request } = require('undici')
  return new HttpSink(o, request)
}

module.exports = { spec, createHttpSink, retryAfterMs }
