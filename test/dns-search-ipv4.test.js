'use strict'

// An IPv4-only host (most pods): a network namespace of its own whose one
// interface has an IPv4 address and IPv6 switched off, so glibc's
// AI_ADDRCONFIG, which decides by addresses, asks no AAAA. Nor may a refresh.
const { enterNamespace } = require('./helpers/in-namespace')

const inside = enterNamespace(__filename, {
  search: ['ns1.svc.cluster.local', 'svc.cluster.local', 'cluster.local'],
  options: 'ndots:5 timeout:1 attempts:1',
  ipv4Only: true,
})
if (inside) run(inside)

function run ({ nameserver }) {
  const t = require('tap')
  const dns = require('node:dns')
  const { startDnsServer } = require('./helpers/dns-server')
  const { eventually } = require('./helpers/dns-cache')
  const { createDnsCache } = require('..')

  let server
  t.before(async () => {
    server = await startDnsServer({ port: 53, address: nameserver })
  })
  t.teardown(() => server.close())

  t.test('under ADDRCONFIG (as net.connect asks), the refresh sends no AAAA query', async (t) => {
    const fqdn = 'statsd.monitoring.svc.cluster.local'
    server.set(fqdn, { a: ['10.30.0.1'], aaaa: ['fd00::30:1'], ttl: 1 })
    server.resetCounts()
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const options = { hints: dns.ADDRCONFIG, all: true }
    const lookup = () => new Promise((resolve, reject) => cache.lookup('statsd.monitoring', options, (err, list) => err ? reject(err) : resolve(list)))
    t.same(await lookup(), [{ address: '10.30.0.1', family: 4 }], 'getaddrinfo gave IPv4 only')
    t.ok(await eventually(async () => {
      await lookup()
      return cache.stats().refreshesKept >= 3
    }), 'three refreshes through DNS kept the answer')
    t.equal(cache.stats().upstreamLookups, 1)
    t.equal(server.count(fqdn, 'AAAA'), 0, 'no AAAA query, from getaddrinfo or the refreshes')
    t.equal(server.count('statsd.monitoring.ns1.svc.cluster.local', 'AAAA'), 0)
    t.ok(server.count(fqdn, 'A') >= 4)
  })

  t.test('without ADDRCONFIG getaddrinfo asks AAAA, and so does the refresh', async (t) => {
    const fqdn = 'kafka.data.svc.cluster.local'
    server.set(fqdn, { a: ['10.31.0.1'], ttl: 1 })
    server.resetCounts()
    const cache = createDnsCache({ hostsFile: '/etc/hosts' })
    t.teardown(() => cache.close())
    const lookup = () => new Promise((resolve, reject) => cache.lookup('kafka.data', {}, (err, address) => err ? reject(err) : resolve(address)))
    t.equal(await lookup(), '10.31.0.1')
    t.ok(await eventually(async () => {
      await lookup()
      return cache.stats().refreshesKept >= 2
    }))
    t.ok(server.count(fqdn, 'AAAA') >= 3, 'a name that gains an AAAA record would change what getaddrinfo returns')
  })

  // Under ADDRCONFIG glibc narrows an unspecified family to IPv4 here, and
  // asks the hosts file for IPv4 only: a name it lists with an IPv6 address
  // alone is answered by DNS, and must keep its DNS TTL, not fallbackTtlMs.
  t.test('under ADDRCONFIG, a name the hosts file lists for IPv6 only is refreshed through DNS', async (t) => {
    const fs = require('node:fs')
    const hosts = fs.readFileSync('/etc/hosts', 'latin1')
    t.teardown(() => fs.writeFileSync('/etc/hosts', hosts))
    fs.writeFileSync('/etc/hosts', `${hosts}fd00::32:9 v6listed.example\n`)
    server.set('v6listed.example', { a: ['10.32.0.1'], ttl: 1 })
    const cache = createDnsCache({ hostsFile: '/etc/hosts', minTtlMs: 100, fallbackTtlMs: 60_000 })
    t.teardown(() => cache.close())
    const options = { hints: dns.ADDRCONFIG, all: true }
    const answer = (lookup) => new Promise((resolve, reject) => lookup('v6listed.example', options, (err, list) => err ? reject(err) : resolve(list)))
    t.same(await answer(cache.lookup), await answer(dns.lookup), 'the first answer is Node\'s')
    t.ok(await eventually(async () => {
      await answer(cache.lookup)
      return cache.stats().refreshesKept >= 2
    }), 'refreshed through DNS at its TTL')
    t.equal(cache.stats().fallbacks, 0, 'never kept as a hosts-file answer')
  })
}
