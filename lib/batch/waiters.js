'use strict'

const { Fifo } = require('../core/fifo')
const { ERR_IO_HYGIENE_TIMEOUT } = require('../core/errors')

// The callers of flush() and close(): each waits for everything pushed
// before its call (seq and below) to settle. Few at a time, so a list.
class DrainWaiters {
  #list = []
  #onChange

  constructor (onChange) {
    this.#onChange = onChange
  }

  get size () {
    return this.#list.length
  }

  add (seq, remaining, timeoutMs, what, onTimeout) {
    return new Promise((resolve, reject) => {
      const waiter = { seq, remaining, resolve, timer: null }
      if (timeoutMs !== null) {
        // Ref'd: the caller awaits this deadline.
        waiter.timer = setTimeout(() => {
          this.#remove(waiter)
          if (onTimeout !== null) onTimeout()
          reject(new ERR_IO_HYGIENE_TIMEOUT(what, timeoutMs))
        }, timeoutMs)
      }
      this.#list.push(waiter)
      this.#onChange()
    })
  }

  // One record of push number `seq` settled.
  settledOne (seq) {
    const list = this.#list
    for (let i = list.length - 1; i >= 0; i--) {
      const waiter = list[i]
      if (seq <= waiter.seq && --waiter.remaining === 0) this.#done(waiter)
    }
  }

  // A batch settled: one group's records in push order, so the ones a
  // waiter counts (pushed before its call) are a prefix, found by binary
  // search. `skipped`: the oldest, already counted when they expired.
  settledPrefix (records, skipped) {
    const list = this.#list
    for (let w = list.length - 1; w >= 0; w--) {
      const waiter = list[w]
      let lo = 0
      let hi = records.length
      while (lo < hi) {
        const mid = (lo + hi) >> 1
        if (records[mid].seq <= waiter.seq) lo = mid + 1
        else hi = mid
      }
      const settled = lo - skipped
      if (settled > 0 && (waiter.remaining -= settled) === 0) this.#done(waiter)
    }
  }

  #done (waiter) {
    this.#remove(waiter)
    waiter.resolve()
  }

  #remove (waiter) {
    clearTimeout(waiter.timer)
    this.#list.splice(this.#list.indexOf(waiter), 1)
    this.#onChange()
  }
}

// Pushes waiting for room in the queue, in call order. Bounded too, or a
// sink that stops answering would let it grow forever.
class WaitingLine {
  #fifo = new Fifo()
  #bytes = 0

  get length () {
    return this.#fifo.length
  }

  peek () {
    return this.#fifo.peek()
  }

  push (rec) {
    this.#fifo.push(rec)
    this.#bytes += rec.bytes
  }

  take () {
    const rec = this.#fifo.shift()
    this.#bytes -= rec.bytes
    return rec
  }

  // Takes the pushes that have waited `limit` ms by `now`: the oldest, a
  // prefix. Null when there are none.
  takeExpired (now, limit) {
    let expired = null
    while (this.#fifo.length > 0 && this.#fifo.peek().at + limit <= now) {
      if (expired === null) expired = []
      expired.push(this.take())
    }
    return expired
  }

  takeAll () {
    const all = []
    while (this.#fifo.length > 0) all.push(this.take())
    return all
  }

  fullReason (o) {
    return `and ${this.#fifo.length} pushes of ${this.#bytes} bytes wait for room ` +
      `(maxWaitingItems ${o.maxWaitingItems}, maxWaitingBytes ${o.maxWaitingBytes})`
  }

  // Whether `count` more pushes of `bytes` in all may wait.
  mayWait (count, bytes, o) {
    return this.#fifo.length + count <= o.maxWaitingItems && this.#bytes + bytes <= o.maxWaitingBytes
  }
}

module.exports = { DrainWaiters, WaitingLine }
