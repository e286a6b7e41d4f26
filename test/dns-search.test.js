'use strict'

// Names answered through a search domain, as in a Kubernetes pod: a private
// mount namespace whose resolv.conf has three search domains and ndots:5,
// and a DNS server that knows only fully qualified names.
const { enterNamespace } = require('./helpers/in-namespace')

const HOSTS = '127.0.0.1 localhost\n::1 localhost\n'
const SEARCH = ['ns1.svc.cluster.local', 'svc.cluster.local', 'cluster.local']

const inside = enterNamespace(__filename, { hosts: HOSTS, search: SEARCH, options: 'ndots:5 timeout:1 attempts:1' })
if (inside) run(inside)

function run ({ nameserver }) {
  const t = require('tap')
  const fs = require('node:fs')
  const dns = require('node:dns')
  const dc = require('node:diagnostics_channel')
  const { spawn } = require('node:child_process')
  const { startDnsServer } = require('./helpers/dns-server')
  const { eventually, untilStale } = require('./helpers/dns-cache')
  const { kInspect } = require('../lib/dns/cache')
  const { createDnsCache } = require('..')

  let server
  t.before(async () => {
    server = await startDnsServer({ port: 53, address: nameserver })
  })
  t.teardown(() => server.close())

  const lookupOf = (cache) => (name, options = {}) => new Promise((resolve, reject) => {
    cache.lookup(name, options, (err, address) => err ? reject(err) : resolve(address))
  })

  // Looks `name` up until `done()` holds: each lookup of a stale entry
  // starts its refresh, as a service's traffic does.
  async function lookupUntil (lookup, name, done, options) {
    return eventually(async () => {
      await lookup(name, options)
      return done()
    })
  }

  t.test('a short name found at the second search domain is kept for its record\'s TTL', async (t) => {
    server.set('statsd.monitoring.svc.cluster.local', { a: ['10.20.0.1'], ttl: 7 })
    server.resetCounts()
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const notes = []
    const onSearch = (m) => notes.push(m)
    dc.subscribe('io-hygiene:dns:search', onSearch)
    t.teardown(() => dc.unsubscribe('io-hygiene:dns:search', onSearch))
    const lookup = lookupOf(cache)
    t.equal(await lookup('statsd.monitoring'), '10.20.0.1')
    // Learned at the entry's first refresh, once minTtlMs has passed.
    t.ok(await lookupUntil(lookup, 'statsd.monitoring', () => cache[kInspect]('statsd.monitoring', 0).entry.ttlMs === 7000), 'kept 7 s, its TTL, not fallbackTtlMs')
    t.match(cache.stats(), { upstreamLookups: 1, searchLearned: 1, searchTries: 1, refreshesKept: 1, fallbacks: 0 })
    t.equal(server.count('statsd.monitoring'), 0, 'the bare name is never asked: the search list answered first')
    t.equal(server.count('statsd.monitoring.cluster.local'), 0, 'nor a search domain after the one that answered')
    t.equal(server.count('statsd.monitoring.ns1.svc.cluster.local', 'AAAA'), 1, 'the first domain: only getaddrinfo asked its AAAA (our A had NXDOMAIN)')
    t.same(notes.map((n) => [n.hostname, n.fqdn, n.triedBefore, n.ndots]), [['statsd.monitoring', 'statsd.monitoring.svc.cluster.local', 1, 5]], 'pointed out once')
  })

  t.test('refreshes ask the learned name; an unchanged answer costs no getaddrinfo, a changed one is picked up', async (t) => {
    const fqdn = 'api.payments.svc.cluster.local'
    server.set(fqdn, { a: ['10.21.0.1'], aaaa: ['fd00::21:1'], ttl: 1 })
    server.resetCounts()
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    const all = { all: true }
    await lookup('api.payments', all)
    t.ok(await lookupUntil(lookup, 'api.payments', () => cache.stats().refreshesKept >= 3, all), 'three refreshes kept the answer')
    t.equal(cache.stats().upstreamLookups, 1, 'one getaddrinfo in all')
    t.ok(server.count(fqdn, 'A') >= 4 && server.count(fqdn, 'AAAA') >= 4, 'A and AAAA of the learned name: this host has both families')
    t.equal(server.count('api.payments.cluster.local'), 0)
    t.equal(server.count('api.payments'), 0)

    server.set(fqdn, { a: ['10.21.0.2'], aaaa: ['fd00::21:1'], ttl: 1 })
    const moved = await eventually(async () => (await lookup('api.payments', all)).some((a) => a.address === '10.21.0.2'))
    t.ok(moved, 'the new address, at the refresh after the change')
    t.equal(cache.stats().upstreamLookups, 2, 'the change went through getaddrinfo')
    t.equal(cache[kInspect]('api.payments', 0).entry.ttlMs, 1000, 'and kept its TTL: DNS had said the same')
  })

  t.test('a name added to the hosts file is answered from it at the next refresh', async (t) => {
    server.set('cart.shop.svc.cluster.local', { a: ['10.22.0.1'], ttl: 1 })
    const cache = createDnsCache({ hostsFile: '/etc/hosts', fallbackTtlMs: 200 })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    await lookup('cart.shop')
    t.ok(await lookupUntil(lookup, 'cart.shop', () => cache.stats().refreshesKept >= 1), 'learned through DNS')
    fs.writeFileSync('/etc/hosts', `${HOSTS}10.22.9.9 cart.shop\n`)
    t.teardown(() => fs.writeFileSync('/etc/hosts', HOSTS))
    const before = cache.stats().upstreamLookups
    t.ok(await eventually(async () => (await lookup('cart.shop')) === '10.22.9.9'), 'the file\'s address')
    t.ok(cache.stats().upstreamLookups > before, 'from getaddrinfo')
  })

  t.test('a change of resolv.conf is noticed: the next refresh goes through getaddrinfo', async (t) => {
    server.set('db.data.svc.cluster.local', { a: ['10.23.0.1'], ttl: 1 })
    server.set('db.data.cluster.local', { a: ['10.23.0.2'], ttl: 1 })
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    t.equal(await lookup('db.data'), '10.23.0.1')
    t.ok(await lookupUntil(lookup, 'db.data', () => cache.stats().refreshesKept >= 1))
    const original = fs.readFileSync('/etc/resolv.conf', 'utf8')
    fs.writeFileSync('/etc/resolv.conf', original.replace(/^search .*$/m, 'search ns1.svc.cluster.local cluster.local'))
    t.teardown(() => fs.writeFileSync('/etc/resolv.conf', original))
    t.ok(await eventually(async () => (await lookup('db.data')) === '10.23.0.2'), 'the answer the new search list gives')
  })

  t.test('a caller that pins family 4 gets no AAAA query from the refresh', async (t) => {
    const fqdn = 'queue.jobs.svc.cluster.local'
    server.set(fqdn, { a: ['10.24.0.1'], aaaa: ['fd00::24:1'], ttl: 1 })
    server.resetCounts()
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    await lookup('queue.jobs', { family: 4 })
    t.ok(await lookupUntil(lookup, 'queue.jobs', () => cache.stats().refreshesKept >= 2, { family: 4 }))
    t.equal(server.count(fqdn, 'AAAA'), 0)
    t.ok(server.count(fqdn, 'A') >= 3)
  })

  t.test('a V4MAPPED caller is refreshed through getaddrinfo', async (t) => {
    server.set('legacy.ops.svc.cluster.local', { a: ['10.28.0.1'], ttl: 1 })
    const cache = createDnsCache({ hostsFile: '/etc/hosts', fallbackTtlMs: 1000 })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    const options = { family: 6, hints: dns.V4MAPPED }
    t.equal(await lookup('legacy.ops', options), '::ffff:10.28.0.1')
    t.ok(await lookupUntil(lookup, 'legacy.ops', () => cache.stats().upstreamLookups >= 3, options), 'each refresh a getaddrinfo')
    t.equal(await lookup('legacy.ops', options), '::ffff:10.28.0.1')
    t.equal(cache.stats().refreshesKept, 0)
  })

  t.test('a name another source answers keeps fallbackTtlMs until its answer changes', async (t) => {
    // getaddrinfo answers with other addresses than the DNS name has, just
    // asked (as an NSS service in front of DNS would): the entry is not learnt.
    server.set('flip.ops.svc.cluster.local', { a: ['10.25.0.1'], ttl: 1 })
    let nss = '10.25.9.9'
    const original = dns.lookup
    dns.lookup = function (name, options, callback) {
      if (name === 'flip.ops') return process.nextTick(callback, null, [{ address: nss, family: 4 }])
      return original.apply(this, arguments)
    }
    let cache
    try {
      cache = createDnsCache({ hostsFile: '/etc/hosts', fallbackTtlMs: 300 })
    } finally {
      dns.lookup = original
    }
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    t.equal(await lookup('flip.ops'), '10.25.9.9')
    t.ok(await untilStale(cache, 'flip.ops'))
    await lookup('flip.ops')
    t.ok(await eventually(() => cache.stats().fallbacks === 1), 'getaddrinfo again, kept fallbackTtlMs')
    t.equal(cache[kInspect]('flip.ops', 0).entry.ttlMs, 300)
    t.equal(cache.stats().searchLearned, 0)
    const queries = server.count('flip.ops.svc.cluster.local')
    t.ok(await untilStale(cache, 'flip.ops'))
    await lookup('flip.ops')
    t.ok(await eventually(() => cache.stats().fallbacks === 2), 'refreshed by getaddrinfo')
    t.equal(server.count('flip.ops.svc.cluster.local'), queries, 'without asking DNS')
    nss = '10.25.0.1'
    t.ok(await eventually(async () => (await lookup('flip.ops')) === '10.25.0.1' && cache[kInspect]('flip.ops', 0).entry.ttlMs === 1000), 'its answer changed to DNS\'s: learnt, kept its TTL')
  })

  t.test('minTtlMs 0 learns at once: a trailing dot, two slots of one name, another source, a failing server', async (t) => {
    server.set('pay.ops.svc.cluster.local', { a: ['10.29.0.1'], ttl: 3 })
    server.set('nss.ops.svc.cluster.local', { a: ['10.29.0.2'], ttl: 3 })
    server.set('svcf.ops.svc.cluster.local', { a: ['10.29.0.3'], ttl: 3 })
    // An NSS service in front of DNS, as the cache sees it: a dns.lookup
    // that answers nss.ops itself.
    const original = dns.lookup
    dns.lookup = function (name, options, callback) {
      if (name === 'nss.ops') return process.nextTick(callback, null, [{ address: '10.29.9.9', family: 4 }])
      if (name === 'nssonly.ops') return process.nextTick(callback, null, [{ address: '10.29.9.8', family: 4 }])
      return original.apply(this, arguments)
    }
    let cache
    try {
      cache = createDnsCache({ hostsFile: '/etc/hosts', minTtlMs: 0, fallbackTtlMs: 1000 })
    } finally {
      dns.lookup = original
    }
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    const ttlOf = (name, slot = 0) => cache[kInspect](name, slot).entry?.ttlMs
    await lookup('pay.ops.svc.cluster.local.')
    await lookup('pay.ops')
    await lookup('pay.ops', { family: 4 })
    await lookup('nss.ops')
    t.equal(await lookup('pay.ops', { family: 6, hints: dns.V4MAPPED }), '::ffff:10.29.0.1')
    const learned = await eventually(() => ttlOf('pay.ops.svc.cluster.local.') === 3000 && ttlOf('pay.ops') === 3000 && ttlOf('pay.ops', 8) === 3000 && ttlOf('nss.ops') === 1000)
    t.ok(learned, JSON.stringify([ttlOf('pay.ops.svc.cluster.local.'), ttlOf('pay.ops'), ttlOf('pay.ops', 8), ttlOf('nss.ops'), cache.stats()]))
    t.equal(cache.stats().searchLearned, 1, 'a name is counted once, whatever its slots; a trailing dot is no search')
    t.ok(await eventually(() => cache.stats().fallbacks === 2), 'the other source\'s answer keeps fallbackTtlMs, and so does a V4MAPPED one')
    await lookup('nssonly.ops')
    t.ok(await eventually(() => cache.stats().fallbacks === 3), 'a name no DNS candidate has: fallbackTtlMs')
    t.equal(cache[kInspect]('nssonly.ops', 0).entry.route, 'system', 'refreshed by getaddrinfo from then on')

    t.equal(await lookup('svcf.ops'), '10.29.0.3')
    server.mode = 'servfail'
    t.teardown(() => { server.mode = 'answer' })
    t.ok(await eventually(() => cache.stats().fallbacks === 4), 'a server failing while the name is learned: fallbackTtlMs')
    t.equal(ttlOf('svcf.ops'), 1000)
    server.mode = 'answer'
    t.ok(await lookupUntil(lookup, 'svcf.ops', () => ttlOf('svcf.ops') === 3000), 'learned at its next refresh')
  })

  t.test('a server failing at a refresh that learns: getaddrinfo, then serve-stale', async (t) => {
    server.set('down.ops.svc.cluster.local', { a: ['10.29.1.1'], ttl: 3 })
    const cache = createDnsCache({ hostsFile: '/etc/hosts', errorTtlMs: 60_000 })
    t.teardown(() => cache.close())
    const lookup = lookupOf(cache)
    t.equal(await lookup('down.ops'), '10.29.1.1')
    server.mode = 'servfail'
    t.teardown(() => { server.mode = 'answer' })
    t.ok(await untilStale(cache, 'down.ops'))
    t.equal(await lookup('down.ops'), '10.29.1.1', 'the stale answer')
    t.ok(await eventually(() => cache.stats().errors.EAI_AGAIN === 1), 'getaddrinfo failed too')
    t.equal(await lookup('down.ops'), '10.29.1.1', 'still served')
    t.equal(cache.stats().refreshesKept, 0)
  })

  t.test('a pending query never holds the process open', async (t) => {
    server.set('slow.ops.svc.cluster.local', { a: ['10.26.0.1'], ttl: 60 })
    server.resetCounts()
    // getaddrinfo's four queries are answered; the learning query is not.
    server.dropAfter = 4
    t.teardown(() => { server.dropAfter = Infinity })
    const code = `
      const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
      const cache = createDnsCache({ minTtlMs: 0, queryTimeoutMs: 3_600_000 })
      cache.lookup('slow.ops', {}, (err, address) => {
        process.on('exit', () => console.log(JSON.stringify({ err, address, stats: cache.stats() })))
      })`
    const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (chunk) => { out += chunk })
    // Not a timing assertion: the child exits at once when nothing holds it.
    const stuck = setTimeout(() => child.kill(), 60_000)
    const exitCode = await new Promise((resolve) => child.on('exit', resolve))
    clearTimeout(stuck)
    t.equal(exitCode, 0)
    const report = JSON.parse(out)
    t.equal(report.address, '10.26.0.1')
    t.ok(report.stats.ttlQueries >= 1, 'the learning query had been sent')
    t.ok(await eventually(() => server.queries > 4), 'and reached the server')
  })

  t.test('NODE_DEBUG=io-hygiene:dns prints the fully qualified spelling, once per name', async (t) => {
    server.set('statsd.monitoring.svc.cluster.local', { a: ['10.20.0.1'], ttl: 7 })
    const code = `
      const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
      const cache = createDnsCache({ minTtlMs: 0 })
      cache.lookup('statsd.monitoring', {}, () => cache.lookup('statsd.monitoring', { family: 4 }, () => {
        const wait = setInterval(() => {
          if (cache.stats().searchLearned === 1 && cache.stats().ttlQueries >= 5) { clearInterval(wait); cache.close() }
        }, 10)
      }))`
    const child = spawn(process.execPath, ['-e', code], { env: { ...process.env, NODE_DEBUG: 'io-hygiene:dns' }, stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr.on('data', (chunk) => { err += chunk })
    const stuck = setTimeout(() => child.kill(), 60_000)
    t.equal(await new Promise((resolve) => child.on('exit', resolve)), 0)
    clearTimeout(stuck)
    const lines = err.split('\n').filter((l) => l.includes('spell it'))
    t.equal(lines.length, 1, 'once, though two entries learned it')
    t.match(lines[0], 'statsd.monitoring is answered as statsd.monitoring.svc.cluster.local after 1 search domain(s) without it (ndots:5)')
    t.match(lines[0], '"statsd.monitoring.svc.cluster.local."')
  })

  t.test('defaults: getaddrinfo alone answers what dns.lookup answers', async (t) => {
    server.set('web.front.svc.cluster.local', { a: ['10.27.0.1'], ttl: 30 })
    const cache = createDnsCache()
    t.teardown(() => cache.close())
    const original = await new Promise((resolve) => dns.lookup('web.front', { all: true }, (err, list) => resolve({ err, list })))
    const ours = await new Promise((resolve) => cache.lookup('web.front', { all: true }, (err, list) => resolve({ err, list })))
    t.same(ours, original)
  })
}
