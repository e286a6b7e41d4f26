'use strict'

const { install, uninstall, installed } = require('./lib/install')
const { createDnsCache } = require('./lib/dns')
const errors = require('./lib/errors')

module.exports = {
  install,
  uninstall,
  installed,
  createDnsCache,
  errors: errors.codes,
}
