'use strict'

const t = require('tap')
const { integer, boolean, oneOf, func, string, stringArray, object, nullable, resolve, defaultsOf } = require('../lib/options')

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
