'use strict'

const t = require('tap')
const dc = require('node:diagnostics_channel')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { cacheWithServer, eventually, untilStale, untilPast } = require('./helpers/dns-cache')
const { startDnsServer } = require('./helpers/dns-server')
const { createDnsCache } = require('..')
const { kInspect } = require('../lib/dns/cache')

t.test('answers from the server, then from the cache until the TTL expires', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0 })
  server.set('moving.test', { a: ['10.0.0.1'], ttl: 2 })
  t.same(await lookup('moving.test'), { address: '10.0.0.1', family: 4 })
  const queries = server.count('moving.test')
  server.set('moving.test', { a: ['10.0.0.2'], ttl: 2 })
  for (let i = 0; i < 20; i++) t.equal((await lookup('moving.test')).address, '10.0.0.1')
  t.equal(server.count('moving.test'), queries, 'no query before the TTL expires')
  t.equal(cache.stats().hits, 20)

  t.ok(await untilStale(cache, 'moving.test'), 'the TTL runs out')
  // The first caller after expiry gets the stale answer at once; one
  // background refresh fetches the new record.
  t.equal((await lookup('moving.test')).address, '10.0.0.1')
  const next = await eventually(async () => (await lookup('moving.test')).address === '10.0.0.2')
  t.ok(next, 'the changed record is served once the TTL has expired')
  t.equal(cache.stats().refreshes, 1)
})

t.test('TTLs are clamped to [minTtlMs, maxTtlMs]', async (t) => {
  t.test('minTtlMs keeps a short record longer', async (t) => {
    const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 10_000 })
    server.set('short.test', { a: ['10.0.1.1'], ttl: 1 })
    const asked = performance.now()
    await lookup('short.test')
    t.ok(cache[kInspect]('short.test', 0).entry.dueAt >= asked + 10_000, 'fresh for minTtlMs, not the record\'s 1 s')
    const queries = server.queries
    server.set('short.test', { a: ['10.0.1.2'], ttl: 1 })
    t.equal((await lookup('short.test')).address, '10.0.1.1')
    // The cache's own counters say whether a refresh started: no waiting for one that should not come.
    t.match(cache.stats(), { hits: 1, misses: 1, staleServed: 0, refreshes: 0 }, 'no refresh while the clamped TTL runs')
    t.equal(server.queries, queries)
  })
  t.test('maxTtlMs cuts a long record short', async (t) => {
    const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, maxTtlMs: 1000 })
    server.set('long.test', { a: ['10.0.2.1'], ttl: 3600 })
    const asked = performance.now()
    await lookup('long.test')
    t.ok(cache[kInspect]('long.test', 0).entry.dueAt <= performance.now() + 1000, 'fresh for maxTtlMs, not the record\'s hour')
    t.ok(cache[kInspect]('long.test', 0).entry.dueAt >= asked + 1000)
    server.set('long.test', { a: ['10.0.2.2'], ttl: 3600 })
    t.ok(await untilStale(cache, 'long.test'))
    await lookup('long.test')
    t.ok(await eventually(async () => (await lookup('long.test')).address === '10.0.2.2'))
    t.equal(cache.stats().refreshes, 1)
  })
  t.test('minTtlMs above maxTtlMs is refused', async (t) => {
    t.throws(() => createDnsCache({ minTtlMs: 10, maxTtlMs: 5 }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', message: /^createDnsCache\(\): minTtlMs \(10\) must not exceed maxTtlMs \(5\)$/ })
  })
})

t.test('1,000 concurrent lookups of a cold name share one resolution', async (t) => {
  const { server, cache, lookup, lookupAll } = await cacheWithServer(t)
  server.set('burst.test', { a: ['10.0.3.1'], aaaa: ['fd00::3:1'], ttl: 60 })
  server.delayMs = 20
  const answers = await Promise.all(Array.from({ length: 1000 }, (_, i) => i % 2 ? lookup('burst.test') : lookupAll('burst.test')))
  t.same(answers[1], { address: '10.0.3.1', family: 4 })
  t.same(answers[0], [{ address: '10.0.3.1', family: 4 }, { address: 'fd00::3:1', family: 6 }])
  t.equal(server.count('burst.test', 'A'), 1)
  t.equal(server.count('burst.test', 'AAAA'), 1)
  const stats = cache.stats()
  t.equal(stats.misses, 1)
  t.equal(stats.coalesced, 999)
})

t.test('all: true callers get their own copies', async (t) => {
  const { server, lookupAll } = await cacheWithServer(t)
  server.set('copy.test', { a: ['10.0.4.1', '10.0.4.2'], ttl: 60 })
  const first = await lookupAll('copy.test')
  first.reverse()
  first[0].address = 'mutated'
  t.same(await lookupAll('copy.test'), [{ address: '10.0.4.1', family: 4 }, { address: '10.0.4.2', family: 4 }])
})

for (const mode of ['refuse', 'servfail', 'blackhole']) {
  t.test(`serve-stale: every caller gets the last good answer at once while DNS is down (${mode})`, async (t) => {
    const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, errorTtlMs: 200, queryTimeoutMs: 300 })
    server.set('stale.test', { a: ['10.0.5.1'], ttl: 1 })
    await lookup('stale.test')
    t.ok(await untilStale(cache, 'stale.test'))
    server.mode = mode
    const queries = server.queries
    let answered = 0
    // None of these callers may wait for the failing refresh: each answer
    // must arrive before the refresh settles.
    const refreshed = new Promise((resolve) => {
      const onError = (message) => {
        if (message.hostname === 'stale.test') {
          dc.unsubscribe('io-hygiene:dns:error', onError)
          resolve(answered)
        }
      }
      dc.subscribe('io-hygiene:dns:error', onError)
    })
    const answers = await Promise.all(Array.from({ length: 100 }, () => lookup('stale.test').then((a) => { answered++; return a })))
    t.ok(answers.every((a) => a.address === '10.0.5.1'))
    t.equal(await refreshed, 100, 'all 100 answered before the refresh failed')
    t.ok(server.queries > queries, 'a refresh was attempted')
    t.equal(cache.stats().refreshes, 1, 'one refresh for all callers')
    t.equal(cache.stats().staleServed, 100)
    // Still down: still served, and retried no more often than errorTtlMs.
    t.equal((await lookup('stale.test')).address, '10.0.5.1')
    server.mode = 'answer'
    server.set('stale.test', { a: ['10.0.5.2'], ttl: 60 })
    t.ok(await eventually(async () => (await lookup('stale.test')).address === '10.0.5.2'), 'recovers when DNS is back')
  })
}

t.test('past staleTtlMs while a slow refresh runs, callers wait for that refresh: never two at once', async (t) => {
  // The refresh stays in flight until the server is told to answer (hold /
  // release): no race between a delay and the clock.
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, staleTtlMs: 1000, queryTimeoutMs: 60_000 })
  server.set('slow.test', { a: ['10.0.6.5'], ttl: 1 })
  await lookup('slow.test') // in c-ares mode the TTL comes with the answer
  t.ok(await untilStale(cache, 'slow.test'))
  server.hold()
  server.set('slow.test', { a: ['10.0.6.6'], ttl: 60 })
  t.equal((await lookup('slow.test')).address, '10.0.6.5', 'stale, and one refresh starts')
  t.ok(await untilPast(cache, 'slow.test', 'staleUntil'), 'past staleTtlMs, the refresh still held')
  const late = Promise.all([lookup('slow.test'), lookup('slow.test')])
  t.ok(await eventually(() => cache.stats().coalesced === 1), 'both callers wait')
  server.release()
  t.same((await late).map((a) => a.address), ['10.0.6.6', '10.0.6.6'], 'answered by the running refresh')
  t.match(cache.stats(), { refreshes: 1, staleServed: 1, misses: 2, coalesced: 1, ttlQueries: 4 }, 'one refresh (A and AAAA), no second resolution')
})

t.test('serve-stale ends after staleTtlMs', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, staleTtlMs: 0, errorTtlMs: 0, queryTimeoutMs: 200 })
  server.set('gone.test', { a: ['10.0.6.1'], ttl: 1 })
  await lookup('gone.test')
  t.ok(await untilStale(cache, 'gone.test'))
  server.mode = 'servfail'
  await t.rejects(lookup('gone.test'), { code: 'ESERVFAIL' })
})

t.test('an authoritative NXDOMAIN replaces a stale answer', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0 })
  server.set('deleted.test', { a: ['10.0.7.1'], ttl: 1 })
  await lookup('deleted.test')
  server.delete('deleted.test')
  t.ok(await untilStale(cache, 'deleted.test'))
  t.equal((await lookup('deleted.test')).address, '10.0.7.1', 'stale while the refresh runs')
  t.ok(await eventually(() => lookup('deleted.test').then(() => false, (err) => err.code === 'ENOTFOUND')))
})

t.test('errors are cached for errorTtlMs, then asked again', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { errorTtlMs: 500 })
  const first = await lookup('missing.test').catch((err) => err)
  t.equal(first.code, 'ENOTFOUND')
  t.equal(first.hostname, 'missing.test')
  const queries = server.queries
  const again = await Promise.all(Array.from({ length: 50 }, () => lookup('missing.test').catch((err) => err)))
  t.ok(again.every((err) => err.code === 'ENOTFOUND' && err !== first), 'each caller gets its own error')
  t.equal(server.queries, queries, 'no query while the error is cached')
  t.equal(cache.stats().negativeHits, 50)
  server.set('missing.test', { a: ['10.0.8.1'], ttl: 60 })
  t.ok(await untilPast(cache, 'missing.test', 'errorUntil'))
  t.same(await lookup('missing.test'), { address: '10.0.8.1', family: 4 })
  t.same(cache.stats().errors, { ENOTFOUND: 1 })
})

t.test('errorTtlMs 0 does not cache errors', async (t) => {
  const { server, lookup } = await cacheWithServer(t, { errorTtlMs: 0 })
  await t.rejects(lookup('nope.test'), { code: 'ENOTFOUND' })
  const queries = server.queries
  await t.rejects(lookup('nope.test'), { code: 'ENOTFOUND' })
  t.ok(server.queries > queries)
})

t.test('families and orders in pure c-ares mode', async (t) => {
  const { server, lookup, lookupAll } = await cacheWithServer(t)
  server.set('dual.test', { a: ['10.0.9.1'], aaaa: ['fd00::9:1'], ttl: 60 })
  server.set('v4only.test', { a: ['10.0.9.2'], ttl: 60 })
  t.same(await lookup('dual.test', { family: 6 }), { address: 'fd00::9:1', family: 6 })
  t.same(await lookup('dual.test', { family: 'IPv4' }), { address: '10.0.9.1', family: 4 })
  t.same(await lookup('dual.test', { order: 'ipv6first' }), { address: 'fd00::9:1', family: 6 })
  t.same(await lookup('dual.test', { verbatim: false }), { address: '10.0.9.1', family: 4 })
  t.same(await lookupAll('dual.test', { order: 'ipv6first' }), [{ address: 'fd00::9:1', family: 6 }, { address: '10.0.9.1', family: 4 }])
  t.same(await lookup('v4only.test', { family: 6, hints: require('node:dns').V4MAPPED }), { address: '::ffff:10.0.9.2', family: 6 })
  await t.rejects(lookup('v4only.test', { family: 6 }), { code: 'ENODATA' })
})

t.test('bounded: at most maxEntries names', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { maxEntries: 3 })
  for (let i = 0; i < 5; i++) server.set(`n${i}.test`, { a: [`10.1.0.${i}`], ttl: 60 })
  for (let i = 0; i < 5; i++) await lookup(`n${i}.test`)
  t.equal(cache.stats().entries, 3)
})

t.test('maxEntries bounds memory: 5,000 names leave at most maxEntries entries, in the LRU and in the expiry heap', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { maxEntries: 100 })
  const names = Array.from({ length: 5000 }, (_, i) => `m${i}.test`)
  for (const name of names) server.set(name, { a: ['10.1.2.3'], ttl: 300 })
  for (let i = 0; i < names.length; i += 100) await Promise.all(names.slice(i, i + 100).map((name) => lookup(name)))
  const { scheduled, entries, entry } = cache[kInspect]('m0.test', 0)
  t.equal(entries, 100)
  t.ok(scheduled <= 100, `${scheduled} entries in the expiry heap`)
  t.equal(entry, undefined, 'the first name is gone')
  t.equal(cache[kInspect]('m4999.test', 0).entry.fresh, true, 'the last one is kept')
  cache.clear()
  t.equal(cache[kInspect]('m0.test', 0).scheduled, 0, 'clear() empties the heap too')
})

t.test('an entry evicted while it resolves still answers its callers, then keeps nothing', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { maxEntries: 1 })
  server.set('first.test', { a: ['10.1.3.1'], ttl: 300 })
  server.set('second.test', { a: ['10.1.3.2'], ttl: 300 })
  server.delayMs = 20
  const answers = await Promise.all([lookup('first.test'), lookup('second.test')])
  t.same(answers.map((a) => a.address), ['10.1.3.1', '10.1.3.2'])
  t.match(cache[kInspect]('second.test', 0), { scheduled: 1, entries: 1, entry: { fresh: true } })
  t.equal(cache[kInspect]('first.test', 0).entry, undefined)
})

t.test('case variants of a name share one entry; each caller gets its own spelling back, a trailing dot stays apart', async (t) => {
  const { server, cache, lookup, lookupAll } = await cacheWithServer(t, { errorTtlMs: 60_000 })
  server.set('mixed.test', { a: ['10.1.4.1'], ttl: 300 })
  const answers = await Promise.all([lookup('mixed.test'), lookup('MIXED.TEST'), lookupAll('Mixed.Test')])
  t.same(answers, [{ address: '10.1.4.1', family: 4 }, { address: '10.1.4.1', family: 4 }, [{ address: '10.1.4.1', family: 4 }]])
  t.same(await lookup('mIxEd.tEsT'), { address: '10.1.4.1', family: 4 })
  t.match(cache.stats(), { misses: 1, coalesced: 2, hits: 1, entries: 1 })
  t.equal(server.count('mixed.test', 'A'), 1, 'one query for every spelling')
  t.same(await lookup('MIXED.TEST.'), { address: '10.1.4.1', family: 4 })
  t.equal(cache.stats().entries, 2, 'a trailing dot is another name (search domains)')

  const first = await Promise.all(['gone.test', 'GONE.test'].map((name) => lookup(name).catch((err) => err)))
  const later = await cache.lookupAsync('Gone.Test').catch((err) => err)
  for (const [err, name] of [[first[0], 'gone.test'], [first[1], 'GONE.test'], [later, 'Gone.Test']]) {
    t.match(err, { code: 'ENOTFOUND', hostname: name, message: new RegExp(`^query(A|Aaaa) ENOTFOUND ${name}$`) }, name)
  }
  t.match(cache.stats(), { negativeHits: 1, errors: { ENOTFOUND: 1 } })
})

t.test('a cache holds nothing until its first answer', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t)
  t.match(cache[kInspect]('first.test', 0), { scheduled: 0, entries: 0, entry: undefined })
  t.match(cache.stats(), { entries: 0, misses: 0 })
  t.doesNotThrow(() => cache.clear(), 'a cache with nothing in it clears')
  server.set('first.test', { a: ['10.3.0.1'], ttl: 60 })
  t.same(await lookup('first.test'), { address: '10.3.0.1', family: 4 })
  t.match(cache[kInspect]('first.test', 0), { scheduled: 1, entries: 1, entry: { fresh: true } })
})

t.test('the periodic sweep drops entries that can no longer be served', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { sweepIntervalMs: 50, errorTtlMs: 10, minTtlMs: 0, staleTtlMs: 0 })
  server.set('live.test', { a: ['10.1.1.1'], ttl: 60 })
  server.set('brief.test', { a: ['10.1.1.2'], ttl: 1 })
  await lookup('live.test')
  await lookup('brief.test')
  await t.rejects(lookup('dead.test'))
  t.equal(cache.stats().entries, 3)
  t.ok(await eventually(() => cache.stats().entries === 1, 3000), 'the error and the expired answer are swept')
  t.same(await lookup('live.test'), { address: '10.1.1.1', family: 4 })
  t.equal(cache.stats().hits, 1)
})

t.test('stats, the lookup channel and clear()', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t)
  server.set('seen.test', { a: ['10.2.0.1'], ttl: 60 })
  const seen = []
  const onLookup = (message) => seen.push(message.source)
  dc.subscribe('io-hygiene:dns:lookup', onLookup)
  t.teardown(() => dc.unsubscribe('io-hygiene:dns:lookup', onLookup))
  await Promise.all([lookup('seen.test'), lookup('seen.test')])
  await lookup('seen.test')
  t.same(seen, ['miss', 'coalesced', 'hit'])
  const stats = cache.stats()
  t.match(stats, { hits: 1, misses: 1, coalesced: 1, upstreamLookups: 0, ttlQueries: 2, upstreamQueries: 2, entries: 1 })
  cache.clear()
  t.equal(cache.stats().entries, 0)
})

t.test('a closed cache passes every call to the system lookup', async (t) => {
  const cache = createDnsCache({ hostsFile: null })
  cache.close()
  t.equal(cache.closed, true)
  const answer = await new Promise((resolve, reject) => cache.lookup('localhost', { family: 4 }, (err, address) => err ? reject(err) : resolve(address)))
  t.equal(answer, '127.0.0.1')
  t.equal(cache.stats().misses, 0)
})

t.test('options are validated by name', async (t) => {
  t.throws(() => createDnsCache({ maxTTL: 5 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', name: 'TypeError', stack: /^TypeError \[ERR_IO_HYGIENE_UNKNOWN_OPTION\]: / })
  t.throws(() => createDnsCache({ maxTtlMs: '5' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createDnsCache({ maxTtlMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => createDnsCache({ maxEntries: 0 }), RangeError)
  t.throws(() => createDnsCache({ servers: ['not an address'] }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createDnsCache({ servers: [] }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createDnsCache({ hostsFile: 5 }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => createDnsCache(null), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  for (const server of ['127.0.0.1:0', '[::1]:0', '127.0.0.1:00']) {
    t.throws(() => createDnsCache({ servers: ['127.0.0.1', server] }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /a port from 1 to 65535/ }, `${server}: refused, not an abort`)
  }
  for (const key of ['queryTimeoutMs', 'sweepIntervalMs', 'maxTtlMs', 'staleTtlMs']) {
    t.throws(() => createDnsCache({ [key]: 2 ** 31 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' }, `${key}: 2^31 refused`)
  }
  const cache = createDnsCache({ servers: ['127.0.0.1:5353'], hostsFile: null })
  cache.close()
})

t.test('IO_HYGIENE_DNS_SERVERS with port 0 is refused with a coded error, not an abort', async (t) => {
  const child = spawn(process.execPath, ['-r', require.resolve('../register'), '-e', ''], {
    env: { ...process.env, IO_HYGIENE_DNS_SERVERS: '127.0.0.1:0' },
  })
  let stderr = ''
  child.stderr.on('data', (chunk) => { stderr += chunk })
  const [code, signal] = await new Promise((resolve) => child.on('exit', (code, signal) => resolve([code, signal])))
  t.equal(signal, null, 'no signal')
  t.equal(code, 1)
  t.match(stderr, /ERR_IO_HYGIENE_INVALID_OPTION/)
})

// The default path (the system resolver, no `servers`) without root: names
// under .test answered as this machine's /etc/hosts answers localhost (a
// wrapper of dns.lookup, which the cache asks as it would the system
// resolver; localhost itself is never asked of DNS), with TTL queries sent to
// a test server through dns.setServers(). A child process, as the point is
// what keeps a process alive.
const LOCALHOST_CHILD = `
  const dns = require('node:dns')
  dns.setServers([process.env.SERVER])
  const system = dns.lookup
  dns.lookup = function (name, ...rest) {
    return system.call(this, /\\.test$/i.test(name) ? 'localhost' : name, ...rest)
  }
  const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
  const hostsFile = process.env.HOSTS || null
  // A TTL query that would wait an hour if the process waited for it.
  const cache = createDnsCache({ hostsFile, queryTimeoutMs: 3_600_000 })
  const lookup = (name, options) => new Promise((resolve, reject) => {
    cache.lookup(name, options, (err, address) => err ? reject(err) : resolve(address))
  })
  ;(async () => {
    const answers = [
      await lookup('ttl.test', { family: 6, hints: dns.V4MAPPED }),
      await lookup('TTL.Test', { family: 4 }),
      await lookup('ttl.test', { family: 4 }),
    ]
    process.on('exit', () => console.log(JSON.stringify({ answers, stats: cache.stats() })))
  })()`

// Runs LOCALHOST_CHILD; resolves with its report once it exits by itself.
function runLocalhostChild (t, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', LOCALHOST_CHILD], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (chunk) => { out += chunk })
    // Not a timing assertion: the child exits at once when nothing holds it,
    // and would wait an hour for its TTL query if something did.
    const stuck = setTimeout(() => child.kill(), 60_000)
    child.on('exit', (code, signal) => {
      clearTimeout(stuck)
      if (code !== 0) return reject(new Error(`the child did not exit by itself (code ${code}, signal ${signal})`))
      resolve(JSON.parse(out))
    })
  })
}

// That a pending TTL query never holds the process open is tested in
// dns-search.test.js, where the system resolver asks a test server.
t.test('default path: a process that exits within minTtlMs sends no TTL query', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  const { answers, stats } = await runLocalhostChild(t, { SERVER: server.server })
  t.same(answers, ['::ffff:127.0.0.1', '127.0.0.1', '127.0.0.1'])
  t.match(stats, { upstreamLookups: 2, misses: 2, hits: 1, ttlQueries: 0, fallbacks: 0 }, 'TTLs are learned at an entry\'s first refresh: none came before the exit')
  t.equal(server.queries, 0)
})

t.test('default path: a hosts-file name never causes a DNS query, V4MAPPED answers included', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-hosts-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const hosts = path.join(dir, 'hosts')
  fs.writeFileSync(hosts, '127.0.0.1 localhost ttl.test\n')
  const { answers, stats } = await runLocalhostChild(t, { SERVER: server.server, HOSTS: hosts })
  t.same(answers, ['::ffff:127.0.0.1', '127.0.0.1', '127.0.0.1'])
  t.match(stats, { upstreamLookups: 2, ttlQueries: 0, fallbacks: 2, upstreamQueries: 2 })
  t.equal(server.queries, 0)
})

t.test('default path: answers as the original dns.lookup, case variants shared, cached for fallbackTtlMs', async (t) => {
  const dns = require('node:dns')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-hosts-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const hosts = path.join(dir, 'hosts')
  fs.writeFileSync(hosts, '127.0.0.1 localhost\n')
  const cache = createDnsCache({ hostsFile: hosts })
  t.teardown(() => cache.close())
  const call = (fn, name, options) => new Promise((resolve) => fn(name, options, (err, ...args) => resolve({ err: err && { ...err, message: err.message }, args })))
  const names = ['localhost', 'LOCALHOST', 'LocalHost']
  const forms = [{}, { all: true }, { family: 4 }, { family: 4, all: true }, { family: 6, hints: dns.V4MAPPED }, { family: 6, hints: dns.V4MAPPED | dns.ALL, all: true }, { hints: dns.ADDRCONFIG }, { order: 'ipv6first', all: true }]
  for (const form of forms) {
    const expected = await Promise.all(names.map((name) => call(dns.lookup, name, form)))
    t.same(await Promise.all(names.map((name) => call(cache.lookup, name, form))), expected, `${JSON.stringify(form)}, concurrently`)
    for (let i = 0; i < names.length; i++) t.same(await call(cache.lookup, names[i], form), expected[i], `${names[i]} ${JSON.stringify(form)}, cached`)
  }
  // 5 (family, hints) slots: forms that differ only in `all` or `order` share one.
  t.match(cache.stats(), { upstreamLookups: 5, misses: 5, coalesced: 10, hits: 3 * 5 + 6 * 3, ttlQueries: 0, fallbacks: 5, entries: 1 })
})

t.test('every callback runs in its own caller\'s async context: merged miss, hit, stale answer, cached error', async (t) => {
  const { AsyncLocalStorage } = require('node:async_hooks')
  const als = new AsyncLocalStorage()
  const { server, cache } = await cacheWithServer(t, { minTtlMs: 0, errorTtlMs: 60_000 })
  server.set('four.test', { a: ['10.0.4.4'], ttl: 1 })
  // Three concurrent calls, each in its own context; what each callback sees.
  const three = (name, base, options = {}) => Promise.all([1, 2, 3].map((i) => new Promise((resolve) => {
    als.run({ id: base + i }, () => cache.lookup(name, options, (err) => resolve([als.getStore()?.id, err?.code ?? null])))
  })))
  const ok = (base, code = null) => [[base + 1, code], [base + 2, code], [base + 3, code]]
  t.same(await three('four.test', 0), ok(0), 'a miss merged into one resolution')
  t.match(cache.stats(), { misses: 1, coalesced: 2 })
  t.same(await three('four.test', 10), ok(10), 'hits')
  t.same(await three('four.test', 20, { all: true }), ok(20), 'hits, all: true')
  t.ok(await untilStale(cache, 'four.test'))
  t.same(await three('four.test', 30), ok(30), 'stale answers')
  t.ok(cache.stats().staleServed >= 1)
  t.same(await three('missing.test', 40), ok(40, 'ENOTFOUND'), 'an error merged into one resolution')
  t.same(await three('missing.test', 50), ok(50, 'ENOTFOUND'), 'cached errors')
  t.ok(cache.stats().negativeHits >= 3)
  const ids = await Promise.all([1, 2, 3].map((i) => als.run({ id: 60 + i }, async () => {
    await cache.lookupAsync('promise.test').catch(() => {})
    return als.getStore().id
  })))
  t.same(ids, [61, 62, 63], 'promises')
})

t.test('names: ASCII case folded, other letters as written; each spelling resolved as the caller wrote it', async (t) => {
  const { domainToASCII } = require('node:url')
  const { server, lookup } = await cacheWithServer(t)
  // Pairs that String#toLowerCase() makes one name but Node's UTS-46 mapping
  // keeps two (on some Node lines), and a name some lines refuse.
  const names = ['xẞy.example', 'xßy.example', 'ΑΣ-1.example', 'ας-1.example', 'Ⴀx.example', 'ⴀx.example', 'XSSY.Example']
  names.forEach((name, i) => {
    const ascii = domainToASCII(name)
    if (ascii !== '') server.set(ascii, { a: [`10.0.8.${i + 1}`], ttl: 60 })
  })
  // Node's own resolver, asking the same server, says what each spelling is.
  const resolver = new (require('node:dns').promises.Resolver)()
  resolver.setServers([server.server])
  for (const name of names) {
    const direct = await resolver.resolve4(name).then((list) => list[0], (err) => err.code)
    const cached = await lookup(name, { family: 4 }).then((a) => a.address, (err) => err.code)
    t.equal(cached, direct, `${name}: as Node's own resolver answers it`)
  }
})

t.test('lookup() returns a request with GetAddrInfoReqWrap\'s public fields; errors copied keep a stack that is not ours', async (t) => {
  const { server, cache } = await cacheWithServer(t)
  server.set('req.test', { a: ['10.0.9.1'], ttl: 60 })
  let calls = 0
  const callback = () => calls++
  const request = cache.lookup('req.test', { family: 4, all: true }, callback)
  t.same(Object.keys(request), ['callback', 'family', 'hostname', 'oncomplete'])
  t.match(request, { callback, family: 4, hostname: 'req.test' })
  t.equal(request.oncomplete.name, 'onlookupall')
  await eventually(() => calls === 1)
  const hit = cache.lookup('req.test', callback)
  t.equal(hit.oncomplete.name, 'onlookup')
  hit.oncomplete()
  request.oncomplete()
  await eventually(() => calls === 2)
  t.equal(calls, 2, 'oncomplete answers nobody')
  const { copyError } = require('../lib/dns/cache')
  const custom = Object.assign(new Error('lookup failed for a.test'), { hostname: 'a.test' })
  custom.stack = 'a stack of its own'
  const copy = copyError(custom, 'A.test')
  t.equal(copy.message, 'lookup failed for A.test')
  t.equal(copy.stack, 'Error: lookup failed for A.test', 'a stack that does not start with the message is not copied')
})

t.test('promise lookups of a cached error reject at once, each with its own error', async (t) => {
  const { cache } = await cacheWithServer(t)
  const first = await cache.lookupAsync('nowhere.test').catch((err) => err)
  const second = await cache.lookupAsync('nowhere.test').catch((err) => err)
  t.equal(first.code, 'ENOTFOUND')
  t.not(first, second)
  t.same({ ...first }, { ...second })
  t.equal(cache.stats().negativeHits, 1)
})

t.test('a TTL of 0 with minTtlMs 0 is never fresh: every lookup refreshes, stale meanwhile', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0 })
  server.set('zero.test', { a: ['10.8.0.1'], ttl: 0 })
  await lookup('zero.test')
  // Fresh only until the TTL query answers (0 s); from then on every lookup is stale.
  t.ok(await eventually(async () => {
    t.same(await lookup('zero.test'), { address: '10.8.0.1', family: 4 })
    return cache.stats().staleServed > 0
  }))
  t.ok(cache.stats().refreshes >= 1)
  t.equal(cache.stats().misses, 1, 'one miss; every later lookup was served')
})

t.test('after a failed refresh the stale answer is served without a new refresh until errorTtlMs passes', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, errorTtlMs: 60_000 })
  server.set('backoff.test', { a: ['10.6.6.1'], ttl: 1 })
  await lookup('backoff.test')
  t.ok(await untilStale(cache, 'backoff.test'))
  server.mode = 'refuse'
  await lookup('backoff.test')
  t.ok(await eventually(() => cache.stats().errors.EREFUSED === 1))
  server.mode = 'answer'
  for (let i = 0; i < 10; i++) t.equal((await lookup('backoff.test')).address, '10.6.6.1')
  const stale = await cache.lookupAsync('backoff.test')
  t.same(stale, { address: '10.6.6.1', family: 4 }, 'the promise API serves stale too')
  t.equal(cache.stats().refreshes, 1, 'no refresh before errorTtlMs')
})

t.test('stale answers follow a record that moved, one refresh per expiry', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0 })
  server.set('mover.test', { a: ['10.7.7.1'], ttl: 1 })
  await lookup('mover.test')
  for (let round = 2; round <= 3; round++) {
    server.set('mover.test', { a: [`10.7.7.${round}`], ttl: 1 })
    t.ok(await untilStale(cache, 'mover.test'))
    await Promise.all(Array.from({ length: 20 }, () => lookup('mover.test')))
    t.ok(await eventually(async () => (await lookup('mover.test')).address === `10.7.7.${round}`))
  }
  t.equal(cache.stats().refreshes, 2)
})
