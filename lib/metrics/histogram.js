'use strict'

const { ERR_IO_HYGIENE_INVALID_ARGUMENT } = require('../core/errors')

// A latency histogram with power-of-two buckets, as DTrace's quantize: values
// are milliseconds, bucketed by microseconds. Bucket 0 counts values under
// 1 µs; bucket k (1..32) counts [2^(k-1), 2^k) µs; bucket 33 counts 2^32 µs
// (71 minutes) and beyond. record() reads no clock and allocates nothing: the
// caller passes the duration it already measured.
const BUCKETS = 34

class Histogram {
  buckets = new Float64Array(BUCKETS)
  count = 0
  sumMs = 0
  maxMs = 0

  record (ms) {
    const us = ms * 1000
    // `us >= 1` also refuses NaN and negatives; they count in bucket 0.
    const i = us >= 1 ? (us < 4294967296 ? 32 - Math.clz32(us) : BUCKETS - 1) : 0
    this.buckets[i]++
    this.count++
    if (us > 0) this.sumMs += ms
    if (ms > this.maxMs) this.maxMs = ms
  }

  // record(0) for a path that reads no clock (a cache answer): a count in
  // bucket 0, with nothing to compare or sum.
  recordZero () {
    this.buckets[0]++
    this.count++
  }

  // Adds another histogram (or its toJSON()), e.g. from another process.
  merge (other) {
    const buckets = other instanceof Histogram ? other.buckets : fromJsonBuckets(other)
    for (let i = 0; i < BUCKETS; i++) this.buckets[i] += buckets[i]
    this.count += other.count
    this.sumMs += other.sumMs
    if (other.maxMs > this.maxMs) this.maxMs = other.maxMs
    return this
  }

  // What was recorded since `earlier` (a copy() of this histogram).
  since (earlier) {
    const out = new Histogram()
    for (let i = 0; i < BUCKETS; i++) out.buckets[i] = this.buckets[i] - earlier.buckets[i]
    out.count = this.count - earlier.count
    out.sumMs = this.sumMs - earlier.sumMs
    out.maxMs = this.maxMs // the max of the window is not recoverable; this bounds it
    return out
  }

  copy () {
    return new Histogram().merge(this)
  }

  reset () {
    this.buckets.fill(0)
    this.count = 0
    this.sumMs = 0
    this.maxMs = 0
  }

  // The upper bound, in ms, of the bucket holding the p-th percentile (never
  // above the largest value recorded); 0 when empty.
  percentile (p) {
    if (typeof p !== 'number' || !(p >= 0 && p <= 100)) {
      throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('histogram.percentile()', `p must be a number from 0 to 100, got ${p}`)
    }
    if (this.count === 0) return 0
    const rank = Math.max(1, Math.ceil((p / 100) * this.count))
    let seen = 0
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.buckets[i]
      if (seen >= rank) return Math.min(upperBoundMs(i), this.maxMs)
    }
    /* c8 ignore next 2 */ // unreachable: the buckets sum to count
    return this.maxMs
  }

  // DTrace's quantize chart: one row per bucket from the one below the first
  // used to the one above the last, `@` bars scaled to 40 columns.
  render (title = '') {
    const head = `${title ? title + '\n' : ''}${'value (µs)'.padStart(16)}  ${'-'.repeat(13)} Distribution ${'-'.repeat(13)} count`
    if (this.count === 0) return `${head}\n${'(no samples)'.padStart(16)}`
    let first = 0
    while (this.buckets[first] === 0) first++
    let last = BUCKETS - 1
    while (this.buckets[last] === 0) last--
    const lines = [head]
    for (let i = Math.max(0, first - 1); i <= Math.min(BUCKETS - 1, last + 1); i++) {
      const n = this.buckets[i]
      const bar = '@'.repeat(Math.round((n / this.count) * 40))
      lines.push(`${String(lowerBoundUs(i)).padStart(16)} |${bar.padEnd(40)} ${n}`)
    }
    return lines.join('\n')
  }

  toJSON () {
    const buckets = {}
    for (let i = 0; i < BUCKETS; i++) if (this.buckets[i] !== 0) buckets[lowerBoundUs(i)] = this.buckets[i]
    return { count: this.count, sumMs: this.sumMs, maxMs: this.maxMs, buckets }
  }

  static from (json) {
    return new Histogram().merge(json)
  }
}

// Bucket i's lower bound in µs (DTrace's value column): 0, 1, 2, 4, ...
function lowerBoundUs (i) {
  return i === 0 ? 0 : 2 ** (i - 1)
}

function upperBoundMs (i) {
  return i === BUCKETS - 1 ? Infinity : 2 ** i / 1000
}

function fromJsonBuckets (json) {
  if (json === null || typeof json !== 'object' || typeof json.count !== 'number' ||
      typeof json.sumMs !== 'number' || typeof json.maxMs !== 'number' ||
      json.buckets === null || typeof json.buckets !== 'object') {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('histogram.merge()', 'expects a Histogram or its toJSON()')
  }
  const buckets = new Float64Array(BUCKETS)
  for (const [bound, n] of Object.entries(json.buckets)) {
    const us = Number(bound)
    const i = us === 0 ? 0 : Math.log2(us) + 1
    if (!Number.isInteger(i) || i < 0 || i >= BUCKETS || typeof n !== 'number') {
      throw new ERR_IO_HYGIENE_INVALID_ARGUMENT('histogram.merge()', `"${bound}" is not a bucket bound (0, 1, 2, 4, ... µs)`)
    }
    buckets[i] = n
  }
  return buckets
}

module.exports = { Histogram, BUCKETS, lowerBoundUs, upperBoundMs }
