'use strict'

const { series } = require('../../metrics/registry')

// A createStatsd()/wrapStatsd() client's background(fn) (statsd/client-state.js):
// the monitor's samples are not work a shutdown waits for, and are not sent
// to a client that is closing.
const kBackground = Symbol.for('io-hygiene.statsd.background.v1')

// Gauges per sample and, per operation histogram, what it recorded in the
// window, through a createStatsd() client (hot-shots; it packs the lines into
// MTU-sized packets). StatsD names are dotted and lower case, units last.
class StatsdOutput {
  #client
  #prefix
  #previous = new Map() // histogram -> copy at the previous publish

  constructor (client, prefix) {
    this.#client = client
    this.#prefix = prefix
  }

  publish (sample) {
    const background = this.#client[kBackground]
    if (typeof background === 'function') background(() => this.#send(sample))
    else this.#send(sample)
  }

  #send (sample) {
    const c = this.#client
    const p = this.#prefix
    c.gauge(`${p}active_requests`, sample.requests)
    for (const [type, n] of Object.entries(sample.requestsByType)) c.gauge(`${p}active_requests.by_type`, n, { type })
    c.gauge(`${p}active_handles`, sample.handles)
    for (const [type, n] of Object.entries(sample.handlesByType)) c.gauge(`${p}active_handles.by_type`, n, { type })
    c.gauge(`${p}event_loop.delay.p50_ms`, sample.delayP50Ms)
    c.gauge(`${p}event_loop.delay.p99_ms`, sample.delayP99Ms)
    c.gauge(`${p}event_loop.delay.max_ms`, sample.delayMaxMs)
    c.gauge(`${p}event_loop.utilization`, sample.elu)
    c.gauge(`${p}heap.used_bytes`, sample.heapUsedBytes)
    c.gauge(`${p}heap.total_bytes`, sample.heapTotalBytes)
    c.gauge(`${p}rss_bytes`, sample.rssBytes)
    c.increment(`${p}gc.count`, sample.gcCount)
    c.increment(`${p}gc.pause_ms`, sample.gcPauseMs)
    c.gauge(`${p}monitor.cost_us`, sample.costUs)
    for (const { kind, labels, histogram } of series()) {
      const before = this.#previous.get(histogram)
      // Nothing recorded since the last publish: no copy, nothing to send.
      if (before !== undefined && before.count === histogram.count) continue
      const window = before === undefined ? histogram : histogram.since(before)
      this.#previous.set(histogram, histogram.copy())
      if (window.count === 0) continue
      c.increment(`${p}${kind}.count`, window.count, labels)
      c.gauge(`${p}${kind}.p50_ms`, window.percentile(50), labels)
      c.gauge(`${p}${kind}.p99_ms`, window.percentile(99), labels)
      c.gauge(`${p}${kind}.max_ms`, window.percentile(100), labels)
    }
  }
}

module.exports = { StatsdOutput }
