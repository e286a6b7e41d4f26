'use strict'

const { integer, timerMs, boolean, nullable } = require('../core/options')
// Read the real timers now, at install(), before a test fakes them.
require('../core/timers')
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

// The counters behind installation.http.stats(), shared by the interceptor,
// the pools' connectors and the idle-close learning.
function createStats () {
  return {
    requests: 0,
    retries: { staleSocket: 0, connect: 0, status: 0 },
    timeouts: { connect: 0, headers: 0, body: 0, queue: 0, deadline: 0 },
    connectionsOpened: 0,
    budgetRefusals: 0,
    idleClosesLearned: 0,
    socketsRetired: 0,
  }
}

function snapshot (stats) {
  return { ...stats, retries: { ...stats.retries }, timeouts: { ...stats.timeouts } }
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

const NOT_GLOBAL = 'IO_HYGIENE_HTTP_NOT_GLOBAL'
let warnedNotGlobal = false

// Sets our Agent as the global dispatcher in every slot: a fresh Agent, never
// one composed on the global one (undici #3973: composing on the global one
// stacks interceptors on every install). Loading undici costs a service
// milliseconds of its start, so when nothing has set a global dispatcher yet,
// ours is made on first use: each slot holds a getter until someone reads
// one (Node's fetch, undici's index as it loads, our handle).
// Returns { value, undo }.
function installHttp (resolved) {
  const stats = createStats()
  let built = null // { agent, dispatcher, values: { [slot]: ours }, previous: { [slot]: theirs } }
  let lost = false // another dispatcher holds a slot: we could not take it
  const getters = new Map() // slot -> our lazy getter, while in place
  let undone = false // after uninstall(), not being global is no news

  const build = () => {
    const undici = require('./undici')
    const { agent, dispatcher } = require('./agent').createAgent(resolved, stats)
    const values = { [kCurrent]: dispatcher, [kLegacy]: new undici.Dispatcher1Wrapper(dispatcher) }
    // What uninstall() puts back. An empty slot gets what undici would have
    // put there, a default Agent: Node's fetch may have read ours already.
    let fallback = null
    const previous = {}
    for (const slot of slots) {
      previous[slot] = globalThis[slot]
      if (previous[slot] !== undefined) continue
      fallback ??= new undici.Agent()
      previous[slot] = slot === kCurrent ? fallback : new undici.Dispatcher1Wrapper(fallback)
    }
    built = { agent, dispatcher, values, previous }
    try {
      for (const slot of slots) define(slot, values[slot])
    } catch {
      // A slot that is not writable (a frozen globalThis, say).
      notGlobal()
    }
    return built
  }

  // Our getters come off all together, whichever slot was touched first.
  const takeGetters = () => {
    for (const [slot, get] of getters) {
      if (Object.getOwnPropertyDescriptor(globalThis, slot)?.get === get) delete globalThis[slot]
    }
    getters.clear()
  }
  const notGlobal = () => {
    lost = true
    warnNotGlobal()
  }

  if (slots.some((slot) => Object.hasOwn(globalThis, slot))) {
    build()
  } else {
    for (const slot of slots) {
      const get = () => {
        takeGetters()
        return build().values[slot]
      }
      getters.set(slot, get)
      Object.defineProperty(globalThis, slot, {
        configurable: true,
        enumerable: false,
        get,
        // Someone set their own before ours was made: theirs stays.
        set (value) {
          takeGetters()
          Object.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: true })
          notGlobal()
        },
      })
    }
  }

  // Whether every slot holds ours, or our getter that makes it.
  const isGlobal = () => {
    if (lost) return false
    if (built === null) {
      return slots.every((slot) => getters.has(slot) && Object.getOwnPropertyDescriptor(globalThis, slot)?.get === getters.get(slot))
    }
    return slots.every((slot) => globalThis[slot] === built.values[slot])
  }
  const verify = () => {
    const global = isGlobal()
    if (!global && !undone) notGlobal()
    return global
  }

  const value = {
    // Ours, made now if it was not yet; null if another took the slots first.
    get dispatcher () {
      if (built === null && getters.size > 0) globalThis[kCurrent] // eslint-disable-line no-unused-expressions
      verify()
      return built === null ? null : built.dispatcher
    },
    stats: () => ({ ...snapshot(stats), global: verify() }),
  }
  function undo () {
    undone = true
    if (built === null) {
      // Never used: take the getters away, if they are still ours.
      const ours = !lost && isGlobal()
      takeGetters()
      return ours
    }
    let ours = true
    for (const slot of slots) {
      if (globalThis[slot] === built.values[slot]) define(slot, built.previous[slot])
      else ours = false
    }
    // Graceful: requests under way finish, idle sockets close.
    built.agent.close().catch(() => {})
    return ours
  }
  return { value, undo }
}

// As undici's own setGlobalDispatcher() defines a slot.
function define (slot, value) {
  Object.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: false })
}

function warnNotGlobal () {
  if (warnedNotGlobal) return
  warnedNotGlobal = true
  process.emitWarning('io-hygiene could not make its dispatcher undici\'s global one: another dispatcher holds the slot. ' +
    'Node\'s fetch, undici.fetch and undici.request go around its connection caps, deadlines and retries. ' +
    'Call install() before anything sets undici\'s global dispatcher, or pass installation.http.dispatcher to your requests.',
  { code: NOT_GLOBAL, type: 'IoHygieneWarning' })
}

module.exports = { spec, check, installHttp, NOT_GLOBAL }
