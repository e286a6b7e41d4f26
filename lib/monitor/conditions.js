'use strict'

const { ERR_IO_HYGIENE_INVALID_CONDITION } = require('../core/errors')
const { own, MAX_TIMER_MS } = require('../core/options')
const { distance } = require('../core/distance')
const { RESOURCE_TYPES, ASYNC_HOOKS_NAMES } = require('./resource-types')

// The numbers of a sample a condition can name; any other name in CamelCase
// is a libuv resource type (GetAddrInfoReqWrap, TCPSocketWrap, Timeout).
const METRICS = [
  'requests', 'handles', 'delayP50Ms', 'delayP99Ms', 'delayMaxMs', 'elu',
  'heapUsedBytes', 'heapTotalBytes', 'rssBytes', 'gcCount', 'gcPauseMs', 'costUs',
]
const RESOURCE_TYPE = /^[A-Z][A-Za-z0-9]*$/
const CONDITION = /^\s*([A-Za-z][A-Za-z0-9]*)\s*(>=|<=|>|<)\s*(\d+(?:\.\d+)?)\s*(?:for\s+(\d+)\s+samples?\s*)?$/
const KEYS = ['name', 'when', 'for', 'cooldownMs', 'profile', 'heapSnapshot']

const compare = {
  '>': (a, b) => a > b,
  '>=': (a, b) => a >= b,
  '<': (a, b) => a < b,
  '<=': (a, b) => a <= b,
}

// A condition is a string, `'GetAddrInfoReqWrap > 100 for 3 samples'`, or an
// object `{ when, name, for, cooldownMs, profile, heapSnapshot }` whose `for`
// overrides the string's. Returns the compiled form the monitor evaluates.
function parseCondition (input, defaults, where = 'createMonitor()') {
  if (typeof input !== 'string' && (input === null || typeof input !== 'object' || Array.isArray(input))) {
    throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, 'a condition is a string or an object with `when`')
  }
  if (typeof input !== 'string') {
    for (const key of Object.keys(input)) {
      if (!KEYS.includes(key)) throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, `unknown key "${key}" (known: ${KEYS.join(', ')})`)
    }
  }
  // Own properties only, as every option.
  const spec = {}
  if (typeof input === 'string') spec.when = input
  else for (const key of KEYS) spec[key] = own(input, key)
  if (typeof spec.when !== 'string') throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, '`when` must be a string such as "delayP99Ms > 100"')
  const m = CONDITION.exec(spec.when)
  if (m === null) {
    throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, 'expected "<metric> <op> <number> [for <n> samples]", op one of > >= < <=')
  }
  const [, metric, op, value, samples] = m
  if (!METRICS.includes(metric) && !RESOURCE_TYPE.test(metric)) {
    throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, `unknown metric "${metric}": one of ${METRICS.join(', ')}, or a resource type in CamelCase (GetAddrInfoReqWrap)`)
  }
  const meant = METRICS.includes(metric) ? null : nearType(metric)
  if (meant !== null) {
    throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, `unknown resource type "${metric}" (did you mean ${meant}? Node reports it with that spelling; the condition could never fire)`)
  }
  const count = spec.for ?? (samples === undefined ? 1 : Number(samples))
  if (!Number.isInteger(count) || count < 1) throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, '`for` must be a whole number of samples, at least 1')
  const cooldownMs = spec.cooldownMs ?? defaults.cooldownMs
  if (!Number.isInteger(cooldownMs) || cooldownMs < 0 || cooldownMs > MAX_TIMER_MS) throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, `\`cooldownMs\` must be a whole number of ms, at most ${MAX_TIMER_MS}`)
  for (const key of ['profile', 'heapSnapshot']) {
    if (spec[key] !== undefined && typeof spec[key] !== 'boolean') throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, `\`${key}\` must be a boolean`)
  }
  if (spec.name !== undefined && (typeof spec.name !== 'string' || spec.name === '')) {
    throw new ERR_IO_HYGIENE_INVALID_CONDITION(where, input, '`name` must be a non-empty string')
  }
  const threshold = Number(value)
  const test = compare[op]
  const read = METRICS.includes(metric)
    ? (sample) => sample[metric]
    : (sample) => sample.requestsByType[metric] ?? sample.handlesByType[metric] ?? 0
  return {
    name: spec.name ?? `${metric} ${op} ${value}${count > 1 ? ` for ${count} samples` : ''}`,
    metric,
    op,
    threshold,
    for: count,
    cooldownMs,
    profile: spec.profile ?? true,
    heapSnapshot: spec.heapSnapshot ?? false,
    read,
    holds: (sample) => test(read(sample), threshold),
  }
}

// The known type `name` nearly spells, or null (exact, or far from all).
function nearType (name) {
  if (Object.hasOwn(ASYNC_HOOKS_NAMES, name)) return ASYNC_HOOKS_NAMES[name]
  if (RESOURCE_TYPES.includes(name)) return null
  const upper = name.toUpperCase()
  for (const type of RESOURCE_TYPES) {
    const max = type.length < 8 ? 1 : 2
    if (distance(upper, type.toUpperCase(), max) <= max) return type
  }
  return null
}

module.exports = { parseCondition, METRICS, RESOURCE_TYPES }
