'use strict'

// Whether a record read back holds what kafkajs wrote for `ours` (a key,
// value or header value: a string or a Buffer; a key or value null or
// undefined for null). A message with a timestamp of its own must have it;
// one without was stamped by kafkajs.
function sameBytes (ours, theirs) {
  if (ours === null || ours === undefined) return theirs === null
  return Buffer.isBuffer(theirs) && theirs.equals(typeof ours === 'string' ? Buffer.from(ours) : ours)
}

function sameHeaders (ours = {}, theirs) {
  const names = Object.keys(ours)
  if (names.length !== Object.keys(theirs).length) return false
  return names.every((name) => {
    const a = [ours[name]].flat()
    const b = [theirs[name]].flat()
    return a.length === b.length && a.every((value, i) => sameBytes(value, b[i]))
  })
}

function sameRecord (message, record) {
  return !record.isControlRecord && (!message.timestamp || String(record.timestamp) === String(message.timestamp)) &&
    sameBytes(message.key, record.key) && sameBytes(message.value, record.value) && sameHeaders(message.headers, record.headers)
}

module.exports = { sameRecord }
