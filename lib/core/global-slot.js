'use strict'

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

module.exports = { getSlot, setSlot, setLazySlot, deleteSlot, sharedSlot, realTimers }
