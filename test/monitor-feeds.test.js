'use strict'

// The operation histograms as io-hygiene's own modules feed them, through
// real work: a DNS server on 127.0.0.1, a batcher with a real sink, HTTP
// requests to a local server. The registry is process-wide, so each test
// reads what its own work added (since()).
const t = require('tap')
const { cacheWithServer, eventually, untilStale } = require('./helpers/dns-cache')
const { series } = require('../lib/monitor/registry')

// What each series of `kind` recorded since `before` (a snapshot()).
function snapshot () {
  return new Map(series().map((s) => [s.histogram, s.histogram.copy()]))
}

function added (kind, before) {
  const out = {}
  for (const { kind: k, labels, histogram } of series()) {
    if (k !== kind) continue
    const was = before.get(histogram)
    const window = was === undefined ? histogram.copy() : histogram.since(was)
    if (window.count > 0) out[Object.values(labels).join('/')] = window
  }
  return out
}

t.test('dns.lookup: cache hits counted without a clock, upstream resolutions timed, by source', async (t) => {
  const { server, cache, lookup } = await cacheWithServer(t, { minTtlMs: 0, staleTtlMs: 60_000, errorTtlMs: 60_000 })
  server.set('fed.test', { a: ['10.9.0.1'], ttl: 1 })
  const before = snapshot()
  await lookup('fed.test') // upstream
  for (let i = 0; i < 5; i++) await lookup('fed.test') // hits
  await t.rejects(lookup('missing.test'), { code: 'ENOTFOUND' }) // error
  await t.rejects(lookup('missing.test'), { code: 'ENOTFOUND' }) // negative
  t.ok(await untilStale(cache, 'fed.test'), 'the TTL runs out')
  await lookup('fed.test') // stale, and a refresh upstream
  t.ok(await eventually(() => added('dns.lookup', before).upstream?.count === 2), 'the refresh answers')
  const got = added('dns.lookup', before)
  t.same(Object.keys(got).sort(), ['error', 'hit', 'negative', 'stale', 'upstream'])
  t.equal(got.hit.count, 5, 'every hit counted')
  t.equal(got.hit.sumMs, 0, 'a hit reads no clock: it records 0')
  t.equal(got.stale.count, 1)
  t.equal(got.negative.count, 1)
  t.equal(got.upstream.count, 2, 'the first resolution and the refresh')
  t.ok(got.upstream.sumMs > 0, 'resolutions are timed')
  t.equal(got.error.count, 1)
  t.ok(got.error.sumMs > 0)
})

t.test('batch.flush and batch.queue_wait: per batcher name, a round trip per send by outcome, a wait per item', async (t) => {
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const { createBatcher } = require('..')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-feeds-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'sink.log')
  let failures = 1
  const batcher = createBatcher({
    name: 'feeds-file',
    flushWhenIdle: false,
    flushIntervalMs: 20,
    retryBackoffMs: 0,
    isRetriable: () => true,
    // A real sink: lines appended to a file; the first send fails once.
    send: async (items) => {
      if (failures-- > 0) throw new Error('sink unavailable')
      await fs.promises.appendFile(file, items.join('\n') + '\n')
    },
  })
  t.teardown(() => batcher.close())
  // The batcher's timers are unref'd: as a server would, keep the process up.
  const alive = setInterval(() => {}, 1000)
  t.teardown(() => clearInterval(alive))
  const before = snapshot()
  await Promise.all(['a', 'b', 'c'].map((line) => batcher.push(line)))
  t.equal(fs.readFileSync(file, 'utf8'), 'a\nb\nc\n')
  const flush = added('batch.flush', before)
  t.same(Object.keys(flush).sort(), ['feeds-file/error', 'feeds-file/ok'])
  t.equal(flush['feeds-file/ok'].count, 1, 'one round trip that succeeded')
  t.equal(flush['feeds-file/error'].count, 1, 'and the one that failed')
  const wait = added('batch.queue_wait', before)['feeds-file']
  t.equal(wait.count, 3, 'one wait per item, at its first send (the retry adds none)')
  t.ok(wait.percentile(0) >= 1, 'the items lingered flushIntervalMs before the send: the wait is measured')
})

t.test('http.request: per request, by origin and outcome, from dispatch to completion', async (t) => {
  const ioHygiene = require('..')
  const { startHttpServer } = require('./helpers/http-server')
  const server = await startHttpServer({ hostname: '127.0.0.1' })
  t.teardown(() => server.close())
  ioHygiene.install({ dns: false, http: { requestTimeoutMs: 200 } })
  t.teardown(() => ioHygiene.uninstall())
  const before = snapshot()
  for (let i = 0; i < 3; i++) t.equal(await (await fetch(server.url('/ok'))).text(), 'ok')
  server.handler = (req, res) => {
    if (req.url === '/hang') return // never answers: the deadline ends it
    req.socket.destroy() // no response: an error
  }
  await t.rejects(fetch(server.url('/hang')))
  await t.rejects(fetch(server.url('/reset'), { method: 'POST', body: 'x' }))
  const origin = server.origin()
  const got = added('http.request', before)
  t.same(Object.keys(got).sort(), [`${origin}/error`, `${origin}/ok`, `${origin}/timeout`])
  t.equal(got[`${origin}/ok`].count, 3, 'one record per request')
  t.ok(got[`${origin}/ok`].sumMs > 0, 'timed')
  t.equal(got[`${origin}/timeout`].count, 1)
  t.equal(got[`${origin}/error`].count, 1)
})
