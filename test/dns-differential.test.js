'use strict'

// The cache against Node's own dns.lookup, at the same moments, while the
// resolver's world changes: a private mount namespace whose resolv.conf
// names a DNS server this test controls (two search domains, ndots:1) and
// whose hosts file it writes, the real getaddrinfo behind Node's lookup.
// The contract: the cache differs from Node only as a TTL-respecting caching
// resolver between it and the servers would. So after every change, once the
// cached answer's TTL has run out, the next refresh answers what Node
// answers then (addresses and their order), and it is kept no longer than
// its record's TTL clamped to [minTtlMs, maxTtlMs] (the hosts file's
// answers: fallbackTtlMs).
const { enterNamespace } = require('./helpers/in-namespace')

const HOSTS = '127.0.0.1 localhost\n::1 localhost\n'
const SEARCH = ['a.test', 'b.test']

const inside = enterNamespace(__filename, { hosts: HOSTS, search: SEARCH, options: 'ndots:1 timeout:1 attempts:1' })
if (inside) run(inside)

function run ({ nameserver }) {
  const t = require('tap')
  const fs = require('node:fs')
  const dns = require('node:dns')
  const { startDnsServer } = require('./helpers/dns-server')
  const { eventually } = require('./helpers/wait')
  const { kInspect } = require('../lib/dns/cache')
  const { createDnsCache } = require('..')

  // Short TTLs so that each step is a refresh away; fallbackTtlMs long, so a
  // name wrongly kept for it shows.
  const OPTIONS = { hostsFile: '/etc/hosts', minTtlMs: 100, maxTtlMs: 1000, fallbackTtlMs: 2000, errorTtlMs: 100 }

  let server
  t.before(async () => {
    server = await startDnsServer({ port: 53, address: nameserver })
  })
  t.teardown(() => server.close())

  // Every address, in order, or the error's code.
  // `hints`: 0, or ADDRCONFIG as net.connect, http and undici pass it.
  const answerOf = (lookup, name, hints = 0, family = 0) => new Promise((resolve) => {
    lookup(name, { all: true, hints, family }, (err, list) => resolve(err ? err.code : list.map((a) => a.address).join(' ')))
  })
  const node = (name) => answerOf(dns.lookup, name)

  // `family`: 0, 4 or 6, as the lookups pass it.
  function differ (t, hints = 0, family = 0) {
    const cache = createDnsCache(OPTIONS)
    t.teardown(() => cache.close())
    const entry = (name) => cache[kInspect](name, [0, 4, 6].indexOf(family) * 8 + (hints === dns.ADDRCONFIG ? 1 : 0)).entry
    // Both answers at the same moment.
    const both = async (name) => {
      const [ours, theirs] = await Promise.all([answerOf(cache.lookup, name, hints, family), answerOf(dns.lookup, name, hints, family)])
      return { ours, theirs }
    }
    // After a change: the cached answer may stand until its TTL runs out;
    // the refresh that follows must answer as Node does, and keep it no
    // longer than `boundMs`. Returns the answer both gave.
    const follows = async (name, boundMs, what) => {
      t.ok(await eventually(() => entry(name).fresh === false), `${what}: the cached answer ran out`)
      const before = entry(name).dueAt
      await answerOf(cache.lookup, name, hints, family) // served stale; starts the refresh
      t.ok(await eventually(() => !entry(name).refreshing && entry(name).dueAt !== before && entry(name).fresh), `${what}: refreshed`)
      const { ours, theirs } = await both(name)
      t.equal(ours, theirs, `${what}: the refresh answers what Node answers`)
      t.ok(entry(name).ttlMs <= boundMs, `${what}: kept ${entry(name).ttlMs} ms, at most ${boundMs}`)
      return theirs
    }
    // Both agree now; then the cache settles (its TTL set: the hosts file
    // read, the TTL learnt) before the test changes anything.
    const agree = async (name, what) => {
      const { ours, theirs } = await both(name)
      t.equal(ours, theirs, what)
      await eventually(() => entry(name).dueAt > 0 || entry(name).error !== null)
      return theirs
    }
    return { cache, entry, follows, agree }
  }

  t.test('a search candidate before the learnt one starts to exist, then is deleted', async (t) => {
    server.soa = { ttl: 1, minimum: 1 } // its NXDOMAIN may be kept 1 s, no more
    t.teardown(() => { server.soa = null })
    server.set('web.b.test', { a: ['10.41.0.2'], ttl: 1 })
    const { follows, agree, entry } = differ(t)
    t.equal(await agree('web', 'first answer'), '10.41.0.2')
    await follows('web', 1000, 'learnt through b.test')
    t.equal(entry('web').route.fqdn, 'web.b.test')
    server.set('web.a.test', { a: ['10.41.0.1'], ttl: 1 })
    t.equal(await follows('web', 1000, 'web.a.test created'), '10.41.0.1')
    await follows('web', 1000, 'and kept')
    server.delete('web.a.test')
    t.equal(await follows('web', 1000, 'web.a.test deleted'), '10.41.0.2')
  })

  t.test('the name as written starts to exist after it was learnt through a search domain', async (t) => {
    server.set('git.internal.a.test', { a: ['10.42.0.2'], ttl: 1 })
    const { follows, agree, entry } = differ(t)
    t.equal(await agree('git.internal', 'first answer'), '10.42.0.2')
    await follows('git.internal', 1000, 'learnt through a.test')
    t.equal(entry('git.internal').route.fqdn, 'git.internal.a.test')
    server.set('git.internal', { a: ['10.42.0.1'], ttl: 1 })
    t.equal(await follows('git.internal', 1000, 'the name as written created'), '10.42.0.1')
  })

  t.test('hosts file entries added and removed are followed at the next refresh', async (t) => {
    t.teardown(() => fs.writeFileSync('/etc/hosts', HOSTS))
    server.set('svc.test', { a: ['10.43.0.1'], ttl: 1 })
    const { follows, agree } = differ(t)
    t.equal(await agree('svc.test', 'first answer'), '10.43.0.1')
    fs.writeFileSync('/etc/hosts', `${HOSTS}10.43.9.9 svc.test\n`)
    t.equal(await follows('svc.test', OPTIONS.fallbackTtlMs, 'listed in the hosts file'), '10.43.9.9')
    fs.writeFileSync('/etc/hosts', HOSTS)
    t.equal(await follows('svc.test', 1000, 'no longer listed'), '10.43.0.1')
    await follows('svc.test', 1000, 'and kept for its TTL')
  })

  // getaddrinfo asks the hosts file for the family it wants: a name the file
  // lists for the other family only is answered by DNS, with its TTL.
  for (const [family, listed, a, aaaa] of [[6, '10.45.9.9', ['10.45.0.1'], ['fd00::45:1']], [4, 'fd00::45:9', ['10.45.0.1'], ['fd00::45:1']]]) {
    t.test(`family ${family}: a name the hosts file lists for the other family only keeps its DNS TTL`, async (t) => {
      t.teardown(() => fs.writeFileSync('/etc/hosts', HOSTS))
      fs.writeFileSync('/etc/hosts', `${HOSTS}${listed} other${family}.test\n`)
      server.set(`other${family}.test`, { a, aaaa, ttl: 1 })
      const { follows, agree } = differ(t, 0, family)
      const first = family === 6 ? 'fd00::45:1' : '10.45.0.1'
      t.equal(await agree(`other${family}.test`, 'first answer'), first)
      await follows(`other${family}.test`, 1000, 'learnt from DNS')
      server.set(`other${family}.test`, { a: ['10.45.0.2'], aaaa: ['fd00::45:2'], ttl: 1 })
      t.equal(await follows(`other${family}.test`, 1000, 'changed in DNS'), family === 6 ? 'fd00::45:2' : '10.45.0.2')
    })
  }

  t.test('a record changed before the first refresh and after it keeps its TTL', async (t) => {
    server.set('chg.test', { a: ['10.44.0.1'], ttl: 1 })
    const { follows, agree } = differ(t)
    t.equal(await agree('chg.test', 'first answer'), '10.44.0.1')
    server.set('chg.test', { a: ['10.44.0.2'], ttl: 1 })
    t.equal(await follows('chg.test', 1000, 'changed before the first refresh'), '10.44.0.2')
    server.set('chg.test', { a: ['10.44.0.3'], ttl: 1 })
    t.equal(await follows('chg.test', 1000, 'changed again'), '10.44.0.3')
    await follows('chg.test', 1000, 'unchanged')
  })

  t.test('a name deleted from DNS: the refresh fails as Node does, and a name created again is learnt again', async (t) => {
    server.set('gone.test', { a: ['10.50.0.1'], ttl: 1 })
    const { follows, agree, entry, cache } = differ(t)
    t.equal(await agree('gone.test', 'first answer'), '10.50.0.1')
    await follows('gone.test', 1000, 'learnt')
    server.delete('gone.test')
    t.ok(await eventually(() => entry('gone.test').fresh === false), 'the cached answer ran out')
    await answerOf(cache.lookup, 'gone.test') // served stale; starts the refresh
    t.ok(await eventually(() => entry('gone.test').error !== null), 'refreshed')
    t.equal(await agree('gone.test', 'deleted'), 'ENOTFOUND')
    server.set('gone.test', { a: ['10.50.0.2'], ttl: 1 })
    t.ok(await eventually(() => performance.now() >= entry('gone.test').errorUntil), 'the negative answer ran out')
    t.equal(await agree('gone.test', 'created again'), '10.50.0.2')
    await follows('gone.test', 1000, 'learnt again, for its TTL')
  })

  t.test('a rotating round-robin name comes back in each order Node gives', async (t) => {
    const addresses = ['10.45.0.1', '10.45.0.2', '10.45.0.3']
    server.set('rr.test', { a: addresses, ttl: 1 })
    const { follows, agree, cache } = differ(t)
    await agree('rr.test', 'first answer')
    await follows('rr.test', 1000, 'learnt')
    const seen = new Set()
    for (let i = 1; i <= 3; i++) {
      const rotated = addresses.slice(i % 3).concat(addresses.slice(0, i % 3))
      server.set('rr.test', { a: rotated, ttl: 1 })
      seen.add(await follows('rr.test', 1000, `rotation ${i}`))
    }
    t.equal(seen.size, 3, 'three orders, as Node gave them')
    t.ok(cache.stats().refreshesKept >= 1, 'an unrotated refresh costs no getaddrinfo')
  })

  for (const [hints, label] of [[0, 'no hints'], [dns.ADDRCONFIG, 'ADDRCONFIG']]) {
    t.test(`mixed A and AAAA (${label}): addresses and their order as getaddrinfo sorts them`, async (t) => {
      const name = `mixed${hints}.test`
      server.set(name, { a: ['10.46.0.1'], aaaa: ['fd00:46::1'], ttl: 1 })
      const { follows, agree } = differ(t, hints)
      await agree(name, 'first answer')
      await follows(name, 1000, 'learnt')
      server.set(name, { a: ['10.46.0.1'], aaaa: ['fd00:46::2', 'fd00:46::1'], ttl: 1 })
      await follows(name, 1000, 'an AAAA added')
      server.set(name, { a: ['10.46.0.2', '10.46.0.1'], aaaa: ['fd00:46::1', 'fd00:46::2'], ttl: 1 })
      await follows(name, 1000, 'an A added, the AAAA reordered')
      server.set(name, { aaaa: ['fd00:46::1'], ttl: 1 })
      await follows(name, 1000, 'IPv6 only')
    })
  }

  t.test('nameserver lines glibc skips are skipped: refreshes go on, as Node\'s lookups do', async (t) => {
    const original = fs.readFileSync('/etc/resolv.conf', 'utf8')
    t.teardown(() => fs.writeFileSync('/etc/resolv.conf', original))
    // Each of these once became a server with port NaN or 0, and the
    // refresh's dgram.send() threw, uncaught.
    fs.writeFileSync('/etc/resolv.conf', `nameserver dns.corp.example\nnameserver 10.0.0.1#x\n${original}`)
    server.set('safe.test', { a: ['10.48.0.1'], ttl: 1 })
    const { follows, agree } = differ(t)
    t.equal(await agree('safe.test', 'first answer'), '10.48.0.1')
    await follows('safe.test', 1000, 'learnt from the server glibc asks')
    fs.writeFileSync('/etc/resolv.conf', `nameserver 10.0.0.1;\nnameserver [::1]\n${original}`)
    server.set('safe.test', { a: ['10.48.0.2'], ttl: 1 })
    t.equal(await follows('safe.test', 1000, 'changed'), '10.48.0.2')
  })

  // The reader's oracle: glibc itself. A line it takes makes Node's lookup
  // reach the test server; a line it skips leaves it no server (then it
  // asks 127.0.0.1:53, where nothing listens).
  t.test('each nameserver line is taken or skipped as the real getaddrinfo takes or skips it', async (t) => {
    const { parseResolvConf } = require('../lib/dns/resolv-conf')
    const original = fs.readFileSync('/etc/resolv.conf', 'utf8')
    t.teardown(() => fs.writeFileSync('/etc/resolv.conf', original))
    server.set('probe.test', { a: ['10.49.0.1'], ttl: 1 })
    const [, b, c, d] = nameserver.split('.').map(Number)
    const lines = [
      `nameserver ${nameserver}`, `nameserver ${nameserver} # ours`, `nameserver\t${nameserver}\tx`, ` nameserver ${nameserver}`,
      `nameserver ${nameserver};`, `nameserver ${nameserver}#x`, `nameserver ${nameserver}:53`, `nameserver [${nameserver}]`,
      `nameserver 127.${b}.${c * 256 + d}`, `nameserver 0x7f.${b}.${c}.${d}`, `nameserver 0177.${b}.${c}.${d}`,
      `NAMESERVER ${nameserver}`, `nameserver: ${nameserver}`, `nameserver ${nameserver}.0`, 'nameserver localhost',
    ]
    for (const line of lines) {
      const text = `${line}\noptions timeout:1 attempts:1\n`
      fs.writeFileSync('/etc/resolv.conf', text)
      const glibc = (await node('probe.test')) === '10.49.0.1'
      const ours = parseResolvConf(text, { env: {}, hostname: '' }).nameservers.includes(nameserver)
      t.equal(ours, glibc, `${JSON.stringify(line)}: ${glibc ? 'taken' : 'skipped'}`)
    }
    // Every word of a search line is a domain, a '#' too.
    const text = `nameserver ${nameserver}\nsearch none.test # x\noptions timeout:1 attempts:1\n`
    fs.writeFileSync('/etc/resolv.conf', text)
    server.resetCounts()
    await node('zz')
    const { searchCandidates } = require('../lib/dns/resolv-conf')
    const candidates = searchCandidates('zz', parseResolvConf(text, { env: {}, hostname: '' }))
    t.same(candidates, ['zz.none.test', 'zz.#', 'zz.x', 'zz'])
    for (const name of candidates) t.ok(server.count(name, 'A') > 0, `glibc asked ${name} too`)
  })

  t.test('NXDOMAIN with an SOA: the name created is answered once the negative answer runs out', async (t) => {
    server.soa = { ttl: 1, minimum: 1 }
    t.teardown(() => { server.soa = null })
    const { agree, cache, entry } = differ(t)
    t.equal(await agree('nx.test', 'no such name'), 'ENOTFOUND')
    server.set('nx.test', { a: ['10.47.0.1'], ttl: 1 })
    // A negative answer is kept errorTtlMs (here 100 ms), within the SOA's 1 s.
    t.ok(await eventually(() => performance.now() >= entry('nx.test').errorUntil))
    t.equal(await agree('nx.test', 'created'), '10.47.0.1')
    t.equal(cache.stats().negativeHits, 0)
  })
}
