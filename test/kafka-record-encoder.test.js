'use strict'

const t = require('tap')
const { random } = require('./helpers/random')
const path = require('node:path')
const { createRecordEncoder } = require('../lib/kafka/record-encoder')

// kafkajs's own encoder and record, the reference for every byte.
const protocol = path.join(path.dirname(require.resolve('kafkajs')), 'src', 'protocol')
const Encoder = require(path.join(protocol, 'encoder'))
const kafkajsRecord = require(path.join(protocol, 'recordBatch', 'record', 'v0'))

let fallbacks = 0
const original = (record) => {
  fallbacks++
  return kafkajsRecord(record)
}
const Record = createRecordEncoder(Encoder, original)

// What each encoder makes of a record: its bytes, or the error it throws.
function outcome (encode, record) {
  try {
    const encoder = encode({ ...record })
    return { bytes: encoder.buffer.toString('hex'), size: encoder.size(), isEncoder: encoder instanceof Encoder }
  } catch (error) {
    return { error: `${error.name}: ${error.message}` }
  }
}

function same (t, record, name) {
  t.same(outcome(Record, record), outcome(kafkajsRecord, record), name)
}

const STRINGS = ['', 'a', 'héllo', 'ünïcødé ✓', '😀 emoji', '\ud800 lone surrogate', 'x'.repeat(127), 'y'.repeat(128), 'z'.repeat(20_000)]
const DELTAS = [0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8193, 2 ** 20, 2 ** 30, -(2 ** 30), 2 ** 31, 2 ** 31 + 5, -(2 ** 31) - 1, 2 ** 40 + 3, -(2 ** 41), 2 ** 50, -(2 ** 50)]

t.test('the same bytes as kafkajs for strings, Buffers and absent keys, values and headers', async (t) => {
  const next = random(27)
  const pick = (list) => list[Math.floor(next() * list.length)]
  const field = () => pick([
    () => null,
    () => undefined,
    () => pick(STRINGS),
    () => Buffer.from(pick(STRINGS)),
    () => Buffer.alloc(Math.floor(next() * 300), 7),
  ])()
  const headerValue = () => pick([
    () => pick(STRINGS),
    () => Buffer.from(pick(STRINGS)),
    () => [pick(STRINGS), Buffer.from('b')],
    () => [],
  ])()
  let mismatches = 0
  let notEncoders = 0
  const runs = 20_000
  fallbacks = 0
  for (let i = 0; i < runs; i++) {
    const record = { offsetDelta: Math.floor(next() * 2 ** 20), timestampDelta: pick(DELTAS), key: field(), value: field() }
    if (next() < 0.3) {
      record.headers = {}
      for (let h = Math.floor(next() * 4); h > 0; h--) record.headers[`${pick(STRINGS).slice(0, 12)}-${h}`] = headerValue()
    }
    const ours = outcome(Record, record)
    const theirs = outcome(kafkajsRecord, record)
    if (ours.bytes !== theirs.bytes || ours.error !== theirs.error) {
      mismatches++
      if (mismatches === 1) t.same(ours, theirs, `record ${i} (seed 27) encodes as kafkajs does`)
    }
    if (ours.isEncoder !== true) notEncoders++
  }
  t.equal(mismatches, 0, `${runs} generated records, byte for byte`)
  t.equal(notEncoders, 0, 'each returned as an instance of kafkajs\'s Encoder')
  t.equal(fallbacks, 0, 'all of them on the fast path')
})

t.test('the records a produce request builds', async (t) => {
  same(t, { value: 'x'.repeat(100), offsetDelta: 0, timestampDelta: 0 }, 'a value only, as most sends')
  same(t, { key: 'user-1', value: Buffer.from('{}'), offsetDelta: 499, timestampDelta: 12, headers: { 'content-type': 'application/json' } }, 'key, value and a header')
  same(t, { value: null, offsetDelta: 3 }, 'a tombstone, no timestamp delta')
  same(t, { value: 'v', headers: {} }, 'no header')
  same(t, { value: 'v', headers: { trace: ['a', 'b', Buffer.from('c')] } }, 'one header name with several values')
})

t.test('what it does not take goes to kafkajs\'s encoder, errors included', async (t) => {
  const cases = {
    'a number as value': { value: 42 },
    'a number as key': { key: 7, value: 'v' },
    'a Uint8Array as value': { value: new Uint8Array([1, 2, 3]) },
    'a null header value': { value: 'v', headers: { a: null } },
    'a null header item': { value: 'v', headers: { a: ['x', null] } },
    'a number as header value': { value: 'v', headers: { a: 1 } },
    'null headers': { value: 'v', headers: null },
    'an array as headers': { value: 'v', headers: ['x'] },
    'a string as headers': { value: 'v', headers: 'ab' },
    'a timestamp delta past 2^50': { value: 'v', timestampDelta: 2 ** 50 + 2 },
    'a negative timestamp delta past 2^50': { value: 'v', timestampDelta: -(2 ** 52) },
    'a fractional timestamp delta': { value: 'v', timestampDelta: 1.5 },
    'NaN as timestamp delta': { value: 'v', timestampDelta: NaN },
    'an offset delta past 2^30': { value: 'v', offsetDelta: 2 ** 31 },
  }
  for (const [name, record] of Object.entries(cases)) {
    fallbacks = 0
    same(t, record, name)
    t.equal(fallbacks, 1, `${name}: kafkajs's encoder`)
  }
})

t.test('each header value is read once: a getter or a Proxy that answers differently each time still makes a well-formed record', async (t) => {
  const answers = ['a', 'bbbbbbbb', 'cc', 'dddd']
  let reads = 0
  const headers = { stable: 's' }
  Object.defineProperty(headers, 'moving', { enumerable: true, get: () => answers[reads++ % answers.length] })
  const record = { value: 'v', offsetDelta: 0, timestampDelta: 0, headers }
  const encoded = Record(record)
  t.equal(reads, 1, 'the getter ran once')
  t.equal(encoded.buffer.toString('hex'), kafkajsRecord({ ...record, headers: { stable: 's', moving: 'a' } }).buffer.toString('hex'), 'the bytes of the value it read')

  let proxyReads = 0
  const proxied = new Proxy({ trace: ['x', 'y'] }, {
    get (target, name) {
      proxyReads++
      return proxyReads === 1 ? target[name] : ['a much longer value than before']
    },
  })
  const viaProxy = Record({ value: 'v', offsetDelta: 0, timestampDelta: 0, headers: proxied })
  t.equal(proxyReads, 1, 'the Proxy answered once')
  t.equal(viaProxy.buffer.toString('hex'), kafkajsRecord({ value: 'v', headers: { trace: ['x', 'y'] } }).buffer.toString('hex'), 'the bytes of what it answered')
})
