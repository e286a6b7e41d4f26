'use strict'

const { series } = require('../../metrics/registry')
const { Histogram, BUCKETS, upperBoundMs } = require('../../metrics/histogram')
const { ERR_IO_HYGIENE_MISSING_PEER } = require('../../core/errors')
const { performance } = require('node:perf_hooks')

// The monitor in an OpenTelemetry MeterProvider. Observable instruments read
// the monitor's latest sample when the SDK collects: a collection costs a
// copy, never a sample, and reports nothing before the first sample. Names
// follow the semantic conventions where one exists (nodejs.eventloop.*,
// process.memory.usage); the rest are io-hygiene's own, under io_hygiene.*.
// The user's meter and providers are duck-typed: @opentelemetry/api is
// loaded only for `otel: true`, to find the global meter provider.
const SCOPE = 'io-hygiene'

// Histogram boundaries in seconds: 2^k µs from 1 µs to 2^26 µs (67 s), then
// +Inf, as the prom-client output's buckets.
const LAST_BUCKET = 27
const BOUNDARIES = Array.from({ length: LAST_BUCKET }, (_, i) => upperBoundMs(i) / 1000)

// An alert's severity as a log record: WARN (SeverityNumber.WARN).
const WARN = 13
// The SDK's enums, as numbers and strings: the SDK is never loaded here.
const VALUE_TYPE_DOUBLE = 1 // ValueType.DOUBLE
const CUMULATIVE = 1 // AggregationTemporality.CUMULATIVE
const HISTOGRAM_POINT = 0 // DataPointType.HISTOGRAM

function api (where) {
  try {
    return require('@opentelemetry/api')
  } catch (cause) {
    throw new ERR_IO_HYGIENE_MISSING_PEER(where, '@opentelemetry/api', { cause })
  }
}

function version () {
  return require('../../../package.json').version
}

// Where the instruments go: the user's meter, a meter of the user's provider,
// or (`otel: true`) of whichever provider is global when a sample is taken,
// so that `-r io-hygiene/register` may load before the SDK is set up.
function meterSource ({ meter, meterProvider }) {
  if (meter !== null) return () => meter
  if (meterProvider !== null) {
    const mine = meterProvider.getMeter(SCOPE, version())
    return () => mine
  }
  const { metrics } = api('createMonitor({ otel: true })')
  let provider = null
  let mine = null
  return () => {
    const now = metrics.getMeterProvider()
    if (now !== provider) {
      provider = now
      mine = now.getMeter(SCOPE, version())
    }
    return mine
  }
}

class OtelOutput {
  #source
  #latest
  #totals
  #meter = null
  #observables = []
  #callback = null
  #histograms = new Map() // kind -> the meter's Histogram instrument
  #replayed = new Map() // registry Histogram -> copy of what was recorded into the meter
  #requestTypes = new Set()
  #handleTypes = new Set()

  #record

  constructor (source, latest, totals, record) {
    this.#source = source
    this.#record = record
    this.#latest = latest
    this.#totals = totals
    this.#attach(source())
  }

  #attach (meter) {
    this.#meter = meter
    this.#histograms.clear()
    // A new meter has recorded nothing: its histograms start from the totals.
    this.#replayed.clear()
    const gauge = (name, description, unit) => meter.createObservableGauge(name, { description, unit })
    const upDown = (name, description, unit) => meter.createObservableUpDownCounter(name, { description, unit })
    const counter = (name, description, unit) => meter.createObservableCounter(name, { description, unit })
    const i = {
      requests: upDown('io_hygiene.active_requests', 'libuv requests in flight, by type (process.getActiveResourcesInfo)', '{request}'),
      handles: upDown('io_hygiene.active_handles', 'ref\'d libuv handles and timers, by type (process.getActiveResourcesInfo)', '{handle}'),
      delayP50: gauge('nodejs.eventloop.delay.p50', 'event-loop delay, median of the last sample\'s window', 's'),
      delayP99: gauge('nodejs.eventloop.delay.p99', 'event-loop delay, 99th percentile of the last sample\'s window', 's'),
      delayMax: gauge('nodejs.eventloop.delay.max', 'event-loop delay, maximum of the last sample\'s window', 's'),
      elu: gauge('nodejs.eventloop.utilization', 'event-loop utilisation over the last sample\'s window', '1'),
      rss: upDown('process.memory.usage', 'resident set size', 'By'),
      heapUsed: upDown('io_hygiene.heap.used', 'V8 heap used, all spaces', 'By'),
      heapTotal: upDown('io_hygiene.heap.total', 'V8 heap allocated, all spaces', 'By'),
      gcPause: counter('io_hygiene.gc.pause.time', 'time spent in GC pauses', 's'),
      gcRuns: counter('io_hygiene.gc.collections', 'garbage collections', '{collection}'),
      cost: counter('io_hygiene.monitor.cpu.time', 'main-thread CPU the monitor spent sampling', 's'),
    }
    this.#observables = Object.values(i)
    this.#callback = (result) => {
      const s = this.#latest()
      if (s === null) return
      this.#byType(result, i.requests, s.requestsByType, this.#requestTypes)
      this.#byType(result, i.handles, s.handlesByType, this.#handleTypes)
      result.observe(i.delayP50, s.delayP50Ms / 1000)
      result.observe(i.delayP99, s.delayP99Ms / 1000)
      result.observe(i.delayMax, s.delayMaxMs / 1000)
      result.observe(i.elu, s.elu)
      result.observe(i.rss, s.rssBytes)
      result.observe(i.heapUsed, s.heapUsedBytes)
      result.observe(i.heapTotal, s.heapTotalBytes)
      const t = this.#totals()
      result.observe(i.gcPause, t.gcPauseMs / 1000)
      result.observe(i.gcRuns, t.gcCount)
      result.observe(i.cost, t.costUs / 1e6)
    }
    meter.addBatchObservableCallback(this.#callback, this.#observables)
  }

  // A type seen once is reported as 0 when it is gone, so that a series
  // falls to 0 instead of holding its last value.
  #byType (result, instrument, counts, seen) {
    for (const type in counts) seen.add(type)
    for (const type of seen) result.observe(instrument, counts[type] ?? 0, { type })
  }

  #detach () {
    this.#meter.removeBatchObservableCallback(this.#callback, this.#observables)
  }

  // After each sample, on the monitor's timer: follows a new global provider,
  // and records what the operation histograms gained since the last call.
  sync () {
    const meter = this.#source()
    if (meter !== this.#meter) {
      this.#detach()
      this.#attach(meter)
    }
    if (!this.#record) return
    for (const { kind, labels, histogram } of series()) {
      if (histogram.count === 0) continue
      let done = this.#replayed.get(histogram)
      if (done === undefined) {
        done = new Histogram()
        this.#replayed.set(histogram, done)
      }
      if (done.count === histogram.count) continue
      const gained = histogram.since(done)
      done.merge(gained)
      replay(this.#instrument(kind), gained, labels)
    }
  }

  #instrument (kind) {
    let h = this.#histograms.get(kind)
    if (h === undefined) {
      h = this.#meter.createHistogram(`io_hygiene.${kind}.duration`, {
        description: `${kind} latency (power-of-two buckets)`,
        unit: 's',
        advice: { explicitBucketBoundaries: BOUNDARIES },
      })
      this.#histograms.set(kind, h)
    }
    return h
  }

  undo () {
    this.#detach()
  }
}

// The OpenTelemetry API records values one by one, and the registry keeps
// bucket counts: each count is recorded as a value inside its bucket, at
// one fraction of every bucket's width chosen so that the values add up to
// the recorded sum. Counts land in the same buckets (the fraction stays
// strictly inside: OpenTelemetry's upper bounds are inclusive, ours not),
// and count and sum are exact; min and max are within their buckets.
function replay (instrument, gained, attributes) {
  let low = 0
  let width = 0
  for (let i = 0; i < BUCKETS; i++) {
    const n = gained.buckets[i]
    if (n === 0) continue
    low += n * lowerS(i)
    width += n * (upperS(i) - lowerS(i))
  }
  const fraction = Math.min(Math.max((gained.sumMs / 1000 - low) / width, 1e-6), 1 - 1e-6)
  for (let i = 0; i < BUCKETS; i++) {
    const n = gained.buckets[i]
    if (n === 0) continue
    const value = lowerS(i) + fraction * (upperS(i) - lowerS(i))
    for (let k = 0; k < n; k++) instrument.record(value, attributes)
  }
}

// Bucket i in seconds: [0, 1 µs), then [2^(i-1), 2^i) µs; the last, open
// above, is given the width of a doubling like the others.
function lowerS (i) {
  return i === 0 ? 0 : 2 ** (i - 1) / 1e6
}

function upperS (i) {
  return 2 ** i / 1e6
}

// Alerts as log records, when a logger provider is given.
function alertLogger (loggerProvider) {
  const logger = loggerProvider.getLogger(SCOPE, version())
  return (alert) => {
    const attributes = {
      'io_hygiene.condition': alert.name,
      'io_hygiene.metric': alert.metric,
      'io_hygiene.value': alert.value,
      'io_hygiene.threshold': alert.threshold,
      'io_hygiene.samples': alert.samples,
    }
    for (const [key, v] of [['io_hygiene.fix', alert.fix], ['io_hygiene.profile', alert.profile], ['io_hygiene.heap_snapshot', alert.heapSnapshot]]) {
      if (v !== null) attributes[key] = v
    }
    logger.emit({
      eventName: 'io_hygiene.monitor.alert',
      timestamp: alert.timestamp,
      severityNumber: WARN,
      severityText: 'WARN',
      body: `io-hygiene monitor: ${alert.name} (${alert.metric} ${alert.value} ${alert.op} ${alert.threshold})`,
      attributes,
    })
  }
}

// The output for the monitor's resolved options (one of meter, meterProvider, otel).
function createOtelOutput (o, latest, totals) {
  return new OtelOutput(meterSource(o), latest, totals, o.otelHistograms)
}

// The operation histograms as an OpenTelemetry MetricProducer, for a
// MetricReader's `metricProducers`: each collection copies the registry's
// buckets, so its cost does not grow with the rate of operations, as the
// replay through a meter does. Cumulative since the process started; the
// same names, attributes and buckets as the monitor's meter histograms.
function createOtelProducer () {
  const start = hrTime(performance.timeOrigin)
  return {
    collect () {
      const byKind = new Map()
      for (const { kind, labels, histogram } of series()) {
        if (histogram.count === 0) continue
        const counts = new Array(LAST_BUCKET + 1).fill(0)
        for (let i = 0; i < BUCKETS; i++) counts[Math.min(i, LAST_BUCKET)] += histogram.buckets[i]
        let points = byKind.get(kind)
        if (points === undefined) byKind.set(kind, points = [])
        points.push({
          startTime: start,
          endTime: hrTime(Date.now()),
          attributes: labels,
          value: { buckets: { boundaries: BOUNDARIES, counts }, count: histogram.count, sum: histogram.sumMs / 1000, max: histogram.maxMs / 1000 },
        })
      }
      const metrics = []
      for (const [kind, dataPoints] of byKind) {
        metrics.push({
          descriptor: { name: `io_hygiene.${kind}.duration`, description: `${kind} latency (power-of-two buckets)`, unit: 's', valueType: VALUE_TYPE_DOUBLE, type: 'HISTOGRAM', advice: {} },
          aggregationTemporality: CUMULATIVE,
          dataPointType: HISTOGRAM_POINT,
          dataPoints,
        })
      }
      // The reader keeps its own resource: this one is never exported.
      const resource = { attributes: {} }
      return Promise.resolve({ resourceMetrics: { resource, scopeMetrics: [{ scope: { name: SCOPE, version: version() }, metrics }] }, errors: [] })
    },
  }
}

// Milliseconds since the epoch as OpenTelemetry's [seconds, nanoseconds].
function hrTime (ms) {
  const seconds = Math.floor(ms / 1000)
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)]
}

module.exports = { createOtelOutput, createOtelProducer, alertLogger, BOUNDARIES }
