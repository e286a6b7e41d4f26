'use strict'

const t = require('tap')
const path = require('node:path')
const { execFile } = require('node:child_process')
const { integer, timerMs, MAX_TIMER_MS, boolean, oneOf, func, string, stringArray, object, nullable, resolve, defaultsOf } = require('../lib/core/options')

// Every module's options, as install() and the factories resolve them.
const SPECS = require('./helpers/specs')
// Durations whose names carry no unit: hot-shots' own.
const UNITLESS_DURATIONS = ['statsd.bufferFlushInterval']

t.test('each validator accepts its type and names the option when it refuses', async (t) => {
  t.equal(integer(1, 5)('f()', 'n', 3), 3)
  t.throws(() => integer(1, 5)('f()', 'n', 6), { code: 'ERR_IO_HYGIENE_OPTION_RANGE', message: /f\(\): option "n" must be an integer from 1 to 5, got 6/ })
  t.throws(() => integer()('f()', 'n', 1.5), RangeError)
  t.throws(() => integer()('f()', 'n', NaN), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.equal(boolean()('f()', 'b', false), false)
  t.throws(() => boolean()('f()', 'b', 0), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.equal(oneOf('a', 'b')('f()', 'o', 'b'), 'b')
  t.throws(() => oneOf('a', 'b')('f()', 'o', 'c'), { message: /must be one of "a", "b"/ })
  const fn = () => {}
  t.equal(func()('f()', 'fn', fn), fn)
  t.throws(() => func()('f()', 'fn', 'x'), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.equal(string()('f()', 's', 'x'), 'x')
  t.throws(() => string()('f()', 's', ''), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.same(stringArray()('f()', 'l', ['a']), ['a'])
  t.ok(Object.isFrozen(stringArray()('f()', 'l', ['a'])))
  t.throws(() => stringArray()('f()', 'l', ['a', '']), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  const o = {}
  t.equal(object()('f()', 'o', o), o)
  t.throws(() => object()('f()', 'o', null), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => object()('f()', 'o', 'x'), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.equal(nullable(object())('f()', 'o', null), null)
  t.equal(nullable(object()).expects, 'object | null')
})

t.test('resolve applies defaults, rejects unknown keys and never replaces a bad value', async (t) => {
  const spec = { aMs: { default: 5, check: integer() }, flag: { default: true, check: boolean() } }
  t.same(resolve('f()', spec), { aMs: 5, flag: true })
  t.same(resolve('f()', spec, { aMs: 7 }), { aMs: 7, flag: true })
  t.ok(Object.isFrozen(resolve('f()', spec, {})))
  t.throws(() => resolve('f()', spec, { aMS: 7 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /known options: aMs, flag/ })
  t.throws(() => resolve('f()', spec, { aMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => resolve('f()', spec, []), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.same(defaultsOf(spec), { aMs: 5, flag: true })
})

t.test('resolve reads own properties only: an inherited option is never used', async (t) => {
  const spec = { aMs: { default: 5, check: integer() } }
  t.same(resolve('f()', spec, Object.create({ aMs: 7 })), { aMs: 5 })
  t.same(resolve('f()', spec, Object.create({ aMs: 'bad' })), { aMs: 5 }, 'nor checked')
})

t.test('every module ignores options inherited from Object.prototype (a child process, polluted)', async (t) => {
  const fixture = path.join(__dirname, 'fixtures', 'options-polluted.js')
  const { stdout } = await new Promise((resolve, reject) => {
    execFile(process.execPath, [fixture], { timeout: 60_000 }, (err, stdout, stderr) => err ? reject(Object.assign(err, { stderr })) : resolve({ stdout }))
  })
  const out = JSON.parse(stdout)
  t.same(out.inherited, Object.fromEntries(Object.keys(SPECS).map((name) => [name, 'ignored'])))
  t.not(out.lookup, '10.66.0.1', 'the polluted servers were not used')
  t.equal(out.asked, 0, 'nothing was asked of them')
})

t.test('timerMs: the one duration validator, at most 2^31-1 ms', async (t) => {
  t.equal(MAX_TIMER_MS, 2 ** 31 - 1)
  t.equal(timerMs()('f()', 'aMs', 2 ** 31 - 1), 2 ** 31 - 1)
  t.throws(() => timerMs()('f()', 'aMs', 2 ** 31), { code: 'ERR_IO_HYGIENE_OPTION_RANGE', message: /an integer from 0 to 2147483647/ })
  t.throws(() => timerMs(1, 2 ** 40)('f()', 'aMs', 2 ** 31), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' }, 'a larger max is capped')
  t.equal(timerMs(1, 10)('f()', 'aMs', 10), 10)
  t.equal(nullable(timerMs()).timer, true)
  t.equal(nullable(integer()).timer, undefined)
})

t.test('every duration option of every module goes through timerMs', async (t) => {
  let durations = 0
  for (const [name, spec] of Object.entries(SPECS)) {
    for (const [key, { check }] of Object.entries(spec)) {
      if (!key.endsWith('Ms') && !UNITLESS_DURATIONS.includes(`${name}.${key}`)) continue
      durations++
      t.equal(check.timer, true, `${name}.${key} uses timerMs`)
      t.throws(() => check('f()', key, 2 ** 31), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' }, `${name}.${key} refuses 2^31`)
    }
  }
  t.ok(durations >= 30, `${durations} durations found`)
})

t.test('monitor conditions read own properties only, and bound cooldownMs as a timer', async (t) => {
  const { parseCondition } = require('../lib/monitor/conditions')
  const inherited = Object.assign(Object.create({ cooldownMs: 5, name: 'inherited', for: 9 }), { when: 'requests > 1' })
  t.match(parseCondition(inherited, { cooldownMs: 7 }), { cooldownMs: 7, name: 'requests > 1', for: 1 })
  t.throws(() => parseCondition({ when: 'requests > 1', cooldownMs: 2 ** 31 }, { cooldownMs: 7 }), { code: 'ERR_IO_HYGIENE_INVALID_CONDITION' })
})

t.test('a refused string is shown escaped: no newline, escape or bidirectional override reaches a log', async (t) => {
  const shown = (check, value) => t.throws(() => check('where', 'key', value)).message
  t.match(shown(oneOf('a'), 'x\u202ey\nz'), 'got "x\\u202ey\\nz"')
  t.match(shown(oneOf('a'), 'x\u001b[31m'), 'got "x\\u001b[31m"')
  t.match(shown(stringArray(), ['x\u2066y', '']), 'got ["x\\u2066y",""]')
})
