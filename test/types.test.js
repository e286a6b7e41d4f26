'use strict'

// The types must work in a project that has neither optional peer: a strict
// tsc, no skipLibCheck, io-hygiene's index.d.ts installed in a folder where
// hot-shots and kafkajs cannot be found (TS2307 otherwise).
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile } = require('node:child_process')

const root = path.join(__dirname, '..')
// tsd bundles a TypeScript compiler; it is a dev dependency, so it is there.
const tsc = path.join(path.dirname(require.resolve('@tsd/typescript/package.json')), 'typescript', 'lib', 'tsc.js')

// tsc runs without the NODE_OPTIONS the test runner gives its children (it
// puts them back into any env a test passes, hence the shell): its hooks
// would measure the coverage of every function of tsc, which doubles the
// compiler's time and covers nothing of ours.
function compile (dir) {
  return new Promise((resolve) => {
    execFile('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, tsc, '-p', dir], { timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, output: stdout + stderr })
    })
  })
}

t.test('tsc --strict on a project with neither hot-shots nor kafkajs', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-types-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const pkg = path.join(dir, 'node_modules', 'io-hygiene')
  fs.mkdirSync(path.join(pkg, 'types'), { recursive: true })
  fs.copyFileSync(path.join(root, 'types', 'index.d.ts'), path.join(pkg, 'types', 'index.d.ts'))
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'io-hygiene', types: 'types/index.d.ts' }))
  // npm installs io-hygiene's own dependencies beside it (undici's types are
  // part of the http API); only the optional peers are missing.
  for (const dep of Object.keys(require('../package.json').dependencies)) {
    fs.symlinkSync(path.join(root, 'node_modules', dep), path.join(dir, 'node_modules', dep), 'dir')
  }
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      module: 'commonjs',
      moduleResolution: 'node10',
      target: 'es2022',
      types: ['node'],
      typeRoots: [path.join(root, 'node_modules', '@types')],
    },
    files: ['app.ts'],
  }))
  fs.writeFileSync(path.join(dir, 'app.ts'), `
import { install, createStatsd, wrapProducer, type KafkaProducerLike } from 'io-hygiene'
install({ dns: { maxTtlMs: 60_000 } })
const statsd = createStatsd({ host: 'statsd.internal', prefix: 'api.' })
statsd.increment('requests', { route: '/users' })
declare const producer: KafkaProducerLike
wrapProducer(producer).send({ topic: 'events', messages: [{ key: 'k', value: 'v' }] })
`)
  t.notOk(fs.existsSync(path.join(dir, 'node_modules', 'hot-shots')), 'no hot-shots')
  const { code, output } = await compile(dir)
  t.equal(code, 0, output)
  t.notMatch(output, /TS2307/)
})

// Every ```js block of README.md and docs/ is what a TypeScript user checks
// (a .js file with checkJs, or pasted into a .ts file): io-hygiene's types must
// accept each as it stands, with strictNullChecks, under both module systems;
// an ```mjs block (an ES module) under nodenext, the one that has them.
function jsBlocks () {
  const files = ['README.md', ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]
  const out = []
  for (const file of files) {
    const text = fs.readFileSync(path.join(root, file), 'utf8')
    for (const m of text.matchAll(/^```(m?js)\n([\s\S]*?)^```$/gm)) {
      const line = text.slice(0, m.index).split('\n').length
      out.push({ at: `${file} line ${line}`, name: `${file.replace(/[/.]/g, '-')}-${line}.${m[1]}`, code: m[2] })
    }
  }
  return out
}

// Errors of Node's own typings, which a TypeScript reader answers with a
// cast, whatever io-hygiene's types say: server.address() may be a string or
// null, a diagnostics_channel message and a PerformanceEntry's detail are
// unknown, a 'warning' listener gets an Error without code.
function nodeTypings (code, line, error) {
  if (/\.address\(\)\.port/.test(line) && /^TS(2531|2339): (Object is possibly 'null'|Property 'port' does not exist on type 'string \| AddressInfo')/.test(error)) return true
  const messages = [...code.matchAll(/dc\.subscribe\('[^']+', \((\w+)\)/g)].map((m) => m[1])
  if (messages.some((name) => error.startsWith(`TS18046: '${name}' is of type 'unknown'`))) return true
  if (/^TS2339: Property 'detail' does not exist on type 'PerformanceEntry'/.test(error)) return true
  return /process\.on\('warning', \((\w+)\)/.test(code) && /^TS2339: Property 'code' does not exist on type 'Error'/.test(error) && /\bw\.code\b/.test(line)
}

for (const [module, moduleResolution] of [['nodenext', 'nodenext'], ['commonjs', 'node10']]) {
  t.test(`the docs' code blocks type-check against the types (module ${module})`, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-docs-types-'))
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
    fs.mkdirSync(path.join(dir, 'node_modules'))
    for (const name of fs.readdirSync(path.join(root, 'node_modules'))) {
      if (name.startsWith('.') || name === 'io-hygiene') continue
      fs.symlinkSync(path.join(root, 'node_modules', name), path.join(dir, 'node_modules', name), 'dir')
    }
    // What npm installs: the package's files, its types among them.
    const pkg = path.join(dir, 'node_modules', 'io-hygiene')
    fs.mkdirSync(path.join(pkg, 'types'), { recursive: true })
    fs.copyFileSync(path.join(root, 'types', 'index.d.ts'), path.join(pkg, 'types', 'index.d.ts'))
    fs.copyFileSync(path.join(root, 'package.json'), path.join(pkg, 'package.json'))
    fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'docs-reader', private: true, type: 'commonjs' }))
    const blocks = jsBlocks().filter((b) => module === 'nodenext' || b.name.endsWith('.js'))
    for (const block of blocks) fs.writeFileSync(path.join(dir, block.name), block.code)
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        allowJs: true,
        checkJs: true,
        noEmit: true,
        strictNullChecks: true,
        noImplicitAny: false,
        module,
        moduleResolution,
        moduleDetection: 'force',
        target: 'es2022',
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [path.join(root, 'node_modules', '@types')],
      },
      files: blocks.map((b) => b.name),
    }))
    const { output } = await compile(dir)
    const named = []
    for (const l of output.split('\n')) {
      const m = /([\w-]+\.m?js)\((\d+),\d+\): error (TS\d+: .*)$/.exec(l)
      if (m === null) continue
      const block = blocks.find((b) => b.name === m[1])
      if (nodeTypings(block.code, block.code.split('\n')[m[2] - 1], m[3])) continue
      named.push(`${block.at}, its line ${m[2]}: ${m[3]}`)
    }
    t.same(named, [], 'no type errors')
    t.notMatch(output, /error TS[56]\d{3}/, 'no configuration errors')
  })
}
