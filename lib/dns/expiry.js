'use strict'

// Marks cache entries stale when their TTL runs out, with one unref'd timer
// for the whole cache (a min-heap of deadlines). This keeps clock reads off
// the hot path: a hit only checks `entry.fresh`. Under gVisor and some VMs a
// clock read costs ~100 ns, more than the rest of a hit.
class Expiry {
  #heap = [] // [{ at, entry, generation }], earliest first
  #timer = null
  #timerAt = Infinity

  // Keep `entry` fresh until `at` (performance.now() time).
  schedule (entry, at) {
    entry.generation++
    entry.fresh = true
    const item = { at, entry, generation: entry.generation }
    const heap = this.#heap
    heap.push(item)
    let i = heap.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (heap[parent].at <= at) break
      heap[i] = heap[parent]
      i = parent
    }
    heap[i] = item
    if (at < this.#timerAt) this.#arm()
  }

  // Stop tracking `entry`: it is stale now.
  cancel (entry) {
    entry.generation++
    entry.fresh = false
  }

  clear () {
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
    const at = this.#heap[0].at
    this.#timerAt = at
    this.#timer = setTimeout(() => this.#fire(), Math.max(1, Math.ceil(at - performance.now())))
    this.#timer.unref()
  }

  #fire () {
    this.#timer = null
    this.#timerAt = Infinity
    const now = performance.now()
    const heap = this.#heap
    while (heap.length > 0 && heap[0].at <= now) {
      const { entry, generation } = this.#pop()
      if (entry.generation === generation) entry.fresh = false
    }
    this.#arm()
  }

  #pop () {
    const heap = this.#heap
    const top = heap[0]
    const last = heap.pop()
    if (heap.length > 0) {
      let i = 0
      const n = heap.length
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        const c = r < n && heap[r].at < heap[l].at ? r : l
        if (heap[c].at >= last.at) break
        heap[i] = heap[c]
        i = c
      }
      heap[i] = last
    }
    return top
  }
}

module.exports = { Expiry }
