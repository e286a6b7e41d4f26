'use strict'

const { Agent, Pool, Client, Dispatcher, isFormDataLike, formData } = require('./undici')
const { LRUCache } = require('lru-cache')
const { OriginSockets } = require('./origin-sockets')
const { RetryBudget } = require('./retry-budget')
const { createRetryInterceptor, kAttempt } = require('./interceptor')
const { histogram } = require('../metrics/registry')

// Per-origin state (retry budget, sockets, the learned idle close), bounded
// like undici bounds nothing: the least recently used origin is forgotten.
const MAX_ORIGINS = 1024

// Per-origin state (retry budget, latency histograms and, on our own Agent,
// the sockets), got through originOf(origin).
function createOrigins (cfg, stats, trackSockets) {
  const origins = new LRUCache({ max: MAX_ORIGINS })
  let lastKey = null // most requests go where the one before went
  let lastState = null
  return (origin) => {
    const key = typeof origin === 'string' ? origin : String(origin)
    if (key === lastKey) return lastState
    let state = origins.get(key)
    if (state === undefined) {
      state = {
        key,
        budget: new RetryBudget(cfg.retryBudgetPercent, cfg.retryBudgetMinPerSecond),
        sockets: trackSockets ? new OriginSockets(key, stats, cfg.learnIdleClose) : null,
        // http.request histograms, got once per origin; the registry caps
        // the label sets, so many origins end up sharing "other".
        latency: {
          ok: histogram('http.request', { origin: key, outcome: 'ok' }),
          error: histogram('http.request', { origin: key, outcome: 'error' }),
          timeout: histogram('http.request', { origin: key, outcome: 'timeout' }),
        },
      }
      origins.set(key, state)
    }
    lastKey = key
    lastState = state
    return state
  }
}

// One undici Agent with the interceptors composed onto it. Its pools make
// their clients through trackedClient(), which learns which socket each
// attempt was written on: what the retry rules and the idle-close learning
// need to know, and what undici's handler API does not say.
function createAgent (cfg, stats) {
  const originOf = createOrigins(cfg, stats, true)

  const clientFactory = (sockets) => (origin, opts) => {
    const conn = { state: null, sockets }
    const connect = opts.connect
    return new TrackedClient(origin, {
      ...opts,
      connect (connectOpts, callback) {
        return connect(connectOpts, (err, socket) => {
          if (!err) {
            stats.connectionsOpened++
            conn.state = sockets.add(socket)
          }
          callback(err, socket)
        })
      },
    }, conn)
  }

  const agent = new Agent({
    connections: cfg.connections,
    keepAliveTimeout: cfg.keepAliveTimeoutMs,
    connectTimeout: cfg.connectTimeoutMs,
    headersTimeout: cfg.headersTimeoutMs,
    bodyTimeout: cfg.bodyTimeoutMs,
    // HTTP/1.1, as undici 7 spoke by default: Node 22's and 24's fetch reach
    // us through undici 8's wrapper for older readers, which asks for
    // HTTP/1.1, and undici 8 keeps a separate pool per origin for that. One
    // protocol keeps one pool, one connection cap and one socket model per
    // origin, whichever reader sent the request.
    allowH2: false,
    factory: (origin, opts) => new Pool(origin, { ...opts, factory: clientFactory(originOf(origin).sockets) }),
  })
  const dispatcher = agent.compose(createRetryInterceptor(cfg, stats, originOf, true))
  return { agent, dispatcher }
}

// The application's own dispatcher (a ProxyAgent, an mTLS Agent) with the
// retry interceptor composed onto it, as undici's compose() does: its
// sockets, pools, timeouts, proxy and TLS stay its own, and we cannot see
// them, so neither the connection queue nor the idle-close learning applies.
// close() and destroy() reach the application's dispatcher, as they would
// without io-hygiene.
function composeOn (theirs, cfg, stats) {
  const interceptor = createRetryInterceptor(cfg, stats, createOrigins(cfg, stats, false), false)
  // Theirs may come from another copy of undici: its own compose() knows its
  // private origin field.
  return typeof theirs.compose === 'function' ? theirs.compose(interceptor) : Dispatcher.prototype.compose.call(theirs, interceptor)
}

class TrackedClient extends Client {
  #conn

  constructor (origin, opts, conn) {
    super(origin, opts)
    this.#conn = conn
  }

  dispatch (opts, handler) {
    const attempt = opts[kAttempt]
    if (attempt !== undefined) {
      attempt.conn = this.#conn
    } else if (this.#conn.state !== null) {
      // An upgrade or CONNECT: it takes the socket over. (On a fresh socket
      // there is nothing to undo: it was never used, so never armed.)
      this.#conn.sockets.untrack(this.#conn.state)
    }
    if (isFormDataLike(opts.body)) opts = { ...opts, body: ownFormData(opts.body) }
    return super.dispatch(opts, handler)
  }
}

// undici takes only a FormData of its own module instance. Without
// io-hygiene, an application's copy of undici sends through its own Agent,
// which takes that copy's FormData; through ours, the same entries go in a
// FormData of our undici (a new multipart boundary, the same parts).
function ownFormData (body) {
  const { FormData, isFormData } = formData()
  if (isFormData(body)) return body
  const copy = new FormData()
  for (const [name, value] of body) {
    if (typeof value === 'string') copy.append(name, value)
    else copy.append(name, value, value.name)
  }
  return copy
}

module.exports = { createAgent, composeOn }
