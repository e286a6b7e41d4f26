'use strict'

// A batch the sink failed, whole or in part: how long it waits before it
// goes again, and which of its items go (a sink's Retry results).
const { BATCHED, DONE } = require('./records')

// A sink's result for an item to send again (after the backoff, with the
// others of its batch that got one), while the rest of the batch settles:
// `error` is why, the cause of its deadline's rejection.
class Retry {
  constructor (error) {
    this.error = error
  }
}

function backoffMs (o, attempt) {
  const delay = Math.min(o.retryBackoffMs * 2 ** (attempt - 1), o.maxRetryBackoffMs)
  // Jitter, so that many producers do not retry in step.
  return delay * (0.8 + 0.2 * Math.random())
}

// A result of Retry for some items: those not settled yet stay the group's
// batch (the last one's error is the group's), the others are returned with
// their results, to settle now. Null when there is no Retry.
function takeRetries (group, batch, value) {
  let again = 0
  for (let i = 0; i < value.length; i++) if (value[i] instanceof Retry) again++
  if (again === 0) return null
  const records = batch.records
  const done = []
  const results = []
  const keep = []
  let bytes = 0
  for (let i = 0; i < records.length; i++) {
    const rec = records[i]
    if (!(value[i] instanceof Retry)) {
      done.push(rec)
      results.push(value[i])
    } else if (rec.state !== DONE) {
      keep.push(rec)
      bytes += rec.bytes
      // A Retry without a reason (held back, not sent) keeps the last one.
      if (value[i].error !== undefined) group.lastError = value[i].error
    }
  }
  batch.records = keep
  batch.bytes = bytes
  return { done, results }
}

// For a sink that keeps each item's order itself (wrapProducer(): the order
// of a partition's records), a batch waiting to retry does not hold back the
// group's queue: what is queued after it goes in the same request, behind
// its own items, up to the batch caps; and it goes while the batch's backoff
// runs, with the batch's own items `held`: the sink sends none of them, nor
// anything that must stay behind one of them (the Java producer's muted
// partition), and answers Retry for those. Returns how many were added.
function topUp (group, batch, o, now) {
  const records = batch.records
  batch.held = batch.retryAt > now ? records.length : 0
  batch.fresh = records.length
  const queue = group.queue
  let added = 0
  while (queue.length > 0 && records.length < o.maxBatchItems && batch.bytes + queue.peek().bytes <= o.maxBatchBytes) {
    const rec = queue.shift()
    rec.state = BATCHED
    records.push(rec)
    batch.bytes += rec.bytes
    group.bytes -= rec.bytes
    added++
  }
  return added
}

// Whether the group's next queued item fits in its batch waiting to retry.
function fits (group, batch, o) {
  const head = group.queue.peek()
  return head !== undefined && batch.records.length < o.maxBatchItems && batch.bytes + head.bytes <= o.maxBatchBytes
}

module.exports = { Retry, backoffMs, takeRetries, topUp, fits }
