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

// An iterable body of a known small length, sent as it comes on every
// attempt, with a copy of what has been read kept so that a retry can send
// it again: the first attempt never waits for the body's end, so a body that
// sends its rest only after the response starts, or that reports upload
// progress, behaves as it does without io-hygiene.
// The length is the caller's word only: a body that runs past it fails as
// undici fails it (a length mismatch) as soon as it does, so the copy never
// holds more than `length` bytes.
// Each attempt's iterable reads the copy, then the source, through one
// shared read: an attempt that ended while a read was under way leaves its
// chunk to the next attempt, never lost.
class BodyCopy {
  #source
  #length
  #LengthMismatch
  #iterator = null
  #chunks = []
  #bytes = 0
  #ended = false
  #error = null
  #read = null // the read under way
  #current = 0 // the attempt whose iterable may read
  #running = 0 // the attempt whose iterable undici is iterating
  #settled = false
  #reason = undefined // what ended the request, if it failed
  #closed = false
  #onError = null

  constructor (source, length, LengthMismatch) {
    this.#source = source
    this.#length = length
    this.#LengthMismatch = LengthMismatch
    // undici listens for a stream body's 'error' from the request's start:
    // a body that fails while its request waits for a connection fails the
    // request, not the process. Until the first read does, so does this.
    if (typeof source.on === 'function') {
      this.#onError = (err) => { this.#error ??= err }
      source.on('error', this.#onError)
    }
  }

  // The body for the next attempt.
  attempt () {
    return this.#iterate(++this.#current)
  }

  // No attempt follows: the source is ended as undici would have ended it,
  // once undici has let go of the last attempt's body, or now if a read of
  // it is under way (a stalled stream is destroyed, as undici destroys one).
  // `reason`: the request's error, if it failed: the stream is destroyed with
  // it, as undici destroys one, so that its own 'error' listeners and a
  // pipeline() feeding it see the abort or timeout, not a bare close.
  settle (reason) {
    this.#settled = true
    this.#reason = reason ?? undefined
    // As undici lets go of a body's 'error' when its request ends.
    if (this.#onError !== null) this.#source.removeListener('error', this.#onError)
    if (this.#running === 0 || this.#read !== null) this.#close()
  }

  async * #iterate (id) {
    this.#running = id
    try {
      let i = 0
      while (true) {
        // A later attempt took over: this one's body must not look complete.
        if (id !== this.#current) throw new Error('superseded by a retry')
        if (i < this.#chunks.length) {
          yield this.#chunks[i++]
        } else if (this.#error !== null) {
          throw this.#error
        } else if (this.#ended) {
          return
        } else {
          await (this.#read ??= this.#readOne())
        }
      }
    } finally {
      if (this.#running === id) this.#running = 0
      if (id === this.#current && this.#settled) this.#close()
    }
  }

  async #readOne () {
    try {
      this.#iterator ??= this.#source[Symbol.asyncIterator]()
      const { value, done } = await this.#iterator.next()
      if (done) {
        this.#ended = true
        return
      }
      this.#bytes += typeof value === 'string' ? Buffer.byteLength(value) : value.byteLength
      if (this.#bytes > this.#length) throw new this.#LengthMismatch()
      this.#chunks.push(value)
    } catch (err) {
      this.#error = err
      this.#close()
    } finally {
      this.#read = null
    }
  }

  #close () {
    if (this.#closed || this.#ended || this.#iterator === null) return
    this.#closed = true
    // As undici ends a body it stops sending: a stream is destroyed (at once,
    // even while a read of it waits), an iterator returned.
    if (typeof this.#source.destroy === 'function') {
      this.#source.destroy(this.#reason)
    } else {
      Promise.resolve(this.#iterator.return?.()).catch(() => {})
    }
  }
}

module.exports = { isReplayable, isIterable, BodyCopy }
