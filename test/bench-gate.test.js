'use strict'

// The regression gate (`npm run bench -- --against <ref>`) judged on given
// rounds: no benchmark runs here.
const t = require('tap')
const { parseArgs, compare, table, exitCode, valueOf, better, BENCHES } = require('../bench/gate')

// One benchmark's --json result with the given targets.
const result = (bench, ...targets) => ({ bench, scenarios: [], targets: targets.map(([name, measured, holds = true]) => ({ name, measured, holds })) })

t.test('arguments: benchmarks by name, the gate\'s own options, the rest passed through', async (t) => {
  t.same(parseArgs([]), { benches: BENCHES, args: [], against: null, rounds: 3, noise: 0.1, json: false, markdown: null })
  const opts = parseArgs(['overhead', '--against', 'main', '--rounds', '5', '--noise', '0.2', '--only', 'startup', '--startup-runs', '30', 'batch.js', '--json', 'batch'])
  t.same(opts.benches, ['batch', 'overhead'], 'in run order, once each')
  t.same(opts.args, ['--only', 'startup', '--startup-runs', '30'])
  t.equal(opts.against, 'main')
  t.equal(opts.rounds, 5)
  t.equal(opts.noise, 0.2)
  t.equal(opts.json, true)
  t.equal(parseArgs(['--markdown', 'out.md']).markdown, 'out.md')
  t.same(parseArgs(['--quick', 'kafka'], ['kafka', 'batch']).benches, ['kafka'])
})

t.test('arguments: what the gate cannot run is an error before anything runs', async (t) => {
  t.throws(() => parseArgs(['--against']), { name: 'TypeError', message: /--against needs a git ref, e.g. --against main/ })
  t.throws(() => parseArgs(['--against', '--json']), { name: 'TypeError', message: /--against needs a git ref, e.g. --against main/ })
  t.throws(() => parseArgs(['--rounds', '0']), { name: 'RangeError', message: /--rounds must be a positive integer, got 0/ })
  t.throws(() => parseArgs(['--rounds', '1.5']), { name: 'RangeError' })
  t.throws(() => parseArgs(['--noise', '1']), { name: 'RangeError', message: /--noise must be a fraction/ })
  t.throws(() => parseArgs(['--noise', 'x']), { name: 'RangeError' })
  t.throws(() => parseArgs(['kafak']), { name: 'TypeError', message: /unknown benchmark "kafak"; known: incident, dns/ })
  t.throws(() => parseArgs(['--against', 'main', '--markdown', 'x.md']), { name: 'TypeError', message: /do not go together/ })
})

t.test('a target\'s number and which way is better', async (t) => {
  t.equal(valueOf('1.23x'), 1.23)
  t.equal(valueOf('5.1 ms, 1.05x a 30 ms bare start'), 5.1)
  t.equal(valueOf('10,000 vs 3 (0.0003x)'), 10000)
  t.equal(valueOf('-0.4 ms'), -0.4)
  t.equal(valueOf('sample 3'), 3)
  t.equal(valueOf('silent'), null)
  t.equal(valueOf(undefined), null)
  t.equal(better('startup: io-hygiene adds <= 5 ms'), 'lower')
  t.equal(better('groups: event-loop delay max < 50 ms'), 'lower')
  t.equal(better('throughput: msg/s >= 1.3x hand-batched-idempotent'), 'higher')
  t.equal(better('realistic: io-hygiene faster than baseline (req/s ratio > 1)'), 'higher')
  t.equal(better('throughput: nothing out of order'), 'lower')
  t.equal(better('search-domains: no errors'), 'lower')
  t.equal(better("io-hygiene: the monitor's alert stays silent"), null)
})

t.test('a regression: worse beyond the noise band in every round, the whole spread', async (t) => {
  const rounds = [6, 6.5, 5.8].map((ref, i) => ({
    ref: { overhead: result('overhead', ['startup: io-hygiene adds <= 10 ms', `${ref} ms`], ['hello: req/s >= 0.98x baseline', '1.0x']) },
    tree: { overhead: result('overhead', ['startup: io-hygiene adds <= 10 ms', `${[11.5, 11.7, 9][i]} ms`], ['hello: req/s >= 0.98x baseline', `${[0.99, 1.05, 1.02][i]}x`]) },
  }))
  const verdict = compare(rounds)
  const [startup, hello] = verdict.targets
  t.equal(startup.result, 'regression')
  t.same(startup.ratios.map((r) => Math.round(r * 100) / 100), [1.92, 1.8, 1.55])
  t.same(startup.spread.map((r) => Math.round(r * 100) / 100), [1.55, 1.92])
  t.equal(Math.round(startup.ratio * 100) / 100, 1.8)
  t.equal(startup.ref, 6)
  t.equal(startup.tree, 11.5)
  t.equal(hello.result, 'same', 'one round worse, two better: within the band')
  t.equal(verdict.regression, true)
  t.equal(exitCode(verdict), 1)
})

t.test('within the band, or across it, is not a regression; better beyond it is said', async (t) => {
  const rounds = [
    { ref: { kafka: result('kafka', ['throughput: msg/s >= 1.0x hand-batched-idempotent', '1.70x'], ['wrapper-cost: io-hygiene adds <= 1.0 us', '0.75 us']) }, tree: { kafka: result('kafka', ['throughput: msg/s >= 1.0x hand-batched-idempotent', '1.23x'], ['wrapper-cost: io-hygiene adds <= 1.0 us', '0.35 us']) } },
    { ref: { kafka: result('kafka', ['throughput: msg/s >= 1.0x hand-batched-idempotent', '1.60x'], ['wrapper-cost: io-hygiene adds <= 1.0 us', '0.8 us']) }, tree: { kafka: result('kafka', ['throughput: msg/s >= 1.0x hand-batched-idempotent', '1.55x'], ['wrapper-cost: io-hygiene adds <= 1.0 us', '0.4 us']) } },
  ]
  const verdict = compare(rounds)
  const [throughput, cost] = verdict.targets
  t.equal(throughput.better, 'higher')
  t.equal(throughput.result, 'same', 'one round 0.72x, one 0.97x: the spread reaches into the band')
  t.equal(cost.result, 'better')
  t.equal(exitCode(verdict), 0)
  t.equal(compare(rounds, { noise: 0.01 }).targets[0].result, 'regression', 'a narrower band: both rounds beyond it')
})

t.test('a threshold moved between the ref and the tree: the same target, judged by its numbers', async (t) => {
  const rounds = [{
    ref: { overhead: result('overhead', ['startup: register adds <= 10 ms', '6 ms']) },
    tree: { overhead: result('overhead', ['startup: register adds <= 5 ms', '6.1 ms', false]) },
  }]
  const [row] = compare(rounds).targets
  t.equal(row.target, 'startup: register adds <= 5 ms')
  t.equal(row.refHeld, true)
  t.equal(row.treeHeld, false)
  t.equal(row.result, 'same', 'missed under a stricter threshold is not a regression of the code')
})

t.test('held on the ref and missed in the tree under the same name is a regression', async (t) => {
  const rounds = [{
    ref: { http: result('http', ['events: nothing lost', '0'], ['monitor: alert stays silent', 'silent']) },
    tree: { http: result('http', ['events: nothing lost', '0'], ['monitor: alert stays silent', 'fired at 5 s', false]) },
  }]
  const [lost, silent] = compare(rounds).targets
  t.equal(lost.result, 'same', '0 and 0: a ratio of 1')
  t.equal(lost.ratio, 1)
  t.equal(silent.result, 'regression')
  t.equal(silent.why, 'held on the ref, missed in the tree')
})

t.test('what cannot be compared says why', async (t) => {
  const rounds = [{
    ref: { dns: result('dns', ['burst: upstream queries (<= 1/100)', '0 vs 10'], ['old: only here <= 1', '1'], ['added: <= 1 ms', '-0.2 ms'], ['count', '3']) },
    tree: { dns: result('dns', ['burst: upstream queries (<= 1/100)', '2 vs 10'], ['new: only here <= 1', '1'], ['added: <= 1 ms', '0.3 ms'], ['count', '4']) },
  }]
  const byName = Object.fromEntries(compare(rounds).targets.map((row) => [row.target, row]))
  t.equal(byName['burst: upstream queries (<= 1/100)'].ratio, Infinity)
  t.equal(byName['burst: upstream queries (<= 1/100)'].result, 'regression', 'from none to some')
  t.equal(byName['old: only here <= 1'].result, 'only-ref')
  t.equal(byName['new: only here <= 1'].result, 'only-tree')
  t.equal(byName['added: <= 1 ms'].result, 'n/a', 'a negative added time has no ratio')
  t.equal(byName['added: <= 1 ms'].why, 'no number to compare')
  t.equal(byName.count.result, 'n/a')
  t.equal(byName.count.why, 'no direction in the name')
})

t.test('targets alike but for their numbers are told apart by order', async (t) => {
  const rounds = [{
    ref: { batch: result('batch', ['a <= 1 at 10', '1'], ['a <= 1 at 20', '2']) },
    tree: { batch: result('batch', ['a <= 1 at 10', '1'], ['a <= 1 at 20', '2']) },
  }]
  const rows = compare(rounds).targets
  t.same(rows.map((r) => [r.target, r.ratio]), [['a <= 1 at 10', 1], ['a <= 1 at 20', 1]])
})

t.test('a higher-is-better target at zero, and a faster ratio', async (t) => {
  const rounds = [{
    ref: { overhead: result('overhead', ['realistic: faster than baseline', '1.2x']) },
    tree: { overhead: result('overhead', ['realistic: faster than baseline', '0x']) },
  }]
  const [row] = compare(rounds).targets
  t.equal(row.result, 'regression')
  t.equal(row.why, 'worse than the ±10% band in every round')
})

t.test('a benchmark that failed: in the tree only a regression, on the ref exit 2', async (t) => {
  const good = result('kafka', ['throughput: nothing out of order', '0'])
  const treeFailed = compare([{ ref: { kafka: good }, tree: { kafka: { bench: 'kafka', failed: 'exit 1' } } }])
  t.equal(treeFailed.regression, true)
  t.same(treeFailed.failures, [{ bench: 'kafka', side: 'tree', round: 1, failed: 'exit 1' }])
  t.equal(treeFailed.targets.at(-1).result, 'regression')
  t.equal(exitCode(treeFailed), 1)

  const refFailed = compare([{ ref: { kafka: { bench: 'kafka', failed: 'not in this checkout' } }, tree: { kafka: good } }])
  t.equal(refFailed.regression, false)
  t.equal(exitCode(refFailed), 2)

  const partial = compare([{ ref: { kafka: good }, tree: { kafka: { ...good, failed: 'exit 1' } } }])
  t.equal(partial.targets[0].result, 'same', 'what a benchmark reported before it failed is still compared')
  t.equal(partial.targets.at(-1).why, 'failed in the tree, not on the ref')

  const both = compare([{ ref: { kafka: { bench: 'kafka', failed: 'exit 1' } }, tree: { kafka: { bench: 'kafka', failed: 'exit 1' } } }])
  t.same(both.targets, [])
  t.equal(exitCode(both), 2)
})

t.test('the table: per target both sides, the ratio, its spread and the verdict', async (t) => {
  const rounds = [6, 6.5].map((ref, i) => ({
    ref: { overhead: result('overhead', ['startup: io-hygiene adds <= 10 ms', `${ref} ms`], ['hello: req/s >= 0.98x baseline', '1.01x']) },
    tree: { overhead: result('overhead', ['startup: io-hygiene adds <= 10 ms', `${[11.5, 11.7][i]} ms`], ['hello: req/s >= 0.98x baseline', `${[0.95, 0.97][i]}x`, i === 0]) },
  }))
  rounds.push({ ref: { overhead: { bench: 'overhead', failed: 'exit 1' } }, tree: { overhead: result('overhead') } })
  const text = table(compare(rounds), { ref: 'main', rounds: 3 })
  t.match(text, /^# gate: the working tree against main, 3 rounds, noise band ±10%\n/)
  t.match(text, /\| bench +\| target +\| main +\| tree +\| new\/old \| spread +\| result +\|/)
  t.match(text, /\| overhead \| startup: io-hygiene adds <= 10 ms \| 6\.25 held +\| 11\.6 held +\| 1\.858x +\| 1\.8-1\.917 +\| REGRESSION: worse than the ±10% band in every round \|/)
  t.match(text, /\| overhead \| hello: req\/s >= 0\.98x baseline +\| 1\.01 held +\| 0\.96 held in some +\| 0\.9505x +\| 0\.9406-0\.9604 \| same +\|/, 'held in one round of two: not missed in every round')
  t.match(text, /FAILED: overhead on the ref in round 3 \(exit 1\)/)
  t.match(text, /\n1 regression\.\n$/)
  t.match(table(compare([]), {}), /against ref, noise band ±10%\n[\s\S]*No regression\.\n$/)
  const two = compare([{ ref: { a: result('a', ['x <= 1', '1'], ['y <= 1', '0'], ['z <= 1', '4'], ['w', 'silent']) }, tree: { a: result('a', ['x <= 1', '2', false], ['y <= 1', '3'], ['z <= 1', '1'], ['v', 'none']), b: { bench: 'b', failed: 'exit 1' } } }, { ref: { a: result('a') }, tree: { a: result('a') } }])
  const text2 = table(two, { rounds: 1 })
  t.match(text2, /\| a +\| x <= 1 +\| 1 held +\| 2 missed +\| 2x +\| 2-2 +\| REGRESSION: held on the ref, missed in the tree +\|/)
  t.match(text2, /1 round,[\s\S]*3 regressions\./)
  t.match(text2, /\| a +\| y <= 1 +\| 0 held +\| 3 held +\| infx +\| inf-inf +\| REGRESSION/)
  t.match(text2, /\| a +\| z <= 1 +\| 4 held +\| 1 held +\| 0\.25x +\| 0\.25-0\.25 +\| BETTER: better beyond the ±10% band in every round +\|/)
  t.match(text2, /\| a +\| w +\| - +\| - +\| - +\| - +\| only-ref +\|/)
  t.match(text2, /\| b +\| \(the benchmark ran to its end\) \| - +\| - +\| - +\| - +\| REGRESSION: failed in the tree, not on the ref +\|/)
  t.match(text2, /FAILED: b on the working tree in round 1 \(exit 1\)/)
})
