'use strict'

// The transport-agnostic batcher. Contract (lib/kafka/ and lib/http/sink.js
// build on it; keep this comment true):
//
//   const b = createBatcher({ send, ...options })   // validates every option, throws coded errors
//
//   send(items, { group, attempt }) -> Promise<results[] | undefined>
//     The sink. `items` is a fresh array in push order; all share one `group`
//     (the value of groupOf(), or undefined). `attempt` starts at 1 and grows
//     on each retry of the same batch (a retry resends the same items, minus
//     any that expired, before anything pushed after them). Resolve with an
//     array (results[i] settles items[i]'s push) or with undefined (every push
//     resolves with undefined); anything else rejects the batch with
//     ERR_IO_HYGIENE_INVALID_RESULT. Throw/reject to fail the whole batch:
//     it is retried after a backoff while isRetriable(err) is true and the
//     item is younger than deliveryTimeoutMs; otherwise each push rejects with
//     `err` itself (not wrapped) or, past its deadline, with
//     ERR_IO_HYGIENE_DELIVERY_TIMEOUT whose `cause` is the last error.
//     A result that is a `new Retry(err)` (exported) fails its item alone,
//     as retriable: the other items settle at once, and the items to retry
//     stay the group's batch, sent again after the backoff (before anything
//     pushed after them) until their deadline.
//
//   b.push(item) -> Promise<result>
//     Never throws: bad input, a full queue, a closed batcher all reject at
//     once with a coded error (INVALID_ARGUMENT, ITEM_TOO_LARGE, QUEUE_FULL,
//     CLOSED) or with what sizeOf/groupOf threw. Every accepted push settles:
//     acknowledged, or rejected by the rules above, or by close()'s deadline
//     (ERR_IO_HYGIENE_TIMEOUT). deliveryTimeoutMs counts from the push()
//     call, as the Java producer's delivery.timeout.ms does: time spent
//     waiting for queue room, lingering, in flight and between retries all
//     count (the clock is read once per synchronous run of pushes, so a
//     deadline may come that much early, never late). A push still waiting for room, queued or in flight at its
//     deadline is rejected then, so no caller outlives deliveryTimeoutMs
//     (maxQueueWaitMs, when shorter, ends a wait for room first); the sink's own
//     request timeout should be shorter, or the item may land after all.
//   b.pushAll(items) -> Promise<result>[]
//     push() for each, except that the items stand or fall together: one
//     that push() would refuse refuses all (each with the same error); with
//     overflow "reject" all are refused unless all fit, with "wait" they are
//     admitted together once all fit (or all expire together). A call larger
//     than the whole queue cannot fit: "reject" refuses it, "wait" streams it
//     through item by item.
//   b.flush({ timeoutMs }) -> Promise<void>
//     Sends everything pushed so far without lingering and resolves when all
//     of it has settled (each push reports its own outcome). On timeoutMs it
//     rejects with ERR_IO_HYGIENE_TIMEOUT and the items carry on.
//   b.close({ timeoutMs }) -> Promise<void>
//     Later pushes reject with ERR_IO_HYGIENE_CLOSED; everything held is
//     flushed. At timeoutMs whatever has not settled is rejected with
//     ERR_IO_HYGIENE_TIMEOUT and close() rejects with one too. Idempotent.
//   b.stats() -> counters (see stats()), b.closed, b.name
//
// For the sinks built in lib/ only (not in the types or docs):
//   b.sendNow(): flush() with nobody waiting (no promise, no waiter to
//     count down), for a sink that flushes every idle burst.
//   createBatcher(options, fate): `fate` is { resolved(item, result),
//     rejected(item, error) }; it settles each push()'s promise (not
//     pushAll()'s) with what it returns, or rejects it with what it throws,
//     so that a sink whose callers need more than the batch's result or
//     error gives it without a promise of its own per item.
//   Pending: the batcher's record of a push; an item of a class that
//     extends it (its `item` itself) is its own record, one object per push.
//
// Order: a group has at most one batch in flight or waiting to retry, so
// pushes of one group reach the sink in push order, also across retries.
// A batch's pushes settle after the next batch has been handed to the sink
// (one setImmediate later), so that request is on its way first.
// `concurrency` bounds batches in flight over all groups; above 1 it needs
// groupOf (otherwise there is one group and it would be ignored).
// Timers: one timer per batcher drives linger, retry backoff, item
// deadlines and overflow waits. It is ref'd while a caller waits behind it
// (a batch in flight or waiting to retry, a push waiting for room, a flush()
// or close()), so a script does not exit with a push unsettled; a linger
// alone is background work and leaves it unref'd (flushOnSignals sends what
// lingers when the loop runs dry). flush() and close() deadlines are ref'd.

const { resolve } = require('../core/options')
const { ERR_IO_HYGIENE_INVALID_OPTION, ERR_IO_HYGIENE_CONFLICTING_OPTIONS } = require('../core/errors')
const { spec, checkLimits, queueOptions } = require('./options')
const { Batcher } = require('./batcher')
const { Retry } = require('./retry')
const { Pending, DONE } = require('./records')
const { drainHooks } = require('./drain-hooks')

function createBatcher (options, fate = null) {
  return make(options, fate, false)
}

function make (options, fate, park) {
  const where = 'createBatcher()'
  const o = resolve(where, spec, options)
  if (o.send === null) throw new ERR_IO_HYGIENE_INVALID_OPTION(where, 'send', 'a function', undefined)
  checkLimits(where, o)
  if (o.concurrency > 1 && o.groupOf === null) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, 'concurrency above 1 needs groupOf: one group never has two batches in flight, so that it keeps its order')
  }
  return new Batcher(o, fate, park)
}

// Not public: for a sink that keeps its items' order itself (wrapProducer():
// a partition's records), a batch waiting to retry is set aside, and the
// group's queue goes on meanwhile.
function createParkingBatcher (options, fate) {
  return make(options, fate, true)
}

module.exports = { spec, createBatcher, createParkingBatcher, checkLimits, queueOptions, drainHooks, Retry, Pending, DONE }
