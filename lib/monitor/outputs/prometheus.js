'use strict'

const { series } = require('../../metrics/registry')
const { ERR_IO_HYGIENE_ALREADY_REGISTERED } = require('../../core/errors')
const { BUCKETS, upperBoundMs } = require('../../metrics/histogram')

// Metrics registered into the user's prom-client Registry, read from the
// monitor's latest sample at scrape time: a scrape costs a copy, never a
// sample. Names follow Prometheus' conventions (base units, _seconds,
// _bytes, _total; the type in a bounded label). The objects have the shape
// Registry#registerMetric expects, so prom-client itself is never loaded.
const PREFIX = 'io_hygiene_'

// Histogram buckets: 2^k µs from 1 µs to 2^26 µs (67 s), then +Inf.
const LAST_BUCKET = 27

function gauge (name, help, values) {
  return metric(name, help, 'gauge', values)
}

function metric (name, help, type, values) {
  const full = PREFIX + name
  return {
    name: full,
    help,
    type,
    aggregator: 'sum',
    get: () => ({ name: full, help, type, aggregator: 'sum', values: values() }),
  }
}

const one = (value) => [{ value, labels: {} }]
const byType = (counts) => Object.entries(counts).map(([type, value]) => ({ value, labels: { type } }))

function histogramValues (kind) {
  const name = `${PREFIX}${kind.replaceAll('.', '_')}_seconds`
  const values = []
  for (const { kind: k, labels, histogram } of series()) {
    if (k !== kind) continue
    let cumulative = 0
    for (let i = 0; i < BUCKETS; i++) {
      cumulative += histogram.buckets[i]
      if (i < LAST_BUCKET) values.push({ metricName: `${name}_bucket`, value: cumulative, labels: { ...labels, le: upperBoundMs(i) / 1000 } })
    }
    values.push({ metricName: `${name}_bucket`, value: histogram.count, labels: { ...labels, le: '+Inf' } })
    values.push({ metricName: `${name}_sum`, value: histogram.sumMs / 1000, labels })
    values.push({ metricName: `${name}_count`, value: histogram.count, labels })
  }
  return values
}

// Registers the gauges, and a histogram per operation kind recorded so far
// or later (kinds are looked up at each scrape). Returns the undo.
function register (registry, latest, totals) {
  const s = latest
  const metrics = [
    gauge('active_requests', 'libuv requests in flight, by type (getActiveResourcesInfo)', () => byType(s().requestsByType)),
    gauge('active_handles', 'ref\'d libuv handles and timers, by type (getActiveResourcesInfo)', () => byType(s().handlesByType)),
    gauge('event_loop_delay_p50_seconds', 'event-loop delay, median of the last window', () => one(s().delayP50Ms / 1000)),
    gauge('event_loop_delay_p99_seconds', 'event-loop delay, 99th percentile of the last window', () => one(s().delayP99Ms / 1000)),
    gauge('event_loop_delay_max_seconds', 'event-loop delay, maximum of the last window', () => one(s().delayMaxMs / 1000)),
    gauge('event_loop_utilization_ratio', 'event-loop utilisation over the last window', () => one(s().elu)),
    gauge('heap_used_bytes', 'V8 heap used', () => one(s().heapUsedBytes)),
    gauge('heap_total_bytes', 'V8 heap allocated', () => one(s().heapTotalBytes)),
    gauge('resident_memory_bytes', 'resident set size', () => one(s().rssBytes)),
    metric('gc_pause_seconds_total', 'time spent in GC pauses', 'counter', () => one(totals().gcPauseMs / 1000)),
    metric('gc_runs_total', 'garbage collections', 'counter', () => one(totals().gcCount)),
    metric('monitor_cpu_seconds_total', 'CPU the monitor spent sampling', 'counter', () => one(totals().costUs / 1e6)),
    gauge('monitor_sample_cpu_seconds', 'CPU of the last sample', () => one(s().costUs / 1e6)),
  ]
  const histograms = new Map() // kind -> metric
  // One histogram metric per kind, registered when the kind first appears.
  const sync = () => {
    for (const { kind } of series()) {
      if (histograms.has(kind)) continue
      const m = metric(`${kind.replaceAll('.', '_')}_seconds`, `${kind} latency (power-of-two buckets)`, 'histogram', () => histogramValues(kind))
      histograms.set(kind, m)
      registry.registerMetric(m)
    }
  }
  // prom-client would throw its own uncoded error at the first duplicate,
  // after registering the metrics before it.
  const taken = metrics.find((m) => registry.getSingleMetric(m.name) !== undefined)
  if (taken !== undefined) {
    throw new ERR_IO_HYGIENE_ALREADY_REGISTERED('createMonitor()', `the prom-client registry already holds ${taken.name}: ` +
      'one monitor per registry. Close the monitor that registered it first, read that monitor ' +
      '(install({ monitor }) returns it as handle.monitor), or pass another Registry')
  }
  const undo = () => {
    for (const m of [...metrics, ...histograms.values()]) {
      if (registry.getSingleMetric(m.name) === m) registry.removeSingleMetric(m.name)
    }
  }
  // All or none: a registry that throws part way keeps none of ours.
  try {
    for (const m of metrics) registry.registerMetric(m)
    sync()
  } catch (err) {
    undo()
    throw err
  }
  return { sync, undo }
}

module.exports = { register }
