'use strict'

// A batch the sink failed, whole or in part: how long it waits before it
// goes again, and which of its items go (a sink's Retry results).
const { DONE } = require('./records')

// A sink's result for an item to send again (after the backoff, with the
// others of its batch that got one), while the rest of the batch settles:
// `error` is why, the cause of its deadline's rejection. `until`: held back
// by the sink, not failed (a parking batcher's sink: lib/kafka/lanes.js),
// sent again at that time (Infinity: when the sink wakes it) with no backoff.
class Retry {
  constructor (error, until) {
    this.error = error
    this.until = until
  }
}

function backoffMs (o, attempt) {
  const delay = Math.min(o.retryBackoffMs * 2 ** (attempt - 1), o.maxRetryBackoffMs)
  // Jitter, so that many producers do not retry in step.
  return delay * (0.8 + 0.2 * Math.random())
}

// A result of Retry for some items: those not settled yet stay the group's
// batch (the last one's error is the group's), the others are returned with
// their results, to settle now, and `until`, the earliest, when every Retry
// is a hold (else null). Null when there is no Retry.
function takeRetries (group, batch, value) {
  let again = 0
  for (let i = 0; i < value.length; i++) if (value[i] instanceof Retry) again++
  if (again === 0) return null
  const records = batch.records
  const done = []
  const results = []
  const keep = []
  let bytes = 0
  let until = Infinity
  for (let i = 0; i < records.length; i++) {
    const rec = records[i]
    if (!(value[i] instanceof Retry)) {
      done.push(rec)
      results.push(value[i])
    } else if (rec.state !== DONE) {
      keep.push(rec)
      bytes += rec.bytes
      // One held back, not sent (no reason), keeps the last one's.
      if (value[i].error !== undefined) group.lastError = value[i].error
      until = value[i].until === undefined || until === null ? null : Math.min(until, value[i].until)
    }
  }
  batch.records = keep
  batch.bytes = bytes
  return { done, results, until }
}

// When a batch to send again goes: after its backoff (true: a retry), or,
// held back by its sink, `until` then, with no attempt spent (false).
function nextTry (o, batch, now, until) {
  batch.held = until !== null
  if (until === null) {
    batch.retryAt = now + backoffMs(o, batch.attempt)
    return true
  }
  batch.attempt--
  batch.retryAt = until
  return false
}

module.exports = { Retry, backoffMs, takeRetries, nextTry }
