'use strict'

// The idempotent producer's partition batches whose outcome is unknown: sent,
// then no answer, or an answer that says the leader may have appended them.
// The broker drops a copy only when it comes with the same producer id,
// epoch and sequence numbers, so such a batch goes again exactly as it went,
// whatever the producer's id is now (the Java producer keeps a batch's
// producer id, epoch and sequence once it is sent); and its sequence numbers
// are never given to anything else: a new batch to its partition while the
// producer id it went under is still the producer's waits for a fresh one
// (the Java producer's epoch bump for an unresolved sequence, KIP-360).

// What a wrapProducer() partition batch went under belongs to its records as
// a unit: each of its messages' Item keeps the batch's SentAs
// (fates.js), and the topic's messages array of an attempt carries them,
// slot -> SentAs, only while some message has one (no work for the others).
const kSentAs = Symbol.for('io-hygiene.kafkajs.sent-as.v2')

// A message's place in its partition's batch, for one that does not go in
// this attempt: its partition's batch goes again as it went, without it.
const EXCLUDED = -3

class SentAs {
  constructor (producerId, producerEpoch, firstSequence, count) {
    this.producerId = producerId
    this.producerEpoch = producerEpoch
    this.firstSequence = firstSequence
    this.count = count
    // The broker said it is not in the log: its records go as a new batch.
    this.absent = false
  }
}

// A batch that may have been written goes again exactly as it went: the
// same records, nothing added. In a topic's messages of a wrapProducer()
// attempt (`sentAs`: slot -> SentAs), each partition that holds a message of
// such a batch sends that batch's messages only, in order; every other
// message there (newer, rejoined after a split, or a keyless one the
// partitioner put there) waits for a later attempt (its position EXCLUDED).
// Fewer than went (one expired) go under it still, and the broker's
// answer says whether they were written (lost()). Returns partition ->
// SentAs, or null.
function keepAsWent (sentAs, messages, perPartition, partitions, position) {
  let chosen = null
  for (const [i, as] of sentAs) {
    if (position[i] === undefined) continue
    chosen ??= new Map()
    if (!chosen.has(partitions[i])) chosen.set(partitions[i], as)
  }
  if (chosen === null) return null
  for (const [partition, as] of chosen) {
    const list = []
    for (let i = 0; i < messages.length; i++) {
      if (partitions[i] !== partition || position[i] === undefined) continue
      if (sentAs.get(i) === as) {
        position[i] = list.length
        list.push(messages[i])
      } else {
        position[i] = EXCLUDED
      }
    }
    perPartition[partition] = list
  }
  return chosen
}

class Sequences {
  #eos
  // "topic\0partition" -> the SentAs of its last batch with an unknown outcome.
  #open = new Map()

  constructor (eosManager) {
    this.#eos = eosManager
  }

  // Whether a pending partition batch that is not a batch going again is
  // bound for a partition whose unknown batch went under the producer id and
  // epoch the producer still has: the sequence numbers after it cannot be
  // given out, so the producer needs a fresh id first.
  mustRenew (pending) {
    if (this.#open.size === 0) return false
    const id = this.#eos.getProducerId()
    const epoch = this.#eos.getProducerEpoch()
    let renew = false
    for (const [key, entry] of pending) {
      const as = this.#open.get(key)
      if (as === undefined || entry.sentAs === as) continue
      if (as.producerId === id && as.producerEpoch === epoch && !as.absent) renew = true
      else this.#open.delete(key)
    }
    return renew
  }

  // Takes out of a broker's `topicData` the partition batches that go again
  // under another producer id or epoch than the producer's: each group in a
  // request of its own, with what it went with. Null when there are none.
  // (Under the producer's own, the producer's next sequence number for the
  // partition is the batch's first: mustRenew() saw to it.)
  asWent (topicData) {
    let went = null
    const id = this.#eos.getProducerId()
    const epoch = this.#eos.getProducerEpoch()
    for (let t = 0; t < topicData.length; t++) {
      const { topic, partitions } = topicData[t]
      for (let i = 0; i < partitions.length; i++) {
        const as = partitions[i].entry.sentAs
        if (as === null || (as.producerId === id && as.producerEpoch === epoch)) continue
        went ??= new Map()
        const group = `${as.producerId}:${as.producerEpoch}`
        let data = went.get(group)
        if (data === undefined) went.set(group, (data = { as, topics: new Map() }))
        let list = data.topics.get(topic)
        if (list === undefined) data.topics.set(topic, (list = []))
        list.push(partitions[i])
        partitions.splice(i--, 1)
      }
    }
    if (went === null) return null
    for (let t = topicData.length - 1; t >= 0; t--) if (topicData[t].partitions.length === 0) topicData.splice(t, 1)
    return Array.from(went.values(), ({ as, topics }) => ({ as, topicData: Array.from(topics, ([topic, partitions]) => ({ topic, partitions })) }))
  }

  // Partition batch `p` (of the request's topicData, under `producerId` and
  // `producerEpoch`) may have been written. One going again keeps what it
  // went with first.
  unknown (topic, p, producerId, producerEpoch) {
    const entry = p.entry
    let as = entry.sentAs
    if (as === null) as = entry.sentAs = new SentAs(producerId, producerEpoch, p.firstSequence, p.messages.length)
    this.#open.set(`${topic}\0${p.partition}`, as)
  }

  // The partition's batch (`as`: what it went with, null for a new one) was
  // written, or refused for good for what it holds.
  settled (key, as) {
    if (this.#open.get(key) === as) this.#open.delete(key)
  }

  // The broker answered a batch going again that it does not follow on from
  // the sequence numbers it knows (OUT_OF_ORDER_SEQUENCE_NUMBER,
  // UNKNOWN_PRODUCER_ID). Sent whole, it is not in the log (it would be
  // that producer's last batch there, and a copy): its records go as a new
  // batch (true). Part of it (the rest expired): the broker may hold the
  // whole, so they cannot go again (false).
  lost (entry) {
    const as = entry.sentAs
    if (entry.messages.length !== as.count) return false
    as.absent = true
    entry.sentAs = null
    return true
  }
}

module.exports = { Sequences, keepAsWent, kSentAs, EXCLUDED }
