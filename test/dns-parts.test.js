'use strict'

const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const util = require('node:util')
const { execFile } = require('node:child_process')
const { cacheWithServer, eventually, untilStale } = require('./helpers/dns-cache')
const { HostsFile, parseHosts } = require('../lib/dns/hosts')
const { Expiry } = require('../lib/dns/expiry')
const { TtlQuery, MAX_IN_FLIGHT, asksAsIs, decodeReply, encodeQuery, parseServer, resolverOptions, wireName } = require('../lib/dns/ttl-query')
const { startDnsServer } = require('./helpers/dns-server')
const { bindUdp } = require('./helpers/udp')
const packet = require('dns-packet')
const { wrap, originalOf } = require('../lib/core/patch')

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
  fs.writeFileSync(file, '10.9.0.1 local.test\nfd00::9 local.test\n10.9.0.2 v4local.test\n')
  const { server, cache, lookup } = await cacheWithServer(t, { hostsFile: file })
  t.same(await lookup('local.test', { family: 6 }), { address: 'fd00::9', family: 6 })
  t.same(await lookup('local.test'), { address: '10.9.0.1', family: 4 })
  const { V4MAPPED } = require('node:dns')
  t.same(await lookup('local.test', { family: 6, hints: V4MAPPED }), { address: 'fd00::9', family: 6 }, 'IPv6 first, as getaddrinfo')
  t.same(await lookup('v4local.test', { family: 6, hints: V4MAPPED }), { address: '::ffff:10.9.0.2', family: 6 }, 'mapped from the file')
  t.equal(server.queries, 0)
  t.equal(cache.stats().fallbacks, 4)
})

t.test('the expiry heap marks many entries stale in deadline order', async (t) => {
  const expiry = new Expiry()
  t.teardown(() => expiry.clear())
  const entries = Array.from({ length: 20 }, () => ({ fresh: false, dueAt: 0, heapIndex: -1 }))
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
  const soon = Array.from({ length: 300 }, () => ({ fresh: false, dueAt: 0, heapIndex: -1 }))
  const late = Array.from({ length: 300 }, () => ({ fresh: false, dueAt: 0, heapIndex: -1 }))
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

const askTtl = (servers, name, want4, want6, timeoutMs = 2000, tries = 2) =>
  new Promise((resolve) => new TtlQuery({ timeoutMs, tries }).query(servers, name, want4, want6, resolve))

t.test('TTL queries: A and AAAA over UDP, addresses spelt as getaddrinfo spells them, IPv4 and IPv6 servers', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  const server6 = await startDnsServer({ address: '::1' })
  t.teardown(() => server6.close())
  for (const s of [server, server6]) s.set('ttl.test', { a: ['10.0.0.1', '10.0.0.2'], aaaa: ['fd00:0:0::3:1', '::ffff:10.0.0.9'], ttl: 42 })
  const records = await askTtl([server.server], 'TTL.test', true, true)
  t.same(records.sort((a, b) => a.family - b.family), [
    { address: '10.0.0.1', ttl: 42, family: 4 }, { address: '10.0.0.2', ttl: 42, family: 4 },
    { address: 'fd00::3:1', ttl: 42, family: 6 }, { address: '::ffff:10.0.0.9', ttl: 42, family: 6 },
  ])
  t.same(await askTtl([`[::1]:${server6.port}`], 'ttl.test.', true, false), [{ address: '10.0.0.1', ttl: 42, family: 4 }, { address: '10.0.0.2', ttl: 42, family: 4 }], 'an IPv6 server; a trailing dot')
  t.same(await askTtl([server.server], 'ttl.test', false, true, 2000, 1), [{ address: 'fd00::3:1', ttl: 42, family: 6 }, { address: '::ffff:10.0.0.9', ttl: 42, family: 6 }])
  server.set('xn--bcher-kva.test', { a: ['10.0.0.3'], ttl: 7 })
  t.same(await askTtl([server.server], 'bücher.test', true, false), [{ address: '10.0.0.3', ttl: 7, family: 4 }], 'a Unicode name asks its punycode')
  t.same(await askTtl([server.server], 'missing.test', true, true), [], 'NXDOMAIN: no TTL')
  t.equal(server.count('missing.test'), 2, 'asked once per type: an error is an answer')
})

t.test('TTL queries: a silent server is left after timeoutMs for the next one, and `tries` bounds the whole', async (t) => {
  const silent = await startDnsServer()
  t.teardown(() => silent.close())
  silent.mode = 'blackhole'
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set('next.test', { a: ['10.0.1.1'], ttl: 5 })
  t.same(await askTtl([silent.server, server.server], 'next.test', true, true, 1000), [{ address: '10.0.1.1', ttl: 5, family: 4 }])
  t.equal(silent.count('next.test'), 2, 'the first try asked the silent server for both types')
  t.equal(server.count('next.test'), 2)
  t.same(await askTtl([silent.server], 'gone.test', true, false, 50, 3), [], 'every try unanswered')
  t.equal(silent.count('gone.test', 'A'), 3)
  t.same(await askTtl([], 'x.test', true, false), [], 'no servers')
  for (const name of ['a..b', `${'x'.repeat(64)}.test`, `${'abcdefghi.'.repeat(26)}test`]) {
    t.same(await askTtl([silent.server], name, true, false), [], `${name.slice(0, 20)}: no query for a name DNS cannot carry`)
  }
  t.same(wireName('a.b.'), ['a', 'b'])
})

t.test('TTL queries share one socket per family, open only while a query waits, and one timer', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  const silent = await startDnsServer()
  t.teardown(() => silent.close())
  silent.mode = 'blackhole'
  const names = Array.from({ length: 100 }, (_, i) => `burst${i}.test`)
  for (const name of names) server.set(name, { a: ['10.0.3.1'], aaaa: ['fd00::3'], ttl: 30 })
  // A datagram the loaded test server drops is asked again after timeoutMs.
  const ttl = new TtlQuery({ timeoutMs: 300, tries: 3 })
  const ask = (servers, name, want4, want6) => new Promise((resolve) => ttl.query(servers, name, want4, want6, resolve))
  const answers = await Promise.all(names.map((name) => ask([server.server], name, true, true)))
  t.ok(answers.every((records) => records.length === 2))
  t.ok(server.queries >= 200)
  t.equal(server.clients.size, 1, '200 queries from one socket, not one per name')
  // Interleaved: the answered try ahead of a silent one in the timer's line is skipped, the silent one retried.
  server.resetCounts()
  const [fast, slow] = await Promise.all([ask([server.server], 'burst1.test', true, false), ask([silent.server], 'burst2.test', true, false)])
  t.same(fast, [{ address: '10.0.3.1', ttl: 30, family: 4 }])
  t.same(slow, [])
  t.equal(silent.count('burst2.test', 'A'), 3, 'three tries')
  t.same(await ask([server.server], 'burst3.test', false, false), [], 'no family asked, nothing sent')
  t.equal(server.count('burst3.test'), 0)
})

t.test('TTL queries ignore what is not the reply: another sender, a short packet, a query, another id, another question; and records of other owners', async (t) => {
  let good = null
  const rogue = await bindUdp({ onMessage: () => {} })
  t.teardown(() => rogue.close())
  const server = await bindUdp({
    onMessage: (msg, rinfo) => {
      const query = packet.decode(msg)
      const reply = (extra) => packet.encode({ id: query.id, type: 'response', flags: packet.RECURSION_DESIRED, questions: query.questions, ...extra })
      rogue.send(reply({ answers: [{ name: 'odd.test', type: 'A', ttl: 1, data: '10.9.9.9' }] }), rinfo.port, rinfo.address)
      server.send(Buffer.from([1]), rinfo.port, rinfo.address)
      server.send(msg, rinfo.port, rinfo.address) // its own query back: not a response
      server.send(packet.encode({ id: (query.id + 1) % 65536, type: 'response', questions: query.questions }), rinfo.port, rinfo.address)
      // The right id from the right server, but another question, or records of another owner.
      server.send(reply({ questions: [{ name: 'other.invalid', type: 'AAAA' }], answers: [{ name: 'other.invalid', type: 'AAAA', ttl: 2, data: 'fd00::1' }] }), rinfo.port, rinfo.address)
      server.send(reply({ questions: [{ name: 'odd.test', type: 'AAAA' }], answers: [{ name: 'odd.test', type: 'A', ttl: 3, data: '10.0.2.1' }] }), rinfo.port, rinfo.address)
      server.send(reply({ questions: [{ name: 'odd.test', type: 'A', class: 'CH' }], answers: [{ name: 'odd.test', type: 'A', ttl: 4, data: '10.0.2.1' }] }), rinfo.port, rinfo.address)
      server.send(reply({ questions: [{ name: 'odd.test.x', type: 'A' }], answers: [{ name: 'odd.test', type: 'A', ttl: 5, data: '10.0.2.1' }] }), rinfo.port, rinfo.address)
      server.send(reply({ questions: [], answers: [{ name: 'odd.test', type: 'A', ttl: 6, data: '10.0.2.1' }] }), rinfo.port, rinfo.address)
      good = reply({ answers: [{ name: 'elsewhere.test', type: 'A', ttl: 1, data: '10.0.2.1' }, { name: 'ODD.test', type: 'A', ttl: 9, data: '10.0.2.1' }] })
      server.send(good, rinfo.port, rinfo.address)
    },
  })
  t.teardown(() => server.close())
  const { port } = server.address()
  t.same(await askTtl([`127.0.0.1:${port}`], 'odd.test', true, false), [{ address: '10.0.2.1', ttl: 9, family: 4 }])
  t.ok(good)
})

t.test('TTL query ids come from crypto, not Math.random', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set('id.test', { a: ['10.0.5.1'], ttl: 11 })
  const random = Math.random
  Math.random = () => { throw new Error('Math.random used') }
  t.teardown(() => { Math.random = random })
  t.same(await askTtl([server.server], 'id.test', true, false), [{ address: '10.0.5.1', ttl: 11, family: 4 }])
})

t.test('TTL queries in flight are bounded: past the bound a lookup gets no records at once, and the id draw always ends', async (t) => {
  const silent = await startDnsServer()
  t.teardown(() => silent.close())
  silent.mode = 'blackhole'
  // 33,000 dual-stack names: more tries than there are ids.
  const ttl = new TtlQuery({ timeoutMs: 200, tries: 1 })
  let refused = 0
  const asks = []
  for (let i = 0; i < 33_000; i++) {
    asks.push(new Promise((resolve) => ttl.query([silent.server], `n${i}.test`, true, true, (records) => {
      if (i >= MAX_IN_FLIGHT / 2) refused++
      resolve(records)
    })))
  }
  t.ok(MAX_IN_FLIGHT <= 8192, 'a small share of the ids')
  const answers = await Promise.all(asks)
  t.ok(answers.every((records) => records.length === 0))
  t.equal(refused, 33_000 - MAX_IN_FLIGHT / 2, 'every lookup past the bound answered without a query')
  t.ok(silent.queries <= MAX_IN_FLIGHT, 'only the tries within the bound were sent (some the loaded server dropped)')
  // The bound frees as tries end.
  const small = new TtlQuery({ timeoutMs: 100, tries: 1, maxInFlight: 2 })
  const first = new Promise((resolve) => small.query([silent.server], 'a.test', true, true, resolve))
  let sync = true
  const second = new Promise((resolve) => small.query([silent.server], 'b.test', true, false, (r) => resolve({ r, sync })))
  sync = false
  t.same(await second, { r: [], sync: false }, 'refused, still asynchronously')
  await first
  silent.resetCounts()
  await new Promise((resolve) => small.query([silent.server], 'c.test', true, false, resolve))
  t.equal(silent.count('c.test', 'A'), 1, 'sent once the tries in flight ended')
})

t.test('TTL queries ask only what the system resolver sent as written', async (t) => {
  for (const [name, ndots, sent] of [
    ['a.test', 1, true], ['short', 1, false], ['short.', 1, true], ['a.b.test', 5, false], ['a.b.c.d.e.test', 5, true],
    ['a.b.test.', 5, true], ['localhost', 0, false], ['x.LocalHost', 1, false], ['printer.local', 1, false],
    ['printer.local.', 1, false], ['local.test', 1, true], ['x', 0, true],
  ]) t.equal(asksAsIs(name, ndots), sent, `${name} with ndots ${ndots}`)
  const file = path.join(tmp, 'resolv.conf')
  fs.writeFileSync(file, 'nameserver 127.0.0.1\nsearch a.test\noptions ndots:5 timeout:1\n')
  t.same(resolverOptions(file, {}), { ndots: 5, edns: false })
  t.same(resolverOptions(file, { RES_OPTIONS: 'edns0 ndots:20' }), { ndots: 15, edns: true }, 'RES_OPTIONS after the file; ndots capped at 15 as glibc caps it')
  t.same(resolverOptions(path.join(tmp, 'missing'), {}), { ndots: 1, edns: false })
  t.same(resolverOptions(path.join(tmp, 'missing'), { RES_OPTIONS: 'ndots:x rotate' }), { ndots: 1, edns: false }, 'what glibc ignores')
  t.equal(encodeQuery(1, ['a', 'test'], 1).length, 12 + 8 + 4, 'no EDNS0 record unless asked')
  t.same(packet.decode(encodeQuery(1, ['a', 'test'], 1, true)).additionals.map((r) => r.type), ['OPT'])
})

t.test('decodeReply: CNAME chains, errors, truncation and malformed packets', async (t) => {
  const base = { id: 1, type: 'response', questions: [{ name: 'a.test', type: 'A' }] }
  const chain = packet.encode({
    ...base,
    answers: [
      { name: 'a.test', type: 'CNAME', ttl: 30, data: 'b.test' },
      { name: 'b.test', type: 'A', ttl: 300, data: '10.0.0.1' },
      { name: 'b.test', type: 'A', ttl: 300, class: 'CH', data: '10.0.0.2' },
      { name: 'b.test', type: 'TXT', ttl: 1, data: 'not an address' },
    ],
  })
  t.same(decodeReply(chain, 1, ['a', 'test']), [{ address: '10.0.0.1', ttl: 30, family: 4 }], 'the smallest TTL of the chain; other classes and types skipped')
  const offChain = packet.encode({
    ...base,
    answers: [
      { name: 'a.test', type: 'CNAME', ttl: 30, data: 'b.test' },
      { name: 'b.test', type: 'CNAME', ttl: 20, data: 'a.test' },
      { name: 'c.test', type: 'A', ttl: 300, data: '10.0.0.3' },
      { name: 'B.TEST', type: 'A', ttl: 300, data: '10.0.0.2' },
      { name: 'a.test', type: 'CNAME', ttl: 1, data: 'c.test' },
    ],
  })
  t.same(decodeReply(offChain, 1, ['a', 'test']), [{ address: '10.0.0.2', ttl: 30, family: 4 }], 'a CNAME loop ends the chain; a second CNAME of a name and a record off the chain are left out')
  t.equal(decodeReply(chain, 1, ['b', 'test']), null, 'another question: not the reply')
  t.equal(decodeReply(chain, 28, ['a', 'test']), null, 'another type: not the reply')
  const notify = Buffer.from(chain)
  notify.writeUInt16BE(notify.readUInt16BE(2) | (4 << 11), 2)
  t.equal(decodeReply(notify, 1, ['a', 'test']), null, 'another opcode: not the reply')
  t.same(decodeReply(packet.encode({ ...base, flags: 3 }), 1, ['a', 'test']), [], 'NXDOMAIN')
  t.same(decodeReply(packet.encode({ ...base, flags: packet.TRUNCATED_RESPONSE, answers: [{ name: 'a.test', type: 'A', ttl: 5, data: '10.0.0.1' }] }), 1, ['a', 'test']), [], 'truncated: no TTL from a part')
  t.equal(decodeReply(packet.encode({ ...base, type: 'query' }), 1, ['a', 'test']), null, 'a query is no reply')
  t.same(decodeReply(chain.subarray(0, chain.length - 3), 1, ['a', 'test']), [], 'cut short in the last record')
  t.same(decodeReply(chain.subarray(0, 20), 1, ['a', 'test']), [], 'cut short in a name')
  // A record whose name points at the question (compression), with a TTL of 2^31 or more.
  const head = packet.encode({ ...base })
  head.writeUInt16BE(1, 6)
  const rr = Buffer.from([0xc0, 12, 0, 1, 0, 1, 0x80, 0, 0, 0, 0, 4, 10, 0, 0, 7])
  t.same(decodeReply(Buffer.concat([head, rr]), 1, ['a', 'test']), [{ address: '10.0.0.7', ttl: 0, family: 4 }], 'a TTL with the top bit set reads as 0')
  const rest = rr.subarray(2)
  // Two records: the second's name points at the first's, itself a pointer.
  const twice = Buffer.concat([head, rr, Buffer.from([0xc0, head.length]), rest])
  twice.writeUInt16BE(2, 6)
  t.same(decodeReply(twice, 1, ['a', 'test']), [{ address: '10.0.0.7', ttl: 0, family: 4 }, { address: '10.0.0.7', ttl: 0, family: 4 }], 'a pointer to a pointer')
  t.same(decodeReply(Buffer.concat([head, Buffer.from([1, 97])]), 1, ['a', 'test']), [], 'a name with no end: malformed')
  const self = Buffer.from([0xc0 | (head.length >> 8), head.length & 0xff])
  const long = Buffer.concat([...Array.from({ length: 5 }, () => Buffer.from([63, ...Buffer.alloc(63, 97)])), Buffer.from([0])])
  for (const [name, what] of [[self, 'a pointer to itself'], [Buffer.from([0x40, 0]), 'a label of an unknown kind'], [long, 'a name over 255 bytes']]) {
    t.same(decodeReply(Buffer.concat([head, name, rest]), 1, ['a', 'test']), [], `${what}: malformed`)
  }
  t.same(packet.decode(encodeQuery(7, ['a', 'test'], 28)).questions, [{ name: 'a.test', type: 'AAAA', class: 'IN' }])
})

t.test('parseServer reads dns.getServers() forms', async (t) => {
  t.same(parseServer('10.0.0.1'), { address: '10.0.0.1', port: 53 })
  t.same(parseServer('10.0.0.1:5353'), { address: '10.0.0.1', port: 5353 })
  t.same(parseServer('fd00::1'), { address: 'fd00::1', port: 53 })
  t.same(parseServer('[fd00::1]:5353'), { address: 'fd00::1', port: 5353 })
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
