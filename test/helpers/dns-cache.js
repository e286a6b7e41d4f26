'use strict'

const { startDnsServer } = require('./dns-server')
const { createDnsCache } = require('../..')
const { kInspect } = require('../../lib/dns/cache')
const { eventually } = require('./wait')

// A test DNS server and a cache that asks it (pure c-ares mode), both closed
// at teardown. Returns { server, cache, lookup, lookupAll }.
async function cacheWithServer (t, options = {}) {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  const cache = createDnsCache({ servers: [server.server], hostsFile: null, ...options })
  t.teardown(() => cache.close())
  const lookup = (hostname, opts = {}) => new Promise((resolve, reject) => {
    cache.lookup(hostname, opts, (err, address, family) => err ? reject(err) : resolve({ address, family }))
  })
  const lookupAll = (hostname, opts = {}) => new Promise((resolve, reject) => {
    cache.lookup(hostname, { ...opts, all: true }, (err, list) => err ? reject(err) : resolve(list))
  })
  return { server, cache, lookup, lookupAll }
}

// Bounded polls on the cache's own state, instead of sleeping past a TTL:
// until the entry of (name, slot) is no longer fresh (its TTL ran out), and
// until performance.now() passes one of its deadlines (staleUntil,
// errorUntil, retryAt). Each resolves true, or false if it never happened.
function untilStale (cache, name, slot = 0) {
  return eventually(() => cache[kInspect](name, slot).entry?.fresh === false)
}

function untilPast (cache, name, deadline, slot = 0) {
  return eventually(() => performance.now() >= cache[kInspect](name, slot).entry?.[deadline])
}

module.exports = { cacheWithServer, eventually, untilStale, untilPast }
