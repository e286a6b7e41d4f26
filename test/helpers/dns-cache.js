'use strict'

const { startDnsServer } = require('./dns-server')
const { createDnsCache } = require('../..')
const { eventually, sleep } = require('./wait')

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

module.exports = { cacheWithServer, eventually, sleep }
