'use strict'

// wrapProducer() over an @platformatic/kafka producer. Its send() is one
// Produce request per call, as kafkajs's is; here calls are batched on the
// batcher, one topic per request, and each caller gets what its own send()
// would have: a ProduceResult with its own partitions' offsets. The package
// is ESM-only and never loaded here: the wrapper needs only the instance.
const { createBatcher, queueOptions, drainHooks } = require('../batch')
const { onShutdown, offShutdown } = require('../core/shutdown')
const { within } = require('../core/within')
const { Unwritten, writtenOf, rejection, refuse, settledOne } = require('./outcomes')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT, ERR_IO_HYGIENE_ITEM_TOO_LARGE, ERR_IO_HYGIENE_CLOSED, ERR_IO_HYGIENE_TIMEOUT, describe } = require('../core/errors')

const kWrapped = Symbol.for('io-hygiene.kafka.wrapped.v1')
const kUnsettled = Symbol('an attempt that did not settle')
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/
// What a record costs besides its key, value and headers (an upper bound of
// its varints and attributes), for the byte caps.
const RECORD_OVERHEAD_BYTES = 32

// Its producer: send() and asStream(), and the idempotent producer's set-up.
function isPlatformaticProducer (producer) {
  return typeof producer.send === 'function' && typeof producer.asStream === 'function' &&
    typeof producer.initIdempotentProducer === 'function'
}

// send()'s options besides `messages`: those that must be equal within one
// request. Any other key @platformatic/kafka would refuse, for the whole
// request: refused here, for the call alone.
const REQUEST_KEYS = ['acks', 'compression', 'idempotent', 'autocreateTopics', 'repeatOnStaleMetadata', 'producerId', 'producerEpoch']

// @platformatic/kafka marks each error `canRetry`, and retries a request only
// when no error of its chain says false; after its own retries it gives up
// with what it last saw. We go on until each message's deadline on the same
// rule, with at least one error that says it may be retried.
// Each error of a chain (its `errors` and `cause`), once, at most 64: what
// both readers below walk.
function * chainOf (error) {
  const seen = new Set()
  const stack = [error]
  while (stack.length > 0 && seen.size < 64) {
    const e = stack.pop()
    if (e === null || typeof e !== 'object' || seen.has(e)) continue
    seen.add(e)
    yield e
    if (Array.isArray(e.errors)) stack.push(...e.errors)
    stack.push(e.cause)
  }
}

function isRetriable (error) {
  let retriable = false
  for (const e of chainOf(error)) {
    // A network error, a request timeout included (which it marks false):
    // the Java producer retries those, and so do we, until the deadline.
    if (e.code === 'PLT_KFK_NETWORK') {
      retriable = true
    } else if (e.canRetry === false) {
      return false
    } else if (e.canRetry === true) {
      retriable = true
    }
  }
  return retriable
}

// A Produce response that failed for some of its partitions fails its whole
// destination; the partitions it answered without error were written
// (their base offsets are in the response the error keeps). Requests carry
// one partition each once the topic's metadata is known, so only a first
// send() of several partitions can have some written and some not.
/* c8 ignore start -- a first send()'s partial failure: seen on a cluster whose leaders move */
function writtenInFailure (error, base) {
  for (const e of chainOf(error)) {
    const responses = e.response?.responses
    if (Array.isArray(responses)) {
      for (const topic of responses) {
        for (const partition of topic.partitionResponses) {
          if (partition.errorCode === 0 && typeof partition.baseOffset === 'bigint') base.set(`${topic.name}\0${partition.index}`, partition.baseOffset)
        }
      }
    }
  }
}
/* c8 ignore stop */

// A request that failed while it was being encoded, before any byte of it
// went out: every error under @platformatic/kafka's aggregate is Node's own
// (Buffer.concat's ERR_INVALID_ARG_TYPE, say), none a Kafka error.
// Its own retries of it nest the attempts' errors one level further down.
function isEncodingFailure (error, depth = 0) {
  if (Array.isArray(error?.errors) && error.errors.length > 0 && error.code === 'PLT_KFK_MULTIPLE' && depth < 4) {
    return error.errors.every((e) => isEncodingFailure(e, depth + 1))
  }
  return depth > 0 && (error instanceof TypeError || error instanceof RangeError) && !String(error.code).startsWith('PLT_KFK')
}

class Item {
  constructor (topic, message, bytes, request) {
    this.topic = topic
    // Handed to send() as is: its partition already chosen (see #partitionOf).
    this.message = message
    this.bytes = bytes
    this.request = request
    // Its offset once written ({ topic, partition, offset }), kept across a
    // retry of its batch, which then skips it.
    this.written = null
    this.sends = 0
    this.refusals = 0 // of those sends, answered "nothing appended" (outcomes.js writtenOf)
  }
}

function sizeOf (item) {
  return item.bytes
}

function groupOf (item) {
  return item.request.key
}

function byteLength (value) {
  if (value === undefined || value === null) return 0
  if (typeof value === 'string') return Buffer.byteLength(value)
  if (ArrayBuffer.isView(value)) return value.byteLength
  // A value its serializers turn into bytes: its size is unknown until then.
  return 0
}

class PlatformaticProducer {
  #producer
  #batcher
  #maxBatchBytes
  #attemptTimeoutMs
  #inFlight = 0
  // The attempts under way (each bounded by #bounded): close() waits for
  // them once the producer is closed, which ends them.
  #sending = new Set()
  #kicked = false
  #unwritten = 0

  constructor (producer, options) {
    this.#producer = producer
    this.#maxBatchBytes = options.maxBatchBytes
    // A second past the deadline of every message an attempt carries: they
    // are rejected by then, with ERR_IO_HYGIENE_DELIVERY_TIMEOUT.
    this.#attemptTimeoutMs = Math.min(options.deliveryTimeoutMs + 1_000, 2 ** 31 - 1)
    this[kWrapped] = true
    // One request in flight per topic (a group), so each partition's order
    // is call order, also across retries; topics apart, so that a topic the
    // cluster does not know (its metadata fails the whole request) fails
    // only its own callers.
    this.#batcher = createBatcher({
      ...queueOptions(options),
      name: 'kafka',
      send: (items) => this.#send(items),
      flushWhenIdle: false,
      concurrency: 16,
      sizeOf,
      groupOf,
      isRetriable,
    })
    if (options.flushOnSignals) onShutdown(this, drainHooks(this.#batcher, options.shutdownTimeoutMs, (timeoutMs) => this.close({ timeoutMs })))
  }

  get closed () {
    return this.#batcher.closed
  }

  // @platformatic/kafka's send(options, callback?): queued, and resolved with
  // the ProduceResult of the call's own messages once all are acknowledged.
  send (options, callback) {
    const pending = this.#enqueue(options)
    if (typeof callback !== 'function') return pending
    pending.then((result) => callback(null, result), callback)
  }

  #enqueue (options) {
    const method = 'send()'
    if (this.#batcher.closed) return refuse(new ERR_IO_HYGIENE_CLOSED(`${method}: the kafka producer`))
    // Each own property read once: a getter's second answer cannot differ.
    const messages = options?.messages
    if (options === null || typeof options !== 'object' || !Array.isArray(messages)) {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, '"messages" must be an array'))
    }
    let requestOptions = null
    let requestKey = ''
    let partitioner
    for (const key of Object.keys(options)) {
      if (key === 'messages') continue
      if (key === 'partitioner') {
        partitioner = options.partitioner
        continue
      }
      if (!REQUEST_KEYS.includes(key)) return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `unknown option ${describe(key)}`))
      const value = options[key]
      if (value === undefined) continue
      requestOptions ??= {}
      requestOptions[key] = value
      requestKey += `${key}=${String(value)}|`
    }
    if (partitioner !== undefined && typeof partitioner !== 'function') {
      return refuse(new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, '"partitioner" must be a function'))
    }
    const items = []
    for (let m = 0; m < messages.length; m++) {
      const item = this.#itemOf(method, messages[m], partitioner, requestOptions, requestKey)
      if (!(item instanceof Item)) return refuse(item)
      items.push(item)
    }
    if (items.length === 0) return Promise.resolve({ offsets: [] })
    const pending = items.length === 1
      ? this.#batcher.push(items[0]).then(this.#resultOne, (error) => this.#rejectOne(error, items[0]))
      : Promise.allSettled(this.#batcher.pushAll(items)).then((outcomes) => this.#settleCall(outcomes, items))
    if (this.#inFlight === 0 && !this.#kicked) {
      // Nothing in flight: send now, in a microtask, so that the rest of a
      // synchronous burst still joins the request.
      this.#kicked = true
      this.#batcher.flush().then(this.#unkick)
    }
    return pending
  }

  // The message's copy (each field read once), checked as
  // @platformatic/kafka would check the whole request, or the error.
  #itemOf (method, source, partitioner, requestOptions, requestKey) {
    if (source === null || typeof source !== 'object') return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, 'each message must be an object')
    const topic = source.topic
    if (typeof topic !== 'string' || !TOPIC_NAME.test(topic)) {
      return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"topic" must be a valid Kafka topic name, got ${describe(topic)}`)
    }
    const value = source.value
    if (value === undefined) return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `a message for topic "${topic}" has no "value"`)
    const message = { topic, key: source.key, value }
    const headers = source.headers
    if (headers !== undefined) {
      if (headers === null || typeof headers !== 'object') return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"headers" of a message for topic "${topic}" must be a Map or an object`)
      message.headers = headers instanceof Map ? new Map(headers) : { ...headers }
    }
    const timestamp = source.timestamp
    if (timestamp !== undefined) {
      if (typeof timestamp !== 'bigint') return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"timestamp" of a message for topic "${topic}" must be a bigint`)
      message.timestamp = timestamp
    }
    if (source.metadata !== undefined) message.metadata = source.metadata
    const partition = source.partition
    if (partition !== undefined && (!Number.isSafeInteger(partition) || partition < 0)) {
      return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `"partition" of a message for topic "${topic}" must be a non-negative integer, got ${describe(partition)}`)
    }
    // Chosen now, by the producer's own partitioner (or the call's), as its
    // send() would: the message then goes to that partition whatever request
    // carries it, and its offset can be read from that partition's answer.
    message.partition = partition
    try {
      message.partition = this.#partitionOf(message, partitioner)
    } catch (cause) {
      return new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, `a message for topic "${topic}" could not be partitioned`, { cause })
    }
    let bytes = RECORD_OVERHEAD_BYTES + byteLength(message.key) + byteLength(message.value)
    if (headers !== undefined) {
      for (const [k, v] of headers instanceof Map ? headers : Object.entries(headers)) bytes += byteLength(k) + byteLength(v) + 2
    }
    if (bytes > this.#maxBatchBytes) return new ERR_IO_HYGIENE_ITEM_TOO_LARGE(`${method} message for topic "${topic}"`, bytes, this.#maxBatchBytes)
    return new Item(topic, message, bytes, this.#requestOf(topic, requestOptions, requestKey))
  }

  #partitionOf (message, partitioner) {
    if (message.partition !== undefined) return message.partition
    const options = { messages: [message] }
    if (partitioner !== undefined) options.partitioner = partitioner
    const [partitions] = this.#producer.getSendTopicPartitions(options).values()
    const [partition] = partitions
    return partition
  }

  #requestOf (topic, options, key) {
    return { key: options === null ? topic : `${topic}|${key}`, topic, options }
  }

  #unkick = () => {
    this.#kicked = false
  }

  #resultOne = (value) => {
    value = settledOne(value)
    return value.offset === undefined ? value : { offsets: [value] }
  }

  #rejectOne (error, item) {
    // Written by an attempt that failed later for the rest of its batch, which
    // then outlived its deadline: a cluster's failure, not seen on one broker.
    /* c8 ignore next */
    if (item.written !== null) return this.#resultOne(item.written)
    throw rejection(error, writtenOf(item))
  }

  // A call of several messages resolves when all were written, with one
  // offset per partition (its first message's there), as its own send() would.
  #settleCall (outcomes, items) {
    let failure = null
    let written = false
    let some = false
    const offsets = []
    const seen = new Set()
    let unwritableNodes = null
    for (let i = 0; i < outcomes.length; i++) {
      const item = items[i]
      const outcome = outcomes[i]
      const value = outcome.status === 'fulfilled' ? outcome.value : item.written
      if (value instanceof Unwritten || value === null) {
        failure ??= value?.error ?? outcome.reason
        if ((value?.written ?? writtenOf(item)) !== false) written = 'unknown'
      } else if (value.offset === undefined) {
        some = true
        unwritableNodes = value.unwritableNodes
      } else {
        some = true
        const id = `${value.topic}\0${value.partition}`
        if (!seen.has(id)) {
          seen.add(id)
          offsets.push(value)
        }
      }
    }
    if (failure !== null) throw rejection(failure, some ? true : written)
    return unwritableNodes !== null ? { unwritableNodes } : { offsets }
  }

  #send (items) {
    this.#inFlight++
    this.#kicked = false
    const sending = this.#produce(items).finally(() => {
      this.#inFlight--
      this.#sending.delete(sending)
    })
    this.#sending.add(sending)
    return sending
  }

  async #produce (items) {
    const sent = []
    for (const item of items) {
      if (item.written !== null) continue
      item.sends++
      sent.push(item)
    }
    const { options } = items[0].request
    // One send() per partition: @platformatic/kafka retries a request whole,
    // to the node that leads its first message's partition, and its
    // idempotent producer without end; a request of several partitions whose
    // leaders parted meanwhile is refused (NOT_LEADER_OR_FOLLOWER) for the
    // others over and over, until they lead together again. A partition's
    // own request always follows its leader.
    const parts = await Promise.all(this.#partsOf(sent).map((part) => this.#sendPart(part, options)))
    let all = true
    let failure = null
    let result
    for (const part of parts) {
      if (!this.#settle(part.items, part.result, part.failure, options?.acks)) all = false
      if (part.failure === null) continue
      // A failure for good decides what happens next; else the first one.
      // Two partitions failing in one attempt: a cluster's failure.
      /* c8 ignore next */
      if (failure === null || (isRetriable(failure) && !isRetriable(part.failure))) {
        failure = part.failure
        result = part.result
      }
    }
    if (failure === null) result = parts[0]?.result
    // Refused for good once its Produce requests were being made (a value
    // the encoder could not take, a record the broker refused): what was not
    // written goes again, each half alone, down to the message at fault.
    if (failure !== null && result !== undefined && sent.length > 1 && !isRetriable(failure)) return this.#produceApart(items, failure)
    if (failure === null) {
      if (all) return items.map((item) => item.written)
      /* c8 ignore start */
      // A resolved send() whose offsets miss a partition of its request: not
      // seen from a broker, and retried rather than taken for written.
      const error = new Error('the produce result did not cover every partition of its request')
      error.canRetry = true
      failure = error
    }
    /* c8 ignore stop */
    if (isRetriable(failure) || !items.some((item) => item.written !== null)) throw failure
    /* c8 ignore start */
    // Failed for good before its Produce requests, on a retry of a batch an
    // earlier attempt wrote part of: those resolve. A cluster's failure.
    return items.map((item) => {
      if (item.written !== null) return item.written
      this.#unwritten++
      return new Unwritten(failure, writtenOf(item))
    })
    /* c8 ignore stop */
  }

  // The items by their partition, as the producer's metadata numbers them;
  // one part while it has none for the topic (before its first send()).
  #partsOf (items) {
    const partitions = this.#producer.currentMetadata?.topics?.get(items[0]?.topic)?.partitionsCount
    if (!Number.isInteger(partitions) || partitions <= 0) return items.length === 0 ? [] : [items]
    const parts = new Map()
    for (const item of items) {
      const partition = item.message.partition % partitions
      let part = parts.get(partition)
      if (part === undefined) parts.set(partition, (part = []))
      part.push(item)
    }
    return [...parts.values()]
  }

  async #sendPart (items, options) {
    const messages = items.map((item) => item.message)
    const request = options === null ? { messages } : { ...options, messages }
    try {
      return { items, result: await this.#bounded(this.#producer.send(request)), failure: null }
    } catch (error) {
      // What the destinations that answered wrote. Without it the request
      // failed before any Produce request went out (its metadata, say).
      const result = error?.produced
      if ((result === undefined && error !== kUnsettled) || isEncodingFailure(error)) for (const item of items) item.sends--
      const failure = error === kUnsettled ? new ERR_IO_HYGIENE_TIMEOUT('an @platformatic/kafka send()', this.#attemptTimeoutMs) : error
      return { items, result, failure }
    }
  }

  async #produceApart (items, failure) {
    const mid = items.length >>> 1
    const out = []
    for (const half of [items.slice(0, mid), items.slice(mid)]) {
      let results
      try {
        results = await this.#produce(half)
      } catch (error) {
        // The half failed: its messages reject with its error (the message
        // at fault, alone; or a failure that is not theirs to retry alone).
        results = half.map((item) => item.written ?? new Unwritten(error, writtenOf(item)))
        this.#unwritten += results.filter((r) => r instanceof Unwritten).length
      }
      out.push(...results)
    }
    return out
  }

  // A send() that never calls back would hold its topic's queue for good
  // (one request in flight per topic): once every message it carries has
  // expired, it is given up on, as possibly written. Ref'd: a close() awaits it.
  #bounded (sending) {
    let timer
    const late = new Promise((resolve, reject) => { timer = setTimeout(reject, this.#attemptTimeoutMs, kUnsettled) })
    return Promise.race([sending, late]).finally(() => clearTimeout(timer))
  }

  // Marks each message of the attempt written, with its own offset: its
  // partition's base offset plus its place among the request's messages to
  // that partition (a partition's messages keep their order in a request).
  // Returns whether every one is.
  #settle (sent, result, failure, acks) {
    if (result === null || typeof result !== 'object') return false
    if (acks === 0 && failure === null) {
      // No answer to read: written as far as anyone can know, as plain send() says.
      const value = { unwritableNodes: result.unwritableNodes }
      for (const item of sent) item.written = value
      return true
    }
    const base = new Map()
    if (Array.isArray(result.offsets)) for (const entry of result.offsets) base.set(`${entry.topic}\0${entry.partition}`, entry.offset)
    if (failure !== null) writtenInFailure(failure, base)
    const metadata = this.#producer.currentMetadata
    const counts = new Map()
    let all = true
    for (const item of sent) {
      const partitions = metadata?.topics?.get(item.topic)?.partitionsCount
      // The metadata its send() just used; a partition as chosen otherwise.
      /* c8 ignore next */
      const partition = Number.isInteger(partitions) && partitions > 0 ? item.message.partition % partitions : item.message.partition
      const id = `${item.topic}\0${partition}`
      const offset = base.get(id)
      if (typeof offset !== 'bigint') {
        all = false
        continue
      }
      const index = counts.get(id) ?? 0
      counts.set(id, index + 1)
      item.written = { topic: item.topic, partition, offset: offset + BigInt(index) }
    }
    return all
  }

  // Sends everything queued without lingering; resolves when all of it has
  // been acknowledged or rejected.
  flush (options) {
    return this.#batcher.flush(options)
  }

  // Flushes, then closes the producer. `force` is @platformatic/kafka's own
  // (close its streams too); with `timeoutMs`, what is still pending then is
  // rejected with ERR_IO_HYGIENE_TIMEOUT, and so is close().
  async close (options) {
    offShutdown(this)
    const started = performance.now()
    let force = false
    let batcherOptions
    if (typeof options === 'boolean') {
      force = options
    } else if (options !== null && typeof options === 'object') {
      force = options.force === true
      batcherOptions = Object.hasOwn(options, 'timeoutMs') ? { timeoutMs: options.timeoutMs } : undefined
    } else if (options !== undefined) {
      throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('close()', 'the argument must be an object or a boolean (force)')
    }
    let failure = null
    try {
      await this.#batcher.close(batcherOptions)
    } catch (error) {
      failure = error
    }
    const timeoutMs = (failure === null || failure.code === 'ERR_IO_HYGIENE_TIMEOUT') ? batcherOptions?.timeoutMs : undefined
    const closing = this.#producer.close(force)
    if (typeof timeoutMs !== 'number') {
      await closing
    // @platformatic/kafka closes its sockets at once: no broker here makes
    // its close() outlast a deadline.
    /* c8 ignore next 3 */
    } else if (!await within(closing, timeoutMs - (performance.now() - started))) {
      failure ??= new ERR_IO_HYGIENE_TIMEOUT('kafka close()', timeoutMs)
    }
    // Its close() fails the requests it still had: their batches are
    // settled before close() resolves, so nothing holds a topic after it.
    await Promise.allSettled([...this.#sending])
    if (failure !== null) throw failure
  }

  stats () {
    const stats = this.#batcher.stats()
    stats.flushed -= this.#unwritten
    stats.rejected += this.#unwritten
    return stats
  }

  // Transactions are not batched: the queue is flushed first, and the caller
  // gets @platformatic/kafka's own transaction, whose sends go straight to it.
  async beginTransaction (options) {
    await this.#batcher.flush()
    return this.#producer.beginTransaction(options)
  }

  asStream (options) {
    return this.#producer.asStream(options)
  }

  metadata (options, callback) {
    return this.#producer.metadata(options, callback)
  }

  on (eventName, listener) {
    this.#producer.on(eventName, listener)
    return this
  }

  once (eventName, listener) {
    this.#producer.once(eventName, listener)
    return this
  }

  off (eventName, listener) {
    this.#producer.off(eventName, listener)
    return this
  }
}

function wrapPlatformatic (producer, options) {
  /* c8 ignore next 3 -- an @platformatic/kafka older than getSendTopicPartitions(); only the installed one is tested */
  if (typeof producer.getSendTopicPartitions !== 'function') {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('wrapProducer()', 'an @platformatic/kafka producer needs getSendTopicPartitions() (@platformatic/kafka 2.x)')
  }
  return new PlatformaticProducer(producer, options)
}

module.exports = { isPlatformaticProducer, wrapPlatformatic, isRetriable }
