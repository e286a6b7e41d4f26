'use strict'

// What each caller of a batched request gets: its own RecordMetadata, shared
// frozen between the callers of one partition, or its own rejection, which
// says whether the message may have been written.
const { ERR_IO_HYGIENE_KAFKA_SEND_FAILED } = require('../core/errors')

const NO_METADATA = Object.freeze([])

// A message's result when the batch's request failed for good after it had
// written some of the batch's other messages: those resolve, this one rejects.
class Unwritten {
  constructor (error, written = 'unknown') {
    this.error = error
    this.written = written
  }
}

// topic -> partition -> that partition's RecordMetadata as a caller gets it:
// one frozen array (its entry frozen too), shared by the request's callers
// of that partition, so that none can see another change it.
function ownEntries (entries) {
  const own = new Map()
  for (const entry of entries) {
    let partitions = own.get(entry.topicName)
    if (partitions === undefined) own.set(entry.topicName, (partitions = new Map()))
    if (!partitions.has(entry.partition)) partitions.set(entry.partition, freezeEntry(entry))
  }
  return own
}

function freezeEntry (entry) {
  return Object.freeze([Object.freeze(entry)])
}

// A record's own RecordMetadata: its partition batch's entry, whose
// baseOffset is the batch's first record's, moved on to the record's place
// in that batch (the Java producer's base offset + relative offset). The
// first record shares the partition's array; any other gets one of its own.
function atPosition (own, position) {
  if (position === 0) return own
  const entry = own[0]
  return Object.freeze([Object.freeze({ ...entry, baseOffset: plus(entry.baseOffset, position) })])
}

// An offset (kafkajs gives a decimal string) plus `n`; one the broker did
// not give (-1) stays as it is.
function plus (offset, n) {
  const value = Number(offset)
  if (!(value >= 0)) return offset
  if (Number.isSafeInteger(value + n)) return String(value + n)
  return String(BigInt(offset) + BigInt(n))
}

// What a rejection says of a message: false when it provably was not written
// (refused before it was queued, never handed to kafkajs, refused by kafkajs
// before anything went out, or every attempt that carried it answered by a
// broker that appended none of it), otherwise 'unknown': a request that
// carried it may have been written before it failed.
function writtenOf (item) {
  return item.sends > item.refusals ? 'unknown' : false
}

// The error a caller sees: ours carry `written` themselves; a kafkajs error
// is wrapped per call (it is shared by every caller of its batch), and kept
// as `cause`.
function rejection (error, written) {
  const ours = typeof error?.code === 'string' && error.code.startsWith('ERR_IO_HYGIENE_') && error.code !== 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED'
  // An error of ours already told another caller something else is not
  // changed under that caller: this one gets its own.
  const agrees = (error?.written ?? written) === written
  if (ours && agrees) {
    error.written = written
    return error
  }
  const wrapped = new ERR_IO_HYGIENE_KAFKA_SEND_FAILED('a kafka send()', { cause: error })
  wrapped.written = written
  return wrapped
}

// Refused before anything was queued.
function refuse (error) {
  error.written = false
  return Promise.reject(error)
}

function settledOne (value) {
  if (value instanceof Unwritten) throw rejection(value.error, value.written)
  return value
}

// Each message's result from a kafkajs that does not say where each message
// went (not corrected): the response's entries for its topic, only its
// partition's when it named one. One frozen array per topic (and per named
// partition) serves all of a request's callers: no copy per caller, and
// frozen (entries too), so that no caller can see another change it.
function results (items, metadata) {
  const byTopic = new Map()
  for (const entry of metadata) {
    Object.freeze(entry)
    const list = byTopic.get(entry.topicName)
    if (list === undefined) byTopic.set(entry.topicName, [entry])
    else list.push(entry)
  }
  for (const list of byTopic.values()) Object.freeze(list)
  const out = new Array(items.length)
  let byPartition = null
  let lastTopic = null
  let last = NO_METADATA
  for (let i = 0; i < items.length; i++) {
    const item = items[i]
    const partition = item.message.partition
    if (Number.isInteger(partition)) {
      byPartition ??= new Map()
      const key = `${item.topic}\0${partition}`
      let own = byPartition.get(key)
      if (own === undefined) {
        own = Object.freeze((byTopic.get(item.topic) ?? NO_METADATA).filter((entry) => entry.partition === partition))
        byPartition.set(key, own)
      }
      out[i] = own
      continue
    }
    if (item.topic !== lastTopic) {
      lastTopic = item.topic
      last = byTopic.get(lastTopic) ?? NO_METADATA
    }
    out[i] = last
  }
  return out
}

// A call's RecordMetadata: one entry per topic and partition, the first
// request's when its messages went out in more than one.
function merge (lists) {
  const seen = new Set()
  const out = []
  for (const list of lists) {
    for (const entry of list) {
      const id = `${entry.topicName}\0${entry.partition}`
      if (seen.has(id)) continue
      seen.add(id)
      out.push(entry)
    }
  }
  return Object.freeze(out)
}

module.exports = { NO_METADATA, Unwritten, ownEntries, freezeEntry, atPosition, writtenOf, rejection, refuse, settledOne, results, merge }
