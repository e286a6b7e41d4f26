'use strict'

const { integer, timerMs, boolean, nullable } = require('../options')
// The error classes load with the first refusal: valid options never need them.
const errors = () => require('../errors')

// Defaults, and why, are in the README's http table; a test keeps the two equal.
const spec = {
  connections: { default: 128, check: integer(1) },
  keepAliveTimeoutMs: { default: 4_000, check: timerMs(1) },
  connectTimeoutMs: { default: 10_000, check: timerMs(1) },
  headersTimeoutMs: { default: 30_000, check: timerMs(1) },
  bodyTimeoutMs: { default: 30_000, check: timerMs(1) },
  requestTimeoutMs: { default: null, check: nullable(timerMs(1)) },
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

// The counters behind installation.http.stats(), shared by the interceptor,
// the pools' connectors and the idle-close learning.
function createStats () {
  return {
    requests: 0,
    retries: { staleSocket: 0, connect: 0, status: 0 },
    timeouts: { connect: 0, headers: 0, body: 0, queue: 0, deadline: 0 },
    connectionsOpened: 0,
    budgetRefusals: 0,
    idleClosesLearned: 0,
    socketsRetired: 0,
  }
}

function snapshot (stats) {
  return { ...stats, retries: { ...stats.retries }, timeouts: { ...stats.timeouts } }
}

// undici's global dispatcher: what Node's global fetch (undici 6 on Node 20,
// 7 on Node 24), undici.fetch and undici.request all read.
const kGlobalDispatcher = Symbol.for('undici.globalDispatcher.1')

// Sets our Agent as the global dispatcher: a fresh Agent, never one composed
// on getGlobalDispatcher() (undici #3973: composing on the global one stacks
// interceptors on every install). Loading undici's index costs a service
// 100 ms or more of its start, so when nothing has set a global dispatcher
// yet, ours is made on first use: the slot holds a getter until someone
// reads it (Node's fetch, undici's index as it loads, our handle).
// Returns { value, undo }.
function installHttp (resolved) {
  const stats = createStats()
  let built = null // { undici, agent, dispatcher, previous }
  const build = () => {
    const undici = require('./undici')
    const { agent, dispatcher } = require('./agent').createAgent(resolved, stats)
    // Nothing before us (the lazy case): uninstall() leaves what undici
    // itself would have set, a default Agent.
    const previous = undici.getGlobalDispatcher() ?? new undici.Agent()
    built = { undici, agent, dispatcher, previous }
    undici.setGlobalDispatcher(dispatcher)
    return built
  }

  let lazy = false
  if (Object.hasOwn(globalThis, kGlobalDispatcher)) {
    build()
  } else {
    lazy = true
    Object.defineProperty(globalThis, kGlobalDispatcher, {
      configurable: true,
      enumerable: false,
      // Read once: build() replaces this property with undici's own.
      get () {
        delete globalThis[kGlobalDispatcher]
        return build().dispatcher
      },
      set (value) {
        Object.defineProperty(globalThis, kGlobalDispatcher, { value, writable: true, enumerable: false, configurable: true })
      },
    })
  }

  const value = {
    // Ours, made now if it was not yet; null if another took the slot first.
    get dispatcher () {
      if (built === null) readSlot()
      return built === null ? null : built.dispatcher
    },
    stats: () => snapshot(stats),
  }
  function undo () {
    if (built === null) {
      // Never used: take the getter away, if it is still ours.
      const ours = lazy && typeof Object.getOwnPropertyDescriptor(globalThis, kGlobalDispatcher)?.get === 'function'
      if (ours) delete globalThis[kGlobalDispatcher]
      return ours
    }
    const ours = built.undici.getGlobalDispatcher() === built.dispatcher
    if (ours) built.undici.setGlobalDispatcher(built.previous)
    // Graceful: requests under way finish, idle sockets close.
    built.agent.close().catch(() => {})
    return ours
  }
  return { value, undo }
}

// Reading the slot runs the getter that makes our Agent.
function readSlot () {
  return globalThis[kGlobalDispatcher]
}

module.exports = { spec, check, installHttp }
