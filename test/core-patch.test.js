'use strict'

const t = require('tap')
const { wrap, originalOf } = require('../lib/core/global-slot')

t.test('patch: undo restores once, and only while the wrapper is still in place', async (t) => {
  const target = { fn () { return 'original' } }
  const original = target.fn
  const undo = wrap(target, 'fn', (orig) => function wrapped () { return 'wrapped ' + orig() })
  t.equal(target.fn(), 'wrapped original')
  t.equal(originalOf(target.fn), original)
  t.equal(undo(), true)
  t.equal(undo(), true, 'a second undo is a no-op')
  t.equal(target.fn, original)
  const undo2 = wrap(target, 'fn', (orig) => () => orig())
  target.fn = () => 'theirs'
  t.equal(undo2(), false)
  t.equal(target.fn(), 'theirs')
})
