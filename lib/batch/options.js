'use strict'

const { integer, timerMs, boolean, oneOf, func, string, nullable } = require('../core/options')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT, ERR_IO_HYGIENE_CONFLICTING_OPTIONS, ERR_IO_HYGIENE_ITEM_TOO_LARGE, ERR_IO_HYGIENE_DELIVERY_TIMEOUT, ERR_IO_HYGIENE_QUEUE_FULL } = require('../core/errors')

// Defaults, and why, are in docs/batch.md's options table; a test keeps the two equal.
const spec = {
  send: { default: null, check: nullable(func()) },
  name: { default: 'batch', check: string() },
  lingerMs: { default: 5, check: timerMs(0) },
  maxBatchItems: { default: 500, check: integer(1) },
  maxBatchBytes: { default: 1_000_000, check: integer(1) },
  maxQueuedItems: { default: 100_000, check: integer(1) },
  maxQueuedBytes: { default: 33_554_432, check: integer(1) },
  overflow: { default: 'wait', check: oneOf('wait', 'reject') },
  maxQueueWaitMs: { default: 60_000, check: timerMs(0) },
  maxWaitingItems: { default: 10_000, check: integer(0) },
  maxWaitingBytes: { default: 8_388_608, check: integer(0) },
  concurrency: { default: 1, check: integer(1, 1_000) },
  deliveryTimeoutMs: { default: 120_000, check: timerMs(1) },
  retryBackoffMs: { default: 100, check: timerMs(0) },
  maxRetryBackoffMs: { default: 1_000, check: timerMs(0) },
  flushWhenIdle: { default: true, check: boolean() },
  flushOnSignals: { default: false, check: boolean() },
  shutdownTimeoutMs: { default: 10_000, check: timerMs(0) },
  sizeOf: { default: sizeOfBytes, check: func() },
  groupOf: { default: null, check: nullable(func()) },
  isRetriable: { default: isRetriableFlag, check: func() },
}

// The options a sink built on the batcher (createHttpSink, wrapProducer) takes
// under the same names and hands on as they are.
const QUEUE_KEYS = [
  'lingerMs', 'maxBatchItems', 'maxBatchBytes', 'maxQueuedItems', 'maxQueuedBytes', 'overflow', 'maxQueueWaitMs',
  'maxWaitingItems', 'maxWaitingBytes', 'deliveryTimeoutMs', 'retryBackoffMs', 'maxRetryBackoffMs',
]

function queueOptions (o) {
  const out = {}
  for (const key of QUEUE_KEYS) out[key] = o[key]
  return out
}

const waitSpec = { timeoutMs: { default: null, check: nullable(timerMs(0)) } }

// Strings, Buffers and typed arrays measure themselves; anything else needs
// a sizeOf, or the byte caps would be fiction.
function sizeOfBytes (item) {
  if (typeof item === 'string') return Buffer.byteLength(item)
  if (ArrayBuffer.isView(item) || item instanceof ArrayBuffer) return item.byteLength
  throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('batcher.push()', 'the default sizeOf measures strings, Buffers and typed arrays; pass a sizeOf option for other items')
}

// kafkajs (and others) mark transient errors with `retriable: true`.
function isRetriableFlag (err) {
  return err !== null && typeof err === 'object' && err.retriable === true
}

// The limits that must agree, for the batcher and for sinks that take the
// same option names (createHttpSink), so each refuses them at its own call.
function checkLimits (where, o) {
  if (o.maxBatchItems > o.maxQueuedItems) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `maxBatchItems (${o.maxBatchItems}) must not exceed maxQueuedItems (${o.maxQueuedItems})`)
  }
  if (o.maxBatchBytes > o.maxQueuedBytes) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `maxBatchBytes (${o.maxBatchBytes}) must not exceed maxQueuedBytes (${o.maxQueuedBytes})`)
  }
  if (o.retryBackoffMs > o.maxRetryBackoffMs) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `retryBackoffMs (${o.retryBackoffMs}) must not exceed maxRetryBackoffMs (${o.maxRetryBackoffMs})`)
  }
}

// What sizeOf() said of one item, if push() must refuse it; else null.
function itemSizeError (what, o, bytes, method) {
  if (!Number.isSafeInteger(bytes) || bytes < 0) {
    return new ERR_IO_HYGIENE_INVALID_ARGUMENT(`${what} ${method}`, `sizeOf() must return a non-negative integer, got ${String(bytes)}`)
  }
  if (bytes > o.maxBatchBytes) return new ERR_IO_HYGIENE_ITEM_TOO_LARGE(what, bytes, o.maxBatchBytes)
  return null
}

function deliveryTimeoutError (ms, cause) {
  return cause === undefined ? new ERR_IO_HYGIENE_DELIVERY_TIMEOUT(ms) : new ERR_IO_HYGIENE_DELIVERY_TIMEOUT(ms, { cause })
}

function queueFullError (what, held, heldBytes, o, why) {
  return new ERR_IO_HYGIENE_QUEUE_FULL(`${what} holds ${held} items / ${heldBytes} bytes ` +
    `(maxQueuedItems ${o.maxQueuedItems}, maxQueuedBytes ${o.maxQueuedBytes}); ${why}`)
}

// The sizes and groups of pushAll()'s items, and the first refusal (a
// bad size, or what sizeOf/groupOf threw), if any.
function measure (what, o, items) {
  const n = items.length
  const sizes = new Array(n)
  const keys = new Array(n)
  let bytes = 0
  let err = null
  try {
    for (let i = 0; i < n && err === null; i++) {
      sizes[i] = o.sizeOf(items[i])
      if (o.groupOf !== null) keys[i] = o.groupOf(items[i])
      err = itemSizeError(what, o, sizes[i], 'pushAll()')
      bytes += sizes[i]
    }
  } catch (thrown) {
    err = thrown
  }
  return { sizes, keys, bytes, err }
}

// The caller's isRetriable(), which must not throw into the batcher.
function isRetriable (o, err) {
  try {
    return o.isRetriable(err) === true
  } catch {
    return false
  }
}

module.exports = { spec, waitSpec, QUEUE_KEYS, queueOptions, checkLimits, itemSizeError, deliveryTimeoutError, queueFullError, measure, isRetriable }
