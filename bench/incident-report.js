'use strict'

// bench/incident.js's arithmetic, apart from its servers so that it can be
// tested on made-up runs: one label's measurements summed up per run and per
// window, the targets judged on the rows, and the charts as data.

const LABELS = ['floor', 'baseline', 'hand-fixed', 'io-hygiene']
const COLORS = { floor: '#7f7f7f', baseline: '#d62728', 'hand-fixed': '#ff7f0e', 'io-hygiene': '#2ca02c' }

function percentile (sorted, p) {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

const ms = (n) => Math.round(n * 10) / 10
const sum = (arrivals) => arrivals.reduce((n, [, lines]) => n + lines, 0)

// `measured`: the open loop's { requests, errors, intervalMs } and, per
// request in scheduled order, its latency, failed and upstreamFailed (0/1). `statsd`: { sent (the
// service's increments during the run), moveAtMs (null: no move), old,
// gone, fresh }, each a list of [msFromStart, lines] datagrams: at the old
// receiver, at the old address after the receiver went away (nobody reads
// them: lost), at the new receiver.
function summarize (label, p, measured, { samples, alerts, startEpochMs, kafkaDelivered, statsd }) {
  const { latency, intervalMs, requests, errors, failed, upstreamFailed } = measured
  const all = Float64Array.from(latency).sort()
  const count = Math.ceil(p.durationS / p.windowS)
  const windowMs = p.windowS * 1000
  // A datagram counts in the window it arrived in; the last window takes
  // those that came in the drain after it.
  const bin = (arrivals) => {
    const out = new Array(count).fill(0)
    for (const [at, lines] of arrivals) out[Math.min(count - 1, Math.floor(at / windowMs))] += lines
    return out
  }
  const [old, gone, fresh] = [statsd.old, statsd.gone, statsd.fresh].map(bin)
  const windows = []
  for (let w = 0; w < count; w++) {
    const from = Math.ceil((w * windowMs) / intervalMs)
    const to = Math.min(requests, Math.ceil(((w + 1) * windowMs) / intervalMs))
    const sorted = latency.slice(from, to).sort()
    let failures = 0
    let upstream = 0
    for (let i = from; i < to; i++) {
      failures += failed[i]
      upstream += upstreamFailed[i]
    }
    const byType = {}
    for (const s of samples) {
      const at = (s.t - startEpochMs) / 1000
      if (at < w * p.windowS || at >= (w + 1) * p.windowS) continue
      for (const [type, n] of Object.entries(s.requestsByType)) byType[type] = Math.max(byType[type] ?? 0, n)
    }
    windows.push({
      p50Ms: ms(percentile(sorted, 50)),
      p99Ms: ms(percentile(sorted, 99)),
      maxMs: ms(sorted[sorted.length - 1] ?? 0),
      errors: failures,
      upstreamErrors: upstream,
      statsdOld: old[w],
      statsdNew: fresh[w],
      statsdLost: gone[w],
      activeRequestsByType: byType,
    })
  }
  const alert = alerts.find((a) => a.metric === 'GetAddrInfoReqWrap')
  const statsdDelivered = sum(statsd.old) + sum(statsd.fresh)
  const moved = statsd.moveAtMs !== null
  // Answered after the move: a request in flight on a connection the old
  // upstream reset counts too.
  let upstreamAfter = 0
  if (moved) {
    for (let i = 0; i < requests; i++) if (i * intervalMs + latency[i] >= statsd.moveAtMs) upstreamAfter += upstreamFailed[i]
  }
  return {
    label,
    rate: p.rate,
    durationS: p.durationS,
    requests,
    errors,
    p50Ms: ms(percentile(all, 50)),
    p99Ms: ms(percentile(all, 99)),
    p999Ms: ms(percentile(all, 99.9)),
    maxMs: ms(all[all.length - 1] ?? 0),
    worstWindowP99Ms: Math.max(...windows.map((w) => w.p99Ms)),
    alertAtS: alert ? Math.round((alert.t - startEpochMs) / 100) / 10 : null,
    lookupQueueFromS: lookupQueueFrom(windows, p),
    statsdDelivered,
    kafkaDelivered,
    statsdAfterMoveOld: moved ? sum(statsd.gone) : null,
    statsdAfterMoveNew: moved ? sum(statsd.fresh) : null,
    statsdLostAfterMove: moved ? statsd.sent - statsdDelivered : null,
    followedAfterS: moved ? followedAfter(statsd) : null,
    upstreamErrorsAfterMove: moved ? upstreamAfter : null,
    windows,
  }
}

// Seconds from the DNS change to the last metric that reached the old
// address; null when none reached the new one after it (not followed within
// the run, or no metrics at all).
function followedAfter ({ moveAtMs, gone, fresh }) {
  // A loop, not Math.max(...list): a ten-minute baseline sends 36,000
  // datagrams, one argument each.
  const lastNew = fresh.reduce((last, [at]) => Math.max(last, at), -Infinity)
  const lastOld = gone.reduce((last, [at]) => Math.max(last, at), moveAtMs)
  if (lastNew < lastOld) return null
  return Math.round((lastOld - moveAtMs) / 100) / 10
}

// The start of the window from which lookups queue and the queue grows: in
// every window to the end, more GetAddrInfoReqWrap in flight than libuv runs
// at once ((UV_THREADPOOL_SIZE + 1) / 2 threads), and no fewer than in the
// window before. Null unless that holds for two windows at least: a few
// lookups at once in the last window are no queue.
function lookupQueueFrom (windows, p) {
  const limit = Math.floor((p.uvThreadpoolSize + 1) / 2)
  const peak = windows.map((w) => w.activeRequestsByType.GetAddrInfoReqWrap ?? 0)
  let from = null
  for (let w = peak.length - 1; w >= 0; w--) {
    if (peak[w] <= limit || (w < peak.length - 1 && peak[w] > peak[w + 1])) break
    from = w
  }
  return from === null || from === peak.length - 1 ? null : from * p.windowS
}

const ratio = (a, b) => b === 0 ? (a === 0 ? 0 : Infinity) : Math.round((a / b) * 100) / 100

// What the incident benchmark promises, judged on this run's rows.
function targets (runs, p) {
  const out = []
  const row = (label) => runs.find((r) => r.label === label)
  const [floor, base, hand, ours] = LABELS.map(row)
  const moved = p.moveAtS !== null
  if (ours && floor) {
    out.push({ name: "io-hygiene's worst window p99 <= 2x floor's", holds: ours.worstWindowP99Ms <= 2 * floor.worstWindowP99Ms, measured: `${ours.worstWindowP99Ms} ms vs ${floor.worstWindowP99Ms} ms (${ratio(ours.worstWindowP99Ms, floor.worstWindowP99Ms)}x)` })
  }
  if (ours && hand) {
    out.push({ name: "io-hygiene's worst window p99 <= hand-fixed's", holds: ours.worstWindowP99Ms <= hand.worstWindowP99Ms, measured: `${ours.worstWindowP99Ms} ms vs ${hand.worstWindowP99Ms} ms (${ratio(ours.worstWindowP99Ms, hand.worstWindowP99Ms)}x)` })
  }
  if (ours && base) {
    out.push({ name: "baseline's worst window p99 >= 10x io-hygiene's (the incident reproduced)", holds: base.worstWindowP99Ms >= 10 * ours.worstWindowP99Ms, measured: `${base.worstWindowP99Ms} ms vs ${ours.worstWindowP99Ms} ms (${ratio(base.worstWindowP99Ms, ours.worstWindowP99Ms)}x)` })
  }
  if (ours && !moved) {
    out.push({ name: 'io-hygiene: no errors', holds: ours.errors === 0, measured: `${ours.errors} of ${ours.requests}` })
    out.push({
      name: "io-hygiene: every request's StatsD increment and Kafka message delivered",
      holds: ours.statsdDelivered === ours.requests && ours.kafkaDelivered === ours.requests,
      measured: `StatsD ${ours.statsdDelivered}, Kafka ${ours.kafkaDelivered} of ${ours.requests}`,
    })
  }
  if (ours && moved) {
    const worth = p.rate * p.ttlS
    out.push({
      name: 'io-hygiene: no errors but upstream errors after the move',
      holds: ours.errors === ours.upstreamErrorsAfterMove,
      measured: `${ours.errors} of ${ours.requests}, ${ours.upstreamErrorsAfterMove} of them the upstream's after the move`,
    })
    if (hand) {
      out.push({
        name: "io-hygiene: upstream errors after the move no more than hand-fixed's (Node's fetch, which resolves each new connection)",
        holds: ours.upstreamErrorsAfterMove <= hand.upstreamErrorsAfterMove,
        measured: `${ours.upstreamErrorsAfterMove} vs ${hand.upstreamErrorsAfterMove}`,
      })
    }
    out.push({
      name: "io-hygiene: every request's Kafka message delivered, and every StatsD increment but those sent to the old address after the move",
      holds: ours.kafkaDelivered === ours.requests && ours.statsdLostAfterMove === ours.statsdAfterMoveOld,
      measured: `Kafka ${ours.kafkaDelivered} of ${ours.requests}; StatsD ${ours.statsdDelivered} delivered, ${ours.statsdLostAfterMove} lost, ${ours.statsdAfterMoveOld} seen at the old address`,
    })
    out.push({
      name: 'io-hygiene follows the moved endpoint within one TTL + 1 s',
      holds: ours.followedAfterS !== null && ours.followedAfterS <= p.ttlS + 1,
      measured: ours.followedAfterS === null ? `not followed (TTL ${p.ttlS} s)` : `${ours.followedAfterS} s after the DNS change (TTL ${p.ttlS} s, ${ratio(ours.followedAfterS, p.ttlS)}x)`,
    })
    out.push({
      name: "io-hygiene loses at most one TTL's worth of metrics after the move (rate x TTL)",
      holds: ours.statsdLostAfterMove <= worth,
      measured: `${ours.statsdLostAfterMove} of at most ${worth} (${ratio(ours.statsdLostAfterMove, worth)}x)`,
    })
  }
  if (ours) {
    out.push({ name: "io-hygiene: the monitor's GetAddrInfoReqWrap alert stays silent", holds: ours.alertAtS === null, measured: ours.alertAtS === null ? 'silent' : `fired at ${ours.alertAtS} s` })
  }
  if (base) {
    const worst = base.windows.findIndex((w) => w.p99Ms === base.worstWindowP99Ms)
    const worstAtS = worst * p.windowS
    out.push({
      name: "baseline: the monitor's GetAddrInfoReqWrap alert fires before the worst window",
      holds: base.alertAtS !== null && base.alertAtS <= worstAtS,
      measured: `${base.alertAtS === null ? 'silent' : `fired at ${base.alertAtS} s`}; worst window from ${worstAtS} s`,
    })
  }
  return out
}

// The incident's time line, in words, for the results page: when each
// label's lookups began to queue, when the monitor said so, and where the
// metrics went after the move.
function notes (runs, p) {
  const out = []
  for (const r of runs) {
    if (r.lookupQueueFromS !== null || r.alertAtS !== null) {
      out.push(`${r.label}: lookups queue from ${r.lookupQueueFromS === null ? '-' : `the window at ${r.lookupQueueFromS} s`}; ` +
        `the monitor's GetAddrInfoReqWrap alert ${r.alertAtS === null ? 'stays silent' : `fires at ${r.alertAtS} s`}`)
    }
  }
  if (p.moveAtS !== null) {
    for (const r of runs.filter((r) => r.label !== 'floor')) {
      out.push(`${r.label} after the move at ${p.moveAtS} s: ${r.statsdLostAfterMove} metrics lost, ${r.statsdAfterMoveOld} of them sent to the old address, ` +
        `${r.followedAfterS === null ? 'the new address not followed in the run' : `the old address used ${r.followedAfterS} s more`}, ` +
        `${r.upstreamErrorsAfterMove} upstream errors`)
    }
  }
  return out
}

// One per-window field of each label (the p99 by default), for the
// readable output (--json has them in each label's `windows`).
function windowTable (runs, p, field = 'p99Ms', title = 'p99 (ms) by window end') {
  const ends = Array.from({ length: Math.max(0, ...runs.map((r) => r.windows.length)) }, (_, w) => `${Math.min(p.durationS, (w + 1) * p.windowS)} s`)
  const rows = [[title, ...ends], ...runs.map((r) => [r.label, ...r.windows.map((w) => w[field].toLocaleString('en-US'))])]
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => String(row[i] ?? '').length)))
  const line = (row) => '| ' + widths.map((w, i) => String(row[i] ?? '').padEnd(w)).join(' | ') + ' |'
  return [line(rows[0]), '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|', ...rows.slice(1).map(line)].join('\n') + '\n\n'
}

// The pictures of the incident, as data: bench/markdown.js draws them.
function charts (runs, p) {
  const base = runs.find((r) => r.label === 'baseline')
  const count = Math.max(0, ...runs.map((r) => r.windows.length))
  const x = Array.from({ length: count }, (_, w) => Math.min(p.durationS, (w + 1) * p.windowS))
  const xLabel = 'seconds into the run (end of window)'
  const out = [{
    title: `p99 latency per ${p.windowS} s window (ms)`,
    xLabel,
    yLabel: 'p99 (ms)',
    x,
    series: runs.map((r) => ({ name: r.label, color: COLORS[r.label], values: r.windows.map((w) => w.p99Ms) })),
  }]
  // The same without the baseline, whose seconds flatten the others' lines.
  const rest = runs.filter((r) => r.label !== 'baseline')
  if (base && rest.length > 0) {
    out.push({ ...out[0], title: `p99 latency per ${p.windowS} s window without the baseline (ms)`, series: out[0].series.filter((s) => s.name !== 'baseline') })
  }
  if (base) {
    const totals = {}
    for (const w of base.windows) for (const [type, n] of Object.entries(w.activeRequestsByType)) totals[type] = (totals[type] ?? 0) + n
    const types = Object.keys(totals).sort((a, b) => totals[b] - totals[a]).slice(0, 4)
    out.push({
      title: `baseline: active requests by type, the most in each ${p.windowS} s window`,
      xLabel,
      yLabel: 'active requests',
      x,
      series: types.map((type) => ({ name: type, values: base.windows.map((w) => w.activeRequestsByType[type] ?? 0) })),
    })
  }
  // Where the metrics went once the endpoint moved: those sent to the old
  // address after its receiver went away are lost. The floor sends none.
  const senders = runs.filter((r) => r.label !== 'floor')
  if (p.moveAtS !== null && senders.length > 0) {
    out.push({
      title: `StatsD metrics lost per ${p.windowS} s window: sent to the old address after the move at ${p.moveAtS} s (TTL ${p.ttlS} s)`,
      xLabel,
      yLabel: 'metrics lost',
      x,
      series: senders.map((r) => ({ name: r.label, color: COLORS[r.label], values: r.windows.map((w) => w.statsdLost) })),
    })
  }
  return out
}

module.exports = { LABELS, summarize, targets, notes, windowTable, charts }
