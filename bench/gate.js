'use strict'

// The regression gate's judgement, kept apart from the processes it runs
// (bench/run.js): `npm run bench -- --against <git-ref>` runs the chosen
// benchmarks for the working tree and for the ref, in alternation over
// rounds, and compares each target the benchmarks report (their `targets`:
// `{ name, holds, measured }`) as the ratio new/old of the first number in
// `measured`, with its spread over the rounds.

const BENCHES = ['incident', 'dns', 'statsd', 'batch', 'kafka', 'http', 'monitor', 'overhead', 'shutdown']

// Within this band (a fraction: 0.1 is 10%) a change is the machine's noise.
const NOISE = 0.1
const ROUNDS = 3

// The command line of `npm run bench`. Arguments that name a benchmark
// (`kafka` or `kafka.js`) choose it (all when none does); --against,
// --rounds, --noise and --markdown are run.js's own; everything else passes
// through to each benchmark.
function parseArgs (argv, benches = BENCHES) {
  const out = { benches: [], args: [], against: null, rounds: ROUNDS, noise: NOISE, json: false, markdown: null }
  const value = (i, name, hint, what = 'a value') => {
    const v = argv[i + 1]
    if (v === undefined || v.startsWith('--')) throw new TypeError(`${name} needs ${what}, e.g. ${name} ${hint}`)
    return v
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const name = arg.endsWith('.js') ? arg.slice(0, -3) : arg
    if (benches.includes(name)) {
      if (!out.benches.includes(name)) out.benches.push(name)
    } else if (arg === '--against') {
      out.against = value(i++, arg, 'main', 'a git ref')
    } else if (arg === '--markdown') {
      out.markdown = value(i++, arg, 'docs/benchmarks/results.md', 'a file name')
    } else if (arg === '--rounds') {
      const n = Number(value(i++, arg, '3'))
      if (!Number.isInteger(n) || n < 1) throw new RangeError(`--rounds must be a positive integer, got ${argv[i]}`)
      out.rounds = n
    } else if (arg === '--noise') {
      const n = Number(value(i++, arg, '0.1'))
      if (!(n >= 0 && n < 1)) throw new RangeError(`--noise must be a fraction from 0 to below 1 (0.1 is 10%), got ${argv[i]}`)
      out.noise = n
    } else if (arg === '--json') {
      out.json = true
    } else if (!arg.startsWith('-') && !(argv[i - 1]?.startsWith('--'))) {
      throw new TypeError(`unknown benchmark "${arg}"; known: ${benches.join(', ')}`)
    } else {
      out.args.push(arg)
    }
  }
  if (out.against !== null && out.markdown !== null) throw new TypeError('--against and --markdown do not go together: the gate writes no results page')
  if (out.benches.length === 0) out.benches = [...benches]
  else out.benches = benches.filter((b) => out.benches.includes(b))
  return out
}

// The first number in a target's `measured` ("1.23x", "5.1 ms, 1.05x a 30 ms
// bare start", "10,000 vs 3"), or null when it has none ("silent").
function valueOf (measured) {
  const m = /-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?/i.exec(String(measured ?? ''))
  return m === null ? null : Number(m[0].replace(/,/g, ''))
}

// Which way is better for a target, from its name's first comparison:
// "<= 5 ms", "no errors", "nothing lost" want less; ">= 1.3x", "faster" more.
function better (name) {
  const m = /<=|>=|<|>|\bno\b|\bnothing\b|\bfewer\b|\bat most\b|\bfaster\b|\bat least\b/i.exec(name)
  if (m === null) return null
  return ['>=', '>', 'faster', 'at least'].includes(m[0].toLowerCase()) ? 'higher' : 'lower'
}

// A target's name with its numbers blanked: the same target when a release
// moves its threshold ("<= 10 ms" to "<= 5 ms").
function keyOf (bench, name) {
  return `${bench}\u0000${String(name).replace(/-?\d[\d,]*(?:\.\d+)?/g, '#')}`
}

// new/old of one round; null when either side has no number or a negative
// one (an added time under the noise), 1 when both are 0.
function ratioOf (tree, ref) {
  if (tree === null || ref === null || tree < 0 || ref < 0) return null
  if (tree === 0 && ref === 0) return 1
  return tree / ref
}

function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  if (sorted.length === 0) return null
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

// true when held in every round, false in none, 'some' in between.
function heldIn (flags) {
  const n = flags.filter(Boolean).length
  return n === flags.length ? true : n === 0 ? false : 'some'
}

// `rounds`: one per round, `{ tree: { <bench>: result }, ref: { <bench>:
// result } }`, each result a benchmark's --json object, or `{ failed }` when
// it exited without one. Returns one row per target of either side, and the
// verdict:
//   regression  every round's ratio is worse than 1 by more than the noise
//               band (the whole spread beyond it), or the target held on the
//               ref in every round and is missed in the tree in every round
//               under the same name (same threshold), or the benchmark
//               failed in the tree only
//   better      every round's ratio better than 1 by more than the band
//   same        otherwise (the spread reaches into the band)
function compare (rounds, { noise = NOISE } = {}) {
  const rows = new Map()
  const failures = []
  const row = (bench, key) => {
    if (!rows.has(key)) rows.set(key, { bench, target: null, refTarget: null, better: null, rounds: [] })
    return rows.get(key)
  }
  rounds.forEach((round, r) => {
    const benches = [...new Set([...Object.keys(round.tree), ...Object.keys(round.ref)])]
    for (const bench of benches) {
      const sides = { tree: round.tree?.[bench], ref: round.ref?.[bench] }
      for (const side of ['tree', 'ref']) {
        if (sides[side]?.failed) failures.push({ bench, side, round: r + 1, failed: String(sides[side].failed) })
      }
      // A benchmark that failed part way still compares what it reported.
      if (!sides.tree?.targets || !sides.ref?.targets) continue
      const seen = new Map()
      const index = (side) => {
        const out = new Map()
        for (const t of sides[side].targets) {
          let key = keyOf(bench, t.name)
          // Two targets alike but for their numbers: told apart by order.
          const n = (seen.get(`${side}${key}`) ?? 0) + 1
          seen.set(`${side}${key}`, n)
          if (n > 1) key += `\u0000${n}`
          out.set(key, t)
        }
        return out
      }
      const tree = index('tree')
      const ref = index('ref')
      for (const key of new Set([...tree.keys(), ...ref.keys()])) {
        const a = tree.get(key)
        const b = ref.get(key)
        const entry = row(bench, key)
        if (a) entry.target = a.name
        if (b) entry.refTarget = b.name
        entry.better ??= better(a?.name ?? b.name)
        const treeValue = a ? valueOf(a.measured) : null
        const refValue = b ? valueOf(b.measured) : null
        entry.rounds.push({
          round: r + 1,
          tree: treeValue,
          ref: refValue,
          treeHolds: a ? a.holds === true : null,
          refHolds: b ? b.holds === true : null,
          ratio: a && b ? ratioOf(treeValue, refValue) : null,
        })
      }
    }
  })
  const targets = [...rows.values()].map((entry) => judge(entry, noise))
  // A benchmark that failed in the tree in some round but never on the ref.
  for (const bench of new Set(failures.filter((f) => f.side === 'tree').map((f) => f.bench))) {
    if (!failures.some((f) => f.bench === bench && f.side === 'ref')) {
      targets.push({ bench, target: '(the benchmark ran to its end)', better: null, ref: null, tree: null, refHeld: null, treeHeld: null, ratio: null, spread: null, ratios: [], result: 'regression', why: 'failed in the tree, not on the ref' })
    }
  }
  const regression = targets.some((t) => t.result === 'regression')
  return { targets, failures, regression, noise }
}

function judge (entry, noise) {
  const ratios = entry.rounds.map((x) => x.ratio).filter((x) => x !== null)
  const both = entry.rounds.filter((x) => x.treeHolds !== null && x.refHolds !== null)
  const out = {
    bench: entry.bench,
    target: entry.target ?? entry.refTarget,
    better: entry.better,
    ref: median(entry.rounds.map((x) => x.ref).filter((x) => x !== null)),
    tree: median(entry.rounds.map((x) => x.tree).filter((x) => x !== null)),
    refHeld: both.length ? heldIn(both.map((x) => x.refHolds)) : null,
    treeHeld: both.length ? heldIn(both.map((x) => x.treeHolds)) : null,
    ratio: ratios.length ? median(ratios) : null,
    spread: ratios.length ? [Math.min(...ratios), Math.max(...ratios)] : null,
    ratios,
    result: 'same',
    why: '',
  }
  if (entry.target === null || entry.refTarget === null) {
    out.result = entry.target === null ? 'only-ref' : 'only-tree'
    out.why = entry.target === null ? 'not reported in the tree' : 'not reported by the ref'
    return out
  }
  if (out.refHeld === true && out.treeHeld === false && entry.target === entry.refTarget) {
    out.result = 'regression'
    out.why = 'held on the ref, missed in the tree'
    return out
  }
  if (ratios.length === 0 || out.better === null) {
    out.result = 'n/a'
    out.why = ratios.length === 0 ? 'no number to compare' : 'no direction in the name'
    return out
  }
  // How much worse each round is, as a factor over 1.
  const worse = ratios.map((r) => out.better === 'lower' ? r : (r === 0 ? Infinity : 1 / r))
  if (Math.min(...worse) > 1 + noise) {
    out.result = 'regression'
    out.why = `worse than the ${pct(noise)} band in every round`
  } else if (Math.max(...worse) < 1 / (1 + noise)) {
    out.result = 'better'
    out.why = `better beyond the ${pct(noise)} band in every round`
  } else {
    out.why = `within the ${pct(noise)} band or across it`
  }
  return out
}

function pct (fraction) {
  return `±${Math.round(fraction * 1000) / 10}%`
}

function num (n) {
  if (n === null || n === undefined) return '-'
  if (n === Infinity) return 'inf'
  return Number(n.toPrecision(4)).toLocaleString('en-US', { maximumFractionDigits: 4 })
}

function held (h) {
  return h === null ? '' : h === 'some' ? ' held in some' : h ? ' held' : ' missed'
}

// The gate's readable table.
function table (verdict, { ref = 'ref', rounds = null } = {}) {
  const header = ['bench', 'target', ref, 'tree', 'new/old', 'spread', 'result']
  const rows = verdict.targets.map((t) => [
    t.bench,
    t.target,
    num(t.ref) + held(t.refHeld),
    num(t.tree) + held(t.treeHeld),
    t.ratio === null ? '-' : `${num(t.ratio)}x`,
    t.spread === null ? '-' : `${num(t.spread[0])}-${num(t.spread[1])}`,
    t.result === 'regression' || t.result === 'better' ? `${t.result.toUpperCase()}: ${t.why}` : t.result,
  ])
  const all = [header, ...rows]
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)))
  const line = (r) => '| ' + r.map((c, i) => c.padEnd(widths[i])).join(' | ') + ' |'
  const lines = [
    `# gate: the working tree against ${ref}${rounds === null ? '' : `, ${rounds} round${rounds === 1 ? '' : 's'}`}, noise band ${pct(verdict.noise)}`,
    '',
    line(header),
    '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|',
    ...rows.map(line),
  ]
  for (const f of verdict.failures) lines.push('', `FAILED: ${f.bench} on the ${f.side === 'tree' ? 'working tree' : 'ref'} in round ${f.round} (${f.failed})`)
  const regressions = verdict.targets.filter((t) => t.result === 'regression').length
  lines.push('', regressions === 0 ? 'No regression.' : `${regressions} regression${regressions === 1 ? '' : 's'}.`)
  return lines.join('\n') + '\n'
}

// 0: no regression; 1: a regression; 2: none found, but a benchmark failed
// (on the ref, or on both sides) so not everything was compared.
function exitCode (verdict) {
  if (verdict.regression) return 1
  return verdict.failures.length > 0 ? 2 : 0
}

module.exports = { parseArgs, compare, table, exitCode, valueOf, better, BENCHES }
