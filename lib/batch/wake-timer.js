'use strict'

// The batcher's one timer, for the earliest wake-up of any of its groups:
// never one per item. Ref'd only while a caller waits behind it (see
// lib/batch/index.js).
class WakeTimer {
  #timer = null
  #at = Infinity
  #onWake

  constructor (onWake) {
    this.#onWake = onWake
  }

  #fire = () => {
    this.#timer = null
    this.#at = Infinity
    this.#onWake()
  }

  // Due at `next` (a performance.now() time), `now` being the time now.
  set (next, now) {
    // An earlier timer is fine: the pump it runs re-arms.
    if (this.#timer === null || this.#at > next) {
      clearTimeout(this.#timer)
      this.#at = next
      this.#timer = setTimeout(this.#fire, Math.max(1, Math.ceil(next - now)))
    }
  }

  ref (waited) {
    const timer = this.#timer
    if (timer === null) return
    if (waited) timer.ref()
    else timer.unref()
  }

  clear () {
    clearTimeout(this.#timer)
    this.#timer = null
    this.#at = Infinity
  }
}

module.exports = { WakeTimer }
