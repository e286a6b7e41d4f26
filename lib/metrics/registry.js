'use strict'

const { Histogram } = require('./histogram')
const { ERR_IO_HYGIENE_INVALID_ARGUMENT } = require('../core/errors')
const { sharedSlot } = require('../core/global-slot')

// The process's operation histograms, shared by every copy of io-hygiene
// loaded in it. A module asks once for the histogram of a kind and label set
// (at creation, or when it first meets an origin) and keeps it: record() is
// then the whole cost of an operation.
const kRegistry = Symbol.for('io-hygiene.monitor.histograms.v1')

// The kinds io-hygiene's modules feed (values in ms, from a clock read the
// module makes anyway; a cache hit, which reads none, records 0):
//   dns.lookup          { source: 'hit' | 'stale' | 'negative' (0: no clock) | 'upstream' | 'error' }
//   batch.queue_wait    { batcher } per item, at its first send: send time - push time
//   batch.flush         { batcher, outcome: 'ok' | 'error' } send() round trip
//   http.request        { origin, outcome: 'ok' | 'error' | 'timeout' }

// Label values come from the program (origins, sources); past this many
// label sets per kind, new ones share one series whose values are all
// "other", so a label per hostname cannot grow without bound.
const MAX_SERIES_PER_KIND = 100

const KIND = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/
const LABEL = /^[a-z_][a-z0-9_]*$/

// key -> { kind, labels, histogram }, shared by every copy through
// globalThis (on a frozen one, this copy's own: see core/global-slot.js).
function registry () {
  return sharedSlot(kRegistry, () => new Map())
}

function histogram (kind, labels = {}) {
  const where = 'histogram()'
  if (typeof kind !== 'string' || !KIND.test(kind)) {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, `kind must be dotted lower-case words ("dns.lookup"), got ${JSON.stringify(kind)}`)
  }
  if (labels === null || typeof labels !== 'object' || Array.isArray(labels)) {
    throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, 'labels must be an object of strings')
  }
  const names = Object.keys(labels).sort()
  for (const name of names) {
    if (!LABEL.test(name) || typeof labels[name] !== 'string') {
      throw new ERR_IO_HYGIENE_INVALID_ARGUMENT(where, `label ${JSON.stringify(name)} must be a lower_snake name with a string value`)
    }
  }
  const map = registry()
  let key = kind
  for (const name of names) key += `\0${name}=${labels[name]}`
  let entry = map.get(key)
  if (entry !== undefined) return entry.histogram
  if (names.length > 0 && seriesOf(map, kind) >= MAX_SERIES_PER_KIND) {
    const other = Object.fromEntries(names.map((name) => [name, 'other']))
    key = kind
    for (const name of names) key += `\0${name}=other`
    entry = map.get(key)
    if (entry !== undefined) return entry.histogram
    labels = other
  }
  entry = { kind, labels: Object.freeze(Object.fromEntries(names.map((n) => [n, labels[n]]))), histogram: new Histogram() }
  map.set(key, entry)
  return entry.histogram
}

function seriesOf (map, kind) {
  let n = 0
  for (const entry of map.values()) if (entry.kind === kind) n++
  return n
}

// Every series: [{ kind, labels, histogram }], in creation order.
function series () {
  return [...registry().values()]
}

module.exports = { histogram, series, MAX_SERIES_PER_KIND }
