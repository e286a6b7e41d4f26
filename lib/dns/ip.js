'use strict'

// node:net's isIP, with node:net loaded at the first call: a process that
// installs the cache and has not connected anywhere yet does not pay for it.
let net = null

function isIP (input) {
  net ??= require('node:net')
  return net.isIP(input)
}

module.exports = { isIP }
