'use strict'

// The order of each partition's records across retries, kept as the Java
// producer keeps it with a queue per partition. A batch with records still
// to send to a partition (its request failed there, or held them back)
// joins that partition's lane, behind the batches already in it; only the
// lane's first batch with a record not settled sends to the partition, and
// every later batch is held back there (its partition muted), whatever else
// it sends meanwhile. Nothing newer ever joins a batch that was sent: one
// that may have been written goes again as it went, so that the idempotent
// producer's sequence numbers let the broker drop the copy. Records that
// have no partition yet (their topic not known, or the attempt failed before
// it gave them one) hold their whole topic the same way, as the Java
// producer's send() waits for a topic's metadata.
const { DONE } = require('../batch')

function isLive (item) {
  return item.written === null && item.state !== DONE
}

class Lane {
  constructor (topic, partition) {
    this.topic = topic
    this.partition = partition
    this.entries = [] // { token, items, at }: one per batch, in the order they joined
    this.byToken = new Map()
  }

  // The first batch with a record not settled (settled ones leave), or null.
  head () {
    const entries = this.entries
    while (entries.length > 0) {
      const entry = entries[0]
      const items = entry.items
      while (entry.at < items.length && !this.#holding(items[entry.at])) entry.at++
      if (entry.at < items.length) return entry
      entries.shift()
      this.byToken.delete(entry.token)
    }
    return null
  }

  // A lane holds a record while it is to go there (a topic's, until it has
  // a partition).
  #holding (item) {
    return isLive(item) && item.partition === this.partition
  }

  add (item) {
    let entry = this.byToken.get(item.token)
    if (entry === undefined) {
      entry = { token: item.token, items: [], at: 0 }
      this.entries.push(entry)
      this.byToken.set(item.token, entry)
    }
    entry.items.push(item)
  }
}

class Lanes {
  #lanes = new Map() // "topic\0partition" -> Lane
  // The earliest push time of the records an attempt was held behind: their
  // deadline is when it must look again, if nothing wakes it first.
  #heldBehind = Infinity
  #wake // a held batch may go now (the batcher's wake())

  constructor (wake) {
    this.#wake = wake
  }

  get size () {
    return this.#lanes.size
  }

  // Whether a message an earlier attempt gave a partition waits there (or in
  // its topic) behind another batch's records.
  holds (item) {
    return this.#behind(`${item.topic}\0`, item.token) || this.#behind(`${item.topic}\0${item.partition}`, item.token)
  }

  // Where a batch (`token`, null for one never held) waits behind another's
  // records in `topic`: true for the whole topic, else a Set of its
  // partitions, or undefined for none.
  mutedFor (topic, token) {
    let muted
    for (const [key, lane] of this.#lanes) {
      if (lane.topic !== topic || !this.#behind(key, token)) continue
      if (lane.partition === null) return true
      ;(muted ??= new Set()).add(lane.partition)
    }
    return muted
  }

  // After an attempt: the batch's records still to send join their lanes
  // (once each), under the batch's token (the batcher's own batch).
  join (items, token) {
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      item.token = token
      // One without a partition joins its topic's lane (1), and its
      // partition's (2) once it has one.
      const lane = item.partition === null ? 1 : 2
      if (item.laned >= lane || !isLive(item)) continue
      item.laned = lane
      const key = `${item.topic}\0${item.partition ?? ''}`
      let joined = this.#lanes.get(key)
      if (joined === undefined) this.#lanes.set(key, (joined = new Lane(item.topic, item.partition)))
      joined.add(item)
    }
  }

  // The cluster was asked for `topic` by batch `token`'s attempt and does
  // not know it yet: `ask(item)` for each record waiting in the topic's lane
  // behind other batches, as if it had asked too. A batch with a record it
  // settled is woken, to report it.
  asked (topic, token, ask) {
    const lane = this.#lanes.get(`${topic}\0`)
    if (lane === undefined) return
    for (const { token: other, items, at } of lane.entries) {
      if (other === token) continue
      let settled = false
      for (let i = at; i < items.length; i++) {
        const item = items[i]
        // Only one still waiting for the topic (not past its deadline).
        if (isLive(item) && item.partition === null) {
          ask(item)
          settled ||= item.written !== null
        }
      }
      if (settled) this.#wake(other)
    }
  }

  // An attempt starts: nothing holds it back yet.
  attempt () {
    this.#heldBehind = Infinity
  }

  // When the attempt's held-back records go again at the latest: once what
  // held them reaches its deadline (a wake() comes first when it is written).
  heldUntil (deliveryTimeoutMs) {
    return this.#heldBehind + deliveryTimeoutMs + 1
  }

  // After an attempt of batch `token`: the lanes its records were in whose
  // first batch is now another (its records settled, or given a partition)
  // wake that batch.
  settled (items, token, wake) {
    let keys = null
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      // In a lane, and out of it now: settled, or out of its topic's lane.
      if (item.laned === 0 || (isLive(item) && (item.laned === 2 || item.partition === null))) continue
      ;(keys ??= new Set()).add(`${item.topic}\0`)
      if (item.partition !== null) keys.add(`${item.topic}\0${item.partition}`)
    }
    if (keys === null) return
    for (const key of keys) {
      const lane = this.#lanes.get(key)
      const head = lane?.head() ?? null
      if (head === null) this.#lanes.delete(key)
      else if (head.token !== token) wake(head.token)
    }
  }

  // A record that no attempt may have written leaves its partition, to be
  // partitioned anew (as kafkajs does at each retry); the batch now first
  // in that lane, if another's, is woken.
  leave (item, wake) {
    const key = `${item.topic}\0${item.partition}`
    item.partition = null
    item.laned = 0
    const head = this.#lanes.get(key)?.head() ?? null
    if (head !== null && head.token !== item.token) wake(head.token)
  }

  // Whether the lane's first batch is another's.
  #behind (key, token) {
    const lane = this.#lanes.get(key)
    if (lane === undefined) return false
    const head = lane.head()
    if (head === null) this.#lanes.delete(key)
    if (head === null || head.token === token) return false
    this.#heldBehind = Math.min(this.#heldBehind, head.items[head.at].at)
    return true
  }
}

module.exports = { Lanes }
