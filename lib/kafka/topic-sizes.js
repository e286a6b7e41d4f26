'use strict'

const { Retry } = require('../batch')
const { Unwritten, writtenOf } = require('./outcomes')

// The size of a partition batch a topic takes (its max.message.bytes), as
// learnt from the batches it refused as too large and the halves it then
// wrote: later batches are cut to fit that, instead of being refused and
// split again each time. Sizes are the wrapper's own estimates of its
// messages (Item.bytes), the unit of maxBatchBytes; a topic's messages of
// one request count together (kafkajs picks their partitions inside the
// request), so a batch may be cut smaller than needed, never larger than
// what was seen written.
class TopicSizes {
  #tooLarge = new Set() // topics that refused a batch as too large
  #fits = new Map() // topic -> the largest partition batch written since

  get limited () {
    return this.#fits.size > 0
  }

  // The halves of partition batches of several messages the broker refused
  // ("topic\0partition" -> its error), about to be sent apart. (A message
  // refused alone says nothing of batches.)
  split (halves, refused) {
    for (const half of halves) {
      for (const item of half) {
        if (refused.get(`${item.topic}\0${item.partition}`).type !== 'MESSAGE_TOO_LARGE') continue
        this.#tooLarge.add(item.topic)
        this.#fits.delete(item.topic) // learnt again from the halves written
      }
    }
  }

  // The messages of one request that wrote them (a half sent apart, not
  // split again): each partition's batch of a topic that refused one.
  wrote (items, results) {
    const sizes = new Map()
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      const entry = results[i]?.[0]
      if (!this.#tooLarge.has(item.topic) || entry?.partition === undefined) continue
      const key = `${item.topic}\0${entry.partition}`
      sizes.set(key, (sizes.get(key) ?? 0) + item.bytes)
    }
    for (const [key, bytes] of sizes) {
      const topic = key.slice(0, key.indexOf('\0'))
      if (bytes > (this.#fits.get(topic) ?? 0)) this.#fits.set(topic, bytes)
    }
  }

  // A batch cut into requests in which no topic's messages exceed what it
  // took, each topic's in order across them (the first request also has
  // the `held` ones, which are not sent); null when one request does.
  rounds (items, held) {
    let spent = null // topic -> [round, bytes in it]
    let last = 0
    const round = new Array(items.length).fill(0)
    for (let i = held; i < items.length; i++) {
      const item = items[i]
      const limit = this.#fits.get(item.topic)
      if (limit === undefined) continue
      spent ??= new Map()
      let state = spent.get(item.topic)
      if (state === undefined) spent.set(item.topic, (state = [0, 0]))
      if (state[1] > 0 && state[1] + item.bytes > limit) {
        state[0]++
        state[1] = 0
      }
      state[1] += item.bytes
      round[i] = state[0]
      if (state[0] > last) last = state[0]
    }
    if (last === 0) return null
    const rounds = Array.from({ length: last + 1 }, () => [])
    for (let i = 0; i < items.length; i++) rounds[round[i]].push(items[i])
    return rounds
  }
}

// Sends a batch in the requests sizes.rounds() cut it into, one after the
// other (`produce(items, held)`: the wrapper's one request). What a request
// leaves unsettled is held at the head of the next, so that nothing of its
// partitions (or of its topic, for one never given a partition) overtakes
// it; it goes again with the batcher's retry.
async function produceFitting (sizes, produce, items, held, isRetriable) {
  const rounds = sizes.rounds(items, held)
  if (rounds === null) return produce(items, held)
  const results = new Map()
  let carry = rounds[0]
  let ahead = held
  let error
  let thrown
  for (let r = 0; r < rounds.length; r++) {
    const round = r === 0 ? carry : carry.concat(rounds[r])
    let out
    try {
      out = await produce(round, ahead)
    } catch (e) {
      error = thrown = e
      break
    }
    carry = []
    for (let i = 0; i < round.length; i++) {
      if (!(out[i] instanceof Retry)) {
        results.set(round[i], out[i])
        continue
      }
      carry.push(round[i])
      if (out[i].error !== undefined) error = out[i].error
    }
    ahead = carry.length
  }
  if (thrown !== undefined && results.size === 0) throw thrown
  // A failure for good after some requests wrote their part: the rest
  // rejects with it, as one request's would.
  const final = thrown !== undefined && !isRetriable(thrown)
  let retry = null
  return items.map((item) => results.get(item) ?? (final ? new Unwritten(thrown, writtenOf(item)) : (retry ??= new Retry(error))))
}

module.exports = { TopicSizes, produceFitting }
