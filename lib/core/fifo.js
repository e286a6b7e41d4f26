'use strict'

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

module.exports = { Fifo }
