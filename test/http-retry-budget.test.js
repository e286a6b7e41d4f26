'use strict'

const t = require('tap')
const { RetryBudget } = require('../lib/http/retry-budget')

t.test('the retry budget allows percent of recent requests plus its reserve, over 10 s', async (t) => {
  const budget = new RetryBudget(10, 0)
  let now = 1_000_000
  for (let i = 0; i < 9; i++) budget.request(now)
  t.notOk(budget.tryRetry(now), '9 requests: no retry at 10 %')
  budget.request(now)
  t.ok(budget.tryRetry(now), '10 requests: one')
  t.notOk(budget.tryRetry(now), 'and only one')
  now += 10_000
  for (let i = 0; i < 10; i++) budget.request(now)
  t.ok(budget.tryRetry(now), 'the old window is forgotten')
  const reserve = new RetryBudget(0, 1)
  t.ok(reserve.tryRetry(now), 'a reserve of 1 a second allows 10 retries per 10 s without requests')
  for (let i = 0; i < 9; i++) reserve.tryRetry(now)
  t.notOk(reserve.tryRetry(now))
})
