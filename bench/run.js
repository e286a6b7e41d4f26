'use strict'

// `npm run bench`: every module's benchmark, one after another (they share two
// cores, so never at once), each starting and stopping its own local servers.
// Arguments (e.g. --json) pass through to each benchmark. With `--json` the
// first line is `{ machine }`, so that a saved run can be written as markdown
// later (bench/markdown.js). `--markdown FILE` runs each benchmark with --json,
// prints its tables as usual and writes FILE (docs/benchmarks/results.md).
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { report } = require('./common')
const { render, machine, parseRun } = require('./markdown')

// incident.js first: the headline, at its default of 60 s per label (about
// six minutes in all); `node bench/incident.js --duration 600` for the long run.
const benches = ['incident.js', 'dns.js', 'statsd.js', 'batch.js', 'kafka.js', 'http.js', 'monitor.js', 'overhead.js', 'shutdown.js']

let args = process.argv.slice(2)
const at = args.indexOf('--markdown')
let markdown = null
if (at !== -1) {
  markdown = args[at + 1]
  if (!markdown || markdown.startsWith('--')) throw new TypeError('--markdown needs a file name, e.g. --markdown docs/benchmarks/results.md')
  args = [...args.slice(0, at), ...args.slice(at + 2).filter((a) => a !== '--json'), '--json']
}
const info = machine()
if (markdown === null && args.includes('--json')) process.stdout.write(JSON.stringify({ machine: info }) + '\n')

const results = []
let failed = 0
for (const file of benches) {
  const result = spawnSync(process.execPath, [path.join(__dirname, file), ...args], {
    stdio: ['ignore', markdown === null ? 'inherit' : 'pipe', 'inherit'],
    maxBuffer: 64 * 1024 * 1024,
  })
  const exit = result.status ?? result.signal
  if (result.status !== 0) {
    failed++
    process.stderr.write(`bench/${file} failed (exit ${exit})\n`)
  }
  if (markdown === null) continue
  const parsed = parseRun(String(result.stdout)).results
  if (parsed.length === 0) results.push({ bench: path.basename(file, '.js'), failed: `exit ${exit}` })
  for (const one of parsed) {
    report(one, [])
    results.push(one)
  }
}
if (markdown !== null) {
  fs.mkdirSync(path.dirname(path.resolve(markdown)), { recursive: true })
  fs.writeFileSync(markdown, render(results, info))
  process.stdout.write(`wrote ${markdown}\n`)
}
process.exitCode = failed === 0 ? 0 : 1
