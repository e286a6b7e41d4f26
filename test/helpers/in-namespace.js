'use strict'

// For test files that need the system resolver to ask a test DNS server:
// call `enterNamespace(__filename, { hosts, search })` at the top. Outside the
// namespace it re-runs the file inside one (and returns false: the caller
// stops there, printing nothing, as the child's TAP output is the file's);
// inside it returns { nameserver } for the DNS server to listen on, port 53.
// Where namespaces are impossible it returns null after printing a skip.
const { namespaceSupport, ipv4OnlySupport, randomLoopback, writeResolverFiles, spawnInNamespace } = require('./namespace')
const fs = require('node:fs')

// `options`: resolv.conf's options line; `ipv4Only`: a network namespace of
// its own with IPv4 only, `loOnly` with loopback only (see namespace.js).
function enterNamespace (file, { hosts, search = [], options, ipv4Only = false, loOnly = false } = {}) {
  if (process.env.IO_HYGIENE_TEST_NAMESPACE === '1') {
    return { nameserver: process.env.IO_HYGIENE_TEST_NAMESERVER }
  }
  const support = ipv4Only ? ipv4OnlySupport() : namespaceSupport()
  if (support !== true) {
    require('tap').plan(0, `skipped: ${support}`)
    return null
  }
  const nameserver = randomLoopback()
  const files = writeResolverFiles({ nameserver, hosts, search, options })
  const child = spawnInNamespace(files, [...process.execArgv, file], {
    stdio: 'inherit',
    env: { ...process.env, IO_HYGIENE_TEST_NAMESPACE: '1', IO_HYGIENE_TEST_NAMESERVER: nameserver },
  }, { ipv4Only, loOnly })
  child.on('exit', (code, signal) => {
    fs.rmSync(files.dir, { recursive: true, force: true })
    process.exitCode = code ?? (signal ? 1 : 0)
  })
  return false
}

module.exports = { enterNamespace }
