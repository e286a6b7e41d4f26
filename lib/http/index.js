'use strict'

const { integer, timerMs, boolean, nullable } = require('../core/options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('../core/errors')

// Defaults, and why, are in docs/http.md's options table; a test keeps the two equal.
const spec = {
  connections: { default: 128, check: integer(1) },
  keepAliveTimeoutMs: { default: 4_000, check: timerMs(1) },
  connectTimeoutMs: { default: 10_000, check: timerMs(1) },
  headersTimeoutMs: { default: 30_000, check: timerMs(1) },
  bodyTimeoutMs: { default: 30_000, check: timerMs(1) },
  requestTimeoutMs: { default: null, check: nullable(timerMs(1)) },
  statusRetries: { default: false, check: boolean() },
  maxRetries: { default: 2, check: integer(0, 10) },
  retryBaseDelayMs: { default: 100, check: timerMs(1) },
  maxRetryDelayMs: { default: 10_000, check: timerMs(1) },
  retryBudgetPercent: { default: 10, check: integer(0, 100) },
  retryBudgetMinPerSecond: { default: 10, check: integer(0) },
  maxReplayBodyBytes: { default: 65_536, check: integer(0) },
  learnIdleClose: { default: true, check: boolean() },
}

// What no single option's validator can see.
function check (resolved, where) {
  if (resolved.retryBaseDelayMs > resolved.maxRetryDelayMs) {
    throw new (errors().ERR_IO_HYGIENE_CONFLICTING_OPTIONS)(where, `retryBaseDelayMs (${resolved.retryBaseDelayMs}) must not exceed maxRetryDelayMs (${resolved.maxRetryDelayMs})`)
  }
}

// undici's global-dispatcher slots, the newest first. Node 26's fetch
// (undici 8) and undici >= 8 read .2; Node 20 and 22's fetch (undici 6),
// Node 24's (undici 7) and an application's undici 6 or 7 read .1, where
// undici 8 keeps a wrapper that speaks their older handler API.
// test/http-lines.test.js counts requests made through each reader on every
// Node line, so a slot that a later line reads shows up there.
const kCurrent = Symbol.for('undici.globalDispatcher.2')
const kLegacy = Symbol.for('undici.globalDispatcher.1')
const slots = [kCurrent, kLegacy]

// Sets our dispatcher as the global one in every slot; global-dispatcher.js
// says what it is, given what the slot held. Loading undici costs a service
// milliseconds of its start, so when nothing has set a global dispatcher yet,
// ours is made on first use: each slot holds a getter, which makes ours when
// someone reads it (Node's fetch, undici's index as it loads) and then serves
// it. All but the getters loads at that first read, or with the handle's
// `http`, or at undo(). Returns { value, undo }.
function installHttp (resolved) {
  // The state global-dispatcher.js works on (its opening comment says what each is).
  const g = { resolved, stats: null, built: null, lost: false, getters: new Map(), serving: {}, read: new Set(), aside: false, undone: false }
  const global = () => require('./global-dispatcher')
  if (slots.some((slot) => Object.hasOwn(globalThis, slot))) {
    global().build(g)
  } else {
    try {
      for (const slot of slots) {
        const get = () => global().read(g, slot)
        g.getters.set(slot, get)
        Object.defineProperty(globalThis, slot, { configurable: true, enumerable: false, get, set: (value) => global().replaced(g, slot, value) })
      }
    /* c8 ignore start */ // Tested on Node 26 only (test/http-frozen.test.js): Node 22's and 24's own undici cannot load on a frozen globalThis, so their legs never get here
    } catch {
      global().frozen(g)
    }
    /* c8 ignore stop */
  }
  return { get value () { return global().valueOf(g) }, undo: () => global().undo(g) }
}

module.exports = { spec, check, installHttp, slots, kCurrent, kLegacy, NOT_GLOBAL: 'IO_HYGIENE_HTTP_NOT_GLOBAL' }
