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

// On an application's dispatcher, what only our own Agent's sockets could
// count is unknown: null, not a zero that a dashboard would believe.
function snapshot (stats, composed) {
  const out = { ...stats, retries: { ...stats.retries }, timeouts: { ...stats.timeouts }, composed }
  if (composed) {
    out.connectionsOpened = out.idleClosesLearned = out.socketsRetired = out.timeouts.queue = null
  }
  return out
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

// What a copy of undici that found the slot it reads empty sets: undici 8
// reads the current slot and sets both; undici 7 (Node 24's fetch) reads the
// legacy one and sets both; undici 6 (Node 22's) reads and sets the legacy
// one only. A reader of the legacy slot is taken to be Node's own fetch.
const SET_BY_READER = {
  [kCurrent]: slots,
  [kLegacy]: slots.slice(Number(Number(process.versions.undici.split('.')[0]) < 7)),
}

const NOT_GLOBAL = 'IO_HYGIENE_HTTP_NOT_GLOBAL'
const READ_ONLY = 'its slot cannot be written (a frozen globalThis, say); undici keeps a dispatcher of its own'
let warnedNotGlobal = false

// Sets our dispatcher as the global one in every slot. What it is depends on
// what the slot held:
// - nothing, or undici's default Agent (what undici puts in an empty slot,
//   or `new Agent()`): our own Agent, with its bounded pools;
// - the application's dispatcher (a ProxyAgent, an EnvHttpProxyAgent, an
//   Agent with client certificates or options of its own): the retry
//   interceptor composed onto it, so its proxy and TLS stay (never a
//   composition on our own, undici #3973: that would stack interceptors);
// - an application's dispatcher that speaks undici 6's handler API only
//   (in the legacy slot alone): left in place, with a warning.
// Loading undici costs a service milliseconds of its start, so when nothing
// has set a global dispatcher yet, ours is made on first use: each slot holds
// a getter, which makes ours when someone reads it (Node's fetch, undici's
// index as it loads) and then serves it. The getter stays, so that undo()
// knows whether a copy of undici read the slot (and so set no default of
// its own): a slot read gets undici's default Agent back, as that copy would
// have put there; a slot nobody read is left empty, as it was. Returns
// { value, undo }.
function installHttp (resolved) {
  const stats = createStats()
  // { agent, dispatcher, values: { [slot]: ours }, previous: { [slot]: theirs }, composed }
  let built = null
  let lost = false // another dispatcher holds a slot: we could not take it
  const getters = new Map() // slot -> our getter, while in place
  // What each getter returns once ours is made; after undo(), what a getter
  // that cannot be taken away (a frozen globalThis) serves instead.
  const serving = {}
  const read = new Set() // the slots a copy of undici read through our getter
  let aside = false // undici 8 keeps its own dispatcher aside: see the getter
  let undone = false // after uninstall(), not being global is no news

  const build = () => {
    const undici = require('./undici')
    // What uninstall() puts back. An empty slot gets what undici would have
    // put there, a default Agent: Node's fetch may have read ours already.
    let fallback = null
    const previous = {}
    for (const slot of slots) {
      previous[slot] = getters.has(slot) ? undefined : globalThis[slot]
      if (previous[slot] !== undefined) continue
      fallback ??= new undici.Agent()
      previous[slot] = slot === kCurrent ? fallback : new undici.Dispatcher1Wrapper(fallback)
    }
    const theirs = previous[kCurrent] === fallback ? null : previous[kCurrent]
    let agent = null
    let dispatcher
    if (theirs !== null && !isDefaultAgent(theirs)) {
      dispatcher = require('./agent').composeOn(theirs, resolved, stats)
    } else if (fallback !== null && previous[kLegacy] !== undefined && !isDefaultAgent(previous[kLegacy]) && !(previous[kLegacy] instanceof undici.Dispatcher1Wrapper)) {
      // Only the legacy slot was set, by undici 6 (Node 22's fetch, or an
      // application's undici 6): its dispatcher speaks the older handler
      // API, which the retry interceptor cannot be composed onto.
      built = { agent: null, dispatcher: null, values: {}, previous, composed: false }
      notGlobal('an application\'s dispatcher of undici 6 holds the slot Node 22\'s fetch reads; it is left in place')
      return built
    } else {
      ({ agent, dispatcher } = require('./agent').createAgent(resolved, stats))
    }
    const values = { [kCurrent]: dispatcher, [kLegacy]: new undici.Dispatcher1Wrapper(dispatcher) }
    built = { agent, dispatcher, values, previous, composed: agent === null }
    Object.assign(serving, values)
    try {
      for (const slot of slots) {
        if (!getters.has(slot)) define(slot, values[slot])
      }
    } catch {
      notGlobal(READ_ONLY)
    }
    return built
  }

  // Whether our getter is still in `slot`.
  const getterIn = (slot) => getters.has(slot) && Object.getOwnPropertyDescriptor(globalThis, slot)?.get === getters.get(slot)
  // Before ours is made, our getters come off all together, whichever slot
  // was touched first; one that cannot (a frozen globalThis) stays.
  const takeGetters = () => {
    for (const slot of getters.keys()) {
      if (getterIn(slot) && !Reflect.deleteProperty(globalThis, slot)) continue
      getters.delete(slot)
    }
  }
  const notGlobal = (why) => {
    lost = true
    warnNotGlobal(why)
  }

  if (slots.some((slot) => Object.hasOwn(globalThis, slot))) {
    build()
  } else {
    try {
      for (const slot of slots) {
        const get = () => {
          // Frozen before undici 8 first read its slot: without io-hygiene
          // that slot would be empty and unwritable, and each copy of undici
          // 8 would keep its dispatcher aside (setGlobalDispatcher() and
          // getGlobalDispatcher() then use that). An empty slot keeps that
          // working. Undici 6 and 7 cannot load on a frozen globalThis
          // without a dispatcher in theirs, so theirs is served.
          if (slot === kCurrent && !read.has(slot) && (aside || !Object.getOwnPropertyDescriptor(globalThis, slot).configurable)) {
            if (!aside) {
              aside = true
              notGlobal(READ_ONLY)
            }
            return undefined
          }
          if (built === null) build()
          read.add(slot)
          return serving[slot]
        }
        getters.set(slot, get)
        Object.defineProperty(globalThis, slot, {
          configurable: true,
          enumerable: false,
          get,
          // Someone set their own: theirs stays. Before ours was made, the
          // other slot is left empty for its reader to fill.
          set (value) {
            if (built === null) takeGetters()
            getters.delete(slot)
            Object.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: true })
            notGlobal()
          },
        })
      }
    /* c8 ignore start */ // Tested on Node 26 only (test/http-frozen.test.js): Node 22's and 24's own undici cannot load on a frozen globalThis, so their legs never get here
    } catch {
      // globalThis was frozen before install(): undici keeps a dispatcher of
      // its own, and we leave it working.
      takeGetters()
      getters.clear()
      notGlobal(READ_ONLY)
    }
    /* c8 ignore stop */
  }

  // Whether every slot holds ours, or our getter that makes or serves it.
  const isGlobal = () => {
    if (lost) return false
    if (built === null) return slots.every(getterIn)
    return slots.every((slot) => getters.has(slot) ? getterIn(slot) : globalThis[slot] === built.values[slot])
  }
  const verify = () => {
    const global = isGlobal()
    if (!global && !undone) notGlobal()
    return global
  }

  const value = {
    // Ours, made now if it was not yet; null if another took the slots first.
    get dispatcher () {
      if (built === null && getters.size > 0) build()
      verify()
      return built === null ? null : built.dispatcher
    },
    stats: () => ({ ...snapshot(stats, built?.composed ?? false), global: verify() }),
  }
  function undo () {
    undone = true
    if (built === null || built.dispatcher === null) {
      // Never used, or never ours: take the getters away, if they are still ours.
      const ours = !lost && isGlobal()
      takeGetters()
      return ours
    }
    let ours = !aside
    let stillServed = false
    // The slots the readers would have set themselves.
    for (const slot of [...read]) for (const set of SET_BY_READER[slot]) read.add(set)
    for (const slot of slots) {
      if (getters.has(slot)) {
        if (!getterIn(slot)) {
          ours = false // someone defined theirs over it
        } else if (read.has(slot) ? !redefine(slot, built.previous[slot]) : !Reflect.deleteProperty(globalThis, slot)) {
          // A getter that a frozen globalThis keeps: it serves theirs again.
          serving[slot] = built.previous[slot]
        }
        getters.delete(slot)
      } else if (globalThis[slot] !== built.values[slot]) {
        ours = false
      } else {
        try {
          define(slot, built.previous[slot])
        } catch {
          ours = false // frozen: ours stays global, and open
          stillServed = true
        }
      }
    }
    // Graceful: requests under way finish, idle sockets close. The
    // application's own dispatcher is the application's to close.
    if (!stillServed) built.agent?.close().catch(() => {})
    return ours
  }
  return { value, undo }
}

// undici's Agent, from any copy of undici, as `new Agent()` makes it and as
// undici puts it in an empty slot: nothing of the application's is in it (no
// proxy, certificates, options, interceptors or listeners), and ours can take
// its place. Its options are compared with a fresh one's.
function isDefaultAgent (dispatcher) {
  const Class = dispatcher.constructor
  if (typeof Class !== 'function' || Class.name !== 'Agent') return false
  // compose() hands back a Proxy whose dispatch is the interceptors'.
  if (dispatcher.dispatch !== Class.prototype.dispatch) return false
  if (typeof dispatcher.eventNames === 'function' && dispatcher.eventNames().length > 0) return false
  let fresh
  try {
    fresh = new Class()
  } catch {
    return false
  }
  // Neither being undici's (no options and factory), they would compare equal.
  const config = configOf(dispatcher)
  // node:util loads here, with undici, not at every start.
  return config !== null && require('node:util').isDeepStrictEqual(config, configOf(fresh))
}

// An Agent's options and client factory, kept under private symbols whose
// descriptions undici has kept from 6 to 8 (test/http-compose.test.js checks
// each Node line's and each undici's).
function configOf (agent) {
  const out = {}
  for (const symbol of Object.getOwnPropertySymbols(agent)) {
    if (symbol.description === 'options' || symbol.description === 'factory') out[symbol.description] = agent[symbol]
  }
  return Object.keys(out).length === 2 ? out : null
}

// As undici's own setGlobalDispatcher() defines a slot.
function define (slot, value) {
  Object.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: false })
}

// define(), false where the slot cannot be redefined (a frozen globalThis).
function redefine (slot, value) {
  return Reflect.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: false })
}

function warnNotGlobal (why = 'another dispatcher holds the slot') {
  if (warnedNotGlobal) return
  warnedNotGlobal = true
  process.emitWarning(`io-hygiene could not make its dispatcher undici's global one: ${why}. ` +
    'Node\'s fetch, undici.fetch and undici.request go around its connection caps, deadlines and retries, and keep the other dispatcher\'s proxy and TLS. ' +
    'Set your own dispatcher before install() (io-hygiene then adds its retries and deadlines to it), or pass installation.http.dispatcher to your requests.',
  { code: NOT_GLOBAL, type: 'IoHygieneWarning' })
}

module.exports = { spec, check, installHttp, NOT_GLOBAL }
