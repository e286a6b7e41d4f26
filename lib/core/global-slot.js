'use strict'

// What every start needs of the process it runs in, in one file because each
// file a start loads costs it a fraction of a millisecond however small
// (bench/overhead.js `startup`): the shared slots below, the wrapping of a
// property of an object we do not own (wrap()), and the first look at the
// environment for IO_HYGIENE_* variables (mayMentionUs()).
//
// Process-wide state lives on globalThis under a Symbol.for() key, so that a
// second loaded copy of io-hygiene finds the first's. A frozen globalThis (a
// hardened runtime) takes no new property and lets none go: this copy then
// keeps its own value, and works on alone.
const own = new Map()

// The timer functions and clock as they were when io-hygiene loaded
// (lib/core/timers.js, which hands them out, says why). Read here because
// every entry point loads this file first: timers.js itself then loads with
// the first feature that waits, not with every process's start.
const timers = require('node:timers')
const realTimers = {
  setTimeout: timers.setTimeout,
  clearTimeout: timers.clearTimeout,
  setInterval: timers.setInterval,
  clearInterval: timers.clearInterval,
  setImmediate: timers.setImmediate,
  clearImmediate: timers.clearImmediate,
  hrtime: process.hrtime.bigint,
  dateNow: Date.now,
}

function getSlot (key) {
  return own.has(key) ? own.get(key) : globalThis[key]
}

function setSlot (key, value) {
  if (Reflect.set(globalThis, key, value)) own.delete(key)
  else own.set(key, value)
}

function deleteSlot (key) {
  if (Reflect.deleteProperty(globalThis, key)) own.delete(key)
  else own.set(key, undefined)
}

// A value made by make() at the slot's first read, by whichever copy reads
// it, and from then on a plain value. Returns unread(): true while no one has
// read it. A frozen globalThis takes no accessor: the value is made at once.
function setLazySlot (key, make) {
  let read = false
  const get = () => {
    read = true
    const value = make()
    Reflect.defineProperty(globalThis, key, { value, writable: true, enumerable: true, configurable: true })
    return value
  }
  if (Reflect.defineProperty(globalThis, key, { get, enumerable: true, configurable: true })) own.delete(key)
  else own.set(key, get())
  return () => !read
}

// The shared value, made by make() the first time.
function sharedSlot (key, make) {
  let value = getSlot(key)
  if (value === undefined) setSlot(key, (value = make()))
  return value
}

// Wrap a property of an object we do not own. The returned undo() restores the
// original only while the property still holds our wrapper: if someone patched
// it after us, undoing would silently drop their wrapper too.
//
// Wrappers are remembered in a WeakMap shared through globalThis (so a second
// copy of io-hygiene finds the first's), not in a property: a patched function
// must look like the original, down to its own symbols.
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

// IO_HYGIENE_* variables carry install() options; env.js reads them. Every
// start looks for them here and loads env.js only if some name may be one:
// nearly never.
const PREFIX = 'IO_HYGIENE_'

// H, Y, G and N are each once in the prefix; two edits leave at least two of
// them. The first test: most names fail it, and it costs a start far less than
// the pairs (four searches of the head against ten).
function twoOfHygn (head) {
  return (head.includes('H') ? 1 : 0) + (head.includes('Y') ? 1 : 0) + (head.includes('G') ? 1 : 0) + (head.includes('N') ? 1 : 0) >= 2
}

// Pairs of neighbouring letters in the prefix. One edit breaks at most three
// (a swap of neighbours), so a name within two edits keeps at least four of
// the ten.
const PAIRS = Array.from({ length: PREFIX.length - 1 }, (_, i) => PREFIX.slice(i, i + 2))

// Whether a name may be ours: the prefix in any case, or a head that passes
// both tests for two edits of it (env.js measures the distance).
function mayBeOurs (name) {
  const head = name.slice(0, PREFIX.length + 2).toUpperCase()
  if (!twoOfHygn(head)) return false
  if (head.startsWith(PREFIX)) return true
  let kept = 0
  for (const pair of PAIRS) if (head.includes(pair)) kept++
  return kept >= PAIRS.length - 6
}

function mayMentionUs (env = process.env) {
  return Object.keys(env).some(mayBeOurs)
}

module.exports = { getSlot, setSlot, setLazySlot, deleteSlot, sharedSlot, realTimers, wrap, originalOf, PREFIX, mayBeOurs, mayMentionUs }
