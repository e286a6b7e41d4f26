'use strict'

// The error classes load with the first refusal: valid options never need them.
const errors = () => require('./errors')

// Validators: each returns the value it accepts or throws a coded error that
// names the option. None of them ever replaces a bad value with a default.
function integer (min = 0, max = Number.MAX_SAFE_INTEGER) {
  const check = (where, key, value) => {
    if (typeof value !== 'number' || Number.isNaN(value)) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a number', value)
    }
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new (errors().ERR_IO_HYGIENE_OPTION_RANGE)(where, key, `an integer from ${min} to ${max}`, value)
    }
    return value
  }
  check.expects = 'integer'
  return check
}

// The one validator of durations, for every module: setTimeout and
// setInterval turn a delay above 2^31-1 ms into 1 ms, so a larger value would
// fire at once instead of late. `timer` marks it for the test that walks every
// module's options.
const MAX_TIMER_MS = 2 ** 31 - 1

function timerMs (min = 0, max = MAX_TIMER_MS) {
  const check = integer(min, Math.min(max, MAX_TIMER_MS))
  check.timer = true
  return check
}

function boolean () {
  const check = (where, key, value) => {
    if (typeof value !== 'boolean') throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a boolean', value)
    return value
  }
  check.expects = 'boolean'
  return check
}

function oneOf (...allowed) {
  const check = (where, key, value) => {
    if (!allowed.includes(value)) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, `one of ${allowed.map(v => JSON.stringify(v)).join(', ')}`, value)
    }
    return value
  }
  check.expects = allowed.map(v => JSON.stringify(v)).join(' | ')
  return check
}

function func () {
  const check = (where, key, value) => {
    if (typeof value !== 'function') throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a function', value)
    return value
  }
  check.expects = 'function'
  return check
}

function string () {
  const check = (where, key, value) => {
    if (typeof value !== 'string' || value === '') throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a non-empty string', value)
    return value
  }
  check.expects = 'string'
  return check
}

function stringArray () {
  const check = (where, key, value) => {
    if (!Array.isArray(value) || value.length === 0 || value.some(s => typeof s !== 'string' || s === '')) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'a non-empty array of non-empty strings', value)
    }
    return Object.freeze([...value])
  }
  check.expects = 'string[]'
  return check
}

function object () {
  const check = (where, key, value) => {
    if (value === null || typeof value !== 'object') throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'an object', value)
    return value
  }
  check.expects = 'object'
  return check
}

// `null` as a default means "not set": the option is optional and has no value
// unless the caller gives one.
function nullable (check) {
  const wrapped = (where, key, value) => value === null ? null : check(where, key, value)
  wrapped.expects = `${check.expects} | null`
  if (check.timer === true) wrapped.timer = true
  return wrapped
}

// The value of an own property of `object`, or undefined: options are read
// from what the caller wrote, never from a prototype (a polluted
// Object.prototype.servers must not reach a resolver).
function own (object, key) {
  return Object.hasOwn(object, key) ? object[key] : undefined
}

// The known option nearest `key`, if it is a likely typo of it (`maxTTL` for
// `maxTtlMs`, `flushIntervalMS`): case aside, a few edits for a long name.
function closest (key, known) {
  const lower = key.toLowerCase()
  let best = null
  let least = Infinity
  for (const name of known) {
    const max = Math.max(2, Math.floor(name.length / 3))
    const d = require('./distance').distance(lower, name.toLowerCase(), max)
    if (d <= max && d < least) {
      best = name
      least = d
    }
  }
  return best
}

// Resolve `input` against `spec` ({ key: { default, check } }), reading own
// properties only. Unknown keys throw, so that `maxTTL` typed for `maxTtlMs`
// is caught at the call.
function resolve (where, spec, input) {
  if (input === undefined) input = {}
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, 'options', 'an object', input)
  }
  const known = Object.keys(spec)
  for (const key of Object.keys(input)) {
    if (!Object.hasOwn(spec, key)) throw new (errors().ERR_IO_HYGIENE_UNKNOWN_OPTION)(where, key, known, closest(key, known))
  }
  const out = {}
  for (const key of known) {
    const value = own(input, key)
    out[key] = value === undefined ? spec[key].default : spec[key].check(where, key, value)
  }
  // Copied: an object given a dozen properties one by one is kept as a
  // dictionary, and hot paths read these (the batcher's, on every push).
  return Object.freeze({ ...out })
}

function defaultsOf (spec) {
  const out = {}
  for (const key of Object.keys(spec)) out[key] = spec[key].default
  return Object.freeze(out)
}

module.exports = {
  integer,
  timerMs,
  MAX_TIMER_MS,
  own,
  boolean,
  oneOf,
  func,
  string,
  stringArray,
  object,
  nullable,
  resolve,
  defaultsOf,
}
