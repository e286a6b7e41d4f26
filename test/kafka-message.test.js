'use strict'

// copyMessage(): the copy kafkajs gets of each message, for the shapes the
// broker differential (kafka-differential.test.js) rarely draws, checked
// against what kafkajs's own record encoder and Long make of them.
const t = require('tap')
const path = require('node:path')
const { copyMessage, Refused } = require('../lib/kafka/message')

const src = path.join(path.dirname(require.resolve('kafkajs')), 'src')
const Long = require(path.join(src, 'utils/long'))
const kafkajsRecord = require(path.join(src, 'protocol/recordBatch/record/v0'))

const size = { bytes: 0 }

t.test('header arrays: the present items, each read once, in order', async (t) => {
  const sparse = ['a']
  sparse[2] = 'c'
  let reads = 0
  const proxied = new Proxy(['x', 'y'], { get: (target, name) => { if (name === '0' || name === '1') reads++; return target[name] } })
  const copy = copyMessage({ value: 'v', headers: { sparse, proxied } }, size)
  t.same(copy.headers, { sparse: ['a', 'c'], proxied: ['x', 'y'] })
  t.equal(reads, 2, 'each item read once')
  // kafkajs writes the same headers from the original.
  t.equal(kafkajsRecord({ value: 'v', headers: copy.headers }).buffer.toString('hex'), kafkajsRecord({ value: 'v', headers: { sparse, proxied: ['x', 'y'] } }).buffer.toString('hex'))
  t.equal(size.bytes, kafkajsRecord({ value: 'v', headers: copy.headers }).size(), 'sized as kafkajs writes it alone')
  t.ok(copyMessage({ value: 'v', headers: { a: ['x', 5] } }, size) instanceof Refused, 'a number among the items')
})

t.test('timestamps: the 64-bit integer kafkajs would write, or refused where kafkajs throws', async (t) => {
  // kafkajs alone: firstTimestamp = t, delta = (t || now) - t, both through Long.
  const written = (ts) => {
    const first = Long.fromValue(ts)
    const delta = Long.fromValue((ts || 1000) - ts)
    return BigInt(first.add(delta).toString())
  }
  for (const ts of ['Infinity', '-Infinity', '+Infinity', 'NaN', 2n ** 60n, -(2n ** 60n), '9007199254740993', 5n, NaN, ' 7 ']) {
    const copy = copyMessage({ value: 'v', timestamp: ts }, size)
    t.notOk(copy instanceof Refused, `${String(ts)} taken`)
    t.equal(BigInt(copy.timestamp), written(ts), `${String(ts)}: the same integer`)
    t.ok(copy.timestamp !== 0, 'never 0, which kafkajs would take as now')
  }
  for (const ts of ['', 'abc', 1.5, 0n, Symbol('t'), {}]) {
    const copy = copyMessage({ value: 'v', timestamp: ts }, size)
    t.ok(copy instanceof Refused, `${String(ts)} refused`)
    t.throws(() => written(ts), `kafkajs throws for ${String(ts)} too`)
  }
  t.equal(copyMessage({ value: 'v', timestamp: 0 }, size).timestamp, undefined, '0: the time of the request')
})

t.test('partitions: what kafkajs would place, as a number', async (t) => {
  t.equal(copyMessage({ value: 'v', partition: '3' }, size).partition, 3)
  t.equal(copyMessage({ value: 'v', partition: [2] }, size).partition, 2)
  for (const p of ['03', -1, 0.5, 'a', Symbol('p'), true, {}]) {
    t.ok(copyMessage({ value: 'v', partition: p }, size) instanceof Refused, `${String(p)} refused`)
  }
})

t.test('fields on a prototype: kafkajs\'s record takes only own ones; the copy keeps the prototype for the rest', async (t) => {
  const proto = { key: 'k', partition: 1 }
  const message = Object.create(proto)
  message.value = 'v'
  const copy = copyMessage(message, size)
  t.equal(Object.getPrototypeOf(copy), proto)
  t.notOk(Object.hasOwn(copy, 'key'), 'the key stays on the prototype (the partitioner reads it, the record does not)')
  t.equal(copy.partition, 1)
  // kafkajs writes no key from a prototype, so a number there is no refusal.
  const numberKey = Object.assign(Object.create({ key: 5 }), { value: 'v' })
  t.notOk(copyMessage(numberKey, size) instanceof Refused, 'a number key on the prototype: taken, as kafkajs takes it')
  t.ok(copyMessage({ key: 5, value: 'v' }, size) instanceof Refused, 'an own number key: refused')
  const noProto = Object.assign(Object.create(null), { value: 'v' })
  t.equal(Object.getPrototypeOf(copyMessage(noProto, size)), Object.prototype, 'a null prototype: a plain object')
})

t.test('a value kafkajs reads but the copy does not own: a getter, a non-enumerable field, a polluted Object.prototype', async (t) => {
  const refused = (message) => copyMessage(message, size) instanceof Refused
  t.notOk(refused(Object.defineProperty({}, 'value', { value: 'v', enumerable: false })), 'a non-enumerable own value is a value')
  class WithGetter { get value () { return 'v' } }
  t.notOk(refused(new WithGetter()), 'a getter on the class')
  t.ok(refused({ key: 'k' }), 'no value at all')
  t.ok(refused({ value: undefined }), 'an own undefined')
  Object.prototype.value = 'polluted' // eslint-disable-line no-extend-native
  try {
    t.notOk(refused({}), 'kafkajs reads the polluted value through the prototype')
    t.notOk(refused(Object.create(null, { value: { value: 'v', enumerable: false } })), 'a null prototype with its own, non-enumerable value')
    t.ok(refused(Object.create(null)), 'a null prototype reads nothing from Object.prototype')
  } finally {
    delete Object.prototype.value
  }
})
