'use strict'

// `npm run bench`: every module's benchmark, one after another (they share two
// cores, so never at once), each starting and stopping its own local servers.
// Arguments that name benchmarks (`npm run bench -- kafka batch`) run those
// alone; the others (e.g. --json, --quick) pass through to each benchmark.
// With `--json` the first line is `{ machine }`, so that a saved run can be
// written as markdown later (bench/markdown.js). `--markdown FILE` runs each
// benchmark with --json, prints its tables as usual and writes FILE
// (docs/benchmarks/results.md). A benchmark that fails is reported as failed
// (a `{ bench, failed }` line with --json), the others still run, and the
// exit code is 1 at the end.
//
// `--against <git-ref> [--rounds N] [--noise F]`: the regression gate
// (bench/gate.js). The chosen benchmarks run for the working tree and for the
// ref, alternated, in N rounds (3); the ref is checked out in a temporary
// worktree under the system's temp folder, with its own `npm ci`, and removed
// afterwards. Prints per target the ratio new/old and its spread over the
// rounds (one JSON object with --json); exit 1 on a regression, 2 when
// a benchmark failed so that not everything was compared.
const { spawn, execFileSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { report } = require('./common')
const { render, machine, parseRun } = require('./markdown')
const { parseArgs, compare, table, exitCode } = require('./gate')

const ROOT = path.resolve(__dirname, '..')

// The child running now: what a signal to the gate stops before it cleans
// up; once stopping, no other starts.
let current = null
let stopping = false

// Runs `command` with stdout kept (or sent where `stdout` says), as a child
// the gate can stop; resolves with its exit and output.
function run (command, args, { cwd, stdout = 'pipe' }) {
  if (stopping) return new Promise(() => {})
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', stdout, 'inherit'] })
    current = child
    const chunks = []
    child.stdout?.on('data', (chunk) => chunks.push(chunk))
    let error = null
    child.once('error', (e) => { error = e })
    child.once('close', (status, signal) => {
      current = null
      resolve({ status, signal, error, text: Buffer.concat(chunks).toString() })
    })
  })
}

// One benchmark of the checkout at `dir`, its output kept (each prints its
// tables or JSON at its end; progress goes to stderr as it runs). Returns
// what it printed, and its result: with --json the object it printed, or
// `{ bench, failed }` when it printed none; a result whose process failed
// keeps what it reported, with `failed` set.
async function runBench (dir, bench, args) {
  const file = path.join(dir, 'bench', `${bench}.js`)
  if (!fs.existsSync(file)) return { text: '', printed: false, result: { bench, failed: 'not in this checkout' } }
  const { status, signal, error, text } = await run(process.execPath, [file, ...args], { cwd: dir })
  const failed = status === 0 ? null : `exit ${status ?? signal ?? error?.code}`
  const json = args.includes('--json')
  const parsed = json ? parseRun(text).results.find((r) => r.bench === bench) : undefined
  if (parsed === undefined) return { text, printed: false, result: { bench, failed: failed ?? (json ? 'no result printed' : null) } }
  if (failed !== null && !parsed.failed) parsed.failed = failed
  return { text, printed: true, result: parsed }
}

async function all (opts) {
  const info = machine()
  const json = opts.json || opts.markdown !== null
  const args = json ? [...opts.args, '--json'] : opts.args
  if (opts.markdown === null && opts.json) process.stdout.write(JSON.stringify({ machine: info }) + '\n')
  const results = []
  const failed = []
  for (const bench of opts.benches) {
    const { text, printed, result } = await runBench(ROOT, bench, args)
    if (result.failed) {
      failed.push(`${bench} (${result.failed})`)
      process.stderr.write(`bench/${bench}.js failed (${result.failed})\n`)
    }
    if (opts.markdown === null) {
      process.stdout.write(text)
      // A failure said in the run's own format, unless the benchmark said it.
      if (result.failed && opts.json && !printed) process.stdout.write(JSON.stringify({ bench, failed: result.failed }) + '\n')
      if (result.failed && !opts.json) process.stdout.write(`FAILED: bench/${bench}.js (${result.failed})\n\n`)
      continue
    }
    report(result.scenarios ? result : { ...result, scenarios: [] }, [])
    results.push(result)
  }
  if (opts.markdown !== null) {
    fs.mkdirSync(path.dirname(path.resolve(opts.markdown)), { recursive: true })
    fs.writeFileSync(opts.markdown, render(results, info))
    process.stdout.write(`wrote ${opts.markdown}\n`)
  }
  if (failed.length > 0) process.stderr.write(`failed: ${failed.join(', ')}\n`)
  process.exitCode = failed.length === 0 ? 0 : 1
}

function git (args, cwd = ROOT) {
  return execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim()
}

// The ref in a worktree of its own under the temp folder, installed as a
// fresh clone would be; returns its folder and the undo, which also runs on
// exit and on SIGINT or SIGTERM (after stopping the child running then).
async function checkout (ref) {
  const commit = git(['rev-parse', '--verify', `${ref}^{commit}`])
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-gate-'))
  const dir = path.join(tmp, 'ref')
  let removed = false
  const remove = () => {
    if (removed) return
    removed = true
    try {
      git(['worktree', 'remove', '--force', dir])
    } catch {}
    fs.rmSync(tmp, { recursive: true, force: true })
    try {
      git(['worktree', 'prune'])
    } catch {}
  }
  process.on('exit', remove)
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, async () => {
      stopping = true
      // A benchmark stops its own servers and brokers on SIGTERM: given
      // the time to, then the worktree goes.
      const child = current
      if (child !== null) {
        const closed = new Promise((resolve) => child.once('close', resolve))
        child.kill('SIGTERM')
        await Promise.race([closed, sleep(20_000)])
      }
      remove()
      process.stderr.write(`gate: ${signal}: stopped, the ref's worktree removed\n`)
      process.exit(130)
    })
  }
  process.stderr.write(`gate: ${ref} (${commit.slice(0, 12)}) into ${dir}\n`)
  git(['worktree', 'add', '--detach', dir, commit])
  // The downloads (Kafka's jars, Node lines) are the same for both sides.
  if (fs.existsSync(path.join(ROOT, '.cache'))) fs.symlinkSync(path.join(ROOT, '.cache'), path.join(dir, '.cache'))
  const command = fs.existsSync(path.join(dir, 'package-lock.json')) ? 'ci' : 'install'
  process.stderr.write(`gate: npm ${command} in the ref's worktree...\n`)
  const npm = await run('npm', [command, '--no-audit', '--no-fund', '--prefer-offline'], { cwd: dir, stdout: 2 })
  if (npm.status !== 0) {
    remove()
    throw new Error(`npm ${command} in ${ref}'s worktree failed (exit ${npm.status ?? npm.signal ?? npm.error?.code})`)
  }
  return { dir, commit, remove }
}

async function gate (opts) {
  const ref = await checkout(opts.against)
  const args = [...opts.args, '--json']
  const rounds = []
  try {
    for (let r = 0; r < opts.rounds; r++) {
      const round = { tree: {}, ref: {} }
      for (const bench of opts.benches) {
        // The first to run alternates, so neither side always gets the
        // machine as the other one left it.
        const sides = r % 2 === 0 ? ['tree', 'ref'] : ['ref', 'tree']
        for (const side of sides) {
          process.stderr.write(`gate: round ${r + 1}/${opts.rounds}, ${bench} on the ${side === 'tree' ? 'working tree' : opts.against}...\n`)
          round[side][bench] = (await runBench(side === 'tree' ? ROOT : ref.dir, bench, args)).result
          if (round[side][bench].failed) process.stderr.write(`gate: ${bench} failed on the ${side === 'tree' ? 'working tree' : opts.against} (${round[side][bench].failed})\n`)
        }
      }
      rounds.push(round)
    }
  } finally {
    ref.remove()
  }
  const verdict = compare(rounds, { noise: opts.noise })
  if (opts.json) {
    const gate = { against: opts.against, commit: ref.commit, rounds: opts.rounds, noise: opts.noise, benches: opts.benches, args: opts.args, machine: machine() }
    const { targets, failures, regression } = verdict
    process.stdout.write(JSON.stringify({ gate, targets, failures, regression }) + '\n')
  } else {
    process.stdout.write(table(verdict, { ref: opts.against, rounds: opts.rounds }))
  }
  process.exitCode = exitCode(verdict)
}

let opts
try {
  opts = parseArgs(process.argv.slice(2))
} catch (error) {
  // A mistyped command line: said in one line, before anything runs.
  process.stderr.write(`npm run bench: ${error.message}\n`)
  process.exit(2)
}
;(opts.against === null ? all(opts) : gate(opts)).catch((error) => {
  process.stderr.write(`${error.stack}\n`)
  process.exitCode = 2
})
