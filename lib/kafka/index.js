'use strict'

const { createBatcher, createParkingBatcher, checkLimits, queueOptions, drainHooks, Retry } = require('../batch')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { within } = require('../core/within')
const { integer, timerMs, oneOf, boolean, resolve } = require('../core/options')
const { kafkajsPatchStatus, ensureKafkajsPatch, checkProducer } = require('./kafkajs-patch')
const { kOutcome, kPerRecord, kMuted } = require('./send-messages')
const { Lanes } = require('./lanes')
const { Item, settleAttempt, allSettled, fates, inDoubt, readBackEnd, wakeOnReadBack } = require('./fates')
const { NO_METADATA, Unwritten, writtenOf, rejection, refuse, settledOne, results, merge } = require('./outcomes')
const { copyMessage, Refused, refusal, isEncodingFailure, isBatchableTimestamp, compressedBound, RECORD_BATCH_OVERHEAD_BYTES, BROKER_MESSAGE_MAX_BYTES, RECORD_DELTA_SLACK_BYTES } = require('./message')
const { librdkafkaClientOf } = require('./librdkafka')
const { isPlatformaticProducer, wrapPlatformatic } = require('./platformatic')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT, ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER, ERR_IO_HYGIENE_ITEM_TOO_LARGE, ERR_IO_HYGIENE_CLOSED, ERR_IO_HYGIENE_NOT_CONNECTED, ERR_IO_HYGIENE_TIMEOUT, describe } = require('../core/errors')

// Defaults, and why, are in docs/kafka.md's options table; a test keeps the two equal.
const spec = {
  // librdkafka's linger.ms. Waited only while a request is in flight: the
  // first send after an idle moment goes at once.
  lingerMs: { default: 5, check: timerMs(0) },
  // librdkafka's batch.num.messages / batch.size: the records of one
  // request, at most what a default broker takes in one record batch
  // (message.max.bytes 1,048,588 less the batch's own 61 bytes), so that a
  // message a default broker accepts is sent (alone if it must).
  // 500 messages, chosen with bench/kafka.js's throughput scenario: with one
  // request in flight, the next batch fills while this one is at the broker
  // and goes out the moment it answers, while the callers it released run.
  // 1,000 went no faster (the callers then wait all in one batch, and their
  // work no longer overlaps a request) and stalled the event loop twice as
  // long per request (the grouping is linear in a batch's size with
  // kafkajs-patch.js, quadratic without it); 250 went slower. The batcher's
  // name, not librdkafka's: batch.num.messages bounds one partition's batch,
  // this one whole request.
  maxBatchItems: { default: 500, check: integer(1) },
  maxBatchBytes: { default: BROKER_MESSAGE_MAX_BYTES - RECORD_BATCH_OVERHEAD_BYTES, check: integer(1) },
  // The memory bound on everything not yet acknowledged.
  maxQueuedItems: { default: 100_000, check: integer(1) },
  maxQueuedBytes: { default: 64 * 1024 * 1024, check: integer(1) },
  // A full queue makes send() wait for room (back-pressure), or reject.
  overflow: { default: 'wait', check: oneOf('wait', 'reject') },
  // The Java producer's max.block.ms: how long send() waits for room.
  maxQueueWaitMs: { default: 60_000, check: timerMs(0) },
  maxWaitingItems: { default: 10_000, check: integer(0) },
  maxWaitingBytes: { default: 16 * 1024 * 1024, check: integer(0) },
  // The Java producer's delivery.timeout.ms, counted from the send() call
  // (waiting for room, linger, flight and retries included): long enough to
  // ride out a broker restart or a leader election.
  deliveryTimeoutMs: { default: 120_000, check: timerMs(1) },
  // The Java producer's retry.backoff.ms / retry.backoff.max.ms, between our
  // retries of a request that kafkajs gave up on.
  retryBackoffMs: { default: 100, check: timerMs(0) },
  maxRetryBackoffMs: { default: 1_000, check: timerMs(0) },
  // Kubernetes stops a pod with SIGTERM: send without lingering until the
  // application's sends stop, then (unless the application handles the
  // signal itself) disconnect before the signal does what it would have
  // done (lib/core/shutdown.js), so nothing queued is lost.
  flushOnSignals: { default: true, check: boolean() },
  // Bounds that drain, kafkajs's disconnect() included, inside Kubernetes'
  // default 30 s grace period.
  shutdownTimeoutMs: { default: 10_000, check: timerMs(1) },
}

const kWrapped = Symbol.for('io-hygiene.kafka.wrapped.v1')
const where = 'wrapProducer()'
// Kafka's own rule for topic names (kafka.common.Topic): an invalid name
// fails the whole request, so it is refused before it can share one.
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/

// kafkajs gives up on a request after its own retries (about 10 s with its
// default retry options) with KafkaJSNumberOfRetriesExceeded, or, when the
// cluster's reconnect ran out of retries, with a KafkaJSNonRetriableError
// whose cause is the retriable KafkaJSConnectionError. Either way what it gave
// up on was transient, so we go on until each message's deadline: an error
// is retriable when it or one of its causes says so.
function isRetriable (error) {
  if (error?.code === 'ERR_IO_HYGIENE_NOT_CONNECTED') return false
  for (let depth = 0; depth < 8 && error !== null && typeof error === 'object'; depth++) {
    if (error.name === 'KafkaJSNumberOfRetriesExceeded' || error.retriable === true) return true
    error = error.cause
  }
  return false
}

function requestGroup (acks, timeout, compression) {
  return { key: `${acks}|${timeout}|${compression}`, acks, timeout, compression }
}

// The batcher's bound on batches in flight: calls, for a producer sent per call.
const MAX_CALLS_IN_FLIGHT = 1_000

// Indexed by acks + 1 (acks is -1, 0 or 1).
const PLAIN_REQUESTS = [-1, 0, 1].map((acks) => requestGroup(acks, undefined, undefined))

// How the batcher settles a one-message call (push()): with the message's own
// RecordMetadata, or its own rejection, which says whether it may have been
// written. Settled by a request that failed later (written, or refused on its
// own), then out of time or closed while the rest of its batch was retried:
// its own fate stands.
const FATE = {
  resolved: (item, value) => settledOne(value),
  rejected: (item, error) => {
    // (kafka-unit's "written ... then out of time" test reaches it, but its
    // deadline can fire before or after the retry settles: which branch a
    // run takes depends on the machine.)
    /* c8 ignore next */
    if (item.written !== null) return settledOne(item.written)
    throw rejection(error, writtenOf(item))
  },
}

function sizeOf (item) {
  return item.bytes
}

function groupOf (item) {
  return item.request.key
}

class WrappedProducer {
  #producer
  #batcher
  #idempotent
  #busy = false // a request is in flight
  #kicked = false // a send found the producer idle and asked for a flush
  #maxBatchBytes
  #deliveryTimeoutMs
  #lastTopic = null
  // A producer of a kafkajs not corrected (loaded before io-hygiene, a copy
  // it did not find, IO_HYGIENE_KAFKAJS=0): its retry can acknowledge the
  // unwritten messages of a request that spans brokers, so each call goes in
  // a request of its own, as kafkajs sends it, never merged with another's.
  #perCall
  #calls = 0
  // copyMessage()'s answer of a record's size, reused.
  #size = { bytes: 0 }
  // Messages the batcher counts as flushed that reject (Unwritten): stats()
  // counts them as rejected.
  #unwritten = 0
  #lanes = new Lanes((batch) => this.#batcher.wake(batch))

  constructor (producer, options, corrected) {
    this.#producer = producer
    this.#perCall = !corrected
    this.#maxBatchBytes = options.maxBatchBytes
    this.#deliveryTimeoutMs = options.deliveryTimeoutMs
    this.#idempotent = typeof producer.isIdempotent === 'function' && producer.isIdempotent() === true
    this.events = producer.events
    this[kWrapped] = true
    // concurrency 1: one Produce request in flight for the whole producer, so
    // a partition never has two. Its order is call order, also across
    // retries (a retry is the same messages in the same order, sent before
    // anything newer), and the idempotent producer's sequence numbers stay
    // valid: kafkajs rolls them back on a failed request, so a retry reuses
    // them and the broker drops a copy it already wrote.
    // A batch to send again is set aside while the rest of the queue goes
    // on, and each partition's order is kept by its lane (lanes.js).
    // Per call: each call its own group, sent at once, as many in flight as
    // the batcher allows (kafkajs itself bounds none).
    this.#batcher = (this.#perCall ? createBatcher : createParkingBatcher)({
      ...queueOptions(options),
      name: 'kafka',
      send: (items, meta, batch) => this.#sendBatch(items, batch),
      // Lingering applies to messages that arrive while a request is in
      // flight; one that arrives when nothing is in flight is sent at once
      // (see #enqueue), so an idle service pays no linger.
      flushWhenIdle: this.#perCall,
      concurrency: this.#perCall ? MAX_CALLS_IN_FLIGHT : 1,
      sizeOf,
      groupOf,
      isRetriable,
    }, FATE)
    if (options.flushOnSignals) onShutdown(this, drainHooks(this.#batcher, options.shutdownTimeoutMs, (timeoutMs) => this.disconnect({ timeoutMs })))
  }

  connect () {
    return this.#producer.connect()
  }

  // Flushes first. With `timeoutMs`, what is still pending then is rejected
  // with ERR_IO_HYGIENE_TIMEOUT, and so is disconnect(). kafkajs's own
  // disconnect() (which waits out its requestTimeout, 30 s, for a stalled
  // broker) gets what is left of `timeoutMs`, then goes on alone.
  async disconnect (options) {
    offShutdown(this)
    const started = performance.now()
    // Each option read once (a getter's answer can change), by close() and here.
    if (options !== null && typeof options === 'object') options = { ...options }
    let failure = null
    try {
      await this.#batcher.close(options)
    } catch (error) {
      failure = error
    }
    // Read as close() read it, which refused a bad value before anything else.
    const timeoutMs = (failure === null || failure.code === 'ERR_IO_HYGIENE_TIMEOUT') && options != null && Object.hasOwn(options, 'timeoutMs') ? options.timeoutMs : null
    const disconnecting = this.#producer.disconnect()
    if (typeof timeoutMs !== 'number') {
      await disconnecting
    } else if (!await within(disconnecting, timeoutMs - (performance.now() - started))) {
      failure ??= new ERR_IO_HYGIENE_TIMEOUT('kafka disconnect()', timeoutMs)
    }
    if (failure !== null) throw failure
  }

  // Sends everything queued without lingering; resolves when all of it has
  // been acknowledged or rejected (each send() reports its own outcome).
  flush (options) {
    return this.#batcher.flush(options)
  }

  // The batcher's counters, whether kafkajs's producer runs with the
  // corrected grouping and retry ('patched'), or why not, and whether calls
  // are batched.
  stats () {
    const stats = this.#batcher.stats()
    stats.flushed -= this.#unwritten
    stats.rejected += this.#unwritten
    stats.kafkajsPatch = kafkajsPatchStatus()
    // Whether calls share requests (false: each call is sent as kafkajs sends it).
    stats.batching = !this.#perCall
    return stats
  }

  isIdempotent () {
    return this.#idempotent
  }

  on (eventName, listener) {
    return this.#producer.on(eventName, listener)
  }

  logger () {
    return this.#producer.logger()
  }

  // Not batched: kafkajs's own transaction, whose sends have a producer id of
  // their own, so the broker orders nothing between them and ours (as between
  // two producers). Like the Java producer's beginTransaction(), it waits for
  // no send: what is queued goes at once, unlingered.
  async transaction () {
    this.#batcher.sendNow()
    return this.#producer.transaction()
  }

  // kafkajs's send(): queued, and resolved with the RecordMetadata of its
  // topic once every message of the call is acknowledged.
  send (record) {
    if (record === null || typeof record !== 'object') {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT('send()', 'the argument must be an object'))
    }
    return this.#enqueue('send()', null, record.topic, record.messages, record.acks, record.timeout, record.compression)
  }

  // kafkajs's sendBatch(): the same, for several topics in one call.
  sendBatch (batch) {
    if (batch === null || typeof batch !== 'object' || !Array.isArray(batch.topicMessages)) {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT('sendBatch()', '"topicMessages" must be an array'))
    }
    return this.#enqueue('sendBatch()', batch.topicMessages, undefined, undefined, batch.acks, batch.timeout, batch.compression)
  }

  // One call: sendBatch()'s topicMessages, or send()'s topic and messages
  // (topicMessages null, so that send() allocates no wrapper for them).
  #enqueue (method, topicMessages, topic, messages, acks = -1, timeout, compression) {
    // Named for the caller: the batcher underneath is ours, not theirs.
    if (this.#batcher.closed) return refuse(new ERR_IO_HYGIENE_CLOSED(`${method}: the kafka producer`))
    // Everything is checked before the first message is queued: kafkajs
    // would fail the whole request, and with it every other caller's
    // messages, for one bad message.
    if (acks !== -1 && acks !== 0 && acks !== 1) {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"acks" must be -1, 0 or 1, got ${acks}`))
    }
    if (acks !== -1 && this.#idempotent) {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, 'the idempotent producer needs acks=-1 (the kafkajs default)'))
    }
    const request = this.#perCall ? { key: ++this.#calls, acks, timeout, compression } : this.#requestOf(acks, timeout, compression)
    // The usual call is one message: its record goes to the batcher alone,
    // and an array is made only for a second one.
    let first = null
    let items = null
    const entries = topicMessages === null ? 1 : topicMessages.length
    for (let e = 0; e < entries; e++) {
      if (topicMessages !== null) {
        const entry = topicMessages[e]
        const object = entry !== null && typeof entry === 'object'
        topic = object ? entry.topic : undefined
        messages = object ? entry.messages : undefined
      }
      if (!this.#isTopicName(topic)) {
        return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"topic" must be a valid Kafka topic name, got ${describe(topic)}`))
      }
      if (!Array.isArray(messages)) {
        return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"messages" for topic "${topic}" must be an array`))
      }
      for (let m = 0; m < messages.length; m++) {
        // A copy, each field read once: what kafkajs would refuse is refused
        // here, and no getter or Proxy can change a message once queued.
        const message = copyMessage(messages[m], this.#size)
        if (message instanceof Refused) return refuse(refusal(message, method, topic))
        const bytes = this.#size.bytes
        // pushAll() would refuse the whole call too; checked here so that the
        // error names the call and the topic, not the batcher. Compressed, the
        // broker sees fewer bytes: it decides, for this message alone.
        if (bytes > this.#maxBatchBytes && !compression) {
          return refuse(new ERR_IO_HYGIENE_ITEM_TOO_LARGE(`${method} message for topic "${topic}"`, bytes, this.#maxBatchBytes))
        }
        // Sized as alone; in a batch its deltas may take a few bytes more. One
        // that fits only alone is sent alone, in its place in call order, and
        // so is one whose timestamp kafkajs cannot subtract exactly from
        // another's (sized to fill a batch).
        const ts = message.timestamp
        const size = ts !== undefined && !isBatchableTimestamp(ts)
          ? this.#maxBatchBytes
          : Math.min(compression ? compressedBound(bytes) : bytes + RECORD_DELTA_SLACK_BYTES, this.#maxBatchBytes)
        const item = new Item(topic, message, size, request)
        if (first === null) {
          first = item
        } else {
          if (items === null) items = [first]
          items.push(item)
        }
      }
    }
    if (first === null) return Promise.resolve([])
    // One message (the usual send()): the batcher's own promise, settled by
    // FATE. A call of several is queued whole or refused whole (pushAll), and
    // settles once all of its messages have, so that its `written` is final.
    // Every rejection says whether the call's messages may have been written.
    const pending = items === null
      ? this.#batcher.push(first)
      : Promise.allSettled(this.#batcher.pushAll(items)).then((outcomes) => this.#settleCall(outcomes, items))
    if (!this.#busy && !this.#kicked && !this.#perCall) {
      // Nothing in flight: flush now. The batch is cut in a microtask, so the
      // rest of a synchronous burst (or of the callers a batch just released)
      // still joins it.
      this.#kicked = true
      this.#batcher.sendNow()
      // Cleared when the batch starts (its pump runs before this); and here
      // too, for a pump that found nothing to send (every push refused), or
      // the next send would linger.
      queueMicrotask(this.#unkick)
    }
    return pending
  }

  // A call of several messages resolves when all of them were written;
  // otherwise it rejects once all have settled, saying true when some are
  // known written.
  #settleCall (outcomes, items) {
    let failure = null
    let written = false
    const values = []
    for (let i = 0; i < outcomes.length; i++) {
      const item = items[i]
      const outcome = outcomes[i]
      const value = outcome.status === 'fulfilled' ? outcome.value : item.written
      if (value instanceof Unwritten) {
        failure ??= value.error
        if (value.written !== false) written = 'unknown'
      } else if (value === null) {
        failure ??= outcome.reason
        if (writtenOf(item) !== false) written = 'unknown'
      } else {
        values.push(value)
      }
    }
    if (failure === null) return merge(values)
    throw rejection(failure, values.length > 0 ? true : written)
  }

  #wake = (batch) => this.#batcher.wake(batch)

  // Held-back records go at the latest at their lanes' deadline or their read-back's end.
  #heldUntil (items) {
    return Math.min(this.#lanes.heldUntil(this.#deliveryTimeoutMs), readBackEnd(items))
  }

  #unkick = () => { this.#kicked = false }

  // Sends mostly repeat one topic: remember the last name that passed.
  #isTopicName (topic) {
    if (topic === this.#lastTopic) return true
    if (typeof topic !== 'string' || !TOPIC_NAME.test(topic)) return false
    this.#lastTopic = topic
    return true
  }

  // What must be equal within one Produce request. The usual sends (no
  // timeout, no compression) share one made up front.
  #requestOf (acks, timeout, compression) {
    if (timeout === undefined && compression === undefined) return PLAIN_REQUESTS[acks + 1]
    return requestGroup(acks, timeout, compression)
  }

  // The batcher's sink: one sendBatch for the batch, its messages grouped by
  // topic in call order. Each message's result is its own: the corrected
  // kafkajs says where each message went and what the broker answered for
  // its partition (kOutcome), and each caller resolves with its own
  // record's metadata or rejects for its own partition, topic or record.
  async #sendBatch (items, batch) {
    this.#busy = true
    this.#kicked = false
    let again = true
    try {
      const out = await this.#produce(items)
      again = false
      for (let i = 0; i < out.length; i++) {
        if (out[i] instanceof Unwritten) this.#unwritten++
        else if (out[i] instanceof Retry) again = true
      }
      return out
    } finally {
      this.#busy = false
      if (again && !this.#perCall) {
        this.#lanes.join(items, batch)
        wakeOnReadBack(items, batch, this.#wake)
      }
      if (this.#lanes.size > 0) this.#lanes.settled(items, batch, this.#wake)
    }
  }

  async #produce (items) {
    // Messages by topic, in call order; a batch mostly has one topic.
    const byTopic = new Map()
    const lanes = this.#lanes.size > 0 ? this.#lanes : null
    lanes?.attempt()
    let lastTopic = null
    let list = null
    let retry = false
    let held = false
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      if (item.written !== null || item.partition !== null) {
        retry = true
        // Maybe appended before an error: found where, or held until read back.
        const doubt = item.maybeAt !== null && inDoubt(item, performance.now())
        if (item.written !== null) continue
        // One without a key or a partition of its own that no attempt may
        // have written goes where the partitioner says now, as with kafkajs.
        if (item.partition !== null && item.sends === item.declines && item.message.key == null && item.message.partition === undefined) this.#lanes.leave(item, this.#wake)
        // Behind another batch's records in its partition, or its read-back: not sent now.
        if (doubt || (lanes !== null && item.partition !== null && lanes.holds(item))) {
          item.slot = -1
          held = true
          continue
        }
      }
      if (item.topic !== lastTopic) {
        lastTopic = item.topic
        list = byTopic.get(lastTopic)
        if (list === undefined) {
          list = []
          // Each message its own caller's (send-messages.js).
          list[kPerRecord] = true
          const muted = lanes?.mutedFor(lastTopic, item.token)
          if (muted === true) list = null
          else byTopic.set(lastTopic, list)
          if (muted instanceof Set) list[kMuted] = muted
        }
      }
      if (list === null) {
        item.slot = -1
        held = true
        continue
      }
      // A message the failed request assigned a partition goes to it again.
      item.sent = item.partition === null ? item.message : { ...item.message, partition: item.partition }
      item.sends++
      item.slot = list.length
      list.push(item.sent)
    }
    // Everything settled by an earlier request of this batch, or held back.
    if (byTopic.size === 0) return fates(items, undefined, held ? this.#heldUntil(items) : undefined)
    const { acks, timeout, compression } = items[0].request
    const request = { acks, topicMessages: Array.from(byTopic, ([topic, messages]) => ({ topic, messages })) }
    if (timeout !== undefined) request.timeout = timeout
    if (compression !== undefined) request.compression = compression
    let metadata
    try {
      metadata = await this.#producer.sendBatch(request)
    } catch (error) {
      // kafkajs refuses a send on a producer that is not connected before
      // anything goes out; retrying would only wait for deliveryTimeoutMs.
      if (error?.name === 'KafkaJSError' && error.message === 'The producer is disconnected') {
        for (const item of items) if (item.written === null && item.slot >= 0) item.sends--
        throw new ERR_IO_HYGIENE_NOT_CONNECTED('the kafka producer', { cause: error })
      }
      const outcome = error?.[kOutcome]
      const apart = outcome === null || outcome === undefined ? null : settleAttempt(items, byTopic, outcome, acks, this.#lanes)
      if (apart !== null) await this.#sendApart(apart)
      if (allSettled(items)) return fates(items)
      if (apart === null && isEncodingFailure(error)) return this.#produceApart(items, error)
      // Transient for the rest: what is settled settles now, the rest goes
      // again alone (the batcher's Retry).
      if (isRetriable(error) && items.some((item) => item.written !== null)) return fates(items, error)
      // A failure for good that settled some of the batch: those keep their
      // own fates, the others reject with it.
      // (What was held back, not in this request, goes again.)
      if (!isRetriable(error) && (held || items.some((item) => item.written !== null))) {
        let unwritten = null
        for (const item of items) if (item.written === null && item.slot >= 0) item.written = unwritten ??= new Unwritten(error)
        return fates(items, undefined, held ? this.#heldUntil(items) : undefined)
      }
      throw error
    }
    if (!Array.isArray(metadata)) metadata = NO_METADATA
    const outcome = metadata[kOutcome]
    if (outcome !== undefined) {
      const apart = settleAttempt(items, byTopic, outcome, acks, this.#lanes)
      if (apart !== null) await this.#sendApart(apart)
      if (allSettled(items)) return fates(items)
      // (Held back in its partition by kafkajs: kMuted.)
      held ||= items.some((item) => item.written === null && item.slot < 0)
      // Resolved, yet a partition not written (or a topic not known yet): it
      // goes again alone, as a retry, and the rest settles now.
      let error = outcome.retry ?? outcome.topics?.values().next().value
      // Held back: it goes when what holds it is done (or, with a failure of
      // its own, after a backoff).
      if (held) return fates(items, error ?? undefined, error == null ? this.#heldUntil(items) : undefined)
      if (error === null || error === undefined) {
        error = new Error('the produce response did not cover every partition of its request')
        error.retriable = true
      }
      if (items.some((item) => item.written !== null)) return fates(items, error)
      throw error
    }
    const out = results(items, metadata)
    // A retry: what an earlier attempt wrote keeps its own entries.
    if (retry) for (let i = 0; i < items.length; i++) if (items[i].written !== null) out[i] = items[i].written
    return out
  }

  // After an encoding failure (nothing of that request was written): each
  // half in a request of its own, down to the message at fault, refused alone.
  // What a half wrote is skipped if the batcher retries the batch.
  async #produceApart (items, failure) {
    if (items.length === 1) {
      if (items[0].written === null) items[0].written = new Unwritten(failure, false)
      return [items[0].written]
    }
    const mid = items.length >>> 1
    const out = []
    for (const half of [items.slice(0, mid), items.slice(mid)]) {
      const results = await this.#produce(half)
      for (let i = 0; i < half.length; i++) {
        if (!(results[i] instanceof Retry)) half[i].written = results[i]
        out.push(results[i])
      }
    }
    return out
  }

  // The messages of partition batches the broker refused for what they hold
  // (a record it will not take, a batch too large for the topic): each half
  // again, to the same partition, in a request of its own, as the Java
  // producer splits a batch and queues it again, down to the one message at
  // fault. The broker wrote nothing of a refused batch, so nothing is sent
  // twice, and the idempotent producer's sequence numbers were given back.
  // The second half waits for the first: if some of the first is still to
  // send, both go again later, in order, with the batch.
  async #sendApart (halves) {
    for (const half of halves) {
      const results = await this.#produce(half)
      let leftover = false
      for (let i = 0; i < half.length; i++) {
        if (results[i] instanceof Retry) leftover = true
        else half[i].written = results[i]
      }
      if (leftover) return
    }
  }
}

// Decorates a kafkajs producer (duck-typed: connect, disconnect, sendBatch,
// on, transaction, isIdempotent, logger, events) with a linger, one request
// per batch, a bounded queue, per-message delivery deadlines and retries
// that ride out a broker restart.
function wrapProducer (producer, options) {
  const resolved = resolve(where, spec, options)
  checkLimits(where, resolved)
  if (producer === null || typeof producer !== 'object') {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, 'the first argument must be a kafkajs producer (kafka.producer()) or an @platformatic/kafka Producer')
  }
  if (producer[kWrapped] === true) {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, 'this producer is already wrapped')
  }
  const client = librdkafkaClientOf(producer)
  if (client !== null) throw new ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER(where, client, 'is built on librdkafka, which batches each partition\'s messages itself (linger.ms, batch.size): send on it unwrapped, and set linger.ms for the latency an idle caller can pay (docs/kafka.md, "librdkafka producers")')
  if (isPlatformaticProducer(producer)) return wrapPlatformatic(producer, resolved)
  if (typeof producer.sendBatch !== 'function') {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, 'the first argument must be a kafkajs producer (kafka.producer()) or an @platformatic/kafka Producer')
  }
  ensureKafkajsPatch()
  return new WrappedProducer(producer, resolved, checkProducer(producer, where))
}

module.exports = { spec, wrapProducer, isRetriable }
