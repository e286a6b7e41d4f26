'use strict'

// A retry budget per origin, after Finagle's RetryBudget and gRPC's retry
// throttling: over the last 10 s, retries may be at most `percent` % of the
// requests plus a small reserve (`minPerSecond` a second), so that an outage
// costs the upstream at most that much extra load, never a multiple of it.
const BUCKETS = 10
const BUCKET_MS = 1000

class RetryBudget {
  #percent
  #reserve
  #stamps = new Float64Array(BUCKETS).fill(-1)
  #requests = new Uint32Array(BUCKETS)
  #retries = new Uint32Array(BUCKETS)

  constructor (percent, minPerSecond) {
    this.#percent = percent
    this.#reserve = minPerSecond * (BUCKETS * BUCKET_MS / 1000)
  }

  #bucket (now) {
    const tick = Math.floor(now / BUCKET_MS)
    const i = tick % BUCKETS
    if (this.#stamps[i] !== tick) {
      this.#stamps[i] = tick
      this.#requests[i] = 0
      this.#retries[i] = 0
    }
    return i
  }

  request (now) {
    this.#requests[this.#bucket(now)]++
  }

  // Takes one retry from the budget; false when none is left.
  tryRetry (now) {
    const i = this.#bucket(now)
    const oldest = Math.floor(now / BUCKET_MS) - BUCKETS
    let requests = 0
    let retries = 0
    for (let j = 0; j < BUCKETS; j++) {
      if (this.#stamps[j] > oldest) {
        requests += this.#requests[j]
        retries += this.#retries[j]
      }
    }
    if (retries + 1 > (requests * this.#percent) / 100 + this.#reserve) return false
    this.#retries[i]++
    return true
  }
}

module.exports = { RetryBudget }
