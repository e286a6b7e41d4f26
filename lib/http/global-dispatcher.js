'use strict'

// What installHttp() (index.js) puts in undici's global-dispatcher slots.
// Loaded at the first read of a slot, of the handle's `http`, or at undo():
// a service that makes no request pays for none of it at start.
//
// Ours depends on what the slot held:
// - nothing, or undici's default Agent (what undici puts in an empty slot,
//   or `new Agent()`): our own Agent, with its bounded pools;
// - the application's dispatcher (a ProxyAgent, an EnvHttpProxyAgent, an
//   Agent with client certificates or options of its own): the retry
//   interceptor composed onto it, so its proxy and TLS stay (never a
//   composition on our own, undici #3973: that would stack interceptors);
// - an application's dispatcher that speaks undici 6's handler API only
//   (in the legacy slot alone): left in place, with a warning.
// The getters installHttp() puts in empty slots stay, so that undo() knows
// whether a copy of undici read the slot (and so set no default of its own):
// a slot read gets undici's default Agent back, as that copy would have put
// there; a slot nobody read is left empty, as it was.
//
// `g`, installHttp()'s state:
// - resolved: the http options (or a function that gives them); stats: the
//   counters, made at first need;
// - built: { agent, dispatcher, values: { [slot]: ours }, previous: { [slot]: theirs }, composed };
// - lost: another dispatcher holds a slot, we could not take it;
// - getters: slot -> our getter, while in place;
// - serving: what each getter returns once ours is made; after undo(), what
//   a getter that cannot be taken away (a frozen globalThis) serves instead;
// - read: the slots a copy of undici read through our getter;
// - aside: undici 8 keeps its own dispatcher aside (see read());
// - undone: after uninstall(), not being global is no news.

// undici's slots, as index.js names them (registered symbols: the same
// wherever they are written).
const kCurrent = Symbol.for('undici.globalDispatcher.2')
const kLegacy = Symbol.for('undici.globalDispatcher.1')
const slots = [kCurrent, kLegacy]
const NOT_GLOBAL = 'IO_HYGIENE_HTTP_NOT_GLOBAL'

// What a copy of undici that found the slot it reads empty sets: undici 8
// reads the current slot and sets both; undici 7 (Node 24's fetch) reads the
// legacy one and sets both; undici 6 (Node 22's) reads and sets the legacy
// one only. A reader of the legacy slot is taken to be Node's own fetch.
const SET_BY_READER = {
  [kCurrent]: slots,
  [kLegacy]: slots.slice(Number(Number(process.versions.undici.split('.')[0]) < 7)),
}

const READ_ONLY = 'its slot cannot be written (a frozen globalThis, say); undici keeps a dispatcher of its own'
let warnedNotGlobal = false

// The counters behind installation.http.stats(), shared by the interceptor,
// the pools' connectors and the idle-close learning.
function statsOf (g) {
  g.stats ??= {
    requests: 0,
    retries: { staleSocket: 0, connect: 0, status: 0 },
    timeouts: { connect: 0, headers: 0, body: 0, queue: 0, deadline: 0 },
    connectionsOpened: 0,
    budgetRefusals: 0,
    idleClosesLearned: 0,
    socketsRetired: 0,
  }
  return g.stats
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

function build (g) {
  const undici = require('./undici')
  if (typeof g.resolved === 'function') g.resolved = g.resolved()
  const { resolved, getters } = g
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
    dispatcher = require('./agent').composeOn(theirs, resolved, statsOf(g))
  } else if (fallback !== null && previous[kLegacy] !== undefined && !isDefaultAgent(previous[kLegacy]) && !(previous[kLegacy] instanceof undici.Dispatcher1Wrapper)) {
    // Only the legacy slot was set, by undici 6 (Node 22's fetch, or an
    // application's undici 6): its dispatcher speaks the older handler
    // API, which the retry interceptor cannot be composed onto.
    g.built = { agent: null, dispatcher: null, values: {}, previous, composed: false }
    notGlobal(g, 'an application\'s dispatcher of undici 6 holds the slot Node 22\'s fetch reads; it is left in place')
    return g.built
  } else {
    ({ agent, dispatcher } = require('./agent').createAgent(resolved, statsOf(g)))
  }
  const values = { [kCurrent]: dispatcher, [kLegacy]: new undici.Dispatcher1Wrapper(dispatcher) }
  g.built = { agent, dispatcher, values, previous, composed: agent === null }
  Object.assign(g.serving, values)
  try {
    for (const slot of slots) {
      if (!getters.has(slot)) define(slot, values[slot])
    }
  } catch {
    notGlobal(g, READ_ONLY)
  }
  return g.built
}

// A read of `slot` through our getter.
function read (g, slot) {
  // Frozen before undici 8 first read its slot: without io-hygiene that slot
  // would be empty and unwritable, and each copy of undici 8 would keep its
  // dispatcher aside (setGlobalDispatcher() and getGlobalDispatcher() then
  // use that). An empty slot keeps that working. Undici 6 and 7 cannot load
  // on a frozen globalThis without a dispatcher in theirs, so theirs is served.
  if (slot === kCurrent && !g.read.has(slot) && (g.aside || !Object.getOwnPropertyDescriptor(globalThis, slot).configurable)) {
    if (!g.aside) {
      g.aside = true
      notGlobal(g, READ_ONLY)
    }
    return undefined
  }
  if (g.built === null) build(g)
  g.read.add(slot)
  return g.serving[slot]
}

// Someone set their own: theirs stays. Before ours was made, the other slot
// is left empty for its reader to fill.
function replaced (g, slot, value) {
  if (g.built === null) takeGetters(g)
  g.getters.delete(slot)
  Object.defineProperty(globalThis, slot, { value, writable: true, enumerable: false, configurable: true })
  notGlobal(g)
}

/* c8 ignore start */ // Tested on Node 26 only (test/http-frozen.test.js): Node 22's and 24's own undici cannot load on a frozen globalThis, so their legs never get here
// globalThis was frozen before install(): undici keeps a dispatcher of its
// own, and we leave it working.
function frozen (g) {
  takeGetters(g)
  g.getters.clear()
  notGlobal(g, READ_ONLY)
}
/* c8 ignore stop */

// Whether our getter is still in `slot`.
function getterIn (g, slot) {
  return g.getters.has(slot) && Object.getOwnPropertyDescriptor(globalThis, slot)?.get === g.getters.get(slot)
}

// Before ours is made, our getters come off all together, whichever slot
// was touched first; one that cannot (a frozen globalThis) stays.
function takeGetters (g) {
  for (const slot of g.getters.keys()) {
    if (getterIn(g, slot) && !Reflect.deleteProperty(globalThis, slot)) continue
    g.getters.delete(slot)
  }
}

function notGlobal (g, why) {
  g.lost = true
  warnNotGlobal(why)
}

// Whether every slot holds ours, or our getter that makes or serves it.
function isGlobal (g) {
  if (g.lost) return false
  if (g.built === null) return slots.every((slot) => getterIn(g, slot))
  return slots.every((slot) => g.getters.has(slot) ? getterIn(g, slot) : globalThis[slot] === g.built.values[slot])
}

function verify (g) {
  const global = isGlobal(g)
  if (!global && !g.undone) notGlobal(g)
  return global
}

// The handle's `http`.
function valueOf (g) {
  return {
    // Ours, made now if it was not yet; null if another took the slots first.
    get dispatcher () {
      if (g.built === null && g.getters.size > 0) build(g)
      verify(g)
      return g.built === null ? null : g.built.dispatcher
    },
    stats: () => ({ ...snapshot(statsOf(g), g.built?.composed ?? false), global: verify(g) }),
  }
}

function undo (g) {
  g.undone = true
  const { built, getters, read } = g
  if (built === null || built.dispatcher === null) {
    // Never used, or never ours: take the getters away, if they are still ours.
    const ours = !g.lost && isGlobal(g)
    takeGetters(g)
    return ours
  }
  let ours = !g.aside
  let stillServed = false
  // The slots the readers would have set themselves.
  for (const slot of [...read]) for (const set of SET_BY_READER[slot]) read.add(set)
  for (const slot of slots) {
    if (getters.has(slot)) {
      if (!getterIn(g, slot)) {
        ours = false // someone defined theirs over it
      } else if (read.has(slot) ? !redefine(slot, built.previous[slot]) : !Reflect.deleteProperty(globalThis, slot)) {
        // A getter that a frozen globalThis keeps: it serves theirs again.
        g.serving[slot] = built.previous[slot]
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

module.exports = { build, read, replaced, frozen, valueOf, undo }
