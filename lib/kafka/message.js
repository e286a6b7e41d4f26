'use strict'

// One message of a send(), copied once at the call: each field (a getter, a
// Proxy's trap) read once, and checked the way kafkajs 2.2.x's encoder would
// take it, so that what kafkajs refuses for one message is refused for its
// call alone, before it can share a request with other callers' messages.
//
// What kafkajs does with a message (src/producer, src/protocol/recordBatch,
// src/protocol/encoder.js), and so what the copy mirrors:
// - The record gets the message's own enumerable fields (`{ ...message }`);
//   the partitioner and the timestamps read through the prototype.
// - A key, a value and each header value are sized with Buffer.byteLength()
//   (a TypeError for anything but a string, a Buffer, an ArrayBuffer or a
//   view; for a header value, null and undefined too) and written as a Buffer
//   or as String(value). A view or ArrayBuffer that is not a Buffer is
//   written as its String(): when that differs in length from its bytes, the
//   record is malformed and the broker refuses the request.
// - Headers: each own enumerable name, one header per value, an array's
//   present items in order; `null` fails Object.keys().
// - A timestamp becomes a 64-bit integer (kafkajs's Long: BigInt() of it), a
//   falsy one is the time of the request. Copied as the integer kafkajs would
//   write, so that no caller's timestamp changes another's record.
// - A partition is grouped under String(partition) and looked up as
//   parseInt() of that: anything but a non-negative integer's own string is
//   lost (a symbol, -1, 'a') or fails the request (0.5).
const { ERR_IO_HYGIENE_INVALID_ARGUMENT } = require('../core/errors')

// A record batch's own bytes (Kafka's RECORD_BATCH_OVERHEAD) before its records.
const RECORD_BATCH_OVERHEAD_BYTES = 61
// The broker's default message.max.bytes, which bounds one record batch.
const BROKER_MESSAGE_MAX_BYTES = 1_048_588
// A record is sized as if alone (timestamp and offset deltas 0, one byte
// each); in a batch the deltas may take up to 10 and 4 bytes.
const RECORD_DELTA_SLACK_BYTES = 12

class Refused {
  constructor (detail, cause) {
    this.detail = detail
    this.cause = cause
  }
}

function zigzagSize (n) {
  let unsigned = n >= 0 ? 2 * n : -2 * n - 1
  // The usual sizes, one or two bytes, without the loop.
  if (unsigned < 0x80) return 1
  if (unsigned < 0x4000) return 2
  let bytes = 1
  while (unsigned >= 0x80) {
    bytes++
    unsigned = Math.floor(unsigned / 0x80)
  }
  return bytes
}

// A length-prefixed field of `size` bytes (-1: absent).
function fieldSize (size) {
  return zigzagSize(size) + Math.max(size, 0)
}

// What kafkajs writes for a key, value or header value: the value itself, or
// its String() when that is what kafkajs writes; a Refused when kafkajs would
// throw or write a malformed record. `nullable`: a key or value, where null
// (taken before this) writes -1; a header value must not be null.
function bytesOf (value, what, nullable) {
  if (typeof value === 'string' || Buffer.isBuffer(value)) return value
  let size
  try {
    size = Buffer.byteLength(value)
  } catch (error) {
    return new Refused(`${what} must be a string or a Buffer${nullable ? ', or null' : ''} (kafkajs refuses it)`, error)
  }
  // An ArrayBuffer or a view that is not a Buffer: kafkajs sizes its bytes
  // but writes its String().
  const text = String(value)
  if (Buffer.byteLength(text) === size) return text
  return new Refused(`${what} is a ${Object.prototype.toString.call(value).slice(8, -1)}, which kafkajs would write as a malformed record: pass a Buffer`)
}

// Of a string or a Buffer.
function sizeOf (value) {
  return typeof value === 'string' ? Buffer.byteLength(value) : value.length
}

// kafkajs's Long.fromValue(), as BigInt: what it writes for a timestamp.
function toLong (value) {
  if (typeof value === 'number') return Number.isNaN(value) ? 0n : BigInt(value)
  if (typeof value === 'string') {
    if (value.length === 0) throw new Error('empty string')
    if (value === 'NaN' || value === 'Infinity' || value === '+Infinity' || value === '-Infinity') return 0n
    return BigInt(value)
  }
  if (typeof value === 'bigint') return value
  return BigInt(value)
}

// The timestamp kafkajs would write for a message alone in its call (`t`
// set): a number (a string past 2^53, '0' for 0, which kafkajs would take as
// "now"), undefined for "now", or a Refused.
function timestampOf (t) {
  try {
    const now = Date.now()
    // kafkajs: (timestamp || now) - firstTimestamp, then a Long of it.
    const at = BigInt.asIntN(64, toLong(t) + toLong((t || now) - t))
    // A falsy timestamp that comes out as "now": kafkajs's own now, later.
    if (!t && at === BigInt(now)) return undefined
    if (at === 0n) return '0'
    return at >= -Number.MAX_SAFE_INTEGER && at <= Number.MAX_SAFE_INTEGER ? Number(at) : String(at)
  } catch (error) {
    return new Refused('"timestamp" must be a number of milliseconds or a string of one (kafkajs refuses it)', error)
  }
}

// The partition kafkajs would send to: a non-negative integer, or a Refused.
function partitionOf (p) {
  if (typeof p === 'number' && Number.isInteger(p) && p >= 0) return p
  if (typeof p !== 'symbol') {
    const text = String(p)
    const n = Number.parseInt(text, 10)
    if (n >= 0 && String(n) === text) return n
  }
  return new Refused('"partition" must be a non-negative integer (kafkajs would lose the message or fail its request)')
}

const hasOwn = Object.hasOwn
const objectProto = Object.prototype

// The size of the key or value the record gets, after putting in `copy`
// what kafkajs writes for it; or a Refused. The record gets own fields only
// (the partitioner reads one on a prototype, the record does not), so only
// an own one is checked; a string or a Buffer, the usual, needs no more (one
// on a prototype is counted though not written: a bound, not an exact size).
function ownField (copy, name, what) {
  const value = copy[name]
  if (typeof value === 'string') return Buffer.byteLength(value)
  if (Buffer.isBuffer(value)) return value.length
  if (value === null || value === undefined || !hasOwn(copy, name)) return -1
  const bytes = bytesOf(value, what, true)
  if (bytes instanceof Refused) return bytes
  copy[name] = bytes
  return sizeOf(bytes)
}

// The message's value as kafkajs reads it: the copy's own, else the
// message's (a getter, a non-enumerable field, a prototype's). When the
// copy's prototype is Object.prototype and that has no "value" (asked
// without reading it), the copy's value is its own or undefined: no
// own-property check is needed for the usual message.
function valueOf (copy, message, plain) {
  if (!plain || 'value' in objectProto) return hasOwn(copy, 'value') ? copy.value : message.value
  const value = copy.value
  return value !== undefined || hasOwn(copy, 'value') ? value : message.value
}

// The copy kafkajs gets for `message`, and its record's size when alone in a
// batch; or a Refused. `out` receives the size (one object per call, reused).
function copyMessage (message, out) {
  if (message === null || typeof message !== 'object') return new Refused('must be an object with a "value" (null for a tombstone)')
  const copy = { ...message }
  const proto = Object.getPrototypeOf(message)
  const plain = proto === objectProto || proto === null
  // A class's fields: the partitioner and the timestamps see them, as on the original.
  if (!plain) Object.setPrototypeOf(copy, proto)
  if (valueOf(copy, message, plain) === undefined) return new Refused('needs a "value" (null for a tombstone)')

  const keySize = ownField(copy, 'key', '"key"')
  if (keySize instanceof Refused) return keySize
  const valueSize = ownField(copy, 'value', '"value"')
  if (valueSize instanceof Refused) return valueSize
  let headerBytes = 0
  let count = 0
  const headers = copy.headers
  if (headers !== undefined && hasOwn(copy, 'headers')) {
    let names
    try {
      names = Object.keys(headers)
    } catch (error) {
      return new Refused('"headers" must be an object (kafkajs refuses null)', error)
    }
    const own = {}
    for (const name of names) {
      const value = headers[name]
      const nameSize = fieldSize(Buffer.byteLength(name))
      if (Array.isArray(value)) {
        // kafkajs maps the array: its present items, each once, in order.
        const items = []
        const length = value.length
        for (let i = 0; i < length; i++) {
          if (!(i in value)) continue
          const item = bytesOf(value[i], 'a header value', false)
          if (item instanceof Refused) return item
          items.push(item)
          headerBytes += nameSize + fieldSize(sizeOf(item))
        }
        count += items.length
        own[name] = items
      } else {
        const item = bytesOf(value, 'a header value', false)
        if (item instanceof Refused) return item
        own[name] = item
        headerBytes += nameSize + fieldSize(sizeOf(item))
        count++
      }
    }
    copy.headers = own
  }
  const t = copy.timestamp
  if (t !== null && t !== undefined) {
    const timestamp = timestampOf(t)
    if (timestamp instanceof Refused) return timestamp
    copy.timestamp = timestamp
  }
  const p = copy.partition
  if (p !== null && p !== undefined) {
    const partition = partitionOf(p)
    if (partition instanceof Refused) return partition
    copy.partition = partition
  }
  // attributes, timestamp delta, offset delta: one byte each when alone.
  const body = 3 + fieldSize(keySize) + fieldSize(valueSize) + zigzagSize(count) + headerBytes
  out.bytes = zigzagSize(body) + body
  return copy
}

// A request that failed because kafkajs could not encode a message, or the
// broker refused a record as malformed: send() refuses what kafkajs would
// not encode, so this is a message it did not foresee, and only its own
// caller may fail for it.
const MALFORMED = new Set(['INVALID_RECORD', 'CORRUPT_MESSAGE'])
function isEncodingFailure (error) {
  for (let depth = 0; depth < 8 && error !== null && typeof error === 'object'; depth++) {
    // Ours say what they mean (a refusal, a deadline), never this.
    if (typeof error.code === 'string' && error.code.startsWith('ERR_IO_HYGIENE_')) return false
    if (error.name === 'TypeError' || error.name === 'RangeError' || error.name === 'SyntaxError') return true
    if (error.name === 'KafkaJSProtocolError' && MALFORMED.has(error.type)) return true
    error = error.cause
  }
  return false
}

// The error for a refused message of `method`'s call to `topic`.
function refusal (refused, method, topic) {
  const detail = `a message for topic "${topic}": ${refused.detail}`
  return refused.cause === undefined
    ? new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, detail)
    : new ERR_IO_HYGIENE_INVALID_ARGUMENT(method, detail, { cause: refused.cause })
}

// kafkajs writes each record's timestamp as its difference from the first of
// its partition's batch (the smallest as text), computed in floating point:
// exact only while every difference stays within 2^53. A timestamp within
// 2^52 of 0 is exact beside any other such, and beside the request's "now";
// one past it (2^60, nanoseconds, -2^61; copyMessage() keeps those past 2^53
// as text) would shift its neighbours' timestamps: it fills a batch of its
// own, where it is the first and its difference is 0, as kafkajs sends it
// alone.
const TIMESTAMP_BATCHABLE = 2 ** 52
function isBatchableTimestamp (ts) {
  return typeof ts === 'number' ? ts <= TIMESTAMP_BATCHABLE && ts >= -TIMESTAMP_BATCHABLE : ts === '0'
}

// A compressed batch's size is known only once compressed, and data that does
// not compress grows: by at most a sixth and 32 bytes with Snappy, less with
// GZIP, LZ4 and ZSTD. A message is sized as the most its records can take
// compressed, so that a batch that fits uncompressed-worst-case fits the
// broker; one near or past maxBatchBytes fills a batch alone, where the
// broker sees exactly what kafkajs sends for it alone.
function compressedBound (bytes) {
  return bytes + Math.ceil(bytes / 6) + 64
}

module.exports = { copyMessage, Refused, refusal, isEncodingFailure, isBatchableTimestamp, compressedBound, RECORD_BATCH_OVERHEAD_BYTES, BROKER_MESSAGE_MAX_BYTES, RECORD_DELTA_SLACK_BYTES }
