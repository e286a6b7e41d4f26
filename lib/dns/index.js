'use strict'

// The dns module: the cache that stands in for dns.lookup and
// dns.promises.lookup, and the patch that puts it there (its options are in
// options.js, which install() with the defaults never loads).

const { getSlot, setLazySlot, deleteSlot, wrap, originalOf } = require('../core/global-slot')
const dns = require('node:dns')
const { syncBuiltinESMExports } = require('node:module')

function createDnsCache (options) {
  const where = 'createDnsCache()'
  const { spec, check } = require('./options')
  const resolved = require('../core/options').resolve(where, spec, options)
  check(resolved, where)
  return build(resolved)
}

// The cache asks whatever dns.lookup is when it is made (past any io-hygiene
// wrapper, so never itself; a second copy of io-hygiene recognises the
// first's), another library's wrapper included. lookupAsync is made on first
// use, from whatever dns.promises.lookup is then: reading dns.promises loads
// Node's promise resolver, which a cache used only with callbacks (statsd's)
// never needs. installDns() passes both originals, read when it patched.
// `installed`: the cache answers dns.lookup, so sockets connect to the
// addresses it gives out, and a failed connection tells it its answer may be
// out of date (connect-failures.js).
function build (resolved, installed = false, systemLookup = originalOf(dns.lookup), promiseLookup = null) {
  const { DnsCache } = require('./cache')
  const { createLookup, createPromiseLookup } = require('./lookup')
  const cache = new DnsCache(resolved, systemLookup, installed)
  cache.lookup = createLookup(cache, systemLookup)
  let lookupAsync = null
  return Object.defineProperty(cache, 'lookupAsync', {
    enumerable: true,
    get: () => (lookupAsync ??= createPromiseLookup(cache, promiseLookup ?? originalOf(dns.promises.lookup))),
  })
}

// The cache dns.lookup answers from now, if io-hygiene's: set by installDns(),
// cleared by its undo(). On globalThis, so that a second loaded copy sees it.
const kServing = Symbol.for('io-hygiene.dns.serving.v1')

function currentCache () {
  const cache = getSlot(kServing)
  return cache === undefined || cache.closed === true ? null : cache
}

// Replaces dns.lookup and dns.promises.lookup; returns { value, undo }. The
// cache (cache.js, lookup.js) is made at its first use: the first lookup, or
// the first read of the handle's `dns` or of currentCache(). A service pays
// at start only for the patch. Options are checked before this is called;
// `resolved` may be a function that gives them at the cache's making
// (install() with the defaults resolves them only then).
function installDns (resolved) {
  let cache = null
  let closed = false
  const serving = () => {
    if (cache !== null) return cache
    cache = build(typeof resolved === 'function' ? resolved() : resolved, true, systemLookup, promiseLookup)
    if (closed) cache.close()
    return cache
  }
  const systemLookup = originalOf(dns.lookup)
  const promiseLookup = originalOf(dns.promises.lookup)
  const undoLookup = wrap(dns, 'lookup', (original) => standIn(original, serving, 'lookup'))
  const undoPromise = wrap(dns.promises, 'lookup', (original) => standIn(original, serving, 'lookupAsync'))
  syncBuiltinESMExports()
  const unread = setLazySlot(kServing, serving)
  function undo () {
    if (unread() || getSlot(kServing) === cache) deleteSlot(kServing)
    // A closed cache passes every call to the original, so a wrapper that
    // someone else still holds behaves as if we were gone.
    closed = true
    cache?.close()
    const a = undoLookup()
    const b = undoPromise()
    syncBuiltinESMExports()
    return a && b
  }
  return { get value () { return serving() }, undo }
}

// What dns.lookup (or dns.promises.lookup) is from install(): a function of
// the original's name, length and own symbols (dns.lookup's promisify
// symbol), that hands each call, as it came, to the cache's function, made at
// the first call.
function standIn (original, serving, which) {
  let fn = null
  const lookup = which === 'lookup'
    ? function lookup (hostname, options, callback) {
      return (fn ??= serving().lookup).apply(this, arguments)
    }
    : function lookup (hostname, options) {
      return (fn ??= serving().lookupAsync).apply(this, arguments)
    }
  for (const symbol of Object.getOwnPropertySymbols(original)) {
    if (!Object.hasOwn(lookup, symbol)) Object.defineProperty(lookup, symbol, Object.getOwnPropertyDescriptor(original, symbol))
  }
  return lookup
}

module.exports = { createDnsCache, installDns, currentCache }
