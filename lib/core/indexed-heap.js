'use strict'

// A min-heap of objects by `dueAt`, each in it at most once: an object keeps
// its own index (`heapIndex`, -1 when out), so moving or removing it is
// O(log n) and nothing stale stays behind.
class IndexedHeap {
  #items = []

  get size () {
    return this.#items.length
  }

  peek () {
    return this.#items[0]
  }

  // Puts `item` at `dueAt`, or moves it there.
  set (item, dueAt) {
    item.dueAt = dueAt
    if (item.heapIndex === -1) {
      item.heapIndex = this.#items.length
      this.#items.push(item)
    }
    this.#down(this.#up(item.heapIndex))
  }

  clear () {
    for (const item of this.#items) item.heapIndex = -1
    this.#items = []
  }

  remove (item) {
    const i = item.heapIndex
    if (i === -1) return
    item.heapIndex = -1
    item.dueAt = Infinity
    const last = this.#items.pop()
    if (last === item) return
    this.#items[i] = last
    last.heapIndex = i
    this.#down(this.#up(i))
  }

  #up (i) {
    const items = this.#items
    const item = items[i]
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (items[parent].dueAt <= item.dueAt) break
      items[i] = items[parent]
      items[i].heapIndex = i
      i = parent
    }
    items[i] = item
    item.heapIndex = i
    return i
  }

  #down (i) {
    const items = this.#items
    const n = items.length
    const item = items[i]
    for (;;) {
      let child = 2 * i + 1
      if (child >= n) break
      if (child + 1 < n && items[child + 1].dueAt < items[child].dueAt) child++
      if (items[child].dueAt >= item.dueAt) break
      items[i] = items[child]
      items[i].heapIndex = i
      i = child
    }
    items[i] = item
    item.heapIndex = i
  }
}

module.exports = { IndexedHeap }
