'use strict'

const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TtlQuery, MAX_IN_FLIGHT, asksAsIs, decodeReply, encodeQuery, negativeTtl, parseServer, resolverOptions, wireName } = require('../lib/dns/ttl-query')
const { startDnsServer } = require('./helpers/dns-server')
const { bindUdp } = require('./helpers/udp')
const packet = require('dns-packet')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-hosts-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

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
  // The bound frees as tries end. A server of its own: the flood above can
  // still fill the first one's socket buffer, where a query is dropped.
  const quiet = await startDnsServer()
  t.teardown(() => quiet.close())
  quiet.mode = 'blackhole'
  const small = new TtlQuery({ timeoutMs: 100, tries: 1, maxInFlight: 2 })
  const first = new Promise((resolve) => small.query([quiet.server], 'a.test', true, true, resolve))
  let sync = true
  const second = new Promise((resolve) => small.query([quiet.server], 'b.test', true, false, (r) => resolve({ r, sync })))
  sync = false
  t.same(await second, { r: [], sync: false }, 'refused, still asynchronously')
  await first
  quiet.resetCounts()
  await new Promise((resolve) => small.query([quiet.server], 'c.test', true, false, resolve))
  t.equal(quiet.count('c.test', 'A'), 1, 'sent once the tries in flight ended')
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
  t.same(resolverOptions(path.join(tmp, 'missing'), { RES_OPTIONS: 'rotate' }), { ndots: 1, edns: false }, 'what does not change what is sent')
  t.same(resolverOptions(path.join(tmp, 'missing'), { RES_OPTIONS: 'ndots:x' }), { ndots: 0, edns: false }, 'ndots:x is atoi(\'x\'), 0, as glibc reads it')
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

t.test('parseServer refuses what no socket can send to', async (t) => {
  t.same(parseServer('fe80::1%eth0'), { address: 'fe80::1%eth0', port: 53 }, 'a scoped IPv6 server, as resolv.conf names one')
  for (const bad of ['dns.corp.example', '10.0.0.1#x', '10.0.0.1;', '[::1]', '[::1]x', '10.0.0.1:0', '10.0.0.1:65536', '10.0.0.1:x', 'bad:53']) {
    t.equal(parseServer(bad), null, bad)
  }
})

// Each of these made dgram.send() throw, uncaught, from a timer callback.
t.test('a server no socket can reach is a try without an answer, never a throw', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set('safe.test', { a: ['10.0.2.1'], ttl: 5 })
  for (const bad of ['dns.corp.example', '10.0.0.1#x', '10.0.0.1;', '[::1]', 'fe80::1%no-such-if0']) {
    t.same(await askTtl([bad], 'safe.test', true, true, 50, 2), [], `${bad}: no records`)
    t.same(await askTtl([bad, server.server], 'safe.test', true, false, 50, 2), [{ address: '10.0.2.1', ttl: 5, family: 4 }], `${bad}: the next server answers`)
  }
})

// glibc reads any spelling of an IPv6 nameserver; the reply comes from its
// short form. Ignored, every refresh of a name waited out both tries and
// kept the old answer that long past its TTL.
t.test('a reply from an IPv6 server resolv.conf spells in long form is taken', async (t) => {
  const server6 = await startDnsServer({ address: '::1' })
  t.teardown(() => server6.close())
  server6.set('long.test', { a: ['10.0.3.1'], ttl: 5 })
  for (const spelling of ['0:0:0:0:0:0:0:1', '0::1', '0000::0001']) {
    t.same(await askTtl([`[${spelling}]:${server6.port}`], 'long.test', true, false, 2000, 1), [{ address: '10.0.3.1', ttl: 5, family: 4 }], spelling)
  }
})

t.test('a negative reply carries its RFC 2308 TTL: min(SOA TTL, SOA minimum)', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.set('nodata.test', { a: ['10.0.3.1'], ttl: 5 })
  const ask = (name, want4, want6) => new Promise((resolve) => new TtlQuery({ timeoutMs: 2000, tries: 1 }).query([server.server], name, want4, want6, (records, rcode, negativeTtl) => resolve({ records, rcode, negativeTtl })))
  t.same(await ask('missing.test', true, false), { records: [], rcode: 3, negativeTtl: 0 }, 'no SOA: not to be kept')
  server.soa = { ttl: 30, minimum: 7 }
  t.same(await ask('missing.test', true, false), { records: [], rcode: 3, negativeTtl: 7 }, 'NXDOMAIN: the minimum')
  t.same(await ask('nodata.test', false, true), { records: [], rcode: 0, negativeTtl: 7 }, 'no AAAA records: the same')
  server.soa = { ttl: 2, minimum: 7 }
  t.same(await ask('missing.test', true, false), { records: [], rcode: 3, negativeTtl: 2 }, 'the SOA record\'s own TTL when smaller')
  t.equal((await ask('nodata.test', true, false)).negativeTtl, 0, 'an answer has none')
})

t.test('negativeTtl: past a CNAME in the answer; an SOA cut short, or none', async (t) => {
  const soa = (ttl, minimum) => ({ name: 'test', type: 'SOA', class: 'IN', ttl, data: { mname: 'ns.test', rname: 'h.test', serial: 1, refresh: 1, retry: 1, expire: 1, minimum } })
  const reply = (fields) => packet.encode({ id: 1, type: 'response', flags: 0, questions: [{ name: 'a.test', type: 'AAAA', class: 'IN' }], ...fields })
  const cname = { name: 'a.test', type: 'CNAME', class: 'IN', ttl: 60, data: 'b.test' }
  t.equal(negativeTtl(reply({ answers: [cname], authorities: [soa(300, 9)] })), 9, 'b.test has no AAAA: the SOA after the CNAME')
  t.equal(negativeTtl(reply({ authorities: [{ name: 'test', type: 'NS', class: 'IN', ttl: 60, data: 'ns.test' }, soa(4, 9)] })), 4, 'past another record')
  t.equal(negativeTtl(reply({ authorities: [{ name: 'test', type: 'NS', class: 'IN', ttl: 60, data: 'ns.test' }] })), 0, 'no SOA')
  const full = reply({ authorities: [soa(300, 9)] })
  const short = Buffer.from(full.subarray(0, full.length - 4))
  const rdata = 9 + 8 + 16 // ns.test, h.test, four of the five numbers
  t.equal(short.readUInt16BE(short.length - rdata - 2), rdata + 4, 'the SOA\'s RDLENGTH, found')
  short.writeUInt16BE(rdata, short.length - rdata - 2)
  t.equal(negativeTtl(short), 0, 'an SOA without its MINIMUM')
  t.equal(negativeTtl(full.subarray(0, full.length - 2)), 0, 'a reply cut short')
})
