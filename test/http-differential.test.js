'use strict'

// Differential: the same requests through a plain undici Agent and through
// io-hygiene's global dispatcher, on fuzzed bodies, against a real server
// that records what it receives (each request's method, path and body, in
// order). The server must see the same, and each caller get the same
// outcome, but for the one documented difference: a stale-socket retry.
// IO_HYGIENE_TEST_SEED tries another seed.
const t = require('tap')
const http = require('node:http')
const { Readable, Writable } = require('node:stream')
const undici = require('undici')
const ioHygiene = require('..')
const { random } = require('./helpers/random')

const seed = Number(process.env.IO_HYGIENE_TEST_SEED ?? 41)
t.comment(`IO_HYGIENE_TEST_SEED=${seed}`)
const rand = random(seed)
const pick = (list) => list[Math.floor(rand() * list.length)]

// One server for the whole file; each case's records are its own.
let records = []
const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  const chunks = []
  req.on('data', (chunk) => chunks.push(chunk))
  req.on('end', () => {
    let body = Buffer.concat(chunks).toString('latin1')
    // A multipart boundary is random per request: the same body else.
    const boundary = /boundary=(.+)$/.exec(req.headers['content-type'] ?? '')?.[1]
    if (boundary) body = body.replaceAll(boundary, 'BOUNDARY')
    records.push(`${req.method} ${req.url} ${body.length} ${hash(body)}`)
    const behaviour = req.url.slice(1)
    if (behaviour === 'reset') return req.socket.destroy()
    if (behaviour === 'busy') return res.writeHead(503).end('busy')
    if (behaviour === 'close') res.on('finish', () => req.socket.destroy())
    res.end(`got ${body.length}`)
  })
})
t.before(() => new Promise((resolve) => server.listen(0, '127.0.0.1', resolve)))
t.teardown(() => new Promise((resolve) => {
  server.closeAllConnections()
  server.close(resolve)
}))

function hash (text) {
  let h = 2166136261
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619)
  return (h >>> 0).toString(16)
}

// A body of a fuzzed size in fuzzed chunks, as each client takes it. Sizes
// straddle maxReplayBodyBytes (64 KiB): copied for a retry below, not above.
// `r`: the case's own generator, so that both runs get the same body.
function makeBody (kind, client, r) {
  const size = [0, 1 + Math.floor(r() * 2000), 60_000 + Math.floor(r() * 10_000)][Math.floor(r() * 3)]
  const text = Array.from({ length: size }, () => String.fromCharCode(97 + Math.floor(r() * 26))).join('')
  const parts = []
  for (let at = 0; at < text.length;) {
    const n = Math.floor(r() * text.length / 3) + 1
    parts.push(text.slice(at, at + n))
    at += n
  }
  const withLength = r() < 0.5 ? { 'content-length': String(size) } : {}
  switch (kind) {
    case 'string': return { body: text, headers: {} }
    case 'buffer': return { body: Buffer.from(text), headers: {} }
    case 'iterable': return {
      body: (async function * () { for (const part of parts) yield Buffer.from(part) })(),
      headers: withLength,
    }
    case 'readable': return { body: Readable.from(parts.map((part) => Buffer.from(part))), headers: withLength }
    case 'formdata': {
      // Node's own fetch takes Node's own FormData.
      const form = client === 'global fetch' ? new FormData() : new undici.FormData()
      form.append('field', text)
      form.append('file', new Blob([text.slice(0, 100)]), 'f.txt')
      return { body: form, headers: {} }
    }
    case 'webstream': {
      let i = 0
      const stream = new ReadableStream({
        pull (controller) {
          if (i < parts.length) controller.enqueue(new TextEncoder().encode(parts[i++]))
          else controller.close()
        },
      })
      return { body: stream, headers: client.endsWith('fetch') ? {} : withLength }
    }
  }
  return { body: null, headers: {} }
}

// One request by `client`; its outcome as the caller sees it.
async function send (client, url, method, body, headers, dispatcher) {
  const opts = { method, body, headers, ...(dispatcher ? { dispatcher } : {}) }
  try {
    if (client === 'global fetch') {
      // Its dispatcher is the global one: a fresh plain Agent, or ours.
      const res = await fetch(url, { method, body, headers, duplex: 'half' })
      return `${res.status} ${await res.text()}`
    }
    if (client === 'fetch') {
      const res = await undici.fetch(url, { ...opts, duplex: 'half' })
      return `${res.status} ${await res.text()}`
    }
    if (client === 'request') {
      const res = await undici.request(url, opts)
      return `${res.statusCode} ${await res.body.text()}`
    }
    let text = ''
    const { statusCode } = await undici.stream(url, opts, () => new Writable({
      write (chunk, encoding, callback) {
        text += chunk
        callback()
      },
    }))
    return `${statusCode} ${text}`
  } catch {
    return 'error' // which code a dropped socket gives is a race, plain or not
  }
}

const IDEMPOTENT = new Set(['GET', 'PUT'])

t.test('the server sees what a plain Agent sends, and each caller gets what it gets', async (t) => {
  const origin = `http://127.0.0.1:${server.address().port}`
  let cases = 0
  const staleRetries = []
  for (const client of ['global fetch', 'fetch', 'request', 'stream']) {
    for (const kind of ['none', 'string', 'buffer', 'iterable', 'readable', 'formdata', 'webstream']) {
      for (const behaviour of ['ok', 'busy', 'reset', 'close']) {
        const method = kind === 'none' ? 'GET' : pick(['POST', 'PUT'])
        const bodySeed = Math.floor(rand() * 2 ** 31)
        const run = async (dispatcher) => {
          records = []
          // A warm request first, so that the case's request reuses its socket.
          const warm = await send(client, `${origin}/ok`, 'GET', null, {}, dispatcher)
          await new Promise(setImmediate) // undici frees the socket once the body has ended
          const { body, headers } = makeBody(kind, client, random(bodySeed))
          const outcome = await send(client, `${origin}/${behaviour}`, method, body, headers, dispatcher)
          return { warm, outcome, records }
        }
        const plainAgent = new undici.Agent()
        const before = undici.getGlobalDispatcher()
        if (client === 'global fetch') undici.setGlobalDispatcher(plainAgent)
        const plain = await run(client === 'global fetch' ? null : plainAgent)
        undici.setGlobalDispatcher(before)
        await plainAgent.close()
        const installation = ioHygiene.install({ dns: false })
        const ours = await run(null)
        const retried = installation.http.stats().retries
        ioHygiene.uninstall()

        const name = `${client} ${method} ${kind} -> ${behaviour}`
        // The documented difference: an idempotent request that the server
        // dropped on a reused socket, without a byte of an answer, is sent
        // again (the client cannot tell it from an idle close).
        const expected = { ...plain, records: [...plain.records], retries: { staleSocket: retried.staleSocket, connect: 0, status: 0 } }
        if (retried.staleSocket > 0) {
          staleRetries.push(name)
          if (behaviour !== 'reset' || !IDEMPOTENT.has(method)) t.fail(`${name}: a retry where the server did not drop an idempotent request`)
          expected.records.push(...Array(retried.staleSocket).fill(plain.records.at(-1)))
        }
        t.same({ ...ours, retries: retried }, expected, name)
        cases++
      }
    }
  }
  t.equal(cases, 112)
  t.comment(`sent again after a drop on a reused socket: ${staleRetries.join(', ') || 'none'}`)
  t.ok(staleRetries.includes('fetch GET none -> reset'), 'a GET dropped on a reused socket is one of them')
})
