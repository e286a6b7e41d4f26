'use strict'

// The operation histograms as io-hygiene's own modules feed them, through
// real work: a DNS server on 127.0.0.1, a batcher with a real sink, HTTP
// requests to a local server. The registry is process-wide, so each test
// reads what its own work added (since()).
const t = require('tap')
const { cacheWithServer, eventually, untilStale } = require('./helpers/dns-cache')
const { series } = require('../lib/metrics/registry')

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
    lingerMs: 20,
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
  t.ok(wait.percentile(0) >= 1, 'the items lingered lingerMs before the send: the wait is measured')
})

t.test('http.request: per request, by origin and outcome, from dispatch to completion', async (t) => {
  const ioHygiene = require('..')
  const { startHttpServer } = require('./helpers/http-server')
  const server = await startHttpServer({ hostname: '127.0.0.1' })
  t.teardown(() => server.close())
  // Long enough that a loaded CI machine never times out the /ok requests.
  ioHygiene.install({ dns: false, http: { requestTimeoutMs: 1_000 } })
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

t.test('sample(), report(), StatsD and prom-client show what the modules fed', async (t) => {
  const fs = require('node:fs')
  const ioHygiene = require('..')
  const { createBatcher, createMonitor, createStatsd } = ioHygiene
  const { Registry } = require('prom-client')
  const { startHttpServer } = require('./helpers/http-server')
  const { startStatsdReceiver } = require('./helpers/statsd-receiver')

  const receiver = await startStatsdReceiver()
  t.teardown(() => receiver.close())
  const client = createStatsd({ host: '127.0.0.1', port: receiver.port })
  const registry = new Registry()
  const monitor = createMonitor({ intervalMs: 2 ** 31 - 1, conditions: [], statsd: client, registry })
  t.teardown(() => monitor.close())

  // Real work for each module.
  const { server: dnsServer, lookup } = await cacheWithServer(t)
  dnsServer.set('outputs.test', { a: ['10.9.0.2'] })
  await lookup('outputs.test')
  await lookup('outputs.test')
  const batcher = createBatcher({ name: 'feeds-outputs', send: async () => { await fs.promises.stat(__filename) } })
  t.teardown(() => batcher.close())
  await Promise.all(['a', 'b', 'c'].map((line) => batcher.push(line)))
  const httpServer = await startHttpServer({ hostname: '127.0.0.1' })
  t.teardown(() => httpServer.close())
  ioHygiene.install({ dns: false, http: true })
  t.teardown(() => ioHygiene.uninstall())
  t.equal(await (await fetch(httpServer.url('/'))).text(), 'ok')
  const origin = httpServer.origin()

  const sample = monitor.sample()
  const find = (kind, labels) => sample.histograms.find((h) => h.kind === kind && Object.entries(labels).every(([k, v]) => h.labels[k] === v))
  t.ok(find('dns.lookup', { source: 'upstream' }).count >= 1, 'sample(): dns.lookup upstream')
  t.ok(find('dns.lookup', { source: 'hit' }).count >= 1, 'sample(): dns.lookup hit')
  t.match(find('batch.flush', { batcher: 'feeds-outputs', outcome: 'ok' }), { count: 1 }, 'sample(): batch.flush')
  t.match(find('batch.queue_wait', { batcher: 'feeds-outputs' }), { count: 3 }, 'sample(): batch.queue_wait')
  t.ok(find('http.request', { origin, outcome: 'ok' }).count >= 1, 'sample(): http.request')
  t.equal(ioHygiene.Histogram.from(find('batch.queue_wait', { batcher: 'feeds-outputs' })).count, 3, 'plain data a Histogram reads back')

  const report = monitor.report()
  for (const title of ['dns.lookup source=upstream: ', 'dns.lookup source=hit: ', 'batch.flush batcher=feeds-outputs outcome=ok: 1 recorded',
    'batch.queue_wait batcher=feeds-outputs: 3 recorded', `http.request origin=${origin} outcome=ok: `]) {
    t.ok(report.includes(title), `report(): ${title}`)
  }

  await client.close()
  await receiver.waitFor((r) => r.find('nodejs.monitor.cost_us').length === 1)
  const tagged = (name, ...tags) => receiver.find(name).filter((l) => tags.every((tag) => l.tags.includes(tag)))
  t.equal(tagged('nodejs.dns.lookup.count', 'source:upstream').length, 1, 'StatsD: dns.lookup')
  t.equal(tagged('nodejs.batch.flush.count', 'batcher:feeds-outputs', 'outcome:ok')[0]?.value, '1', 'StatsD: batch.flush')
  t.equal(tagged('nodejs.batch.queue_wait.p99_ms', 'batcher:feeds-outputs').length, 1, 'StatsD: batch.queue_wait')
  t.equal(tagged('nodejs.http.request.count', `origin:${origin}`, 'outcome:ok').length, 1, 'StatsD: http.request')

  const text = await registry.metrics()
  t.match(text, /^io_hygiene_dns_lookup_seconds_count\{source="upstream"\} [1-9]/m, 'prom-client: dns.lookup')
  t.match(text, /^io_hygiene_batch_flush_seconds_count\{batcher="feeds-outputs",outcome="ok"\} 1$/m, 'prom-client: batch.flush')
  t.match(text, /^io_hygiene_batch_queue_wait_seconds_count\{batcher="feeds-outputs"\} 3$/m, 'prom-client: batch.queue_wait')
  t.ok(text.includes(`io_hygiene_http_request_seconds_count{origin="${origin}",outcome="ok"}`), 'prom-client: http.request')
})
