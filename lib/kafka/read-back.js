'use strict'

// A partition batch that a leader appended at an offset and then answered
// with a retriable error (it stopped leading, or its replicas did not
// confirm in time, while the batch waited for them) may be in the log. For a
// producer without sequence numbers (kafkajs's default), sending it again
// could write it twice: it is read back there first, from the partition's
// leader. Found (every record the same, committed): written, at that offset.
// Something else there, or a log that ends before it: sent again. Not
// visible within a bounded wait: sent again, at the risk of a duplicate.
const { sameRecord } = require('./same-record')

// How long (ms, from the answer) a batch that may be written is looked for
// before it is sent again anyway: a leader that lacks it shows nothing there
// until another producer writes to the partition. On a three-node cluster
// with leaders moved under load, a batch that was there showed 0.3-2.1 s
// after the answer; looked for 1.1-1.4 s, some were missed and written twice.
const CONFIRM_WAIT_MS = 3000
// What a consumer reads from a partition's leader at the batch's offset.
const CONFIRM_MAX_BYTES = 1024 * 1024
// Between two reads in the background: one that saw part of the batch
// (the rest not committed yet), or found no leader or no answer.
const REREAD_MS = 100
// How long past its wait a read-back's last read is waited for by the
// batch it holds: that read waits at the broker up to the end of the wait,
// and a batch found by its answer is not to be sent again meanwhile. A read
// that gets no answer at all holds it no longer than this.
const LAST_READ_GRACE_MS = 1000

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref())

// `confirmWaitMs`: CONFIRM_WAIT_MS, for tests.
function createReadBack (cluster, confirmWaitMs = CONFIRM_WAIT_MS) {
  // The read waits at the broker until the batch is committed (minBytes 1),
  // up to `maxWaitTime`: 'written' (ours, all of it below the high
  // watermark), 'absent' (something else there, or a log that ends before
  // it) or 'unknown' (no leader, no answer, part of it visible yet).
  async function readAt ({ topic, partition, messages }, offset, maxWaitTime) {
    const leader = cluster.findTopicPartitionMetadata(topic).find((p) => p.partitionId === partition)?.leader
    if (!Number.isInteger(leader) || leader < 0) return 'unknown'
    const broker = await cluster.findBroker({ nodeId: leader })
    if (typeof broker.fetch !== 'function') return 'absent'
    const { responses } = await broker.fetch({
      replicaId: -1,
      isolationLevel: 0,
      maxWaitTime,
      minBytes: 1,
      maxBytes: CONFIRM_MAX_BYTES,
      topics: [{ topic, partitions: [{ partition, fetchOffset: String(offset), maxBytes: CONFIRM_MAX_BYTES }] }],
    })
    const answer = responses?.[0]?.partitions?.[0]
    if (answer === undefined) return 'unknown'
    const records = new Map()
    for (const record of answer.messages) records.set(Number(record.offset), record)
    let visible = 0
    for (let i = 0; i < messages.length; i++) {
      const record = records.get(offset + i)
      if (record === undefined) continue
      if (!sameRecord(messages[i], record)) return 'absent'
      visible++
    }
    // Read below the high watermark only: all of it there is committed.
    return visible === messages.length ? 'written' : 'unknown'
  }

  async function look (entry, { offset, until }) {
    try {
      return await readAt(entry, offset, Math.max(0, Math.ceil(until - performance.now())))
    } catch (error) {
      // A log that ends before the batch's offset does not hold it.
      return error?.name === 'KafkaJSOffsetOutOfRange' ? 'absent' : 'unknown'
    }
  }

  // Where an answer placed a batch: looked for until `until`.
  function placed (offset) {
    return { offset, until: performance.now() + confirmWaitMs }
  }

  // kafkajs's own calls (one send, retried inside kafkajs): the batches of
  // `pending` that may be in the log are looked for before the attempt
  // sends, each at once. Found: out of `pending`, into `results`. Not there,
  // or not seen by its `until`: sent again. Otherwise it waits for the next
  // attempt. Returns the entries that wait.
  async function confirm (pending, results) {
    const looking = []
    for (const [key, entry] of pending) if (entry.maybeAt !== null) looking.push(look(entry, entry.maybeAt).then((seen) => [key, entry, seen]))
    const held = new Set()
    for (const [key, entry, seen] of await Promise.all(looking)) {
      const at = entry.maybeAt
      if (seen === 'written') {
        pending.delete(key)
        results.push(writtenAt(entry, at.offset))
      } else if (seen === 'absent' || performance.now() >= at.until) {
        entry.maybeAt = null
      } else {
        held.add(entry)
      }
    }
    return held
  }

  // wrapProducer()'s calls (one attempt each, in the producer's one request
  // slot): looked for in the background, so that only the partition's own
  // later records wait, in its lane, while the producer goes on. What the
  // wrapper reads: `seen`, null until an answer ('written', 'absent' or
  // 'unknown', the last when not seen in time), and `entry`, the
  // RecordMetadata of the batch found; `wake`, set by the wrapper, is
  // called once it is known; `until`, when the wrapper stops waiting for it
  // (and sends the batch again): a read that outlives it no longer matters.
  function readBack (entry, at) {
    const state = { offset: at.offset, until: at.until + LAST_READ_GRACE_MS, seen: null, entry: null, wake: null }
    lookUntil(entry, at).then((seen) => {
      if (seen === 'written') state.entry = writtenAt(entry, at.offset)
      state.seen = seen
      if (state.wake !== null) state.wake()
    })
    return state
  }

  async function lookUntil (entry, at) {
    for (;;) {
      // Never after the producer disconnected: kafkajs would connect again.
      if (!cluster.isConnected()) return 'unknown'
      const seen = await look(entry, at)
      if (seen !== 'unknown' || performance.now() >= at.until) return seen
      // No leader, or none that answered: the metadata may have moved on
      // (shared with the producer's own refreshes).
      await cluster.refreshMetadata().catch(() => {})
      await pause(REREAD_MS)
    }
  }

  return { placed, confirm, readBack }
}

// A batch found at `offset`: its RecordMetadata, as the broker's answer
// would have given it.
function writtenAt ({ topic, partition }, offset) {
  return { topicName: topic, partition, errorCode: 0, baseOffset: String(offset), logAppendTime: '-1', logStartOffset: '-1' }
}

module.exports = { createReadBack, CONFIRM_WAIT_MS }
