'use strict'

const { dateNow } = require('../core/timers')

// Request and response headers in every form undici accepts.

// How undici's request reads `headers`: an array is always the flat form
// [name, value, ...]; an object is read as pairs when it has an iterator of
// its own or one from a prototype other than Object.prototype (a Map, a
// Headers, a generator), else by its own keys, so that a polluted
// Object.prototype[Symbol.iterator] changes nothing.
function isPairs (headers) {
  if (Object.hasOwn(headers, Symbol.iterator)) return true
  const proto = Object.getPrototypeOf(headers)
  return proto !== null && proto !== Object.prototype && typeof headers[Symbol.iterator] === 'function'
}

// Pairs read once from the caller's iterable, handed on as an iterable of
// pairs again: undici then checks and reads them as it would have read the
// caller's (an array would be taken for the flat form).
class HeaderPairs {
  constructor (pairs) {
    this.pairs = pairs
  }

  [Symbol.iterator] () {
    return this.pairs[Symbol.iterator]()
  }
}

// The value of header `name` (lower case) in any form undici accepts: a plain
// object, a flat [name, value, ...] array, or pairs read by headerList().
function headerValue (headers, name) {
  if (headers == null) return undefined
  if (headers instanceof HeaderPairs) {
    for (const pair of headers.pairs) {
      if (Array.isArray(pair) && String(pair[0]).toLowerCase() === name) return String(pair[1])
    }
    return undefined
  }
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) {
      if (String(headers[i]).toLowerCase() === name) return String(headers[i + 1])
    }
    return undefined
  }
  for (const key of Object.keys(headers)) {
    if (key.toLowerCase() === name) return String(headers[key])
  }
  return undefined
}

// An iterable of pairs (a Map, Headers, a generator) may be read once only:
// read it into pairs that undici, each retry and headerValue() can all read.
function headerList (headers) {
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers) || !isPairs(headers)) return headers
  return new HeaderPairs(Array.from(headers))
}

// Retry-After in ms, from delay-seconds or an HTTP-date (a date past is 0);
// null when absent or invalid. Headers may come as arrays: the first counts.
function parseRetryAfter (value, now = dateNow()) {
  if (Array.isArray(value)) value = value[0]
  if (typeof value !== 'string') return null
  value = value.trim()
  if (/^\d+$/.test(value)) return Number(value) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

module.exports = { headerValue, headerList, parseRetryAfter }
