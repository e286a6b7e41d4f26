'use strict'

const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const util = require('node:util')
const { execFile } = require('node:child_process')
const { cacheWithServer, eventually, sleep } = require('./helpers/dns-cache')
const { HostsFile, parseHosts } = require('../lib/dns/hosts')
const { Expiry } = require('../lib/dns/expiry')
const { wrap, originalOf } = require('../lib/patch')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-hosts-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

t.test('parseHosts reads addresses per name, case-insensitively, skipping comments and junk', async (t) => {
  const names = parseHosts('# comment\n10.0.0.1 A.test b.test # trailing\n\nnot-an-ip c.test\nfd00::1 a.test\n10.0.0.1 a.test\nlonely\n')
  t.same(names.get('a.test'), [{ address: '10.0.0.1', family: 4 }, { address: 'fd00::1', family: 6 }])
  t.same(names.get('b.test'), [{ address: '10.0.0.1', family: 4 }])
  t.equal(names.has('c.test'), false)
  t.equal(names.size, 2)
})

t.test('the hosts file is re-read when it changes, and a missing or unreadable one means no entries', async (t) => {
  const file = path.join(tmp, 'hosts')
  fs.writeFileSync(file, '10.0.0.1 one.test\n')
  const hosts = new HostsFile(file, 0)
  const ask = (name) => new Promise((resolve) => hosts.lookup(name, resolve))
  t.same(await ask('one.test'), [{ address: '10.0.0.1', family: 4 }])
  fs.writeFileSync(file, '10.0.0.2 one.test\n')
  fs.utimesSync(file, new Date(), new Date(Date.now() + 5000))
  t.same(await ask('one.test'), [{ address: '10.0.0.2', family: 4 }])
  t.same(await ask('one.test'), [{ address: '10.0.0.2', family: 4 }], 'unchanged file, same answer')
  fs.rmSync(file)
  t.equal(await ask('one.test'), undefined)
  t.equal(await new Promise((resolve) => new HostsFile(tmp, 0).lookup('x', resolve)), undefined, 'a directory')
  t.equal(await new Promise((resolve) => new HostsFile(null, 0).lookup('x', resolve)), undefined, 'no hosts file')
  const slow = new HostsFile(file, 60_000)
  await new Promise((resolve) => slow.lookup('one.test', resolve))
  fs.writeFileSync(file, '10.0.0.3 one.test\n')
  t.equal(await new Promise((resolve) => slow.lookup('one.test', resolve)), undefined, 'not re-checked within the interval')
})

t.test('pure c-ares mode answers hosts-file names from the file', async (t) => {
  const file = path.join(tmp, 'hosts-servers')
  fs.writeFileSync(file, '10.9.0.1 local.test\nfd00::9 local.test\n')
  const { server, cache, lookup } = await cacheWithServer(t, { hostsFile: file })
  t.same(await lookup('local.test', { family: 6 }), { address: 'fd00::9', family: 6 })
  t.same(await lookup('local.test'), { address: '10.9.0.1', family: 4 })
  t.equal(server.queries, 0)
  t.equal(cache.stats().fallbacks, 2)
})

t.test('the expiry heap marks many entries stale in deadline order', async (t) => {
  const expiry = new Expiry()
  t.teardown(() => expiry.clear())
  const entries = Array.from({ length: 20 }, () => ({ fresh: false, expiresAt: 0, heapIndex: -1 }))
  const now = performance.now()
  entries.forEach((entry, i) => expiry.schedule(entry, now + 30 + ((i * 7) % 20) * 5))
  expiry.schedule(entries[0], now + 60_000) // rescheduled: the old deadline no longer counts
  expiry.cancel(entries[1])
  t.ok(entries.every((e, i) => e.fresh === (i !== 1)))
  t.ok(await eventually(() => entries.slice(2).every((e) => !e.fresh), 3000))
  t.equal(entries[0].fresh, true)
})

t.test('the expiry heap holds only what is scheduled: a reschedule moves an entry, a cancel removes it', async (t) => {
  const expiry = new Expiry()
  t.teardown(() => expiry.clear())
  const now = performance.now()
  const soon = Array.from({ length: 300 }, () => ({ fresh: false, expiresAt: 0, heapIndex: -1 }))
  const late = Array.from({ length: 300 }, () => ({ fresh: false, expiresAt: 0, heapIndex: -1 }))
  // Interleaved, out of order, each scheduled three times: the heap keeps one place per entry.
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 300; i++) {
      expiry.schedule(late[(i * 7) % 300], now + 60_000 + ((i * 13) % 97) * 10 + round)
      expiry.schedule(soon[(i * 11) % 300], now + 20 + ((i * 17) % 89) - round)
    }
  }
  t.equal(expiry.size, 600)
  for (let i = 0; i < 300; i += 3) expiry.cancel(late[i])
  expiry.cancel(late[0]) // twice: a no-op
  t.equal(expiry.size, 500)
  t.ok(late.every((e, i) => e.fresh === (i % 3 !== 0)))
  t.ok(await eventually(() => soon.every((e) => !e.fresh), 3000), 'every early deadline fired')
  t.equal(expiry.size, 200, 'what fired left the heap')
  t.ok(late.every((e, i) => e.fresh === (i % 3 !== 0)), 'no later deadline fired early')
  expiry.clear()
  t.equal(expiry.size, 0)
  t.ok(late.every((e) => e.heapIndex === -1))
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

t.test('patch: undo restores once, and only while the wrapper is still in place', async (t) => {
  const target = { fn () { return 'original' } }
  const original = target.fn
  const undo = wrap(target, 'fn', (orig) => function wrapped () { return 'wrapped ' + orig() })
  t.equal(target.fn(), 'wrapped original')
  t.equal(originalOf(target.fn), original)
  t.equal(undo(), true)
  t.equal(undo(), true, 'a second undo is a no-op')
  t.equal(target.fn, original)
  const undo2 = wrap(target, 'fn', (orig) => () => orig())
  target.fn = () => 'theirs'
  t.equal(undo2(), false)
  t.equal(target.fn(), 'theirs')
})

t.test('NODE_DEBUG=io-hygiene* logs lookups, refreshes and errors through channel subscribers', async (t) => {
  const code = `
    const { createDnsCache } = require(${JSON.stringify(require.resolve('..'))})
    const { startDnsServer } = require(${JSON.stringify(require.resolve('./helpers/dns-server'))})
    const lookup = (cache, name) => new Promise((resolve) => cache.lookup(name, () => resolve()))
    ;(async () => {
      const server = await startDnsServer()
      server.set('a.test', { a: ['10.0.0.1'], ttl: 1 })
      const cache = createDnsCache({ hostsFile: null, servers: [server.server], minTtlMs: 0, queryTimeoutMs: 100 })
      await lookup(cache, 'a.test')
      await lookup(cache, 'nowhere.test')
      await lookup(cache, 'nowhere.test')
      await new Promise((resolve) => setTimeout(resolve, 1100))
      server.mode = 'servfail'
      await lookup(cache, 'a.test')
      await new Promise((resolve) => setTimeout(resolve, 300))
      server.mode = 'answer'
      await new Promise((resolve) => setTimeout(resolve, 1100))
      await lookup(cache, 'a.test')
      await new Promise((resolve) => setTimeout(resolve, 300))
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

t.test('after a failed refresh the stale answer is served without a new refresh until errorTtlMs passes', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, errorTtlMs: 60_000 })
  server.set('backoff.test', { a: ['10.6.6.1'], ttl: 1 })
  await lookup('backoff.test')
  await sleep(1100)
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
    await sleep(1100)
    await Promise.all(Array.from({ length: 20 }, () => lookup('mover.test')))
    t.ok(await eventually(async () => (await lookup('mover.test')).address === `10.7.7.${round}`))
  }
  t.equal(cache.stats().refreshes, 2)
})
