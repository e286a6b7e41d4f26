'use strict'

// Polls `fn` until it returns truthy, at most `ms`; returns its last value.
// Tests wait on outcomes this way, never on a fixed time that a slow machine
// could overrun.
async function eventually (fn, ms = 10_000, everyMs = 20) {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value || Date.now() > deadline) return value
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

module.exports = { eventually, sleep }
