'use strict'

// An array with a moving head, so that taking a batch off the front is not
// O(queue length). Emptied, it keeps its slots for the next fill (a batcher's
// queue fills and empties once per batch): never many, as the compaction
// below has halved a long one on its way to empty.
class Fifo {
  #items = []
  #head = 0
  #tail = 0

  get length () {
    return this.#tail - this.#head
  }

  peek () {
    return this.#items[this.#head]
  }

  push (value) {
    this.#items[this.#tail++] = value
  }

  shift () {
    const items = this.#items
    const head = this.#head
    const value = items[head]
    items[head] = undefined
    this.#head = head + 1
    if (this.#head === this.#tail) {
      this.#head = 0
      this.#tail = 0
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#tail) {
      this.#items = items.slice(this.#head, this.#tail)
      this.#tail -= this.#head
      this.#head = 0
    }
    return value
  }
}

module.exports = { Fifo }
