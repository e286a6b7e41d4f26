'use strict'

// The timer functions and clocks as they were when io-hygiene loaded. A
// test suite's fake timers (node:test's mock.timers, sinon) replace the
// globals, and mock.timers node:timers' exports too, after this module has
// read them: io-hygiene's own waits (a retry backoff, a request deadline)
// then keep real time, as undici's sockets do, instead of never ending or
// ending when the test ticks its clock. Loaded with the package, before a
// test can install its fakes.
// The clock is process.hrtime's, not performance.now(): as fake-proof once
// captured, and it does not load perf_hooks into every process at start-up.
const timers = require('node:timers')
const hrtime = process.hrtime.bigint

module.exports = {
  setTimeout: timers.setTimeout,
  clearTimeout: timers.clearTimeout,
  setInterval: timers.setInterval,
  clearInterval: timers.clearInterval,
  setImmediate: timers.setImmediate,
  clearImmediate: timers.clearImmediate,
  now: () => Number(hrtime()) / 1e6,
  dateNow: Date.now,
}
