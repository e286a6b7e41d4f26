'use strict'

const t = require('tap')
const { headerValue, headerList } = require('../lib/http/headers')

t.test('headerValue reads every header form undici accepts', async (t) => {
  t.equal(headerValue(null, 'idempotency-key'), undefined)
  t.equal(headerValue({ 'Idempotency-Key': 'a' }, 'idempotency-key'), 'a')
  t.equal(headerValue({ other: 'x' }, 'idempotency-key'), undefined)
  t.equal(headerValue(['Content-Length', '12', 'Idempotency-Key', Buffer.from('b')], 'idempotency-key'), 'b')
  t.equal(headerValue(['content-type', 'text/plain'], 'idempotency-key'), undefined)
  t.equal(headerValue([['Idempotency-Key', 'c']], 'idempotency-key'), 'c')
  t.equal(headerValue([['x', 'y']], 'idempotency-key'), undefined)
  t.equal(headerValue(headerList(new Map([['Idempotency-Key', 'd']])), 'idempotency-key'), 'd')
})

t.test('headerList reads a one-shot iterable once, and leaves other forms alone', async (t) => {
  const plain = { a: '1' }
  t.equal(headerList(plain), plain)
  const flat = ['a', '1']
  t.equal(headerList(flat), flat)
  t.equal(headerList(undefined), undefined)
  function * pairs () { yield ['a', '1'] }
  t.same(headerList(pairs()), [['a', '1']])
  t.same(headerList(new Headers({ a: '1' })), [['a', '1']])
})
