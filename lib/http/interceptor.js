'use strict'

const { errors: undiciErrors } = require('./undici')
const { channels } = require('../core/diagnostics')
const { isReplayable, isIterable, BodyCopy } = require('./replayable-body')
const { headerValue, headerList, parseRetryAfter } = require('./headers')
const { ConnectionQueue } = require('./connection-queue')
// Real time, whatever fake timers a test installs (lib/core/timers.js).
const { setTimeout, clearTimeout, now: clock } = require('../core/timers')

// A request is sent again only where the server never saw it, after Go's
// net/http (Transport.shouldRetryRequest) and RFC 9110 section 9.2.2:
// - staleSocket (our own Agent only, whose sockets we see): a request that
//   failed on a reused keep-alive socket before any byte of a response came
//   back, when it is idempotent, carries an Idempotency-Key, or provably was
//   not written (the socket took no byte of it). The server closed the
//   socket as we wrote; the request never ran.
// - connect: an idempotent request whose connection could not be made.
// - status, only with statusRetries: an idempotent request answered 429,
//   502, 503 or 504, after Retry-After or a jittered exponential backoff.
//   The server sees it again, so it is the application's choice.
// Every retry needs a body that can be sent again and a token from the
// origin's retry budget.
const kAttempt = Symbol('io-hygiene.http.attempt')

const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE'])
const RETRY_STATUS = new Set([429, 502, 503, 504])
const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ETIMEDOUT'])
const SOCKET_ERRORS = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])
const TIMEOUT_KINDS = { UND_ERR_CONNECT_TIMEOUT: 'connect', UND_ERR_HEADERS_TIMEOUT: 'headers', UND_ERR_BODY_TIMEOUT: 'body' }

// `tracked`: on our own Agent, whose pools say which socket each attempt is
// written on (agent.js); false on an application's dispatcher, whose sockets
// we cannot see.
function createRetryInterceptor (cfg, stats, originOf, tracked) {
  // A connection cap is ours only on our own Agent: so is the wait for one.
  const queue = tracked ? new ConnectionQueue(cfg.headersTimeoutMs) : null
  return (dispatch) => function dispatchSafely (opts, handler) {
    stats.requests++
    // An upgrade or CONNECT is never retried, and owns its socket after.
    if (opts.upgrade || opts.method === 'CONNECT') return dispatch(opts, handler)
    const origin = originOf(opts.origin)
    // The one clock read of a dispatch: the budget's and the request's start.
    const now = clock()
    origin.budget.request(now)
    return new SafeRequest(dispatch, opts, handler, cfg, stats, origin, queue, now).start()
  }
}

// The controller the caller's handler holds for the whole request; each
// attempt has undici's own controller behind it.
class Controller {
  #request
  #paused = false
  #aborted = false
  #reason = null

  constructor (request) {
    this.#request = request
  }

  pause () {
    this.#paused = true
    this.#request.attempt?.pause()
  }

  resume () {
    this.#paused = false
    this.#request.attempt?.resume()
  }

  abort (reason) {
    this.#aborted = true
    this.#reason = reason
    this.#request.abort(reason)
  }

  get paused () { return this.#paused }
  get aborted () { return this.#aborted }
  get reason () { return this.#reason }
  // Writable, as undici's own controller's are: an interceptor of the
  // application's (undici's decompress, in some releases) assigns them while
  // a response comes in, so on an attempt that exists.
  get rawHeaders () { return this.#request.attempt?.rawHeaders }
  set rawHeaders (value) { this.#request.attempt.rawHeaders = value }
  get rawTrailers () { return this.#request.attempt?.rawTrailers }
  set rawTrailers (value) { this.#request.attempt.rawTrailers = value }
}

class SafeRequest {
  attempt = null // undici's controller of the attempt being written
  conn = null // set by the pool's client that took the attempt (agent.js)
  waitingSince = 0 // set by the connection queue
  #dispatch
  #opts
  #handler
  #cfg
  #stats
  #origin
  #queue
  #controller = new Controller(this)
  #replayable = true
  #copy = null // a streamed body's copy, while a retry may need it
  #started = false // an attempt was started: its body may have been read
  #retries = 0
  #startedCaller = false
  #responded = false
  #aborted = false
  #done = false
  #retryAfterBody = null // the retry decided on a 429/5xx, taken when its body ends
  #timer = null
  #deadline = null
  #deadlineError = null
  #error = null // what ended it
  // The socket of the attempt being written, and what it held then.
  #socket = null // until the attempt ends
  #written = null // until the next attempt
  #idleMs = -1
  #bytesWritten = 0
  #bytesRead = 0
  #startedAt

  constructor (dispatch, opts, handler, cfg, stats, origin, queue, startedAt) {
    this.#dispatch = dispatch
    this.#opts = { ...opts, headers: headerList(opts.headers), [kAttempt]: this }
    this.#handler = handler
    this.#cfg = cfg
    this.#stats = stats
    this.#origin = origin
    this.#queue = queue
    this.#startedAt = startedAt
  }

  start () {
    const { requestTimeoutMs, maxReplayBodyBytes } = this.#cfg
    if (requestTimeoutMs !== null && this.#opts.signal == null) {
      this.#deadline = setTimeout(() => this.#onDeadline(), requestTimeoutMs)
      this.#deadline.unref()
    }
    const body = this.#opts.body
    if (isReplayable(body)) return this.#send(this.#startedAt)
    // A stream or async iterable (what fetch() hands on for every body) is
    // sent as it comes. One of a known small length is copied as it goes
    // when a retry may follow its first byte; any other is sent again only
    // if its attempt never started (a connection that could not be made),
    // when undici has not read it.
    this.#replayable = false
    const length = isIterable(body) ? Number(headerValue(this.#opts.headers, 'content-length')) : NaN
    if (length <= maxReplayBodyBytes && this.#retriesAfterStart()) {
      this.#copy = new BodyCopy(body, length, undiciErrors.RequestContentLengthMismatchError)
      this.#replayable = true
    }
    return this.#send(this.#startedAt)
  }

  // Whether a retry may come after an attempt started writing.
  #retriesAfterStart () {
    if (this.#cfg.maxRetries === 0) return false
    // On our own Agent, a stale socket; anywhere, a status, when asked for.
    return this.#queue !== null || (this.#cfg.statusRetries && IDEMPOTENT.has(this.#opts.method))
  }

  // `now`: the dispatch's own clock read for a first try; a retry reads anew.
  #send (now = clock()) {
    this.attempt = null
    this.conn = null
    this.#socket = null
    this.#written = null
    if (this.#copy !== null) this.#opts.body = this.#copy.attempt()
    if (this.#queue !== null) {
      this.#queue.delete(this) // a retry waits again, from now
      this.#queue.add(this, now)
    }
    return this.#dispatch(this.#opts, this)
  }

  // The caller aborted.
  abort (reason) {
    if (this.#done) return
    this.#aborted = true
    if (this.attempt !== null) {
      this.attempt.abort(reason)
    } else {
      this.#fail(reason) // waiting to retry, or queued: end it now
    }
  }

  onRequestStart (controller, context) {
    if (this.#done) {
      controller.abort(this.#error) // it was ended while queued
      return
    }
    this.attempt = controller
    this.#started = true
    if (this.#queue !== null) {
      this.#queue.delete(this)
      // Our pool's client took this attempt and is writing it on its socket.
      const s = this.conn.state
      this.#socket = s
      this.#written = s
      this.#bytesWritten = s.socket.bytesWritten
      this.#bytesRead = s.socket.bytesRead
      this.#idleMs = this.#origin.sockets.started(s)
    }
    if (!this.#startedCaller) {
      this.#startedCaller = true
      this.#handler.onRequestStart?.(this.#controller, context)
    }
  }

  onResponseStarted () {
    if (!this.#responded) this.#handler.onResponseStarted?.()
  }

  onResponseStart (controller, statusCode, headers, statusMessage) {
    if (headers.connection === 'close' && this.#socket !== null) this.#socket.closing = true
    if (this.#cfg.statusRetries && !this.#responded && RETRY_STATUS.has(statusCode)) {
      const delayMs = this.#statusRetryDelay(headers['retry-after'])
      if (delayMs !== null && this.#mayRetry('status', IDEMPOTENT.has(this.#opts.method))) {
        this.#retryAfterBody = { reason: 'status', delayMs, statusCode }
        return // its body is read and dropped; the retry starts when it ends
      }
    }
    this.#responded = true
    return this.#handler.onResponseStart?.(this.#controller, statusCode, headers, statusMessage)
  }

  onResponseData (controller, chunk) {
    if (this.#retryAfterBody !== null) return
    return this.#handler.onResponseData?.(this.#controller, chunk)
  }

  onResponseEnd (controller, trailers) {
    const endedAt = this.#attemptEnded()
    if (this.#retryAfterBody !== null) return this.#retry(this.#retryAfterBody)
    this.#finish()
    this.#origin.latency.ok.record(endedAt - this.#startedAt)
    this.#handler.onResponseEnd?.(this.#controller, trailers)
  }

  onResponseError (controller, err) {
    const endedAt = this.#attemptEnded()
    if (this.#done) return
    if (err !== this.#deadlineError) {
      const kind = TIMEOUT_KINDS[err?.code]
      if (kind !== undefined) this.#stats.timeouts[kind]++
    }
    if (!this.#responded && !this.#aborted) {
      const retry = this.#errorRetry(err)
      if (retry !== null) return this.#retry(retry)
    }
    this.#fail(err, endedAt)
  }

  // The time the attempt ended: the read that marks its socket idle, so
  // the latency histogram adds no clock read of its own.
  #attemptEnded () {
    const s = this.#socket
    if (s === null) return clock()
    this.#socket = null
    return this.#origin.sockets.ended(s)
  }

  // Which retry an attempt's error allows, if any.
  #errorRetry (err) {
    const code = err?.code
    const idempotent = IDEMPOTENT.has(this.#opts.method)
    if (this.attempt === null) {
      // Never written: the connection failed.
      if (CONNECT_ERRORS.has(code) && this.#mayRetry('connect', idempotent)) {
        return { reason: 'connect', delayMs: this.#backoff(), error: err }
      }
      return null
    }
    if (!SOCKET_ERRORS.has(code)) return null
    const keyed = () => headerValue(this.#opts.headers, 'idempotency-key') !== undefined
    // An application's dispatcher: which socket failed, and whether it was
    // reused or took any byte, is unknown; the server may have run it.
    if (this.#queue === null) return null
    const s = this.#written
    if (this.#idleMs < 0 || s.socket.bytesRead !== this.#bytesRead) return null
    // A reused socket failed before any response byte: the server closed it
    // as we wrote. Learn its idle close even when we may not retry.
    this.#origin.sockets.learn(this.#idleMs)
    const safe = idempotent || s.socket.bytesWritten === this.#bytesWritten || keyed()
    if (!this.#mayRetry('staleSocket', safe)) return null
    return { reason: 'staleSocket', delayMs: 0, error: err }
  }

  #mayRetry (reason, safe) {
    if (!safe || (this.#started && !this.#replayable) || this.#retries >= this.#cfg.maxRetries) return false
    if (this.#origin.budget.tryRetry(clock())) return true
    this.#stats.budgetRefusals++
    if (channels.httpBudget.hasSubscribers) {
      channels.httpBudget.publish({ origin: this.#origin.key, method: this.#opts.method, path: this.#opts.path, reason })
    }
    return false
  }

  // Full jitter (AWS's "Exponential Backoff and Jitter"): spreads the retries
  // of many callers that failed together.
  #backoff () {
    const ceiling = Math.min(this.#cfg.maxRetryDelayMs, this.#cfg.retryBaseDelayMs * 2 ** this.#retries)
    return Math.floor(Math.random() * ceiling)
  }

  // Retry-After in seconds or as an HTTP date; null when it asks for a wait
  // longer than maxRetryDelayMs: the caller gets the response instead.
  #statusRetryDelay (retryAfter) {
    const ms = parseRetryAfter(retryAfter)
    if (ms === null) return this.#backoff()
    return ms <= this.#cfg.maxRetryDelayMs ? ms : null
  }

  #retry ({ reason, delayMs, statusCode, error }) {
    this.#retryAfterBody = null
    this.#queue?.delete(this) // not waiting for a connection while it backs off
    this.#retries++
    this.#stats.retries[reason]++
    if (channels.httpRetry.hasSubscribers) {
      channels.httpRetry.publish({
        origin: this.#origin.key, method: this.#opts.method, path: this.#opts.path, reason, attempt: this.#retries, delayMs, statusCode, error,
      })
    }
    this.attempt = null
    // The caller must be able to abort while we wait.
    if (!this.#startedCaller) {
      this.#startedCaller = true
      this.#handler.onRequestStart?.(this.#controller, undefined)
      if (this.#done) return
    }
    if (delayMs === 0) {
      queueMicrotask(() => this.#resend())
      return
    }
    // Ref'd: the caller awaits this wait, and a script whose only work left
    // is this request must not exit with its promise unsettled.
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.#resend()
    }, delayMs)
  }

  // undici's dispatch() never throws: it reports to onResponseError.
  #resend () {
    if (!this.#done) this.#send()
  }

  #onDeadline () {
    this.#deadline = null
    this.#stats.timeouts.deadline++
    const { HeadersTimeoutError, BodyTimeoutError } = undiciErrors
    const message = `Request deadline of ${this.#cfg.requestTimeoutMs} ms (requestTimeoutMs) reached`
    this.#deadlineError = this.#responded ? new BodyTimeoutError(message) : new HeadersTimeoutError(message)
    this.#aborted = true
    if (this.attempt !== null) {
      this.attempt.abort(this.#deadlineError)
    } else {
      this.#fail(this.#deadlineError)
    }
  }

  // Called by the connection queue: no connection came in time.
  waitedTooLong (ms) {
    this.#stats.timeouts.queue++
    this.#fail(new undiciErrors.HeadersTimeoutError(`No connection within headersTimeoutMs (${ms} ms): the origin's connections are all busy`))
  }

  #finish () {
    this.#done = true
    this.#copy?.settle(this.#error)
    this.#queue?.delete(this)
    if (this.#timer !== null) {
      clearTimeout(this.#timer)
      this.#timer = null
    }
    if (this.#deadline !== null) {
      clearTimeout(this.#deadline)
      this.#deadline = null
    }
  }

  #fail (err, now = clock()) {
    this.#error = err
    this.#finish()
    const latency = this.#origin.latency
    const outcome = TIMEOUT_KINDS[err?.code] !== undefined ? latency.timeout : latency.error
    outcome.record(now - this.#startedAt)
    this.#handler.onResponseError?.(this.#controller, err)
  }
}

module.exports = { createRetryInterceptor, kAttempt }
