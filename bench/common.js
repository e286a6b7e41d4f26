'use strict'

// Shared by the benchmarks: libuv active-request sampling, percentiles and
// the output (a readable table, or one JSON object with --json).

// What counts as an active request is the monitor's definition, so that the
// benchmarks' activeRequests* and the monitor's active_requests agree.
const { activeRequests } = require('../lib/monitor/resource-types')

// Samples active requests every `everyMs` on an unref'd timer; sample() may
// also be called by hand right after a synchronous burst, when the timer
// cannot run.
function requestSampler (everyMs = 2) {
  let peak = 0
  let sum = 0
  let count = 0
  const sample = () => {
    const n = activeRequests()
    if (n > peak) peak = n
    sum += n
    count++
  }
  const timer = setInterval(sample, everyMs)
  timer.unref()
  return {
    sample,
    stop () {
      clearInterval(timer)
      sample()
      return { activeRequestsPeak: peak, activeRequestsMean: round(sum / count, 2) }
    },
  }
}

function percentile (sorted, p) {
  if (sorted.length === 0) return 0
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

function round (n, digits = 1) {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

// Prints `result` ({ bench, scenarios: [{ name, runs: [{ label, ... }] }] })
// as JSON with --json, else as one table per scenario. A benchmark or a
// scenario that could not finish carries `failed` (why), and says so.
function report (result, argv = process.argv) {
  if (argv.includes('--json')) {
    process.stdout.write(JSON.stringify(result) + '\n')
    return
  }
  const lines = [`# ${result.bench}`]
  if (result.failed) lines.push('', `FAILED: ${result.failed}`)
  for (const scenario of result.scenarios ?? []) {
    lines.push('', `## ${scenario.name}${scenario.note ? ` (${scenario.note})` : ''}`)
    if (scenario.failed) lines.push('', `FAILED: ${scenario.failed}`)
    if ((scenario.runs ?? []).length === 0) continue
    const fields = [...new Set(scenario.runs.flatMap((run) => Object.keys(run)))]
    const rows = [fields, ...scenario.runs.map((run) => fields.map((f) => format(run[f])))]
    const widths = fields.map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)))
    rows.forEach((row, i) => {
      lines.push('| ' + row.map((cell, j) => String(cell).padEnd(widths[j])).join(' | ') + ' |')
      if (i === 0) lines.push('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|')
    })
  }
  for (const note of result.notes ?? []) lines.push('', note)
  process.stdout.write(lines.join('\n') + '\n\n')
}

function format (value) {
  if (value === undefined || value === null) return '-'
  if (Array.isArray(value)) return `[${value.length}]`
  if (typeof value === 'number') return Number.isInteger(value) ? value.toLocaleString('en-US') : value.toLocaleString('en-US', { maximumFractionDigits: 2 })
  return String(value)
}

// `--name N` from argv: a positive integer (or any positive number with
// integer: false), or `fallback` when absent.
function option (argv, name, fallback, { integer = true } = {}) {
  const i = argv.indexOf(name)
  if (i === -1) return fallback
  const value = Number(argv[i + 1])
  if (!(value > 0) || (integer && !Number.isInteger(value))) {
    throw new TypeError(`${name} must be a positive ${integer ? 'integer' : 'number'}, got ${argv[i + 1]}`)
  }
  return value
}

// Refuses an argument the script does not take (a typo, or --help), with its
// usage, before anything starts: a mistyped flag must not start a run of
// many minutes. `flags` take no value, `options` take one.
function checkArgs (argv, { flags = [], options = [] }, usage) {
  for (let i = 0; i < argv.length; i++) {
    if (options.includes(argv[i])) i++
    else if (!flags.includes(argv[i])) {
      process.stderr.write(`${argv[i] === '--help' || argv[i] === '-h' ? '' : `unknown argument ${JSON.stringify(argv[i])}\n`}usage: ${usage}\n`)
      process.exit(argv[i] === '--help' || argv[i] === '-h' ? 0 : 2)
    }
  }
}

// The first IPC message from `child` that `predicate` accepts; rejects when
// the child exits first or `timeoutMs` passes, with `tail()` (its last
// output) in the error.
function childMessage (child, predicate, what, timeoutMs, tail = () => '') {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup()
      reject(new Error(`child: no ${what} within ${timeoutMs} ms: ${tail()}`))
    }, timeoutMs)
    const onMessage = (msg) => {
      if (!predicate(msg)) return
      cleanup()
      resolve(msg)
    }
    const onExit = (code, signal) => {
      cleanup()
      reject(new Error(`child exited (${code ?? signal}) before ${what}: ${tail()}`))
    }
    const cleanup = () => {
      clearTimeout(timer)
      child.off('message', onMessage)
      child.off('exit', onExit)
    }
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
}

module.exports = { requestSampler, percentile, round, report, option, checkArgs, childMessage }
