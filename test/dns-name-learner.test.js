'use strict'

// Which name answered, asked as glibc asked: against a scripted query
// function (what each name and type answers), and the rcode a real
// TtlQuery reports from a UDP server.
const t = require('tap')
const dns = require('node:dns')
const dgram = require('node:dgram')
const packet = require('dns-packet')
const { NameLearner } = require('../lib/dns/name-learner')
const { TtlQuery } = require('../lib/dns/ttl-query')
const { parseResolvConf } = require('../lib/dns/resolv-conf')

const conf = parseResolvConf('nameserver 10.96.0.10\nsearch ns1.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n', { env: {}, hostname: 'pod' })

// answers: `${name} ${type}` -> [records, rcode]; anything else NXDOMAIN.
function scripted (answers, options) {
  const asked = []
  const counters = { ttlQueries: 0, searchTries: 0, refreshQueries: 0 }
  const query = {
    query (servers, name, want4, want6, callback) {
      const type = want4 ? 'A' : 'AAAA'
      asked.push(`${name} ${type}`)
      const [records, rcode, negativeTtl = 0] = answers[`${name} ${type}`] ?? [[], 3]
      process.nextTick(callback, records, rcode, negativeTtl)
    },
  }
  return { asked, counters, learner: new NameLearner(() => query, counters, () => ({ v4: true, v6: false }), options) }
}

const learn = (learner, name, kinds, c = conf) => new Promise((resolve) => learner.resolve(name, kinds, c, 'ttlQueries', resolve))
const A = (address, ttl = 5) => ({ address, ttl, family: 4 })

t.test('a candidate with no records of any type asked is passed, as glibc passes NO_DATA', async (t) => {
  const { asked, counters, learner } = scripted({
    'x.y.ns1.svc.cluster.local A': [[], 0],
    'x.y.ns1.svc.cluster.local AAAA': [[], 0],
    'x.y.svc.cluster.local A': [[A('10.0.0.1', 7)], 0],
    'x.y.svc.cluster.local AAAA': [[], 0],
  })
  t.same(await learn(learner, 'x.y', '46'), { fqdn: 'x.y.svc.cluster.local', records: [A('10.0.0.1', 7)], ttlMs: 7000, tried: 1 })
  t.same(asked, ['x.y.ns1.svc.cluster.local A', 'x.y.ns1.svc.cluster.local AAAA', 'x.y.svc.cluster.local A', 'x.y.svc.cluster.local AAAA'])
  t.match(counters, { ttlQueries: 4, searchTries: 2 })
})

t.test('the first candidate with records answers; none at all, or a failing server', async (t) => {
  const other = scripted({ 'x.y.ns1.svc.cluster.local A': [[A('10.0.0.9')], 0] })
  t.match(await learn(other.learner, 'x.y', '4'), { fqdn: 'x.y.ns1.svc.cluster.local', records: [A('10.0.0.9')] }, 'whatever its addresses')
  t.same(other.asked, ['x.y.ns1.svc.cluster.local A'], 'and nothing after it')
  const none = scripted({})
  t.equal(await learn(none.learner, 'x.y', '4'), null)
  t.same(none.asked, ['x.y.ns1.svc.cluster.local A', 'x.y.svc.cluster.local A', 'x.y.cluster.local A', 'x.y A'], 'the bare name only after the search list')
  const failing = scripted({ 'x.y.ns1.svc.cluster.local A': [[], 2] })
  t.equal(await learn(failing.learner, 'x.y', '4'), undefined, 'SERVFAIL: nothing can be said')
  const local = scripted({})
  t.equal(await learn(local.learner, 'db.localhost', '4'), null)
  t.same(local.asked, [], 'a localhost name is never asked of DNS')
})

t.test('negative answers are kept for their SOA minimum, clamped, then asked again', async (t) => {
  const answers = {
    'x.y.ns1.svc.cluster.local A': [[], 3, 3600], // NXDOMAIN, SOA minimum 1 h: clamped to maxTtlMs
    'x.y.svc.cluster.local A': [[], 0, 0], // NODATA without an SOA: minTtlMs
    'x.y.svc.cluster.local AAAA': [[{ address: 'fd00::1', ttl: 5, family: 6 }], 0],
  }
  const { asked, learner } = scripted(answers, { minTtlMs: 0, maxTtlMs: 60_000 })
  t.match(await learn(learner, 'x.y', '46'), { fqdn: 'x.y.svc.cluster.local', tried: 1 })
  t.same(asked.splice(0), ['x.y.ns1.svc.cluster.local A', 'x.y.svc.cluster.local A', 'x.y.svc.cluster.local AAAA'])
  t.match(await learn(learner, 'x.y', '46'), { fqdn: 'x.y.svc.cluster.local' })
  t.same(asked.splice(0), ['x.y.svc.cluster.local A', 'x.y.svc.cluster.local AAAA'], 'the NXDOMAIN is still kept; the uncacheable NODATA is asked again')
  const clamped = scripted(answers, { minTtlMs: 0, maxTtlMs: 0 })
  await learn(clamped.learner, 'x.y', '46')
  clamped.asked.splice(0)
  await learn(clamped.learner, 'x.y', '46')
  t.same(clamped.asked, ['x.y.ns1.svc.cluster.local A', 'x.y.svc.cluster.local A', 'x.y.svc.cluster.local AAAA'], 'maxTtlMs 0: nothing is kept')
})

t.test('sameAnswer: the same addresses, in the same order within each family', async (t) => {
  const { sameAnswer } = require('../lib/dns/name-learner')
  const v4 = (address) => ({ address, family: 4 })
  const v6 = (address) => ({ address, family: 6 })
  t.ok(sameAnswer([v6('fd00::1'), v4('10.0.0.1')], [v4('10.0.0.1'), v6('fd00::1')]), 'glibc merged the families: their order is its')
  t.notOk(sameAnswer([v4('10.0.0.1'), v4('10.0.0.2')], [v4('10.0.0.2'), v4('10.0.0.1')]), 'a rotated round-robin')
  t.notOk(sameAnswer([v4('10.0.0.1')], [v4('10.0.0.1'), v4('10.0.0.2')]))
  t.notOk(sameAnswer([v4('10.0.0.1'), v6('fd00::1')], [v4('10.0.0.1'), v4('10.0.0.2')]))
  t.notOk(sameAnswer([v6('fd00::1'), v6('fd00::2')], [v6('fd00::1'), v4('10.0.0.1')]))
})

t.test('AAAA only, and glibc\'s 127.0.0.1 when resolv.conf names no server', async (t) => {
  const { asked, learner } = scripted({ 'v6.test AAAA': [[{ address: 'fd00::1', ttl: 9, family: 6 }], 0] })
  const bare = { ...conf, nameservers: [], search: [] }
  t.same(await learn(learner, 'v6.test', '6', bare), { fqdn: 'v6.test', records: [{ address: 'fd00::1', ttl: 9, family: 6 }], ttlMs: 9000, tried: 0 })
  t.same(asked, ['v6.test AAAA'])
})

t.test('nsswitch.conf read from a file', async (t) => {
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const { readHostsServices } = require('../lib/dns/name-learner')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-nss-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'nsswitch.conf')
  fs.writeFileSync(file, 'passwd: files\nhosts: files mdns4_minimal [NOTFOUND=return] dns # comment\n')
  t.same(readHostsServices(file), { dns: true, mdns: true, myhostname: false })
  fs.writeFileSync(file, 'passwd: files\n')
  t.same(readHostsServices(file), { dns: true, mdns: false, myhostname: false }, 'no hosts line: the default')
  t.same(readHostsServices(path.join(dir, 'none')), { dns: true, mdns: false, myhostname: false }, 'no file: the default')
})

t.test('the host\'s address families, as glibc counts them', async (t) => {
  const os = require('node:os')
  const { addressFamilies } = require('../lib/dns/address-families')
  const all = Object.values(os.networkInterfaces()).flat()
  const expected = {
    v4: all.some((a) => a.family === 'IPv4' && a.address !== '127.0.0.1'),
    v6: all.some((a) => a.family === 'IPv6' && a.address !== '::1'),
  }
  t.same(addressFamilies(), expected)
  t.equal(addressFamilies(60_000), addressFamilies(60_000), 'read again only after checkIntervalMs')
})

t.test('a failed query on a refresh: nothing can be said', async (t) => {
  const { learner, counters } = scripted({ 'a.test A': [[A('10.0.0.1')], 0], 'a.test AAAA': [[], 2] })
  const refresh = (kinds) => new Promise((resolve) => learner.resolve('a.test', kinds, { ...conf, search: [], ndots: 1 }, 'refreshQueries', resolve))
  t.match(await refresh('4'), { records: [A('10.0.0.1')] })
  t.equal(await refresh('46'), undefined)
  t.equal(await refresh('6'), undefined)
  t.equal(counters.refreshQueries, 4)
})

t.test('the record types getaddrinfo asks', async (t) => {
  const hosts = { v4: true, v6: false }
  const learner = new NameLearner(() => null, {}, () => hosts)
  const { ADDRCONFIG, V4MAPPED } = dns
  const plain = { ...conf }
  const noAaaa = { ...conf, noAaaa: true }
  t.equal(learner.families(0, 0, plain), '46', 'unspecified, no hints: both, whatever the host has')
  t.equal(learner.families(0, ADDRCONFIG, plain), '4', 'ADDRCONFIG on an IPv4-only host')
  t.equal(learner.families(0, 0, noAaaa), '4', 'options no-aaaa')
  t.equal(learner.families(4, ADDRCONFIG, plain), '4')
  t.equal(learner.families(6, 0, plain), '6')
  t.equal(learner.families(6, 0, noAaaa), null)
  t.equal(learner.families(6, ADDRCONFIG, plain), null, 'getaddrinfo answers nothing')
  t.equal(learner.families(6, V4MAPPED, plain), null, 'mapped answers: getaddrinfo refreshes them')
  hosts.v4 = false
  hosts.v6 = true
  t.equal(learner.families(0, ADDRCONFIG, plain), '6', 'an IPv6-only host')
  t.equal(learner.families(4, ADDRCONFIG, plain), null)
  t.equal(learner.families(0, ADDRCONFIG, noAaaa), null)
  hosts.v4 = true
  t.equal(learner.families(0, ADDRCONFIG, plain), '46', 'both families')
  hosts.v4 = hosts.v6 = false
  t.equal(learner.families(0, ADDRCONFIG, plain), '46', 'neither: glibc does not narrow')
})

t.test('TtlQuery reports the rcode: NXDOMAIN as 3, a truncated reply as no answer', async (t) => {
  const socket = dgram.createSocket('udp4')
  await new Promise((resolve) => socket.bind(0, '127.0.0.1', resolve))
  t.teardown(() => socket.close())
  socket.on('message', (msg, rinfo) => {
    const query = packet.decode(msg)
    const q = query.questions[0]
    const flags = q.name.startsWith('gone') ? 3 : packet.TRUNCATED_RESPONSE
    socket.send(packet.encode({ id: query.id, type: 'response', flags, questions: [q], answers: [] }), rinfo.port, rinfo.address)
  })
  const tq = new TtlQuery({ timeoutMs: 5000, tries: 1 })
  const server = `127.0.0.1:${socket.address().port}`
  const ask = (name) => new Promise((resolve) => tq.query([server], name, true, false, (records, rcode) => resolve({ records, rcode })))
  t.same(await ask('gone.test'), { records: [], rcode: 3 })
  t.same(await ask('big.test'), { records: [], rcode: -1 })
})
