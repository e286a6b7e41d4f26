'use strict'

// Marks cache entries stale when their TTL runs out, with one unref'd timer
// for the whole cache (a min-heap of deadlines). This keeps clock reads off
// the hot path: a hit only checks `entry.fresh`. Under gVisor and some VMs a
// clock read costs ~100 ns, more than the rest of a hit.
//
// The heap holds the entries themselves, each knowing its index, so that a
// reschedule moves an entry and a cancel removes it in O(log n): the heap
// never holds more than the entries that are fresh now, and an entry the
// cache has let go of is not kept alive here until its deadline.
class Expiry {
  #heap = [] // entries, earliest `expiresAt` first; entry.heapIndex is its place
  #timer = null
  #timerAt = Infinity

  get size () {
    return this.#heap.length
  }

  // Keep `entry` fresh until `at` (performance.now() time).
  schedule (entry, at) {
    entry.fresh = true
    entry.expiresAt = at
    const heap = this.#heap
    if (entry.heapIndex === -1) {
      entry.heapIndex = heap.length
      heap.push(entry)
      this.#up(entry.heapIndex)
    } else {
      this.#down(this.#up(entry.heapIndex))
    }
    if (at < this.#timerAt) this.#arm()
  }

  // Stop tracking `entry`: it is stale now.
  cancel (entry) {
    entry.fresh = false
    const i = entry.heapIndex
    if (i === -1) return
    entry.heapIndex = -1
    const heap = this.#heap
    const last = heap.pop()
    if (i < heap.length) {
      heap[i] = last
      last.heapIndex = i
      this.#down(this.#up(i))
    }
    // The timer may now be early (its entry is gone); #fire re-arms then.
  }

  clear () {
    for (const entry of this.#heap) entry.heapIndex = -1
    this.#heap = []
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#timerAt = Infinity
  }

  #arm () {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    this.#timerAt = Infinity
    if (this.#heap.length === 0) return
    const at = this.#heap[0].expiresAt
    this.#timerAt = at
    this.#timer = setTimeout(() => this.#fire(), Math.max(1, Math.ceil(at - performance.now())))
    this.#timer.unref()
  }

  #fire () {
    this.#timer = null
    this.#timerAt = Infinity
    const now = performance.now()
    const heap = this.#heap
    while (heap.length > 0 && heap[0].expiresAt <= now) this.cancel(heap[0])
    this.#arm()
  }

  // Moves the entry at `i` towards the root while it is earlier than its
  // parent; returns where it ended.
  #up (i) {
    const heap = this.#heap
    const entry = heap[i]
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent].expiresAt <= entry.expiresAt) break
      heap[i] = heap[parent]
      heap[i].heapIndex = i
      i = parent
    }
    heap[i] = entry
    entry.heapIndex = i
    return i
  }

  #down (i) {
    const heap = this.#heap
    const entry = heap[i]
    const n = heap.length
    for (;;) {
      const l = 2 * i + 1
      if (l >= n) break
      const r = l + 1
      const c = r < n && heap[r].expiresAt < heap[l].expiresAt ? r : l
      if (heap[c].expiresAt >= entry.expiresAt) break
      heap[i] = heap[c]
      heap[i].heapIndex = i
      i = c
    }
    heap[i] = entry
    entry.heapIndex = i
  }
}

module.exports = { Expiry }
