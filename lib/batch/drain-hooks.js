'use strict'

// What a signal's drain (core/shutdown.js) asks of a batcher, or of the
// client built on one (the Kafka wrapper, the HTTP sink), from its public
// face: send without lingering, whether it was given work since last asked,
// whether it still holds any. `close(timeoutMs)` is the client's own.
function drainHooks (batcher, timeoutMs, close) {
  return {
    timeoutMs,
    close,
    flush: () => batcher.flush(),
    hurry: () => batcher.flush(),
    // Every push() adds one to exactly one of these, and a settled item only
    // moves from one to another.
    mark: () => {
      const s = batcher.stats()
      return s.flushed + s.rejected + s.dropped + s.queued + s.inFlight + s.waiting
    },
    busy: () => {
      const s = batcher.stats()
      return s.queued + s.inFlight + s.waiting > 0
    },
  }
}

module.exports = { drainHooks }
