'use strict'

// A user's test suite fakes timers (node:test's mock.timers here; sinon's
// fake-timers replace the same globals). io-hygiene's own waits keep real
// time: a retry backoff still ends, a deadline is not reached by a tick.
// Plain undici, in the same child with io-hygiene left out, is the oracle.
const t = require('tap')
const path = require('node:path')
const { execFile } = require('node:child_process')

const fixture = path.join(__dirname, 'fixtures', 'http-fake-timers.js')
const run = (...args) => new Promise((resolve) => {
  execFile(process.execPath, [fixture, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
    resolve({ code: err?.code ?? 0, stdout, stderr })
  })
})

t.test('a refused connection settles while timers are faked, as with plain undici', async (t) => {
  const plain = await run('refused', 'plain')
  t.same(plain, { code: 0, stdout: 'settled: ECONNREFUSED\n', stderr: plain.stderr }, 'plain undici')
  const ours = await run('refused')
  t.equal(ours.stdout, plain.stdout, 'the retry backoff ended in real time')
  t.equal(ours.code, 0)
})

t.test('ticking a fake clock past requestTimeoutMs does not abort a real request', async (t) => {
  const plain = await run('deadline', 'plain')
  t.equal(plain.stdout, 'settled: ok\n', 'plain undici')
  const ours = await run('deadline')
  t.equal(ours.stdout, plain.stdout)
  t.equal(ours.code, 0)
})

t.test('the real timers are read once, as the package loads', async (t) => {
  const timers = require('../lib/core/timers')
  const { mock } = require('node:test')
  mock.timers.enable({ apis: ['setTimeout'] })
  t.teardown(() => mock.timers.reset())
  t.not(globalThis.setTimeout, timers.setTimeout, 'the global is faked')
  t.not(require('node:timers').setTimeout, timers.setTimeout, 'so is node:timers\' export')
  await new Promise((resolve) => timers.setTimeout(resolve, 1))
  t.pass('ours fired without a tick')
})
