'use strict'

const t = require('tap')
const { Writable } = require('node:stream')
const undici = require('undici')
const ioHygiene = require('..')
const { headerValue, headerList } = require('../lib/http/headers')
const { startHttpServer } = require('./helpers/http-server')

t.test('headerValue reads every header form undici accepts', async (t) => {
  t.equal(headerValue(null, 'idempotency-key'), undefined)
  t.equal(headerValue({ 'Idempotency-Key': 'a' }, 'idempotency-key'), 'a')
  t.equal(headerValue({ other: 'x' }, 'idempotency-key'), undefined)
  t.equal(headerValue(['Content-Length', '12', 'Idempotency-Key', Buffer.from('b')], 'idempotency-key'), 'b')
  t.equal(headerValue(['content-type', 'text/plain'], 'idempotency-key'), undefined)
  t.equal(headerValue(headerList(new Map([['Idempotency-Key', 'd']])), 'idempotency-key'), 'd')
  t.equal(headerValue(headerList(new Map([['x', 'y']])), 'idempotency-key'), undefined)
  t.equal(headerValue(headerList(new Set(['not a pair'])), 'idempotency-key'), undefined, 'undici refuses it, not us')
})

t.test('headerList reads a one-shot iterable once, and leaves other forms alone', async (t) => {
  const plain = { a: '1' }
  t.equal(headerList(plain), plain)
  const flat = ['a', '1']
  t.equal(headerList(flat), flat)
  t.equal(headerList(undefined), undefined)
  const bare = Object.assign(Object.create(null), { a: '1' })
  t.equal(headerList(bare), bare, 'no prototype, no iterator: read by its keys')
  function * pairs () { yield ['a', '1'] }
  const once = headerList(pairs())
  t.same([...once], [['a', '1']])
  t.same([...once], [['a', '1']], 'read again, as a retry does')
  t.same([...headerList(new Headers({ a: '1' }))], [['a', '1']])
})

// The oracle is a plain undici Agent: the same headers must reach the server,
// or the same error come back, through request, stream, pipeline and fetch.
t.test('every header form reaches the server as through a plain undici Agent', async (t) => {
  const server = await startHttpServer()
  t.teardown(() => server.close())
  // The x- headers as they arrived, names as written, in order.
  server.handler = (req, res) => {
    req.resume()
    const seen = []
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (/^x-/i.test(req.rawHeaders[i])) seen.push(req.rawHeaders[i], req.rawHeaders[i + 1])
    }
    req.on('end', () => res.end(JSON.stringify(seen)))
  }
  const plain = new undici.Agent()
  t.teardown(() => plain.close())
  const ours = ioHygiene.install({ dns: false, kafkajs: false }).http.dispatcher
  t.teardown(() => ioHygiene.uninstall())

  function * generated () {
    yield ['X-A', '1']
    yield ['x-b', '2']
  }
  function * notPairs () { yield ['X-A'] }
  const forms = {
    'plain object': () => ({ 'X-A': '1', 'x-b': ['2', '3'] }),
    'object without a prototype': () => Object.assign(Object.create(null), { 'X-A': '1' }),
    'flat array': () => ['X-A', '1', 'x-b', '2'],
    'Map of two': () => new Map([['X-A', '1'], ['x-b', '2']]),
    'Map of one': () => new Map([['X-A', '1']]),
    'Map with a list value': () => new Map([['X-A', ['1', '2']]]),
    Headers: () => new Headers({ 'X-A': '1', 'x-b': '2' }),
    generator: () => generated(),
    'object with its own iterator': () => ({ [Symbol.iterator]: generated }),
    'iterable that yields no pair': () => notPairs(),
    'array of two pairs': () => [['X-A', '1'], ['x-b', '2']],
    'array of one pair': () => [['X-A', '1']],
    'bad value in a Map': () => new Map([['X-A', 'a\nb']]),
  }
  const outcome = (promise) => promise.then((text) => ({ headers: JSON.parse(text) }), (err) => ({ error: `${err.name}: ${err.message}` }))
  const via = {
    request: (dispatcher, headers) => outcome(undici.request(server.url(), { dispatcher, headers }).then(({ body }) => body.text())),
    stream: (dispatcher, headers) => {
      let text = ''
      return outcome(undici.stream(server.url(), { dispatcher, headers }, () => new Writable({
        write (chunk, _, callback) {
          text += chunk
          callback()
        },
      })).then(() => text))
    },
    pipeline: (dispatcher, headers) => outcome(new Promise((resolve, reject) => {
      let text = ''
      const duplex = undici.pipeline(server.url(), { dispatcher, headers }, ({ body }) => body)
      duplex.on('data', (chunk) => { text += chunk })
      duplex.on('end', () => resolve(text))
      duplex.on('error', reject)
      duplex.end()
    })),
    fetch: (dispatcher, headers) => outcome(undici.fetch(server.url(), { dispatcher, headers }).then((res) => res.text())),
  }
  for (const [api, send] of Object.entries(via)) {
    for (const [form, make] of Object.entries(forms)) {
      const expected = await send(plain, make())
      const actual = await send(ours, make())
      t.same(actual, expected, `${api}, ${form}: ${JSON.stringify(expected)}`)
    }
  }
  t.ok(server.counts.requests > 0)
})
