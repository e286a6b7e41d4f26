'use strict'

// Only what install() needs loads with the package: a service pays at start
// for the modules it turns on, and the rest loads at its first call. The
// exports stay one object literal, so that `import { wrapProducer } from
// 'io-hygiene'` finds every name.
const { install, uninstall, installed } = require('./lib/install')
const { codes: errors } = require('./lib/errors')

function createDnsCache (options) {
  return require('./lib/dns').createDnsCache(options)
}

function createBatcher (options) {
  return require('./lib/batch').createBatcher(options)
}

function wrapProducer (producer, options) {
  return require('./lib/kafka').wrapProducer(producer, options)
}

function createStatsd (options) {
  return require('./lib/statsd').createStatsd(options)
}

function wrapStatsd (client, options) {
  return require('./lib/statsd').wrapStatsd(client, options)
}

function createHttpSink (options) {
  return require('./lib/http/sink').createHttpSink(options)
}

function createMonitor (options) {
  return require('./lib/monitor').createMonitor(options)
}

function histogram (kind, labels) {
  return require('./lib/monitor/registry').histogram(kind, labels)
}

// A class cannot be wrapped: it is a getter, in the one form that still lets
// `import { Histogram } from 'io-hygiene'` find it.
const lazy = {
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
Object.defineProperty(module.exports, 'Histogram', { enumerable: true, get: function () { return lazy.Histogram } })
