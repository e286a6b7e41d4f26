'use strict'

// docs/benchmarks/results.md is written from a run's --json output, never by
// hand: this checks the writer on a saved run.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { render, parseRun, machine, cli } = require('../bench/markdown')

const fixture = path.join(__dirname, 'fixtures', 'bench-run.jsonl')
const saved = fs.readFileSync(fixture, 'utf8')

t.test('a saved run: the machine, every benchmark in order, stray lines skipped', async (t) => {
  const { results, info } = parseRun(saved)
  t.same(results.map((r) => r.bench), ['dns', 'monitor', 'overhead', 'statsd'])
  t.same(info, { node: 'v20.20.2', cpu: 'Test CPU @ 2.00GHz', cores: 2, platform: 'linux 6.1.0', date: '2026-11-25' })
})

t.test('the page: machine, tables, and each target held or missed as the benchmark judged it', async (t) => {
  const { results, info } = parseRun(saved)
  const page = render(results, info)
  t.match(page, /^# Benchmark results\n/)
  t.match(page, /\| Node \| v20\.20\.2 \|/)
  t.match(page, /\| CPU \| Test CPU @ 2\.00GHz \|/)
  t.match(page, /\| cores \| 2 \|/)
  t.match(page, /\| date \| 2026-11-25 \|/)
  t.match(page, /\| targets \| 1 of 2 held \|/)
  t.match(page, /Missed in this run:\n\n- hello: req\/s >= 0\.98x baseline \(measured 0\.945x\)/)
  t.match(page, /\| record-cost: record\(\) < 50 ns, loop included \| 4\.44 ns, 0\.295x perf_hooks \| held \|/)
  t.match(page, /\| hello: req\/s >= 0\.98x baseline \| 0\.945x \| missed \|/)
  t.match(page, /## dns\n\nSkipped on this machine: needs root and unshare -m\./)
  t.match(page, /### record-cost\n\nbest of 3 runs[^\n]*\n\n\| label \| nsPerRecord \| vsPerfHooks \|\n\|---\|---\|---\|\n\| io-hygiene \| 4\.44 \| 0\.295 \|\n\| perf_hooks \| 15\.07 \| - \|/)
  t.match(page, /\| baseline \| 100,000 \| A \\\| B \|/, 'numbers grouped, pipes escaped')
  t.match(page, /## statsd\n\nNode v24\.0\.0\./, 'a benchmark run on another line says so')
  t.match(page, /\| baseline \| 100,000 \| A \\\| B \| NaN \| \{"EPIPE":2\} \|/)
  t.match(page, /## statsd[\s\S]*declares no pass\/fail targets/)
  t.notMatch(page, /a line a benchmark printed/)
  t.ok(page.indexOf('## dns') < page.indexOf('## monitor') && page.indexOf('## monitor') < page.indexOf('## overhead'), 'in run order')
})

t.test('a benchmark that did not finish is said so, not left out', async (t) => {
  const page = render([{ bench: 'kafka', failed: 'exit 1' }], machine(new Date('2026-01-02T03:04:05Z'), []))
  t.match(page, /## kafka\n\nDid not finish \(exit 1\): no results from this run\./)
  t.match(page, /\| date \| 2026-01-02 \|/)
  t.match(page, /\| targets \| 0 of 0 held \|/)
  t.match(page, /\| CPU \| unknown \|/)
  t.match(machine().cores, Number)
})

t.test('a scenario that did not finish is said so, and the others keep their results', async (t) => {
  const result = {
    bench: 'kafka',
    failed: 'scenario throughput failed',
    scenarios: [
      { name: 'wrapper-cost', runs: [{ label: 'io-hygiene', cpuUsPerMsg: 0.9 }] },
      { name: 'throughput', failed: 'creating bench-1: still failing after 60000 ms', runs: [] },
    ],
    targets: [{ name: 'wrapper-cost: io-hygiene adds <= 0.5 us CPU per message over the floor', holds: false, measured: '0.5 us' }],
  }
  const page = render([result], machine(new Date('2026-01-02T03:04:05Z'), []))
  t.match(page, /## kafka\n\nDid not finish everything \(scenario throughput failed\): what did finish is below\./)
  t.match(page, /### wrapper-cost\n\n\| label \| cpuUsPerMsg \|\n\|---\|---\|\n\| io-hygiene \| 0\.9 \|/)
  t.match(page, /### throughput\n\nDid not finish \(creating bench-1: still failing after 60000 ms\)\./)
})

t.test("a benchmark's charts: Mermaid line charts with their colours named, and lists kept out of the tables", async (t) => {
  const windows = [{ p50Ms: 1, p99Ms: 2, maxMs: 3, activeRequestsByType: {} }]
  const page = render([{
    bench: 'incident',
    scenarios: [{ name: 'incident', runs: [{ label: 'floor', p99Ms: 2, windows }, { label: 'baseline', p99Ms: 900, windows }] }],
    charts: [
      {
        title: 'p99 "per window"',
        xLabel: 'seconds',
        yLabel: 'p99 (ms)',
        x: [10, 20],
        series: [{ name: 'floor', color: '#7f7f7f', values: [2, 3] }, { name: 'baseline', color: '#123456', values: [400, 900] }],
      },
      { title: 'requests', xLabel: 's', yLabel: 'n', x: [10], series: [{ name: 'GetAddrInfoReqWrap', values: [0] }] },
    ],
  }], machine(new Date('2026-01-02T03:04:05Z'), []))
  t.match(page, /\| label \| p99Ms \|\n\|---\|---\|\n\| floor \| 2 \|\n\| baseline \| 900 \|\n/, 'windows are not a column')
  t.match(page, [
    '```mermaid',
    '%%{init: {"theme":"base","themeVariables":{"xyChart":{"plotColorPalette":"#7f7f7f, #123456"}}}}%%',
    'xychart-beta',
    '  title "p99 \'per window\'"',
    '  x-axis "seconds" [10, 20]',
    '  y-axis "p99 (ms)" 0 --> 945',
    '  line [2, 3]',
    '  line [400, 900]',
    '```',
    '',
    'Lines: floor (grey), baseline (#123456).',
  ].join('\n'))
  t.match(page, /"plotColorPalette":"#1f77b4"[\s\S]*y-axis "n" 0 --> 2\n {2}line \[0\][\s\S]*Lines: GetAddrInfoReqWrap \(blue\)\./, 'a palette of its own, and a y axis of at least 1')
})

t.test('the command line writes the same page from a saved run', async (t) => {
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'io-hygiene-md-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const out = path.join(dir, 'results.md')
  const command = spawnSync(process.execPath, [path.join(__dirname, '..', 'bench', 'markdown.js'), fixture, '--out', out], { encoding: 'utf8' })
  t.equal(command.status, 0, command.stderr)
  const { results, info } = parseRun(saved)
  t.equal(fs.readFileSync(out, 'utf8'), render(results, info))
  const piped = spawnSync(process.execPath, [path.join(__dirname, '..', 'bench', 'markdown.js')], { input: saved, encoding: 'utf8' })
  t.equal(piped.stdout, render(results, info), 'from stdin too')
  // The same, in this process, so that coverage sees it on every Node line.
  const written = []
  t.equal(cli([fixture, '--out', out]), render(results, info))
  t.equal(cli([], () => saved, (text) => written.push(text)), render(results, info))
  t.same(written, [render(results, info)], 'to stdout without --out')
  const bare = cli([], () => '{"bench":"batch"}\n', () => {})
  t.match(bare, new RegExp(`\\| Node \\| ${process.version} \\|[\\s\\S]*## batch\\n`), 'without a saved machine: this one')
})

t.test('npm run bench refuses --markdown without a file', async (t) => {
  const run = spawnSync(process.execPath, [path.join(__dirname, '..', 'bench', 'run.js'), '--markdown'], { encoding: 'utf8' })
  t.not(run.status, 0)
  t.match(run.stderr, /--markdown needs a file name/)
})
