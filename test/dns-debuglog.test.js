'use strict'

const t = require('tap')
const util = require('node:util')
const { execFile } = require('node:child_process')

t.test('NODE_DEBUG=io-hygiene* logs lookups, refreshes and errors through channel subscribers', async (t) => {
  const code = `
    const dc = require('node:diagnostics_channel')
    const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
    const { startDnsServer } = require(${JSON.stringify(require.resolve('./helpers/dns-server'))})
    const { untilStale, untilPast } = require(${JSON.stringify(require.resolve('./helpers/dns-cache'))})
    const lookup = (cache, name) => new Promise((resolve) => cache.lookup(name, () => resolve()))
    // The next refresh's end, from its channel.
    const refreshed = () => new Promise((resolve) => {
      const onRefresh = (message) => {
        dc.unsubscribe('io-hygiene:dns:refresh', onRefresh)
        resolve(message)
      }
      dc.subscribe('io-hygiene:dns:refresh', onRefresh)
    })
    ;(async () => {
      const server = await startDnsServer()
      server.set('a.test', { a: ['10.0.0.1'], ttl: 1 })
      const cache = createDnsCache({ hostsFile: null, servers: [server.server], minTtlMs: 0, queryTimeoutMs: 100 })
      await lookup(cache, 'a.test')
      await lookup(cache, 'nowhere.test')
      await lookup(cache, 'nowhere.test')
      await untilStale(cache, 'a.test')
      server.mode = 'servfail'
      let refresh = refreshed()
      await lookup(cache, 'a.test')
      await refresh
      server.mode = 'answer'
      await untilPast(cache, 'a.test', 'retryAt')
      refresh = refreshed()
      await lookup(cache, 'a.test')
      await refresh
      cache.close()
      await server.close()
    })()`
  const { stderr } = await util.promisify(execFile)(process.execPath, ['-e', code], { env: { ...process.env, NODE_DEBUG: 'io-hygiene*' } })
  t.match(stderr, /IO-HYGIENE:DNS \d+: lookup a\.test family=0 miss\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: upstream error nowhere\.test family=0 ENOTFOUND\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: lookup nowhere\.test family=0 negative error=ENOTFOUND\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: lookup a\.test family=0 stale\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: upstream error a\.test family=0 ESERVFAIL \(refresh; serving stale if allowed\)\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: refresh a\.test failed: ESERVFAIL\n/)
  t.match(stderr, /IO-HYGIENE:DNS \d+: refresh a\.test ok/)
})

t.test('NODE_DEBUG naming other sections logs nothing of ours', async (t) => {
  const code = `
    const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
    const cache = createDnsCache({ hostsFile: null })
    cache.lookup('localhost', () => cache.close())`
  const { stderr } = await util.promisify(execFile)(process.execPath, ['-e', code], { env: { ...process.env, NODE_DEBUG: 'timer' } })
  t.match(stderr, /TIMER \d+:/, 'the section asked for logs')
  t.notMatch(stderr, /IO-HYGIENE/)
})
