'use strict'

// Each message of a batch its own fate: wrapProducer()'s record of a message
// (Item), and what an attempt's outcome (send-messages.js's kOutcome) says
// of each. A batch carries callers; it never merges their fates.
const { Retry, Pending } = require('../batch')
const { NO_PARTITION, PARTITIONER_THREW, kMuted } = require('./send-messages')
const { NO_METADATA, Unwritten, ownEntries, freezeEntry, atPosition } = require('./outcomes')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT, describe } = require('../core/errors')

// The batcher works on messages: the one record a message costs us besides
// its caller's promise, which is also the batcher's record of it (Pending).
// `request` holds what must be equal within one Produce request.
class Item extends Pending {
  constructor (topic, message, bytes, request) {
    super(null, bytes, undefined, 0, 0)
    this.item = this
    this.topic = topic
    this.message = message
    this.request = request
    // Its own fate, once known while the rest of its batch is still being
    // sent: its RecordMetadata (written), or an Unwritten (refused for
    // good, alone). A retry of the batch skips it.
    this.written = null
    // Set when such a request assigned it a partition but was not
    // acknowledged for it: a retry sends it to the same partition.
    this.partition = null
    // Where that request's leader appended it before answering with an
    // error: { at, place }, `at` its partition batch's read-back
    // (read-back.js), `place` its own in that batch. Its partition waits
    // for the read-back's answer (inDoubt()) before it is sent again.
    this.maybeAt = null
    // The object handed to kafkajs for this message by the last attempt,
    // and its position in that attempt's messages array for its topic: the
    // corrected kafkajs reports partitions by position (kOutcome).
    this.sent = null
    this.slot = -1
    // Attempts that carried it and may have reached a broker, and those a
    // broker answered by refusing it (or that never sent it): while every
    // attempt is one of those, a rejection can say it was not written.
    this.sends = 0
    this.refusals = 0
    // Of those, the attempts that did not send it where it was to go (its
    // partition muted, or it appended nothing there): it may go elsewhere.
    this.declines = 0
    // Once a retry holds it (lanes.js): the same object for every message of
    // its batch, whose place in its partition's lane it keeps.
    this.token = null
    this.laned = 0 // the lanes it is in: lanes.js
  }
}

// kafkajs's default retries of a topic its cluster does not know.
const UNKNOWN_TOPIC_ATTEMPTS = 5

// A topic the cluster does not know may be one it is creating (auto-creation
// answers so at first): asked again a few times, as kafkajs retries it, before
// its callers are refused.
function unknownTopic (item, error) {
  if (item.sends < UNKNOWN_TOPIC_ATTEMPTS) item.refusals++
  else item.written = new Unwritten(error, mayBeWritten(item))
}

// What the broker refuses for what a batch holds, not where it went: narrowed
// to the message at fault by sending the batch again apart.
const RECORD_REFUSED = new Set(['INVALID_RECORD', 'MESSAGE_TOO_LARGE', 'INVALID_TIMESTAMP', 'CORRUPT_MESSAGE', 'RECORD_LIST_TOO_LARGE'])

// Refused by this attempt, which wrote none of it: an earlier attempt that
// failed without an answer may have.
function mayBeWritten (item) {
  item.refusals++
  return item.sends > item.refusals ? 'unknown' : false
}

function allSettled (items) {
  for (let i = 0; i < items.length; i++) if (items[i].written === null) return false
  return true
}

// Each message's own result; one not settled yet (when `error`, why) is
// sent again alone: after a backoff, or when `until` says for a batch held
// back behind another's records (lanes.js).
function fates (items, error, until) {
  const out = new Array(items.length)
  let retry = null
  for (let i = 0; i < items.length; i++) out[i] = items[i].written ?? (retry ??= new Retry(error, until))
  return out
}

// Marks each message of the attempt with its own fate, by its position in
// the messages array this attempt handed over (an outcome of another
// attempt, whose arrays were made anew, says nothing of it): written (its
// own RecordMetadata: its partition, its record's offset), refused alone
// (its topic, its partition, its partitioner), or assigned a partition
// still to write. Returns the messages to send again apart (the two halves
// of each batch refused for a record), or null.
function settleAttempt (items, byTopic, { assigned, positions, pending, entries, refused, topics, thrown, unsent, declined, autoCreate, maybeAt }, acks, lanes) {
  const own = ownEntries(entries)
  let lastTopic = null
  let partitions
  let places
  let topicEntries
  let topicRefused
  let topicMuted
  let refusals = null // "topic\0partition" -> its refused messages
  let unknown = null // the topics asked for and not known yet
  for (let i = 0; i < items.length; i++) {
    const item = items[i]
    // Settled, or held back (not in this attempt).
    if (item.written !== null || item.slot < 0) continue
    if (item.topic !== lastTopic) {
      lastTopic = item.topic
      const messages = byTopic.get(lastTopic)
      topicMuted = messages[kMuted]
      partitions = assigned.get(messages)
      places = positions?.get(messages)
      topicEntries = own.get(lastTopic)
      topicRefused = topics?.get(lastTopic)
    }
    if (topicRefused !== undefined) {
      // Refused at the first answer unless the producer asks for auto-
      // creation (send-messages.js refuses only a topic it never had).
      if (topicRefused.type === 'UNKNOWN_TOPIC_OR_PARTITION' && autoCreate !== false) {
        unknownTopic(item, topicRefused)
        ;(unknown ??= new Set()).add(lastTopic)
      } else {
        item.written = new Unwritten(topicRefused, mayBeWritten(item))
      }
      continue
    }
    const partition = partitions?.[item.slot]
    if (partition === undefined) {
      // This attempt ended before it gave the message a partition: not sent.
      if (unsent === true) item.refusals++
      continue
    }
    if (partition === NO_PARTITION) {
      const named = item.message.partition
      item.written = new Unwritten(new ERR_IO_HYGIENE_INVALID_ARGUMENT('a kafka send()', named === undefined
        ? `the partitioner gave a message for topic "${item.topic}" no partition of the topic`
        : `a message for topic "${item.topic}" names partition ${describe(named)}, which the topic does not have`), mayBeWritten(item))
      continue
    }
    if (partition === PARTITIONER_THREW) {
      item.written = new Unwritten(thrown.get(item.sent), mayBeWritten(item))
      continue
    }
    const entry = topicEntries?.get(partition)
    if (entry !== undefined) {
      item.written = atPosition(entry, places?.[item.slot] ?? 0)
      continue
    }
    const key = `${item.topic}\0${partition}`
    const error = refused?.get(key)
    if (error !== undefined) {
      item.partition = partition
      refusals ??= new Map()
      const list = refusals.get(key)
      if (list === undefined) refusals.set(key, [item])
      else list.push(item)
    } else if (topicMuted?.has(partition) === true) {
      // Its partition was muted: held back behind the records before it there.
      item.partition = partition
      item.refusals++
      item.declines++
      item.slot = -1
    } else if (acks === 0 && !pending.has(key)) {
      item.written = NO_METADATA
    } else {
      item.partition = partition
      // Answered "nothing appended": as good as not sent (writtenOf()).
      if (declined?.has(key)) {
        item.refusals++
        item.declines++
      }
      const at = maybeAt?.get(key)
      if (at !== undefined) item.maybeAt = { at, place: places[item.slot] }
    }
  }
  // The records that wait behind this attempt in such a topic's lane (in
  // call order, for when it is created) were asked for with it: each is
  // refused after its own attempts, not after every earlier batch's.
  if (unknown !== null) {
    for (const topic of unknown) {
      const error = topics.get(topic)
      lanes.asked(topic, items[0].token, (item) => {
        item.sends++
        unknownTopic(item, error)
      })
    }
  }
  if (refusals === null) return null
  // A refused batch of one message fails its caller; one of several, for
  // what a record holds, is sent again apart.
  let apart = null
  for (const [key, list] of refusals) {
    const error = refused.get(key)
    if (list.length > 1 && RECORD_REFUSED.has(error.type)) {
      // Each refused partition's first half in one request, its second
      // half in the next: two requests per split, whatever the partitions.
      apart ??= [[], []]
      const mid = list.length >>> 1
      for (let i = 0; i < list.length; i++) {
        list[i].refusals++
        apart[i < mid ? 0 : 1].push(list[i])
      }
    } else {
      for (const item of list) item.written = new Unwritten(error, mayBeWritten(item))
    }
  }
  return apart
}

// A message its partition's leader may have appended (item.maybeAt), at an
// attempt: held back (true) while its read-back has no answer and has time
// left; else found there (written, with its own record's offset), or not
// found, or not seen in time (to send again, as any other).
function inDoubt (item, now) {
  const { at, place } = item.maybeAt
  if (at.seen === null && now < at.until) return true
  if (at.seen === 'written') item.written = atPosition(at.own ??= freezeEntry(at.entry), place)
  item.maybeAt = null
  return false
}

// When the read-backs that hold messages of `items` back end at the latest:
// 0 (at once) if one has its answer already (it came while the attempt that
// held them was out).
function readBackEnd (items) {
  let end = Infinity
  for (let i = 0; i < items.length; i++) {
    const at = items[i].written === null ? items[i].maybeAt?.at : undefined
    if (at === undefined) continue
    if (at.seen !== null) return 0
    end = Math.min(end, at.until)
  }
  return end
}

// After an attempt that left messages to read back: `batch` is woken once
// the answer is known.
function wakeOnReadBack (items, batch, wake) {
  for (let i = 0; i < items.length; i++) {
    const at = items[i].maybeAt?.at
    if (at !== undefined && at.seen === null) at.wake ??= () => wake(batch)
  }
}

module.exports = { Item, settleAttempt, allSettled, fates, inDoubt, readBackEnd, wakeOnReadBack }
