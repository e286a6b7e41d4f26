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
  t.throws(() => resolve('f()', spec, { other: 7 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /unknown option "other" \(known options: aMs, flag\)$/ })
  t.throws(() => resolve('f()', spec, { aMS: 7 }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /unknown option "aMS"; did you mean "aMs"\?$/ }, 'a typo names the option meant')
  t.throws(() => resolve('f()', spec, { aMs: -1 }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.throws(() => resolve('f()', spec, []), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.same(defaultsOf(spec), { aMs: 5, flag: true })
})

t.test('a typo among many options names the one meant, not the whole list', async (t) => {
  const { spec } = require('../lib/monitor')
  t.throws(() => resolve('createMonitor()', spec, { intervalMS: 1000 }), { message: 'createMonitor(): unknown option "intervalMS"; did you mean "intervalMs"?' })
  t.throws(() => resolve('createMonitor()', spec, { heapSnapshotMaxByte: 1 }), { message: /did you mean "heapSnapshotMaxBytes"\?$/ })
  t.throws(() => resolve('createMonitor()', spec, { cooldown: 1 }), { message: /did you mean "cooldownMs"\?$/ })
})

t.test('an unknown option\'s name is shown escaped and short, never raw', async (t) => {
  const spec = { aMs: { default: 5, check: integer() } }
  const err = (input) => {
    try {
      resolve('f()', spec, input)
    } catch (e) {
      t.equal(e.code, 'ERR_IO_HYGIENE_UNKNOWN_OPTION')
      return e.message
    }
    t.fail('no error')
  }
  // A key from a config file can forge a log line or drive a terminal.
  const forged = err({ 'x\n[error] forged line\u001b[2J\u202e': 1 })
  // eslint-disable-next-line no-control-regex -- matching them is the point
  t.notMatch(forged, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e]/, 'no control or bidirectional character')
  t.match(forged, 'unknown option "x\\u000a[error] forged line\\u001b[2J\\u202e"', 'escaped, as printable() does')
  t.match(err({ 'aMs\n': 1 }), /unknown option "aMs\\u000a"; did you mean "aMs"\?$/, 'in the did-you-mean form too')
  const long = err({ ['k'.repeat(1_000_000)]: 1 })
  t.ok(long.length < 300, `a key of a million characters is cut (${long.length} characters)`)
  t.match(long, /unknown option "k{40}…" \(1000000 characters\)/)
})

t.test('a refused string value is shown escaped and short, never raw', async (t) => {
  const check = oneOf('a', 'b')
  t.throws(() => check('f()', 'o', 'c\n[error] forged\u001b[2J\u202e\u2028'), { message: 'f(): option "o" must be one of "a", "b", got "c\\n[error] forged\\u001b[2J\\u202e\\u2028"' })
  let message = ''
  try { check('f()', 'o', 'v'.repeat(1_000_000)) } catch (e) { message = e.message }
  t.ok(message.length < 300, `a value of a million characters is cut (${message.length} characters)`)
  t.match(message, /got "v{100}…" \(1000000 characters\)$/)
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

t.test('install() takes no module\'s setting from Object.prototype, with or without variables (a child process, polluted)', async (t) => {
  const fixture = path.join(__dirname, 'fixtures', 'install-polluted-modules.js')
  const run = (env) => new Promise((resolve, reject) => {
    execFile(process.execPath, [fixture], { timeout: 60_000, env: { PATH: process.env.PATH, ...env } }, (err, stdout, stderr) => err ? reject(Object.assign(err, { stderr })) : resolve(JSON.parse(stdout)))
  })
  t.same(await run({}), { on: { dns: true, http: true, monitor: false }, kafkajs: true, maxTtlMs: 300_000, prototypeKept: true },
    'the defaults, as if Object.prototype were clean')
  t.same(await run({ IO_HYGIENE_DNS_MAX_TTL_MS: '5000' }), { on: { dns: true, http: true, monitor: false }, kafkajs: true, maxTtlMs: 5000, prototypeKept: true },
    'the variable applies, and nothing is written to Object.prototype')
})

t.test('errors.md\'s misspelt-option example prints what its comments say', async (t) => {
  const fs = require('node:fs')
  const os = require('node:os')
  const page = fs.readFileSync(path.join(__dirname, '..', 'docs', 'errors.md'), 'utf8')
  const code = /```js\n([\s\S]*?)\n```/.exec(page)[1]
  const expected = [...code.matchAll(/console\.log\(.*\) \/\/ (.*)$/gm)].map((m) => m[1])
  t.equal(expected.length, 3, 'three lines of output, each in a comment')
  // As a reader runs it: io-hygiene installed in a project of their own.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-errors-md-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  fs.symlinkSync(path.join(__dirname, '..'), path.join(dir, 'node_modules', 'io-hygiene'), 'dir')
  fs.writeFileSync(path.join(dir, 'example.js'), code + '\n')
  const stdout = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['example.js'], { cwd: dir, timeout: 60_000 }, (err, stdout) => err ? reject(err) : resolve(stdout))
  })
  t.same(stdout.trim().split('\n'), expected)
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

t.test('resolved options are an object V8 reads fast, not a dictionary (hot paths read them)', async (t) => {
  const { spawnSync } = require('node:child_process')
  const script = `
    const { resolve } = require(${JSON.stringify(require.resolve('../lib/core/options'))})
    const { spec } = require(${JSON.stringify(require.resolve('../lib/batch/options'))})
    const o = resolve('x', spec, { send: () => {} })
    process.stdout.write(JSON.stringify([Object.keys(spec).length, %HasFastProperties(o), Object.isFrozen(o)]))`
  const child = spawnSync(process.execPath, ['--allow-natives-syntax', '-e', script], { encoding: 'utf8' })
  t.equal(child.status, 0, child.stderr)
  const [keys, fast, frozen] = JSON.parse(child.stdout)
  t.ok(keys > 12, 'enough options to have made a dictionary')
  t.equal(fast, true)
  t.equal(frozen, true)
})
