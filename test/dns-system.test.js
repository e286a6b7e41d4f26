'use strict'

// The system-resolver path, differentially against Node's own dns.lookup, in a
// private mount namespace whose /etc/resolv.conf and /etc/hosts point at a
// test DNS server.
const { enterNamespace } = require('./helpers/in-namespace')

const HOSTS = [
  '127.0.0.1 localhost',
  '::1 localhost ip6-localhost',
  '10.4.0.1 hosts.test',
  'fd00::4:1 hosts.test',
  '10.5.0.1 both.test',
  '',
].join('\n')

const inside = enterNamespace(__filename, { hosts: HOSTS, search: ['corp.test'] })
if (inside) run(inside)

function run ({ nameserver }) {
  const t = require('tap')
  const dns = require('node:dns')
  const util = require('node:util')
  const { startDnsServer } = require('./helpers/dns-server')
  const { eventually, untilStale } = require('./helpers/dns-cache')
  const { kInspect } = require('../lib/dns/cache')
  const ioHygiene = require('..')
  const execFile = util.promisify(require('node:child_process').execFile)

  const originalLookup = dns.lookup
  const originalPromise = dns.promises.lookup

  let server
  t.before(async () => {
    server = await startDnsServer({ port: 53, address: nameserver })
    server.set('dual.test', { a: ['10.3.0.1', '10.3.0.2'], aaaa: ['fd00::3:1'], ttl: 300 })
    server.set('v4.test', { a: ['10.3.1.1'], ttl: 300 })
    server.set('v6.test', { aaaa: ['fd00::3:2'], ttl: 300 })
    server.set('both.test', { a: ['10.5.0.99'], ttl: 300 })
    server.set('short.corp.test', { a: ['10.6.0.1'], ttl: 300 })
    server.set('loop.test', { a: ['127.0.0.1'], aaaa: ['::1'], ttl: 300 })
  })
  t.teardown(() => server.close())

  // Case variants follow the spelling they share an entry with, so that they
  // are answered from it: every field that echoes the name must still be the
  // caller's own (an error's message and hostname).
  const NAMES = ['dual.test', 'Dual.TEST', 'v4.test', 'v6.test', 'hosts.test', 'HOSTS.test', 'both.test', 'short', 'SHORT',
    'localhost', 'LOCALHOST', 'LocalHost', 'localhost.', 'missing.test', 'Missing.TEST', 'missing.test.', 'MISSING.TEST.',
    '127.0.0.1', '::1']
  const { ADDRCONFIG, V4MAPPED, ALL } = dns
  const FORMS = [
    undefined, null, 0, 4, 6, {}, { all: true }, { family: 4 }, { family: 6 }, { family: 'IPv4' },
    { family: 'IPv6', all: true }, { family: 0, all: true }, { hints: ADDRCONFIG, all: true },
    { hints: ADDRCONFIG | V4MAPPED, family: 6 }, { hints: V4MAPPED, family: 6, all: true },
    { hints: ADDRCONFIG | V4MAPPED | ALL, family: 6, all: true }, { verbatim: true, all: true },
    { verbatim: false, all: true }, { order: 'ipv4first', all: true }, { order: 'ipv6first', all: true },
    { order: 'verbatim' }, { order: 'ipv6first' }, { order: 'ipv4first', verbatim: true, all: true },
    { family: null, hints: null, all: false, verbatim: null, order: null },
  ]
  const INVALID = [
    [123, {}], [null, {}], [undefined, { all: true }], ['', {}], ['', { all: true, family: 6 }],
    ['dual.test', 'x'], ['dual.test', { family: 5 }], ['dual.test', { hints: 999 }], ['dual.test', { all: 1 }],
    ['dual.test', { order: 'x' }], ['dual.test', { verbatim: 'x' }], ['dual.test', 5], ['dual.test', {}, 'nocb'],
    ['dual.test', { hints: 1.5 }], [{ toString: () => 'dual.test' }, {}],
  ]

  // Calls a dns.lookup-shaped function; describes what happened.
  function call (fn, hostname, options, callback = true) {
    return new Promise((resolve) => {
      let sync = true
      const cb = (err, ...args) => resolve({ sync, err: err && describeError(err), args })
      try {
        if (options === undefined && callback === true) fn(hostname, cb)
        else if (callback === true) fn(hostname, options, cb)
        else fn(hostname, options, callback)
      } catch (err) {
        resolve({ threw: describeError(err) })
      }
      sync = false
    })
  }

  // Node's errors have an internal subclass of Error as prototype, and a
  // stack that starts in Node's dns module.
  const nodeErrorPrototypes = new Set()
  function describeError (err) {
    const prototype = Object.getPrototypeOf(err)
    if (err.syscall === 'getaddrinfo' && prototype !== Error.prototype) nodeErrorPrototypes.add(prototype)
    return {
      class: err.constructor.name,
      name: err.name,
      message: err.message,
      keys: Object.keys(err),
      prototype: prototype === Error.prototype ? 'Error.prototype' : nodeErrorPrototypes.has(prototype) ? "Node's" : 'other',
      stackStart: stackStart(err),
      ...err,
    }
  }

  // Where the stack starts: in Node itself (node:dns, or node:internal/dns/promises
  // for the promise API, where ours start in node:dns), or in a file.
  function stackStart (err) {
    const frame = err.stack.split('\n')[1] ?? ''
    const file = /\((.*?):\d+:\d+\)/.exec(frame)?.[1] ?? frame
    return file.startsWith('node:') ? 'node' : file
  }

  async function callPromise (fn, hostname, options) {
    try {
      const value = await fn(hostname, options)
      return { value }
    } catch (err) {
      return { err: describeError(err) }
    }
  }

  t.test('patched dns.lookup answers exactly as the original, for every form', async (t) => {
    for (const order of ['verbatim', 'ipv4first', 'ipv6first']) {
      dns.setDefaultResultOrder(order)
      const expected = []
      for (const name of NAMES) for (const form of FORMS) expected.push(await call(originalLookup, name, form))
      const handle = ioHygiene.install()
      let i = 0
      for (const name of NAMES) {
        for (const form of FORMS) {
          const first = await call(dns.lookup, name, form)
          const second = await call(dns.lookup, name, form)
          const label = `${order} ${name} ${JSON.stringify(form)}`
          t.same(first, expected[i], label)
          t.same(second, expected[i], `${label} (cached)`)
          t.equal(first.sync, false, `${label} is asynchronous`)
          i++
        }
      }
      t.ok(handle.dns.stats().hits > 0)
      ioHygiene.uninstall()
    }
    dns.setDefaultResultOrder('verbatim')
  })

  // Which comes first: a setImmediate scheduled just before the lookup, or
  // the lookup's answer. `ask(done)` starts one lookup that calls done().
  function first (ask) {
    return new Promise((resolve) => {
      const seen = []
      const done = (what) => {
        seen.push(what)
        if (seen.length === 2) resolve(seen[0])
      }
      setImmediate(done, 'setImmediate')
      ask(() => done('lookup'))
    })
  }

  t.test('every answer comes on a later turn of the event loop, as Node\'s own lookup of a name: after a setImmediate scheduled before it', async (t) => {
    server.set('turn.test', { a: ['10.3.3.1'], ttl: 300 })
    server.set('turn-stale.test', { a: ['10.3.3.2'], ttl: 1 })
    const forms = {
      callback: (lookup) => (name, done) => lookup(name, { all: true }, done),
      'callback, no options': (lookup) => (name, done) => lookup(name, done),
      'util.promisify': (lookup) => (name, done) => util.promisify(lookup)(name).then(done, done),
      'dns.promises': (lookup, promises) => (name, done) => promises(name, { family: 4 }).then(done, done),
    }
    const names = ['turn.test', 'missing.test', '127.0.0.1', '::1']
    const expected = {}
    for (const [form, make] of Object.entries(forms)) {
      const ask = make(originalLookup, originalPromise)
      for (const name of names) expected[`${form} ${name}`] = await first((done) => ask(name, done))
    }
    // Node's own: a name after the setImmediate, an IP literal before it.
    t.equal(expected['callback turn.test'], 'setImmediate', 'the oracle: Node answers a name on a later turn')
    t.equal(expected['callback 127.0.0.1'], 'lookup', 'the oracle: Node answers an IP literal on this turn')

    const { dns: cache } = ioHygiene.install({ http: false, dns: { minTtlMs: 0, errorTtlMs: 60_000 } })
    t.teardown(() => ioHygiene.uninstall())
    for (const [form, make] of Object.entries(forms)) {
      const ask = make(dns.lookup, dns.promises.lookup)
      for (const name of names) {
        await first((done) => ask(name, done)) // a miss: the answer (or error) is now cached
        t.equal(await first((done) => ask(name, done)), expected[`${form} ${name}`], `${form} ${name}: cached, in Node's order`)
      }
    }
    t.ok(cache.stats().hits >= 4 && cache.stats().negativeHits >= 4, 'answered by hits and cached errors')

    // A stale answer, served at once while the refresh runs.
    const ask = forms.callback(dns.lookup)
    await first((done) => ask('turn-stale.test', done))
    t.ok(await untilStale(cache, 'turn-stale.test', 0), 'the TTL runs out')
    const served = cache.stats().staleServed
    t.equal(await first((done) => ask('turn-stale.test', done)), 'setImmediate', 'a stale answer, after the setImmediate')
    t.equal(cache.stats().staleServed, served + 1)
  })

  t.test('perf_hooks: one dns entry per resolution, for the name as the caller wrote it; none for hits', async (t) => {
    const { PerformanceObserver } = require('node:perf_hooks')
    server.set('perf.test', { a: ['10.9.0.1'], ttl: 300 })
    const entries = []
    const observer = new PerformanceObserver((list) => entries.push(...list.getEntries()))
    observer.observe({ entryTypes: ['dns'] })
    t.teardown(() => observer.disconnect())
    ioHygiene.install({ http: false })
    t.teardown(() => ioHygiene.uninstall())
    const lookup = util.promisify(dns.lookup)
    server.set('perf2.test', { a: ['10.9.0.2'], ttl: 300 })
    await Promise.all([lookup('Perf.TEST'), lookup('perf.test')])
    for (let i = 0; i < 5; i++) await lookup('PERF.test')
    // Another name's entry comes after any of these: wait for it.
    await lookup('perf2.test')
    t.ok(await eventually(() => entries.some((e) => e.detail?.hostname === 'perf2.test')))
    const lookups = entries.filter((e) => e.name === 'lookup' && e.detail.hostname !== 'perf2.test')
    t.equal(lookups.length, 1, 'one resolution, one entry; merged calls and hits record none')
    t.match(lookups[0].detail, { hostname: 'Perf.TEST', family: 0, addresses: [{ address: '10.9.0.1', family: 4 }] })
  })

  t.test('http.get: each request\'s socket connects in its own async context, merged lookups included', async (t) => {
    const http = require('node:http')
    const { AsyncLocalStorage } = require('node:async_hooks')
    const als = new AsyncLocalStorage()
    const web = http.createServer((req, res) => res.end('ok'))
    await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve))
    t.teardown(() => new Promise((resolve) => web.close(resolve)))
    ioHygiene.install({ http: false })
    t.teardown(() => ioHygiene.uninstall())
    const agent = new http.Agent({ keepAlive: false })
    t.teardown(() => agent.destroy())
    const get = (id) => new Promise((resolve, reject) => als.run({ id }, () => {
      const req = http.get({ host: 'loop.test', port: web.address().port, family: 4, agent }, (res) => res.resume().on('end', () => resolve(seen)))
      let seen = null
      req.on('socket', (socket) => socket.on('connect', () => { seen = als.getStore()?.id }))
      req.on('error', reject)
    }))
    t.same(await Promise.all([get(1), get(2), get(3)]), [1, 2, 3], 'a merged miss')
    t.same(await Promise.all([get(4), get(5), get(6)]), [4, 5, 6], 'hits')
  })

  t.test('names other than ASCII: each spelling answered as the original answers it', async (t) => {
    const { domainToASCII } = require('node:url')
    const names = ['xẞy.example', 'xßy.example', 'ΑΣ-1.example', 'ας-1.example', 'Ⴀx.example', 'ⴀx.example', 'XSSY.Example']
    names.forEach((name, i) => {
      const ascii = domainToASCII(name)
      if (ascii !== '') server.set(ascii, { a: [`10.8.0.${i + 1}`], ttl: 300 })
    })
    const forms = [{}, { all: true }, { family: 4 }]
    const expected = []
    for (const name of names) for (const form of forms) expected.push(await call(originalLookup, name, form))
    ioHygiene.install({ http: false })
    t.teardown(() => ioHygiene.uninstall())
    let i = 0
    for (const name of names) {
      for (const form of forms) {
        const label = `${name} ${JSON.stringify(form)}`
        t.same(await call(dns.lookup, name, form), expected[i], label)
        t.same(await call(dns.lookup, name, form), expected[i++], `${label} (cached)`)
      }
    }
  })

  t.test('patched dns.promises.lookup answers exactly as the original', async (t) => {
    const expected = []
    for (const name of NAMES) for (const form of FORMS) expected.push(await callPromise(originalPromise, name, form))
    ioHygiene.install()
    t.teardown(() => ioHygiene.uninstall())
    let i = 0
    for (const name of NAMES) {
      for (const form of FORMS) {
        t.same(await callPromise(dns.promises.lookup, name, form), expected[i], `${name} ${JSON.stringify(form)}`)
        t.same(await callPromise(dns.promises.lookup, name, form), expected[i], `${name} ${JSON.stringify(form)} (cached)`)
        i++
      }
    }
    t.same(await callPromise(util.promisify(dns.lookup), 'dual.test'), await callPromise(util.promisify(originalLookup), 'dual.test'))
    t.same(await callPromise(util.promisify(dns.lookup), 'dual.test', { all: true }), await callPromise(util.promisify(originalLookup), 'dual.test', { all: true }))
  })

  t.test('invalid arguments fail exactly as the original', async (t) => {
    const expected = []
    for (const [name, form, cb] of INVALID) expected.push(await call(originalLookup, name, form, cb ?? true))
    const expectedPromise = []
    for (const [name, form] of INVALID) expectedPromise.push(await promiseOutcome(originalPromise, name, form))
    ioHygiene.install()
    t.teardown(() => ioHygiene.uninstall())
    let i = 0
    for (const [name, form, cb] of INVALID) {
      t.same(await call(dns.lookup, name, form, cb ?? true), expected[i], `lookup(${String(name)}, ${JSON.stringify(form)})`)
      t.same(await promiseOutcome(dns.promises.lookup, name, form), expectedPromise[i], `promises.lookup(${String(name)}, ${JSON.stringify(form)})`)
      i++
    }
  })

  // Synchronous throws stay synchronous for the promise API too.
  async function promiseOutcome (fn, name, form) {
    let p
    try {
      p = fn(name, form)
    } catch (err) {
      return { threw: describeError(err) }
    }
    return callPromise(() => p)
  }

  t.test('the same shape as Node: arity, name, promisify', async (t) => {
    ioHygiene.install()
    t.teardown(() => ioHygiene.uninstall())
    t.equal(dns.lookup.length, originalLookup.length)
    t.equal(dns.lookup.name, originalLookup.name)
    t.same(Object.getOwnPropertySymbols(dns.lookup).map(String), Object.getOwnPropertySymbols(originalLookup).map(String))
    t.equal(dns.promises.lookup.length, originalPromise.length)
    // What a call returns: Node's request object, with its public fields.
    const describe = (request, callback) => ({
      keys: Object.keys(request),
      hostname: request.hostname,
      family: request.family,
      callback: request.callback === callback,
      oncomplete: typeof request.oncomplete === 'function' && request.oncomplete.name,
    })
    for (const [name, options] of [['dual.test', {}], ['Dual.TEST', { family: 6, all: true }], ['v4.test', 4], ['missing.test', { family: 'IPv4' }]]) {
      const done = []
      const returned = [originalLookup, dns.lookup].map((fn) => {
        let callback
        done.push(new Promise((resolve) => { callback = resolve }))
        return describe(fn(name, options, callback), callback)
      })
      await Promise.all(done)
      t.same(returned[1], returned[0], `${name} ${JSON.stringify(options)}: the request object`)
    }
  })

  t.test('TTL from DNS, a search-domain name\'s from the name that answered; hosts-file names cached for fallbackTtlMs', async (t) => {
    // minTtlMs 0: each TTL is learned at once, not at the entry's first refresh.
    const { dns: cache } = ioHygiene.install({ dns: { fallbackTtlMs: 60_000, minTtlMs: 0 } })
    t.teardown(() => ioHygiene.uninstall())
    const lookup = util.promisify(dns.lookup)
    server.set('deep.sub.corp.test', { a: ['10.6.0.2'], ttl: 300 })
    server.resetCounts()
    await lookup('hosts.test')
    t.same(await lookup('both.test', { family: 6, hints: dns.V4MAPPED }), { address: '::ffff:10.5.0.1', family: 6 })
    await lookup('short')
    // As many dots as ndots: sent as written first (no such name), then with the search domain.
    t.same(await lookup('deep.sub'), { address: '10.6.0.2', family: 4 })
    await lookup('dual.test', { all: true })
    // The TTL queries run after callers have their answers: wait for them to land.
    await eventually(() => cache.stats().fallbacks >= 2 && cache.stats().ttlQueries >= 7)
    t.equal(server.count('hosts.test'), 0, 'no DNS query for a hosts-file name')
    t.equal(server.count('both.test'), 0, 'nor for its IPv4-mapped answer')
    t.equal(server.count('short'), 0, 'never the bare short name: glibc found it in the search list')
    t.ok(server.count('short.corp.test', 'A') >= 1, 'the name that answered')
    // The cache's own counts: one getaddrinfo per name, and A and AAAA for
    // each name DNS answered (the server's counts also see glibc's
    // retransmissions when this process is slow to answer).
    t.match(cache.stats(), { upstreamLookups: 5, ttlQueries: 7, searchTries: 1, searchLearned: 2, fallbacks: 2 })
    t.equal(cache[kInspect]('short', 0).entry.ttlMs, 300_000, 'the record\'s TTL, not fallbackTtlMs')
    t.equal(cache[kInspect]('dual.test', 0).entry.ttlMs, 300_000)
    t.ok(server.count('deep.sub', 'A') >= 2, 'deep.sub as written: by the system resolver, then by the learning, in the same order')
    t.equal(cache[kInspect]('deep.sub', 0).entry.ttlMs, 300_000, 'deep.sub.corp.test answered it, and its TTL is kept')
    const before = server.queries
    for (let i = 0; i < 100; i++) {
      await lookup('hosts.test')
      await lookup('short')
      await lookup('deep.sub')
      await lookup('dual.test', { all: true })
    }
    t.equal(server.queries, before, 'all served from the cache')
    t.equal(cache.stats().upstreamLookups, 5)
  })

  t.test('case variants of a name share one getaddrinfo and one entry', async (t) => {
    const { dns: cache } = ioHygiene.install({ dns: { errorTtlMs: 60_000 } })
    t.teardown(() => ioHygiene.uninstall())
    const names = ['dual.test', 'DUAL.test', 'Dual.Test', 'localhost', 'LOCALHOST', 'LocalHost', 'missing.test', 'MISSING.test', 'Missing.Test']
    const expected = []
    for (const name of names) expected.push(await call(originalLookup, name, { all: true }))
    t.same(await Promise.all(names.map((name) => call(dns.lookup, name, { all: true }))), expected, 'concurrent: coalesced')
    t.match(cache.stats(), { upstreamLookups: 3, misses: 3, coalesced: 6, entries: 3 })
    for (let i = 0; i < names.length; i++) t.same(await call(dns.lookup, names[i], { all: true }), expected[i], `${names[i]} (cached)`)
    t.match(cache.stats(), { upstreamLookups: 3, hits: 6, negativeHits: 3, entries: 3 })
  })

  t.test('serve-stale through the system resolver', async (t) => {
    for (const mode of ['refuse', 'servfail', 'blackhole']) {
      const { dns: cache } = ioHygiene.install({ dns: { minTtlMs: 0, errorTtlMs: 5000 } })
      server.mode = 'answer'
      server.set('flaky.test', { a: ['10.7.0.1'], ttl: 1 })
      const lookup = util.promisify(dns.lookup)
      t.equal((await lookup('flaky.test', 4)).address, '10.7.0.1')
      await eventually(() => cache.stats().ttlQueries >= 1)
      t.ok(await untilStale(cache, 'flaky.test', 8), `${mode}: the TTL runs out`)
      server.mode = mode
      const answers = await Promise.all(Array.from({ length: 50 }, () => lookup('flaky.test', 4)))
      t.ok(answers.every((a) => a.address === '10.7.0.1'), `${mode}: the stale answer, at once`)
      t.equal(cache.stats().refreshes, 1, `${mode}: one refresh`)
      const failed = await eventually(() => cache.stats().errors.EAI_AGAIN === 1, 8000)
      t.ok(failed, `${mode}: the refresh failed with EAI_AGAIN`)
      t.equal((await lookup('flaky.test', 4)).address, '10.7.0.1', `${mode}: still served after the failure`)
      ioHygiene.uninstall()
    }
    server.mode = 'answer'
  })

  t.test('http.get, net.connect, undici.request, fetch and dgram are served from the cache', async (t) => {
    const http = require('node:http')
    const net = require('node:net')
    const dgram = require('node:dgram')
    const undici = require('undici')
    const { dns: cache } = ioHygiene.install()
    t.teardown(() => ioHygiene.uninstall())
    const web = http.createServer((req, res) => res.end('ok'))
    await new Promise((resolve) => web.listen(0, '127.0.0.1', resolve))
    t.teardown(() => web.close())
    const { port } = web.address()
    server.set('web.test', { a: ['127.0.0.1'], ttl: 300 })
    server.resetCounts()

    const get = () => new Promise((resolve, reject) => {
      http.get({ host: 'web.test', port, agent: false }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)) }).on('error', reject)
    })
    const connect = () => new Promise((resolve, reject) => {
      const socket = net.connect({ host: 'web.test', port }, () => { socket.destroy(); resolve(true) }).on('error', reject)
    })
    for (let i = 0; i < 5; i++) {
      t.equal(await get(), 200)
      t.equal(await connect(), true)
      const res = await undici.request(`http://web.test:${port}/`, { dispatcher: new undici.Agent() })
      t.equal(await res.body.text(), 'ok')
      const fetched = await fetch(`http://web.test:${port}/`, { headers: { connection: 'close' } })
      t.equal(await fetched.text(), 'ok')
    }
    // The cache's own counters, not the server's: glibc retransmits when this
    // process is slow to read its answer.
    t.match(cache.stats(), { misses: 1, upstreamLookups: 1 }, 'one getaddrinfo for 20 connections')
    t.ok(cache.stats().hits >= 19)
    t.equal(cache.stats().ttlQueries, 0, 'its TTL is learned at its first refresh (minTtlMs), not before')
    t.ok(server.count('web.test', 'A') >= 1)

    // udp4 and udp6 sockets each get the family they need from a dual-stack name.
    const r4 = dgram.createSocket('udp4')
    const r6 = dgram.createSocket('udp6')
    await new Promise((resolve) => r4.bind(0, '127.0.0.1', resolve))
    await new Promise((resolve) => r6.bind(0, '::1', resolve))
    const s4 = dgram.createSocket('udp4')
    const s6 = dgram.createSocket('udp6')
    t.teardown(() => { for (const s of [r4, r6, s4, s6]) s.close() })
    const got4 = new Promise((resolve) => r4.once('message', (m) => resolve(String(m))))
    const got6 = new Promise((resolve) => r6.once('message', (m) => resolve(String(m))))
    s4.send('four', r4.address().port, 'loop.test')
    s6.send('six', r6.address().port, 'loop.test')
    t.equal(await got4, 'four')
    t.equal(await got6, 'six')
  })

  t.test('ESM named imports of node:dns see the patch', async (t) => {
    const url = require('node:url').pathToFileURL(require.resolve('..')).href
    const code = `
      import { lookup } from 'node:dns'
      import dnsPromises from 'node:dns/promises'
      import { install, uninstall } from ${JSON.stringify(url)}
      const original = lookup
      const handle = install()
      const { lookup: again } = await import('node:dns')
      console.log(JSON.stringify({ patched: lookup !== original, same: again === lookup, promises: dnsPromises.lookup.name }))
      await new Promise((resolve) => lookup('dual.test', () => lookup('dual.test', resolve)))
      console.log(JSON.stringify(handle.dns.stats()))
      uninstall()
      console.log(JSON.stringify({ restored: lookup === original }))`
    const out = (await execFile(process.execPath, ['--input-type=module', '-e', code])).stdout.trim().split('\n').map((l) => JSON.parse(l))
    t.same(out[0], { patched: true, same: true, promises: 'lookup' })
    t.match(out[1], { hits: 1, misses: 1 })
    t.same(out[2], { restored: true })
  })

  t.test('node -r io-hygiene/register installs before the app, from IO_HYGIENE_* variables', async (t) => {
    const register = require.resolve('../register.js')
    const code = `
      const dns = require('node:dns')
      const { installed } = require(${JSON.stringify(require.resolve('..'))})
      dns.lookup('dual.test', () => dns.lookup('dual.test', () => {
        console.log(JSON.stringify({ hits: installed().dns.stats().hits, name: dns.lookup.name }))
      }))`
    const out = await execFile(process.execPath, ['-r', register, '-e', code], {
      env: { ...process.env, IO_HYGIENE_DNS_MAX_TTL_MS: '5000' },
    })
    t.same(JSON.parse(out.stdout), { hits: 1, name: 'lookup' })
    const off = await execFile(process.execPath, ['-r', register, '-e', `console.log(require(${JSON.stringify(require.resolve('..'))}).installed().dns)`], {
      env: { ...process.env, IO_HYGIENE_DNS: '0' },
    })
    t.equal(off.stdout.trim(), 'null', 'IO_HYGIENE_DNS=0 leaves dns.lookup alone')
    await t.rejects(execFile(process.execPath, ['-r', register, '-e', '0'], {
      env: { ...process.env, IO_HYGIENE_DNS_MAX_TTL_MS: 'soon' },
    }), { stderr: /ERR_IO_HYGIENE_INVALID_ENV/ })
  })

  t.test('uninstall restores the originals exactly', async (t) => {
    ioHygiene.install()
    t.not(dns.lookup, originalLookup)
    t.not(dns.promises.lookup, originalPromise)
    t.equal(ioHygiene.uninstall(), true)
    t.equal(dns.lookup, originalLookup)
    t.equal(dns.promises.lookup, originalPromise)
  })
}
