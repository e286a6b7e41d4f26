'use strict'

const t = require('tap')
const { Fifo } = require('../lib/core/fifo')

t.test('values come out in the order they went in, past the compaction point', async (t) => {
  const fifo = new Fifo()
  const out = []
  let next = 0
  for (let round = 0; round < 5; round++) {
    for (let i = 0; i < 1500; i++) fifo.push(next++)
    for (let i = 0; i < 1200; i++) out.push(fifo.shift())
  }
  t.equal(fifo.length, 5 * 300)
  while (fifo.length > 0) out.push(fifo.shift())
  t.ok(out.every((v, i) => v === i), 'every value once, in order')
  t.equal(fifo.peek(), undefined)
})

t.test('peek() shows the head without taking it', async (t) => {
  const fifo = new Fifo()
  fifo.push('a')
  fifo.push('b')
  t.equal(fifo.peek(), 'a')
  t.equal(fifo.length, 2)
  t.equal(fifo.shift(), 'a')
  t.equal(fifo.peek(), 'b')
})

t.test('emptied and filled again, it holds exactly what went in since', async (t) => {
  const fifo = new Fifo()
  for (const n of [5000, 3000, 1]) {
    const want = Array.from({ length: n }, (_, i) => `${n}:${i}`)
    for (const v of want) fifo.push(v)
    t.equal(fifo.length, n)
    const out = []
    while (fifo.length > 0) out.push(fifo.shift())
    t.same(out, want)
    t.equal(fifo.peek(), undefined, 'nothing left behind')
  }
})
