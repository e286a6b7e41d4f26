'use strict'

// The dns module's options: loaded by createDnsCache() and by install() when
// it is given options or IO_HYGIENE_DNS_* variables.
const dns = require('node:dns')
const { integer, timerMs, stringArray, nullable, string } = require('../core/options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('../core/errors')

function servers () {
  const check = stringArray()
  const wrapped = (where, key, value) => {
    const list = check(where, key, value)
    // Node's setServers aborts the process on port 0: refused before it is called.
    if (list.some(portZero)) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'an array of DNS server addresses ("ip" or "ip:port", a port from 1 to 65535)', value)
    }
    try {
      new dns.Resolver().setServers(list)
    } catch (cause) {
      throw new (errors().ERR_IO_HYGIENE_INVALID_OPTION)(where, key, 'an array of DNS server addresses ("ip" or "ip:port")', value, { cause })
    }
    return list
  }
  wrapped.expects = 'string[]'
  return wrapped
}

// "ip:0" or "[ip]:0" (any number of zeros), in dns.setServers()'s forms.
function portZero (server) {
  if (require('./ip').isIP(server) !== 0) return false
  const colon = server.startsWith('[') ? server.indexOf(']:') + 1 : server.lastIndexOf(':')
  return colon > 0 && /^0+$/.test(server.slice(colon + 1))
}

function defaultHostsPath () {
  /* c8 ignore next 3: Windows keeps it elsewhere; CI runs on Linux only */
  if (process.platform === 'win32') {
    return `${process.env.SystemRoot ?? 'C:\\Windows'}\\System32\\drivers\\etc\\hosts`
  }
  return '/etc/hosts'
}

// Defaults, and why, are in docs/dns.md's options table; a test keeps the two equal.
const spec = {
  maxEntries: { default: 10_000, check: integer(1) },
  minTtlMs: { default: 1_000, check: timerMs(0) },
  maxTtlMs: { default: 300_000, check: timerMs(0) },
  fallbackTtlMs: { default: 10_000, check: timerMs(0) },
  staleTtlMs: { default: 86_400_000, check: timerMs(0) },
  errorTtlMs: { default: 1_000, check: timerMs(0) },
  queryTimeoutMs: { default: 2_000, check: timerMs(1) },
  sweepIntervalMs: { default: 60_000, check: timerMs(1) },
  servers: { default: null, check: nullable(servers()) },
  hostsFile: { default: defaultHostsPath(), check: nullable(string()) },
}

// What no single option's validator can see.
function check (resolved, where) {
  if (resolved.minTtlMs > resolved.maxTtlMs) {
    throw new (errors().ERR_IO_HYGIENE_CONFLICTING_OPTIONS)(where, `minTtlMs (${resolved.minTtlMs}) must not exceed maxTtlMs (${resolved.maxTtlMs})`)
  }
}

module.exports = { spec, check }
