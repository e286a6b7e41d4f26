'use strict'

const { startDnsServer } = require('./dns-server')
const { createDnsCache } = require('../..')

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

// Polls `fn` until it returns truthy, at most `ms`; returns its last value.
async function eventually (fn, ms = 5000, everyMs = 20) {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value || Date.now() > deadline) return value
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

module.exports = { cacheWithServer, eventually, sleep }
