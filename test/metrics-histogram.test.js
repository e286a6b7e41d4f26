'use strict'

// The operation histograms: DTrace-style power-of-two buckets, merged across
// instances, read as percentiles and as a quantize chart; and the per-process
// registry the modules feed.
const t = require('tap')
const { Histogram, histogram } = require('..')
const { series, MAX_SERIES_PER_KIND } = require('../lib/metrics/registry')

t.test('a value in ms lands in the power-of-two microsecond bucket that holds it', async (t) => {
  const h = new Histogram()
  const cases = [
    [0, 0], [0.0005, 0], [-1, 0], [NaN, 0], // under 1 µs, negatives and NaN: bucket 0
    [0.001, 1], [0.0019, 1], // [1, 2) µs
    [0.002, 2], [0.003, 2], // [2, 4) µs
    [1, 10], // 1000 µs: [512, 1024)
    [1.024, 11], // 1024 µs: [1024, 2048)
    [4294967.295, 32], // 2^32 - 1 µs
    [4294967.296, 33], [1e12, 33], [Infinity, 33], // 2^32 µs and beyond
  ]
  for (const [ms, bucket] of cases) {
    h.reset()
    h.record(ms)
    t.equal(h.buckets[bucket], 1, `${ms} ms -> bucket ${bucket}`)
    t.equal(h.count, 1)
  }
  h.reset()
  for (const ms of [1, 2, -5, NaN]) h.record(ms)
  t.equal(h.sumMs, 3, 'negatives and NaN are counted but add nothing to the sum')
  t.equal(h.maxMs, 2)
})

t.test('percentile() is the upper bound of the bucket holding the rank, never above the max', async (t) => {
  const h = new Histogram()
  t.equal(h.percentile(99), 0, 'empty')
  // 90 values of 0.1 ms (100 µs: bucket [64, 128)), 10 of 3 ms (3000 µs: [2048, 4096)).
  for (let i = 0; i < 90; i++) h.record(0.1)
  for (let i = 0; i < 10; i++) h.record(3)
  t.equal(h.percentile(0), 0.128)
  t.equal(h.percentile(50), 0.128)
  t.equal(h.percentile(90), 0.128)
  t.equal(h.percentile(91), 3, 'upper bound 4.096 ms, capped by the max 3 ms')
  t.equal(h.percentile(100), 3)
  const huge = new Histogram()
  huge.record(Infinity)
  t.equal(huge.percentile(50), Infinity, 'the last bucket has no upper bound')
  t.equal(h.count, 100)
  t.equal(Math.round(h.sumMs * 1000) / 1000, 39)
  for (const bad of [-1, 101, NaN, '50']) {
    t.throws(() => h.percentile(bad), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' })
  }
})

t.test('histograms merge, also from toJSON() (another process), and diff', async (t) => {
  const a = new Histogram()
  const b = new Histogram()
  for (let i = 0; i < 10; i++) a.record(1)
  for (let i = 0; i < 30; i++) b.record(100)
  const merged = a.copy().merge(b)
  t.equal(merged.count, 40)
  t.equal(merged.sumMs, 3010)
  t.equal(merged.maxMs, 100)
  t.equal(merged.percentile(25), 1.024, '10 of 40 in [0.512, 1.024) ms')
  t.equal(merged.percentile(26), 100)
  const json = JSON.parse(JSON.stringify(b))
  t.same(json, { count: 30, sumMs: 3000, maxMs: 100, buckets: { 65536: 30 } })
  const viaJson = a.copy().merge(json)
  t.same(viaJson.buckets, merged.buckets)
  t.same(Histogram.from(json).toJSON(), json)
  t.equal(Histogram.from({ count: 2, sumMs: 0, maxMs: 0, buckets: { 0: 2 } }).buckets[0], 2, 'bucket 0 from JSON')
  t.equal(a.count, 10, 'copy() left the original alone')

  const before = merged.copy()
  merged.record(0.5)
  const window = merged.since(before)
  t.equal(window.count, 1)
  t.equal(window.percentile(50), 0.512, 'the bucket of 0.5 ms')

  for (const bad of [null, 5, { count: 1 }, { count: 1, sumMs: 1, maxMs: 1, buckets: null },
    { count: 1, sumMs: 1, maxMs: 1, buckets: { 3: 1 } }, { count: 1, sumMs: 1, maxMs: 1, buckets: { 2: 'x' } },
    { count: 1, sumMs: 1, maxMs: 1, buckets: { [2 ** 33]: 1 } }]) {
    t.throws(() => new Histogram().merge(bad), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, JSON.stringify(bad))
  }
})

t.test('render() draws DTrace\'s quantize chart', async (t) => {
  const h = new Histogram()
  t.equal(h.render('empty'), [
    'empty',
    '      value (µs)  ------------- Distribution ------------- count',
    '    (no samples)',
  ].join('\n'))
  for (let i = 0; i < 3; i++) h.record(0.001) // 1 µs
  h.record(0.004) // 4 µs
  t.equal(h.render(), [
    '      value (µs)  ------------- Distribution ------------- count',
    '               0 |                                         0',
    '               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@           3',
    '               2 |                                         0',
    '               4 |@@@@@@@@@@                               1',
    '               8 |                                         0',
  ].join('\n'))
  const top = new Histogram()
  top.record(0) // bucket 0 is first: no row below it
  top.record(Infinity) // the last bucket: no row above it
  const rows = top.render().split('\n')
  t.match(rows[1], /^ {15}0 \|@{20} {20} 1$/)
  t.match(rows.at(-1), /^ *4294967296 \|@{20} {20} 1$/)
})

t.test('the registry gives one histogram per kind and label set, bounded per kind', async (t) => {
  const a = histogram('test.reg', { outcome: 'ok', origin: 'http://a' })
  t.equal(histogram('test.reg', { origin: 'http://a', outcome: 'ok' }), a, 'label order does not matter')
  t.not(histogram('test.reg', { origin: 'http://b', outcome: 'ok' }), a)
  t.equal(histogram('test.plain'), histogram('test.plain', {}))
  const entry = series().find((s) => s.histogram === a)
  t.same(entry, { kind: 'test.reg', labels: { origin: 'http://a', outcome: 'ok' }, histogram: a })
  t.ok(Object.isFrozen(entry.labels))

  for (let i = 0; i < MAX_SERIES_PER_KIND + 10; i++) histogram('test.many', { origin: `http://h${i}` })
  const many = series().filter((s) => s.kind === 'test.many')
  t.equal(many.length, MAX_SERIES_PER_KIND + 1, 'the bound, plus one shared series')
  t.same(many.at(-1).labels, { origin: 'other' })
  t.equal(histogram('test.many', { origin: 'http://new' }), many.at(-1).histogram)
  t.equal(histogram('test.many', { origin: 'http://h0' }), many[0].histogram, 'known label sets keep their own')

  for (const [kind, labels] of [[5], ['Dns.Lookup'], ['dns..lookup'], ['dns.lookup', null], ['dns.lookup', []],
    ['dns.lookup', { Source: 'x' }], ['dns.lookup', { source: 5 }]]) {
    t.throws(() => histogram(kind, labels), { code: 'ERR_IO_HYGIENE_INVALID_ARGUMENT' }, `${kind} ${JSON.stringify(labels)}`)
  }
})

t.test('two copies of io-hygiene share one registry', async (t) => {
  const file = require.resolve('../lib/metrics/registry')
  const cached = require.cache[file]
  delete require.cache[file]
  t.teardown(() => { require.cache[file] = cached })
  const copy = require('../lib/metrics/registry')
  t.not(copy.histogram, histogram)
  t.equal(copy.histogram('test.shared', { x: 'y' }), histogram('test.shared', { x: 'y' }))
})
