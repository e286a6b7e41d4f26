'use strict'

// What a batcher tells the monitor: send()'s round trip by outcome and each
// item's wait from push() to its first send (histograms got once, by the
// batcher's name), and its flushes and rejections on diagnostics channels.
const { channels } = require('../core/diagnostics')
const { histogram } = require('../metrics/registry')

class Report {
  #name
  #flushOk
  #flushError

  constructor (name) {
    this.#name = name
    this.#flushOk = histogram('batch.flush', { batcher: name, outcome: 'ok' })
    this.#flushError = histogram('batch.flush', { batcher: name, outcome: 'error' })
    this.queueWait = histogram('batch.queue_wait', { batcher: name })
  }

  flushed (batch, durationMs, error) {
    if (error === null) this.#flushOk.record(durationMs)
    else this.#flushError.record(durationMs)
    if (channels.batchFlush.hasSubscribers) {
      channels.batchFlush.publish({ name: this.#name, items: batch.records.length, bytes: batch.bytes, attempt: batch.attempt, durationMs, error })
    }
  }

  rejected (items, error, stage) {
    if (channels.batchReject.hasSubscribers) channels.batchReject.publish({ name: this.#name, items, error, stage })
  }
}

module.exports = { Report }
