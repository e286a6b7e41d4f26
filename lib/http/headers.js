'use strict'

// Request and response headers in every form undici accepts.

// The value of header `name` (lower case) in any form undici accepts: a plain
// object, a flat [name, value, ...] array, or an iterable of pairs (which
// must have been made an array first, see headerList()).
function headerValue (headers, name) {
  if (headers == null) return undefined
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) {
      for (const [key, value] of headers) if (String(key).toLowerCase() === name) return String(value)
      return undefined
    }
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

// An iterable of pairs (a Map, Headers) can be read once only: read it into
// an array that undici and headerValue() can both read.
function headerList (headers) {
  if (headers == null || Array.isArray(headers) || typeof headers[Symbol.iterator] !== 'function') return headers
  return Array.from(headers)
}

// Retry-After in ms, from delay-seconds or an HTTP-date (a date past is 0);
// null when absent or invalid. Headers may come as arrays: the first counts.
function parseRetryAfter (value, now = Date.now()) {
  if (Array.isArray(value)) value = value[0]
  if (typeof value !== 'string') return null
  value = value.trim()
  if (/^\d+$/.test(value)) return Number(value) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}

module.exports = { headerValue, headerList, parseRetryAfter }
