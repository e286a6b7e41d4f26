'use strict'

// The timer functions and clocks as they were when io-hygiene loaded. A
// test suite's fake timers (node:test's mock.timers, sinon) replace the
// globals, and mock.timers node:timers' exports too, after this module has
// read them: io-hygiene's own waits (a retry backoff, a request deadline)
// then keep real time, as undici's sockets do, instead of never ending or
// ending when the test ticks its clock. Loaded with the package, before a
// test can install its fakes.
const timers = require('node:timers')
const { performance } = require('node:perf_hooks')

module.exports = {
  setTimeout: timers.setTimeout,
  clearTimeout: timers.clearTimeout,
  setInterval: timers.setInterval,
  clearInterval: timers.clearInterval,
  setImmediate: timers.setImmediate,
  clearImmediate: timers.clearImmediate,
  now: performance.now.bind(performance),
  dateNow: Date.now,
}
