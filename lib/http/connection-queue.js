'use strict'

const { setInterval, clearInterval, now: clock } = require('../core/timers')

// Requests waiting for a connection. With a connection cap, a hung upstream
// would otherwise hold the queue behind it for a headers timeout per wave of
// requests: each request waits at most headersTimeoutMs for its connection,
// then at most headersTimeoutMs for its headers. One unref'd timer checks the
// oldest waiters, never one timer per request.
class ConnectionQueue {
  #waiting = new Set() // in the order they started waiting
  #timer = null
  #limitMs
  #everyMs

  constructor (limitMs) {
    this.#limitMs = limitMs
    this.#everyMs = Math.min(1000, Math.ceil(limitMs / 4))
  }

  add (request, now) {
    request.waitingSince = now
    this.#waiting.add(request)
    if (this.#timer === null) {
      this.#timer = setInterval(() => this.#sweep(), this.#everyMs)
      this.#timer.unref()
    }
  }

  delete (request) {
    this.#waiting.delete(request)
  }

  #sweep () {
    const oldest = clock() - this.#limitMs
    for (const request of this.#waiting) {
      if (request.waitingSince > oldest) break
      this.#waiting.delete(request)
      request.waitedTooLong(this.#limitMs)
    }
    if (this.#waiting.size === 0) {
      clearInterval(this.#timer)
      this.#timer = null
    }
  }
}

module.exports = { ConnectionQueue }
