'use strict'

// bench/incident.js's arithmetic on made-up runs: what each field counts,
// when a target holds, what the charts draw, and that the benchmarks' page
// names every field a run prints.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')
const { summarize, targets, notes, windowTable, charts } = require('../bench/incident-report')
const { render, machine } = require('../bench/markdown')

const P = { rate: 10, durationS: 20, windowS: 10, moveAtS: 10, ttlS: 5, uvThreadpoolSize: 4 }

// 200 requests at 10/s, each answered in 2 ms; `upstream` lists the
// requests answered 502.
function measured ({ upstream = [] } = {}) {
  const requests = P.rate * P.durationS
  const latency = new Float64Array(requests).fill(2)
  const failed = new Uint8Array(requests)
  const upstreamFailed = new Uint8Array(requests)
  for (const i of upstream) {
    failed[i] = 1
    upstreamFailed[i] = 1
  }
  return { requests, errors: upstream.length, latency, failed, upstreamFailed, intervalMs: 1000 / P.rate }
}

function row (label, statsd, { p = P, upstream, samples = [], alerts = [] } = {}) {
  return summarize(label, p, measured({ upstream }), { samples, alerts, startEpochMs: 1_000_000, kafkaDelivered: 200, statsd })
}

// One datagram of one line per request until `untilMs`, then to the other
// receiver: [msFromStart, lines].
const each = (fromMs, toMs) => Array.from({ length: (toMs - fromMs) / 100 }, (_, i) => [fromMs + i * 100, 1])

t.test('a label that follows the move: what reached each address, what was lost, and when it followed', async (t) => {
  const run = row('io-hygiene', { sent: 200, moveAtMs: 10_000, old: each(0, 10_000), gone: each(10_000, 13_000), fresh: each(13_000, 20_000) }, { upstream: [100, 101] })
  t.equal(run.statsdDelivered, 170, 'the old receiver before the move, and the new one')
  t.equal(run.statsdAfterMoveOld, 30, 'arrived at the old address after it went away')
  t.equal(run.statsdAfterMoveNew, 70)
  t.equal(run.statsdLostAfterMove, 30, 'the service sent 200, the receivers got 170')
  const dropped = row('io-hygiene', { sent: 201, moveAtMs: 10_000, old: each(0, 10_000), gone: each(10_000, 13_000), fresh: each(13_000, 20_000) })
  t.same([dropped.statsdLostAfterMove, dropped.statsdAfterMoveOld], [31, 30], 'one more sent than arrived anywhere: lost, though not seen at the old address')
  t.equal(run.followedAfterS, 2.9, 'from the DNS change to the last datagram at the old address')
  t.equal(run.upstreamErrorsAfterMove, 2)
  const inFlight = measured({ upstream: [99] })
  inFlight.latency[99] = 150
  t.equal(summarize('io-hygiene', P, inFlight, { samples: [], alerts: [], startEpochMs: 0, kafkaDelivered: 0, statsd: { sent: 0, moveAtMs: 10_000, old: [], gone: [], fresh: [] } }).upstreamErrorsAfterMove, 1, 'due before the move, failed after it: counted')
  t.equal(run.errors, 2)
  t.same(run.windows.map((w) => [w.statsdOld, w.statsdNew, w.statsdLost, w.errors, w.upstreamErrors]), [[100, 0, 0, 0, 0], [0, 70, 30, 2, 2]])
  t.same(run.windows[1], { p50Ms: 2, p99Ms: 2, maxMs: 2, errors: 2, upstreamErrors: 2, statsdOld: 0, statsdNew: 70, statsdLost: 30, activeRequestsByType: {} })
})

t.test('followedAfterS: 0 when nothing reached the old address after the move, null when the label never followed', async (t) => {
  t.equal(row('baseline', { sent: 200, moveAtMs: 10_000, old: each(0, 10_000), gone: [], fresh: each(10_000, 20_000) }).followedAfterS, 0)
  const stuck = row('hand-fixed', { sent: 200, moveAtMs: 10_000, old: each(0, 10_000), gone: each(10_000, 20_000), fresh: [] })
  t.equal(stuck.followedAfterS, null, 'still sending to the old address at the end')
  t.equal(stuck.statsdLostAfterMove, 100)
  t.same(stuck.windows.map((w) => w.statsdLost), [0, 100])
  const floor = row('floor', { sent: 0, moveAtMs: 10_000, old: [], gone: [], fresh: [] })
  t.same([floor.followedAfterS, floor.statsdLostAfterMove, floor.statsdAfterMoveOld, floor.upstreamErrorsAfterMove], [null, 0, 0, 0], 'the floor sends nothing')
})

t.test('without a move the move fields are null, and a datagram in the drain counts in the last window', async (t) => {
  const run = row('io-hygiene', { sent: 200, moveAtMs: null, old: [...each(0, 20_000), [25_000, 3]], gone: [], fresh: [] }, { p: { ...P, moveAtS: null } })
  t.same([run.statsdAfterMoveOld, run.statsdAfterMoveNew, run.statsdLostAfterMove, run.followedAfterS, run.upstreamErrorsAfterMove], [null, null, null, null, null])
  t.equal(run.statsdDelivered, 203)
  t.same(run.windows.map((w) => w.statsdOld), [100, 103])
})

t.test('an alert, and a run with no requests answered at all', async (t) => {
  const alerts = [{ t: 1_000_000 + 4_260, metric: 'TCPWRAP' }, { t: 1_000_000 + 4_260, metric: 'GetAddrInfoReqWrap' }]
  const run = row('baseline', { sent: 0, moveAtMs: null, old: [], gone: [], fresh: [] }, { alerts })
  t.equal(run.alertAtS, 4.3, "the monitor's first alert on GetAddrInfoReqWrap, from the start of the load")
  const none = { requests: 0, errors: 0, latency: new Float64Array(0), failed: new Uint8Array(0), upstreamFailed: new Uint8Array(0), intervalMs: 100 }
  const empty = summarize('floor', P, none, { samples: [], alerts: [], startEpochMs: 0, kafkaDelivered: 0, statsd: { sent: 0, moveAtMs: 10_000, old: [], gone: [], fresh: [] } })
  t.same([empty.p99Ms, empty.maxMs, empty.windows[0].p99Ms, empty.windows[0].maxMs], [0, 0, 0, 0])
})

t.test('lookupQueueFromS: the window from which lookups queue, and the queue grows, to the end', async (t) => {
  const sample = (s, n) => ({ t: 1_000_000 + s * 1000, requestsByType: { GetAddrInfoReqWrap: n } })
  const p = { ...P, durationS: 40 }
  const statsd = { sent: 0, moveAtMs: null, old: [], gone: [], fresh: [] }
  const at = (samples) => summarize('baseline', p, { ...measured(), requests: 400, latency: new Float64Array(400).fill(1), failed: new Uint8Array(400), upstreamFailed: new Uint8Array(400) }, { samples, alerts: [], startEpochMs: 1_000_000, kafkaDelivered: 0, statsd }).lookupQueueFromS
  t.equal(at([sample(1, 9), sample(11, 2), sample(21, 3), sample(31, 40)]), 20, 'two at a time run; a third waits')
  t.equal(at([sample(1, 9), sample(11, 30), sample(21, 50), sample(31, 2)]), null, 'not queued in the last window')
  t.equal(at([sample(1, 9), sample(11, 50), sample(21, 30), sample(31, 40)]), 20, 'from where it grows to the end')
  t.equal(at([sample(1, 1), sample(11, 1), sample(21, 1), sample(31, 3)]), null, 'three at once in the last window alone: no queue')
  t.equal(at([]), null, 'no samples')
})

function runs ({ followedAfterS = 3, lost = 30, seen = 30, errors = 0, upstream = 0, ours = 2 } = {}) {
  const hand = { label: 'hand-fixed', worstWindowP99Ms: 40, upstreamErrorsAfterMove: 3 }
  const windows = (p99) => [{ p99Ms: p99, activeRequestsByType: { GetAddrInfoReqWrap: 5 }, statsdLost: 0 }, { p99Ms: p99, activeRequestsByType: {}, statsdLost: 7 }]
  return [
    { label: 'floor', worstWindowP99Ms: 2, windows: windows(2) },
    { label: 'baseline', worstWindowP99Ms: 900, alertAtS: 4, windows: [{ p99Ms: 100, activeRequestsByType: { GetAddrInfoReqWrap: 5 }, statsdLost: 0 }, { p99Ms: 900, activeRequestsByType: { GetAddrInfoReqWrap: 50 }, statsdLost: 0 }] },
    { ...hand, windows: windows(40) },
    { label: 'io-hygiene', worstWindowP99Ms: ours, requests: 200, errors, upstreamErrorsAfterMove: upstream, kafkaDelivered: 200, statsdDelivered: 200 - lost, statsdLostAfterMove: lost, statsdAfterMoveOld: seen, followedAfterS, alertAtS: null, windows: windows(ours) },
  ]
}

t.test("the move's targets: io-hygiene follows within one TTL + 1 s and loses at most one TTL's worth", async (t) => {
  const judged = (r) => Object.fromEntries(targets(r, P).map((x) => [x.name, x.holds]))
  const held = judged(runs())
  t.same(Object.values(held), Array(Object.keys(held).length).fill(true), 'all held')
  t.same(Object.keys(held), [
    "io-hygiene's worst window p99 <= 2x floor's",
    "io-hygiene's worst window p99 <= hand-fixed's",
    "baseline's worst window p99 >= 10x io-hygiene's (the incident reproduced)",
    'io-hygiene: no errors but upstream errors after the move',
    "io-hygiene: upstream errors after the move no more than hand-fixed's (Node's fetch, which resolves each new connection)",
    "io-hygiene: every request's Kafka message delivered, and every StatsD increment but those sent to the old address after the move",
    'io-hygiene follows the moved endpoint within one TTL + 1 s',
    "io-hygiene loses at most one TTL's worth of metrics after the move (rate x TTL)",
    "io-hygiene: the monitor's GetAddrInfoReqWrap alert stays silent",
    "baseline: the monitor's GetAddrInfoReqWrap alert fires before the worst window",
  ])
  const follow = 'io-hygiene follows the moved endpoint within one TTL + 1 s'
  const loses = "io-hygiene loses at most one TTL's worth of metrics after the move (rate x TTL)"
  t.equal(judged(runs({ followedAfterS: 6 }))[follow], true, 'TTL 5 s + 1 s')
  t.equal(judged(runs({ followedAfterS: 6.1 }))[follow], false)
  t.equal(judged(runs({ followedAfterS: null }))[follow], false, 'never followed')
  t.equal(judged(runs({ lost: 50, seen: 50 }))[loses], true, '10/s x 5 s')
  t.equal(judged(runs({ lost: 51, seen: 51 }))[loses], false)
  const delivered = "io-hygiene: every request's Kafka message delivered, and every StatsD increment but those sent to the old address after the move"
  t.equal(judged(runs({ lost: 31, seen: 30 }))[delivered], false, 'one lost that the move does not explain')
  t.equal(judged(runs({ errors: 3, upstream: 3 }))['io-hygiene: no errors but upstream errors after the move'], true)
  t.equal(judged(runs({ errors: 4, upstream: 3 }))['io-hygiene: no errors but upstream errors after the move'], false)
  const upstream = "io-hygiene: upstream errors after the move no more than hand-fixed's (Node's fetch, which resolves each new connection)"
  t.equal(judged(runs({ errors: 3, upstream: 3 }))[upstream], true, "hand-fixed's 3")
  t.equal(judged(runs({ errors: 4, upstream: 4 }))[upstream], false)
  t.same(targets(runs().filter((r) => r.label !== 'hand-fixed'), P).filter((x) => /hand-fixed/.test(x.name)), [], 'without hand-fixed, nothing to compare with')
  t.match(targets(runs({ followedAfterS: null }), P).find((x) => x.name === follow).measured, 'not followed (TTL 5 s)')
  t.match(targets(runs(), P).find((x) => x.name === follow).measured, '3 s after the DNS change (TTL 5 s, 0.6x)')
  t.match(targets(runs(), P).find((x) => x.name === loses).measured, '30 of at most 50 (0.6x)')
})

t.test('without a move the targets are the incident alone', async (t) => {
  const p = { ...P, moveAtS: null }
  const names = targets(runs(), p).map((x) => x.name)
  t.ok(names.includes('io-hygiene: no errors'))
  t.ok(names.includes("io-hygiene: every request's StatsD increment and Kafka message delivered"))
  t.notOk(names.some((n) => /move/.test(n)))
  t.same(targets([runs()[0]], p), [], 'the floor alone judges nothing')
  const missed = targets(runs({ ours: 200, lost: 0, seen: 0 }), p)
  t.same(missed.filter((x) => !x.holds).map((x) => x.name), [
    "io-hygiene's worst window p99 <= 2x floor's",
    "io-hygiene's worst window p99 <= hand-fixed's",
    "baseline's worst window p99 >= 10x io-hygiene's (the incident reproduced)",
  ])
  const silent = runs()
  silent[1].alertAtS = null
  t.match(targets(silent, p).at(-1), { holds: false, measured: 'silent; worst window from 10 s' })
  silent[3].alertAtS = 12
  t.match(targets(silent, p).find((x) => /stays silent/.test(x.name)), { holds: false, measured: 'fired at 12 s' })
  t.match(targets([{ ...runs()[0], worstWindowP99Ms: 0 }, { ...runs()[3], worstWindowP99Ms: 0 }], p)[0].measured, '(0x)', 'a ratio of nothing to nothing')
  t.match(targets([{ ...runs()[0], worstWindowP99Ms: 0 }, runs()[3]], p)[0].measured, '(Infinityx)')
})

t.test("the charts: p99 per window, the baseline's lookups, and the metrics lost after the move, the floor left out", async (t) => {
  const drawn = charts(runs(), P)
  t.same(drawn.map((c) => c.title), [
    'p99 latency per 10 s window (ms)',
    'p99 latency per 10 s window without the baseline (ms)',
    'baseline: active requests by type, the most in each 10 s window',
    'StatsD metrics lost per 10 s window: sent to the old address after the move at 10 s (TTL 5 s)',
  ])
  const lost = drawn[3]
  t.same(lost.x, [10, 20])
  t.same(lost.series, [
    { name: 'baseline', color: '#d62728', values: [0, 0] },
    { name: 'hand-fixed', color: '#ff7f0e', values: [0, 7] },
    { name: 'io-hygiene', color: '#2ca02c', values: [0, 7] },
  ])
  t.same(drawn[2].series, [{ name: 'GetAddrInfoReqWrap', values: [5, 50] }])
  const two = runs()
  two[1].windows[0].activeRequestsByType = { FSReqCallback: 1 }
  t.same(charts(two, P)[2].series, [{ name: 'GetAddrInfoReqWrap', values: [0, 50] }, { name: 'FSReqCallback', values: [1, 0] }], 'a type missing from a window is 0 there')
  t.same(charts(runs(), { ...P, moveAtS: null }).map((c) => c.title).filter((x) => /lost/.test(x)), [], 'no move, no chart of it')
  t.same(charts([runs()[0]], P).map((c) => c.title), ['p99 latency per 10 s window (ms)'], 'the floor alone: one chart')
  t.same(charts([], P)[0].x, [])
  const page = render([{ bench: 'incident', scenarios: [], charts: drawn }], machine(new Date('2026-01-02T03:04:05Z'), []))
  t.match(page, [
    '  title "StatsD metrics lost per 10 s window: sent to the old address after the move at 10 s (TTL 5 s)"',
    '  x-axis "seconds into the run (end of window)" [10, 20]',
    '  y-axis "metrics lost" 0 --> 8',
    '  line [0, 0]',
    '  line [0, 7]',
    '  line [0, 7]',
    '```',
    '',
    'Lines: baseline (red), hand-fixed (orange), io-hygiene (green).',
  ].join('\n'), 'drawn as a Mermaid line chart')
})

t.test("the notes: each label's lookup queue and alert, and where its metrics went after the move", async (t) => {
  const rows = runs()
  rows[0] = { ...rows[0], lookupQueueFromS: null, alertAtS: null }
  rows[1] = { ...rows[1], lookupQueueFromS: 0, statsdLostAfterMove: 2, statsdAfterMoveOld: 2, followedAfterS: 0, upstreamErrorsAfterMove: 9 }
  rows[2] = { ...rows[2], lookupQueueFromS: null, alertAtS: null, statsdLostAfterMove: 600, statsdAfterMoveOld: 600, followedAfterS: null }
  rows[3] = { ...rows[3], lookupQueueFromS: 30, alertAtS: null }
  t.same(notes(rows, P), [
    "baseline: lookups queue from the window at 0 s; the monitor's GetAddrInfoReqWrap alert fires at 4 s",
    "io-hygiene: lookups queue from the window at 30 s; the monitor's GetAddrInfoReqWrap alert stays silent",
    'baseline after the move at 10 s: 2 metrics lost, 2 of them sent to the old address, the old address used 0 s more, 9 upstream errors',
    'hand-fixed after the move at 10 s: 600 metrics lost, 600 of them sent to the old address, the new address not followed in the run, 3 upstream errors',
    'io-hygiene after the move at 10 s: 30 metrics lost, 30 of them sent to the old address, the old address used 3 s more, 0 upstream errors',
  ])
  t.same(notes([{ ...rows[1], lookupQueueFromS: null, alertAtS: 5 }], { ...P, moveAtS: null }), ["baseline: lookups queue from -; the monitor's GetAddrInfoReqWrap alert fires at 5 s"])
})

t.test('the readable tables: p99, or another field, per window end', async (t) => {
  t.equal(windowTable(runs().slice(2), P, 'statsdLost', 'StatsD lost'), [
    '| StatsD lost | 10 s | 20 s |',
    '|-------------|------|------|',
    '| hand-fixed  | 0    | 7    |',
    '| io-hygiene  | 0    | 7    |',
    '',
    '',
  ].join('\n'))
  t.equal(windowTable([...runs().slice(0, 2), { label: 'short', windows: [{ p99Ms: 3 }] }], { ...P, durationS: 15 }), [
    '| p99 (ms) by window end | 10 s | 15 s |',
    '|------------------------|------|------|',
    '| floor                  | 2    | 2    |',
    '| baseline               | 100  | 900  |',
    '| short                  | 3    |      |',
    '',
    '',
  ].join('\n'))
})

t.test("docs/benchmarks/README.md names every field of the incident's runs and windows", async (t) => {
  const text = fs.readFileSync(path.join(__dirname, '..', 'docs', 'benchmarks', 'README.md'), 'utf8')
  const section = text.slice(text.indexOf('## incident'), text.indexOf('\n## ', text.indexOf('## incident') + 1))
  const run = row('io-hygiene', { sent: 200, moveAtMs: 10_000, old: each(0, 10_000), gone: [], fresh: each(10_000, 20_000) })
  for (const field of [...Object.keys(run), ...Object.keys(run.windows[0])]) {
    if (field === 'label') continue
    t.match(section, `\`${field}\``, field)
  }
})
