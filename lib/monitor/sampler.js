'use strict'

const { monitorEventLoopDelay, performance, PerformanceObserver } = require('node:perf_hooks')
const { series } = require('../metrics/registry')
const { isRequest } = require('./resource-types')

// One window of the process's health per take(): resources by type now, and
// since the previous take() the event-loop delay, its utilisation and GC.
class Sampler {
  #delay
  #resolutionNs
  #elu = performance.eventLoopUtilization()
  #observer
  #gcCount = 0
  #gcPauseMs = 0
  #kinds = new Map() // resource name -> true if a request

  constructor ({ resolutionMs }) {
    this.#resolutionNs = resolutionMs * 1e6
    // The timer-based histogram on every line, Node 26's samplePerIteration
    // too (bench/monitor.js delay-sampling): that one records every loop
    // turn, a cost that grows with load, and its figures would mean another
    // thing on 26 than on 22 and 24 in one fleet's dashboards.
    this.#delay = monitorEventLoopDelay({ resolution: resolutionMs })
    this.#delay.enable()
    this.#observer = new PerformanceObserver((list) => {
      const entries = list.getEntries()
      this.#gcCount += entries.length
      for (let i = 0; i < entries.length; i++) this.#gcPauseMs += entries[i].duration
    })
    this.#observer.observe({ type: 'gc' })
  }

  // `lateMs`: how late the caller's own timer fired, which a loop blocked for
  // the whole window shows even when the delay histogram has not recorded it.
  take (lateMs = 0) {
    // The sample runs synchronously on the main thread: its wall time there
    // is its CPU (process.cpuUsage() would add the thread pool's work).
    const start = performance.now()
    const requestsByType = {}
    const handlesByType = {}
    let requests = 0
    let handles = 0
    // The names come in runs of one type (the request queue, then handles,
    // then timers): counting runs touches the object once per run, not per
    // name, which halves the cost at 10,000 resources.
    const names = process.getActiveResourcesInfo()
    const counts = {}
    let previous = null
    let run = 0
    for (let i = 0; i < names.length; i++) {
      const name = names[i]
      if (name === previous) {
        run++
        continue
      }
      if (previous !== null) counts[previous] = (counts[previous] ?? 0) + run
      previous = name
      run = 1
    }
    if (previous !== null) counts[previous] = (counts[previous] ?? 0) + run
    const kinds = this.#kinds
    for (const name in counts) {
      let request = kinds.get(name)
      if (request === undefined) {
        request = isRequest(name)
        kinds.set(name, request)
      }
      if (request) {
        requests += counts[name]
        requestsByType[name] = counts[name]
      } else {
        handles += counts[name]
        handlesByType[name] = counts[name]
      }
    }
    // monitorEventLoopDelay records the whole interval between its timer's
    // runs; the delay is what exceeds the resolution.
    const d = this.#delay
    const res = this.#resolutionNs
    // An empty histogram is skipped: percentile() then walks every bucket.
    const recorded = d.count !== 0
    const delayMs = (ns) => Math.max(0, ns - res) / 1e6
    const delayP50Ms = recorded ? delayMs(d.percentile(50)) : 0
    const delayP99Ms = recorded ? delayMs(d.percentile(99)) : 0
    const delayMaxMs = Math.max(recorded ? delayMs(d.max) : 0, lateMs)
    if (recorded) d.reset()
    const elu = performance.eventLoopUtilization()
    const utilization = performance.eventLoopUtilization(elu, this.#elu).utilization
    this.#elu = elu
    const memory = process.memoryUsage()
    const sample = {
      timestamp: Date.now(),
      requests,
      handles,
      requestsByType,
      handlesByType,
      delayP50Ms: round(Math.min(delayP50Ms, delayMaxMs)),
      delayP99Ms: round(Math.min(delayP99Ms, delayMaxMs)),
      delayMaxMs: round(delayMaxMs),
      elu: round(utilization, 4),
      heapUsedBytes: memory.heapUsed,
      heapTotalBytes: memory.heapTotal,
      rssBytes: memory.rss,
      gcCount: this.#gcCount,
      gcPauseMs: round(this.#gcPauseMs),
      histograms: recordedHistograms(),
      costUs: 0,
    }
    this.#gcCount = 0
    this.#gcPauseMs = 0
    sample.costUs = Math.round((performance.now() - start) * 1000)
    return sample
  }

  close () {
    this.#delay.disable()
    this.#observer.disconnect()
  }
}

// Every operation histogram that recorded something, since the process
// started (not per window: totals merge across samples and processes), as
// plain data Histogram.from() reads back.
function recordedHistograms () {
  const out = []
  for (const { kind, labels, histogram } of series()) {
    if (histogram.count !== 0) out.push({ kind, labels, ...histogram.toJSON() })
  }
  return out
}

function round (n, digits = 3) {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

module.exports = { Sampler }
