'use strict'

// Request bodies as undici's dispatch() accepts them, and which can be sent again.

// A body that can be sent again as it is.
function isReplayable (body) {
  return body == null || typeof body === 'string' || ArrayBuffer.isView(body) || body instanceof ArrayBuffer ||
    body instanceof Blob
}

// A stream or async iterable: what fetch() hands the dispatcher for every body.
function isIterable (body) {
  return typeof body === 'object' && typeof body[Symbol.asyncIterator] === 'function'
}

// Reads an iterable body of a known small length into one Buffer, so that
// the request can be replayed. The length is the caller's word only: a body
// that runs past it fails as undici fails it (a length mismatch) as soon as
// it does, and is never held whole (the loop's exit ends the stream).
async function readBody (body, length, LengthMismatch) {
  const chunks = []
  let bytes = 0
  for await (const data of body) {
    const chunk = typeof data === 'string' ? Buffer.from(data) : data
    bytes += chunk.byteLength
    if (bytes > length) throw new LengthMismatch()
    chunks.push(chunk)
  }
  return Buffer.concat(chunks)
}

module.exports = { isReplayable, isIterable, readBody }
