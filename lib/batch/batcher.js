'use strict'

const { IndexedHeap } = require('../core/indexed-heap')
const { Fifo } = require('../core/fifo')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { resolve } = require('../core/options')
const {
  ERR_IO_HYGIENE_CLOSED,
  ERR_IO_HYGIENE_TIMEOUT,
  ERR_IO_HYGIENE_INVALID_RESULT,
} = require('../core/errors')
const { waitSpec, itemSizeError, deliveryTimeoutError, queueFullError, isRetriable, measure } = require('./options')
const { WAITING, QUEUED, BATCHED, DONE, capture, recordOf, settleAs, Group, RunClock } = require('./records')
const { DrainWaiters, WaitingLine } = require('./waiters')
const { drainHooks } = require('./drain-hooks')
const { takeRetries, nextTry } = require('./retry')
const { WakeTimer } = require('./wake-timer')
const { Report } = require('./report')

class Batcher {
  #options
  #what
  // A sink's own settling of each push() (not pushAll()): see createBatcher().
  #fate
  #park // a batch waiting to retry is set aside (createParkingBatcher())
  #groups = new Map()
  // So that nothing walks all groups: the groups touched since the last
  // pump, the line of those with a batch to send, the heap of wake-ups.
  #dirty = []
  #ready = new Fifo()
  #wake = new IndexedHeap()
  #waiting = new WaitingLine()
  #seq = 0
  #clock = new RunClock() // one clock read per synchronous run of pushes
  #lastGroup = null // pushes mostly repeat one group: skip the Map
  #flushUpTo = 0
  #held = 0 // admitted, not settled (queued or batched)
  #heldBytes = 0
  #batched = 0
  #batchesInFlight = 0
  #timer = new WakeTimer(() => this.#pump())
  #scheduled = false
  #closed = false
  #closing = null
  #disposed = false
  #drains = new DrainWaiters(() => this.#refTimer())
  #counters = {
    flushed: 0,
    rejected: 0,
    dropped: 0,
    retried: 0,
    flushes: 0,
    flushErrors: 0,
  }

  #report

  constructor (options, fate = null, park = false) {
    this.#options = options
    this.#fate = fate
    this.#park = park
    this.#what = `batcher "${options.name}"`
    this.#report = new Report(options.name)
    if (options.flushOnSignals) onShutdown(this, drainHooks(this, options.shutdownTimeoutMs, (timeoutMs) => this.close({ timeoutMs })))
  }

  get name () {
    return this.#options.name
  }

  get closed () {
    return this.#closed
  }

  push (item) {
    const o = this.#options
    if (this.#closed) return this.#dropOne(item, new ERR_IO_HYGIENE_CLOSED(this.#what))
    let bytes
    let key
    try {
      bytes = o.sizeOf(item)
      if (o.groupOf !== null) key = o.groupOf(item)
    } catch (err) {
      return this.#dropOne(item, err)
    }
    const invalid = itemSizeError(this.#what, o, bytes, 'push()')
    if (invalid !== null) return this.#dropOne(item, invalid)
    // Nobody overtakes a waiting push: that would break call order.
    const fits = this.#waiting.length === 0 && this.#hasRoom(1, bytes)
    if (!fits) {
      if (o.overflow === 'reject') return this.#dropOne(item, this.#queueFull('no room'))
      if (!this.#waiting.mayWait(1, bytes, o)) return this.#dropOne(item, this.#queueFull(this.#waiting.fullReason(o)))
    }
    const promise = new Promise(capture)
    const rec = recordOf(item, bytes, key, ++this.#seq, this.#clock.now())
    rec.fate = this.#fate
    if (fits) {
      this.#admit(rec)
    } else {
      this.#waiting.push(rec)
      if (this.#waiting.length === 1) this.#schedule()
    }
    return promise
  }

  // One caller's call, checked, refused and admitted as one: never partly
  // queued. With overflow "wait" it waits for room for all (one larger than
  // the queue streams through). One promise per item, as push() gives.
  pushAll (items) {
    const o = this.#options
    const n = items.length
    if (n <= 1 || this.#closed) return items.map((item) => this.push(item))
    let { sizes, keys, bytes, err } = measure(this.#what, o, items)
    const larger = n > o.maxQueuedItems || bytes > o.maxQueuedBytes
    if (err === null && larger && o.overflow === 'wait') return items.map((item) => this.push(item))
    const fits = !larger && this.#waiting.length === 0 && this.#hasRoom(n, bytes)
    if (err === null && !fits && o.overflow === 'reject') err = this.#queueFull(`no room for all ${n} items of one call`)
    if (err === null && !fits && !this.#waiting.mayWait(n, bytes, o)) err = this.#queueFull(this.#waiting.fullReason(o))
    if (err !== null) {
      const refused = this.#drop(err, n)
      return items.map(() => refused)
    }
    // One call time for all, so that they also expire together.
    const now = this.#clock.now()
    const records = new Array(n)
    const promises = new Array(n)
    for (let i = 0; i < n; i++) {
      promises[i] = new Promise(capture)
      records[i] = recordOf(items[i], sizes[i], keys[i], ++this.#seq, now)
    }
    if (fits) {
      for (const rec of records) this.#admit(rec)
      return promises
    }
    records[0].unit = { items: n, bytes }
    for (const rec of records) this.#waiting.push(rec)
    if (this.#waiting.length === n) this.#schedule()
    return promises
  }

  // Whether `count` more items of `bytes` in all stay within both bounds.
  #hasRoom (count, bytes) {
    return this.#held + count <= this.#options.maxQueuedItems && this.#heldBytes + bytes <= this.#options.maxQueuedBytes
  }

  flush (options) {
    let timeoutMs = null
    try {
      if (options !== undefined) timeoutMs = resolve(`${this.#what} flush()`, waitSpec, options).timeoutMs
    } catch (err) {
      return Promise.reject(err)
    }
    return this.#drain(timeoutMs, `${this.#what} flush()`, null)
  }

  // flush() with no waiter kept (a sink that flushes every idle burst).
  sendNow () {
    this.#flushUpTo = this.#seq
    if (this.#held === 0) return
    for (const group of this.#groups.values()) this.#touch(group)
    this.#schedule()
  }

  close (options) {
    if (this.#closing !== null) return this.#closing
    let timeoutMs
    try {
      timeoutMs = resolve(`${this.#what} close()`, waitSpec, options).timeoutMs
    } catch (err) {
      return Promise.reject(err)
    }
    this.#closed = true
    const what = `${this.#what} close()`
    this.#closing = this.#drain(timeoutMs, what, () => this.#rejectAll(what, timeoutMs))
      .finally(() => this.#dispose())
    return this.#closing
  }

  stats () {
    return {
      queued: this.#held - this.#batched,
      queuedBytes: this.#heldBytes,
      waiting: this.#waiting.length,
      inFlight: this.#batched,
      batchesInFlight: this.#batchesInFlight,
      ...this.#counters,
    }
  }

  // Admission: the record joins its group's queue. Only a push that makes
  // its group flushable (first item, or a cap just reached) wakes the pump.
  #admit (rec) {
    const o = this.#options
    rec.state = QUEUED
    let group = this.#lastGroup
    if (group === null || group.key !== rec.key || group.removed) {
      group = this.#groups.get(rec.key)
      if (group === undefined) {
        group = new Group(rec.key)
        this.#groups.set(rec.key, group)
      }
      this.#lastGroup = group
    }
    group.queue.push(rec)
    group.bytes += rec.bytes
    this.#held++
    this.#heldBytes += rec.bytes
    const length = group.queue.length
    if (length === 1 || length === o.maxBatchItems ||
      (group.bytes >= o.maxBatchBytes && group.bytes - rec.bytes < o.maxBatchBytes)) {
      this.#touch(group)
      this.#schedule()
    }
  }

  // The next pump looks at this group (and at no group nobody touched).
  #touch (group) {
    if (group.dirty) return
    group.dirty = true
    this.#dirty.push(group)
  }

  #schedule () {
    if (this.#scheduled) return
    this.#scheduled = true
    // A microtask, so that a burst of synchronous pushes (or the callers a
    // batch just resolved) joins one batch.
    queueMicrotask(this.#runPump)
  }

  #runPump = () => {
    this.#scheduled = false
    this.#pump()
  }

  // Everything later happens here: expire, admit, send, re-arm, looking only
  // at groups due (the heap) or touched: its cost follows the work done.
  #pump () {
    if (this.#disposed) return
    const o = this.#options
    const now = performance.now()
    const wake = this.#wake
    while (wake.size > 0 && wake.peek().dueAt <= now) {
      const group = wake.peek()
      wake.remove(group)
      this.#visit(group, now)
    }
    this.#expireWaiting(now)
    const waiting = this.#waiting
    while (waiting.length > 0) {
      const rec = waiting.peek()
      const count = rec.unit === null ? 1 : rec.unit.items
      if (!this.#hasRoom(count, rec.unit === null ? rec.bytes : rec.unit.bytes)) break
      for (let i = 0; i < count; i++) this.#admit(this.#waiting.take())
    }
    const dirty = this.#dirty
    // Visiting may touch no other group, so the list does not grow under us.
    for (let i = 0; i < dirty.length; i++) {
      dirty[i].dirty = false
      this.#visit(dirty[i], now)
    }
    dirty.length = 0
    const ready = this.#ready
    while (ready.length > 0 && this.#batchesInFlight < o.concurrency) {
      const group = ready.shift()
      group.ready = false
      // A group in the line stays sendable: only this loop sends, and a
      // group whose items all expired meanwhile was removed.
      if (group.removed) continue
      this.#send(group, group.batch ?? group.unpark(now) ?? this.#cut(group))
      this.#rewake(group, now)
    }
    this.#arm(now)
  }

  // Expires what is past its deadline, drops an empty group, lines up a
  // group with something to send, and sets its next wake-up.
  #visit (group, now) {
    if (group.removed) return
    if (group.batch !== null && group.batch.deadline <= now) this.#expireBatch(group, now)
    this.#expireQueue(group, now)
    const batch = group.batch
    if (batch === null && group.queue.length === 0 && group.parked === null) {
      this.#groups.delete(group.key)
      this.#wake.remove(group)
      group.removed = true
      return
    }
    const ready = batch !== null
      ? !batch.inFlight && batch.retryAt <= now
      : group.parkedReady(now) || (group.queue.length > 0 && this.#isDue(group, now))
    if (ready && !group.ready) {
      group.ready = true
      this.#ready.push(group)
    }
    this.#rewake(group, now)
  }

  // The group's next linger, retry or deadline. Work that waits only for a
  // free concurrency slot needs no wake-up: the end of a send pumps.
  #rewake (group, now) {
    const o = this.#options
    const batch = group.batch
    const head = group.queue.peek()
    let next = Infinity
    if (batch !== null) {
      next = batch.deadline
      if (!batch.inFlight && batch.retryAt > now && batch.retryAt < next) next = batch.retryAt
    } else if (head !== undefined && !this.#isDue(group, now)) {
      next = head.at + o.lingerMs
    }
    if (head !== undefined && head.at + o.deliveryTimeoutMs < next) next = head.at + o.deliveryTimeoutMs
    if (group.parked !== null) next = Math.min(next, group.parkedDueAt(now))
    if (next === Infinity) this.#wake.remove(group)
    else if (next !== group.dueAt) this.#wake.set(group, next)
  }

  #isDue (group, now) {
    const o = this.#options
    const head = group.queue.peek()
    return o.flushWhenIdle || head.seq <= this.#flushUpTo || now - head.at >= o.lingerMs ||
      group.queue.length >= o.maxBatchItems || group.bytes >= o.maxBatchBytes
  }

  #cut (group) {
    const o = this.#options
    const batch = group.cut(o.maxBatchItems, o.maxBatchBytes, o.deliveryTimeoutMs)
    this.#batched += batch.records.length
    return batch
  }

  #send (group, batch) {
    const records = batch.records
    const items = new Array(records.length)
    const started = performance.now()
    batch.attempt++
    if (batch.attempt === 1) {
      // `at` is the clock of the item's run of pushes (#now()): its wait,
      // from the clock reads the batcher makes anyway.
      const wait = this.#report.queueWait
      for (let i = 0; i < records.length; i++) {
        items[i] = records[i].item
        wait.record(started - records[i].at)
      }
    } else {
      for (let i = 0; i < records.length; i++) items[i] = records[i].item
    }
    batch.inFlight = true
    this.#batchesInFlight++
    let pending
    try {
      pending = this.#options.send(items, { group: group.key, attempt: batch.attempt }, this.#park ? batch : undefined)
    } catch (err) {
      pending = Promise.reject(err)
    }
    Promise.resolve(pending).then(
      (result) => this.#onSent(group, batch, started, true, result),
      (err) => this.#onSent(group, batch, started, false, err)
    )
  }

  #onSent (group, batch, started, ok, value) {
    const now = performance.now()
    const records = batch.records
    this.#batchesInFlight--
    batch.inFlight = false
    this.#counters.flushes++
    if (ok && value !== undefined && (!Array.isArray(value) || value.length !== records.length)) {
      ok = false
      value = new ERR_IO_HYGIENE_INVALID_RESULT(this.#what,
        `send() must resolve with undefined or an array of ${records.length} results, got ${Array.isArray(value) ? `an array of ${value.length}` : typeof value}`)
    }
    this.#report.flushed(batch, now - started, ok ? null : value)
    this.#touch(group)
    if (ok && value !== undefined && this.#retryPart(group, batch, now, value)) {
      this.#schedule()
      return
    }
    if (ok) {
      group.batch = null
      group.lastError = undefined
      // The next batch starts before this one's callers are settled: its
      // request is on the wire first, and their continuations (often their
      // next sends) run while it is at the server, not ahead of it. With one
      // batch in flight this overlap is most of the gap to a client that
      // keeps two requests in flight (bench/kafka.js).
      const inFlight = this.#batchesInFlight
      this.#pump()
      if (this.#batchesInFlight > inFlight) setImmediate(this.#settle, records, value)
      else this.#settle(records, value)
      return
    } else {
      this.#counters.flushErrors++
      group.lastError = value
      if (!isRetriable(this.#options, value)) {
        this.#rejectRecords(records, () => value, 'send')
        group.batch = null
      } else {
        this.#expireBatch(group, now)
        this.#backOff(group, batch, now)
      }
    }
    this.#schedule()
  }

  // Retry results for some items: the others settle now (true if any).
  #retryPart (group, batch, now, value) {
    const settled = takeRetries(group, batch, value)
    if (settled === null) return false
    this.#expireBatch(group, now)
    this.#backOff(group, batch, now, settled.until)
    if (settled.done.length > 0) this.#settle(settled.done, settled.results)
    return true
  }

  // A batch to send again waits as the group's batch (nothing pushed after it
  // goes first), or set aside while the queue goes on (parking).
  #backOff (group, batch, now, until = null) {
    if (group.batch === null) return
    if (nextTry(this.#options, batch, now, until)) this.#counters.retried++
    if (this.#park) group.park(batch)
  }

  // A batch its sink held back (send() is handed `batch`) may go now.
  wake (batch) {
    if (!batch.held || batch.inFlight || batch.group.removed) return
    batch.held = false
    batch.retryAt = 0
    this.#touch(batch.group)
    this.#schedule()
  }

  // Per record only what a caller sees: its promise resolved. The books,
  // and flush() or close() waiters, are kept per batch.
  #settle = (records, value) => {
    let flushed = 0
    let bytes = 0
    let skipped = 0 // expired in flight, so already counted: the oldest, a prefix
    for (let i = 0; i < records.length; i++) {
      const rec = records[i]
      if (rec.state === DONE) {
        skipped++
        continue
      }
      rec.state = DONE
      const result = value === undefined ? undefined : value[i]
      if (rec.fate === null) rec.resolve(result)
      else settleAs(rec, rec.fate.resolved, result)
      bytes += rec.bytes
      flushed++
    }
    this.#batched -= flushed
    this.#held -= flushed
    this.#heldBytes -= bytes
    this.#counters.flushed += flushed
    // After the callers, so that a waiter never resolves first.
    if (this.#drains.size > 0 && flushed > 0) this.#drains.settledPrefix(records, skipped)
    // Their room may admit pushes that wait for it.
    if (this.#waiting.length > 0) this.#schedule()
  }

  // Rejects what is past its deadline; a batch in flight stays.
  #expireBatch (group, now) {
    const o = this.#options
    const expired = group.batch.dropExpired(now, o.deliveryTimeoutMs)
    this.#rejectRecords(expired, () => deliveryTimeoutError(o.deliveryTimeoutMs, group.lastError), 'deadline')
    if (group.batch.records.length === 0 && !group.batch.inFlight) group.batch = null
  }

  #expireQueue (group, now) {
    const o = this.#options
    const expired = group.takeExpired(now, o.deliveryTimeoutMs)
    if (expired !== null) {
      const cause = group.lastError
      this.#rejectRecords(expired, () => deliveryTimeoutError(o.deliveryTimeoutMs, cause), 'deadline')
    }
  }

  // A wait for room ends at maxQueueWaitMs or the delivery deadline.
  #expireWaiting (now) {
    const o = this.#options
    const expired = this.#waiting.takeExpired(now, Math.min(o.maxQueueWaitMs, o.deliveryTimeoutMs))
    if (expired !== null) {
      const make = o.deliveryTimeoutMs <= o.maxQueueWaitMs
        ? () => deliveryTimeoutError(o.deliveryTimeoutMs, undefined)
        : () => this.#queueFull(`no room within maxQueueWaitMs (${o.maxQueueWaitMs} ms)`)
      this.#rejectRecords(expired, make, 'wait')
    }
  }

  #queueFull (why) {
    return queueFullError(this.#what, this.#held, this.#heldBytes, this.#options, why)
  }

  // A record leaves the books; flush() and close() waiters count it (after
  // its caller's promise is settled: a waiter never resolves first).
  #release (rec) {
    if (rec.state === BATCHED) this.#batched--
    if (rec.state !== WAITING) {
      this.#held--
      this.#heldBytes -= rec.bytes
    }
    rec.state = DONE
    if (this.#drains.size > 0) this.#drains.settledOne(rec.seq)
  }

  // Rejects each record not settled yet with its own error (callers may
  // decorate theirs); a non-retriable error of the sink is passed as is.
  #rejectRecords (records, makeError, stage) {
    let count = 0
    let first
    for (const rec of records) {
      if (rec.state === DONE) continue
      const err = makeError()
      if (rec.state === WAITING) this.#counters.dropped++
      else this.#counters.rejected++
      if (rec.fate === null) rec.reject(err)
      else settleAs(rec, rec.fate.rejected, err)
      this.#release(rec)
      first ??= err
      count++
    }
    if (count > 0) this.#report.rejected(count, first, stage)
  }

  // Refuses one push(), settled as the sink's fate says when it has one.
  #dropOne (item, err) {
    if (this.#fate === null) return this.#drop(err)
    this.#dropped(err, 1)
    try {
      return Promise.resolve(this.#fate.rejected(item, err))
    } catch (error) {
      return Promise.reject(error)
    }
  }

  // Refuses `count` pushes with one error (one promise for all of them).
  #drop (err, count = 1) {
    this.#dropped(err, count)
    return Promise.reject(err)
  }

  #dropped (err, count) {
    this.#counters.dropped += count
    this.#report.rejected(count, err, 'push')
  }

  // Resolves once everything pushed so far has settled.
  #drain (timeoutMs, what, onTimeout) {
    this.#flushUpTo = this.#seq
    const remaining = this.#held + this.#waiting.length
    if (remaining === 0) return Promise.resolve()
    // Every group is due now: the one place that looks at them all.
    for (const group of this.#groups.values()) this.#touch(group)
    this.#schedule()
    return this.#drains.add(this.#seq, remaining, timeoutMs, what, onTimeout)
  }

  // Ref'd while a caller waits behind the timer (see Timers in index.js).
  #refTimer () {
    this.#timer.ref(this.#drains.size > 0 || this.#batched > 0 || this.#waiting.length > 0)
  }

  #rejectAll (what, timeoutMs) {
    for (const group of this.#groups.values()) {
      const cause = group.lastError
      const make = () => cause === undefined
        ? new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs)
        : new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs, { cause })
      if (group.batch !== null) this.#rejectRecords(group.batch.records, make, 'close')
      for (const batch of group.parked ?? []) this.#rejectRecords(batch.records, make, 'close')
      this.#rejectRecords(group.takeAll(), make, 'close')
    }
    this.#rejectRecords(this.#waiting.takeAll(), () => new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs), 'close')
  }

  #dispose () {
    this.#disposed = true
    this.#timer.clear()
    this.#groups.clear()
    offShutdown(this)
  }

  // One timer: the earliest group wake-up, or end of an overflow wait.
  #arm (now) {
    let next = this.#wake.size > 0 ? this.#wake.peek().dueAt : Infinity
    if (this.#waiting.length > 0) {
      const o = this.#options
      next = Math.min(next, this.#waiting.peek().at + Math.min(o.maxQueueWaitMs, o.deliveryTimeoutMs))
    }
    if (next === Infinity) {
      this.#timer.clear()
      return
    }
    this.#timer.set(next, now)
    this.#refTimer()
  }
}

module.exports = { Batcher }
