'use strict'

const t = require('tap')
const { OriginSockets, MIN_LEARNED_MS, RETIRE_FRACTION } = require('../lib/http/origin-sockets')

t.test('an origin learns the shortest idle close it sees, never one too short to be a timer', async (t) => {
  const stats = { idleClosesLearned: 0, socketsRetired: 0 }
  const origin = new OriginSockets('http://a.test', stats, true)
  origin.learn(MIN_LEARNED_MS - 1)
  t.equal(origin.learnedIdleMs, null, 'a close right after a response is no idle timer')
  origin.learn(5000)
  t.equal(origin.learnedIdleMs, 5000)
  t.equal(origin.retireAfterMs, 5000 * RETIRE_FRACTION)
  origin.learn(6000)
  t.equal(origin.learnedIdleMs, 5000, 'a longer one says nothing new')
  origin.learn(1000)
  t.equal(origin.learnedIdleMs, 1000, 'a shorter one wins')
  t.equal(stats.idleClosesLearned, 2)
  const off = new OriginSockets('http://b.test', stats, false)
  off.learn(1000)
  t.equal(off.learnedIdleMs, null, 'learnIdleClose: false')
})
