'use strict'

// closeAll(), and the signal decisions that a load test cannot pin down.
// Under load and against real servers: test/shutdown.test.js.
const t = require('tap')
const { spawn } = require('node:child_process')
const { closeAll, createHttpSink } = require('..')
const { startHttpServer } = require('./helpers/http-server')
const { createBatcher } = require('../lib/batch')

// Runs `code` in a child; onOutput(out, child) sees its whole stdout after
// each chunk (to send the signals); resolves { exited, out } at its exit.
function runChild (t, code, onOutput) {
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => child.kill('SIGKILL'))
  let out = ''
  child.stdout.on('data', (d) => {
    out += d
    onOutput(out, child)
  })
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ exited: { code, signal }, out })))
}

const never = () => new Promise(() => {})

t.test('closeAll() checks its options before closing anything', async (t) => {
  const b = createBatcher({ send: async () => {}, flushOnSignals: true })
  t.teardown(() => b.close())
  await t.rejects(closeAll({ timeoutMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  await t.rejects(closeAll({ before: 'app.close' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  await t.rejects(closeAll({ timeoutMS: 1000 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' })
  t.notOk(b.closed)
})

t.test('closeAll() runs `before` to its end, then closes every client that drains on signals', async (t) => {
  const order = []
  const sent = []
  const b = createBatcher({ send: async (items) => { sent.push(...items) }, flushOnSignals: true, lingerMs: 60_000, flushWhenIdle: false })
  const own = createBatcher({ send: async () => {} }) // not on signals: the application's to close
  t.teardown(() => own.close())
  const pushed = b.push('sent while the server stops')
  await closeAll({
    before: async () => {
      await new Promise(setImmediate)
      order.push(`before, closed ${b.closed}`)
    },
  })
  await pushed
  order.push(`after, closed ${b.closed}`)
  t.same(order, ['before, closed false', 'after, closed true'])
  t.same(sent, ['sent while the server stops'])
  t.notOk(own.closed)
})

t.test('closeAll() closes the clients at the deadline when `before` has not ended, or failed', async (t) => {
  const b = createBatcher({ send: never, flushOnSignals: true })
  const pushed = b.push('never answered')
  await closeAll({ timeoutMs: 50, before: never })
  await t.rejects(pushed, { code: 'ERR_IO_HYGIENE_TIMEOUT' }, 'rejected to its caller, not lost')
  t.ok(b.closed)

  const c = createBatcher({ send: async () => {}, flushOnSignals: true })
  await closeAll({ before: () => { throw new Error('the server would not close') } })
  t.ok(c.closed)
  await closeAll() // nothing left: resolves at once
})

// A child with a batcher on signals whose sends are never answered, and an
// application handler for SIGTERM: every SIGTERM is the application's, a
// second one included.
t.test('a second signal the application listens for is the application\'s', async (t) => {
  const code = `
    const { createBatcher } = require(${JSON.stringify(require.resolve('../lib/batch'))})
    const b = createBatcher({ send: () => new Promise(() => {}), flushOnSignals: true, shutdownTimeoutMs: 60000 })
    b.push('a').catch(() => {})
    let n = 0
    process.on('SIGTERM', () => {
      process.stdout.write('app got SIGTERM\\n')
      if (++n === 2) b.close({ timeoutMs: 1 }).catch(() => process.stdout.write('closed\\n'))
      else process.stdout.write('ready\\n')
    })
    process.stdout.write('ready\\n')`
  let signals = 0
  const { exited, out } = await runChild(t, code, (out, child) => {
    while (out.split('ready\n').length - 1 > signals) {
      signals++
      child.kill('SIGTERM')
    }
  })
  t.same(exited, { code: 0, signal: null }, 'ended by the application, not by either signal')
  t.same(out.trim().split('\n'), ['ready', 'app got SIGTERM', 'ready', 'app got SIGTERM', 'closed'])
})

// Two handlers (SIGTERM and SIGINT, or a helper that calls it again) both
// await closeAll() before process.exit(): the second must not resolve while
// the first is still delivering, or its exit loses what the clients hold.
// A sink leaves the registry as its close begins, which the batcher does not.
t.test('closeAll() called while another is closing waits for those clients too', async (t) => {
  const server = await startHttpServer()
  t.teardown(() => server.close())
  let release
  const answered = new Promise((resolve) => { release = resolve })
  let received
  const arrived = new Promise((resolve) => { received = resolve })
  server.handler = (req, res) => {
    req.resume()
    received()
    answered.then(() => res.end('ok'))
  }
  const sink = createHttpSink({ url: server.url('/ingest') })
  const order = []
  const pushed = sink.push({ n: 1 }).then(() => order.push('delivered'))
  await arrived
  const first = closeAll().then(() => order.push('first'))
  const second = closeAll().then(() => order.push('second'))
  await new Promise(setImmediate)
  t.same(order, [], 'neither resolved while the request is unanswered')
  release()
  await Promise.all([pushed, first, second])
  t.equal(order[0], 'delivered')
  t.ok(sink.closed)
})

// The application's listener runs before ours (prependOnceListener, or a
// prepended listener that removes itself): it has left the list when ours
// counts, yet it listened when the signal arrived, so the process is its.
for (const how of ['prependOnceListener', 'prependListener, removing itself']) {
  t.test(`a signal the application listens for with ${how} is the application's`, async (t) => {
    const code = `
      const { createBatcher } = require(${JSON.stringify(require.resolve('../lib/batch'))})
      const b = createBatcher({ send: () => new Promise(() => {}), flushOnSignals: true, shutdownTimeoutMs: 60000 })
      b.push('a').catch(() => {})
      const handler = async () => {
        process.removeListener('SIGTERM', handler)
        await new Promise(setImmediate)
        await b.close({ timeoutMs: 1 }).catch(() => {})
        process.stdout.write('handler done\\n')
      }
      process.${how.startsWith('prependOnce') ? 'prependOnceListener' : 'prependListener'}('SIGTERM', handler)
      process.stdout.write('ready\\n')`
    let sent = false
    const { exited, out } = await runChild(t, code, (out, child) => {
      if (!sent) child.kill('SIGTERM')
      sent = true
    })
    t.same(exited, { code: 0, signal: null }, 'ended by the application, not by the signal')
    t.same(out.trim().split('\n'), ['ready', 'handler done'])
  })
}

// An application that handles SIGINT (Ctrl-C) but not SIGTERM: the SIGTERM
// that comes after a SIGINT is still the first one only we listen for, and
// is drained, not taken for a second one that ends the process at once.
t.test('a signal only we listen for, after one the application handled, drains first', async (t) => {
  const code = `
    const { createBatcher } = require(${JSON.stringify(require.resolve('../lib/batch'))})
    const b = createBatcher({
      send: async (items) => { process.stdout.write('sent ' + items + '\\n') },
      flushOnSignals: true, lingerMs: 60000, flushWhenIdle: false,
    })
    process.on('SIGINT', () => {
      b.push('a').catch(() => process.stdout.write('rejected\\n'))
      process.stdout.write('ready\\n')
    })
    setInterval(() => {}, 1000) // a server, say: it ends by the signal
    process.stdout.write('ready\\n')`
  let signals = 0
  const { exited, out } = await runChild(t, code, (out, child) => {
    while (out.split('ready\n').length - 1 > signals) child.kill(signals++ === 0 ? 'SIGINT' : 'SIGTERM')
  })
  t.same(exited, { code: null, signal: 'SIGTERM' }, 'dies of SIGTERM, as without us')
  t.same(out.trim().split('\n'), ['ready', 'ready', 'sent a'], 'what it held was sent first')
})

// While we drain for a SIGTERM only we listen for, a SIGINT the
// application handles is its own: it neither ends the process at once nor
// stops the drain, which ends by SIGTERM.
t.test('a signal the application handles during our drain is left to it', async (t) => {
  const code = `
    const { createBatcher } = require(${JSON.stringify(require.resolve('../lib/batch'))})
    const b = createBatcher({
      send: () => { process.stdout.write('sending\\n'); return new Promise(() => {}) },
      flushOnSignals: true, lingerMs: 60000, flushWhenIdle: false, shutdownTimeoutMs: 1000,
    })
    b.push('a').catch((err) => process.stdout.write(err.code + '\\n'))
    process.on('SIGINT', () => process.stdout.write('app got SIGINT\\n'))
    setInterval(() => {}, 1000)
    process.stdout.write('ready\\n')`
  const { exited, out } = await runChild(t, code, (out, child) => {
    if (out === 'ready\n') child.kill('SIGTERM')
    if (out === 'ready\nsending\n') child.kill('SIGINT')
  })
  t.same(exited, { code: null, signal: 'SIGTERM' })
  t.same(out.trim().split('\n'), ['ready', 'sending', 'app got SIGINT', 'ERR_IO_HYGIENE_TIMEOUT'])
})
