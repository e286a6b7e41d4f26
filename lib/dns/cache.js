'use strict'

const dns = require('node:dns')
const { AsyncResource } = require('node:async_hooks')

// The channels load with the first answer, as the LRU does: nothing is
// published before it, and node:diagnostics_channel is a builtin a bare
// process has not loaded yet.
let channels = null

const kInspect = Symbol('io-hygiene.dns.inspect')

// Orders, as Node names them; index 0 is "the process default".
const ORDER_VERBATIM = 1
const ORDER_IPV4FIRST = 2
const ORDER_IPV6FIRST = 3
const SLOTS = 24 // 3 families x 8 hint combinations

// One cached answer (or error) for one (hostname, family, hints).
class Entry {
  fresh = false // answer is within its TTL (kept by Expiry, no clock read)
  dueAt = 0 // when it stops being fresh, while in Expiry's heap
  heapIndex = -1 // its place in Expiry's heap, -1 when not there
  released = false // left the LRU: whatever is still in flight keeps nothing
  answer = null // [{ address, family }] in resolver order
  ordered = [null, null, null, null] // answer per order, built on first use
  error = null
  errorUntil = 0 // a cached error is served until then
  staleUntil = 0
  refreshing = false
  retryAt = 0
  waiters = null // callers of the first resolution, while it is in flight
  route = null // the name DNS answers for it, once learned (upstream.js)
  ttlMs = 0 // how long its answer was last kept fresh
  requeryAt = 0 // a failed connection re-resolves it no sooner than this
}

// A caller waiting for a resolution, answered in the async context of its own
// call: the resolution answers in whichever context started it (or a
// refresh's, or a shared hosts-file read's). Only waiters pay for it; hits,
// stale answers and cached errors reply at once, in the caller's own context.
// An AsyncResource per waiter, not AsyncResource.bind(): bind() also makes a
// closure and defines two properties on it, which costs a burst of merged
// misses far more (tens of times, measured on Node 20 and 24).
class Waiter extends AsyncResource {
  constructor (reply) {
    super('IO_HYGIENE_DNS_WAITER')
    this.reply = reply
  }

  answer (err, entry) {
    this.runInAsyncScope(this.reply, null, err, entry)
  }
}

class DnsCache {
  // Made with the first answer: lru-cache loads then, not when a service
  // starts (it is most of what install() would cost a process's start).
  #lru = null
  #upstream = null
  #systemLookup
  #options
  #timer = null
  #expiry = null // made with the LRU: nothing expires before a first answer
  #closed = false
  #watchConnects
  #unwatch = null
  #counters = {
    hits: 0,
    misses: 0,
    coalesced: 0,
    staleServed: 0,
    negativeHits: 0,
    fallbacks: 0,
    refreshes: 0,
    upstreamLookups: 0,
    ttlQueries: 0,
    refreshQueries: 0,
    refreshesKept: 0,
    connectFailures: 0,
    requeries: 0,
    searchTries: 0,
    searchLearned: 0,
  }

  #errors = Object.create(null)
  // dns.lookup latency by source. What the cache answers (hit, stale,
  // negative) reads no clock and records 0: those are counts. Resolutions
  // are timed with the clock reads the slow path makes anyway. Taken with the
  // upstream (#upstreamOf): nothing is answered or timed before a first
  // resolution, so the hot path needs no check (one field load, recordZero()).
  #hitLatency = null
  #latency = null

  constructor (options, systemLookup, watchConnects = false) {
    this.#options = options
    this.#systemLookup = systemLookup
    this.#watchConnects = watchConnects
  }

  get closed () {
    return this.#closed
  }

  // The hot path: the fresh entry of (hostname, slot), or undefined. Names
  // are kept with ASCII letters in lower case (DNS compares names so, RFC
  // 4343: LOCALHOST shares localhost's entry); other letters stay as written,
  // since Node's UTS-46 mapping of them can make two spellings two domains
  // (xẞy and xßy, ΑΣ and ας). Only a name not found as spelled pays for
  // folding it.
  hit (hostname, slot) {
    const lru = this.#lru
    if (lru === null) return undefined
    let record = lru.get(hostname)
    if (record === undefined) {
      const key = foldAscii(hostname)
      if (key === hostname || (record = lru.get(key)) === undefined) return undefined
    }
    const entry = record[slot]
    if (entry === undefined || entry.fresh !== true) return undefined
    this.#counters.hits++
    this.#hitLatency.recordZero()
    if (channels.dnsLookup.hasSubscribers) publish(hostname, slot, 'hit', null)
    return entry
  }

  // Everything else: answer (hostname, slot) and call reply(err, entry),
  // synchronously from the cache or later from upstream; the caller owns
  // asynchrony and shaping. Returns false, without calling reply, for what the
  // cache does not take (IP literals, a closed cache).
  query (hostname, slot, reply) {
    if (this.#closed) return false
    // A trailing dot stays part of the key: search domains apply to
    // `name` and not to `name.`, so the two can have different answers.
    const key = foldAscii(hostname)
    let record = this.#lru?.get(key)
    if (record === undefined) {
      if (require('./ip').isIP(hostname) !== 0) return false
      record = new Array(SLOTS)
      this.#entries().set(key, record)
    }
    this.#slow(key, hostname, record, slot, reply)
    return true
  }

  // `key` is the name as cached; `hostname` the caller's spelling, which is
  // what is resolved (as Node would resolve it), published on the channels
  // and echoed in errors (by index.js's lookup functions). Spellings that
  // share a key differ only in ASCII case, which no resolver tells apart.
  #slow (key, hostname, record, slot, reply) {
    const now = performance.now()
    let entry = record[slot]
    if (entry === undefined) entry = record[slot] = new Entry()
    if (entry.waiters !== null) {
      this.#counters.coalesced++
      if (channels.dnsLookup.hasSubscribers) publish(hostname, slot, 'coalesced', null)
      entry.waiters.push(new Waiter(reply))
      return
    }
    // Callers ask hit() first, so an answer here is past its TTL.
    if (entry.answer !== null) {
      if (now < entry.staleUntil) {
        this.#counters.staleServed++
        this.#latency.stale.recordZero()
        if (channels.dnsLookup.hasSubscribers) publish(hostname, slot, 'stale', null)
        if (!entry.refreshing && now >= entry.retryAt) this.#fetch(hostname, slot, entry, now)
        return reply(null, entry)
      }
      entry.answer = null
    }
    if (entry.error !== null && now < entry.errorUntil) {
      this.#counters.negativeHits++
      this.#latency.negative.recordZero()
      if (channels.dnsLookup.hasSubscribers) publish(hostname, slot, 'negative', entry.error)
      return reply(entry.error, null)
    }
    this.#counters.misses++
    if (channels.dnsLookup.hasSubscribers) publish(hostname, slot, 'miss', null)
    entry.error = null
    entry.waiters = [new Waiter(reply)]
    // A refresh still running (the answer went past staleTtlMs meanwhile)
    // answers these callers: never two resolutions of one entry at once.
    if (!entry.refreshing) this.#fetch(hostname, slot, entry, now)
  }

  // A connection to `address`, which the cache gave out for `hostname`,
  // could not be made: the name may have moved (a redeployed upstream's old
  // address refuses or drops connections while its record's TTL runs). Each
  // entry of the name whose answer holds the address is resolved again now,
  // and lookups wait for that answer instead of getting the dead address
  // (merged into the one resolution; if it fails, serve-stale gives them the
  // old answer, as any refresh would). At most once per entry per minTtlMs,
  // the cache's floor between two resolutions of a name: a name that still
  // answers the same address costs one resolution per minTtlMs however many
  // connections fail. Returns whether a resolution started or was joined.
  connectFailed (hostname, address) {
    if (this.#closed || this.#lru === null || typeof hostname !== 'string' || typeof address !== 'string') return false
    const record = this.#lru.peek(foldAscii(hostname))
    if (record === undefined) return false
    let now = 0
    let counted = false
    let requeried = false
    for (let slot = 0; slot < SLOTS; slot++) {
      const entry = record[slot]
      // An entry without an answer (a first resolution in flight, an error)
      // gave nothing out.
      if (entry === undefined || entry.answer === null || !holds(entry.answer, address)) continue
      if (!counted) {
        counted = true
        this.#counters.connectFailures++
        now = performance.now()
      }
      if (entry.waiters !== null) {
        requeried = true // already waiting for a new answer
        continue
      }
      if (now < entry.requeryAt) continue
      entry.requeryAt = now + this.#options.minTtlMs
      this.#counters.requeries++
      requeried = true
      this.#expiry.cancel(entry)
      entry.waiters = []
      // A refresh in flight answers them: one resolution per entry.
      if (!entry.refreshing) this.#fetch(hostname, slot, entry, now)
    }
    return requeried
  }

  // `started` is the clock as the slow path read it: the resolution's latency
  // is measured from there to the clock read its answer makes.
  #fetch (hostname, slot, entry, started) {
    const family = FAMILY_OF_SLOT[slot >> 3]
    const hints = hintsOf(slot & 7)
    const options = this.#options
    const refresh = entry.answer !== null
    if (refresh) this.#counters.refreshes++
    entry.refreshing = true
    this.#upstreamOf().resolve(hostname, family, hints, entry, (err, addresses) => {
      const now = performance.now()
      entry.refreshing = false
      if (err) {
        this.#latency.error.record(now - started)
        this.#errors[err.code] = (this.#errors[err.code] ?? 0) + 1
        if (channels.dnsError.hasSubscribers) channels.dnsError.publish({ hostname, family, hints, error: err, refresh })
        if (entry.answer !== null && now < entry.staleUntil && !require('./upstream').isNotFound(err)) {
          // Serve-stale (RFC 8767): keep the last good answer, retry later.
          entry.retryAt = now + options.errorTtlMs
        } else {
          this.#expiry.cancel(entry)
          entry.answer = null
          entry.error = err
          entry.errorUntil = now + options.errorTtlMs
        }
      } else {
        this.#latency.upstream.record(now - started)
        entry.answer = addresses
        entry.ordered = [null, null, null, null]
        entry.error = null
        // Fresh until the TTL query answers (it is bounded by queryTimeoutMs).
        this.#expiry.cancel(entry)
        entry.fresh = true
        entry.staleUntil = Infinity
      }
      if (channels.dnsRefresh.hasSubscribers && refresh) channels.dnsRefresh.publish({ hostname, family, hints, error: err })
      const waiters = entry.waiters
      entry.waiters = null
      if (waiters !== null) {
        for (let i = 0; i < waiters.length; i++) {
          if (entry.answer !== null) waiters[i].answer(null, entry)
          else waiters[i].answer(err, null)
        }
      }
      // Evicted while in flight: its callers are answered, the cache keeps nothing.
      if (entry.released) this.#drop(entry)
    }, (ttlMs, source) => {
      if (entry.released) return
      let ttl = ttlMs
      if (source === 'dns') ttl = Math.min(Math.max(ttlMs, options.minTtlMs), options.maxTtlMs)
      else if (source !== 'pending') this.#counters.fallbacks++
      entry.ttlMs = ttl
      const at = performance.now() + ttl
      entry.staleUntil = at + options.staleTtlMs
      if (ttl > 0) this.#expiry.schedule(entry, at)
      else this.#expiry.cancel(entry)
    })
  }

  // Whatever leaves it (evicted, swept, cleared) is released at once, so
  // maxEntries bounds what the cache keeps reachable. The sweep starts with
  // it: a cache that holds nothing has nothing to sweep.
  #entries () {
    if (this.#lru === null) {
      channels ??= require('../core/diagnostics').channels
      const { LRUCache } = require('lru-cache')
      this.#lru = new LRUCache({ max: this.#options.maxEntries, dispose: (record) => this.#release(record) })
      this.#expiry = new (require('./expiry').Expiry)()
      this.#timer = setInterval(() => this.#sweep(), this.#options.sweepIntervalMs)
      this.#timer.unref()
      // Failed connections matter once there is an answer to doubt: the
      // socket whose lookup is this first one is not watched, and its answer
      // is as new as any re-resolution's would be.
      if (this.#watchConnects) this.#unwatch = require('./connect-failures').watchConnectFailures(this)
    }
    return this.#lru
  }

  // What asks the resolver (and reads the hosts file), loaded with the first
  // name the cache has not seen: a process pays at start only for the hot path.
  #upstreamOf () {
    if (this.#upstream === null) {
      const { Upstream } = require('./upstream')
      const { histogram } = require('../metrics/registry')
      this.#upstream = new Upstream(this.#options, this.#systemLookup, this.#counters)
      this.#hitLatency = histogram('dns.lookup', { source: 'hit' })
      this.#latency = {
        stale: histogram('dns.lookup', { source: 'stale' }),
        negative: histogram('dns.lookup', { source: 'negative' }),
        upstream: histogram('dns.lookup', { source: 'upstream' }),
        error: histogram('dns.lookup', { source: 'error' }),
      }
    }
    return this.#upstream
  }

  #sweep () {
    const now = performance.now()
    const dead = []
    for (const [hostname, record] of this.#lru.entries()) {
      let live = false
      for (let i = 0; i < SLOTS; i++) {
        const entry = record[i]
        if (entry === undefined) continue
        const keep = entry.waiters !== null || entry.refreshing ||
          (entry.answer !== null && now < entry.staleUntil) ||
          (entry.error !== null && now < entry.errorUntil)
        if (keep) live = true
        else {
          record[i] = undefined
          this.#drop(entry)
        }
      }
      if (!live) dead.push(hostname)
    }
    for (const hostname of dead) this.#lru.delete(hostname)
  }

  #release (record) {
    for (let i = 0; i < SLOTS; i++) {
      const entry = record[i]
      if (entry !== undefined) this.#drop(entry)
    }
  }

  // Out of the heap and holding nothing: a resolution still in flight may
  // reach it, but it is no longer the cache's.
  #drop (entry) {
    this.#expiry.cancel(entry)
    entry.released = true
    entry.answer = null
    entry.ordered = [null, null, null, null]
    entry.error = null
  }

  // For tests: the size of the expiry heap and the entry of (hostname, slot),
  // read without counting a lookup or touching the LRU order.
  [kInspect] (hostname, slot) {
    return { scheduled: this.#expiry?.size ?? 0, entries: this.#lru?.size ?? 0, entry: this.#lru?.peek(foldAscii(hostname))?.[slot] }
  }

  stats () {
    return {
      ...this.#counters,
      upstreamQueries: this.#counters.upstreamLookups + this.#counters.ttlQueries + this.#counters.refreshQueries,
      errors: { ...this.#errors },
      entries: this.#lru?.size ?? 0,
    }
  }

  clear () {
    this.#lru?.clear()
    this.#expiry?.clear()
  }

  close () {
    this.#closed = true
    this.#unwatch?.()
    this.#unwatch = null
    clearInterval(this.#timer)
    this.clear()
  }
}

function holds (answer, address) {
  for (let i = 0; i < answer.length; i++) if (answer[i].address === address) return true
  return false
}

// `name` with ASCII letters in lower case, and nothing else changed.
function foldAscii (name) {
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i)
    if (c >= 65 && c <= 90) return name.replace(/[A-Z]+/g, lower)
  }
  return name
}

function lower (letters) {
  return letters.toLowerCase()
}

// The answer of `entry` in the order asked for.
function ordered (entry, order) {
  let list = entry.ordered[order]
  if (list !== null) return list
  const answer = entry.answer
  if (order === ORDER_VERBATIM) list = answer
  else {
    const first = order === ORDER_IPV4FIRST ? 4 : 6
    list = answer.filter((a) => a.family === first).concat(answer.filter((a) => a.family !== first))
  }
  entry.ordered[order] = list
  return list
}

function resultOrder (code) {
  if (code !== 0) return code
  const name = dns.getDefaultResultOrder()
  return name === 'ipv4first' ? ORDER_IPV4FIRST : name === 'ipv6first' ? ORDER_IPV6FIRST : ORDER_VERBATIM
}

// A slot is family index * 8 + hints index: (0|4|6) x (ADDRCONFIG, V4MAPPED, ALL).
const FAMILY_OF_SLOT = [0, 4, 6]

function hintsOf (index) {
  return ((index & 1) !== 0 ? dns.ADDRCONFIG : 0) | ((index & 2) !== 0 ? dns.V4MAPPED : 0) |
    ((index & 4) !== 0 ? dns.ALL : 0)
}

function publish (hostname, slot, source, error) {
  channels.dnsLookup.publish({ hostname, family: FAMILY_OF_SLOT[slot >> 3], hints: hintsOf(slot & 7), source, error })
}

// Node creates a new error for every failed lookup; so do we, with the same
// prototype (Node's internal subclass of Error), message and properties, in
// the same order, and the caller's own spelling of the name wherever Node
// echoes it (message, `hostname`, the stack's first line). The stack is the
// original's, which starts in Node's dns module as Node's own does: no frame
// of this file.
function copyError (err, hostname) {
  let message = err.message
  const asked = err.hostname
  if (typeof asked === 'string' && asked !== hostname && message.endsWith(` ${asked}`)) {
    message = message.slice(0, message.length - asked.length) + hostname
  }
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  const copy = new Error(message)
  Error.stackTraceLimit = limit
  Object.setPrototypeOf(copy, Object.getPrototypeOf(err))
  const stack = err.stack
  const head = `${err.name}: ${err.message}`
  if (typeof stack === 'string' && stack.startsWith(head)) copy.stack = `${err.name}: ${message}${stack.slice(head.length)}`
  for (const key of Object.keys(err)) copy[key] = key === 'hostname' ? hostname : err[key]
  return copy
}

module.exports = { DnsCache, ordered, resultOrder, copyError, kInspect }
