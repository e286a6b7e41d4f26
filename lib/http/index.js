'use strict'

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
// `http`, or at undo(). Returns { value, undo }. `resolved` may be a
// function that gives the options when ours is made (install() with the
// defaults resolves them only then).
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

module.exports = { installHttp }
