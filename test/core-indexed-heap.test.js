'use strict'

const t = require('tap')
const { IndexedHeap } = require('../lib/core/indexed-heap')

const item = () => ({ dueAt: Infinity, heapIndex: -1 })

function drain (heap) {
  const out = []
  while (heap.size > 0) {
    const next = heap.peek()
    out.push(next.dueAt)
    heap.remove(next)
  }
  return out
}

t.test('items come out by dueAt, whatever order they went in', async (t) => {
  const heap = new IndexedHeap()
  const keys = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 1000)
  for (const key of keys) heap.set(item(), key)
  t.same(drain(heap), keys.slice().sort((a, b) => a - b))
})

t.test('set() moves an item already in the heap, up or down, and keeps it once', async (t) => {
  const heap = new IndexedHeap()
  const items = Array.from({ length: 10 }, item)
  items.forEach((it, i) => heap.set(it, i * 10))
  heap.set(items[9], -1)
  t.equal(heap.peek(), items[9], 'moved up to the front')
  heap.set(items[9], 1000)
  heap.set(items[0], 500)
  t.equal(heap.size, 10)
  t.same(drain(heap), [10, 20, 30, 40, 50, 60, 70, 80, 500, 1000])
})

t.test('remove() of the middle or the last item keeps the order; removed items read -1', async (t) => {
  const heap = new IndexedHeap()
  const items = Array.from({ length: 8 }, item)
  items.forEach((it, i) => heap.set(it, i))
  heap.remove(items[3])
  heap.remove(items[7])
  heap.remove(items[3])
  t.equal(items[3].heapIndex, -1)
  t.equal(items[3].dueAt, Infinity)
  t.same(drain(heap), [0, 1, 2, 4, 5, 6])
})

t.test('clear() empties the heap and marks every item out', async (t) => {
  const heap = new IndexedHeap()
  const items = Array.from({ length: 5 }, item)
  items.forEach((it, i) => heap.set(it, i))
  heap.clear()
  t.equal(heap.size, 0)
  t.ok(items.every((it) => it.heapIndex === -1))
  heap.set(items[2], 3)
  t.equal(heap.peek(), items[2], 'usable again')
})
