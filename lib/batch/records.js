'use strict'

const { Fifo } = require('../core/fifo')

const WAITING = 0 // pushed while the queue was full, not admitted yet
const QUEUED = 1
const BATCHED = 2 // in a batch in flight or waiting to retry
const DONE = 3

// new Promise(capture) hands over its resolvers without a closure per call.
let capturedResolve
let capturedReject
function capture (resolve, reject) {
  capturedResolve = resolve
  capturedReject = reject
}

// The one record push() allocates next to the caller's promise.
class Pending {
  constructor (item, bytes, key, seq, at) {
    this.item = item
    this.state = WAITING
    this.unit = null // on the first of pushAll()'s waiting items: { items, bytes } admitted together
    this.fate = null // the sink's settling of a push(): see createBatcher()
    this.pushed(bytes, key, seq, at)
  }

  // What push() knows of it: its size, group and place, the resolvers of the
  // promise made just before, and when (`at`: its deadline and its linger
  // count from here).
  pushed (bytes, key, seq, at) {
    this.bytes = bytes
    this.key = key
    this.seq = seq
    this.resolve = capturedResolve
    this.reject = capturedReject
    this.at = at
  }
}

// push()'s record of `item`: a new Pending, or the item itself when it is
// one (a sink's own record class extends Pending: one object per push, not
// two).
function recordOf (item, bytes, key, seq, at) {
  if (!(item instanceof Pending)) return new Pending(item, bytes, key, seq, at)
  item.pushed(bytes, key, seq, at)
  return item
}

// A push's promise settled as `how(item, value)` says: resolved with what it
// returns, rejected with what it throws.
function settleAs (rec, how, value) {
  let out
  try {
    out = how(rec.item, value)
  } catch (error) {
    rec.reject(error)
    return
  }
  rec.resolve(out)
}

class Group {
  constructor (key) {
    this.key = key
    this.queue = new Fifo()
    this.bytes = 0
    this.batch = null // at most one: this is what keeps the group's order
    // A parking batcher's batches waiting out a backoff, set aside so that
    // the queue goes on (oldest first): null when none.
    this.parked = null
    this.lastError = undefined // of its last send, the cause when its items expire
    this.dueAt = Infinity // when something of it is next due (linger, retry, deadline)
    this.heapIndex = -1 // its place in the batcher's wake-up heap, -1 when not in it
    this.dirty = false // changed since the last pump: look at it in the next one
    this.ready = false // in the line of groups with a batch to send
    this.removed = false
  }

  // Takes the queued records past their delivery deadline (the oldest, a
  // prefix), and the parked ones. Null when there are none.
  takeExpired (now, timeoutMs) {
    const queue = this.queue
    let expired = null
    while (queue.length > 0 && queue.peek().at + timeoutMs <= now) {
      const rec = queue.shift()
      this.bytes -= rec.bytes
      if (expired === null) expired = []
      expired.push(rec)
    }
    return this.parked === null ? expired : this.#takeExpiredParked(now, timeoutMs, expired)
  }

  // Takes every queued record (a close() that ran out of time).
  takeAll () {
    const all = []
    while (this.queue.length > 0) all.push(this.queue.shift())
    this.bytes = 0
    return all
  }

  // Sets the batch aside until its retryAt, in the order of its first push.
  park (batch) {
    this.batch = null
    const parked = (this.parked ??= [])
    let i = parked.length
    while (i > 0 && parked[i - 1].records[0].seq > batch.records[0].seq) i--
    parked.splice(i, 0, batch)
  }

  // The oldest parked batch whose backoff has run out, taken back as the
  // group's batch; null when none.
  unpark (now) {
    const parked = this.parked
    if (parked === null) return null
    for (let i = 0; i < parked.length; i++) {
      if (parked[i].retryAt > now) continue
      this.batch = parked[i]
      if (parked.length === 1) this.parked = null
      else parked.splice(i, 1)
      return this.batch
    }
    return null
  }

  // Whether a parked batch's backoff has run out.
  parkedReady (now) {
    if (this.parked === null) return false
    for (const batch of this.parked) if (batch.retryAt <= now) return true
    return false
  }

  // When a parked batch (there is one) is next due later: a retry, or else
  // a deadline.
  parkedDueAt (now) {
    let next = Infinity
    for (const batch of this.parked) next = Math.min(next, batch.retryAt > now ? batch.retryAt : Infinity, batch.deadline)
    return next
  }

  // Adds the parked records past their deadline, dropping emptied batches.
  #takeExpiredParked (now, timeoutMs, expired) {
    let emptied = false
    for (const batch of this.parked) {
      if (batch.deadline > now) continue
      for (const rec of batch.dropExpired(now, timeoutMs)) (expired ??= []).push(rec)
      if (batch.records.length === 0) emptied = true
    }
    if (emptied) this.parked = this.parked.filter((batch) => batch.records.length > 0)
    if (this.parked.length === 0) this.parked = null
    return expired
  }

  // Cuts the next batch off the queue. Every item fits in a batch on its
  // own (push() checks), so the first one always goes.
  cut (maxItems, maxBytes, deliveryTimeoutMs) {
    const queue = this.queue
    const records = []
    let bytes = 0
    while (queue.length > 0 && records.length < maxItems && bytes + queue.peek().bytes <= maxBytes) {
      const rec = queue.shift()
      rec.state = BATCHED
      records.push(rec)
      bytes += rec.bytes
    }
    this.bytes -= bytes
    this.batch = new Batch(records, bytes, deliveryTimeoutMs, this)
    return this.batch
  }
}

class Batch {
  constructor (records, bytes, deliveryTimeoutMs, group) {
    this.group = group
    this.records = records
    this.bytes = bytes
    this.attempt = 0
    this.inFlight = false
    this.retryAt = 0
    this.held = false // waits for its sink's wake(), not a backoff
    this.deadline = records[0].at + deliveryTimeoutMs
  }

  // Returns the records past their deadline. One in flight keeps its
  // records (the request is on its way); otherwise the rest are the batch.
  dropExpired (now, timeoutMs) {
    const live = []
    const expired = []
    let bytes = 0
    for (const rec of this.records) {
      if (rec.state === DONE) continue
      if (rec.at + timeoutMs <= now) {
        expired.push(rec)
      } else {
        live.push(rec)
        bytes += rec.bytes
      }
    }
    if (!this.inFlight) {
      this.records = live
      this.bytes = bytes
    }
    if (live.length > 0) this.deadline = live[0].at + timeoutMs
    else if (this.inFlight) this.deadline = Infinity
    return expired
  }
}

// The clock as read at the first push of a synchronous run of pushes (the
// callers one settle released, a burst of requests): their deadlines count
// from then, a little early and never late, for one clock read per run.
class RunClock {
  #at = 0
  #fresh = false
  #stale = () => { this.#fresh = false }

  now () {
    if (this.#fresh) return this.#at
    this.#fresh = true
    queueMicrotask(this.#stale)
    this.#at = performance.now()
    return this.#at
  }
}

module.exports = { settleAs, WAITING, QUEUED, BATCHED, DONE, capture, Pending, recordOf, Group, Batch, RunClock }
