'use strict'

const { IndexedHeap } = require('../core/indexed-heap')

// Marks cache entries stale when their TTL runs out, with one unref'd timer
// for the whole cache, so a hit reads no clock: it only checks `entry.fresh`.
// The heap holds only the entries that are fresh now; one the cache let go
// of is not kept alive here until its deadline.
class Expiry {
  #heap = new IndexedHeap() // entries by `dueAt`
  #timer = null
  #timerAt = Infinity

  get size () {
    return this.#heap.size
  }

  // Keep `entry` fresh until `at` (performance.now() time).
  schedule (entry, at) {
    entry.fresh = true
    this.#heap.set(entry, at)
    if (at < this.#timerAt) this.#arm()
  }

  // Stop tracking `entry`: it is stale now.
  cancel (entry) {
    entry.fresh = false
    this.#heap.remove(entry)
    // The timer may now be early (its entry is gone); #fire re-arms then.
  }

  clear () {
    this.#heap.clear()
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#timerAt = Infinity
  }

  #arm () {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#timerAt = Infinity
    if (this.#heap.size === 0) return
    const at = this.#heap.peek().dueAt
    this.#timerAt = at
    this.#timer = setTimeout(() => this.#fire(), Math.max(1, Math.ceil(at - performance.now())))
    this.#timer.unref()
  }

  #fire () {
    this.#timer = null
    this.#timerAt = Infinity
    const now = performance.now()
    const heap = this.#heap
    while (heap.size > 0 && heap.peek().dueAt <= now) this.cancel(heap.peek())
    this.#arm()
  }
}

module.exports = { Expiry }
