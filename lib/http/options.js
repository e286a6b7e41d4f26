'use strict'

// The http module's options: loaded by install() when it is given options
// or IO_HYGIENE_HTTP_* variables, or when the defaults are first read (as
// our Agent is made).
const { integer, timerMs, boolean, nullable } = require('../core/options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('../core/errors')

// Defaults, and why, are in docs/http.md's options table; a test keeps the two equal.
const spec = {
  connections: { default: 128, check: integer(1) },
  keepAliveTimeoutMs: { default: 4_000, check: timerMs(1) },
  connectTimeoutMs: { default: 10_000, check: timerMs(1) },
  headersTimeoutMs: { default: 30_000, check: timerMs(1) },
  bodyTimeoutMs: { default: 30_000, check: timerMs(1) },
  requestTimeoutMs: { default: null, check: nullable(timerMs(1)) },
  statusRetries: { default: false, check: boolean() },
  maxRetries: { default: 2, check: integer(0, 10) },
  retryBaseDelayMs: { default: 100, check: timerMs(1) },
  maxRetryDelayMs: { default: 10_000, check: timerMs(1) },
  retryBudgetPercent: { default: 10, check: integer(0, 100) },
  retryBudgetMinPerSecond: { default: 10, check: integer(0) },
  maxReplayBodyBytes: { default: 65_536, check: integer(0) },
  learnIdleClose: { default: true, check: boolean() },
}

// What no single option's validator can see.
function check (resolved, where) {
  if (resolved.retryBaseDelayMs > resolved.maxRetryDelayMs) {
    throw new (errors().ERR_IO_HYGIENE_CONFLICTING_OPTIONS)(where, `retryBaseDelayMs (${resolved.retryBaseDelayMs}) must not exceed maxRetryDelayMs (${resolved.maxRetryDelayMs})`)
  }
}

module.exports = { spec, check }
