'use strict'

// Wrap a property of an object we do not own. The returned undo() restores the
// original only while the property still holds our wrapper: if someone patched
// it after us, undoing would silently drop their wrapper too.
//
// Wrappers are remembered in a WeakMap shared through globalThis (so a second
// copy of io-hygiene finds the first's), not in a property: a patched function
// must look like the original, down to its own symbols.
const { sharedSlot } = require('./global-slot')
const kOriginals = Symbol.for('io-hygiene.originals.v1')
const originals = sharedSlot(kOriginals, () => new WeakMap())

function wrap (target, name, makeWrapper) {
  const original = target[name]
  const wrapper = makeWrapper(original)
  originals.set(wrapper, original)
  target[name] = wrapper
  let undone = false
  return function undo () {
    if (undone) return true
    if (target[name] !== wrapper) return false
    target[name] = original
    undone = true
    return true
  }
}

function originalOf (fn) {
  while (originals.has(fn)) fn = originals.get(fn)
  return fn
}

module.exports = { wrap, originalOf }
