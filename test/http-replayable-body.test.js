'use strict'

const t = require('tap')
const { Readable } = require('node:stream')
const { isReplayable, isIterable, readBody } = require('../lib/http/replayable-body')

t.test('bodies that can be sent again as they are, and iterables that must be read first', async (t) => {
  for (const body of [null, undefined, 'text', Buffer.from('x'), new Uint8Array(2), new ArrayBuffer(2), new Blob(['x'])]) {
    t.ok(isReplayable(body), `${Object.prototype.toString.call(body)} is replayable`)
  }
  t.notOk(isReplayable(Readable.from(['x'])))
  t.ok(isIterable(Readable.from(['x'])))
  t.notOk(isIterable('text'))
  t.same(await readBody(Readable.from(['ab', Buffer.from('cd')])), Buffer.from('abcd'))
})
