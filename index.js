'use strict'

const { install, uninstall, installed } = require('./lib/install')
const { createDnsCache } = require('./lib/dns')
const { createBatcher } = require('./lib/batch')
const { wrapProducer } = require('./lib/kafka')
const { createStatsd, wrapStatsd } = require('./lib/statsd')
const { createHttpSink } = require('./lib/http/sink')
const { createMonitor, histogram, Histogram } = require('./lib/monitor')
const errors = require('./lib/errors')

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
  Histogram,
  errors: errors.codes,
}
