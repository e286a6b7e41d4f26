'use strict'

// Only what install() needs loads with the package: a service pays at start
// for the modules it turns on, and the rest loads at its first call. The
// exports stay one object literal, so that `import { wrapProducer } from
// 'io-hygiene'` finds every name.
// io-hygiene's own waits keep real time under a test's fake timers: the
// real ones are read as install.js loads (lib/core/timers.js says why).
const { install, uninstall, installed } = require('./lib/install')

// A function that loads its module at its first call and hands it the call;
// later calls go straight to the module's function.
function lazy (file, name) {
  let fn = null
  return function (...args) {
    fn ??= require(file)[name]
    return fn(...args)
  }
}

const createDnsCache = lazy('./lib/dns', 'createDnsCache')
const createBatcher = lazy('./lib/batch', 'createBatcher')
const wrapProducer = lazy('./lib/kafka', 'wrapProducer')
const createStatsd = lazy('./lib/statsd', 'createStatsd')
const wrapStatsd = lazy('./lib/statsd', 'wrapStatsd')
const createHttpSink = lazy('./lib/http/sink', 'createHttpSink')
const createMonitor = lazy('./lib/monitor', 'createMonitor')
const histogram = lazy('./lib/metrics/registry', 'histogram')
const createOtelProducer = lazy('./lib/monitor/outputs/otel', 'createOtelProducer')
const closeAll = lazy('./lib/core/shutdown', 'closeAll')

// A class or an object cannot be wrapped: each is a getter, in the one form
// that still lets `import { Histogram } from 'io-hygiene'` find it. The error
// classes load with the first refusal, or here.
const later = {
  get Histogram () {
    return require('./lib/metrics/histogram').Histogram
  },
  get errors () {
    return require('./lib/core/errors').codes
  },
}

module.exports = {
  install,
  uninstall,
  installed,
  createDnsCache,
  createBatcher,
  wrapProducer,
  createStatsd,
  wrapStatsd,
  createHttpSink,
  createMonitor,
  histogram,
  createOtelProducer,
  closeAll,
}
Object.defineProperty(module.exports, 'errors', { enumerable: true, get: function () { return later.errors } })
Object.defineProperty(module.exports, 'Histogram', { enumerable: true, get: function () { return later.Histogram } })
