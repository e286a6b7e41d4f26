'use strict'

// A flood of getaddrinfo calls as the monitor sees it: in a private mount
// namespace whose resolv.conf points at a test DNS server that never answers,
// every dns.lookup stays in flight as a GetAddrInfoReqWrap, and the alert
// names the fix io-hygiene has for it.
const { enterNamespace } = require('./helpers/in-namespace')

const inside = enterNamespace(__filename)
if (inside) run(inside)

function run ({ nameserver }) {
  const t = require('tap')
  const dns = require('node:dns')
  const dc = require('node:diagnostics_channel')
  const { startDnsServer } = require('./helpers/dns-server')
  const { eventually } = require('./helpers/wait')
  const { createMonitor, install, uninstall } = require('..')

  let server
  t.before(async () => {
    server = await startDnsServer({ port: 53, address: nameserver })
    server.mode = 'blackhole'
  })
  t.teardown(() => server.close())

  t.test('pending getaddrinfo calls are counted as GetAddrInfoReqWrap, and the alert names the dns module', async (t) => {
    const seen = []
    const logged = []
    const listener = (alert) => seen.push(alert)
    dc.subscribe('io-hygiene:monitor:alert', listener)
    t.teardown(() => dc.unsubscribe('io-hygiene:monitor:alert', listener))
    const monitor = createMonitor({
      intervalMs: 2 ** 31 - 1,
      cooldownMs: 0,
      logger: { warn: (line) => logged.push(line) },
      conditions: ['GetAddrInfoReqWrap > 5', { when: 'requests > 5', name: 'requests' }],
    })
    t.teardown(() => monitor.close())

    const lookups = []
    const flood = (prefix) => {
      for (let i = 0; i < 8; i++) {
        lookups.push(new Promise((resolve) => dns.lookup(`${prefix}${i}.flood.test`, (error) => resolve(error))))
      }
    }
    const before = monitor.sample().requestsByType.GetAddrInfoReqWrap ?? 0
    flood('off')
    await eventually(() => server.queries > 0) // the resolver is asking: the calls are in flight
    const off = monitor.sample()
    t.equal(off.requestsByType.GetAddrInfoReqWrap - before, 8, 'every lookup in flight, counted by type')
    const [byType, byTotal] = seen.splice(0)
    t.match(byType, { name: 'GetAddrInfoReqWrap > 5', metric: 'GetAddrInfoReqWrap', value: off.requestsByType.GetAddrInfoReqWrap })
    t.match(byType.fix, /dns module is off: install\(\{ dns: true \}\)/)
    t.match(byTotal, { name: 'requests', metric: 'requests' })
    t.equal(byTotal.fix, byType.fix, 'the dominant request type gets its fix too')
    t.match(logged[0], /^io-hygiene monitor: GetAddrInfoReqWrap > 5 \(GetAddrInfoReqWrap \d+ > 5\); io-hygiene's dns module is off/)

    // Turned off by the environment: the advice names the variable, not install().
    process.env.IO_HYGIENE_DNS = '0'
    t.teardown(() => { delete process.env.IO_HYGIENE_DNS })
    const asked = server.queries
    flood('env')
    await eventually(() => server.queries > asked)
    monitor.sample()
    t.match(seen.splice(0)[0].fix, /dns module is off: IO_HYGIENE_DNS=0 in the environment turned it off/)
    delete process.env.IO_HYGIENE_DNS

    install({ monitor: false })
    t.teardown(uninstall)
    flood('on') // misses: the cache asks getaddrinfo too
    monitor.sample()
    t.match(seen[0].fix, /dns module is on, yet lookups reach getaddrinfo/)

    const errors = await Promise.all(lookups)
    t.ok(errors.every((error) => error && error.code), 'the blackholed lookups fail in the end')
  })
}
