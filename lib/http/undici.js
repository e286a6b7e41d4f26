'use strict'

// The parts of undici that lib/http uses, from their own files rather than
// undici's index: our global dispatcher may be made while undici's index is
// loading (its lib/global.js reads the slot before the index has exported
// anything), and these files are complete by then. Loading them is also a
// fraction of undici's whole index.
const kGlobal = Symbol.for('undici.globalDispatcher.1')
const kGlobal2 = Symbol.for('undici.globalDispatcher.2')

module.exports = {
  Agent: require('undici/lib/dispatcher/agent'),
  Pool: require('undici/lib/dispatcher/pool'),
  Client: require('undici/lib/dispatcher/client'),
  errors: require('undici/lib/core/errors'),
  // As undici's setGlobalDispatcher() (lib/global.js) does it, both slots.
  setGlobalDispatcher (dispatcher) {
    for (const key of [kGlobal, kGlobal2]) {
      Object.defineProperty(globalThis, key, { value: dispatcher, writable: true, enumerable: false, configurable: false })
    }
  },
  getGlobalDispatcher: () => globalThis[kGlobal],
}
