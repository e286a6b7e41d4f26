'use strict'

const { integer, boolean, nullable } = require('../options')
const { ERR_IO_HYGIENE_CONFLICTING_OPTIONS } = require('../errors')

// Defaults, and why, are in the README's http table; a test keeps the two equal.
const spec = {
  connections: { default: 128, check: integer(1) },
  keepAliveTimeoutMs: { default: 4_000, check: integer(1) },
  connectTimeoutMs: { default: 10_000, check: integer(1) },
  headersTimeoutMs: { default: 30_000, check: integer(1) },
  bodyTimeoutMs: { default: 30_000, check: integer(1) },
  requestTimeoutMs: { default: null, check: nullable(integer(1)) },
  maxRetries: { default: 2, check: integer(0, 10) },
  retryBaseDelayMs: { default: 100, check: integer(1) },
  maxRetryDelayMs: { default: 10_000, check: integer(1) },
  retryBudgetPercent: { default: 10, check: integer(0, 100) },
  retryBudgetMinPerSecond: { default: 10, check: integer(0) },
  maxReplayBodyBytes: { default: 65_536, check: integer(0) },
  learnIdleClose: { default: true, check: boolean() },
}

// What no single option's validator can see.
function check (resolved, where) {
  if (resolved.retryBaseDelayMs > resolved.maxRetryDelayMs) {
    throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `retryBaseDelayMs (${resolved.retryBaseDelayMs}) must not exceed maxRetryDelayMs (${resolved.maxRetryDelayMs})`)
  }
}

// Sets our Agent as undici's global dispatcher, which Node's global fetch
// (undici 6 on Node 20, 7 on Node 24), undici.fetch and undici.request all
// read. A fresh Agent, never one composed on getGlobalDispatcher() (undici
// #3973: composing on the global one stacks interceptors on every install).
// Returns { value, undo }.
function installHttp (resolved) {
  const undici = require('undici')
  const { createAgent, snapshot } = require('./agent')
  const { agent, dispatcher, stats } = createAgent(resolved)
  const previous = undici.getGlobalDispatcher()
  undici.setGlobalDispatcher(dispatcher)
  const value = {
    dispatcher,
    stats: () => snapshot(stats),
  }
  function undo () {
    const ours = undici.getGlobalDispatcher() === dispatcher
    if (ours) undici.setGlobalDispatcher(previous)
    // Graceful: requests under way finish, idle sockets close.
    agent.close().catch(() => {})
    return ours
  }
  return { value, undo }
}

module.exports = { spec, check, installHttp }
