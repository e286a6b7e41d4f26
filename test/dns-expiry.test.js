'use strict'

const t = require('tap')
const { eventually } = require('./helpers/dns-cache')
const { Expiry } = require('../lib/dns/expiry')

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
