'use strict'

// The transport-agnostic batcher. Contract (lib/kafka.js and lib/statsd.js
// build on it; keep this comment true):
//
//   const b = createBatcher({ send, ...options })   // validates every option, throws coded errors
//
//   send(items, { group, attempt }) -> Promise<results[] | undefined>
//     The sink. `items` is a fresh array in push order; all share one `group`
//     (the value of groupOf(), or undefined). `attempt` starts at 1 and grows
//     on each retry of the same batch (a retry resends the same items, minus
//     any that expired, before anything pushed after them). Resolve with an
//     array (results[i] settles items[i]'s push) or with undefined (every push
//     resolves with undefined); anything else rejects the batch with
//     ERR_IO_HYGIENE_INVALID_RESULT. Throw/reject to fail the whole batch:
//     it is retried after a backoff while isRetriable(err) is true and the
//     item is younger than deliveryTimeoutMs; otherwise each push rejects with
//     `err` itself (not wrapped) or, past its deadline, with
//     ERR_IO_HYGIENE_DELIVERY_TIMEOUT whose `cause` is the last error.
//
//   b.push(item) -> Promise<result>
//     Never throws: bad input, a full queue, a closed batcher all reject at
//     once with a coded error (INVALID_ARGUMENT, ITEM_TOO_LARGE, QUEUE_FULL,
//     CLOSED) or with what sizeOf/groupOf threw. Every accepted push settles:
//     acknowledged, or rejected by the rules above, or by close()'s deadline
//     (ERR_IO_HYGIENE_TIMEOUT). deliveryTimeoutMs counts from the push()
//     call, as the Java producer's delivery.timeout.ms does: time spent
//     waiting for queue room, lingering, in flight and between retries all
//     count (the clock is read once per synchronous run of pushes, so a
//     deadline may come that much early, never late). A push still waiting for room, queued or in flight at its
//     deadline is rejected then, so no caller outlives deliveryTimeoutMs
//     (maxWaitMs, when shorter, ends a wait for room first); the sink's own
//     request timeout should be shorter, or the item may land after all.
//   b.pushAll(items) -> Promise<result>[]
//     push() for each, except that the items stand or fall together: one
//     that push() would refuse refuses all (each with the same error); with
//     overflow "reject" all are refused unless all fit, with "wait" they are
//     admitted together once all fit (or all expire together). A call larger
//     than the whole queue cannot fit: "reject" refuses it, "wait" streams it
//     through item by item.
//   b.flush({ timeoutMs }) -> Promise<void>
//     Sends everything pushed so far without lingering and resolves when all
//     of it has settled (each push reports its own outcome). On timeoutMs it
//     rejects with ERR_IO_HYGIENE_TIMEOUT and the items carry on.
//   b.close({ timeoutMs }) -> Promise<void>
//     Later pushes reject with ERR_IO_HYGIENE_CLOSED; everything held is
//     flushed. At timeoutMs whatever has not settled is rejected with
//     ERR_IO_HYGIENE_TIMEOUT and close() rejects with one too. Idempotent.
//   b.stats() -> counters (see stats()), b.closed, b.name
//
// Order: a group has at most one batch in flight or waiting to retry, so
// pushes of one group reach the sink in push order, also across retries.
// A batch's pushes settle after the next batch has been handed to the sink
// (one setImmediate later), so that request is on its way first.
// `concurrency` bounds batches in flight over all groups; above 1 it needs
// groupOf (otherwise there is one group and it would be ignored).
// Timers: one timer per batcher drives linger, retry backoff, item
// deadlines and overflow waits. It is ref'd while a caller waits behind it
// (a batch in flight or waiting to retry, a push waiting for room, a flush()
// or close()), so a script does not exit with a push unsettled; a linger
// alone is background work and leaves it unref'd (flushOnSignals sends what
// lingers when the loop runs dry). flush() and close() deadlines are ref'd.
const { channels } = require('../core/diagnostics')
const { histogram } = require('../metrics/registry')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { integer, timerMs, boolean, oneOf, func, string, nullable, resolve } = require('../core/options')
const {
  ERR_IO_HYGIENE_INVALID_OPTION,
  ERR_IO_HYGIENE_CONFLICTING_OPTIONS,
  ERR_IO_HYGIENE_INVALID_ARGUMENT,
  ERR_IO_HYGIENE_QUEUE_FULL,
  ERR_IO_HYGIENE_CLOSED,
  ERR_IO_HYGIENE_TIMEOUT,
  ERR_IO_HYGIENE_DELIVERY_TIMEOUT,
  ERR_IO_HYGIENE_ITEM_TOO_LARGE,
  ERR_IO_HYGIENE_INVALID_RESULT,
} = require('../core/errors')

// Upper bounds (ms) of the flush latency histogram; the last bucket is open.
const FLUSH_LATENCY_BUCKETS_MS = Object.freeze([1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, Infinity])

// Defaults, and why, are in the README's batch table; a test keeps the two equal.
const spec = {
  send: { default: null, check: nullable(func()) },
  name: { default: 'batch', check: string() },
  flushIntervalMs: { default: 5, check: timerMs(0) },
  maxBatchItems: { default: 500, check: integer(1) },
  maxBatchBytes: { default: 1_000_000, check: integer(1) },
  maxQueuedItems: { default: 100_000, check: integer(1) },
  maxQueuedBytes: { default: 33_554_432, check: integer(1) },
  overflow: { default: 'wait', check: oneOf('wait', 'reject') },
  maxWaitMs: { default: 60_000, check: timerMs(0) },
  maxWaitingItems: { default: 10_000, check: integer(0) },
  maxWaitingBytes: { default: 8_388_608, check: integer(0) },
  concurrency: { default: 1, check: integer(1, 1_000) },
  deliveryTimeoutMs: { default: 120_000, check: timerMs(1) },
  retryBackoffMs: { default: 100, check: timerMs(0) },
  maxRetryBackoffMs: { default: 1_000, check: timerMs(0) },
  flushWhenIdle: { default: true, check: boolean() },
  flushOnSignals: { default: false, check: boolean() },
  shutdownTimeoutMs: { default: 10_000, check: timerMs(0) },
  sizeOf: { default: sizeOfBytes, check: func() },
  groupOf: { default: null, check: nullable(func()) },
  isRetriable: { default: isRetriableFlag, check: func() },
}

const waitSpec = { timeoutMs: { default: null, check: nullable(timerMs(0)) } }

// Strings, Buffers and typed arrays measure themselves; anything else needs
// a sizeOf, or the byte caps would be fiction.
function sizeOfBytes (item) {
  if (typeof item === 'string') return Buffer.byteLength(item)
  if (ArrayBuffer.isView(item) || item instanceof ArrayBuffer) return item.byteLength
  throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('batcher.push()', 'the default sizeOf measures strings, Buffers and typed arrays; pass a sizeOf option for other items')
}

// kafkajs (and others) mark transient errors with `retriable: true`.
function isRetriableFlag (err) {
  return err !== null && typeof err === 'object' && err.retriable === true
}

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
    this.bytes = bytes
    this.key = key
    this.seq = seq
    this.resolve = capturedResolve
    this.reject = capturedReject
    this.state = WAITING
    this.at = at // when push() was called: its deadline and its linger count from here
    this.unit = null // on the first of pushAll()'s waiting items: { items, bytes } admitted together
  }
}

// An array with a moving head, so that taking a batch off the front is not
// O(queue length).
class Fifo {
  #items = []
  #head = 0

  get length () {
    return this.#items.length - this.#head
  }

  peek () {
    return this.#items[this.#head]
  }

  push (value) {
    this.#items.push(value)
  }

  shift () {
    const items = this.#items
    const value = items[this.#head]
    items[this.#head++] = undefined
    if (this.#head === items.length) {
      items.length = 0
      this.#head = 0
    } else if (this.#head >= 1024 && this.#head * 2 >= items.length) {
      this.#items = items.slice(this.#head)
      this.#head = 0
    }
    return value
  }
}

class Group {
  constructor (key) {
    this.key = key
    this.queue = new Fifo()
    this.bytes = 0
    this.batch = null // at most one: this is what keeps the group's order
    this.lastError = undefined // of its last send, the cause when its items expire
    this.wakeAt = Infinity // when something of it is next due (linger, retry, deadline)
    this.heapIndex = -1 // its place in the batcher's wake-up heap, -1 when not in it
    this.dirty = false // changed since the last pump: look at it in the next one
    this.ready = false // in the line of groups with a batch to send
    this.removed = false
  }
}

// Groups by wakeAt, each at most once (it knows its index), so that a
// timer tick finds what is due in O(log groups) and a group's wake-up can
// move either way without leaving stale entries behind.
class WakeHeap {
  #groups = []

  get size () {
    return this.#groups.length
  }

  peek () {
    return this.#groups[0]
  }

  // Puts `group` at `time`, or moves it there.
  set (group, time) {
    group.wakeAt = time
    if (group.heapIndex === -1) {
      group.heapIndex = this.#groups.length
      this.#groups.push(group)
    }
    this.#down(this.#up(group.heapIndex))
  }

  remove (group) {
    const i = group.heapIndex
    if (i === -1) return
    group.heapIndex = -1
    group.wakeAt = Infinity
    const last = this.#groups.pop()
    if (last === group) return
    this.#groups[i] = last
    last.heapIndex = i
    this.#down(this.#up(i))
  }

  #up (i) {
    const groups = this.#groups
    const group = groups[i]
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (groups[parent].wakeAt <= group.wakeAt) break
      groups[i] = groups[parent]
      groups[i].heapIndex = i
      i = parent
    }
    groups[i] = group
    group.heapIndex = i
    return i
  }

  #down (i) {
    const groups = this.#groups
    const n = groups.length
    const group = groups[i]
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && groups[child + 1].wakeAt < groups[child].wakeAt) child++
      if (groups[child].wakeAt >= group.wakeAt) break
      groups[i] = groups[child]
      groups[i].heapIndex = i
      i = child
    }
    groups[i] = group
    group.heapIndex = i
  }
}

class Batch {
  constructor (records, bytes, deliveryTimeoutMs) {
    this.records = records
    this.bytes = bytes
    this.attempt = 0
    this.inFlight = false
    this.retryAt = 0
    this.deadline = records[0].at + deliveryTimeoutMs
  }
}

class Batcher {
  #options
  #what
  #groups = new Map()
  // What keeps every send, settle and timer tick from walking all groups:
  // the groups touched since the last pump, the line of groups with a batch
  // to send (in the order they became ready: round robin), and the heap of
  // when each group is next due.
  #dirty = []
  #ready = new Fifo()
  #wake = new WakeHeap()
  #waiting = new Fifo()
  #waitingBytes = 0
  #seq = 0
  // The clock as read at the first push of a synchronous run of pushes (the
  // callers one settle released, a burst of requests): their deadlines count
  // from then, a little early and never late, for one clock read per run.
  #clock = 0
  #clockFresh = false
  #lastGroup = null // pushes mostly repeat one group: skip the Map
  #flushUpTo = 0
  #held = 0 // admitted, not settled (queued or batched)
  #heldBytes = 0
  #batched = 0
  #batchesInFlight = 0
  #timer = null
  #timerAt = Infinity
  #scheduled = false
  #closed = false
  #closing = null
  #disposed = false
  #waiters = []
  #counters = {
    flushed: 0,
    rejected: 0,
    dropped: 0,
    retried: 0,
    flushes: 0,
    flushErrors: 0,
  }

  #latency = new Array(FLUSH_LATENCY_BUCKETS_MS.length).fill(0)
  // The monitor's histograms of this batcher's name, got once: send()'s
  // round trip by outcome, and each item's wait from push() to its first send.
  #flushOk
  #flushError
  #queueWait

  constructor (options) {
    this.#options = options
    this.#what = `batcher "${options.name}"`
    this.#flushOk = histogram('batch.flush', { batcher: options.name, outcome: 'ok' })
    this.#flushError = histogram('batch.flush', { batcher: options.name, outcome: 'error' })
    this.#queueWait = histogram('batch.queue_wait', { batcher: options.name })
    if (options.flushOnSignals) {
      onShutdown(this, {
        close: () => this.close({ timeoutMs: options.shutdownTimeoutMs }),
        flush: () => this.flush(),
      })
    }
  }

  get name () {
    return this.#options.name
  }

  get closed () {
    return this.#closed
  }

  push (item) {
    const o = this.#options
    if (this.#closed) return this.#drop(new ERR_IO_HYGIENE_CLOSED(this.#what))
    let bytes
    let key
    try {
      bytes = o.sizeOf(item)
      if (o.groupOf !== null) key = o.groupOf(item)
    } catch (err) {
      return this.#drop(err)
    }
    const invalid = this.#sizeError(bytes, 'push()')
    if (invalid !== null) return this.#drop(invalid)
    // Nobody overtakes a waiting push: that would break call order.
    const fits = this.#waiting.length === 0 && this.#hasRoom(1, bytes)
    if (!fits) {
      if (o.overflow === 'reject') return this.#drop(this.#queueFull('no room'))
      if (!this.#mayWait(1, bytes)) return this.#drop(this.#waitFull())
    }
    const promise = new Promise(capture)
    const rec = new Pending(item, bytes, key, ++this.#seq, this.#now())
    if (fits) {
      this.#admit(rec)
    } else {
      this.#waiting.push(rec)
      this.#waitingBytes += bytes
      if (this.#waiting.length === 1) this.#schedule()
    }
    return promise
  }

  // Items that stand or fall together (one caller's call): checked as one,
  // refused as one, and admitted as one, so a call is never partly queued.
  // With overflow "wait" they wait for room for all of them (a call larger
  // than the whole queue can never have it: it streams through, item by
  // item). One promise per item, as push() gives.
  pushAll (items) {
    const o = this.#options
    const n = items.length
    if (n <= 1 || this.#closed) return items.map((item) => this.push(item))
    const sizes = new Array(n)
    const keys = new Array(n)
    let bytes = 0
    let err = null
    try {
      for (let i = 0; i < n && err === null; i++) {
        sizes[i] = o.sizeOf(items[i])
        if (o.groupOf !== null) keys[i] = o.groupOf(items[i])
        err = this.#sizeError(sizes[i], 'pushAll()')
        bytes += sizes[i]
      }
    } catch (thrown) {
      err = thrown
    }
    const larger = n > o.maxQueuedItems || bytes > o.maxQueuedBytes
    if (err === null && larger && o.overflow === 'wait') return items.map((item) => this.push(item))
    const fits = !larger && this.#waiting.length === 0 && this.#hasRoom(n, bytes)
    if (err === null && !fits && o.overflow === 'reject') err = this.#queueFull(`no room for all ${n} items of one call`)
    if (err === null && !fits && !this.#mayWait(n, bytes)) err = this.#waitFull()
    if (err !== null) {
      const refused = this.#drop(err, n)
      return items.map(() => refused)
    }
    // One call time for all, so that they also expire together.
    const now = this.#now()
    const records = new Array(n)
    const promises = new Array(n)
    for (let i = 0; i < n; i++) {
      promises[i] = new Promise(capture)
      records[i] = new Pending(items[i], sizes[i], keys[i], ++this.#seq, now)
    }
    if (fits) {
      for (const rec of records) this.#admit(rec)
      return promises
    }
    records[0].unit = { items: n, bytes }
    for (const rec of records) this.#waiting.push(rec)
    this.#waitingBytes += bytes
    if (this.#waiting.length === n) this.#schedule()
    return promises
  }

  #now () {
    if (this.#clockFresh) return this.#clock
    this.#clockFresh = true
    queueMicrotask(this.#staleClock)
    this.#clock = performance.now()
    return this.#clock
  }

  #staleClock = () => {
    this.#clockFresh = false
  }

  // Whether `count` more items of `bytes` in all stay within both bounds.
  #hasRoom (count, bytes) {
    return this.#held + count <= this.#options.maxQueuedItems && this.#heldBytes + bytes <= this.#options.maxQueuedBytes
  }

  // Whether `count` more pushes of `bytes` may wait for room: the waiting
  // line is bounded too, or a sink that stops answering lets it grow forever.
  #mayWait (count, bytes) {
    return this.#waiting.length + count <= this.#options.maxWaitingItems && this.#waitingBytes + bytes <= this.#options.maxWaitingBytes
  }

  #waitFull () {
    const o = this.#options
    return this.#queueFull(`and ${this.#waiting.length} pushes of ${this.#waitingBytes} bytes wait for room ` +
      `(maxWaitingItems ${o.maxWaitingItems}, maxWaitingBytes ${o.maxWaitingBytes})`)
  }

  #takeWaiting () {
    const rec = this.#waiting.shift()
    this.#waitingBytes -= rec.bytes
    return rec
  }

  #sizeError (bytes, method) {
    if (!Number.isSafeInteger(bytes) || bytes < 0) {
      return new ERR_IO_HYGIENE_INVALID_ARGUMENT(`${this.#what} ${method}`, `sizeOf() must return a non-negative integer, got ${String(bytes)}`)
    }
    if (bytes > this.#options.maxBatchBytes) return new ERR_IO_HYGIENE_ITEM_TOO_LARGE(this.#what, bytes, this.#options.maxBatchBytes)
    return null
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
      flushLatencyMs: { bounds: FLUSH_LATENCY_BUCKETS_MS, counts: this.#latency.slice() },
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

  #onTimer = () => {
    this.#timer = null
    this.#timerAt = Infinity
    this.#pump()
  }

  // Everything that happens later happens here: expire, admit, send, re-arm.
  // It looks only at groups that are due (the heap) or were touched, so its
  // cost follows the work done, not the number of groups.
  #pump () {
    if (this.#disposed) return
    const o = this.#options
    const now = performance.now()
    const wake = this.#wake
    while (wake.size > 0 && wake.peek().wakeAt <= now) {
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
      for (let i = 0; i < count; i++) this.#admit(this.#takeWaiting())
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
      this.#send(group, group.batch ?? this.#cut(group))
      this.#rewake(group, now)
    }
    this.#arm(now)
  }

  // Expires what is past its deadline, drops an empty group, puts a group
  // with something to send in the ready line, and sets its next wake-up.
  #visit (group, now) {
    if (group.removed) return
    if (group.batch !== null && group.batch.deadline <= now) this.#expireBatch(group, now)
    this.#expireQueue(group, now)
    const batch = group.batch
    if (batch === null && group.queue.length === 0) {
      this.#groups.delete(group.key)
      this.#wake.remove(group)
      group.removed = true
      return
    }
    const ready = batch !== null
      ? !batch.inFlight && batch.retryAt <= now
      : this.#isDue(group, now)
    if (ready && !group.ready) {
      group.ready = true
      this.#ready.push(group)
    }
    this.#rewake(group, now)
  }

  // The earliest thing of this group that is due later: a linger, a retry,
  // a deadline. Work that waits only for a free concurrency slot needs no
  // wake-up: the end of a send pumps.
  #rewake (group, now) {
    const o = this.#options
    const batch = group.batch
    const head = group.queue.peek()
    let next = Infinity
    if (batch !== null) {
      next = batch.deadline
      if (!batch.inFlight && batch.retryAt > now && batch.retryAt < next) next = batch.retryAt
    } else if (head !== undefined && !this.#isDue(group, now)) {
      next = head.at + o.flushIntervalMs
    }
    if (head !== undefined && head.at + o.deliveryTimeoutMs < next) next = head.at + o.deliveryTimeoutMs
    if (next === Infinity) this.#wake.remove(group)
    else if (next !== group.wakeAt) this.#wake.set(group, next)
  }

  #isDue (group, now) {
    const o = this.#options
    const head = group.queue.peek()
    return o.flushWhenIdle || head.seq <= this.#flushUpTo || now - head.at >= o.flushIntervalMs ||
      group.queue.length >= o.maxBatchItems || group.bytes >= o.maxBatchBytes
  }

  #cut (group) {
    const o = this.#options
    const queue = group.queue
    const records = []
    let bytes = 0
    // Every item fits in a batch on its own (push() checks), so the first
    // one always goes.
    while (queue.length > 0 && records.length < o.maxBatchItems && bytes + queue.peek().bytes <= o.maxBatchBytes) {
      const rec = queue.shift()
      rec.state = BATCHED
      records.push(rec)
      bytes += rec.bytes
    }
    group.bytes -= bytes
    this.#batched += records.length
    group.batch = new Batch(records, bytes, o.deliveryTimeoutMs)
    return group.batch
  }

  #send (group, batch) {
    const records = batch.records
    const items = new Array(records.length)
    const started = performance.now()
    batch.attempt++
    if (batch.attempt === 1) {
      // `at` is the clock of the item's run of pushes (#now()): its wait,
      // from the clock reads the batcher makes anyway.
      const wait = this.#queueWait
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
      pending = this.#options.send(items, { group: group.key, attempt: batch.attempt })
    } catch (err) {
      pending = Promise.reject(err)
    }
    Promise.resolve(pending).then(
      (result) => this.#onSent(group, batch, started, true, result),
      (err) => this.#onSent(group, batch, started, false, err)
    )
  }

  #onSent (group, batch, started, ok, value) {
    const o = this.#options
    const now = performance.now()
    const records = batch.records
    this.#batchesInFlight--
    batch.inFlight = false
    this.#counters.flushes++
    this.#record(now - started)
    if (ok && value !== undefined && (!Array.isArray(value) || value.length !== records.length)) {
      ok = false
      value = new ERR_IO_HYGIENE_INVALID_RESULT(this.#what,
        `send() must resolve with undefined or an array of ${records.length} results, got ${Array.isArray(value) ? `an array of ${value.length}` : typeof value}`)
    }
    if (ok) this.#flushOk.record(now - started)
    else this.#flushError.record(now - started)
    if (channels.batchFlush.hasSubscribers) {
      channels.batchFlush.publish({ name: o.name, items: records.length, bytes: batch.bytes, attempt: batch.attempt, durationMs: now - started, error: ok ? null : value })
    }
    this.#touch(group)
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
      if (!this.#retriable(value)) {
        this.#rejectRecords(records, () => value, 'send')
        group.batch = null
      } else {
        this.#expireBatch(group, now)
        if (group.batch !== null) {
          const delay = Math.min(o.retryBackoffMs * 2 ** (batch.attempt - 1), o.maxRetryBackoffMs)
          // Jitter, so that many producers do not retry in step.
          batch.retryAt = now + delay * (0.8 + 0.2 * Math.random())
          this.#counters.retried++
        }
      }
    }
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
      rec.resolve(value === undefined ? undefined : value[i])
      bytes += rec.bytes
      flushed++
    }
    this.#batched -= flushed
    this.#held -= flushed
    this.#heldBytes -= bytes
    this.#counters.flushed += flushed
    // After the callers, so that a waiter never resolves first.
    if (this.#waiters.length > 0 && flushed > 0) this.#countSettled(records, skipped)
    // Their room may admit pushes that wait for it.
    if (this.#waiting.length > 0) this.#schedule()
  }

  // A batch is one group's records in push order, so the ones a waiter
  // counts (pushed before its flush()) are a prefix: a binary search each.
  #countSettled (records, skipped) {
    const waiters = this.#waiters
    for (let w = waiters.length - 1; w >= 0; w--) {
      const waiter = waiters[w]
      let lo = 0
      let hi = records.length
      while (lo < hi) {
        const mid = (lo + hi) >> 1
        if (records[mid].seq <= waiter.seq) lo = mid + 1
        else hi = mid
      }
      const settled = lo - skipped
      if (settled > 0 && (waiter.remaining -= settled) === 0) {
        this.#unwait(waiter)
        waiter.resolve()
      }
    }
  }

  #retriable (err) {
    try {
      return this.#options.isRetriable(err) === true
    } catch {
      return false
    }
  }

  // Rejects what is past its deadline; the batch stays while in flight, so
  // the group keeps one request at a time.
  #expireBatch (group, now) {
    const batch = group.batch
    const timeout = this.#options.deliveryTimeoutMs
    const live = []
    const expired = []
    let bytes = 0
    for (const rec of batch.records) {
      if (rec.state === DONE) continue
      if (rec.at + timeout <= now) {
        expired.push(rec)
      } else {
        live.push(rec)
        bytes += rec.bytes
      }
    }
    this.#rejectRecords(expired, () => this.#deliveryTimeout(group.lastError), 'deadline')
    if (!batch.inFlight) {
      batch.records = live
      batch.bytes = bytes
    }
    if (live.length > 0) batch.deadline = live[0].at + timeout
    else if (batch.inFlight) batch.deadline = Infinity
    else group.batch = null
  }

  #expireQueue (group, now) {
    const queue = group.queue
    const timeout = this.#options.deliveryTimeoutMs
    let expired = null
    while (queue.length > 0 && queue.peek().at + timeout <= now) {
      const rec = queue.shift()
      group.bytes -= rec.bytes
      if (expired === null) expired = []
      expired.push(rec)
    }
    if (expired !== null) {
      const cause = group.lastError
      this.#rejectRecords(expired, () => this.#deliveryTimeout(cause), 'deadline')
    }
  }

  // A wait for room ends at maxWaitMs or at the delivery deadline,
  // whichever comes first.
  #expireWaiting (now) {
    const o = this.#options
    const waiting = this.#waiting
    const limit = Math.min(o.maxWaitMs, o.deliveryTimeoutMs)
    let expired = null
    while (waiting.length > 0 && waiting.peek().at + limit <= now) {
      if (expired === null) expired = []
      expired.push(this.#takeWaiting())
    }
    if (expired !== null) {
      const make = o.deliveryTimeoutMs <= o.maxWaitMs
        ? () => this.#deliveryTimeout(undefined)
        : () => this.#queueFull(`no room within maxWaitMs (${o.maxWaitMs} ms)`)
      this.#rejectRecords(expired, make, 'wait')
    }
  }

  #deliveryTimeout (cause) {
    const ms = this.#options.deliveryTimeoutMs
    return cause === undefined ? new ERR_IO_HYGIENE_DELIVERY_TIMEOUT(ms) : new ERR_IO_HYGIENE_DELIVERY_TIMEOUT(ms, { cause })
  }

  #queueFull (why) {
    const o = this.#options
    return new ERR_IO_HYGIENE_QUEUE_FULL(`${this.#what} holds ${this.#held} items / ${this.#heldBytes} bytes ` +
      `(maxQueuedItems ${o.maxQueuedItems}, maxQueuedBytes ${o.maxQueuedBytes}); ${why}`)
  }

  // A record leaves the books; flush() and close() waiters count it. Called
  // after the caller's promise is settled, so a waiter never resolves first.
  #release (rec) {
    if (rec.state === BATCHED) this.#batched--
    if (rec.state !== WAITING) {
      this.#held--
      this.#heldBytes -= rec.bytes
    }
    rec.state = DONE
    const waiters = this.#waiters
    if (waiters.length === 0) return
    for (let i = waiters.length - 1; i >= 0; i--) {
      const waiter = waiters[i]
      if (rec.seq <= waiter.seq && --waiter.remaining === 0) {
        this.#unwait(waiter)
        waiter.resolve()
      }
    }
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
      rec.reject(err)
      this.#release(rec)
      first ??= err
      count++
    }
    if (count > 0 && channels.batchReject.hasSubscribers) {
      channels.batchReject.publish({ name: this.#options.name, items: count, error: first, stage })
    }
  }

  // Refuses `count` pushes with one error (one promise for all of them).
  #drop (err, count = 1) {
    this.#counters.dropped += count
    if (channels.batchReject.hasSubscribers) channels.batchReject.publish({ name: this.#options.name, items: count, error: err, stage: 'push' })
    return Promise.reject(err)
  }

  // Resolves once everything pushed so far has settled.
  #drain (timeoutMs, what, onTimeout) {
    this.#flushUpTo = this.#seq
    const remaining = this.#held + this.#waiting.length
    if (remaining === 0) return Promise.resolve()
    // Every group is due now: the one place that looks at them all.
    for (const group of this.#groups.values()) this.#touch(group)
    this.#schedule()
    return new Promise((resolve, reject) => {
      const waiter = { seq: this.#seq, remaining, resolve, timer: null }
      if (timeoutMs !== null) {
        // Ref'd: the caller awaits this deadline.
        waiter.timer = setTimeout(() => {
          this.#unwait(waiter)
          if (onTimeout !== null) onTimeout()
          reject(new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs))
        }, timeoutMs)
      }
      this.#waiters.push(waiter)
      this.#refTimer()
    })
  }

  #unwait (waiter) {
    clearTimeout(waiter.timer)
    this.#waiters.splice(this.#waiters.indexOf(waiter), 1)
    this.#refTimer()
  }

  // Ref'd while a caller waits behind the timer (see the top of this file).
  #refTimer () {
    const timer = this.#timer
    if (timer === null) return
    if (this.#waiters.length > 0 || this.#batched > 0 || this.#waiting.length > 0) timer.ref()
    else timer.unref()
  }

  #rejectAll (what, timeoutMs) {
    for (const group of this.#groups.values()) {
      const cause = group.lastError
      const make = () => cause === undefined
        ? new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs)
        : new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs, { cause })
      if (group.batch !== null) this.#rejectRecords(group.batch.records, make, 'close')
      const queued = []
      while (group.queue.length > 0) queued.push(group.queue.shift())
      group.bytes = 0
      this.#rejectRecords(queued, make, 'close')
    }
    const waiting = []
    while (this.#waiting.length > 0) waiting.push(this.#takeWaiting())
    this.#rejectRecords(waiting, () => new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs), 'close')
  }

  #dispose () {
    this.#disposed = true
    clearTimeout(this.#timer)
    this.#timer = null
    this.#groups.clear()
    offShutdown(this)
  }

  // One timer for the earliest wake-up of any group, or the end of an
  // overflow wait.
  #arm (now) {
    let next = this.#wake.size > 0 ? this.#wake.peek().wakeAt : Infinity
    if (this.#waiting.length > 0) {
      const o = this.#options
      next = Math.min(next, this.#waiting.peek().at + Math.min(o.maxWaitMs, o.deliveryTimeoutMs))
    }
    if (next === Infinity) {
      clearTimeout(this.#timer)
      this.#timer = null
      this.#timerAt = Infinity
      return
    }
    // An earlier timer is fine: the pump it runs re-arms.
    if (this.#timer === null || this.#timerAt > next) {
      clearTimeout(this.#timer)
      this.#timerAt = next
      this.#timer = setTimeout(this.#onTimer, Math.max(1, Math.ceil(next - now)))
    }
    this.#refTimer()
  }

  #record (durationMs) {
    let i = 0
    while (durationMs > FLUSH_LATENCY_BUCKETS_MS[i]) i++
    this.#latency[i]++
  }
}

function createBatcher (options) {
  const where = 'createBatcher()'
  const o = resolve(where, spec, options)
  if (o.send === null) throw new ERR_IO_HYGIENE_INVALID_OPTION(where, 'send', 'a function', undefined)
  checkLimits(where, o)
  if (o.concurrency > 1 && o.groupOf === null) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, 'concurrency above 1 needs groupOf: one group never has two batches in flight, so that it keeps its order')
  }
  return new Batcher(o)
}

// The limits that must agree, for the batcher and for sinks that take the
// same option names (createHttpSink), so each refuses them at its own call.
function checkLimits (where, o) {
  if (o.maxBatchItems > o.maxQueuedItems) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `maxBatchItems (${o.maxBatchItems}) must not exceed maxQueuedItems (${o.maxQueuedItems})`)
  }
  if (o.maxBatchBytes > o.maxQueuedBytes) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `maxBatchBytes (${o.maxBatchBytes}) must not exceed maxQueuedBytes (${o.maxQueuedBytes})`)
  }
  if (o.retryBackoffMs > o.maxRetryBackoffMs) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `retryBackoffMs (${o.retryBackoffMs}) must not exceed maxRetryBackoffMs (${o.maxRetryBackoffMs})`)
  }
}

module.exports = { spec, createBatcher, checkLimits, FLUSH_LATENCY_BUCKETS_MS }
