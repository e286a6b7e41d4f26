'use strict'

const t = require('tap')
const { Readable } = require('node:stream')
const { isReplayable, isIterable, BodyCopy } = require('../lib/http/replayable-body')

class Mismatch extends Error {}

async function collect (iterable) {
  const out = []
  for await (const chunk of iterable) out.push(String(chunk))
  return out
}

t.test('bodies that can be sent again as they are, and iterables that need a copy', async (t) => {
  for (const body of [null, undefined, 'text', Buffer.from('x'), new Uint8Array(2), new ArrayBuffer(2), new Blob(['x'])]) {
    t.ok(isReplayable(body), `${Object.prototype.toString.call(body)} is replayable`)
  }
  t.notOk(isReplayable(Readable.from(['x'])))
  t.ok(isIterable(Readable.from(['x'])))
  t.notOk(isIterable('text'))
})

t.test('each attempt gets what was read, then the rest, read once from the source', async (t) => {
  let reads = 0
  async function * source () {
    for (const part of ['ab', Buffer.from('cd'), 'ef']) {
      reads++
      yield part
    }
  }
  const copy = new BodyCopy(source(), 6, Mismatch)
  const first = copy.attempt()
  t.same(String((await first.next()).value), 'ab', 'the first chunk, before the body has ended')
  // A retry takes over after one chunk: the first attempt must not look complete.
  const second = copy.attempt()
  await t.rejects(first.next(), /superseded/)
  t.same(await collect(second), ['ab', 'cd', 'ef'])
  t.equal(reads, 3)
  t.same(await collect(copy.attempt()), ['ab', 'cd', 'ef'], 'and again, from the copy alone')
})

t.test('a body longer than its length fails with the mismatch, and its source is ended', async (t) => {
  let ended = false
  async function * source () {
    try {
      yield 'abc'
      yield 'def'
      yield 'never'
    } finally {
      ended = true
    }
  }
  const copy = new BodyCopy(source(), 4, Mismatch)
  t.ok(await collect(copy.attempt()).catch((err) => err) instanceof Mismatch)
  t.ok(ended)
})

t.test('settle() ends a source that no attempt finished, as undici ends one', async (t) => {
  const stream = new Readable({ read () {} })
  stream.push('half')
  const copy = new BodyCopy(stream, 8, Mismatch)
  const attempt = copy.attempt()
  t.equal(String((await attempt.next()).value), 'half')
  const stalled = attempt.next() // waits on the source
  copy.settle()
  await stalled.catch(() => {})
  t.ok(stream.destroyed, 'a stalled stream is destroyed')

  // A source never read is left alone, as undici leaves a body it never sent.
  const untouched = new Readable({ read () {} })
  const unused = new BodyCopy(untouched, 8, Mismatch)
  unused.attempt()
  unused.settle()
  t.notOk(untouched.destroyed)
})
