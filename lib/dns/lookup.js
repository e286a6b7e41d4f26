'use strict'

// The functions that stand in for dns.lookup and dns.promises.lookup: the
// forms the cache takes are answered from it, with Node's arity, asynchrony,
// error shape and util.promisify() result; every other form goes to the
// original untouched.

const dns = require('node:dns')
const { ordered, resultOrder, copyError } = require('./cache')
// The real setImmediate, as io-hygiene loaded: Node's own lookup of a name
// answers from the thread pool, which a test's fake timers do not stop.
const { setImmediate } = require('../core/timers')

// Parses dns.lookup's options into a small integer without allocating:
// bits 0-4 the cache slot (family index * 8 + hints index), bit 6 all, bits
// 7-8 order (0 = the process default). -1 means "not a form we cache": the call
// goes to the original dns.lookup untouched, so every error, warning and
// oddity stays Node's own.
const VALID_HINTS = dns.ADDRCONFIG | dns.V4MAPPED | dns.ALL

// `names`: whether family may be 'IPv4' / 'IPv6' (dns.lookup takes them,
// dns.promises.lookup does not).
function parse (options, names) {
  if (options === null) return 0
  if (typeof options === 'number') {
    return options === 0 ? 0 : options === 4 ? 8 : options === 6 ? 16 : -1
  }
  if (typeof options !== 'object') return -1
  let bits = 0
  const family = options.family
  if (family === 4 || (names && family === 'IPv4')) bits = 8
  else if (family === 6 || (names && family === 'IPv6')) bits = 16
  else if (family !== 0 && family != null) return -1

  const hints = options.hints
  if (hints != null && hints !== 0) {
    if (!Number.isInteger(hints) || (hints & ~VALID_HINTS) !== 0) return -1
    bits |= hintsIndex(hints)
  }

  const all = options.all
  if (all === true) bits |= 64
  else if (all != null && all !== false) return -1

  const order = options.order
  if (order != null) {
    if (order === 'verbatim') bits |= 1 << 7
    else if (order === 'ipv4first') bits |= 2 << 7
    else if (order === 'ipv6first') bits |= 3 << 7
    else return -1
  }
  const verbatim = options.verbatim
  if (verbatim != null) {
    if (typeof verbatim !== 'boolean') return -1
    if (order == null) bits |= (verbatim ? 1 : 2) << 7
  }
  return bits
}

function hintsIndex (hints) {
  return ((hints & dns.ADDRCONFIG) !== 0 ? 1 : 0) | ((hints & dns.V4MAPPED) !== 0 ? 2 : 0) |
    ((hints & dns.ALL) !== 0 ? 4 : 0)
}

// A copy for `all: true` callers: Node gives every caller its own objects, and
// a caller that sorts or edits its answer must not change the cache's.
function copyAll (list) {
  const out = new Array(list.length)
  for (let i = 0; i < list.length; i++) out[i] = { address: list[i].address, family: list[i].family }
  return out
}

// What dns.lookup() returns: Node returns its GetAddrInfoReqWrap, whose
// public fields are these. `oncomplete` is how the binding would answer; the
// cache answers through `callback`, so calling it does nothing.
class LookupRequest {
  constructor (hostname, slot, callback, all) {
    this.callback = callback
    this.family = FAMILIES[slot >> 3]
    this.hostname = hostname
    this.oncomplete = all ? onlookupall : onlookup
  }
}
const FAMILIES = [0, 4, 6]
function onlookup () {}
function onlookupall () {}

// Builds a function with dns.lookup's contract, answered from `cache`.
function createLookup (cache, original) {
  function lookup (hostname, options, callback) {
    let bits
    if (typeof options === 'function') {
      callback = options
      bits = 0
    } else {
      bits = parse(options, true)
    }
    if (bits === -1 || typeof hostname !== 'string' || hostname === '' || typeof callback !== 'function') {
      return original.apply(this, arguments)
    }
    const slot = bits & 31
    const all = (bits & 64) !== 0
    const order = bits >> 7
    const entry = cache.hit(hostname, slot)
    if (entry !== undefined) {
      reply(setImmediate, callback, entry, all, order)
      return new LookupRequest(hostname, slot, callback, all)
    }
    // Answered within this call (a stale answer, a cached error): on a later
    // turn, as a hit. Answered by a resolution: that is a later turn already.
    let sync = true
    const handled = cache.query(hostname, slot, (err, entry) => {
      const defer = sync ? setImmediate : process.nextTick
      if (err) defer(callback, copyError(err, hostname))
      else reply(defer, callback, entry, all, order)
    })
    sync = false
    if (!handled) return original.apply(this, arguments)
    return new LookupRequest(hostname, slot, callback, all)
  }
  copyOwnSymbols(original, lookup)
  return lookup
}

// Builds a function with dns.promises.lookup's contract.
function createPromiseLookup (cache, original) {
  function lookup (hostname, options) {
    const bits = options === undefined ? 0 : parse(options, false)
    if (bits === -1 || typeof hostname !== 'string' || hostname === '') {
      return original.apply(this, arguments)
    }
    const slot = bits & 31
    const all = (bits & 64) !== 0
    const order = bits >> 7
    const entry = cache.hit(hostname, slot)
    if (entry !== undefined) return later(null, shape(entry, all, order))
    let settle = null
    let sync = null
    const handled = cache.query(hostname, slot, (err, entry) => {
      const value = err ? copyError(err, hostname) : shape(entry, all, order)
      if (settle === null) sync = { err, value }
      else settle(err, value)
    })
    if (!handled) return original.apply(this, arguments)
    if (sync !== null) return later(sync.err, sync.value)
    return new Promise((resolve, reject) => {
      settle = (err, value) => err ? reject(value) : resolve(value)
    })
  }
  return lookup
}

// `defer`: setImmediate for what the cache answers within the caller's call:
// Node's own lookup of a name calls back on a later turn of the event loop,
// after any setImmediate scheduled before it, and code relies on that order.
// process.nextTick (read at each call, as Node reads it) for a resolution's
// answer. Each Immediate keeps its caller's async context.
function reply (defer, callback, entry, all, order) {
  const list = ordered(entry, resultOrder(order))
  if (all) defer(callback, null, copyAll(list))
  else {
    const first = list[0]
    defer(callback, null, first.address, first.family)
  }
}

// A promise settled on a later turn of the event loop, as Node's own
// dns.promises.lookup of a name settles.
function later (err, value) {
  return new Promise((resolve, reject) => setImmediate(err ? reject : resolve, value))
}

function shape (entry, all, order) {
  const list = ordered(entry, resultOrder(order))
  if (all) return copyAll(list)
  return { address: list[0].address, family: list[0].family }
}

// dns.lookup carries Node's internal customPromisifyArgs symbol, which is what
// makes util.promisify(dns.lookup) resolve to { address, family }.
function copyOwnSymbols (from, to) {
  for (const symbol of Object.getOwnPropertySymbols(from)) {
    const descriptor = Object.getOwnPropertyDescriptor(from, symbol)
    if (!Object.hasOwn(to, symbol)) Object.defineProperty(to, symbol, descriptor)
  }
}

module.exports = { createLookup, createPromiseLookup }
