'use strict'

// Wrap a property of an object we do not own. The returned undo() restores the
// original only while the property still holds our wrapper: if someone patched
// it after us, undoing would silently drop their wrapper too.
const kOriginal = Symbol.for('io-hygiene.original.v1')

function wrap (target, name, makeWrapper) {
  const original = target[name]
  const wrapper = makeWrapper(original)
  Object.defineProperty(wrapper, kOriginal, { value: original })
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
  while (typeof fn === 'function' && fn[kOriginal]) fn = fn[kOriginal]
  return fn
}

module.exports = { wrap, originalOf, kOriginal }
