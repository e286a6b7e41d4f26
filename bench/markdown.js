'use strict'

// Writes a run's results as markdown: the machine, then each benchmark's
// tables and its targets, held or missed, as the benchmark itself judged them
// (its `targets` field). Used by `npm run bench -- --markdown FILE`, and on a
// saved run: `npm run bench -- --json > run.jsonl`, then
// `node bench/markdown.js run.jsonl > docs/benchmarks/results.md`.
const fs = require('node:fs')
const os = require('node:os')

// The machine the run is on, as the page's header says it.
function machine (now = new Date(), cpus = os.cpus()) {
  return {
    node: process.version,
    cpu: cpus[0]?.model.trim() ?? 'unknown',
    cores: cpus.length,
    platform: `${os.platform()} ${os.release()}`,
    date: now.toISOString().slice(0, 10),
  }
}

// A saved run: one JSON object a line, `{ machine }` (written first by
// `npm run bench -- --json`) and each benchmark's result; other lines (a
// benchmark's stray output) are skipped.
function parseRun (text) {
  const results = []
  let info = null
  for (const line of text.split('\n')) {
    const trimmed = line.trim()
    if (!trimmed.startsWith('{')) continue
    let value
    try {
      value = JSON.parse(trimmed)
    } catch {
      continue
    }
    if (typeof value?.bench === 'string') results.push(value)
    else if (value?.machine && typeof value.machine === 'object') info = value.machine
  }
  return { results, info }
}

function cell (value) {
  if (value === undefined || value === null) return '-'
  if (typeof value === 'number') {
    return Number.isInteger(value) ? value.toLocaleString('en-US') : value.toLocaleString('en-US', { maximumFractionDigits: 3 })
  }
  if (typeof value === 'object') return escape(JSON.stringify(value))
  return escape(String(value))
}

function escape (text) {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ')
}

// A field that holds a list (the incident benchmark's `windows`) is drawn in
// the benchmark's charts, not written into a cell.
function table (runs) {
  const fields = [...new Set(runs.flatMap((run) => Object.keys(run)))].filter((f) => !runs.some((run) => Array.isArray(run[f])))
  return [
    `| ${fields.join(' | ')} |`,
    `|${fields.map(() => '---').join('|')}|`,
    ...runs.map((run) => `| ${fields.map((f) => cell(run[f])).join(' | ')} |`),
  ]
}

// A benchmark's `charts` ({ title, xLabel, yLabel, x, series: [{ name,
// color, values }] }) as Mermaid xychart-beta line charts, which GitHub draws
// from the page itself. The chart has no legend: the line under it names each
// series by its colour, set through the theme's palette.
const PALETTE = ['#1f77b4', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22']
const COLOR_NAMES = {
  '#1f77b4': 'blue',
  '#9467bd': 'purple',
  '#8c564b': 'brown',
  '#e377c2': 'pink',
  '#17becf': 'cyan',
  '#bcbd22': 'olive',
  '#7f7f7f': 'grey',
  '#d62728': 'red',
  '#ff7f0e': 'orange',
  '#2ca02c': 'green',
}

function chart ({ title, xLabel, yLabel, x, series }) {
  const colors = series.map((s, i) => s.color ?? PALETTE[i % PALETTE.length])
  const top = Math.max(1, ...series.flatMap((s) => s.values))
  const quote = (text) => `"${String(text).replace(/"/g, "'")}"`
  const init = { theme: 'base', themeVariables: { xyChart: { plotColorPalette: colors.join(', ') } } }
  return [
    '```mermaid',
    `%%{init: ${JSON.stringify(init)}}%%`,
    'xychart-beta',
    `  title ${quote(title)}`,
    `  x-axis ${quote(xLabel)} [${x.join(', ')}]`,
    `  y-axis ${quote(yLabel)} 0 --> ${Math.ceil(top * 1.05)}`,
    ...series.map((s) => `  line [${s.values.join(', ')}]`),
    '```',
    '',
    `Lines: ${series.map((s, i) => `${escape(s.name)} (${COLOR_NAMES[colors[i]] ?? colors[i]})`).join(', ')}.`,
    '',
  ]
}

function verdict (target) {
  return target.holds === true ? 'held' : 'missed'
}

function renderBench (result) {
  const lines = [`## ${result.bench}`, '']
  if (result.failed) {
    // A benchmark whose scenarios failed in part keeps the others' results.
    if ((result.scenarios ?? []).length === 0) {
      lines.push(`Did not finish (${escape(String(result.failed))}): no results from this run.`, '')
      return lines
    }
    lines.push(`Did not finish everything (${escape(String(result.failed))}): what did finish is below.`, '')
  }
  if (result.skipped) {
    lines.push(`Skipped on this machine: ${escape(String(result.skipped))}.`, '')
  }
  if (result.node && result.node !== result.runNode) lines.push(`Node ${result.node}.`, '')
  for (const scenario of result.scenarios ?? []) {
    lines.push(`### ${scenario.name}`, '')
    if (scenario.note) lines.push(escape(String(scenario.note)), '')
    if (scenario.failed) lines.push(`Did not finish (${escape(String(scenario.failed))}).`, '')
    if ((scenario.runs ?? []).length > 0) lines.push(...table(scenario.runs), '')
  }
  for (const c of result.charts ?? []) lines.push(...chart(c))
  const targets = result.targets ?? []
  if (targets.length > 0) {
    lines.push('**Targets**', '', '| target | measured | result |', '|---|---|---|')
    for (const target of targets) lines.push(`| ${cell(target.name)} | ${cell(target.measured)} | ${verdict(target)} |`)
    lines.push('')
  } else if (!result.skipped) {
    lines.push('This benchmark declares no pass/fail targets: read its labels against each other.', '')
  }
  for (const note of result.notes ?? []) lines.push(`- ${escape(String(note))}`)
  if ((result.notes ?? []).length > 0) lines.push('')
  return lines
}

// The whole page. `results` are the benchmarks' --json objects, in run order.
function render (results, info = machine()) {
  const all = results.flatMap((r) => r.targets ?? [])
  const missed = all.filter((t) => t.holds !== true)
  const lines = [
    '# Benchmark results',
    '',
    '<!-- Written by `npm run bench -- --markdown docs/benchmarks/results.md`; do not edit by hand. -->',
    '',
    'How each benchmark is run, and how to read it: [README.md](README.md).',
    '',
    '| run | |',
    '|---|---|',
    `| Node | ${cell(info.node)} |`,
    `| CPU | ${cell(info.cpu)} |`,
    `| cores | ${cell(info.cores)} |`,
    `| platform | ${cell(info.platform)} |`,
    `| date | ${cell(info.date)} |`,
    `| targets | ${all.length - missed.length} of ${all.length} held |`,
    '',
  ]
  if (missed.length > 0) {
    lines.push('Missed in this run:', '')
    for (const t of missed) lines.push(`- ${cell(t.name)} (measured ${cell(t.measured)})`)
    lines.push('')
  }
  for (const result of results) lines.push(...renderBench({ ...result, runNode: info.node }))
  return lines.join('\n').replace(/\n+$/, '\n')
}

// node bench/markdown.js [RUN.jsonl ...] [--out FILE]: stdin when no file.
// Returns the page; writes it to FILE, or to stdout without --out.
function cli (args, stdin = () => fs.readFileSync(0, 'utf8'), stdout = (text) => process.stdout.write(text)) {
  const outAt = args.indexOf('--out')
  const out = outAt === -1 ? null : args[outAt + 1]
  const inputs = outAt === -1 ? args : args.filter((_, i) => i !== outAt && i !== outAt + 1)
  const text = inputs.length === 0 ? stdin() : inputs.map((f) => fs.readFileSync(f, 'utf8')).join('\n')
  const { results, info } = parseRun(text)
  const page = render(results, info ?? machine())
  if (out) fs.writeFileSync(out, page)
  else stdout(page)
  return page
}

module.exports = { render, parseRun, machine, cli }

/* c8 ignore next - the two lines a command runs; cli() itself is tested in-process */
if (require.main === module) cli(process.argv.slice(2))
