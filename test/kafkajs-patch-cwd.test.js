'use strict'

// The kafkajs corrected is the one the application loads, whatever directory
// the process starts from (a systemd unit, a container's WORKDIR, a monorepo
// root): child processes started from a directory without kafkajs and from
// one with another copy, through -r, --import and install().
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile } = require('node:child_process')
const { withWarnings } = require('./helpers/with-warnings')

const root = path.resolve(__dirname, '..')
const kafkajsDir = path.dirname(require.resolve('kafkajs/package.json'))

// A directory with its own copy of kafkajs in node_modules.
function withKafkajs (base, name) {
  const dir = path.join(base, name)
  fs.cpSync(kafkajsDir, path.join(dir, 'node_modules', 'kafkajs'), { recursive: true })
  return dir
}

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-cwd-'))
t.teardown(() => fs.rmSync(base, { recursive: true, force: true }))
const app = withKafkajs(base, 'app')
const other = withKafkajs(base, 'other')
const empty = path.join(base, 'empty')
fs.mkdirSync(empty)

// What the application sees: whether its kafkajs runs the corrected files,
// the status, the wrapped producer's stats, and the warnings.
const report = (how) => `
  const warnings = []
  process.on('warning', (w) => warnings.push([w.name, w.code]))
  ${how === 'install()' ? `require(${JSON.stringify(root)}).install({ dns: false, http: false })` : ''}
  const { Kafka, logLevel } = require('kafkajs')
  const patch = require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-patch.js'))})
  const { wrapProducer } = require(${JSON.stringify(root)})
  const producer = wrapProducer(new Kafka({ brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING }).producer(), { flushOnSignals: false })
  const corrected = require('kafkajs/src/producer/groupMessagesPerPartition') === require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-known.js'))}).groupMessagesPerPartition
  setImmediate(() => process.stdout.write(JSON.stringify({
    kafkajs: require.resolve('kafkajs'), corrected, status: patch.kafkajsPatchStatus(), stats: producer.stats().kafkajsPatch, warnings,
  })))
`

function run (cwd, how) {
  fs.writeFileSync(path.join(app, 'index.js'), report(how))
  const args = []
  if (how === '-r') args.push('-r', path.join(root, 'register.js'))
  if (how === '--import') args.push('--import', path.join(root, 'register.js'))
  args.push(path.join(app, 'index.js'))
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd, env: withWarnings({ ...process.env, IO_HYGIENE_DNS: '0', IO_HYGIENE_HTTP: '0' }) }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr })
    })
  })
}

for (const [where, cwd] of [['a directory without kafkajs', empty], ['a directory with another kafkajs', other]]) {
  for (const how of ['-r', '--import', 'install()']) {
    t.test(`started from ${where}, through ${how}: the application's kafkajs is the one corrected`, async (t) => {
      const { code, stdout, stderr } = await run(cwd, how)
      t.equal(code, 0, stderr)
      const out = JSON.parse(stdout)
      t.equal(out.kafkajs, path.join(app, 'node_modules', 'kafkajs', 'index.js'), 'the application loads its own copy')
      t.equal(out.corrected, true, 'its producer runs the corrected files')
      t.equal(out.status, 'patched')
      t.equal(out.stats, 'patched', 'stats() says so')
      t.same(out.warnings, [], 'no warning')
    })
  }
}

t.test('an ES module application, started elsewhere with --import: its kafkajs is corrected', async (t) => {
  const file = path.join(app, 'index.mjs')
  fs.writeFileSync(file, `
    import kafkajs from 'kafkajs'
    import { createRequire } from 'node:module'
    const require = createRequire(import.meta.url)
    const patch = require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-patch.js'))})
    new kafkajs.Kafka({ brokers: ['127.0.0.1:1'] }).producer()
    process.stdout.write(JSON.stringify({ corrected: require('kafkajs/src/producer/groupMessagesPerPartition') === require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-known.js'))}).groupMessagesPerPartition, status: patch.kafkajsPatchStatus() }))
  `)
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, ['--import', path.join(root, 'register.js'), file], { cwd: empty, env: { ...process.env, IO_HYGIENE_DNS: '0', IO_HYGIENE_HTTP: '0' } }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { corrected: true, status: 'patched' })
})

t.test('wrapProducer() says once, loudly, when its producer comes from a kafkajs not corrected', async (t) => {
  fs.writeFileSync(path.join(app, 'late.js'), `
    const warnings = []
    process.on('warning', (w) => warnings.push([w.name, w.code]))
    const { Kafka, logLevel } = require('kafkajs')
    const kafka = new Kafka({ brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING })
    const io = require(${JSON.stringify(root)})
    const a = io.wrapProducer(kafka.producer(), { flushOnSignals: false })
    const b = io.wrapProducer(kafka.producer(), { flushOnSignals: false })
    setImmediate(() => process.stdout.write(JSON.stringify({ warnings, stats: [a.stats().kafkajsPatch, b.stats().kafkajsPatch] })))
  `)
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, [path.join(app, 'late.js')], { cwd: empty, env: withWarnings(process.env) }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { warnings: [['IoHygieneWarning', 'IO_HYGIENE_KAFKAJS_NOT_PATCHED']], stats: ['loaded-too-early', 'loaded-too-early'] })
})

function runScript (script, dir = app) {
  const file = path.join(dir, 'script.js')
  fs.writeFileSync(file, `
    const warnings = []
    process.on('warning', (w) => warnings.push(w.code))
    const patch = require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-patch.js'))})
    const done = (extra) => setImmediate(() => process.stdout.write(JSON.stringify({ status: patch.kafkajsPatchStatus(), warnings, ...extra })))
    ${script}
  `)
  return new Promise((resolve) => {
    execFile(process.execPath, [file], { cwd: empty, env: withWarnings(process.env) }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
}

t.test('installed twice, one watch of the loader; undone, the loader is as it was', async (t) => {
  const { code, stdout, stderr } = await runScript(`
    const Module = require('node:module')
    const compile = Module._extensions['.js']
    const first = patch.installKafkajsPatch()
    const hooked = Module._extensions['.js']
    patch.installKafkajsPatch()
    const once = Module._extensions['.js'] === hooked && hooked !== compile
    first()
    const restored = Module._extensions['.js'] === compile
    const again = patch.installKafkajsPatch()
    require('kafkajs').Kafka
    const corrected = require('kafkajs/src/producer/groupMessagesPerPartition') === require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-known.js'))}).groupMessagesPerPartition
    // Someone wrapped the compile after us: undone, theirs (and ours under it) stays.
    const ours = Module._extensions['.js']
    const theirs = function (module, filename) { return ours.call(this, module, filename) }
    Module._extensions['.js'] = theirs
    again()
    done({ once, restored, corrected, kept: Module._extensions['.js'] === theirs })
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'not-installed', warnings: [], once: true, restored: true, corrected: true, kept: true })
})

t.test('a kafkajs whose sendMessages was required before its producer keeps its own, and says so', async (t) => {
  const { code, stdout, stderr } = await runScript(`
    // Found neither from the main module nor the working directory.
    const kafkajs = ${JSON.stringify(path.join(app, 'node_modules', 'kafkajs'))}
    patch.installKafkajsPatch()
    require(kafkajs + '/src/producer/sendMessages')
    require(kafkajs).Kafka
    done({ corrected: require(kafkajs + '/src/producer/groupMessagesPerPartition') === require(${JSON.stringify(path.join(root, 'lib/kafka/kafkajs-known.js'))}).groupMessagesPerPartition })
  `, empty)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'loaded-too-early', warnings: ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'], corrected: false })
})

t.test('a duck-typed producer (no kafkajs logger) is not taken for a corrected one; with the patch off, no warning', async (t) => {
  const duck = '{ sendBatch: async () => [], connect: async () => {}, disconnect: async () => {} }'
  const wrap = `require(${JSON.stringify(root)}).wrapProducer(${duck}, { flushOnSignals: false })`
  let out = await runScript(`patch.installKafkajsPatch(); ${wrap}; done()`)
  t.equal(out.code, 0, out.stderr)
  t.same(JSON.parse(out.stdout), { status: 'patched', warnings: ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'] })
  out = await runScript(`patch.turnOffKafkajsPatch(); ${wrap}; done()`)
  t.equal(out.code, 0, out.stderr)
  t.same(JSON.parse(out.stdout), { status: 'off', warnings: [] })
})
