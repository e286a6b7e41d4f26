'use strict'

// Only what install() needs loads with the package: a service pays at start
// for the modules it turns on, and the rest loads at its first call. The
// exports stay one object literal, so that `import { wrapProducer } from
// 'io-hygiene'` finds every name.
const { install, uninstall, installed } = require('./lib/install')
const { codes: errors } = require('./lib/errors')

// A function that loads its module at its first call and hands it the call.
function lazy (file, name) {
  return function (...args) {
    return require(file)[name](...args)
  }
}

const createDnsCache = lazy('./lib/dns', 'createDnsCache')
const createBatcher = lazy('./lib/batch', 'createBatcher')
const wrapProducer = lazy('./lib/kafka', 'wrapProducer')
const createStatsd = lazy('./lib/statsd', 'createStatsd')
const wrapStatsd = lazy('./lib/statsd', 'wrapStatsd')
const createHttpSink = lazy('./lib/http/sink', 'createHttpSink')
const createMonitor = lazy('./lib/monitor', 'createMonitor')
const histogram = lazy('./lib/monitor/registry', 'histogram')

// A class cannot be wrapped: it is a getter, in the one form that still lets
// `import { Histogram } from 'io-hygiene'` find it.
const classes = {
  get Histogram () {
    return require('./lib/monitor/histogram').Histogram
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
  errors,
}
Object.defineProperty(module.exports, 'Histogram', { enumerable: true, get: function () { return classes.Histogram } })
