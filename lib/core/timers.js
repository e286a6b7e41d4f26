'use strict'

// The timer functions and clocks as they were when io-hygiene loaded. A
// test suite's fake timers (node:test's mock.timers, sinon) replace the
// globals, and mock.timers node:timers' exports too, after the package has
// read them: io-hygiene's own waits (a retry backoff, a request deadline)
// then keep real time, as undici's sockets do, instead of never ending or
// ending when the test ticks its clock. They are read as the package loads,
// before a test can install its fakes, by core/global-slot.js (the first
// file every entry point loads, so that this one need not be).
// The clock is process.hrtime's, not performance.now(): as fake-proof once
// captured, and it does not load perf_hooks into every process at start-up.
const { realTimers } = require('./global-slot')
const hrtime = realTimers.hrtime

module.exports = {
  setTimeout: realTimers.setTimeout,
  clearTimeout: realTimers.clearTimeout,
  setInterval: realTimers.setInterval,
  clearInterval: realTimers.clearInterval,
  setImmediate: realTimers.setImmediate,
  clearImmediate: realTimers.clearImmediate,
  now: () => Number(hrtime()) / 1e6,
  dateNow: realTimers.dateNow,
}
